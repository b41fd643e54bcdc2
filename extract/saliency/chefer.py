"""``chefer``: gradient-weighted attention relevance (Chefer, Gur & Wolf, "Generic
Attention-model Explainability for Interpreting Bi-Modal and Encoder-Decoder Transformers",
ICCV 2021). Target: cos(image, text) of each class. Starting from R = I, every block (first to
last) updates R <- R + mean_h((dT/dA) * A)^+ R; the map is the class token's row of R over the
patches. Every block takes part, as in the paper's rule (the authors' CLIP notebook defaults to
the last block only)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from xbench.extract.saliency import MapMethod  # torch is imported where it is used: listing the methods stays instant

if TYPE_CHECKING:  # annotations only
    import torch


def relevance(probs: list[torch.Tensor], grads: list[torch.Tensor]) -> torch.Tensor:
    """(B, L, L) relevance from per-block attention probabilities and their gradients (B, H, L, L)."""
    import torch

    L = probs[0].shape[-1]
    r = torch.eye(L, device=probs[0].device, dtype=torch.float32).expand(probs[0].shape[0], -1, -1)
    for a, g in zip(probs, grads):
        cam = (g.float() * a.float()).clamp(min=0).mean(dim=1)
        r = r + cam @ r
    return r


def run(tower, pixels, text):
    import torch

    from xbench.extract.saliency._tower import image_text_cos, run_blocks, to_grid

    with torch.enable_grad():
        x0 = tower.embed(pixels).detach().requires_grad_(True)  # a leaf that builds the graph
        x, probs = run_blocks(tower, pixels, x0)
        image = tower.pool(x)
        cos = image_text_cos(image, text)
        rows = []
        for c in range(cos.shape[1]):
            # cases are independent, so the batch sum's gradient is each case's own
            grads = torch.autograd.grad(cos[:, c].sum(), probs, retain_graph=c + 1 < cos.shape[1],
                                        allow_unused=True)
            grads = [torch.zeros_like(a) if g is None else g for a, g in zip(probs, grads)]
            rows.append(relevance([a.detach() for a in probs], grads)[:, 0, tower.n_prefix:])
    return image.detach(), to_grid(torch.stack(rows, dim=-1), tower.grid)


METHOD = MapMethod(
    name="chefer", run=run,
    description="gradient-weighted attention relevance over every block, target cos(image, text); class-token row",
    reference="Chefer, Gur & Wolf, Generic Attention-model Explainability for Interpreting Bi-Modal and "
              "Encoder-Decoder Transformers, ICCV 2021",
    needs=frozenset({"blocks", "class_token", "gradients"}))
