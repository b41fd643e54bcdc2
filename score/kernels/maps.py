"""Numba kernels for map processing and threshold counting, behind checked Python wrappers.

Every number here follows the contract (``shared/contract.md``, "Metrics"):

1. resize a raw map to the grid ``(H, W)``: bilinear with half-pixel centres and edge clamping
   (``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)``), or area averaging
   (``mode="area"``, i.e. adaptive average pooling) when the map is at least as large as the grid on both
   axes and larger on one;
2. min-max normalise over the grid in float64, a constant map becoming all zeros;
3. pointing game: the peak cell of the resized map: the centroid of the set of cells holding its maximum
   rounded to the nearest cell (halves up) when that cell holds the maximum, else the maximum's cell nearest the
   centroid; a unique maximum is its own peak, a constant map has none (a miss)
   (:mod:`xbench.schemas.pointing`, the one definition the human ceiling and the overlays use too);
4. ``B_tau = {u : M~(u) >= tau}`` for the 101 thresholds ``tau_k = k / 100`` (float64).

All arithmetic is float64 and follows torch's operation order, so the results are bit-identical to a
careful reference. No ``fastmath``: reassociation would change the last bits and so the chosen thresholds.

The threshold search costs one pass per map: each pixel is binned once into ``k(v) = max{k : tau_k <= v}``
(exact, including values that sit on a threshold), and reverse cumulative sums of the bin histogram give
``|B_tau_k|`` and ``|B_tau_k ∩ R|`` for every ``k`` at once: O(pixels + thresholds) per map.

Speed without AVX-512 (most laptops and many cloud VMs have AVX2 only): the hot loops use only what
AVX2 vectorises. Bin keys are 32-bit (float64 -> int32 conversions have an AVX2 instruction, float64 ->
int64 ones only an AVX-512 one); the bilinear path finds the exact min and max by bounding each run of
output rows that share their two source rows and evaluating only the few run-columns that can hold an
extreme (a full min/max pass compiled to masked stores, which are slow on AMD CPUs); and the scorer calls
the bilinear or the area chunk kernel directly so that a run compiles only the one it needs.
``benchmarks/score_fullscale.py`` also times the kernels compiled for a generic AVX2 CPU.

The kernels (``_name``) do no checking; the wrappers below check dtypes and shapes and say how to fix bad
input.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import numpy as np

from xbench.schemas import pointing
from xbench.score.kernels._numba_cache import configure_numba_cache, import_numba_without_blas_probe

configure_numba_cache(Path(__file__).parent)

import numba  # noqa: E402  (after the cache directory is chosen)

import_numba_without_blas_probe()

__all__ = [
    "N_THRESHOLDS",
    "THRESHOLDS",
    "ResizePlan",
    "GroundingCounts",
    "resize_plan",
    "resize_map",
    "peak_cell",
    "normalize_map",
    "threshold_bins",
    "grounding_counts",
    "count_pairs_into",
    "tolerant_hits",
    "weighted_auroc_ap",
    "rank_order",
]

#: tau_k = k / 100 as float64, k = 0..100 (the contract's threshold grid).
N_THRESHOLDS = 101
THRESHOLDS = np.arange(N_THRESHOLDS, dtype=np.float64) / 100.0
THRESHOLDS.setflags(write=False)


class ResizePlan(NamedTuple):
    """Per-axis source indices and weights for resizing ``in_shape`` to ``grid``.

    ``area`` False (bilinear): ``row_idx[0/1]`` are the two source rows and ``row_w[0/1]`` their weights
    for each output row; likewise for columns. ``area`` True: ``row_idx[0]``/``row_idx[1]`` are the start
    and stop (exclusive) of each output row's pooling window; the weights are unused.
    """

    area: bool
    row_idx: np.ndarray  # (2, H) int64
    row_w: np.ndarray  # (2, H) float64
    col_idx: np.ndarray  # (2, W) int64
    col_w: np.ndarray  # (2, W) float64


class GroundingCounts(NamedTuple):
    """Per-pair results of :func:`grounding_counts` for P pairs and T = 101 thresholds.

    The last three are optional for :func:`count_pairs_into` (None: not wanted, computed into scratch).
    """

    b: np.ndarray  # (P, T) int32: |B_tau_k|
    br: np.ndarray  # (P, T) int32: |B_tau_k ∩ R|
    hit: np.ndarray  # (P,) bool: pointing-game hit
    region_pixels: np.ndarray  # (P,) int32: |R|
    energy: np.ndarray | None = None  # (P,) float64: energy-based pointing game, sum(M~ in R) / sum(M~)
    argmax: np.ndarray | None = None  # (P,) int32: flat index of the peak cell (see peak_cell), -1 for a constant map
    hit_tolerant: np.ndarray | None = None  # (P,) bool: tolerant pointing-game hit (see tolerant_hits)


# ---------------------------------------------------------------------------------------------- plans
def _bilinear_axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    # torch: scale = in / out; src = scale * (dst + 0.5) - 0.5, clamped below at 0;
    # i0 = min(floor(src), in - 1); i1 = i0 + (i0 < in - 1); l1 = clamp(src - i0, 0, 1); l0 = 1 - l1.
    scale = float(n_in) / float(n_out)
    idx = np.empty((2, n_out), dtype=np.int64)
    w = np.empty((2, n_out), dtype=np.float64)
    for o in range(n_out):
        src = scale * (o + 0.5) - 0.5
        if src < 0.0:
            src = 0.0
        i0 = min(int(np.floor(src)), n_in - 1)
        lam1 = min(max(src - i0, 0.0), 1.0)
        idx[0, o] = i0
        idx[1, o] = i0 + (1 if i0 < n_in - 1 else 0)
        w[0, o] = 1.0 - lam1
        w[1, o] = lam1
    return idx, w


def _area_axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    # torch adaptive pooling windows: start = floor(o * in / out), stop = ceil((o + 1) * in / out).
    o = np.arange(n_out, dtype=np.int64)
    idx = np.stack([(o * n_in) // n_out, ((o + 1) * n_in + n_out - 1) // n_out])
    return idx, np.zeros((2, n_out), dtype=np.float64)


def resize_plan(in_shape: tuple[int, int], grid: tuple[int, int]) -> ResizePlan:
    """Plan the resize of an ``in_shape`` = (h, w) map onto ``grid`` = (H, W) (see module docstring)."""
    h, w = (int(s) for s in in_shape)
    H, W = (int(s) for s in grid)
    if min(h, w, H, W) < 1:
        raise ValueError(f"map shape {in_shape} and grid {grid} must be positive; got a zero or negative size.")
    area = h >= H and w >= W and (h > H or w > W)
    row_idx, row_w = _axis(area, h, H)
    col_idx, col_w = _axis(area, w, W)
    return ResizePlan(area, row_idx, row_w, col_idx, col_w)


def _axis(area: bool, n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    # the per-map callers (robustness, probes, faithfulness) plan the same few shapes thousands of times, and
    # the bilinear plan is a Python loop; copies keep the cached arrays safe from a caller that writes to them
    idx, w = _axis_cached(area, n_in, n_out)
    return idx.copy(), w.copy()


@functools.lru_cache(maxsize=64)
def _axis_cached(area: bool, n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    return (_area_axis if area else _bilinear_axis)(n_in, n_out)


# -------------------------------------------------------------------------------------------- kernels
@numba.njit(cache=True, nogil=True)
def _row_min_max(row):
    """(min, max) of a 1-D float64 row. Four independent accumulators break the compare-select dependency
    chain (min and max are exact, so the order of the comparisons cannot change the result)."""
    n = row.shape[0]
    a0 = a1 = a2 = a3 = row[0]
    b0 = b1 = b2 = b3 = row[0]
    j = 0
    while j + 4 <= n:
        v0 = row[j]
        v1 = row[j + 1]
        v2 = row[j + 2]
        v3 = row[j + 3]
        a0 = v0 if v0 < a0 else a0
        a1 = v1 if v1 < a1 else a1
        a2 = v2 if v2 < a2 else a2
        a3 = v3 if v3 < a3 else a3
        b0 = v0 if v0 > b0 else b0
        b1 = v1 if v1 > b1 else b1
        b2 = v2 if v2 > b2 else b2
        b3 = v3 if v3 > b3 else b3
        j += 4
    while j < n:
        v = row[j]
        a0 = v if v < a0 else a0
        b0 = v if v > b0 else b0
        j += 1
    return min(min(a0, a1), min(a2, a3)), max(max(b0, b1), max(b2, b3))


@numba.njit(cache=True, nogil=True, inline="always")
def _width_pass(src, col_idx, col_w, tmp):
    """The bilinear resize's first half, shared so that every path computes it identically:
    interpolate each source row along the width into ``tmp`` (h, W), in float64."""
    for i in range(src.shape[0]):
        for ow in range(tmp.shape[1]):
            tmp[i, ow] = (np.float64(src[i, col_idx[0, ow]]) * col_w[0, ow]
                          + np.float64(src[i, col_idx[1, ow]]) * col_w[1, ow])


@numba.njit(cache=True, nogil=True)
def _resize_into(src, area, row_idx, row_w, col_idx, col_w, tmp, out):
    """Resize one float32 map ``src`` (h, w) into float64 ``out`` (H, W); ``tmp`` is (h, W) scratch.

    Returns (min, max, flat index of the first maximum in row-major order).
    """
    H = out.shape[0]
    W = out.shape[1]
    if area:
        for oh in range(H):
            r0 = row_idx[0, oh]
            r1 = row_idx[1, oh]
            kh = r1 - r0
            for ow in range(W):
                c0 = col_idx[0, ow]
                c1 = col_idx[1, ow]
                s = 0.0
                for i in range(r0, r1):
                    for j in range(c0, c1):
                        s += np.float64(src[i, j])
                out[oh, ow] = s / kh / (c1 - c0)  # torch divides twice, in this order
    else:
        # separable, in torch's order: interpolate along the width first, then along the height
        _width_pass(src, col_idx, col_w, tmp)
        for oh in range(H):
            ta = tmp[row_idx[0, oh]]
            tb = tmp[row_idx[1, oh]]
            wa = row_w[0, oh]
            wb = row_w[1, oh]
            row = out[oh]
            for ow in range(W):
                row[ow] = ta[ow] * wa + tb[ow] * wb
    # min and max row by row (vectorised), remembering the first row that holds the maximum
    mn, mx = _row_min_max(out[0])
    r_max = 0
    for oh in range(1, H):
        a, b = _row_min_max(out[oh])
        if a < mn:
            mn = a
        if b > mx:
            mx = b
            r_max = oh
    row = out[r_max]
    for ow in range(W):
        if row[ow] == mx:
            return mn, mx, r_max * W + ow
    return mn, mx, r_max * W  # unreachable for finite maps


# The peak's two integer formulas are xbench.schemas.pointing's own functions compiled here, so the human ceiling,
# the overlays and these kernels share one definition (the loops below are its twin, tested equal to it).
_rounded_centroid = numba.njit(cache=True, nogil=True, inline="always")(pointing.rounded_centroid)
_nearness = numba.njit(cache=True, nogil=True, inline="always")(pointing.nearness)


@numba.njit(cache=True, nogil=True, inline="always")
def _peak_from_sums(n, sr, sc, W):
    """Flat index of the cell nearest the centroid of the maximum's cells, from their number ``n`` and their row
    and column sums (:func:`xbench.schemas.pointing.rounded_centroid`); -1 when ``n`` is 0. A scan-order
    tie-break (the first maximum) would make a tied plateau, e.g. a binary mask, point at its top-left corner
    instead of its middle. The caller checks that this cell holds the maximum (else :func:`_peak_of` /
    :func:`_bilinear_peak` take the maximum's cell nearest the centroid)."""
    if n == 0:
        return -1
    return _rounded_centroid(n, sr) * W + _rounded_centroid(n, sc)


@numba.njit(cache=True, nogil=True)
def _peak_of(buf, mx):
    """The peak cell of a full resized map ``buf`` whose maximum is ``mx`` (not constant): the centroid cell of
    the maximum's cells when it holds the maximum, else the maximum's cell nearest the centroid (the first in
    row-major order among equally near ones), so the peak always holds the maximum (a map equal to a region of
    two blobs points into one of them, not between them)."""
    n = 0
    sr = 0
    sc = 0
    for oh in range(buf.shape[0]):
        for ow in range(buf.shape[1]):
            if buf[oh, ow] == mx:
                n += 1
                sr += oh
                sc += ow
    W = buf.shape[1]
    a = _peak_from_sums(n, sr, sc, W)
    if a < 0 or buf[a // W, a % W] == mx:
        return a
    best = -1
    best_d = 0
    for oh in range(buf.shape[0]):
        for ow in range(W):
            if buf[oh, ow] == mx:
                d = _nearness(n, sr, sc, oh, ow)
                if best < 0 or d < best_d:
                    best = oh * W + ow
                    best_d = d
    return best


@numba.njit(cache=True, nogil=True)
def _bilinear_peak(tmp, row_idx, row_w, H, W, mx, n, sr, sc):
    """:func:`_peak_of` for the bilinear path, whose resized map is never stored: each value is recomputed with
    the very expression of the counting pass (so ``== mx`` selects the same cells)."""
    a = _peak_from_sums(n, sr, sc, W)
    if a < 0:
        return a
    r = a // W
    c = a % W
    if tmp[row_idx[0, r], c] * row_w[0, r] + tmp[row_idx[1, r], c] * row_w[1, r] == mx:
        return a
    best = -1
    best_d = 0
    for oh in range(H):
        for ow in range(W):
            if tmp[row_idx[0, oh], ow] * row_w[0, oh] + tmp[row_idx[1, oh], ow] * row_w[1, oh] == mx:
                d = _nearness(n, sr, sc, oh, ow)
                if best < 0 or d < best_d:
                    best = oh * W + ow
                    best_d = d
    return best


@numba.njit(cache=True, nogil=True, inline="always")
def _bin(v, taus):
    """k(v) = max{k : taus[k] <= v} for v in [0, 1] on the grid taus[k] = k / 100, exactly."""
    k = int(v * 100.0)
    if k >= 100:
        return 100
    # v * 100 can round across an integer; one step either way fixes it (e.g. v = 0.29 gives 28.999...)
    if taus[k + 1] <= v:
        k += 1
    elif taus[k] > v:
        k -= 1
    return k


# y = (x - min) * (100 / range) differs from 100 * v, v = (x - min) / range, by at most ~4e-14 (a few
# roundings of numbers <= 100), and 100 * taus[k] differs from k by at most ~2e-14. So when y is farther
# than _NEAR from every integer, floor(y) is exactly k(v); only pixels within _NEAR of a threshold (rare,
# except on quantised maps) take the exact path with the division. The test is int(y + _NEAR) !=
# int(y - _NEAR) (y >= 0, so truncation is floor; y in [0, _NEAR) is bin 0 either way). It always flags the
# maximum (y = 100 up to rounding), which the bilinear kernel relies on to find every cell of the maximum.
_NEAR = 1e-9


#: Bin histograms are kept in this many interleaved copies: consecutive pixels of a smooth map mostly fall in
#: the same bin, and one copy would make every increment wait for the previous store.
_LANES = 4


@numba.njit(cache=True, nogil=True, inline="always")
def _scatter(kb, hist):
    """hist[kb[j]] += 1 for every j. The index is cast to unsigned because Numba otherwise adds a
    negative-index wraparound check to every increment (the keys are never negative)."""
    for j in range(kb.shape[0]):
        hist[np.uint64(kb[j])] += 1


@numba.njit(cache=True, nogil=True)
def _bin_row(row, mrow, mn, rng, taus, hist, kb, e_all, e_in):
    """Add one row (raw resized values) to ``hist`` (_LANES * 2T,): bin 2k + [pixel in R] for k = k(v).
    Also adds each pixel's ``v - min`` to ``e_all`` (W,) and, inside R, to ``e_in`` (W,): the map's mass."""
    T = taus.shape[0]
    W = row.shape[0]
    inv = 100.0 / rng
    near = 0
    for ow in range(W):  # vectorises: the fast guess and the key for the whole row
        d = row[ow] - mn
        e_all[ow] += d
        e_in[ow] += d if mrow[ow] else 0.0
        y = d * inv
        g = np.int32(y + _NEAR)
        near += g - np.int32(y - _NEAR)
        kb[ow] = 2 * g + (1 if mrow[ow] else 0) + (ow % _LANES) * (2 * T)
    if near:
        for ow in range(W):
            y = (row[ow] - mn) * inv
            if np.int32(y + _NEAR) != np.int32(y - _NEAR):
                kb[ow] = 2 * _bin((row[ow] - mn) / rng, taus) + (1 if mrow[ow] else 0) + (ow % _LANES) * (2 * T)
    _scatter(kb, hist)


@numba.njit(cache=True, nogil=True)
def _finish_counts(hist, b_row, br_row):
    """Reverse cumulative sums of the (lane-interleaved) bin histogram into b_row / br_row; returns |R|."""
    T = b_row.shape[0]
    acc_b = 0
    acc_br = 0
    for k in range(T - 1, -1, -1):
        for lane in range(_LANES):
            acc_br += hist[lane * 2 * T + 2 * k + 1]
            acc_b += hist[lane * 2 * T + 2 * k] + hist[lane * 2 * T + 2 * k + 1]
        b_row[k] = acc_b
        br_row[k] = acc_br
    return acc_br


@numba.njit(cache=True, nogil=True)
def _constant_map(mask, hist):
    # a constant map normalises to all zeros: every pixel is in B_0 and in no other B_tau
    n_r = 0
    for oh in range(mask.shape[0]):
        for ow in range(mask.shape[1]):
            if mask[oh, ow]:
                n_r += 1
    hist[1] = n_r
    hist[0] = mask.shape[0] * mask.shape[1] - n_r


@numba.njit(cache=True, nogil=True)
def _energy_share(e_all, e_in):
    """sum(e_in) / sum(e_all) of the per-column mass sums; 0 for a map without mass (a constant map)."""
    s_all = 0.0
    s_in = 0.0
    for ow in range(e_all.shape[0]):
        s_all += e_all[ow]
        s_in += e_in[ow]
    return s_in / s_all if s_all > 0.0 else 0.0


@numba.njit(cache=True, nogil=True)
def _count_one(buf, mn, mx, mask, taus, hist, kb, e_all, e_in, b_row, br_row):
    """Bin a resized map held in ``buf`` once; write counts into b_row / br_row (T,); return
    (|R|, energy share)."""
    hist[:] = 0
    e_all[:] = 0.0
    e_in[:] = 0.0
    rng = mx - mn
    if rng == 0.0:
        _constant_map(mask, hist)
    else:
        for oh in range(buf.shape[0]):
            _bin_row(buf[oh], mask[oh], mn, rng, taus, hist, kb, e_all, e_in)
    return _finish_counts(hist, b_row, br_row), _energy_share(e_all, e_in)


@numba.njit(cache=True, nogil=True)
def _row_runs(row_idx, starts):
    """Split the output rows into runs that interpolate between the same two source rows.

    Writes the first row of run g into ``starts[g]`` and H into ``starts[G]``; returns G.
    """
    H = row_idx.shape[1]
    G = 0
    for oh in range(H):
        if oh == 0 or row_idx[0, oh] != row_idx[0, oh - 1] or row_idx[1, oh] != row_idx[1, oh - 1]:
            starts[G] = oh
            G += 1
    starts[G] = H
    return G


# Every output value v = fl(fl(a * wa) + fl(b * wb)) of a run, at one column, has source values a, b and
# weights wa, wb in [0, 1] with |wa + wb - 1| <= 2^-53, so |v - (a convex combination of a, b)| is at most a
# few units of 2^-53 (|a| + |b|) (all products are normal numbers: maps are float16/float32). _MARGIN is
# 4,500 times that bound, so min(a, b) - _MARGIN * (|a| + |b|) <= v <= max(a, b) + _MARGIN * (|a| + |b|).
_MARGIN = 1e-12


@numba.njit(cache=True, nogil=True)
def _bilinear_extremes(tmp, row_idx, row_w, starts, G, lo, hi):
    """Exact (min, max) of the bilinear output without evaluating most of it.

    For each run g of output rows and each column, ``lo[g]``/``hi[g]`` ((G, W) scratch) bound every
    value the run takes there (see _MARGIN). The run-columns with the lowest and highest bounds are
    evaluated first; then a run-column is evaluated, pixel by pixel and with the very expression of the
    second pass, only when its bound could beat the extreme found so far. Min and max are exact, so
    skipping values that provably cannot be extremes cannot change them.
    """
    W = tmp.shape[1]
    g_lo = g_hi = 0
    j_lo = j_hi = 0
    for g in range(G):
        ta = tmp[row_idx[0, starts[g]]]
        tb = tmp[row_idx[1, starts[g]]]
        lrow = lo[g]
        hrow = hi[g]
        for ow in range(W):  # vectorises
            a = ta[ow]
            b = tb[ow]
            m = _MARGIN * (abs(a) + abs(b))
            lrow[ow] = (a if a < b else b) - m
            hrow[ow] = (a if a > b else b) + m
        for ow in range(W):
            if lrow[ow] < lo[g_lo, j_lo]:
                g_lo = g
                j_lo = ow
            if hrow[ow] > hi[g_hi, j_hi]:
                g_hi = g
                j_hi = ow
    mn = np.inf
    mx = -np.inf
    mn, mx = _run_column_extremes(tmp, row_idx, row_w, starts, g_lo, j_lo, mn, mx)
    mn, mx = _run_column_extremes(tmp, row_idx, row_w, starts, g_hi, j_hi, mn, mx)
    for g in range(G):
        for ow in range(W):
            if lo[g, ow] < mn or hi[g, ow] > mx:
                mn, mx = _run_column_extremes(tmp, row_idx, row_w, starts, g, ow, mn, mx)
    return mn, mx


@numba.njit(cache=True, nogil=True)
def _run_column_extremes(tmp, row_idx, row_w, starts, g, ow, mn, mx):
    """(mn, mx) updated with the output values of run g at column ow."""
    a = tmp[row_idx[0, starts[g]], ow]
    b = tmp[row_idx[1, starts[g]], ow]
    for oh in range(starts[g], starts[g + 1]):
        v = a * row_w[0, oh] + b * row_w[1, oh]
        mn = v if v < mn else mn
        mx = v if v > mx else mx
    return mn, mx


@numba.njit(cache=True, nogil=True)
def _rows_with_region(mask, row_has):
    """row_has[oh] = number of region cells in row oh (an integer sum, which vectorises)."""
    for oh in range(mask.shape[0]):
        mrow = mask[oh]
        n = np.int32(0)
        for ow in range(mask.shape[1]):
            n += np.int32(mrow[ow])
        row_has[oh] = n


@numba.njit(cache=True, nogil=True)
def _count_bilinear(src, mask, row_idx, row_w, col_idx, col_w, taus, tmp, starts, G, lo, hi, lane, hist, kb,
                    e_all, e_in, row_has, b_row, br_row):
    """Bilinear path without a full-size buffer: the (h, W) width-interpolated map ``tmp`` stays in L1 and
    each output row is computed (2 multiplies and an add per pixel) as it is binned, never stored.

    The exact min and max come from :func:`_bilinear_extremes`, which evaluates only the few run-columns
    that can hold them. The one full pass computes each row, bins it with 32-bit keys (``lane`` (W,)
    holds each column's histogram copy offset; the float64 -> int32 conversions vectorise on AVX2, int64
    ones need AVX-512) and sums the rows and columns of the maximum's cells among the pixels the exact path
    visits (every cell holding the maximum is among them) for the peak cell. The same pass adds each pixel's ``v - min`` to the per-column mass sums ``e_all``
    and, inside R, ``e_in`` ((W,) scratch). Returns (|R|, flat index of the peak cell (-1: constant), energy share).
    """
    H = mask.shape[0]
    W = mask.shape[1]
    _width_pass(src, col_idx, col_w, tmp)
    mn, mx = _bilinear_extremes(tmp, row_idx, row_w, starts, G, lo, hi)
    hist[:] = 0
    rng = mx - mn
    if rng == 0.0:
        _constant_map(mask, hist)
        return _finish_counts(hist, b_row, br_row), -1, 0.0
    e_all[:] = 0.0
    e_in[:] = 0.0
    inv = 100.0 / rng
    n_max = 0
    sr = 0
    sc = 0
    _rows_with_region(mask, row_has)
    for oh in range(H):
        ta = tmp[row_idx[0, oh]]
        tb = tmp[row_idx[1, oh]]
        wa = row_w[0, oh]
        wb = row_w[1, oh]
        mrow = mask[oh]
        near = False
        # Two copies of one loop (both vectorise; the fast guess and the key, as in _bin_row): only rows that
        # hold region cells add to the mass inside R. Elsewhere the sums would only gain exact zeros.
        if row_has[oh]:
            for ow in range(W):
                v = ta[ow] * wa + tb[ow] * wb
                d = v - mn
                e_all[ow] += d
                e_in[ow] += d * np.float64(mrow[ow])  # d * 1 or d * 0: exact, and branch-free
                y = d * inv
                g = np.int32(y + _NEAR)
                near |= g != np.int32(y - _NEAR)
                kb[ow] = 2 * g + np.int32(mrow[ow]) + lane[ow]
        else:
            for ow in range(W):
                d = ta[ow] * wa + tb[ow] * wb - mn
                e_all[ow] += d
                y = d * inv
                g = np.int32(y + _NEAR)
                near |= g != np.int32(y - _NEAR)
                kb[ow] = 2 * g + lane[ow]  # no region cell in this row
        if near:
            for ow in range(W):
                v = ta[ow] * wa + tb[ow] * wb
                y = (v - mn) * inv
                if np.int32(y + _NEAR) != np.int32(y - _NEAR):
                    kb[ow] = 2 * _bin((v - mn) / rng, taus) + np.int32(mrow[ow]) + lane[ow]
                    if v == mx:
                        n_max += 1
                        sr += oh
                        sc += ow
        _scatter(kb, hist)
    if n_max == 0:  # unreachable (see _NEAR), kept so that a wrong argument can never yield a wrong index
        for oh in range(H):
            for ow in range(W):
                if tmp[row_idx[0, oh], ow] * row_w[0, oh] + tmp[row_idx[1, oh], ow] * row_w[1, oh] == mx:
                    n_max += 1
                    sr += oh
                    sc += ow
    return (_finish_counts(hist, b_row, br_row), _bilinear_peak(tmp, row_idx, row_w, H, W, mx, n_max, sr, sc),
            _energy_share(e_all, e_in))


@numba.njit(cache=True, parallel=True)
def _grounding_counts(maps, masks, area, row_idx, row_w, col_idx, col_w, taus, n_chunks):
    """Counts for P pairs: maps (P, h, w) float32, masks (P, H, W) bool. See :func:`grounding_counts`."""
    P = maps.shape[0]
    T = taus.shape[0]
    b = np.empty((P, T), dtype=np.int32)
    br = np.empty((P, T), dtype=np.int32)
    hit = np.empty(P, dtype=np.bool_)
    n_r = np.empty(P, dtype=np.int32)
    energy = np.empty(P, dtype=np.float64)
    arg = np.empty(P, dtype=np.int32)
    # one scratch set per chunk of pairs (in _chunk_counts), not per pair
    for c in numba.prange(n_chunks):
        lo = c * P // n_chunks
        hi = (c + 1) * P // n_chunks
        _chunk_counts(maps[lo:hi], masks, np.arange(lo, hi), area, row_idx, row_w, col_idx, col_w, taus,
                      b[lo:hi], br[lo:hi], hit[lo:hi], n_r[lo:hi], energy[lo:hi], arg[lo:hi])
    return b, br, hit, n_r, energy, arg


@numba.njit(cache=True, nogil=True)
def _chunk_counts(maps, masks, local, area, row_idx, row_w, col_idx, col_w, taus, b, br, hit, n_r, energy, arg):
    """Serial counts for P pairs whose regions sit in one decoded chunk: maps (P, h, w) float32, masks
    (n, H, W) bool, ``local[p]`` the row of ``masks`` for pair p. Writes b, br (P, T), hit, n_r, energy and
    arg (the peak cell's flat index, -1 for a constant map) (P,)."""
    if area:
        _chunk_counts_area(maps, masks, local, row_idx, col_idx, taus, b, br, hit, n_r, energy, arg)
    else:
        _chunk_counts_bilinear(maps, masks, local, row_idx, row_w, col_idx, col_w, taus, b, br, hit, n_r, energy,
                               arg)


# The scorer calls the two paths below directly (count_pairs_into picks one in Python), so a run compiles
# only the path its maps need: one kernel fewer to compile on a first run.
@numba.njit(cache=True, nogil=True)
def _chunk_counts_bilinear(maps, masks, local, row_idx, row_w, col_idx, col_w, taus, b, br, hit, n_r, energy, arg):
    """:func:`_chunk_counts` for a bilinear plan.

    Serial and ``nogil`` on purpose: the scorer runs one call per region chunk on each of several Python
    threads, so decoding the next chunk (zarr releases the GIL) overlaps counting this one, and memory holds
    one decoded chunk per thread.
    """
    P = maps.shape[0]
    h = maps.shape[1]
    H = masks.shape[1]
    W = masks.shape[2]
    T = taus.shape[0]
    tmp = np.empty((h, W), dtype=np.float64)
    hist = np.empty(_LANES * 2 * T, dtype=np.int64)
    kb = np.empty(W, dtype=np.int32)
    starts = np.empty(H + 1, dtype=np.int64)
    G = _row_runs(row_idx, starts)
    lo = np.empty((G, W), dtype=np.float64)
    hi = np.empty((G, W), dtype=np.float64)
    lane = np.empty(W, dtype=np.int32)
    for ow in range(W):
        lane[ow] = (ow % _LANES) * (2 * T)
    e_all = np.empty(W, dtype=np.float64)
    e_in = np.empty(W, dtype=np.float64)
    row_has = np.empty(H, dtype=np.int32)
    for p in range(P):
        m = masks[local[p]]
        n_r[p], a, energy[p] = _count_bilinear(maps[p], m, row_idx, row_w, col_idx, col_w, taus, tmp, starts, G,
                                               lo, hi, lane, hist, kb, e_all, e_in, row_has, b[p], br[p])
        arg[p] = a
        hit[p] = a >= 0 and m[a // W, a % W]


@numba.njit(cache=True, nogil=True)
def _chunk_counts_area(maps, masks, local, row_idx, col_idx, taus, b, br, hit, n_r, energy, arg):
    """:func:`_chunk_counts` for an area (downsampling) plan; serial and ``nogil`` as the bilinear one."""
    P = maps.shape[0]
    h = maps.shape[1]
    H = masks.shape[1]
    W = masks.shape[2]
    T = taus.shape[0]
    tmp = np.empty((h, W), dtype=np.float64)
    hist = np.empty(_LANES * 2 * T, dtype=np.int64)
    kb = np.empty(W, dtype=np.int32)
    buf = np.empty((H, W), dtype=np.float64)
    no_w = np.empty((2, 0), dtype=np.float64)  # area pooling uses no weights
    e_all = np.empty(W, dtype=np.float64)
    e_in = np.empty(W, dtype=np.float64)
    for p in range(P):
        m = masks[local[p]]
        mn, mx, _ = _resize_into(maps[p], True, row_idx, no_w, col_idx, no_w, tmp, buf)
        n_r[p], energy[p] = _count_one(buf, mn, mx, m, taus, hist, kb, e_all, e_in, b[p], br[p])
        a = _peak_of(buf, mx) if mx > mn else -1
        arg[p] = a
        hit[p] = a >= 0 and m[a // W, a % W]


@numba.njit(cache=True, nogil=True)
def _tolerant_hits(masks, local, arg, cell, tol, out):
    """out[p] = some cell u of region ``masks[local[p]]`` has d(u)^2 <= tol^2, with d(u)^2 = dy^2 + dx^2,
    dy = (row(u) - row(a)) * cell[p, 0], dx likewise with columns and cell[p, 1], a = arg[p] (the peak cell;
    -1, a constant map, is a miss); in original pixels when ``cell`` holds the original pixels per grid cell.

    Only the window of rows with dy^2 <= tol^2 and columns with dx^2 <= tol^2 around the maximum is read:
    a cell outside it has d^2 >= dy^2 > tol^2 (or dx^2), so the result is that of a full scan.
    """
    H = masks.shape[1]
    W = masks.shape[2]
    tol2 = tol * tol
    for p in range(local.shape[0]):
        if arg[p] < 0:  # a constant map points nowhere
            out[p] = False
            continue
        m = masks[local[p]]
        ra = arg[p] // W
        ca = arg[p] % W
        sy = cell[p, 0]
        sx = cell[p, 1]
        r0 = ra
        while r0 > 0 and ((r0 - 1 - ra) * sy) * ((r0 - 1 - ra) * sy) <= tol2:
            r0 -= 1
        r1 = ra
        while r1 < H - 1 and ((r1 + 1 - ra) * sy) * ((r1 + 1 - ra) * sy) <= tol2:
            r1 += 1
        c0 = ca
        while c0 > 0 and ((c0 - 1 - ca) * sx) * ((c0 - 1 - ca) * sx) <= tol2:
            c0 -= 1
        c1 = ca
        while c1 < W - 1 and ((c1 + 1 - ca) * sx) * ((c1 + 1 - ca) * sx) <= tol2:
            c1 += 1
        hit = False
        for r in range(r0, r1 + 1):
            dy = (r - ra) * sy
            for c in range(c0, c1 + 1):
                if m[r, c]:
                    dx = (c - ca) * sx
                    if dy * dy + dx * dx <= tol2:
                        hit = True
                        break
            if hit:
                break
        out[p] = hit


@numba.njit(cache=True)
def _resize_only(src, area, row_idx, row_w, col_idx, col_w, H, W):
    out = np.empty((H, W), dtype=np.float64)
    tmp = np.empty((src.shape[0], W), dtype=np.float64)
    _resize_into(src, area, row_idx, row_w, col_idx, col_w, tmp, out)
    return out


@numba.njit(cache=True)
def _bins(values, taus):
    out = np.empty(values.shape[0], dtype=np.int64)
    for i in range(values.shape[0]):
        out[i] = _bin(values[i], taus)
    return out


# serial on purpose (a parallel loop here fights BLAS's threads in the matmuls); nogil: the bootstrap runs
# datasets on several threads
@numba.njit(cache=True, nogil=True)
def _ranked_replicates(wt, order, pos, group_end):
    """Weighted AUROC and AP per resample, one pass over the pairs sorted by p descending.

    ``wt`` is (N, B): the weights transposed, so that the loop over the B resamples is contiguous and
    vectorises. ``order[j]`` is the row of ``wt`` holding the j-th pair by p descending (pairs may be a
    subset of the rows); ``pos`` and ``group_end`` follow that order, ``group_end[j]`` marking the last pair
    of each run of tied p. AUROC counts (positive, negative) pairs with the positive ranked higher, ties
    counting 1/2 (= scikit-learn's trapezoidal ROC area); AP sums (recall step) x precision over distinct
    thresholds (= scikit-learn's step-wise average precision).
    """
    B = wt.shape[1]
    n = order.shape[0]
    tp = np.zeros(B)
    fp = np.zeros(B)
    tp_g = np.zeros(B)
    fp_g = np.zeros(B)
    area = np.zeros(B)
    s_ap = np.zeros(B)
    for j in range(n):
        x = wt[order[j]]
        if group_end[j] and (j == 0 or group_end[j - 1]):
            # a pair with no tie (the usual case): update the totals directly
            if pos[j]:
                for r in range(B):
                    tp[r] += x[r]
                    d = tp[r] + fp[r]
                    s_ap[r] += x[r] * (tp[r] / (d if d > 0.0 else 1.0))
            else:
                for r in range(B):
                    area[r] += x[r] * tp[r]
                    fp[r] += x[r]
            continue
        if pos[j]:
            for r in range(B):
                tp_g[r] += x[r]
        else:
            for r in range(B):
                fp_g[r] += x[r]
        if group_end[j]:
            for r in range(B):  # branch-free, so it vectorises over the resamples
                area[r] += fp_g[r] * (tp[r] + 0.5 * tp_g[r])
                tp[r] += tp_g[r]
                fp[r] += fp_g[r]
                d = tp[r] + fp[r]
                # precision at this threshold, weighted by the recall step (0 when the group has no positive)
                s_ap[r] += tp_g[r] * (tp[r] / (d if d > 0.0 else 1.0))
                tp_g[r] = 0.0
                fp_g[r] = 0.0
    auroc = np.full(B, np.nan)
    ap = np.full(B, np.nan)
    for r in range(B):
        if tp[r] > 0.0 and fp[r] > 0.0:  # tp, fp now hold the total positive and negative weight
            auroc[r] = area[r] / (tp[r] * fp[r])
            ap[r] = s_ap[r] / tp[r]
    return auroc, ap


# ------------------------------------------------------------------------------------------- wrappers
def _as_map_stack(maps, name: str) -> np.ndarray:
    arr = np.asarray(maps)
    if arr.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"`{name}` must be float16, float32 or float64 saliency; found {arr.dtype}. "
                        f"Convert with `.astype(np.float32)`.")
    if arr.dtype == np.float64:
        # float64 input is accepted for convenience but computed through float32 only when exact
        narrowed = arr.astype(np.float32)
        if not np.array_equal(narrowed.astype(np.float64), arr):
            raise TypeError(f"`{name}` holds float64 values that float32 cannot represent exactly; "
                            f"submissions store float16 or float32 maps, convert with `.astype(np.float32)`.")
        arr = narrowed
    # float16 -> float32 is exact, and the kernels convert to float64 before any arithmetic
    return np.ascontiguousarray(arr, dtype=np.float32)


def resize_map(saliency, grid: tuple[int, int]) -> np.ndarray:
    """Resize one raw map (h, w) to ``grid`` (H, W) as the contract says; returns float64 (H, W).

    float16 and float32 input are converted exactly to float64 before any arithmetic.
    """
    src = _as_map_stack(saliency, "saliency")
    if src.ndim != 2:
        raise ValueError(f"`saliency` must be one 2-D map (h, w); got shape {src.shape}.")
    plan = resize_plan(src.shape, grid)
    return _resize_only(src, plan.area, plan.row_idx, plan.row_w, plan.col_idx, plan.col_w,
                        int(grid[0]), int(grid[1]))


def peak_cell(resized) -> tuple[int, int] | None:
    """(row, col) the pointing game points at on a resized (H, W) map, None for a constant map:
    :func:`xbench.schemas.pointing.peak_cell`, the one definition (the contract's "Pointing game"), of which the
    kernels' ``argmax`` is the compiled twin."""
    return pointing.peak_cell(resized)


def normalize_map(resized) -> np.ndarray:
    """Min-max normalise a float64 map: (M - min) / (max - min); a constant map becomes all zeros."""
    m = np.asarray(resized, dtype=np.float64)
    mn, mx = m.min(), m.max()
    if mx == mn:
        return np.zeros_like(m)
    return (m - mn) / (mx - mn)


def threshold_bins(values) -> np.ndarray:
    """For normalised values in [0, 1], the largest k with ``k / 100 <= value`` (int64, same length)."""
    v = np.ascontiguousarray(values, dtype=np.float64).ravel()
    if v.size and (np.isnan(v).any() or v.min() < 0.0 or v.max() > 1.0):
        raise ValueError("`values` must be normalised map values in [0, 1]; normalise with `normalize_map` first.")
    return _bins(v, THRESHOLDS)


def grounding_counts(maps, masks, *, n_chunks: int | None = None, tolerance: float | None = None,
                     cell=None) -> GroundingCounts:
    """Pointing-game hits and per-threshold counts for P (map, region) pairs, in one pass per map.

    Parameters
    ----------
    maps : array of shape (P, h, w), float16 or float32
        Raw saliency maps, any size; resized to the grid as the contract says.
    masks : bool array of shape (P, H, W)
        Regions on the evaluation grid.
    n_chunks : int, optional
        Work items for the parallel loop (default: 4 per Numba thread).
    tolerance : float, optional
        Also compute the tolerant pointing game at this distance (see :func:`tolerant_hits`); else
        ``hit_tolerant`` is None.
    cell : array of shape (P, 2) or (2,), optional
        (height, width) of one grid cell in the unit of ``tolerance`` (default 1: grid cells).

    Returns
    -------
    GroundingCounts
        ``b[p, k] = |B_tau_k|``, ``br[p, k] = |B_tau_k ∩ R|`` (int32, non-increasing in k; the scorer stores them as uint16 on grids of up to 65,535 cells, see counts.count_dtype),
        ``hit[p]``, ``region_pixels[p] = |R|``, ``energy[p]`` (the share of the normalised map's mass inside
        R, 0 for a constant map), ``argmax[p]`` and ``hit_tolerant[p]`` (when ``tolerance`` is given). A
        constant map gives ``b[p, 0] = H*W`` and 0 elsewhere.
    """
    src = _as_map_stack(maps, "maps")
    reg = np.asarray(masks)
    if reg.dtype != np.bool_:
        raise TypeError(f"`masks` must be bool; found {reg.dtype}. Convert with `.astype(bool)`.")
    if src.ndim != 3 or reg.ndim != 3 or src.shape[0] != reg.shape[0]:
        raise ValueError(f"`maps` must be (P, h, w) and `masks` (P, H, W) with the same P; "
                         f"got {src.shape} and {reg.shape}.")
    if not np.isfinite(src).all():  # a NaN or inf would give no bin (the scorer's validation refuses them too)
        raise ValueError("`maps` hold NaN or infinite values; saliency maps must be finite.")
    reg = np.ascontiguousarray(reg)
    P = src.shape[0]
    plan = resize_plan(src.shape[1:], reg.shape[1:])
    if n_chunks is None:
        n_chunks = 4 * numba.get_num_threads()
    n_chunks = max(1, min(int(n_chunks), P))
    cell = _cell_sizes(cell, P)
    if P == 0:
        T = N_THRESHOLDS
        return GroundingCounts(np.zeros((0, T), np.int32), np.zeros((0, T), np.int32), np.zeros(0, bool),
                               np.zeros(0, np.int32), np.zeros(0), np.zeros(0, np.int32),
                               None if tolerance is None else np.zeros(0, bool))
    b, br, hit, n_r, energy, arg = _grounding_counts(src, reg, plan.area, plan.row_idx, plan.row_w, plan.col_idx,
                                                     plan.col_w, THRESHOLDS, n_chunks)
    hit_tol = None
    if tolerance is not None:
        hit_tol = tolerant_hits(reg, np.arange(P, dtype=np.int64), arg, cell, tolerance)
    return GroundingCounts(b, br, hit, n_r, energy, arg, hit_tol)


def _cell_sizes(cell, P: int) -> np.ndarray:
    """``cell`` as a C-contiguous (P, 2) float64 array of positive sizes (default: 1 x 1)."""
    c = np.ones((P, 2)) if cell is None else np.asarray(cell, dtype=np.float64)
    c = np.ascontiguousarray(np.broadcast_to(c, (P, 2)) if c.shape == (2,) else c)
    if c.shape != (P, 2) or not (np.isfinite(c).all() and (c > 0).all()):
        raise ValueError(f"`cell` must be positive finite (height, width) sizes, shape (2,) or ({P}, 2); "
                         f"got shape {c.shape}.")
    return c


def tolerant_hits(masks, local, argmax, cell, tolerance: float) -> np.ndarray:
    """Tolerant pointing game: is some region cell within ``tolerance`` of the peak cell? (P,) bool.

    The distance between grid cells (r, c) and (r', c') is the Euclidean distance of their centres,
    ``sqrt(((r - r') * cell_h)^2 + ((c - c') * cell_w)^2)``, compared as a square: hit when
    ``dy * dy + dx * dx <= tolerance * tolerance`` in float64 for some cell of the region. Tolerance 0 is
    the plain pointing game. ``masks`` (n, H, W) bool, ``local`` (P,) int64 rows of ``masks``, ``argmax``
    (P,) flat indices of the peak cells (-1: a miss), ``cell`` (P, 2) float64 cell sizes in the unit of ``tolerance``.
    """
    tol = float(tolerance)
    if not (np.isfinite(tol) and tol >= 0.0):
        raise ValueError(f"the pointing tolerance must be a finite distance >= 0; got {tolerance!r}.")
    out = np.empty(np.shape(local)[0], dtype=bool)
    _tolerant_hits(masks, local, np.asarray(argmax), cell, tol, out)
    return out


def count_pairs_into(maps: np.ndarray, masks: np.ndarray, local: np.ndarray, plan: ResizePlan,
                     out: GroundingCounts, *, cell: np.ndarray | None = None, tolerance: float | None = None) -> None:
    """Like :func:`grounding_counts`, serially, for pairs whose regions are rows ``local`` of ``masks``.

    For the scorer's worker threads (it releases the GIL). ``maps`` (P, h, w) C-contiguous float32,
    ``masks`` (n, H, W) C-contiguous bool, ``local`` (P,) int64 in [0, n), ``plan`` from
    :func:`resize_plan` (h, w) -> (H, W), and ``out`` preallocated C-contiguous arrays
    (b, br (P, 101) int32; hit (P,) bool; region_pixels (P,) int32; optionally energy (P,) float64,
    argmax (P,) int32, hit_tolerant (P,) bool), filled in place. ``hit_tolerant`` is filled when given,
    from ``cell`` (P, 2) float64 and ``tolerance`` (see :func:`tolerant_hits`). Inputs are trusted: the
    caller guarantees dtypes and shapes (no copies are made).
    """
    P = local.shape[0]
    energy = out.energy if out.energy is not None else np.empty(P, np.float64)
    arg = out.argmax if out.argmax is not None else np.empty(P, np.int32)
    if plan.area:
        _chunk_counts_area(maps, masks, local, plan.row_idx, plan.col_idx, THRESHOLDS, out.b, out.br, out.hit,
                           out.region_pixels, energy, arg)
    else:
        _chunk_counts_bilinear(maps, masks, local, plan.row_idx, plan.row_w, plan.col_idx, plan.col_w, THRESHOLDS,
                               out.b, out.br, out.hit, out.region_pixels, energy, arg)
    if out.hit_tolerant is not None:
        _tolerant_hits(masks, local, arg, cell, float(tolerance), out.hit_tolerant)


def rank_order(y_true, p, columns=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(columns sorted by p descending, positives in that order, last-of-tie-run flags) for the rank kernel."""
    pos = np.asarray(y_true).astype(bool)
    q = np.asarray(p, dtype=np.float64)
    order = np.argsort(-q, kind="stable")
    qs = q[order]
    group_end = np.ones(qs.shape[0], dtype=np.bool_)
    if qs.shape[0] > 1:
        group_end[:-1] = qs[1:] != qs[:-1]
    cols = order if columns is None else np.asarray(columns, dtype=np.int64)[order]
    return np.ascontiguousarray(cols, dtype=np.int64), pos[order], group_end


def weighted_auroc_ap(w, y_true, p) -> tuple[np.ndarray, np.ndarray]:
    """AUROC and average precision of one class under case weights, for each row of ``w``.

    Parameters
    ----------
    w : (B, n) float
        Non-negative weights (bootstrap multiplicities; a row of ones gives the plain metrics).
    y_true : (n,) bool or 0/1
    p : (n,) float64
        Probabilities (only their order and ties matter).

    Returns
    -------
    (auroc, ap) : two (B,) float64 arrays, NaN where a row has no positive or no negative weight. They
    equal scikit-learn's ``roc_auc_score`` / ``average_precision_score`` with ``sample_weight=w[r]`` (to
    rounding; the tests hold them to 1e-12).
    """
    w = np.ascontiguousarray(w, dtype=np.float64)
    pos = np.asarray(y_true)
    q = np.asarray(p, dtype=np.float64)
    if w.ndim != 2 or pos.shape != q.shape or w.shape[1] != q.shape[0]:
        raise ValueError(f"`w` must be (B, n) with `y_true` and `p` (n,); got {w.shape}, {pos.shape}, {q.shape}.")
    return _ranked_replicates(np.ascontiguousarray(w.T), *rank_order(pos, q))
