"""Recognition metrics per the contract: AUROC, AUPRC, F1, accuracy, Hamming accuracy.

``p = sigmoid(score)`` for logits and the score itself for probabilities; ``y_hat = 1`` when ``p >= 0.5``.
Only labelled pairs count (labels 1 or 0; -1 means not annotated). AUROC and AUPRC come from one
rank kernel (:func:`xbench.score.kernels.maps.weighted_auroc_ap`, tested against scikit-learn to 1e-12; importing
scikit-learn would cost more than scoring a benchmark's recognition) and are undefined (``None``, with an :class:`UndefinedMetricWarning` naming the class) unless
both label values are present; F1 of the positive class is 0 when undefined (no true and no predicted
positive); accuracy is undefined only when there is no labelled pair.
"""

from __future__ import annotations

import numpy as np

from xbench.score.metrics import registry as _registry
from xbench.score.metrics.recognition_sums import (NO_LABELLED_CASE, ONE_LABEL_VALUE, RecognitionSums, f1_from_counts,  # noqa: F401
                               probabilities, recognition_sums)

__all__ = ["probabilities", "recognition_scores", "recognition_sums", "hamming_accuracy_score", "f1_from_counts"]


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
    s = recognition_sums(y_true, p, name=name)
    out = {}
    for m in _registry.metrics("recognition"):
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
