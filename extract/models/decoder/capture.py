"""Only the attention a map needs, computed beside the decoder's own attention.

The decoder runs with ``attn_implementation = "xbench_capture"``: every attention call still computes its
output with PyTorch's scaled-dot-product attention (transformers' ``sdpa`` function, so the logits are the
model's), and when a :class:`Capture` is active and the module is one of the decoder layers it records

* ``rows``: the answer position's attention over the image tokens, heads averaged, per layer: the answer
  query against every key (q_pos · K^T, the layer's own mask row and scaling), softmax, image columns kept.
  Memory per layer is (sequences, image tokens): never the L x L matrix of every layer;
* ``rollout``: the running rollout matrix R <- (0.5 A + 0.5 I) R (rows renormalised, heads averaged), one
  (sequences, L, L) matrix updated layer by layer, A computed in query chunks;
* ``full``: the attention probabilities with their autograd graph (eager softmax), for Chefer relevance,
  which needs dA for every layer by definition; the caller runs one sequence at a time.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

NAME = "xbench_capture"
_ACTIVE: list["Capture"] = []  # the capture of the forward pass in progress (a stack: one at a time)


@dataclass
class Capture:
    """What to record in one forward pass. ``positions`` (S,) the answer position of each sequence;
    ``image`` (start, stop) the image tokens' columns; ``layers`` the module -> layer number map of the decoder."""

    mode: str
    positions: torch.Tensor
    image: tuple[int, int]
    layers: dict
    keep: frozenset = frozenset()  # layer numbers whose rows are kept (rows mode)
    rows: dict = field(default_factory=dict)      # layer -> (S, N) head-mean answer row over the image
    probs: list = field(default_factory=list)     # full mode: (S, H, L, L) per layer, first layer first
    rollout: torch.Tensor | None = None           # rollout mode: (S, L, L)
    chunk: int = 256


def register() -> None:
    """Make ``xbench_capture`` an attention implementation of transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


@contextlib.contextmanager
def capturing(cap: Capture):
    _ACTIVE.append(cap)
    try:
        yield cap
    finally:
        _ACTIVE.remove(cap)


def _repeat_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(S, Hkv, L, d) -> (S, heads, L, d): grouped-query keys shared by their query heads."""
    if x.shape[1] == heads:
        return x
    return x.repeat_interleave(heads // x.shape[1], dim=1)


def _mask_add(mask: torch.Tensor | None, rows: torch.Tensor, q_index: torch.Tensor, kv: int,
              dtype: torch.dtype) -> torch.Tensor:
    """Additive mask (S, 1, Q, L) for queries ``q_index`` (S, Q): the layer's own mask rows, or causal when
    transformers skipped the mask (a plain causal decoder)."""
    if mask is None:
        keys = torch.arange(kv, device=q_index.device)
        allowed = keys.view(1, 1, kv) <= q_index.unsqueeze(-1)
    else:
        m = mask[:, :1] if mask.shape[1] == 1 else mask.any(1, keepdim=True)
        m = m.expand(rows.shape[0], -1, -1, -1)[torch.arange(rows.shape[0]).unsqueeze(-1), 0, q_index]
        if m.dtype != torch.bool:
            return m.unsqueeze(1).to(dtype)
        allowed = m
    zero = torch.zeros((), dtype=dtype, device=q_index.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min).unsqueeze(1)


def _probs(query, key, mask, q_index, scaling, softcap):
    """Softmax attention (S, H, Q, L) in float32 of the queries at ``q_index`` (S, Q)."""
    s_idx = torch.arange(query.shape[0], device=query.device).unsqueeze(-1)
    q = query.transpose(1, 2)[s_idx, q_index].transpose(1, 2).float()  # (S, H, Q, d)
    k = _repeat_kv(key, query.shape[1]).float()
    scores = (q @ k.transpose(-1, -2)) * scaling
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores + _mask_add(mask, scores, q_index, key.shape[-2], scores.dtype)
    return scores.softmax(-1)


def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """The attention function transformers calls (query (S, H, L, d) after RoPE, key/value (S, Hkv, L, d))."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cap = _ACTIVE[-1] if _ACTIVE else None
    layer = cap.layers.get(module) if cap is not None else None
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    softcap = kwargs.get("softcap")
    if layer is not None and cap.mode == "full":
        q_index = torch.arange(query.shape[2], device=query.device).expand(query.shape[0], -1)
        probs = _probs(query, key, attention_mask, q_index, scaling, softcap)
        cap.probs.append(probs)
        out = probs.to(value.dtype) @ _repeat_kv(value, query.shape[1])
        return out.transpose(1, 2).contiguous(), None
    out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                    **kwargs)
    if layer is None:
        return out, None
    with torch.no_grad():
        if cap.mode == "rows" and layer in cap.keep:
            p = _probs(query.detach(), key.detach(), attention_mask, cap.positions.view(-1, 1), scaling, softcap)
            cap.rows[layer] = p[:, :, 0, cap.image[0]:cap.image[1]].mean(1)
        elif cap.mode == "rollout":
            _rollout_step(cap, query.detach(), key.detach(), attention_mask, scaling, softcap)
    return out, None


def _rollout_step(cap: Capture, query, key, mask, scaling, softcap) -> None:
    """R <- A' R with A' = rows-renormalised (0.5 mean_h A + 0.5 I), A in query chunks (bounded memory)."""
    S, _, L, _ = query.shape
    if cap.rollout is None:
        cap.rollout = torch.eye(L, device=query.device).expand(S, L, L).clone()
    mixed = torch.empty(S, L, L, device=query.device)
    for q0 in range(0, L, cap.chunk):
        idx = torch.arange(q0, min(L, q0 + cap.chunk), device=query.device).expand(S, -1)
        mixed[:, q0:q0 + idx.shape[1]] = 0.5 * _probs(query, key, mask, idx, scaling, softcap).mean(1)
    mixed = mixed + 0.5 * torch.eye(L, device=query.device)
    cap.rollout = (mixed / mixed.sum(-1, keepdim=True)) @ cap.rollout
