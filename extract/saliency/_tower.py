"""The vision-tower interface every map method works on, and the tensor helpers methods share.

A :class:`VisionTower` is a thin view of a ViT image encoder; adapters (open_clip, timm,
transformers, and any new dual encoder) implement it. The base part (split at the last block)
serves ``similarity``, ``maskclip`` and ``gradcam``; ``embed`` + ``blocks`` (one
:class:`AttentionBlock` view per block) serve the attention-based methods. A tower says what it
provides in ``capabilities`` (names from :data:`xbench.extract.saliency.NEEDS`); a tower without
that attribute is taken to provide the base part only.
"""
from __future__ import annotations

from typing import Protocol, Sequence

import torch
import torch.nn.functional as F

BASE_CAPABILITIES = frozenset({"gradients", "value_path", "class_token"})


class AttentionBlock(Protocol):
    """One pre-norm transformer block seen as its pieces. Token tensors (B, L, D); head tensors
    (B, H, L, d). The block is ``h = norm1(x); x = x + attn_out(softmax(q k^T * scale) v, h);
    x = x + mlp_out(x)`` with ``q, k, v = qkv(h)``."""

    heads: int
    scale: float

    def norm1(self, x: torch.Tensor) -> torch.Tensor: ...

    def qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    def attn_out(self, o: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """(B, H, L, d) attended values -> (B, L, D) residual branch (output projection, layer scale)."""

    def mlp_out(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) -> (B, L, D) MLP residual branch (norm2, MLP, layer scale)."""


class VisionTower(Protocol):
    """A ViT image tower. Token tensors are (B, L, D) with the ``n_prefix`` prefix tokens
    (class/register tokens) first, then h*w patch tokens row-major."""

    grid: tuple[int, int]
    n_prefix: int
    capabilities: frozenset  # optional; default BASE_CAPABILITIES

    def tokens_before_last(self, pixels: torch.Tensor) -> torch.Tensor: ...

    def last_block(self, x: torch.Tensor) -> torch.Tensor: ...

    def last_block_value(self, x: torch.Tensor) -> torch.Tensor: ...

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) output of the last block -> (B, E) image embedding (not normalised)."""

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) output of a last block -> (B, h*w, E) projected patch tokens."""

    # with capability "blocks":
    def embed(self, pixels: torch.Tensor) -> torch.Tensor:
        """Tokens entering the first block (B, L, D)."""

    blocks: Sequence[AttentionBlock]


def capabilities(tower) -> frozenset:
    return frozenset(getattr(tower, "capabilities", BASE_CAPABILITIES))


# -- helpers shared by the methods -----------------------------------------------------------
def to_grid(sim: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(B, N, C) -> (B, C, h, w)."""
    B, N, C = sim.shape
    h, w = grid
    if N != h * w:
        raise ValueError(f"tower gave {N} patch tokens, expected {h}x{w}={h * w}")
    return sim.transpose(1, 2).reshape(B, C, h, w)


def patch_text_similarity(patches: torch.Tensor, text: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """cos(patch, text): patches (B, N, E), text (C, E) already L2-normalised -> (B, C, h, w) float32."""
    p = F.normalize(patches.float(), dim=-1)
    return to_grid(p @ text.float().T, grid)


def split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, L, H*d) -> (B, H, L, d)."""
    B, L, D = t.shape
    return t.reshape(B, L, heads, D // heads).transpose(1, 2)


def merge_heads(o: torch.Tensor) -> torch.Tensor:
    """(B, H, L, d) -> (B, L, H*d)."""
    B, H, L, d = o.shape
    return o.transpose(1, 2).reshape(B, L, H * d)


def block_forward(blk: AttentionBlock, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One block through its view; returns (output tokens, attention probabilities (B, H, L, L))."""
    h = blk.norm1(x)
    q, k, v = blk.qkv(h)
    a = ((q @ k.transpose(-2, -1)) * blk.scale).softmax(dim=-1)
    x = x + blk.attn_out(a @ v, h)
    return x + blk.mlp_out(x), a


def run_blocks(tower, pixels: torch.Tensor, x: torch.Tensor | None = None):
    """Every block through the views: (final tokens, [attention probabilities per block])."""
    x = tower.embed(pixels) if x is None else x
    probs = []
    for blk in tower.blocks:
        x, a = block_forward(blk, x)
        probs.append(a)
    return x, probs


def parallel_path(tower, pixels: torch.Tensor, attend, depth: int):
    """The dual path of CLIP Surgery and GEM: the original forward runs unchanged; from the
    ``depth``-th last block on, a second path starts at that block's input and adds, per block,
    ``attn_out(attend(h, q, k, v, scale), h)`` computed from the *original* path's normed tokens
    ``h``, and skips the MLP. Returns (original final tokens, path final tokens)."""
    blocks = list(tower.blocks)
    start = max(0, len(blocks) - depth)
    x = tower.embed(pixels)
    for blk in blocks[:start]:
        x, _ = block_forward(blk, x)
    path = x
    for blk in blocks[start:]:
        h = blk.norm1(x)
        q, k, v = blk.qkv(h)
        path = path + blk.attn_out(attend(h, q, k, v, blk.scale), h)
        a = ((q @ k.transpose(-2, -1)) * blk.scale).softmax(dim=-1)
        x = x + blk.attn_out(a @ v, h)
        x = x + blk.mlp_out(x)
    return x, path


def image_text_cos(image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
    """cos(image embedding, text): (B, E), (C, E) normalised -> (B, C) float32."""
    return F.normalize(image.float(), dim=-1) @ text.float().T
