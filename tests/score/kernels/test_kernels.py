"""Kernels against the slow references: resize, normalise, binning on threshold values, counts."""

from __future__ import annotations

import numpy as np
import pytest

from xbench.score.kernels import maps as K

import score_reference as ref

SHAPES = [
    ((14, 14), (16, 16)),  # upsampling, square
    ((7, 9), (13, 10)),  # non-square map and grid, non-integer scales
    ((20, 30), (8, 12)),  # larger than the grid on both axes: area
    ((16, 40), (16, 12)),  # equal on one axis, larger on the other: area
    ((30, 5), (12, 12)),  # larger on one axis, smaller on the other: bilinear (downsampling one axis)
    ((12, 12), (12, 12)),  # same size: identity
    ((1, 1), (5, 3)),  # a single value
]


@pytest.mark.parametrize("shape,grid", SHAPES)
def test_resize_matches_reference_exactly(shape, grid):
    rng = np.random.default_rng(0)
    m = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(K.resize_map(m, grid), ref.resize(m, grid))


def test_same_size_resize_is_identity():
    m = np.random.default_rng(1).random((9, 11)).astype(np.float32)
    np.testing.assert_array_equal(K.resize_map(m, (9, 11)), m.astype(np.float64))


@pytest.mark.torch
@pytest.mark.parametrize("shape,grid", SHAPES + [((14, 14), (224, 224)), ((7, 7), (224, 224))])
def test_resize_agrees_with_torch(shape, grid):
    torch = pytest.importorskip("torch")
    m = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    h, w = shape
    area = h >= grid[0] and w >= grid[1] and (h > grid[0] or w > grid[1])
    kw = {"mode": "area"} if area else {"mode": "bilinear", "align_corners": False, "antialias": False}
    t = torch.nn.functional.interpolate(torch.from_numpy(m.astype(np.float64))[None, None], size=grid, **kw)
    # torch's compiled kernels may fuse multiply-adds, so agreement is to the last bits, and exact when the
    # scale is a power of two (the usual 14 -> 224 and 7 -> 224)
    np.testing.assert_allclose(K.resize_map(m, grid), t[0, 0].numpy(), rtol=0, atol=1e-14)
    if (grid[0] / h) in (1, 2, 4, 8, 16, 32) and grid[0] / h == grid[1] / w:
        np.testing.assert_array_equal(K.resize_map(m, grid), t[0, 0].numpy())


def test_threshold_bins_on_and_next_to_every_threshold():
    taus = np.arange(101) / 100
    np.testing.assert_array_equal(K.threshold_bins(taus), np.arange(101))
    below = np.nextafter(taus[1:], -1.0)
    np.testing.assert_array_equal(K.threshold_bins(below), np.arange(100))
    above = np.nextafter(taus[:-1], 2.0)
    np.testing.assert_array_equal(K.threshold_bins(above), np.arange(100))
    v = np.random.default_rng(3).random(20000)
    expected = np.array([sum(1 for t in ref.TAUS if x >= t) - 1 for x in v])
    np.testing.assert_array_equal(K.threshold_bins(v), expected)


def test_threshold_bins_rejects_unnormalised_values():
    with pytest.raises(ValueError, match="normalise"):
        K.threshold_bins([1.5])


def _check_counts(maps, masks):
    res = K.grounding_counts(maps, masks)
    for p in range(len(maps)):
        b, br = ref.counts(maps[p], masks[p])
        np.testing.assert_array_equal(res.b[p], b)
        np.testing.assert_array_equal(res.br[p], br)
        hit, _, _ = ref.pair_values(maps[p], masks[p])
        assert res.hit[p] == hit
        assert res.region_pixels[p] == masks[p].sum()
    return res


@pytest.mark.parametrize("shape,grid", SHAPES)
def test_counts_match_brute_force(shape, grid):
    rng = np.random.default_rng(4)
    maps = rng.standard_normal((5, *shape)).astype(np.float16)
    masks = rng.random((5, *grid)) < 0.3
    masks[:, 0, 0] = True
    _check_counts(maps, masks)


def test_adversarial_maps_and_regions():
    grid = (11, 13)
    rng = np.random.default_rng(5)
    maps = rng.random((6, 11, 13)).astype(np.float32)
    maps[0] = 3.0  # constant map: normalises to 0 and points nowhere (a miss)
    maps[1] = (rng.integers(0, 101, size=grid) / 100).astype(np.float32)  # quantised: many exact ties
    maps[2].flat[[0, 1, 2]] = maps[2].max() + 1  # tied maxima: their centroid, the middle one, points
    masks = np.zeros((6, *grid), bool)
    masks[0, 0, 0] = True  # one-pixel region at the first cell: a constant map still misses it
    masks[1] = True  # region covering the whole grid
    masks[2, 0, 1] = True  # the middle tied maximum (not the first one) in the region -> hit
    masks[3, 5, 6] = True  # one-pixel region
    masks[4, 2:9, 3:10] = True
    masks[5, -1, -1] = True
    res = _check_counts(maps, masks)
    assert not res.hit[0] and res.hit[2]
    assert res.b[0, 0] == 11 * 13 and not res.b[0, 1:].any()


def test_values_exactly_on_thresholds():
    # identity resize, min 0 and max 100: the normalised values are k / 100 exactly, i.e. each pixel sits
    # exactly on a threshold, and B_tau_k must include it (>=)
    k = np.arange(101)
    grid = (1, 101)
    maps = k.astype(np.float32).reshape(1, 1, 101)
    masks = np.zeros((1, *grid), bool)
    masks[0, 0, ::2] = True
    np.testing.assert_array_equal(K.normalize_map(K.resize_map(maps[0], grid))[0], k / 100)
    res = _check_counts(maps, masks)
    np.testing.assert_array_equal(res.b[0], 101 - k)
    # the same values scaled and shifted (so not exactly on thresholds) still match the brute force
    _check_counts((maps * np.float32(0.37) - np.float32(5.1)).astype(np.float32), masks)


def test_float64_maps_that_float32_cannot_hold_are_refused():
    with pytest.raises(TypeError, match="float32"):
        K.grounding_counts(np.full((1, 2, 2), 0.1), np.ones((1, 2, 2), bool))


def test_wrong_inputs_say_how_to_fix():
    with pytest.raises(TypeError, match="astype"):
        K.grounding_counts(np.zeros((1, 2, 2), np.int32), np.ones((1, 2, 2), bool))
    with pytest.raises(TypeError, match="bool"):
        K.grounding_counts(np.zeros((1, 2, 2), np.float32), np.ones((1, 2, 2)))
    with pytest.raises(ValueError, match="same P"):
        K.grounding_counts(np.zeros((2, 2, 2), np.float32), np.ones((1, 2, 2), bool))
    for bad in (np.nan, np.inf, -np.inf):
        maps = np.zeros((2, 3, 3), np.float32)
        maps[1, 2, 0] = bad
        with pytest.raises(ValueError, match="finite"):
            K.grounding_counts(maps, np.ones((2, 6, 6), bool))


def test_chunking_does_not_change_results():
    rng = np.random.default_rng(6)
    maps = rng.random((9, 7, 7)).astype(np.float32)
    masks = rng.random((9, 10, 10)) < 0.5
    a = K.grounding_counts(maps, masks, n_chunks=1)
    b = K.grounding_counts(maps, masks, n_chunks=9)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_random_property_counts_are_monotone_and_bounded():
    rng = np.random.default_rng(7)
    for trial in range(20):
        h, w = rng.integers(1, 12, size=2)
        H, W = rng.integers(1, 15, size=2)
        maps = rng.standard_normal((3, h, w)).astype(np.float32)
        masks = rng.random((3, H, W)) < rng.random()
        res = K.grounding_counts(maps, masks)
        assert (np.diff(res.b, axis=1) <= 0).all() and (np.diff(res.br, axis=1) <= 0).all()
        assert (res.br <= res.b).all() and (res.br <= res.region_pixels[:, None]).all()
        assert (res.b[:, 0] == H * W).all() and (res.br[:, 0] == masks.sum(axis=(1, 2))).all()
        assert (res.b[:, 100] >= 1).all()  # the maximum always reaches tau = 1 (or the map is constant)
