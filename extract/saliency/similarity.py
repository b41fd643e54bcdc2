"""``similarity``: the raw patch-text similarity of the last layer."""
from __future__ import annotations

from xbench.extract.saliency import MapMethod  # torch is imported where it is used: listing the methods stays instant


def run(tower, pixels, text):
    """Patch tokens after the last block, final norm and projection, cosine with the text."""
    from xbench.extract.saliency._tower import patch_text_similarity

    y = tower.last_block(tower.tokens_before_last(pixels))
    return tower.pool(y), patch_text_similarity(tower.patches(y), text, tower.grid)


METHOD = MapMethod(
    name="similarity", run=run,
    description="last block, final norm + projection",
    reference="Radford et al. 2021 (CLIP); dense patch-text cosine as in Zhou et al. ECCV 2022",
    needs=frozenset())
