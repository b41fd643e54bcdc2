"""``gem``: Grounding Everything (Bousselham, Petersen, Ferrari & Kuehne, "Grounding Everything:
Emerging Localization Properties in Vision-Language Transformers", CVPR 2024). Over the last six
blocks a second path (as CLIP Surgery's, MLP skipped) adds self-self attention: for each of the
query, key and value projections t, ``ITERATIONS`` times t <- softmax(tau * t^ t^T) t on the
L2-normalised t^, then the attention softmax(tau * t^ t^T) is applied to the values; the three
results are averaged (ensemble). The inverse temperature tau is the mean token norm of the
block's normed input times the head scale (the authors' adaptive default). The map is
cos(path patch tokens, text)."""
from __future__ import annotations

from xbench.extract.saliency import MapMethod  # torch is imported where it is used: listing the methods stays instant

DEPTH = 6  # the authors' default depth=7 wraps the last six blocks
ITERATIONS = 1


def self_self_attention(h, q, k, v, scale, iterations: int = ITERATIONS, inv_temp=None):
    """Ensemble of q-q, k-k and v-v attention with L2-normalised projections, applied to v."""
    import torch.nn.functional as F

    if inv_temp is None:
        inv_temp = h.norm(dim=-1).mean(dim=-1).reshape(-1, 1, 1, 1) * scale  # per case
    outs = []
    for t in (q, k, v):
        for _ in range(iterations):
            t = F.normalize(t, dim=-1)
            t = ((t @ t.transpose(-2, -1)) * inv_temp).softmax(dim=-1) @ t
        t = F.normalize(t, dim=-1)
        outs.append(((t @ t.transpose(-2, -1)) * inv_temp).softmax(dim=-1) @ v)
    return sum(outs) / 3


def run(tower, pixels, text):
    from xbench.extract.saliency._tower import parallel_path, patch_text_similarity

    x, path = parallel_path(tower, pixels, self_self_attention, DEPTH)
    return tower.pool(x), patch_text_similarity(tower.patches(path), text, tower.grid)


METHOD = MapMethod(
    name="gem", run=run,
    description="self-self (q-q, k-k, v-v) attention path over the last 6 blocks (no MLP), cos(patch, text)",
    reference="Bousselham, Petersen, Ferrari & Kuehne, Grounding Everything: Emerging Localization "
              "Properties in Vision-Language Transformers, CVPR 2024",
    needs=frozenset({"blocks"}))
