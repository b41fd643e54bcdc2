"""Recognition metrics per the contract: AUROC, AUPRC, F1, accuracy, Hamming accuracy.

``p = sigmoid(score)`` for logits and the score itself for probabilities; ``y_hat = 1`` when ``p >= 0.5``.
Only labelled pairs count (labels 1 or 0; -1 means not annotated). AUROC and AUPRC come from one
rank kernel (:func:`xbench.score.kernels.weighted_auroc_ap`, tested against scikit-learn to 1e-12; importing
scikit-learn would cost more than scoring a benchmark's recognition) and are undefined (``None``, with an :class:`UndefinedMetricWarning` naming the class) unless
both label values are present; F1 of the positive class is 0 when undefined (no true and no predicted
positive); accuracy is undefined only when there is no labelled pair.
"""

from __future__ import annotations

import warnings

import numpy as np
from .grounding import UndefinedMetricWarning
from .kernels import weighted_auroc_ap

__all__ = ["probabilities", "recognition_scores", "recognition_sums", "hamming_accuracy_score", "f1_from_counts"]


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
    :class:`xbench.score.registry.RecognitionSums` (arrays of shape (1,)), from which every registered
    recognition metric is computed.

    Warns (:class:`UndefinedMetricWarning`, naming the class) when there is no labelled case, and when AUROC
    and AUPRC are undefined because a single label value occurs; with a list ``undefined`` the reason
    (:data:`NO_LABELLED_CASE`, :data:`ONE_LABEL_VALUE`) is appended to it instead, for a caller that counts
    them (the scorer prints one line per reason and dataset, never a Python warning).
    """
    from .registry import RecognitionSums

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


def recognition_scores(y_true, p, *, name: str = "") -> dict[str, float | None]:
    """Every registered recognition metric of one class: AUROC, AUPRC, F1 and accuracy (and any added).

    Parameters
    ----------
    y_true : int array of shape (n,)
        Labels of the labelled pairs, each 0 or 1 (drop -1 before calling).
    p : float array of shape (n,)
        Probabilities (see :func:`probabilities`).
    name : str
        Names the class in warnings.

    Returns
    -------
    dict
        ``auroc``, ``auprc`` (``None`` unless both labels occur), ``f1`` (0 when undefined) and
        ``accuracy``; all ``None`` when n == 0.

    Examples
    --------
    >>> recognition_scores([0, 0, 1, 1], [0.1, 0.6, 0.4, 0.8])
    {'auroc': 0.75, 'auprc': 0.8333333333333333, 'f1': 0.5, 'accuracy': 0.5}
    """
    from .registry import metrics

    s = recognition_sums(y_true, p, name=name)
    out = {}
    for m in metrics("recognition"):
        v = float(m.values(s)[0])
        out[m.key] = None if np.isnan(v) else v
    return out


def hamming_accuracy_score(labels, p) -> float | None:
    """Mean of ``[y_hat == y]`` over all labelled pairs of a dataset; labels (N, C) with -1 ignored."""
    y = np.asarray(labels)
    q = np.asarray(p, dtype=np.float64)
    if y.shape != q.shape:
        raise ValueError(f"`labels` and `p` must have the same shape; got {y.shape} and {q.shape}.")
    known = y != -1
    n = int(np.count_nonzero(known))
    if n == 0:
        return None
    return float(np.count_nonzero(((q >= 0.5) == (y == 1)) & known) / n)
