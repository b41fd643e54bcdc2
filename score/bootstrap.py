"""Percentile bootstrap intervals from per-pair counts, and a paired bootstrap of two submissions.

Method (contract, "Uncertainty"): cases are resampled with replacement *within a dataset* (all classes of a
case move together), exactly ``n_resamples`` times, from an explicit ``numpy.random.Generator``. A resample
is represented by its multiplicity vector ``w`` (how often each case was drawn), so a class statistic on a
resample is a ``w``-weighted statistic over the original pairs, computed with matrix products instead of
copying data. In every resample the best threshold is re-chosen (unless thresholds were transferred), a
class with no positive pair (or a single label value) in that resample is left out of its dataset mean,
and the 95 % interval is ``numpy.nanpercentile(replicates, [2.5, 97.5])`` (linear interpolation) over the
resamples where the statistic is defined.

Known bias: the percentile interval of a max-over-thresholds statistic is biased upwards, and it is
optimistic for classes with few positive pairs (a resample cannot show a region it never drew); treat
intervals of classes with fewer than ~20 positive pairs as indicative only.

Paired comparisons: :func:`paired_bootstrap` draws one set of case resamples per dataset and applies it to
both submissions, so the interval of the *difference* accounts for the cases they share.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from .counts import DatasetCounts
from .grounding import FIXED_THRESHOLD_INDEX, dice_from_counts, iou_from_counts
from .kernels import _ranked_replicates, rank_order
from .recognition import f1_from_counts

__all__ = [
    "GROUNDING_KEYS",
    "RECOGNITION_KEYS",
    "resample_weights",
    "grounding_replicates",
    "recognition_replicates",
    "dataset_replicates",
    "percentile_interval",
    "paired_bootstrap",
]

GROUNDING_KEYS = ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best")
RECOGNITION_KEYS = ("auroc", "auprc", "f1", "accuracy")
_CHUNK = 125  # resamples per block at most
_BLOCK_WEIGHTS = 4_000_000  # and at most this many case weights per block


def resample_weights(n_cases: int, n_resamples: int, rng: np.random.Generator,
                     *, chunk: int | None = None) -> Iterator[np.ndarray]:
    """Yield blocks of case multiplicities, float64 (b, n_cases), ``n_resamples`` rows in all.

    Row r counts how often each case was drawn in resample r (``n_cases`` draws with replacement, uniform).
    The draws consume ``rng`` in order, so the same seed gives the same resamples whatever the block size;
    blocks default to at most ~4 M weights (32 MB) so memory does not grow with the number of resamples.
    """
    if n_resamples < 0 or n_cases < 0:
        raise ValueError(f"n_resamples and n_cases must be >= 0; got {n_resamples} and {n_cases}.")
    if chunk is None:
        chunk = max(8, min(_CHUNK, _BLOCK_WEIGHTS // max(n_cases, 1)))
    done = 0
    while done < n_resamples:
        b = min(chunk, n_resamples - done)
        draws = rng.integers(0, n_cases, size=(b, n_cases)) if n_cases else np.zeros((b, 0), np.int64)
        flat = draws + (np.arange(b, dtype=np.int64) * n_cases)[:, None]
        yield np.bincount(flat.ravel(), minlength=b * n_cases).reshape(b, n_cases).astype(np.float64)
        done += b


def _first_max_rows(means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = np.argmax(means, axis=1)  # first maximum = smallest tau on ties
    return means[np.arange(means.shape[0]), k], k


def grounding_replicates(w: np.ndarray, hit: np.ndarray, dice: np.ndarray, iou: np.ndarray,
                         *, tau_dice: int | None = None, tau_iou: int | None = None) -> dict[str, np.ndarray]:
    """Class grounding statistics on each resample.

    Parameters
    ----------
    w : (B, P) float64
        Multiplicity of each positive pair of the class in each resample (its case's multiplicity).
    hit : (P,) bool; dice, iou : (P, T) float64
        Per-pair values from the counts.
    tau_dice, tau_iou : int, optional
        Threshold indices to use instead of re-choosing the best one in each resample.

    Returns
    -------
    dict of (B,) float64, keyed by :data:`GROUNDING_KEYS`; NaN where a resample drew no positive pair.
    """
    wsum = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        inv = np.where(wsum > 0, 1.0 / np.where(wsum > 0, wsum, 1.0), np.nan)
        dm = (w @ dice) * inv[:, None]
        im = (w @ iou) * inv[:, None]
        out = {"pointing_game": (w @ hit.astype(np.float64)) * inv,
               "dice_fixed": dm[:, FIXED_THRESHOLD_INDEX], "iou_fixed": im[:, FIXED_THRESHOLD_INDEX]}
    out["dice_best"] = _first_max_rows(np.nan_to_num(dm, nan=-1.0))[0] if tau_dice is None else dm[:, tau_dice]
    out["iou_best"] = _first_max_rows(np.nan_to_num(im, nan=-1.0))[0] if tau_iou is None else im[:, tau_iou]
    for key in ("dice_best", "iou_best"):
        out[key] = np.where(wsum > 0, out[key], np.nan)
    return out


def _recognition_vectors(y, p, n_cases: int, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Per-case indicator vectors (N,) and rank order of one class's labelled cases ``rows``."""
    pos = np.asarray(y) == 1
    y_hat = np.asarray(p) >= 0.5
    vec = {}
    for key, v in (("tp", y_hat & pos), ("fp", y_hat & ~pos), ("fn", ~y_hat & pos), ("correct", y_hat == pos),
                   ("labelled", np.ones_like(pos))):
        full = np.zeros(n_cases)
        full[rows] = v
        vec[key] = full
    vec["rank"] = rank_order(pos, p, rows)
    return vec


def _recognition_from_vectors(w: np.ndarray, vec: dict, wt: np.ndarray | None = None) -> dict[str, np.ndarray]:
    auroc, ap = _ranked_replicates(np.ascontiguousarray(w.T) if wt is None else wt, *vec["rank"])
    tp, fp, fn = w @ vec["tp"], w @ vec["fp"], w @ vec["fn"]
    total = w @ vec["labelled"]
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(total > 0, (w @ vec["correct"]) / total, np.nan)
    f1 = np.where(total > 0, f1_from_counts(tp, fp, fn), np.nan)
    return {"auroc": auroc, "auprc": ap, "f1": f1, "accuracy": acc}


def recognition_replicates(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
    """Class recognition statistics on each resample.

    Parameters
    ----------
    w : (B, n) float64
        Multiplicity of each labelled case of the class in each resample.
    y : (n,) int, 0 or 1; p : (n,) float64
        Labels and probabilities of the labelled cases.

    Returns
    -------
    dict of (B,) float64 keyed by :data:`RECOGNITION_KEYS`; AUROC/AUPRC NaN where a resample holds a
    single label value, everything NaN where it holds no labelled case.
    """
    w = np.ascontiguousarray(w, dtype=np.float64)
    n = w.shape[1]
    return _recognition_from_vectors(w, _recognition_vectors(y, p, n, np.arange(n)))


def _class_cache(dc: DatasetCounts, c: int) -> dict:
    """Everything a resample needs about class column ``c``, computed once per dataset."""
    out: dict = {}
    idx = dc.class_pairs(c)
    if idx.size:
        out["pair_case"] = dc.pair_case[idx]
        out["hit"] = dc.hit[idx]
        out["dice"] = dice_from_counts(dc.b[idx], dc.br[idx], dc.region_pixels[idx])
        out["iou"] = iou_from_counts(dc.b[idx], dc.br[idx], dc.region_pixels[idx])
    rows = np.flatnonzero(dc.labels[:, c] != -1)
    out["recognition"] = _recognition_vectors(dc.labels[rows, c], dc.prob[rows, c], dc.n_cases, rows)
    return out


def dataset_replicates(dc: DatasetCounts, w_cases: np.ndarray, *, taus: dict[str, tuple[int, int]] | None = None,
                       per_pair: dict | None = None
                       ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Replicates of every class statistic and of the dataset summary for one block of case resamples.

    Parameters
    ----------
    dc : DatasetCounts
    w_cases : (B, N) float64
        Case multiplicities from :func:`resample_weights`.
    taus : dict, optional
        {class: (dice index, iou index)} to use fixed (transferred) thresholds instead of re-choosing.
    per_pair : dict, optional
        A dict kept between blocks of the same dataset, caching the per-class Dice/IoU matrices, indicator
        vectors and rank orders so each block only does the weighted sums.

    Returns
    -------
    (classes, summary): ``classes[name][key]`` and ``summary[key]`` are (B,) float64 arrays (NaN =
    undefined in that resample); the summary is the mean over classes defined in each resample, plus
    ``hamming_accuracy``.
    """
    cache = per_pair if per_pair is not None else {}
    w_cases = np.ascontiguousarray(w_cases, dtype=np.float64)
    B = w_cases.shape[0]
    w_t = np.ascontiguousarray(w_cases.T)  # (N, B), shared by every class's rank kernel
    classes: dict[str, dict[str, np.ndarray]] = {}
    for c, name in enumerate(dc.classes):
        if not dc.supported[c]:
            continue
        if c not in cache:
            cache[c] = _class_cache(dc, c)
        cc = cache[c]
        stats: dict[str, np.ndarray] = {}
        if "dice" in cc:
            td, ti = (taus or {}).get(name, (None, None))
            stats.update(grounding_replicates(w_cases[:, cc["pair_case"]], cc["hit"], cc["dice"], cc["iou"],
                                              tau_dice=td, tau_iou=ti))
        else:
            stats.update({k: np.full(B, np.nan) for k in GROUNDING_KEYS})
        stats.update(_recognition_from_vectors(w_cases, cc["recognition"], w_t))
        classes[name] = stats
    summary: dict[str, np.ndarray] = {}
    for key in GROUNDING_KEYS + RECOGNITION_KEYS:
        if classes:
            stack = np.stack([s[key] for s in classes.values()])
            with np.errstate(invalid="ignore"), _quiet_nanmean():
                summary[key] = np.nanmean(stack, axis=0)
        else:
            summary[key] = np.full(B, np.nan)
    if "hamming" not in cache:
        cols = [c for c in range(len(dc.classes)) if dc.supported[c]]
        lab = dc.labels[:, cols]
        known = (lab != -1).sum(axis=1).astype(np.float64)
        correct = (((dc.prob[:, cols] >= 0.5) == (lab == 1)) & (lab != -1)).sum(axis=1).astype(np.float64)
        cache["hamming"] = (known, correct)
    known, correct = cache["hamming"]
    tot = w_cases @ known
    with np.errstate(invalid="ignore", divide="ignore"):
        summary["hamming_accuracy"] = np.where(tot > 0, (w_cases @ correct) / tot, np.nan)
    return classes, summary


class _quiet_nanmean:
    """Silence numpy's "Mean of empty slice" for all-NaN columns (they are expected: undefined resamples)."""

    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def percentile_interval(replicates: np.ndarray, level: float = 0.95) -> list[float] | None:
    """[lo, hi] percentile interval over the defined (non-NaN) replicates; None when none is defined."""
    r = np.asarray(replicates, dtype=np.float64)
    r = r[~np.isnan(r)]
    if r.size == 0:
        return None
    a = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(r, [a, 100.0 - a])
    return [float(lo), float(hi)]


def paired_bootstrap(a: dict[str, DatasetCounts], b: dict[str, DatasetCounts], *, n_resamples: int = 1000,
                     seed: int = 0, level: float = 0.95,
                     taus_a: dict[str, dict[str, tuple[int, int]]] | None = None,
                     taus_b: dict[str, dict[str, tuple[int, int]]] | None = None) -> pd.DataFrame:
    """Paired bootstrap of two submissions scored on the same ground truth.

    For every dataset both hold, one set of case resamples (from ``numpy.random.default_rng(seed)``, in
    sorted dataset order) is applied to both submissions, and the interval of ``b - a`` is the percentile
    interval of the per-resample differences. Load the inputs with
    :func:`xbench.score.counts.load_pair_counts` from each run's ``pair_counts.npz``.

    Parameters
    ----------
    a, b : dict {dataset: DatasetCounts}
    n_resamples, seed, level : resamples, seed, interval level.
    taus_a, taus_b : optional {dataset: {class: (dice index, iou index)}} fixed thresholds.

    Returns
    -------
    pandas.DataFrame with one row per (dataset, class or ``None`` for the dataset summary, metric):
    columns ``dataset, class, metric, diff_lo, diff_hi, p_value`` where ``p_value`` is the two-sided
    bootstrap p = min(1, 2 min(P(diff <= 0), P(diff >= 0))) over defined resamples.

    Raises
    ------
    ValueError
        When a shared dataset was scored against different ground truth.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for name in sorted(set(a) & set(b)):
        da, db = a[name], b[name]
        if not da.same_ground_truth(db):
            raise ValueError(f"{name}: the two submissions were scored against different ground truth "
                             "(cases, classes, labels or regions differ); a paired bootstrap needs the same.")
        reps_a: list = []
        reps_b: list = []
        cache_a: dict = {}
        cache_b: dict = {}
        for w in resample_weights(da.n_cases, n_resamples, rng):
            reps_a.append(dataset_replicates(da, w, taus=(taus_a or {}).get(name), per_pair=cache_a))
            reps_b.append(dataset_replicates(db, w, taus=(taus_b or {}).get(name), per_pair=cache_b))
        targets = [(None, key) for key in reps_a[0][1]] if reps_a else []
        targets += [(cls, key) for cls in (reps_a[0][0] if reps_a else {}) if cls in reps_b[0][0]
                    for key in reps_a[0][0][cls]]
        for cls, key in targets:
            ra = np.concatenate([(s if cls is None else c[cls])[key] for c, s in reps_a])
            rb = np.concatenate([(s if cls is None else c[cls])[key] for c, s in reps_b])
            d = rb - ra
            ok = d[~np.isnan(d)]
            ci = percentile_interval(d, level)
            p = float(min(1.0, 2.0 * min(np.mean(ok <= 0), np.mean(ok >= 0)))) if ok.size else None
            rows.append({"dataset": name, "class": cls, "metric": key,
                         "diff_lo": None if ci is None else ci[0], "diff_hi": None if ci is None else ci[1],
                         "p_value": p})
    return pd.DataFrame(rows, columns=["dataset", "class", "metric", "diff_lo", "diff_hi", "p_value"])
