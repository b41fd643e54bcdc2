"""The contrast-to-noise ratio of a map against a region: a per-pair statistic of the counting pass
(:mod:`xbench.score.kernels.pair_stats`), declared for phrase rows (metrics ``cnr``, ``cnr_signed``).

CNR (contract §Phrase grounding). On the raw map resized to the region grid (M, float64, the
contract's step 1), with R the phrase's region and O the other grid cells:

    CNR_signed = (mu_R - mu_O) / sqrt(var_R + var_O),   CNR = |CNR_signed|

means and variances over the cells of each set, population variances (divided by the cell count, ddof
= 0). CNR is unchanged by M -> a M + b with a > 0, so it is the same on the min-max normalised map
(up to rounding). A constant map (max M == min M) has CNR 0. It is undefined (NaN in the arrays, left
out of every mean, counted as ``n_cnr_undefined``) when R covers the whole grid (O is empty) or when
both variances are 0 while the means differ (an infinite ratio). A region never covers no cell (the
ground truth forbids empty regions).
"""
from __future__ import annotations

import numpy as np

from xbench.score.kernels.maps import _resize_into, numba, resize_plan

__all__ = ["cnr_of_pairs"]


@numba.njit(cache=True, nogil=True)
def _cnr_one(m, mask):
    """Signed CNR of one resized float64 map ``m`` (H, W) against ``mask`` (H, W) bool (see module doc)."""
    H, W = m.shape
    n_in = 0
    s_in = 0.0
    s_out = 0.0
    mn = m[0, 0]
    mx = m[0, 0]
    for i in range(H):
        for j in range(W):
            v = m[i, j]
            if v < mn:
                mn = v
            if v > mx:
                mx = v
            if mask[i, j]:
                n_in += 1
                s_in += v
            else:
                s_out += v
    n_out = H * W - n_in
    if n_in == 0 or n_out == 0:
        return np.nan
    if mx == mn:
        return 0.0
    mu_in = s_in / n_in
    mu_out = s_out / n_out
    q_in = 0.0
    q_out = 0.0
    for i in range(H):  # second pass: squared deviations from the means (no cancellation)
        for j in range(W):
            if mask[i, j]:
                d = m[i, j] - mu_in
                q_in += d * d
            else:
                d = m[i, j] - mu_out
                q_out += d * d
    den = np.sqrt(q_in / n_in + q_out / n_out)
    if den == 0.0:
        return np.nan
    return (mu_in - mu_out) / den


@numba.njit(cache=True, nogil=True)
def _cnr_chunk(maps, masks, local, area, row_idx, row_w, col_idx, col_w, out):
    """``out[p]`` = signed CNR of map ``maps[p]`` (float32, h x w) resized to the grid, against ``masks[local[p]]``."""
    H = masks.shape[1]
    W = masks.shape[2]
    buf = np.empty((H, W), dtype=np.float64)
    tmp = np.empty((maps.shape[1], W), dtype=np.float64)
    for p in range(maps.shape[0]):
        _resize_into(maps[p], area, row_idx, row_w, col_idx, col_w, tmp, buf)
        out[p] = _cnr_one(buf, masks[local[p]])


def cnr_of_pairs(maps, masks, local=None) -> np.ndarray:
    """Signed CNR of each (map, region) pair: ``maps`` (P, h, w) float16/32 raw maps, ``masks`` (n, H, W)
    bool regions on the grid, ``local`` (P,) the region row of each map (default ``arange(P)``).
    Returns (P,) float64; NaN where CNR is undefined (module doc). ``abs()`` gives CNR."""
    maps = np.ascontiguousarray(maps, dtype=np.float32)
    masks = np.ascontiguousarray(masks, dtype=bool)
    local = np.arange(maps.shape[0], dtype=np.int64) if local is None else np.ascontiguousarray(local, dtype=np.int64)
    if maps.ndim != 3 or masks.ndim != 3 or local.shape != (maps.shape[0],):
        raise ValueError(f"maps (P, h, w), masks (n, H, W) and local (P,) expected; got {maps.shape}, {masks.shape}, {local.shape}")
    if local.size and (local.min() < 0 or local.max() >= masks.shape[0]):
        raise ValueError("local points outside the masks")
    out = np.empty(maps.shape[0], dtype=np.float64)
    if maps.shape[0]:
        plan = resize_plan(maps.shape[1:], masks.shape[1:])
        _cnr_chunk(maps, masks, local, plan.area, plan.row_idx, plan.row_w, plan.col_idx, plan.col_w, out)
    return out
