"""Interval arithmetic on bootstrap replicates, shared by every row scope (classes and phrase rows):
NaN-aware means over resamples, percentile intervals and the rows of a paired comparison.

Pure NumPy, below both the resampling (:mod:`xbench.score.resampling.bootstrap`) and the phrase rows
(:mod:`xbench.score.sections.phrases`), so neither imports the other for them.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["nanmean_rows", "mean_defined", "percentile_interval", "percentile_intervals", "paired_row", "defined",
           "test_identity", "TIE_TOLERANCE", "tied_differences", "paired_p_value"]

#: a replicate difference d*_j = a*_j - b*_j with |d*_j| <= TIE_TOLERANCE * M (M the largest |a*_j|, |b*_j| of the
#: row's defined resamples) is a tie, d*_j = 0 (docs/contract.md, "Significant"). Both sides are float sums of the
#: same rationals in different orders (10/21 as 4/21 + 6/21 or as 10/21), so an exact 0 can come out as +-1e-16;
#: numpy's summation over up to ~10**7 terms errs by far less than 1e-9 relative, and no printed statistic
#: distinguishes values closer than that.
TIE_TOLERANCE = 1e-9


def tied_differences(reps_a, reps_b) -> np.ndarray:
    """The paired replicate differences ``a - b`` (float64, NaN where either side is undefined) with every tie
    (:data:`TIE_TOLERANCE`) set to exactly 0."""
    a, b = np.asarray(reps_a, dtype=np.float64), np.asarray(reps_b, dtype=np.float64)
    d = a - b
    ok = ~np.isnan(d)
    if ok.any():
        scale = max(float(np.abs(a[ok]).max()), float(np.abs(b[ok]).max()))
        d[ok & (np.abs(d) <= TIE_TOLERANCE * scale)] = 0.0
    return d


def paired_p_value(d) -> float | None:
    """The two-sided paired-bootstrap p-value min(1, 2 min(P*(d <= 0), P*(d >= 0))) over the defined differences
    of :func:`tied_differences` (a tie counts on both sides); None when none is defined. Not yet floored."""
    d = np.asarray(d, dtype=np.float64)
    ok = d[~np.isnan(d)]
    if not ok.size:
        return None
    return float(min(1.0, 2.0 * min(np.count_nonzero(ok <= 0), np.count_nonzero(ok >= 0)) / ok.size))


def nanmean_rows(stack: np.ndarray) -> np.ndarray:
    """``numpy.nanmean(stack, axis=0)`` with numpy's own steps (NaN set to 0, sum, divide by the count), so the
    same bits, but NaN without a "Mean of empty slice" warning for all-NaN columns (they are expected:
    undefined resamples). No ``warnings.catch_warnings``: it swaps process-wide state, and the bootstrap runs
    on several threads."""
    stack = np.asarray(stack, dtype=np.float64)
    mask = np.isnan(stack)
    cnt = np.sum(~mask, axis=0, dtype=np.intp)
    tot = np.sum(np.where(mask, 0.0, stack), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.divide(tot, cnt, out=tot, casting="unsafe")


def mean_defined(v: np.ndarray) -> float | None:
    """Mean of the defined (non-NaN) values of ``v``; None when none is."""
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else None


def percentile_interval(replicates: np.ndarray, level: float = 0.95) -> list[float] | None:
    """[lo, hi] percentile interval over the defined (non-NaN) replicates; None when none is defined."""
    r = np.asarray(replicates, dtype=np.float64)
    r = r[~np.isnan(r)]
    if r.size == 0:
        return None
    a = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(r, [a, 100.0 - a])
    return [float(lo), float(hi)]


def percentile_intervals(stats: Mapping[str, np.ndarray], level: float = 0.95) -> dict[str, list[float] | None]:
    """:func:`percentile_interval` of every array of ``stats``, with the same numbers: the arrays without an
    undefined replicate go through one ``numpy.percentile`` along an axis (the same partition and
    interpolation per row; one call instead of one per metric), the others one by one."""
    out: dict[str, list[float] | None] = dict.fromkeys(stats)
    full = [k for k, v in stats.items() if np.asarray(v).size and not np.isnan(v).any()]
    for k in stats:
        if k not in full:
            out[k] = percentile_interval(stats[k], level)
    if full:
        a = (1.0 - level) / 2.0 * 100.0
        q = np.percentile(np.stack([np.asarray(stats[k], dtype=np.float64) for k in full]), [a, 100.0 - a], axis=1)
        for j, k in enumerate(full):
            out[k] = [float(q[0, j]), float(q[1, j])]
    return out


def defined(x) -> float | None:
    return None if x is None or np.isnan(x) else float(x)


def test_identity(d: np.ndarray, diff: float | None) -> str:
    """Which test a paired row is: a digest of its resampled statistic, the replicate differences ``d`` (B,) bit
    for bit after the tie rule (:func:`tied_differences`: which resamples are undefined, then the defined values;
    a tie and -0.0 counted as 0.0), and its point difference. Two rows with the same identity are one test whatever they are called (with one dataset the
    overall mean is that dataset's mean, resample by resample), so a multiplicity family counts them once
    (:func:`xbench.score.resampling.engine.holm_family`)."""
    import hashlib

    d = np.asarray(d, dtype=np.float64)
    nan = np.isnan(d)
    h = hashlib.blake2b(digest_size=12)
    h.update(np.packbits(nan).tobytes())
    h.update(np.ascontiguousarray(np.where(nan, 0.0, d) + 0.0).tobytes())
    h.update(repr(None if diff is None else float(diff) + 0.0).encode())
    return h.hexdigest()


def paired_row(dataset, cls, metric, point_a, point_b, reps_a, reps_b, level) -> dict:
    """One row of a paired comparison (:data:`xbench.score.resampling.bootstrap.PAIRED_COLUMNS`): the two point values,
    their difference, and the percentile interval and two-sided bootstrap p-value of the paired replicate
    differences (resamples where either side is undefined left out; see
    :func:`xbench.score.resampling.bootstrap.paired_differences`); ``test``: the row's :func:`test_identity`, kept only
    when the caller asks for it (``paired_bootstrap(..., with_tests=True)``)."""
    a, b = defined(point_a), defined(point_b)
    d = np.asarray(reps_a, dtype=np.float64) - np.asarray(reps_b, dtype=np.float64)
    ok = d[~np.isnan(d)]
    ci = percentile_interval(ok, level)
    d = tied_differences(reps_a, reps_b)  # the p-value and the test's identity decide d = 0 with the tie rule
    p = paired_p_value(d)
    diff = None if a is None or b is None else a - b
    return {"dataset": dataset, "class": cls, "metric": metric, "a": a, "b": b,
            "diff": diff, "diff_lo": None if ci is None else ci[0],
            "diff_hi": None if ci is None else ci[1], "p_value": p, "n_valid": int(ok.size),
            "test": test_identity(d, diff)}
