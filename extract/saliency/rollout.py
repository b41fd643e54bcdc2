"""``rollout``: attention rollout (Abnar & Zuidema, "Quantifying Attention Flow in Transformers",
ACL 2020). Per block the head-averaged attention A is mixed with the residual, A' = 0.5 A + 0.5 I,
rows renormalised; the rollout is the product A'_L ... A'_1 and the map is the class token's row
over the patch tokens. It does not depend on the text: every class gets the same map."""
from __future__ import annotations

from typing import TYPE_CHECKING

from xbench.extract.saliency import MapMethod  # torch is imported where it is used: listing the methods stays instant

if TYPE_CHECKING:  # annotations only
    import torch


def rollout_matrix(probs: list[torch.Tensor]) -> torch.Tensor:
    """[(B, H, L, L) per block, first block first] -> (B, L, L) rollout, in float32."""
    import torch

    a0 = probs[0]
    eye = torch.eye(a0.shape[-1], device=a0.device, dtype=torch.float32)
    r = eye.expand(a0.shape[0], -1, -1)
    for a in probs:
        mixed = 0.5 * a.float().mean(dim=1) + 0.5 * eye
        r = (mixed / mixed.sum(dim=-1, keepdim=True)) @ r
    return r


def run(tower, pixels, text):
    from xbench.extract.saliency._tower import run_blocks, to_grid

    x, probs = run_blocks(tower, pixels)
    row = rollout_matrix(probs)[:, 0, tower.n_prefix:]  # (B, N)
    maps = to_grid(row.unsqueeze(-1).expand(-1, -1, text.shape[0]), tower.grid)
    return tower.pool(x), maps.contiguous()


METHOD = MapMethod(
    name="rollout", run=run,
    description="attention rollout over every block (0.5 A + 0.5 I, heads averaged), class-token row; text-independent",
    reference="Abnar & Zuidema, Quantifying Attention Flow in Transformers, ACL 2020",
    needs=frozenset({"blocks", "class_token"}), class_agnostic=True)
