"""Cross-check against Quantus where it has the metric (optional: skipped when quantus is not installed).

Quantus normalises and takes absolute values by default; both are switched off, and the maps are chosen
so that our definitions and Quantus' must agree (see score/metrics/localisation.py for where they differ): values
0..100 with both ends present (so M~ = M / 100 sits exactly on the threshold grid and the map's minimum
is 0), all distinct (no ties: a unique maximum, and no tie across the rank cut), on the grid itself.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

quantus = pytest.importorskip("quantus")

from xbench.score.kernels import maps as K  # noqa: E402
from xbench.score.metrics.localisation import rank_accuracy_from_counts  # noqa: E402


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(11)
    n, grid = 6, (1, 101)
    maps = np.stack([rng.permutation(101).reshape(grid) for _ in range(n)]).astype(np.float32)
    masks = np.zeros((n, *grid), bool)
    for i in range(n):
        masks[i, 0, rng.choice(101, size=rng.integers(1, 40), replace=False)] = True
    return maps, masks


def _quantus(metric_cls, maps, masks):
    m = metric_cls(disable_warnings=True, abs=False, normalise=False, display_progressbar=False)
    x = np.zeros((maps.shape[0], 1, *maps.shape[1:]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array(m(model=None, x_batch=x, y_batch=np.zeros(maps.shape[0], int),
                          a_batch=maps[:, None].astype(np.float64), s_batch=masks[:, None].astype(float),
                          channel_first=True),
                        dtype=np.float64)


def test_energy_pointing_game_equals_relevance_mass_accuracy(batch):
    maps, masks = batch
    got = K.grounding_counts(maps, masks).energy
    np.testing.assert_allclose(got, _quantus(quantus.RelevanceMassAccuracy, maps, masks), rtol=1e-12)


def test_relevance_rank_accuracy_equals_quantus(batch):
    maps, masks = batch
    g = K.grounding_counts(maps, masks)
    got = rank_accuracy_from_counts(g.b, g.br, g.region_pixels)
    np.testing.assert_array_equal(got, _quantus(quantus.RelevanceRankAccuracy, maps, masks))


def test_pointing_game_equals_quantus(batch):
    maps, masks = batch
    got = K.grounding_counts(maps, masks, tolerance=0.0)
    want = _quantus(quantus.PointingGame, maps, masks).astype(bool)
    np.testing.assert_array_equal(got.hit, want)
    np.testing.assert_array_equal(got.hit_tolerant, want)
