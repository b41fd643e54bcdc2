"""Exact grid arithmetic: where a cell centre lies in native pixels, and which cell holds a native point.

The contract (docs/contract.md, "gt.zarr") puts cell k of an axis of N cells over n native pixels at the
centre (k + 1/2)·n/N = (2k+1)·n/(2N), and native pixel c covers [c, c+1): a centre exactly on an edge c
belongs to pixel c. Computed in floats as ``(k + 0.5) * (n / N)`` the product can fall just below an exact
edge (13.5 × (296/36) = 110.99999999999999, where the exact centre is 111), so the cell would sample the
pixel before the one the contract names; at the 224 grid this happens for real image heights (1088, 2176,
2624, 3648, 3904, 4352 among 1000-4399). Every index here is therefore decided exactly: in integers where
both sides are integers, and for a float coordinate x (a box edge, a fixation) by an exact product
x·m = p + e (two floats, Dekker's TwoProduct) compared with integers. One module for the ground truth's
rasteriser, the box and mask converters and the gaze cells, so that they cannot drift apart.
"""
from __future__ import annotations

import numpy as np

__all__ = ["centre_pixels", "centres", "floor_ratio", "point_cells", "centre_ranges"]

#: integers up to this size are exact in float64 (and their products here stay below it)
_EXACT = float(2 ** 53)


def _sizes(n_cells: int, n_native: int) -> tuple[int, int]:
    n_cells, n_native = int(n_cells), int(n_native)
    if n_cells <= 0 or n_native <= 0:
        raise ValueError(f"cells ({n_cells}) and native pixels ({n_native}) must be positive")
    if 4 * n_cells * n_native >= 2 ** 52:
        raise ValueError(f"{n_cells} cells over {n_native} pixels is beyond exact float64 arithmetic")
    return n_cells, n_native


def centre_pixels(n_cells: int, n_native: int) -> np.ndarray:
    """The native pixel holding each cell centre along one axis, ``floor((2k+1)·n / (2N))`` in integers
    ((N,) int64, all in [0, n))."""
    N, n = _sizes(n_cells, n_native)
    return ((2 * np.arange(N, dtype=np.int64) + 1) * n) // (2 * N)


def centres(n_cells: int, n_native: int) -> np.ndarray:
    """The cell centres along one axis in native continuous coordinates, ``(2k+1)·n / (2N)`` rounded once
    to the nearest float64 ((N,) float64; exact whenever the centre is a whole or half pixel)."""
    N, n = _sizes(n_cells, n_native)
    return ((2 * np.arange(N, dtype=np.int64) + 1) * n).astype(np.float64) / float(2 * N)


def _two_product(a: np.ndarray, b: float) -> tuple[np.ndarray, np.ndarray]:
    """``a * b == p + e`` exactly (Dekker/Veltkamp; finite a, no overflow): the rounded product and its error."""
    p = a * b
    split = 134217729.0  # 2**27 + 1
    t = split * a
    ah = t - (t - a)
    al = a - ah
    t = split * b
    bh = t - (t - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def floor_ratio(x, num: int, den: int) -> tuple[np.ndarray, np.ndarray]:
    """``floor(x · num / den)`` for finite float64 x >= 0 and positive integers num, den, exactly; also
    whether the quotient is a whole number. Returns (int64 floors, bool exact), shaped like ``x``."""
    x = np.asarray(x, dtype=np.float64)
    num, den = int(num), int(den)
    if num <= 0 or den <= 0 or num >= 2 ** 31 or den >= 2 ** 31:
        raise ValueError(f"num ({num}) and den ({den}) must be positive integers below 2**31")
    if x.size and not (np.isfinite(x).all() and x.min() >= 0.0 and x.max() * num < _EXACT / 4):
        raise ValueError("x must be finite, non-negative and small enough for exact float64 arithmetic")
    p, e = _two_product(x, float(num))  # x·num = p + e exactly
    t = np.floor(p / den)
    # d = p - t·den is exact (t·den is an integer below 2**53 and, for t >= 1, within a factor 2 of p); the
    # quotient's true floor differs from t by at most one step because p/den is rounded once
    d = p - t * den
    below = d < -e  # p + e < t·den: the floor is t - 1, with a remainder that is not 0
    above = ~below & ((d - den) >= -e)  # p + e >= (t+1)·den (d - den is exact where it matters: d near den)
    whole = np.where(above, (d - den) == -e, ~below & (d == -e))
    return (t - below + above).astype(np.int64), whole


def point_cells(x, n_native: int, n_cells: int) -> np.ndarray:
    """The cell holding each native coordinate x, ``floor(x·N/n)`` exactly, clipped to [0, N-1] (a point on
    the far edge, or a negative coordinate, lands in the border cell). int64, shaped like ``x``."""
    N, n = _sizes(n_cells, n_native)
    x = np.clip(np.asarray(x, dtype=np.float64), 0.0, float(n))
    k, _ = floor_ratio(x, N, n)
    return np.minimum(k, N - 1)


def centre_ranges(lo, hi, n_native: int, n_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """For half-open spans [lo, hi) in native coordinates, the cells k0 .. k1-1 whose centre c satisfies
    lo <= c < hi exactly (int64 k0, k1; k1 <= k0 when no centre falls inside). Spans are clipped to [0, n].

    The first centre at or after v is at k = ceil(2N·v/n) // 2: the smallest odd 2k+1 >= 2N·v/n."""
    N, n = _sizes(n_cells, n_native)

    def first_at_or_after(v) -> np.ndarray:
        v = np.clip(np.asarray(v, dtype=np.float64), 0.0, float(n))
        t, whole = floor_ratio(v, 2 * N, n)
        return np.minimum((t + ~whole) // 2, N)

    return first_at_or_after(lo), first_at_or_after(hi)
