"""The pointing game on tied maxima (issue 46 item 4): the peak is the centroid of the maximum's cells, rounded to
the nearest cell, not the first cell in scan order; a constant map points nowhere.

Checked against the exact-fraction brute force of score_reference.peak, on maps with ties on purpose (binary
masks, few-level maps, plateaus), on the bilinear and the area path, and for the property the rule exists for:
a binary mask's hit does not depend on the order cells are scanned in (transposing map and region together
transposes the peak)."""
from __future__ import annotations

import numpy as np
import pytest

from xbench.score.kernels import maps as K

import score_reference as ref


def _hits(maps, masks):
    return K.grounding_counts(np.asarray(maps, np.float32), np.asarray(masks, bool)).hit


@pytest.mark.parametrize("shape,grid", [((16, 16), (16, 16)), ((7, 9), (21, 18)), ((30, 24), (10, 8))])
def test_tied_maps_against_the_brute_force(shape, grid):
    rng = np.random.default_rng(46)
    P = 24
    maps = np.empty((P, *shape), np.float32)
    for p in range(P):
        kind = p % 4
        if kind == 0:  # a binary mask: its top 3 %
            x = rng.random(shape)
            maps[p] = x >= np.quantile(x, 0.97)
        elif kind == 1:  # few levels: ties everywhere
            maps[p] = rng.integers(0, 3, shape)
        elif kind == 2:  # a rectangle plateau
            maps[p] = rng.random(shape) * 0.5
            r0, c0 = rng.integers(0, shape[0] - 2), rng.integers(0, shape[1] - 2)
            maps[p, r0:r0 + 3, c0:c0 + 2] = 1.0
        else:  # two separate tied peaks
            maps[p] = rng.random(shape) * 0.5
            maps[p, 0, 0] = maps[p, -1, -1] = 1.0
    masks = rng.random((P, *grid)) < 0.4
    res = K.grounding_counts(maps, masks)
    for p in range(P):
        r = ref.resize(maps[p], grid)
        want = ref.peak(r)
        assert res.hit[p] == ref.hit_of(r, masks[p]), p
        assert (res.argmax[p] == -1) if want is None else (divmod(int(res.argmax[p]), grid[1]) == want), p
        assert K.peak_cell(r) == want, p


def test_a_mask_points_at_its_middle_not_its_corner():
    """A 5 x 5 square mask on a 20 x 20 grid: its peak is its centre cell; the region covering only the centre
    is hit, the region covering only the square's top-left cell (the first highest cell) is missed."""
    m = np.zeros((1, 20, 20), np.float32)
    m[0, 4:9, 10:15] = 1
    centre, corner = np.zeros((1, 20, 20), bool), np.zeros((1, 20, 20), bool)
    centre[0, 6, 12] = True
    corner[0, 4, 10] = True
    assert _hits(m, centre)[0] and not _hits(m, corner)[0]
    assert K.peak_cell(m[0]) == (6, 12)


def test_halves_round_up():
    m = np.zeros((6, 6), np.float32)
    m[1, 1] = m[2, 2] = 1  # centroid (1.5, 1.5) -> (2, 2)
    assert K.peak_cell(m) == ref.peak(m) == (2, 2)
    m = np.zeros((6, 6), np.float32)
    m[0, 0:4] = 1  # centroid (0, 1.5) -> (0, 2)
    assert K.peak_cell(m) == ref.peak(m) == (0, 2)


def test_the_hit_does_not_depend_on_scan_order():
    """Transposing a binary map (a disc) and its region together transposes the peak: the same hit either way.
    Under the first-maximum rule the two disagree (the top-left-most cell of a disc and of its transpose differ)."""
    rng = np.random.default_rng(7)
    P, S = 40, 24
    yy, xx = np.mgrid[0:S, 0:S]
    cy, cx, rad = rng.uniform(4, 20, P), rng.uniform(4, 20, P), rng.uniform(1.5, 4, P)
    maps = (((yy - cy[:, None, None]) ** 2 + (xx - cx[:, None, None]) ** 2) <= rad[:, None, None] ** 2).astype(np.float32)
    masks = rng.random((P, S, S)) < 0.3
    straight = _hits(maps, masks)
    transposed = _hits(maps.transpose(0, 2, 1).copy(), masks.transpose(0, 2, 1).copy())
    np.testing.assert_array_equal(straight, transposed)
    first = [bool(masks[p].flat[np.argmax(maps[p])]) for p in range(P)]
    first_t = [bool(masks[p].T.flat[np.argmax(maps[p].T)]) for p in range(P)]
    assert first != first_t  # the old rule is not invariant on these masks (so the check above can fail)


def test_unique_maxima_keep_the_first_maximum_rule():
    """No change where the maximum is unique: the peak is the argmax (random continuous maps, both paths)."""
    rng = np.random.default_rng(11)
    for shape, grid in [((14, 14), (224, 224)), ((40, 40), (16, 16))]:
        maps = rng.random((8, *shape)).astype(np.float32)
        res = K.grounding_counts(maps, np.ones((8, *grid), bool))
        for p in range(8):
            r = ref.resize(maps[p], grid)
            if (r == r.max()).sum() == 1:
                assert int(res.argmax[p]) == int(np.argmax(r))


def test_a_constant_map_points_nowhere():
    m = np.full((1, 8, 8), 0.25, np.float32)
    everywhere = np.ones((1, 8, 8), bool)
    res = K.grounding_counts(m, everywhere, tolerance=1e6)
    assert not res.hit[0] and not res.hit_tolerant[0] and res.argmax[0] == -1
    assert K.peak_cell(m[0]) is None


def test_a_map_equal_to_a_region_of_two_blobs_points_into_it():
    """The centroid of two separate blobs lies between them; the peak is then the maximum's cell nearest it, so
    a map equal to the region (a perfect map) still hits, as under the first-maximum rule."""
    m = np.zeros((1, 12, 12), np.float32)
    m[0, 2:4, 1:3] = m[0, 8:10, 9:11] = 1
    res = K.grounding_counts(m, m.astype(bool))
    assert res.hit[0]
    peak = divmod(int(res.argmax[0]), 12)
    assert m[0][peak] == 1 and peak == ref.peak(m[0])


def test_tolerant_hits_start_from_the_peak():
    """The tolerant pointing game measures from the centroid peak: a region 2 cells from a mask's centre and
    5 cells from its first cell is hit at tolerance 2, whichever cell scan order meets first."""
    m = np.zeros((1, 20, 20), np.float32)
    m[0, 2:9, 2:9] = 1  # centre (5, 5); first cell (2, 2)
    region = np.zeros((1, 20, 20), bool)
    region[0, 5, 7] = True
    res = K.grounding_counts(m, region, tolerance=2.0)
    assert not res.hit[0] and res.hit_tolerant[0]
    res = K.grounding_counts(m, region, tolerance=1.9)
    assert not res.hit_tolerant[0]


def test_peak_cell_refuses_what_is_not_a_map():
    with pytest.raises(ValueError, match="finite"):
        K.peak_cell(np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match=r"\(H, W\)"):
        K.peak_cell(np.zeros(4))


def test_one_definition_for_every_consumer():
    """The kernels compile xbench.schemas.pointing's own formulas, and the Python-side peak (overlays, xbench show,
    the human ceiling's shape readers) is that module's function."""
    from xbench.schemas import pointing
    from xbench.score.report import overlays

    assert K._rounded_centroid.py_func is pointing.rounded_centroid
    assert K._nearness.py_func is pointing.nearness
    m = np.zeros((9, 9), np.float32)
    m[2:7, 1:4] = 1
    assert K.peak_cell(m) == pointing.peak_cell(m) == overlays.map_peak(m) == ref.peak(m) == (4, 2)
    assert overlays.pointing_peak(m, (9, 9)) == (4, 2)


def test_nearness_is_exact_in_int64_on_the_largest_grid():
    """The distance key n (r^2 + c^2) - 2 (sr r + sc c) against Python's unbounded integers at the extremes of a
    4096 x 4096 grid (n up to every cell, the sums up to n * 4095): int64 holds it (below 2^53, so it is even exact
    as a float64), where n^2 d^2 itself would pass 2^63."""
    from xbench.schemas import pointing

    rng = np.random.default_rng(3)
    side, cells = 4096, 4096 * 4096
    for _ in range(200):
        n = int(rng.integers(1, cells + 1))
        sr, sc = (int(rng.integers(0, n * (side - 1) + 1)) for _ in range(2))
        r, c = (int(v) for v in rng.integers(0, side, 2))
        want = n * (r * r + c * c) - 2 * (sr * r + sc * c)
        got = pointing.nearness(np.int64(n), np.int64(sr), np.int64(sc), np.int64(r), np.int64(c))
        assert int(got) == want and abs(want) < 2 ** 53
        assert int(K._nearness(n, sr, sc, r, c)) == want
        # it orders cells as the distance to (sr / n, sc / n) does
        d2 = (n * r - sr) ** 2 + (n * c - sc) ** 2
        assert d2 == n * want + sr * sr + sc * sc
    n, s = cells, cells * (side - 1)
    assert (n * (side - 1) - 0) ** 2 > 2 ** 63 > abs(pointing.nearness(n, s, s, side - 1, side - 1))


def test_nan_cells_are_lowest_where_a_drawing_asks():
    from xbench.schemas import pointing
    from xbench.score.report import overlays

    m = np.array([[np.nan, 1.0, 1.0], [0.0, np.nan, 1.0]])
    assert pointing.peak_cell(m, nan_lowest=True) == overlays.map_peak(m) == ref.peak(np.nan_to_num(m, nan=-np.inf))
    assert overlays.map_peak(np.full((2, 2), np.nan)) is None
    with pytest.raises(ValueError, match="finite"):
        pointing.peak_cell(m)


def test_maps_converted_to_top_percent_masks_keep_their_pointing_game():
    """Issue 46 item 4's walk: one's own maps, then the same maps as top-3 % masks (as `xbench-convert` would store
    a mask output). A blob centred on a cell gives a mask symmetric about that cell, whose peak is the blob's own
    peak: the pointing game is the same, where the first highest cell (the old rule) lost most hits."""
    rng = np.random.default_rng(46)
    P, S = 60, 32
    yy, xx = np.mgrid[0:S, 0:S]
    cy, cx = rng.integers(6, S - 6, P), rng.integers(6, S - 6, P)
    maps = np.exp(-((yy - cy[:, None, None]) ** 2 + (xx - cx[:, None, None]) ** 2) / 18.0).astype(np.float32)
    oy, ox = rng.integers(-3, 4, P), rng.integers(-3, 4, P)  # regions near the blob, not always on it
    regions = ((yy - (cy + oy)[:, None, None]) ** 2 + (xx - (cx + ox)[:, None, None]) ** 2) <= 4
    masks = np.stack([m >= np.quantile(m, 0.97) for m in maps]).astype(np.float32)
    as_maps, as_masks = _hits(maps, regions), _hits(masks, regions)
    np.testing.assert_array_equal(as_maps, as_masks)
    first = np.array([regions[p].flat[np.argmax(masks[p])] for p in range(P)])
    assert 0 < as_maps.mean() < 1 and first.mean() < as_maps.mean() - 0.2  # the old rule's drop, for contrast
