"""Per-pair localisation metrics beyond the paper's three (metrics.json schema minor 1), as pure functions.

Definitions: docs/contract.md, "Metrics". Two come from the threshold counts alone (so they are exact in
integers, free, and bootstrap like Dice): relevance rank accuracy and the map-vs-region AUROC, both on the
normalised map quantised to the threshold grid, bin k(u) = max{k : tau_k <= M~(u)}. Two need the map and
come from the scoring pass as per-pair columns (:attr:`xbench.score.kernels.counts.DatasetCounts.extra`):
``energy_share`` (energy-based pointing game) and ``hit_tolerant`` (tolerant pointing game).

Against Quantus (understandable-machine-intelligence-lab/Quantus, quantus/metrics/localisation/; by
default it normalises the attribution by its maximum and takes absolute values first):

- its ``RelevanceMassAccuracy`` (the energy-based pointing game) sums the attribution inside the mask over
  the total, on |a| / max|a|; ours sums M~ = min-max normalised, so maps with negative values or a positive
  minimum score differently (equal when the map's minimum is 0), and a constant map gives 0, not |R| / HW;
- its ``RelevanceRankAccuracy`` takes the |R| last indices of ``np.argsort(a)`` (ties broken by the sort, at
  random in effect) on the raw values; ours ranks the quantised map and shares ties exactly (equal on maps
  without ties across the cut whose values are already on the 0.01 grid);
- its ``PointingGame`` counts a hit when any of several tied maxima lies in the mask and has no tolerance;
  ours takes the centroid of the tied cells (the paper's arg max where it is unique; contract "Pointing game"), and the tolerant variant is Zhang et al.'s 15 px rule.

tests/score/metrics/test_new_metrics_quantus.py checks the three against Quantus 0.6.0 on maps where the definitions
must agree (an optional test: ``pip install --no-deps quantus``; skipped without it); the brute-force oracles
of tests/score/metrics/test_new_metrics.py check every definition, edge cases included.

Inputs follow :mod:`xbench.score.metrics.grounding`: ``b``, ``br`` (P, T) with ``b[:, k] = |B_tau_k|`` and
``br[:, k] = |B_tau_k ∩ R|`` (non-increasing in k, ``b[:, 0]`` = all cells), ``region_pixels`` (P,) = |R|.
"""

from __future__ import annotations

import numpy as np

from xbench.score.kernels.pair_stats import ENERGY_COLUMN, TOLERANT_COLUMN
from xbench.score.metrics.params import POINTING_TOLERANCE

__all__ = ["ENERGY_COLUMN", "TOLERANT_COLUMN", "DEFAULT_POINTING_TOLERANCE", "rank_accuracy_from_counts",
           "map_auroc_from_counts"]

# ENERGY_COLUMN, TOLERANT_COLUMN: the per-pair columns in DatasetCounts.extra, declared with their statistics
# (xbench.score.kernels.pair_stats, the layer below).
#: The tolerant pointing game's default distance, read from the parameter its metric declares
#: (:data:`xbench.score.metrics.params.POINTING_TOLERANCE`; kept under this name for existing callers).
DEFAULT_POINTING_TOLERANCE = POINTING_TOLERANCE.default


def _bins(b, br, region_pixels):
    b = np.asarray(b, dtype=np.int64)
    br = np.asarray(br, dtype=np.int64)
    r = np.asarray(region_pixels, dtype=np.int64)
    if b.ndim != 2 or b.shape != br.shape or r.shape != (b.shape[0],):
        raise ValueError(f"`b` and `br` must be (P, T) and `region_pixels` (P,); got {b.shape}, {br.shape}, "
                         f"{r.shape}.")
    # per-bin counts: cells (n) and region cells (nr) whose bin is exactly k; bin T-1 keeps the rest
    zero = np.zeros((b.shape[0], 1), np.int64)
    n = b - np.concatenate([b[:, 1:], zero], axis=1)
    nr = br - np.concatenate([br[:, 1:], zero], axis=1)
    return b, br, r, n, nr


def rank_accuracy_from_counts(b, br, region_pixels) -> np.ndarray:
    """Relevance rank accuracy per pair, (P,) float64: of the K = |R| highest-ranked cells, the share in R.

    Cells are ranked by their bin (the quantised normalised map). Let k* be the largest k with
    ``|B_tau_k| >= K``: the ``b[k*+1]`` cells above bin k* are all taken, and the remaining
    ``K - b[k*+1]`` places go to the ``n`` cells of bin k*, ``nr`` of them in R, as their expected share
    under a uniformly random order of the tie (``(K - b[k*+1]) * nr / n``). One division of exact
    integers: ``(br[k*+1] * n + (K - b[k*+1]) * nr) / (K * n)``.

    Examples
    --------
    Four cells, bins 3, 2, 2, 0; R = the first and the last cell (K = 2): the top cell is in R, the
    second place is shared by two cells outside R, so 1/2.

    >>> b = [[4, 3, 3, 1]]; br = [[2, 1, 1, 1]]
    >>> rank_accuracy_from_counts(b, br, [2]).tolist()
    [0.5]
    """
    b, br, r, n, nr = _bins(b, br, region_pixels)
    T = b.shape[1]
    ks = (b >= r[:, None]).sum(axis=1) - 1  # b non-increasing: the last k with b[k] >= K
    rows = np.arange(b.shape[0])
    above = np.where(ks + 1 < T, b[rows, np.minimum(ks + 1, T - 1)], 0)
    above_r = np.where(ks + 1 < T, br[rows, np.minimum(ks + 1, T - 1)], 0)
    n_k = n[rows, ks]
    num = above_r * n_k + (r - above) * nr[rows, ks]
    return num / (r * n_k)


def map_auroc_from_counts(b, br, region_pixels) -> np.ndarray:
    """Map-vs-region pixel AUROC per pair, (P,) float64; NaN when R covers the whole grid (no negatives).

    The Mann-Whitney probability that a region cell outranks an outside cell, ties counting 1/2, on the
    quantised map: equal to the trapezoid area under the ROC points (FPR_k, TPR_k) =
    ((|B_k| - |B_k ∩ R|) / (HW - |R|), |B_k ∩ R| / |R|). Computed as one division of exact integers:
    ``sum_k neg_k * (2 * pos_above_k + pos_k) / (2 |R| (HW - |R|))``. A constant map gives 0.5.

    Examples
    --------
    >>> b = [[4, 3, 3, 1]]; br = [[2, 1, 1, 1]]
    >>> map_auroc_from_counts(b, br, [2]).tolist()
    [0.5]
    """
    b, br, r, n, nr = _bins(b, br, region_pixels)
    neg = n - nr
    above_r = r[:, None] - np.cumsum(nr, axis=1)  # region cells in bins above k
    num = (neg * (2 * above_r + nr)).sum(axis=1)
    den = 2 * r * (b[:, 0] - r)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
