"""The fused grounding kernel against a straightforward NumPy float64 reference, bit for bit.

The kernel (``count_pairs_into`` / ``grounding_counts``) never materialises the normalised map: it finds the
extremes by bounding runs of rows and evaluating only the run-columns that can hold them, recomputes each bilinear row, bins it with a fast floor guess and an exact
fallback near thresholds, and sums the maximum's cells (for the pointing peak, their centroid) inside that fallback. Every one of those shortcuts must
give exactly what the plain definition gives, so this file holds them to it on many random, quantised,
constant and tied maps, on the bilinear and area paths, and on square and non-square grids.
"""

from __future__ import annotations

import numpy as np
import pytest

from xbench.score.kernels import maps as K

TAUS = np.arange(101) / 100.0


# ------------------------------------------------------------------------------------------ reference
def _bilinear_weights(n_in: int, n_out: int):
    # torch, align_corners=False: src = (in / out) * (dst + 0.5) - 0.5, clamped at 0, edge-clamped indices
    src = (n_in / n_out) * (np.arange(n_out) + 0.5) - 0.5
    src = np.maximum(src, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = i0 + (i0 < n_in - 1)
    l1 = np.clip(src - i0, 0.0, 1.0)
    return i0, i1, 1.0 - l1, l1


def _resize(m: np.ndarray, grid) -> np.ndarray:
    """float64 resize in torch's order: width first, then height (bilinear); window means (area)."""
    h, w = m.shape
    H, W = grid
    x = m.astype(np.float64)
    if h >= H and w >= W and (h > H or w > W):
        out = np.empty((H, W))
        for oh in range(H):
            r0, r1 = oh * h // H, -(-(oh + 1) * h // H)
            for ow in range(W):
                c0, c1 = ow * w // W, -(-(ow + 1) * w // W)
                s = 0.0
                for i in range(r0, r1):  # sequential sum, row-major, as the kernel (and torch) accumulate
                    for j in range(c0, c1):
                        s += x[i, j]
                out[oh, ow] = s / (r1 - r0) / (c1 - c0)
        return out
    c0, c1, cw0, cw1 = _bilinear_weights(w, W)
    r0, r1, rw0, rw1 = _bilinear_weights(h, H)
    tmp = x[:, c0] * cw0 + x[:, c1] * cw1
    return tmp[r0] * rw0[:, None] + tmp[r1] * rw1[:, None]


def _reference(m: np.ndarray, mask: np.ndarray):
    """(b, br, hit, |R|) straight from the definition: 101 comparisons per pixel."""
    r = _resize(m, mask.shape)
    mn, mx = r.min(), r.max()
    v = np.zeros_like(r) if mx == mn else (r - mn) / (mx - mn)
    ge = v[None] >= TAUS[:, None, None]
    b = ge.sum(axis=(1, 2))
    br = (ge & mask[None]).sum(axis=(1, 2))
    return b, br, _peak_hit(r, mask), int(mask.sum())


def _peak_hit(r: np.ndarray, mask: np.ndarray) -> bool:
    """The pointing game by the contract: the centroid of the cells equal to the maximum, rounded to the nearest
    cell (halves up: floor(mean + 1/2), in integers), or, when that cell is not one of them, their cell nearest the
    centroid, lies in the region; a constant map is a miss."""
    rows, cols = np.nonzero(r == r.max())
    if rows.size == r.size:
        return False
    n = rows.size
    pr, pc = (2 * int(rows.sum()) + n) // (2 * n), (2 * int(cols.sum()) + n) // (2 * n)
    if r[pr, pc] != r.max():  # not a cell of the maximum: the maximum's cell nearest the centroid (first if tied)
        d2 = (n * rows - int(rows.sum())) ** 2 + (n * cols - int(cols.sum())) ** 2
        k = int(np.argmin(d2))  # rows/cols are in row-major order, so argmin's first is the row-major first
        pr, pc = int(rows[k]), int(cols[k])
    return bool(mask[pr, pc])


def _check(maps: np.ndarray, masks: np.ndarray) -> None:
    """Compare both entry points (serial chunk kernel with shuffled region rows, parallel wrapper)."""
    P = len(maps)
    src = np.ascontiguousarray(maps.astype(np.float32))
    # the chunk kernel reads pair p's region from row local[p] of a shuffled block
    perm = np.random.default_rng(P).permutation(P)
    block = np.ascontiguousarray(masks[perm])
    local = np.argsort(perm).astype(np.int64)
    out = K.GroundingCounts(np.zeros((P, 101), np.int32), np.zeros((P, 101), np.int32), np.zeros(P, bool),
                            np.zeros(P, np.int32))
    K.count_pairs_into(src, block, local, K.resize_plan(maps.shape[1:], masks.shape[1:]), out)
    par = K.grounding_counts(maps, masks, n_chunks=3)
    for p in range(P):
        b, br, hit, n_r = _reference(maps[p], masks[p])
        for res in (out, par):
            np.testing.assert_array_equal(res.b[p], b, err_msg=f"pair {p}: |B_tau|")
            np.testing.assert_array_equal(res.br[p], br, err_msg=f"pair {p}: |B_tau ∩ R|")
            assert res.hit[p] == hit, f"pair {p}: pointing game"
            assert res.region_pixels[p] == n_r, f"pair {p}: |R|"


def _masks(rng, P, grid):
    masks = rng.random((P, *grid)) < rng.uniform(0.05, 0.6, (P, 1, 1))
    masks[0] = False
    masks[0, grid[0] // 2, grid[1] // 2] = True  # one-pixel region
    if P > 1:
        masks[1] = True  # whole grid
    return masks


# ---------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("shape,grid", [
    ((14, 14), (224, 224)),  # the usual case
    ((7, 7), (224, 224)),
    ((5, 9), (37, 53)),  # odd sizes, non-square, non-integer scales
    ((13, 3), (40, 24)),
    ((1, 6), (9, 30)),  # a single source row
    ((12, 12), (12, 12)),  # identity
    ((30, 5), (12, 12)),  # larger on one axis only: bilinear, downsampling that axis
])
def test_random_maps_bilinear(dtype, shape, grid):
    rng = np.random.default_rng(hash((shape, grid, np.dtype(dtype).name)) % 2**32)
    P = 3 if grid == (224, 224) else 12
    scale = rng.choice([1e-3, 1.0, 1e3], size=(P, 1, 1))
    offset = rng.choice([0.0, 5.0, -300.0], size=(P, 1, 1))
    maps = (rng.standard_normal((P, *shape)) * scale + offset).astype(dtype)
    _check(maps, _masks(rng, P, grid))


@pytest.mark.parametrize("shape,grid", [((20, 30), (8, 12)), ((16, 40), (16, 12)), ((25, 25), (7, 11))])
def test_random_maps_area(shape, grid):
    rng = np.random.default_rng(11)
    maps = rng.standard_normal((8, *shape)).astype(np.float16)
    _check(maps, _masks(rng, 8, grid))


@pytest.mark.parametrize("levels", [2, 3, 5, 11, 101])
@pytest.mark.parametrize("shape,grid", [((11, 13), (11, 13)), ((6, 5), (12, 10)), ((4, 4), (16, 16)),
                                        ((7, 7), (224, 224)), ((24, 18), (12, 9))])
def test_quantised_maps_put_many_values_on_thresholds(levels, shape, grid):
    # integer levels 0..levels-1 with both ends present: after normalisation (and interpolation at halves,
    # quarters, ... for power-of-two scales) a large share of pixels lies exactly on some k / 100
    rng = np.random.default_rng(levels)
    P = 2 if grid == (224, 224) else 6
    maps = rng.integers(0, levels, size=(P, *shape)).astype(np.float32)
    maps[:, 0, 0] = 0
    maps[:, -1, -1] = levels - 1
    if levels == 101:
        maps[0].flat[: min(101, maps[0].size)] = np.arange(min(101, maps[0].size))
    _check(maps.astype(np.float16), _masks(rng, P, grid))
    if shape == grid and levels > 2:  # identity: every interior value is j / (levels - 1), a threshold
        v = K.normalize_map(K.resize_map(maps[0], grid))
        inner = v[(v > 0) & (v < 1)]
        assert inner.size and np.isin(inner, TAUS).all()


@pytest.mark.parametrize("shape,grid", [((14, 14), (224, 224)), ((3, 5), (10, 7)), ((20, 30), (8, 12))])
def test_constant_maps(shape, grid):
    rng = np.random.default_rng(3)
    maps = np.stack([np.full(shape, c, np.float32) for c in (0.0, -2.5, 7.0, 65504.0)])
    masks = _masks(rng, 4, grid)
    masks[2] = False
    masks[2, 0, 0] = True  # the constant map points at pixel 0
    _check(maps, masks)


@pytest.mark.parametrize("shape,grid", [((14, 14), (224, 224)), ((6, 6), (12, 12)), ((5, 8), (5, 8)),
                                        ((20, 30), (8, 12))])
def test_ties_at_the_maximum_point_at_their_centroid(shape, grid):
    rng = np.random.default_rng(5)
    P = 6
    maps = rng.random((P, *shape)).astype(np.float32)
    top = np.float32(2.0)
    maps[0, :, :] = np.minimum(maps[0], 1.0)
    maps[0, 1, 2] = maps[0, 1, 3] = maps[0, -1, 0] = top  # separated tied peaks
    maps[1, 2:4, 2:4] = top  # a plateau: many tied maxima after interpolation
    maps[2, :, -1] = top  # the whole last column
    maps[3, -1, :] = top  # the whole last row
    maps[4, 0, -1] = maps[4, -1, 0] = top  # opposite corners
    maps[5] = np.round(maps[5] * 2) / 2  # few levels: ties everywhere
    masks = _masks(rng, P, grid)
    # a region holding the plateau's middle but not its first (top-left) cell, and one holding only the first
    # cell: the scan-order rule would flip both hits
    r = _resize(maps[1], grid)
    first = np.argmax(r)
    masks[2] = r == r.max()
    masks[2].flat[first] = False
    masks[3] = False
    masks[3].flat[first] = True
    _check(maps, masks)
    if (r == r.max()).sum() > 1:  # a real plateau (upsampled: always; pooled 20 x 30 -> 8 x 12: one cell)
        assert K.grounding_counts(maps[1:2], masks[2:3]).hit[0]
        assert not K.grounding_counts(maps[1:2], masks[3:4]).hit[0]


def test_maps_on_the_benchmark_model_many_seeds():
    # smooth bump plus noise in float16, as the synthetic submissions (the kernel's fast path in bulk)
    rng = np.random.default_rng(2024)
    P = 10
    yy, xx = np.mgrid[0:14, 0:14] + 0.5
    cy, cx = rng.uniform(2, 12, (2, P))
    bump = np.exp(-((yy - cy[:, None, None]) ** 2 + (xx - cx[:, None, None]) ** 2) / 8.0)
    maps = (rng.standard_normal((P, 14, 14)) * 0.6 + bump * 2).astype(np.float16)
    _check(maps, _masks(rng, P, (224, 224)))


def test_values_one_float32_step_from_thresholds():
    # min 0, max 100 and the float32 neighbours of every integer k: normalised values just below, on and just
    # above each tau_k (identity resize, and upsampled so that interpolation mixes them)
    k = np.arange(1, 100, dtype=np.float32)
    row = np.concatenate([[0.0], np.nextafter(k, np.float32(0)), k, np.nextafter(k, np.float32(100)), [100.0]])
    maps = row.astype(np.float32)[None, None, :]
    mask = np.zeros((1, 1, row.size), bool)
    mask[0, 0, ::3] = True
    _check(maps, mask)
    _check(maps.reshape(1, 1, -1)[:, :, :60].reshape(1, 6, 10), np.ones((1, 24, 40), bool))


def _plateau_and_rounding_maps(rng, P, shape, dtype):
    """Maps whose extremes are hard for a bound-and-prune search: ReLU'd maps (a plateau of zeros at the
    minimum, as Grad-CAM gives), clipped maps (a plateau at the maximum), values one float step apart at high
    magnitude (the extremes decided by rounding), and float16's whole dynamic range in one map."""
    maps = np.empty((P, *shape), np.float64)
    for p in range(P):
        kind = p % 4
        x = rng.standard_normal(shape)
        if kind == 0:
            maps[p] = np.maximum(x, 0.0)
        elif kind == 1:
            maps[p] = np.minimum(x, 0.3) * 1e3
        elif kind == 2:
            base = np.float32(rng.choice([1.0, 3000.0, -6e4]))
            maps[p] = np.nextafter(base, np.float32(np.inf) * np.sign(x)).astype(np.float64) * (np.abs(x) > 0.5) + \
                base * (np.abs(x) <= 0.5)
        else:
            maps[p] = rng.choice([65504.0, -65504.0, 6e-8, -6e-8, 0.0, 1.0, -1.0], size=shape)
    return maps.astype(dtype)


@pytest.mark.parametrize("shape,grid", [((14, 14), (224, 224)), ((5, 9), (37, 53)), ((13, 3), (40, 24)),
                                        ((1, 6), (9, 30)), ((30, 5), (12, 12)), ((7, 7), (15, 64))])
def test_extremes_of_plateaus_and_rounding_bound_maps(shape, grid):
    # the min and max come from a search that evaluates only the run-columns whose bounds can beat the best
    # so far; these maps put the extremes on plateaus, on one-ulp differences and on huge dynamic ranges
    rng = np.random.default_rng(sum(shape) * 31 + sum(grid))
    P = 4 if grid == (224, 224) else 12
    maps = _plateau_and_rounding_maps(rng, P, shape, np.float32)
    _check(maps, _masks(rng, P, grid))
    _check(_plateau_and_rounding_maps(rng, P, shape, np.float16), _masks(rng, P, grid))


def test_bilinear_extremes_equal_the_full_min_and_max():
    # the pruned search itself against np.min / np.max of the whole resized map, on many shapes and seeds
    rng = np.random.default_rng(77)
    for trial in range(150):
        shape = tuple(int(v) for v in rng.integers(1, 16, 2))
        grid = tuple(int(v) for v in rng.integers(1, 60, 2))
        plan = K.resize_plan(shape, grid)
        if plan.area:
            continue
        kind = trial % 3
        x = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e4])
        m = (np.maximum(x, 0) if kind == 0 else np.round(x) if kind == 1 else x).astype(np.float32)
        tmp = np.empty((shape[0], grid[1]))
        K._width_pass(m, plan.col_idx, plan.col_w, tmp)
        starts = np.empty(grid[0] + 1, np.int64)
        G = K._row_runs(plan.row_idx, starts)
        assert starts[0] == 0 and starts[G] == grid[0] and (np.diff(starts[:G + 1]) > 0).all()
        lo, hi = np.empty((G, grid[1])), np.empty((G, grid[1]))
        r = _resize(m, grid)
        assert K._bilinear_extremes(tmp, plan.row_idx, plan.row_w, starts, G, lo, hi) == (r.min(), r.max())
