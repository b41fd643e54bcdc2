"""``maskclip`` (Zhou et al., ECCV'22): patch tokens from the last block with its attention replaced
by the value path (``x + out_proj(v(ln_1(x)))`` then the MLP), which keeps each token local; the
image embedding (scores) comes from the unmodified forward pass."""
from __future__ import annotations

from xbench.extract.saliency import MapMethod  # torch is imported where it is used: listing the methods stays instant


def run(tower, pixels, text):
    from xbench.extract.saliency._tower import patch_text_similarity

    x = tower.tokens_before_last(pixels)
    image = tower.pool(tower.last_block(x))
    return image, patch_text_similarity(tower.patches(tower.last_block_value(x)), text, tower.grid)


METHOD = MapMethod(
    name="maskclip", run=run,
    description="last block value path (attention replaced), final norm + projection",
    reference="Zhou, Loy & Dai, Extract Free Dense Labels from CLIP, ECCV 2022",
    needs=frozenset({"value_path"}))
