"""The saliency benchmark's measures: a model's map against where a radiologist looked (issue 37).

Each measure compares one map ``M`` on the evaluation grid (H, W) (float64; the model's min-max normalised
map ``M~`` in the scorer, or the readers' mean map in the gaze ceiling) with one reading's gaze: its
fixation-density map ``G`` (gt.zarr ``gaze_map``, on the same grid) or its fixations, each mapped to the
grid cell that holds it (:func:`fixation_cells`). The definitions follow Bylinskii et al. (TPAMI 2019) as
implemented by pysaliency 0.2.22 (the MIT/Tübingen saliency benchmark's code); docs/contract.md
§"Gaze measures" states each one with its normalisation and epsilon and cites pysaliency file:line.

* NSS: the mean over the fixations inside the image of ``(M[y, x] - mean(M)) / std(M)`` (population std;
  a constant map is not divided: every value is 0); a fixation counted as often as it occurs.
* CC: Pearson's correlation of ``M`` and ``G``; 0 when ``M`` is constant and ``G`` is not; undefined when
  ``G`` is constant.
* SIM: ``sum(min(P, Q))`` of the two maps as densities (:func:`density`).
* KL: ``sum(Q * log(eps + Q / (P + eps)))``, ``eps = 2.2204e-16`` (the MIT benchmark's), ``P`` the map's
  density, ``Q`` the gaze density (:func:`density`).
* AUC-Judd: the map plus ``1e-7`` standard normal noise (``numpy.random.RandomState(42)``, drawn fresh per
  row, to break ties as the benchmark does); positives the values at the fixations (repeats kept), negatives
  the values of every cell no fixation falls in; thresholds the positive values (plus one above the maximum
  and the minimum); the trapezoid area under (false positive rate, hit rate) from (0, 0).
* shuffled AUC: positives as above (no noise); negatives the cells of every fixation of the dataset's
  *other* images (their position scaled to this grid, repeats kept); all values as thresholds, i.e. the
  Mann-Whitney AUC with ties counted one half.

Every measure returns a float or None (undefined: no fixation inside the image, a gaze map of zeros, no
negative). The brute-force references are in tests/score/metrics/test_gaze_measures.py; the arithmetic here is
vectorised NumPy: a few passes over the H*W cells, the AUCs searching each cell among the row's few fixated
values instead of sorting the map (all six: about 6 ms a row on a 224 x 224 grid), so a Numba kernel does not
pay.
"""
from __future__ import annotations

import functools

import numpy as np

from xbench.schemas import grid as exact_grid
from xbench.score.kernels.saliency import shuffled_ranks, threshold_bins

__all__ = ["KL_EPS", "JITTER", "JITTER_SEED", "MEASURES", "LOWER_IS_BETTER", "fixation_cells", "density",
           "nss", "cc", "sim", "kl", "auc_judd", "auc_shuffled", "cell_counts", "all_measures"]

#: the MIT saliency benchmark's regularisation of KL (pysaliency metrics.py:96-97)
KL_EPS = 2.2204e-16
#: AUC-Judd's tie-breaking noise: its standard deviation and seed (pysaliency saliency_map_models.py:502)
JITTER = 1e-7
JITTER_SEED = 42
#: the measures in the order metrics.json and the tables give them
MEASURES = ("nss", "cc", "sim", "kl", "auc_judd", "auc_shuffled")
#: the measures where a smaller value is the better one
LOWER_IS_BETTER = frozenset({"kl"})


def _map(m, name: str = "map") -> np.ndarray:
    a = np.asarray(m, dtype=np.float64)
    if a.ndim != 2 or 0 in a.shape:
        raise ValueError(f"`{name}` must be one non-empty 2-D map (H, W); got shape {a.shape}.")
    if not np.isfinite(a).all():
        raise ValueError(f"`{name}` holds NaN or infinite values; a map must be finite.")
    return a


def fixation_cells(xy, orig_size, grid) -> tuple[np.ndarray, np.ndarray]:
    """The grid cells (rows, cols; int64) of the fixations inside the image, in order, repeats kept.

    ``xy``: (F, 2+) x, y in original pixels (x to the right, y down); ``orig_size``: the image's (height,
    width) in pixels; ``grid``: (H, W). The image is ``0 <= x < width``, ``0 <= y < height``; a fixation
    outside it (on or beyond the right or bottom edge, or negative) is left out. The cell is
    ``floor(x * W / width)`` (and likewise for y) in exact arithmetic: the cell whose span of original pixels
    holds the point, a point exactly on a cell edge in the cell after it.
    """
    a = np.asarray(xy, dtype=np.float64)
    if a.size == 0:
        a = a.reshape(0, 2)
    if a.ndim != 2 or a.shape[1] < 2:
        raise ValueError(f"fixations must be (F, 2) or (F, 3) rows of x, y[, duration]; got shape {a.shape}.")
    h, w = (float(s) for s in orig_size)
    H, W = (int(s) for s in grid)
    if not (h > 0 and w > 0 and H > 0 and W > 0):
        raise ValueError(f"image size {tuple(orig_size)} and grid {tuple(grid)} must be positive.")
    x, y = a[:, 0], a[:, 1]
    inside = np.isfinite(x) & np.isfinite(y) & (x >= 0) & (x < w) & (y >= 0) & (y < h)
    # exactly, not from the float product x * W (which can round up onto the next cell's edge)
    cols = exact_grid.point_cells(x[inside], int(w), W)
    rows = exact_grid.point_cells(y[inside], int(h), H)
    return rows, cols


def cell_counts(rows, cols, grid) -> np.ndarray:
    """How many fixations fall in each cell, int64 (H, W)."""
    H, W = (int(s) for s in grid)
    return np.bincount(np.asarray(rows, np.int64) * W + np.asarray(cols, np.int64), minlength=H * W).reshape(H, W)


def _density(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    if a.min() < 0:
        a = a - a.min()
    s = a.sum()
    return a / s if s else np.full(a.shape, 1.0 / a.size)


def density(m) -> np.ndarray:
    """A map as a density: shifted by its minimum when that is negative, then divided by its sum; a map
    summing to 0 becomes uniform (pysaliency metrics.py:23-35, ``minimum_value=0``)."""
    return _density(_map(m))


def _check_cells(m: np.ndarray, rows, cols) -> tuple[np.ndarray, np.ndarray]:
    r, c = np.asarray(rows, np.int64).ravel(), np.asarray(cols, np.int64).ravel()
    if r.shape != c.shape:
        raise ValueError(f"fixation rows and cols differ in length: {r.size} and {c.size}.")
    if r.size and (r.min() < 0 or c.min() < 0 or r.max() >= m.shape[0] or c.max() >= m.shape[1]):
        raise ValueError(f"fixation cells must lie on the {m.shape} grid (see fixation_cells).")
    return r, c


def _pair(m, g) -> tuple[np.ndarray, np.ndarray]:
    a, b = _map(m), _map(g, "gaze map")
    if a.shape != b.shape:
        raise ValueError(f"the map {a.shape} and the gaze map {b.shape} must have one shape.")
    return a, b


def _negatives(a: np.ndarray, negative_counts) -> np.ndarray:
    n = np.asarray(negative_counts)
    if n.shape != a.shape or (n.size and n.min() < 0):
        raise ValueError(f"negative counts must be non-negative, one per cell of the {a.shape} grid; got {n.shape}.")
    return n


# -- the measures: each public function checks its arguments and calls its core; all_measures checks a row's
# -- arguments once and calls the cores (which compute exactly what the public functions give)
def _nss(a: np.ndarray, r: np.ndarray, c: np.ndarray) -> float:
    v = a[r, c] - a.mean()
    sd = a.std()
    if sd:
        v = v / sd
    return float(v.mean())


def nss(m, rows, cols) -> float | None:
    """Normalised scanpath saliency; None without a fixation (pysaliency metrics.py:38-52, averaged)."""
    a = _map(m)
    r, c = _check_cells(a, rows, cols)
    return _nss(a, r, c) if r.size else None


def _cc(a: np.ndarray, b: np.ndarray) -> float | None:
    a, b = a - a.mean(), b - b.mean()
    sa, sb = a.std(), b.std()
    if not sb:
        return None
    if not sa:
        return 0.0
    return float(np.clip(np.mean((a / sa) * (b / sb)), -1.0, 1.0))


def cc(m, g) -> float | None:
    """Pearson's correlation of the map and the gaze map (pysaliency metrics.py:55-72); 0 for a constant map
    against a gaze map that is not; None for a constant gaze map (pysaliency: NaN)."""
    return _cc(*_pair(m, g))


def _sim(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.minimum(p, q).sum())


def sim(m, g) -> float | None:
    """Similarity (histogram intersection) of the two densities (pysaliency metrics.py:101-106)."""
    a, b = _pair(m, g)
    return _sim(_density(a), _density(b))


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    return float((q * np.log(KL_EPS + q / (p + KL_EPS))).sum())


def kl(m, g) -> float | None:
    """KL divergence of the map's density from the gaze density, the MIT benchmark's epsilon in the log and
    the quotient (pysaliency metrics.py:75-98)."""
    a, b = _pair(m, g)
    return _kl(_density(a), _density(b))


def _trapezoid(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0))


@functools.lru_cache(maxsize=8)
def _jitter(shape: tuple) -> np.ndarray:
    a = np.random.RandomState(JITTER_SEED).randn(*shape) * JITTER
    a.flags.writeable = False  # shared by every row of one grid
    return a


def jitter(shape) -> np.ndarray:
    """AUC-Judd's noise for one map: ``JITTER`` x standard normal from ``RandomState(JITTER_SEED)`` (the same
    for every map of one shape: each row's draw starts from the seed)."""
    return _jitter(tuple(int(s) for s in shape))


def _auc_judd(a: np.ndarray, r: np.ndarray, c: np.ndarray) -> float | None:
    a = a + jitter(a.shape)
    fixated = np.zeros(a.shape, dtype=bool)
    fixated[r, c] = True
    pos = np.sort(a[r, c])
    neg = a[~fixated]
    if not neg.size:
        return None
    lo, hi = min(pos[0], neg.min()), max(pos[-1], neg.max()) + 1.0
    thr = np.concatenate([[lo], pos, [hi]])  # ascending; the curve runs over them in decreasing order
    tp = pos.size - np.searchsorted(pos, thr, side="left")  # positives >= each threshold
    # negatives >= each threshold, without sorting them: each negative counts for the thresholds <= it (the
    # kernel bins every unfixated cell by searchsorted(thr, v, "right"), as np.bincount of that search would)
    below = threshold_bins(a.ravel(), fixated.ravel(), thr)
    fp = np.cumsum(below[::-1])[::-1][1:]  # fp[j] = #{neg : thr[j] <= neg}
    x = np.concatenate([[0.0], fp[::-1] / neg.size])
    y = np.concatenate([[0.0], tp[::-1] / pos.size])
    return _trapezoid(x, y)


def auc_judd(m, rows, cols) -> float | None:
    """AUC-Judd (pysaliency saliency_map_models.py:502-518 with numba_utils.py:52-92, ``judd=1``); None
    without a fixation or when every cell is fixated."""
    a = _map(m)
    r, c = _check_cells(a, rows, cols)
    return _auc_judd(a, r, c) if r.size else None


def _auc_shuffled(a: np.ndarray, r: np.ndarray, c: np.ndarray, n: np.ndarray) -> float | None:
    total = float(n.sum())
    if not total:
        return None
    pos = np.sort(a[r, c])
    # each negative: the positives above it count 1, those equal to it 1/2 (no sort of the map); the kernel sums
    # count x (2 above + equal) in integers, so the quotient is exactly sum(count x (above + equal / 2)) / (k n)
    twice = shuffled_ranks(a.ravel(), n.ravel().astype(np.int64), pos)
    return float(twice / (2.0 * pos.size * total))


def auc_shuffled(m, rows, cols, negative_counts) -> float | None:
    """Shuffled AUC (pysaliency saliency_map_models.py:50-69 and 362-441 with ``nonfixations='shuffled'``,
    numba_utils.py:52-92 with ``judd=0``): the fixations' values against the values at the other images'
    fixations, given as ``negative_counts`` (H, W), how many of those fall in each cell; the Mann-Whitney
    AUC, ties one half. None without a fixation or a negative."""
    a = _map(m)
    r, c = _check_cells(a, rows, cols)
    n = _negatives(a, negative_counts)
    return _auc_shuffled(a, r, c, n) if r.size else None


def all_measures(m, g, rows, cols, negative_counts) -> dict[str, float | None]:
    """Every measure of one row, in :data:`MEASURES` order; all None when the reading has no fixation inside
    the image (its gaze map is then zeros: nothing to compare). The row's arguments are checked once and each
    density computed once; the values are those of the six public functions."""
    a, b = _pair(m, g)
    r, c = _check_cells(a, rows, cols)
    n = _negatives(a, negative_counts)
    if not r.size:
        return dict.fromkeys(MEASURES)
    p, q = _density(a), _density(b)
    return {"nss": _nss(a, r, c), "cc": _cc(a, b), "sim": _sim(p, q), "kl": _kl(p, q),
            "auc_judd": _auc_judd(a, r, c), "auc_shuffled": _auc_shuffled(a, r, c, n)}
