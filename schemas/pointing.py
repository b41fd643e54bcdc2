"""Where a map points: the pointing game's peak cell, one definition for both sides (docs/contract.md, "Pointing
game").

Let A be the set of cells holding the map's maximum. The peak is the centroid of A rounded to the nearest cell
(halves up) when that cell is in A, else the cell of A nearest the exact centroid (the first in row-major order
among equally near ones); a constant map (A the whole grid) has no peak. A unique maximum is its own peak.

Why here: the scorer's kernels (``score/kernels/maps.py``, whose Numba loops compile the two integer formulas
below, so the arithmetic is written once), the human ceiling's readers who draw shapes only (``extract/human.py``:
VinDr's boxes, REFLACX's ellipses), the report's overlays and ``xbench show`` must all point at the same cell, and
extract and score never import each other. A reader's map scored as a model then hits exactly where its reading
does.

Everything is in integers (the centroid's coordinates are rationals ``s / n``), so no rounding and no scan
order decides anything but an exact tie in distance.
"""
from __future__ import annotations

import numpy as np

__all__ = ["peak_cell", "rounded_centroid", "nearness"]


def rounded_centroid(n, s):
    """``floor(s / n + 1/2)``: a centroid coordinate ``s / n`` (``s`` the sum of ``n`` >= 1 cell indices) rounded
    to the nearest cell, halves up, in exact integers. Plain arithmetic, so the kernels compile this very function
    with Numba."""
    return (2 * s + n) // (2 * n)


def nearness(n, sr, sc, r, c):
    """A key that orders cells (r, c) by their distance to the centroid (sr / n, sc / n), nearest first:
    ``n * (r^2 + c^2) - 2 * (sr * r + sc * c)``, which is ``(n^2 d^2 - sr^2 - sc^2) / n`` (d the distance), an
    increasing function of d for a fixed centroid. Unlike ``n^2 d^2`` itself it stays below 2^53 on the
    largest grid a ground truth may have (4096 x 4096: at most about 2e15), so int64 holds it exactly. Plain
    arithmetic on scalars or int64 arrays (the kernels compile this very function with Numba)."""
    return n * (r * r + c * c) - 2 * (sr * r + sc * c)


def peak_cell(values, *, nan_lowest: bool = False) -> tuple[int, int] | None:
    """(row, col) the pointing game points at on an (H, W) map (the module's rule), or None for a constant map.

    ``values`` are compared as float64 (float16 and float32 convert exactly). Raises ValueError for a map that is
    not finite, not 2-D or empty; with ``nan_lowest`` (the report's drawings of unvalidated maps) a NaN cell is
    lower than every number instead, and infinities order as numbers (only order and equality decide the peak)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"the map must be a non-empty (H, W) array; got shape {arr.shape}.")
    if nan_lowest:  # the cells' ranks: the same order and ties, all finite
        arr = np.unique(np.where(np.isnan(arr), -np.inf, arr), return_inverse=True)[1].reshape(arr.shape)
    elif not np.isfinite(arr).all():
        raise ValueError(f"the map must be a finite, non-empty (H, W) array; got shape {arr.shape}.")
    top = arr.max()
    if arr.min() == top:
        return None
    rows, cols = np.nonzero(arr == top)  # row-major order
    rows, cols = rows.astype(np.int64), cols.astype(np.int64)
    n, sr, sc = int(rows.size), int(rows.sum()), int(cols.sum())
    r, c = rounded_centroid(n, sr), rounded_centroid(n, sc)
    if arr[r, c] == top:
        return r, c
    k = int(np.argmin(nearness(n, sr, sc, rows, cols)))  # argmin takes the first: row-major among equals
    return int(rows[k]), int(cols[k])
