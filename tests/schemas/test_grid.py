"""Exact grid arithmetic (xbench.schemas.grid) against brute force in Python rationals, at the image sizes whose
cell centres fall exactly on a pixel edge (issue 43: 13.5 x (296/36) is 110.99999999999999 in floats)."""
from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from xbench.schemas import grid

#: heights in 1000-4399 where the float product (k + 0.5) * (n / 224) falls below an exact pixel edge, and 296/36
EDGE_SIZES = [(1088, 224), (2176, 224), (2624, 224), (3648, 224), (3904, 224), (4352, 224), (296, 36)]


def _centre(k: int, n: int, N: int) -> Fraction:
    return Fraction(2 * k + 1, 2) * n / N


@pytest.mark.parametrize("n, N", EDGE_SIZES + [(1000, 224), (224, 224), (5, 7), (1, 3)])
def test_centre_pixels_are_the_floor_of_the_exact_centre(n, N):
    want = [math.floor(_centre(k, n, N)) for k in range(N)]
    assert grid.centre_pixels(N, n).tolist() == want
    assert grid.centres(N, n).tolist() == [float(_centre(k, n, N)) for k in range(N)]  # rounded once


@pytest.mark.parametrize("n, N", EDGE_SIZES)
def test_the_edge_sizes_do_differ_from_the_float_product(n, N):
    # the test sizes are the ones the issue names: the old formula picks another pixel on each
    old = ((np.arange(N) + 0.5) * (n / N)).astype(np.int64)
    assert (old != grid.centre_pixels(N, n)).any()


def _values(rng: random.Random, n: int, N: int) -> list[float]:
    vs = [0.0, float(n), n / 2, rng.random() * n]
    for _ in range(6):  # cell centres and cell edges, exactly and one float step either side
        q = _centre(rng.randrange(N), n, N) if rng.random() < 0.5 else Fraction(rng.randrange(N + 1) * n, N)
        v = float(q)
        vs += [v, math.nextafter(v, -math.inf), math.nextafter(v, math.inf)]
    return [min(max(v, 0.0), float(n)) for v in vs]


def test_floor_ratio_point_cells_and_centre_ranges_against_rationals():
    rng = random.Random(43)
    for n, N in EDGE_SIZES + [(rng.randrange(1, 5000), rng.randrange(1, 300)) for _ in range(60)]:
        vs = _values(rng, n, N)
        x = np.array(vs)
        t, whole = grid.floor_ratio(x, 2 * N, n)
        q = [Fraction(v) * 2 * N / n for v in vs]
        assert t.tolist() == [math.floor(v) for v in q] and whole.tolist() == [v.denominator == 1 for v in q]
        assert grid.point_cells(x, n, N).tolist() == [min(math.floor(Fraction(v) * N / n), N - 1) for v in vs]
        lo, hi = np.array(vs), np.array(vs[::-1])
        k0, k1 = grid.centre_ranges(lo, hi, n, N)
        for a, b, s, e in zip(lo, hi, k0, k1):
            inside = [k for k in range(N) if Fraction(a) <= _centre(k, n, N) < Fraction(b)]
            assert (list(range(s, e)) if e > s else []) == inside


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        grid.centre_pixels(0, 10)
    with pytest.raises(ValueError):
        grid.floor_ratio([-1.0], 3, 4)
    with pytest.raises(ValueError):
        grid.floor_ratio([float("nan")], 3, 4)
    with pytest.raises(ValueError):
        grid.centres(2 ** 30, 2 ** 30)
