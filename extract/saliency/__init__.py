"""Saliency for dual encoders (CLIP family): patch-text similarity, MaskCLIP and Grad-CAM.

All three work on a :class:`VisionTower`, a thin view of a ViT image encoder split at its last
block, so one implementation serves open_clip, timm (BiomedCLIP) and transformers towers:

* ``similarity``: the raw patch-text similarity. Patch tokens after the last block, final norm and
  projection, L2-normalised, dotted with the normalised text embedding: cos(patch, text) in
  [-1, 1] on the patch grid.
* ``maskclip`` (Zhou et al., ECCV'22): the same, but the patch tokens come from the last block
  with its attention replaced by the value path (``x + out_proj(v(ln_1(x)))`` then the MLP), which
  keeps each token local; scores still come from the unmodified forward pass.
* ``gradcam``: Grad-CAM with target cos(image embedding, text embedding) and the tokens entering
  the last block as activations: weights = mean gradient over patch tokens, map = ReLU of the
  weighted sum. One backward pass per class.

Every method returns ``(image_embedding (B, E), maps (B, C, h, w))``; maps are raw (not
normalised) and on the model frame's patch grid; undoing crop/padding is the adapter's job.
"""
from __future__ import annotations

from typing import Callable, Protocol

import torch
import torch.nn.functional as F

from ..registry import Registry


class VisionTower(Protocol):
    """A ViT image tower split at its last block. Token tensors are (B, L, D) with the
    ``n_prefix`` prefix tokens (class/register tokens) first, then h*w patch tokens row-major."""

    grid: tuple[int, int]
    n_prefix: int

    def tokens_before_last(self, pixels: torch.Tensor) -> torch.Tensor: ...

    def last_block(self, x: torch.Tensor) -> torch.Tensor: ...

    def last_block_value(self, x: torch.Tensor) -> torch.Tensor: ...

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) output of the last block -> (B, E) image embedding (not normalised)."""

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) output of a last block -> (B, h*w, E) projected patch tokens."""


SaliencyFn = Callable[[VisionTower, torch.Tensor, torch.Tensor], "tuple[torch.Tensor, torch.Tensor]"]
METHODS: Registry[SaliencyFn] = Registry("saliency method")


def _to_grid(sim: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(B, N, C) -> (B, C, h, w)."""
    B, N, C = sim.shape
    h, w = grid
    if N != h * w:
        raise ValueError(f"tower gave {N} patch tokens, expected {h}x{w}={h * w}")
    return sim.transpose(1, 2).reshape(B, C, h, w)


def patch_text_similarity(patches: torch.Tensor, text: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """cos(patch, text): patches (B, N, E), text (C, E) already L2-normalised -> (B, C, h, w) float32."""
    p = F.normalize(patches.float(), dim=-1)
    return _to_grid(p @ text.float().T, grid)


@METHODS.decorator("similarity")
def similarity(tower: VisionTower, pixels: torch.Tensor, text: torch.Tensor):
    """Raw patch-text similarity of the last layer. text: (C, E) normalised."""
    y = tower.last_block(tower.tokens_before_last(pixels))
    return tower.pool(y), patch_text_similarity(tower.patches(y), text, tower.grid)


@METHODS.decorator("maskclip")
def maskclip(tower: VisionTower, pixels: torch.Tensor, text: torch.Tensor):
    """MaskCLIP value-path patch tokens; the image embedding is from the normal last block."""
    x = tower.tokens_before_last(pixels)
    image = tower.pool(tower.last_block(x))
    return image, patch_text_similarity(tower.patches(tower.last_block_value(x)), text, tower.grid)


@METHODS.decorator("gradcam")
def gradcam(tower: VisionTower, pixels: torch.Tensor, text: torch.Tensor):
    """Grad-CAM on cos(image, text) w.r.t. the tokens entering the last block (B, C, h, w) >= 0."""
    with torch.enable_grad():
        x = tower.tokens_before_last(pixels).detach().requires_grad_(True)
        image = tower.pool(tower.last_block(x))
        cos = F.normalize(image.float(), dim=-1) @ text.float().T  # (B, C)
        acts = x[:, tower.n_prefix:].detach().float()  # (B, N, D)
        cams = []
        for c in range(cos.shape[1]):
            # cases are independent, so the gradient of the batch sum is each case's own gradient
            (g,) = torch.autograd.grad(cos[:, c].sum(), x, retain_graph=c + 1 < cos.shape[1])
            weights = g[:, tower.n_prefix:].float().mean(dim=1, keepdim=True)  # (B, 1, D)
            cams.append(F.relu((acts * weights).sum(-1)))  # (B, N)
    maps = _to_grid(torch.stack(cams, dim=-1), tower.grid)
    return image.detach(), maps


__all__ = ["METHODS", "VisionTower", "gradcam", "maskclip", "patch_text_similarity", "similarity"]
