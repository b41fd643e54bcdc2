"""Localisation and recognition metrics on plain arrays, scikit-learn style (``xbench.metrics``).

The functions take saliency maps and region masks as NumPy arrays and run the scorer's own kernels
(:mod:`xbench.score.kernels.maps`) and per-pair formulas (:mod:`xbench.score.metrics.grounding`,
:mod:`xbench.score.metrics.localisation`): a value here equals the class value ``xbench-score`` writes to
metrics.json for the same pairs. Definitions: docs/contract.md, "Metrics".

Shapes: ``maps`` (N, h, w), any float dtype (float64 is rounded to float32, the precision of a
submission), any map size; ``masks`` (N, H, W) bool, the regions on the evaluation grid. Each map is
resized to its mask's grid (bilinear, or area averaging when the map is larger) and min-max normalised;
a constant map becomes all zeros. Every pair must have a non-empty region. Each function returns the
mean over the N pairs, or the (N,) per-pair values with ``average=False``; the mean over no pair is
NaN.

Needs only the scorer install (NumPy and Numba; no torch, no pandas).

>>> import numpy as np
>>> from xbench import metrics
>>> maps = np.array([[[0, 1], [0, 0]], [[2, 0], [0, 1]]], dtype=np.float32)
>>> masks = np.zeros((2, 4, 4), bool); masks[:, :2, 2:] = True   # top-right quarter
>>> metrics.pointing_game(maps, masks)
0.5
"""

from __future__ import annotations

import numpy as np

from xbench.score.metrics.params import POINTING_TOLERANCE

__all__ = [
    "pointing_game",
    "dice_score",
    "iou_score",
    "best_threshold",
    "energy_pointing_game",
    "relevance_rank_accuracy",
    "map_auroc",
    "tolerant_pointing_game",
    "auroc",
    "auprc",
]


def _counts(maps, masks, **kw):
    from xbench.score.kernels import maps as K

    m = np.asarray(maps)
    if m.dtype.kind != "f":
        raise TypeError(f"`maps` must hold floats; found {m.dtype}. Convert with `.astype(np.float32)`.")
    if m.dtype == np.float64:
        m = m.astype(np.float32)  # the precision a submission stores
    r = np.asarray(masks)
    if r.ndim == 3 and r.dtype == np.bool_ and r.shape[0] and not r.reshape(r.shape[0], -1).any(axis=1).all():
        raise ValueError("every mask must hold at least one True cell: the metrics are defined on positive pairs.")
    return K.grounding_counts(m, r, **kw)


def _mean(values, average: bool, defined=None):
    v = np.asarray(values, dtype=np.float64)
    if not average:
        return v
    if defined is not None:
        v = v[defined]
    return float(v.mean()) if v.size else float("nan")


def pointing_game(maps, masks, *, average: bool = True):
    """Pointing game: 1 when the peak of the resized map lies in the region. The peak is the maximum's cell,
    or, when several cells tie for the maximum, their centroid rounded to the nearest cell (a binary mask points
    at its middle, not its first cell); a constant map has none (a miss). Contract, "Pointing game".

    Parameters
    ----------
    maps : float array (N, h, w)
    masks : bool array (N, H, W)
    average : bool
        Mean over pairs (default) or the (N,) hits as 0.0 / 1.0.

    Returns
    -------
    float or ndarray (N,)

    Examples
    --------
    >>> import numpy as np
    >>> maps = np.zeros((1, 3, 3), np.float32); maps[0, 2, 2] = 1
    >>> masks = np.zeros((1, 3, 3), bool); masks[0, 2, 2] = True
    >>> pointing_game(maps, masks)
    1.0

    A mask points at its centroid; a constant map points nowhere:

    >>> mask_map = np.zeros((1, 3, 3), np.float32); mask_map[0, 1:, 1:] = 1   # 4 cells tied: peak (2, 2)
    >>> pointing_game(mask_map, masks), pointing_game(mask_map[:, :, ::-1].copy(), masks)
    (1.0, 0.0)
    >>> pointing_game(np.ones((1, 3, 3), np.float32), np.ones((1, 3, 3), bool))
    0.0
    """
    return _mean(_counts(maps, masks).hit, average)


def _threshold_values(maps, masks, threshold: float, metric: str):
    from xbench.score.metrics.grounding import dice_from_counts, iou_from_counts, threshold_index

    k = threshold_index(threshold)
    g = _counts(maps, masks)
    fn = {"dice": dice_from_counts, "iou": iou_from_counts}[metric]
    return fn(g.b[:, k:k + 1], g.br[:, k:k + 1], g.region_pixels)[:, 0]


def dice_score(maps, masks, *, threshold: float = 0.5, average: bool = True):
    """Dice of B = {u : M~(u) >= threshold} against the region: 2|B∩R| / (|B| + |R|).

    ``threshold`` must lie on the grid k / 100 (0.00 ... 1.00). A constant map has B = the whole grid
    at threshold 0 and B empty above it.

    Examples
    --------
    >>> import numpy as np
    >>> maps = np.array([[[0, 1], [0, 1]]], np.float32)     # right half hot
    >>> masks = np.zeros((1, 2, 2), bool); masks[0, :, 1] = True
    >>> dice_score(maps, masks)
    1.0
    >>> dice_score(maps, masks, threshold=0.0)              # B = every cell: 2*2 / (4 + 2)
    0.6666666666666666
    """
    return _mean(_threshold_values(maps, masks, threshold, "dice"), average)


def iou_score(maps, masks, *, threshold: float = 0.5, average: bool = True):
    """IoU of B = {u : M~(u) >= threshold} against the region: |B∩R| / |B∪R| (threshold on the 0.01 grid).

    Examples
    --------
    >>> import numpy as np
    >>> maps = np.array([[[0, 1], [0, 1]]], np.float32)
    >>> masks = np.zeros((1, 2, 2), bool); masks[0, :, 1] = True
    >>> iou_score(maps, masks, threshold=0.0)
    0.5
    """
    return _mean(_threshold_values(maps, masks, threshold, "iou"), average)


def best_threshold(maps, masks, *, metric: str = "dice") -> tuple[float, float]:
    """The threshold tau_k = k / 100 maximising the mean Dice (or IoU) over the pairs, ties to the smallest.

    Returns
    -------
    (tau, score) : the chosen threshold and the mean Dice or IoU there; (nan, nan) for N = 0.

    Examples
    --------
    >>> import numpy as np
    >>> maps = np.array([[[0.0, 0.3], [0.6, 1.0]]], np.float32)
    >>> masks = np.zeros((1, 2, 2), bool); masks[0, 1, :] = True   # bottom row: values 0.6 and 1.0
    >>> best_threshold(maps, masks)
    (0.31, 1.0)
    """
    from xbench.score.metrics.grounding import best_threshold as first_max, class_mean_curves
    from xbench.score.kernels.maps import THRESHOLDS

    if metric not in ("dice", "iou"):
        raise ValueError(f"`metric` must be 'dice' or 'iou'; got {metric!r}.")
    g = _counts(maps, masks)
    if g.b.shape[0] == 0:
        return float("nan"), float("nan")
    dice, iou = class_mean_curves(g.b, g.br, g.region_pixels)
    curve = dice if metric == "dice" else iou
    k = first_max(curve)
    return float(THRESHOLDS[k]), float(curve[k])


def energy_pointing_game(maps, masks, *, average: bool = True):
    """Energy-based pointing game: the share of the normalised map's mass inside the region,
    sum(M~ over R) / sum(M~); 0 for a constant map (it has no mass).

    Examples
    --------
    >>> import numpy as np
    >>> maps = np.array([[[0, 1], [2, 1]]], np.float32)     # M~ = [[0, .5], [1, .5]], mass 2
    >>> masks = np.zeros((1, 2, 2), bool); masks[0, 1, :] = True
    >>> energy_pointing_game(maps, masks)
    0.75
    """
    return _mean(_counts(maps, masks).energy, average)


def relevance_rank_accuracy(maps, masks, *, average: bool = True):
    """Relevance rank accuracy (Arras et al. 2022): of the |R| highest-ranked cells, the share inside R.

    Cells are ranked by M~ quantised to the threshold grid (bin k = max{k : k/100 <= M~}); cells tied
    at the cut share the remaining places (their expected hits under a random order).

    Examples
    --------
    >>> import numpy as np
    >>> maps = np.array([[[3, 2], [2, 0]]], np.float32)
    >>> masks = np.zeros((1, 2, 2), bool); masks[0, 0, 0] = masks[0, 1, 1] = True
    >>> relevance_rank_accuracy(maps, masks)   # top cell in R; 2nd place shared by two cells outside
    0.5
    """
    from xbench.score.metrics.localisation import rank_accuracy_from_counts

    g = _counts(maps, masks)
    return _mean(rank_accuracy_from_counts(g.b, g.br, g.region_pixels), average)


def map_auroc(maps, masks, *, average: bool = True):
    """Pixel AUROC of the map against the region: the probability that a region cell outranks an outside
    cell, ties counting 1/2, on M~ quantised to the threshold grid (the trapezoid area under the
    (FPR, TPR) points of the 101 thresholds). NaN for a region covering the whole grid (left out of
    the mean); 0.5 for a constant map.

    Examples
    --------
    >>> import numpy as np
    >>> maps = np.array([[[3, 2], [2, 0]]], np.float32)
    >>> masks = np.zeros((1, 2, 2), bool); masks[0, 0, 0] = masks[0, 1, 1] = True
    >>> map_auroc(maps, masks)
    0.5
    >>> map_auroc(maps, np.ones((1, 2, 2), bool))
    nan
    """
    from xbench.score.metrics.localisation import map_auroc_from_counts

    g = _counts(maps, masks)
    v = map_auroc_from_counts(g.b, g.br, g.region_pixels)
    return _mean(v, average, defined=~np.isnan(v))


def tolerant_pointing_game(maps, masks, *, tolerance: float = POINTING_TOLERANCE.default, pixel_size=1.0,
                           average: bool = True):
    """Tolerant pointing game (Zhang et al. 2018): a hit when the peak (as :func:`pointing_game`'s) lies
    within ``tolerance`` of the region, measured between cell centres: sqrt((dr * cell_h)^2 + (dc * cell_w)^2).

    Parameters
    ----------
    tolerance : float
        Distance in the unit of ``pixel_size`` (the scorer: original image pixels, default 15).
    pixel_size : float, (2,) or (N, 2)
        Size of one grid cell (height, width) in that unit, e.g. ``orig_size / grid`` per case; 1 =
        grid cells. Tolerance 0 is the plain pointing game.

    Examples
    --------
    >>> import numpy as np
    >>> maps = np.zeros((1, 4, 4), np.float32); maps[0, 0, 3] = 1   # peak one cell right of R
    >>> masks = np.zeros((1, 4, 4), bool); masks[0, 0, 2] = True
    >>> tolerant_pointing_game(maps, masks, tolerance=15, pixel_size=16.0)
    0.0
    >>> tolerant_pointing_game(maps, masks, tolerance=16, pixel_size=16.0)
    1.0
    """
    size = np.asarray(pixel_size, dtype=np.float64)
    n = np.shape(maps)[0] if np.ndim(maps) else 0
    cell = np.broadcast_to(size, (2,)) if size.ndim == 0 else size
    g = _counts(maps, masks, tolerance=tolerance, cell=np.broadcast_to(cell, (n, 2)) if cell.ndim == 1 else cell)
    return _mean(g.hit_tolerant, average)


def auroc(y_true, y_score) -> float:
    """Area under the ROC curve of scores against 0/1 labels (ties 1/2, as scikit-learn); NaN unless both
    labels occur.

    >>> auroc([0, 0, 1, 1], [0.1, 0.6, 0.4, 0.8])
    0.75
    """
    from xbench.score.kernels.maps import weighted_auroc_ap

    return _rank(y_true, y_score, weighted_auroc_ap)[0]


def auprc(y_true, y_score) -> float:
    """Average precision (step-wise, as scikit-learn's ``average_precision_score``); NaN unless both labels
    occur.

    >>> round(auprc([0, 0, 1, 1], [0.1, 0.6, 0.4, 0.8]), 6)
    0.833333
    """
    from xbench.score.kernels.maps import weighted_auroc_ap

    return _rank(y_true, y_score, weighted_auroc_ap)[1]


def _rank(y_true, y_score, fn):
    y = np.asarray(y_true)
    s = np.asarray(y_score, dtype=np.float64)
    if y.ndim != 1 or y.shape != s.shape or (y.size and not np.isin(y, (0, 1)).all()):
        raise ValueError("`y_true` must be 0/1 labels and `y_score` scores of the same length (1-D).")
    a, p = fn(np.ones((1, y.size)), y.astype(bool), s)
    return float(a[0]), float(p[0])
