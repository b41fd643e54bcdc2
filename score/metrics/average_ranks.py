"""Average ranks, the one definition behind every Spearman correlation of the scorer (the robustness track's
map stability, the text probes' rank change)."""
from __future__ import annotations

import numpy as np


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of the flattened array, ties sharing the mean of the ranks they span (float64).

    The sort need not be stable: ties are found as runs of equal values after sorting and each run gets one
    mean rank, so the order inside a run never shows. numpy's default sort is several times faster than a
    stable one on large maps (SIMD quicksort), which is why it is used."""
    x = np.asarray(values, dtype=np.float64).ravel()
    order = np.argsort(x)
    xs = x[order]
    edges = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1], True])
    mean_rank = (edges[:-1] + edges[1:] - 1) / 2.0 + 1.0
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, np.diff(edges))
    return ranks
