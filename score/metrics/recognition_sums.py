"""The recognition counts every recognition metric is computed from: probabilities, F1 from counts, and
one class's weighted sums (:class:`RecognitionSums`, what a registered recognition metric reads).

Below the metric registry (:mod:`xbench.score.metrics.registry` imports it); :mod:`xbench.score.metrics.recognition`
adds the functions that evaluate the registered metrics and re-exports these.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from xbench.score.metrics.grounding import UndefinedMetricWarning
from xbench.score.kernels.maps import weighted_auroc_ap

__all__ = ["probabilities", "f1_from_counts", "recognition_sums", "RecognitionSums", "NO_LABELLED_CASE",
           "ONE_LABEL_VALUE"]


@dataclass(frozen=True)
class RecognitionSums:
    """Weighted counts of one class's labelled pairs per resample, each (B,) float64: ``tp``, ``fp``, ``fn``,
    ``correct`` (ŷ = y), ``total`` (labelled pairs drawn), and ``auroc``, ``auprc`` (NaN unless both label
    values are drawn)."""

    tp: np.ndarray
    fp: np.ndarray
    fn: np.ndarray
    correct: np.ndarray
    total: np.ndarray
    auroc: np.ndarray
    auprc: np.ndarray


def probabilities(scores, score_kind: str) -> np.ndarray:
    """Per-pair probability p, float64, same shape as ``scores``.

    ``"logit"``: ``1 / (1 + exp(-s))`` in float64 (``s`` converted from float32 first);
    ``"probability"``: the score itself, converted to float64.
    """
    s = np.asarray(scores, dtype=np.float64)
    if score_kind == "probability":
        return s.copy()
    if score_kind != "logit":
        raise ValueError(f"score_kind must be 'logit' or 'probability'; got {score_kind!r}.")
    with np.errstate(over="ignore"):  # exp(-s) overflows to inf for s < -709: p is then exactly 0
        return 1.0 / (1.0 + np.exp(-s))


def f1_from_counts(tp, fp, fn):
    """F1 of the positive class, 2TP / (2TP + FP + FN), with 0 where the denominator is 0 (arrays ok)."""
    tp = np.asarray(tp, dtype=np.float64)
    den = 2.0 * tp + np.asarray(fp, dtype=np.float64) + np.asarray(fn, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 2.0 * tp / np.where(den > 0, den, 1.0), 0.0)


#: why a class's recognition metrics are undefined (:func:`recognition_sums`'s ``undefined``)
NO_LABELLED_CASE = "no labelled case"
ONE_LABEL_VALUE = "one label value only"


def recognition_sums(y_true, p, *, name: str = "", undefined: list | None = None):
    """The counts and rank statistics of one class's labelled pairs, as a one-resample
    :class:`RecognitionSums` (arrays of shape (1,)), from which every registered
    recognition metric is computed.

    Warns (:class:`UndefinedMetricWarning`, naming the class) when there is no labelled case, and when AUROC
    and AUPRC are undefined because a single label value occurs; with a list ``undefined`` the reason
    (:data:`NO_LABELLED_CASE`, :data:`ONE_LABEL_VALUE`) is appended to it instead, for a caller that counts
    them (the scorer prints one line per reason and dataset, never a Python warning).
    """
    y = np.asarray(y_true)
    q = np.asarray(p, dtype=np.float64)
    if y.shape != q.shape or y.ndim != 1:
        raise ValueError(f"`y_true` and `p` must be 1-D and of the same length; got {y.shape} and {q.shape}.")
    if y.size and not np.isin(y, (0, 1)).all():
        raise ValueError("`y_true` must hold only 0 and 1; drop the unlabelled pairs (-1) first.")
    label = name or "this class"
    y_hat = q >= 0.5
    pos = y == 1
    auroc = auprc = np.full(1, np.nan)
    if y.size == 0:
        if undefined is not None:
            undefined.append(NO_LABELLED_CASE)
        else:
            warnings.warn(f"recognition metrics undefined for {label}: no labelled case; reported as null.",
                          UndefinedMetricWarning, stacklevel=2)
    elif 0 < np.count_nonzero(pos) < y.size:
        auroc, auprc = weighted_auroc_ap(np.ones((1, y.size)), pos, q)
    elif undefined is not None:
        undefined.append(ONE_LABEL_VALUE)
    else:
        warnings.warn(f"AUROC and AUPRC undefined for {label}: every labelled case is {int(y[0])}; "
                      "reported as null and left out of the means.", UndefinedMetricWarning, stacklevel=2)

    def count(a) -> np.ndarray:
        return np.array([np.count_nonzero(a)], dtype=np.float64)

    return RecognitionSums(tp=count(y_hat & pos), fp=count(y_hat & ~pos), fn=count(~y_hat & pos),
                           correct=count(y_hat == pos), total=count(np.ones(y.size, bool)),
                           auroc=np.asarray(auroc, dtype=np.float64), auprc=np.asarray(auprc, dtype=np.float64))
