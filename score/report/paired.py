"""Weighted (bootstrap) re-computation of the contract metrics, and paired comparisons.

A bootstrap resample of the cases of one dataset is represented by a weight vector ``w`` of length N
(how many times each case was drawn). Every metric of the contract is a function of such weights:

- grounding per class: weighted means over the positive pairs (Dice/IoU per threshold from the
  per-pair counts in pair_counts.npz, the best threshold re-chosen per resample as the first maximum);
- recognition per class: weighted AUROC / average precision (exactly scikit-learn's values with
  ``sample_weight``, which equal those of the expanded resample), F1 of the positive class,
  accuracy; per dataset the Hamming accuracy;
- per dataset: the mean over classes defined in that resample; overall: the mean over datasets.

With ``w = 1`` (the identity resample) the values are the point estimates of metrics.json.

A *paired* comparison draws one set of resamples per dataset and evaluates both submissions on the
same weights, so the difference's interval reflects only how the two differ on the same cases.
Resamples are drawn from ``numpy.random.default_rng([seed, crc32(dataset)])``, so a dataset's
resamples do not depend on which other datasets are present.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from ._load import GROUNDING_KEYS, RECOGNITION_KEYS, ReportInputError, Result

__all__ = [
    "DatasetArrays",
    "dataset_arrays",
    "resample_weights",
    "weighted_metrics",
    "weighted_auroc",
    "weighted_average_precision",
    "bootstrap_summaries",
    "paired_bootstrap",
    "ComparisonRow",
]

DATASET_KEYS_EXTRA = ("hamming_accuracy",)
FIXED_INDEX = 50  # tau = 0.50 on the grid k/100


@dataclass(frozen=True)
class DatasetArrays:
    """Everything needed to recompute one dataset's metrics under case weights.

    grounding: class -> (rows (n,) int64, hit (n,) float64, dice (n,101), iou (n,101));
    recognition: class -> (rows (m,) int64, y (m,) int8 in {0,1}, p (m,) float64).
    Rows index the dataset's ground-truth cases 0..n_cases-1.
    """

    name: str
    n_cases: int
    classes: tuple
    grounding: dict
    recognition: dict


def _dice_iou(b: np.ndarray, br: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, T) Dice and IoU per pair and threshold from |B|, |B ∩ R| (P, T) and |R| (P,) >= 1."""
    b = b.astype(np.float64)
    br = br.astype(np.float64)
    r = r.astype(np.float64)[:, None]
    return 2.0 * br / (b + r), br / (b + r - br)


def dataset_arrays(result: Result, dataset: str, case_ids: np.ndarray | None = None) -> DatasetArrays:
    """Gather the per-pair arrays of one dataset of a result from its pair_counts.npz.

    ``case_ids`` fixes the case order (for pairing two results); defaults to the sorted case ids.
    Classes the submission marked unsupported get no arrays (their metrics are undefined).
    """
    if result.counts is None or dataset not in result.counts:
        raise ReportInputError([f"{result.path}: needs pair_counts.npz with dataset {dataset!r} for the bootstrap"])
    dc = result.counts[dataset]
    own_ids = np.asarray(dc.case_id, dtype=str)
    # sorted ids by default: resamples then do not depend on the store's row order
    ids = np.sort(own_ids) if case_ids is None else np.asarray(case_ids, dtype=str)
    index = {cid: i for i, cid in enumerate(ids)}
    if len(index) != len(own_ids) or any(cid not in index for cid in own_ids):
        raise ReportInputError([f"{result.path}: dataset {dataset}: cases differ from the other submission's"])
    remap = np.array([index[c] for c in own_ids], dtype=np.int64)  # own row -> common row
    grounding: dict = {}
    recognition: dict = {}
    for c, name in enumerate(dc.classes):
        if not bool(dc.supported[c]):
            continue
        lab = np.asarray(dc.labels[:, c])
        keep = np.flatnonzero(lab != -1)
        recognition[name] = (remap[keep], (lab[keep] == 1).astype(np.int8), np.asarray(dc.prob[keep, c], np.float64))
        idx = dc.class_pairs(c)
        if len(idx) == 0:
            continue
        dice, iou = _dice_iou(dc.b[idx], dc.br[idx], dc.region_pixels[idx])
        grounding[name] = (remap[dc.pair_case[idx]], dc.hit[idx].astype(np.float64), dice, iou)
    return DatasetArrays(dataset, len(ids), tuple(dc.classes), grounding, recognition)


def resample_weights(n_cases: int, n_boot: int, seed: int, dataset: str) -> np.ndarray:
    """(n_boot, n_cases) float64 case multiplicities of ``n_boot`` bootstrap resamples of one dataset."""
    rng = np.random.default_rng([seed, zlib.crc32(dataset.encode())])
    idx = rng.integers(0, n_cases, size=(n_boot, n_cases))
    flat = (idx + n_cases * np.arange(n_boot)[:, None]).ravel()
    return np.bincount(flat, minlength=n_boot * n_cases).reshape(n_boot, n_cases).astype(np.float64)


def _wmean(W: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Weighted mean over pairs per resample; W (B,n), x (n,) or (n,k); NaN where the weights sum to 0."""
    s = W.sum(axis=1)
    num = W @ x
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / (s if num.ndim == 1 else s[:, None])


def _groups(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(p, kind="stable")
    ps = p[order]
    starts = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]]) if len(ps) else np.zeros(0, np.int64)
    return order, starts


def weighted_auroc(y: np.ndarray, p: np.ndarray, W: np.ndarray) -> np.ndarray:
    """(B,) AUROC of scores ``p`` (m,) for labels ``y`` (m,) in {0,1} under weights W (B,m).

    Ties count one half (Mann-Whitney). NaN when a resample has no positive or no negative weight.
    """
    W = np.atleast_2d(W)
    if len(y) == 0:
        return np.full(W.shape[0], np.nan)
    order, starts = _groups(p)
    ys = y[order].astype(np.float64)
    Ws = W[:, order]
    P = np.add.reduceat(Ws * ys, starts, axis=1)
    N = np.add.reduceat(Ws * (1.0 - ys), starts, axis=1)
    below = np.cumsum(N, axis=1) - N
    num = (P * (below + 0.5 * N)).sum(axis=1)
    tp, tn = P.sum(axis=1), N.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((tp > 0) & (tn > 0), num / (tp * tn), np.nan)


def weighted_average_precision(y: np.ndarray, p: np.ndarray, W: np.ndarray) -> np.ndarray:
    """(B,) step-wise average precision (scikit-learn's definition) under weights W (B,m).

    AP = sum_k (R_k - R_{k-1}) P_k over distinct score thresholds, highest first.
    NaN when a resample has no positive or no negative weight (the contract's "undefined").
    """
    W = np.atleast_2d(W)
    if len(y) == 0:
        return np.full(W.shape[0], np.nan)
    order, starts = _groups(p)
    ys = y[order].astype(np.float64)
    Ws = W[:, order]
    P = np.add.reduceat(Ws * ys, starts, axis=1)[:, ::-1]
    N = np.add.reduceat(Ws * (1.0 - ys), starts, axis=1)[:, ::-1]
    tps, fps = np.cumsum(P, axis=1), np.cumsum(N, axis=1)
    tp_total, tn_total = tps[:, -1], fps[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(tps + fps > 0, tps / (tps + fps), 0.0)
        ap = (P / tp_total[:, None] * precision).sum(axis=1)  # recall step = P_k / total positives
        return np.where((tp_total > 0) & (tn_total > 0), ap, np.nan)


def _recognition_class(y, p, W):
    """Per-class AUROC, AUPRC, F1, accuracy and the Hamming numerator/denominator under W."""
    yhat = (p >= 0.5).astype(np.float64)
    yf = y.astype(np.float64)
    tp = W @ (yhat * yf)
    fp = W @ (yhat * (1 - yf))
    fn = W @ ((1 - yhat) * yf)
    correct = W @ (yhat == yf).astype(np.float64)
    total = W.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        den = 2 * tp + fp + fn
        f1 = np.where(total > 0, np.where(den > 0, 2 * tp / np.where(den > 0, den, 1), 0.0), np.nan)
        acc = np.where(total > 0, correct / total, np.nan)
    return {
        "auroc": weighted_auroc(y, p, W),
        "auprc": weighted_average_precision(y, p, W),
        "f1": f1,
        "accuracy": acc,
    }, correct, total


def weighted_metrics(arr: DatasetArrays, W: np.ndarray) -> dict:
    """Metrics of one dataset under case weights W (B, n_cases).

    Returns {"classes": {class: {key: (B,)}}, "summary": {key: (B,)}} with NaN for undefined values
    (no positive pair weighted, or one label value only); summaries are NaN-ignoring class means.
    """
    W = np.atleast_2d(np.asarray(W, dtype=np.float64))
    B = W.shape[0]
    classes: dict = {}
    ham_num = np.zeros(B)
    ham_den = np.zeros(B)
    for c in arr.classes:
        out: dict = {}
        if c in arr.grounding:
            rows, hit, dice, iou = arr.grounding[c]
            Wc = W[:, rows]
            out["pointing_game"] = _wmean(Wc, hit)
            md, mi = _wmean(Wc, dice), _wmean(Wc, iou)  # (B, 101)
            out["dice_fixed"], out["iou_fixed"] = md[:, FIXED_INDEX], mi[:, FIXED_INDEX]
            out["dice_best"], out["iou_best"] = np.max(md, axis=1), np.max(mi, axis=1)
        else:
            for k in GROUNDING_KEYS:
                out[k] = np.full(B, np.nan)
        if c in arr.recognition:
            rows, y, p = arr.recognition[c]
            rec, correct, total = _recognition_class(y, p, W[:, rows])
            out.update(rec)
            ham_num += correct
            ham_den += total
        else:  # unsupported by the submission: undefined, and not part of the Hamming accuracy
            out.update({k: np.full(B, np.nan) for k in RECOGNITION_KEYS})
        classes[c] = out
    summary: dict = {}
    for k in GROUNDING_KEYS + RECOGNITION_KEYS:
        stack = np.array([classes[c][k] for c in arr.classes]) if arr.classes else np.full((1, B), np.nan)
        summary[k] = _nanmean0(stack)
    with np.errstate(invalid="ignore", divide="ignore"):
        summary["hamming_accuracy"] = np.where(ham_den > 0, ham_num / np.where(ham_den > 0, ham_den, 1), np.nan)
    return {"classes": classes, "summary": summary}


def _nanmean0(stack: np.ndarray) -> np.ndarray:
    """Mean over axis 0 ignoring NaN; NaN (without a warning) where every entry is NaN."""
    ok = ~np.isnan(stack)
    n = ok.sum(axis=0)
    s = np.where(ok, stack, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def _percentile_ci(x: np.ndarray) -> list | None:
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return None
    lo, hi = np.percentile(x, [2.5, 97.5])
    return [float(lo), float(hi)]


def bootstrap_summaries(result: Result, *, n_boot: int = 1000, seed: int = 0) -> dict:
    """95 % percentile intervals of the dataset summaries and the overall means of one result.

    Returns {"datasets": {d: {key: [lo, hi] | None}}, "overall": {key: [lo, hi] | None}}.
    Used by the report when metrics.json has no intervals above class level.
    """
    per_dataset: dict = {}
    reps: dict = {}
    for d in result.datasets:
        arr = dataset_arrays(result, d)
        W = resample_weights(arr.n_cases, n_boot, seed, d)
        summ = weighted_metrics(arr, W)["summary"]
        reps[d] = summ
        per_dataset[d] = {k: _percentile_ci(v) for k, v in summ.items()}
    overall = {}
    for k in GROUNDING_KEYS + RECOGNITION_KEYS:
        stack = np.array([reps[d][k] for d in reps])
        overall[k] = _percentile_ci(_nanmean0(stack)) if len(reps) else None
    return {"datasets": per_dataset, "overall": overall}


@dataclass(frozen=True)
class ComparisonRow:
    """One metric's paired difference A - B: point estimate, 95 % interval, and bootstrap support.

    scope: "overall" or a dataset key; cls: class name or None for the summary.
    p_value: two-sided bootstrap p (2 * min share of replicates <= 0 and >= 0, capped at 1).
    significant: the interval excludes 0. n_valid: replicates where both values are defined.
    """

    scope: str
    cls: str | None
    metric: str
    a: float | None
    b: float | None
    diff: float | None
    ci_lo: float | None
    ci_hi: float | None
    p_value: float | None
    n_valid: int

    @property
    def significant(self) -> bool:
        return self.ci_lo is not None and (self.ci_lo > 0 or self.ci_hi < 0)


def _row(scope, cls, metric, a_pt, b_pt, a_rep, b_rep) -> ComparisonRow:
    def f(x):
        return None if x is None or np.isnan(x) else float(x)

    d = a_rep - b_rep
    d = d[~np.isnan(d)]
    diff = None if f(a_pt) is None or f(b_pt) is None else f(a_pt) - f(b_pt)
    if len(d) == 0:
        return ComparisonRow(scope, cls, metric, f(a_pt), f(b_pt), diff, None, None, None, 0)
    lo, hi = np.percentile(d, [2.5, 97.5])
    p = min(1.0, 2 * min(np.mean(d <= 0), np.mean(d >= 0)))
    return ComparisonRow(scope, cls, metric, f(a_pt), f(b_pt), diff, float(lo), float(hi), float(p), len(d))


def _evaluate(result: Result, dataset: str, ids, W, key, cache: dict | None) -> dict:
    """weighted_metrics of one result and dataset, memoised in ``cache`` under (path, dataset, key)."""
    ck = (str(result.path), dataset, key)
    if cache is not None and ck in cache:
        return cache[ck]
    out = weighted_metrics(dataset_arrays(result, dataset, ids), W)
    if cache is not None:
        cache[ck] = out
    return out


def paired_bootstrap(a: Result, b: Result, *, n_boot: int = 1000, seed: int = 0,
                     per_class: bool = True, cache: dict | None = None) -> list[ComparisonRow]:
    """Paired bootstrap of A - B for every metric, per dataset (and class) and overall.

    Both results must come from the same ground truth (same gt_sha256 when recorded) and have the
    same datasets and cases. Point estimates use the identity resample (all weights 1), which equals
    the difference of the metrics.json values; the interval uses the same ``n_boot`` resamples for
    both. ``n_boot=0`` gives point estimates only. ``cache`` (a dict kept by the caller) reuses a
    result's replicates across several comparisons with the same ``n_boot`` and ``seed``.
    """
    problems = []
    if a.gt_sha256 and b.gt_sha256 and a.gt_sha256 != b.gt_sha256:
        problems.append(f"{a.path} and {b.path} were scored against different ground truths "
                        f"(gt_sha256 {a.gt_sha256[:12]} vs {b.gt_sha256[:12]})")
    if sorted(a.datasets) != sorted(b.datasets):
        problems.append(f"datasets differ: {sorted(a.datasets)} vs {sorted(b.datasets)}")
    if problems:
        raise ReportInputError(problems)
    keys = GROUNDING_KEYS + RECOGNITION_KEYS
    rows: list[ComparisonRow] = []
    ones_reps_a: dict = {}
    ones_reps_b: dict = {}
    reps_a: dict = {}
    reps_b: dict = {}
    for d in sorted(a.datasets):
        ids = np.sort(np.asarray(a.case_ids[d], dtype=str))  # a fixed order shared by every result
        arr_a = dataset_arrays(a, d, ids)
        dataset_arrays(b, d, ids)  # checks that b has exactly the same cases
        one = np.ones((1, arr_a.n_cases))
        pa, pb = _evaluate(a, d, ids, one, "identity", cache), _evaluate(b, d, ids, one, "identity", cache)
        if n_boot > 0:
            W = resample_weights(arr_a.n_cases, n_boot, seed, d)
            ra, rb = _evaluate(a, d, ids, W, (n_boot, seed), cache), _evaluate(b, d, ids, W, (n_boot, seed), cache)
        else:
            ra = rb = None
        ones_reps_a[d], ones_reps_b[d] = pa["summary"], pb["summary"]
        empty = np.zeros(0)
        for k in keys + DATASET_KEYS_EXTRA:
            rows.append(_row(d, None, k, pa["summary"][k][0], pb["summary"][k][0],
                             ra["summary"][k] if ra else empty, rb["summary"][k] if rb else empty))
        if per_class:
            for c in arr_a.classes:
                if c not in pb["classes"]:
                    continue
                for k in keys:
                    rows.append(_row(d, c, k, pa["classes"][c][k][0], pb["classes"][c][k][0],
                                     ra["classes"][c][k] if ra else empty, rb["classes"][c][k] if rb else empty))
        if ra:
            reps_a[d], reps_b[d] = ra["summary"], rb["summary"]
    for k in keys:
        pa_k = _nanmean0(np.array([ones_reps_a[d][k] for d in ones_reps_a]))[0]
        pb_k = _nanmean0(np.array([ones_reps_b[d][k] for d in ones_reps_b]))[0]
        if reps_a:
            ra_k = _nanmean0(np.array([reps_a[d][k] for d in reps_a]))
            rb_k = _nanmean0(np.array([reps_b[d][k] for d in reps_b]))
        else:
            ra_k = rb_k = np.zeros(0)
        rows.insert(len([r for r in rows if r.scope == "overall"]), _row("overall", None, k, pa_k, pb_k, ra_k, rb_k))
    return rows
