"""score/metrics/average_ranks.py: average ranks equal scipy's rankdata(method="average") and a brute force, ties included."""
import numpy as np
import pytest

from xbench.score.metrics.average_ranks import average_ranks


def _brute(x):
    x = np.ravel(x)
    return np.array([np.sum(x < v) + (np.sum(x == v) + 1) / 2.0 for v in x])


@pytest.mark.parametrize("seed", range(5))
def test_average_ranks_equal_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 7, size=(9, 11)).astype(np.float32)  # many ties
    assert np.array_equal(average_ranks(x), _brute(x))


def test_average_ranks_equal_scipy_on_a_large_map_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    x = np.round(rng.random((224, 224)), 3)
    assert np.array_equal(average_ranks(x), stats.rankdata(x.ravel(), method="average"))


def test_constant_and_single_values():
    assert average_ranks(np.full(5, 2.0)).tolist() == [3.0] * 5
    assert average_ranks(np.array([7.0])).tolist() == [1.0]
