"""Map complexity: Gini sparseness and entropy of the normalised map, metrics that need nothing but the map.

Both are computed on M~, the map resized to the grid and min-max normalised exactly as for every grounding
metric (contract §Metrics, steps 1-2), flattened to n = H W cells m_1..m_n (all >= 0, the largest 1):

* **Gini sparseness** (Chalasani et al. 2020; Quantus ``Sparseness``): with the cells sorted ascending,
  m_(1) <= ... <= m_(n), and S = sum m_i, G = sum_i (2 i - n - 1) m_(i) / (n S). 0 for a map spread evenly,
  (n - 1) / n for a single hot cell; higher is sparser.
* **Entropy** (Bhatt et al. 2020; Quantus ``Complexity``): p_i = m_i / S, E = -sum_{p_i > 0} p_i ln p_i in
  nats (0 ln 0 = 0). ln n for an even map, 0 for a single hot cell; lower is more concise.

A constant map has no mass after min-max normalisation (every cell 0); it spreads evenly, so G = 0 and
E = ln n. Quantus takes |a| / max|a| first and adds 1e-7 to every cell (Gini) or 1e-12 inside the log
(entropy) for stability; on M~ (non-negative, maximum 1) its normalisation and |.| change nothing, so the
two agree up to those epsilons (tests/score/metrics/test_complexity.py checks it when quantus is importable).

They are opt-in (:data:`xbench.score.metrics.registry.OPT_IN` group ``"complexity"``, ``xbench-score --metrics
complexity``): without it they are not registered, their per-pair columns are never computed, and every
output is byte-identical to a run without this module. Per class (and per phrase category) the value is
the mean over the positive pairs, like every per-pair grounding metric, with the same bootstrap.
"""
from __future__ import annotations

import numpy as np

from xbench.score.kernels import pair_stats as PS
from xbench.score.kernels.maps import _resize_into, numba, resize_plan

__all__ = ["GINI_COLUMN", "ENTROPY_COLUMN", "gini_of_maps", "entropy_of_maps", "METRICS"]

GINI_COLUMN = "gini"
ENTROPY_COLUMN = "entropy"
_GINI, _ENTROPY = 0, 1


@numba.njit(cache=True, nogil=True)
def _complexity_chunk(maps, area, row_idx, row_w, col_idx, col_w, H, W, which, out):
    """``out[p]``: Gini (``which`` 0) or entropy (1) of map ``maps[p]`` resized to (H, W) and normalised."""
    n = H * W
    buf = np.empty((H, W), dtype=np.float64)
    tmp = np.empty((maps.shape[1], W), dtype=np.float64)
    for p in range(maps.shape[0]):
        mn, mx, _ = _resize_into(maps[p], area, row_idx, row_w, col_idx, col_w, tmp, buf)
        if mx == mn:  # no mass: an even spread
            out[p] = 0.0 if which == _GINI else np.log(np.float64(n))
            continue
        v = (buf.ravel() - mn) / (mx - mn)
        s = v.sum()
        if which == _GINI:
            v = np.sort(v)
            acc = 0.0
            for i in range(n):
                acc += (2.0 * (i + 1) - n - 1.0) * v[i]
            out[p] = acc / (n * s)
        else:
            acc = 0.0
            for i in range(n):
                if v[i] > 0.0:
                    q = v[i] / s
                    acc -= q * np.log(q)
            out[p] = acc


def _of_maps(maps, grid, which: int) -> np.ndarray:
    maps = np.ascontiguousarray(maps, dtype=np.float32)
    if maps.ndim != 3:
        raise ValueError(f"maps must be (P, h, w); got shape {maps.shape}")
    out = np.empty(maps.shape[0], dtype=np.float64)
    if maps.shape[0]:
        plan = resize_plan(maps.shape[1:], grid)
        _complexity_chunk(maps, plan.area, plan.row_idx, plan.row_w, plan.col_idx, plan.col_w,
                          int(grid[0]), int(grid[1]), which, out)
    return out


def gini_of_maps(maps, grid: tuple[int, int]) -> np.ndarray:
    """Gini sparseness of each raw map of ``maps`` (P, h, w) float16/32 on ``grid``: (P,) float64."""
    return _of_maps(maps, grid, _GINI)


def entropy_of_maps(maps, grid: tuple[int, int]) -> np.ndarray:
    """Entropy (nats) of each raw map of ``maps`` (P, h, w) float16/32 on ``grid``: (P,) float64."""
    return _of_maps(maps, grid, _ENTROPY)


def _filler(which: int):
    def fill(chunk: PS.Chunk, out: np.ndarray) -> None:
        p = chunk.plan
        H, W = chunk.masks.shape[1:]
        _complexity_chunk(chunk.maps, p.area, p.row_idx, p.row_w, p.col_idx, p.col_w, int(H), int(W), which, out)

    return fill


# Declared always (a declaration computes nothing): the column is filled only while a registered metric reads it.
PS.declare(PS.PairStat(GINI_COLUMN, np.float64, _filler(_GINI), doc="Gini sparseness of the normalised map"))
PS.declare(PS.PairStat(ENTROPY_COLUMN, np.float64, _filler(_ENTROPY), doc="entropy (nats) of the normalised map"))


def _metrics():
    from xbench.score.metrics.registry import Metric

    both = ("class", "phrase")
    return (
        Metric("gini", "Gini sparseness of the normalised map", "Gini", "grounding",
               PS.column(GINI_COLUMN, np.float64), pairs=PS.present(GINI_COLUMN), fmt="number", minor=1,
               scopes=both, needs=(GINI_COLUMN,),
               doc="sum (2i - n - 1) m_(i) / (n sum m) over the sorted cells (Quantus Sparseness)"),
        Metric("entropy", "Entropy of the normalised map (nats)", "Entropy", "grounding",
               PS.column(ENTROPY_COLUMN, np.float64), pairs=PS.present(ENTROPY_COLUMN), fmt="number", minor=1,
               higher_is_better=False, scopes=both, needs=(ENTROPY_COLUMN,),
               doc="-sum p ln p, p = m / sum m (Quantus Complexity)"),
    )


#: the opt-in group's metrics (registered only inside :func:`xbench.score.metrics.registry.opt_in`)
METRICS = _metrics()
