"""Numba kernels of the saliency measures' two AUCs (:mod:`xbench.score.metrics.gaze` checks the arguments and
calls them): one pass over the grid's cells with a binary search into the few fixated values, instead of
NumPy's three searches of every cell (the AUCs were two thirds of the gaze section's time).

Both count in integers, so the AUCs they give are exactly those of the NumPy formulas they replace.
"""
from __future__ import annotations

import numpy as np

from xbench.score.kernels.maps import numba  # numba with the project's cache directory and start-up settings

__all__ = ["threshold_bins", "shuffled_ranks"]


@numba.njit(cache=True, nogil=True)
def threshold_bins(values, skip, edges):
    """counts[j] = how many ``values[i]`` (``skip[i]`` False) have ``searchsorted(edges, v, "right") == j``:
    the unfixated cells binned by the ascending thresholds of AUC-Judd."""
    out = np.zeros(edges.size + 1, np.int64)
    for i in range(values.size):
        if not skip[i]:
            out[np.searchsorted(edges, values[i], side="right")] += 1
    return out


@numba.njit(cache=True, nogil=True)
def shuffled_ranks(values, counts, pos):
    """sum over cells of counts[i] * (2 * #{pos > v} + #{pos == v}), v = values[i], ``pos`` ascending: twice
    the Mann-Whitney numerator of the shuffled AUC (ties one half), as an exact integer."""
    k = pos.size
    acc = 0
    for i in range(values.size):
        c = counts[i]
        if c > 0:
            v = values[i]
            r = np.searchsorted(pos, v, side="right")
            left = r
            if r > 0 and pos[r - 1] == v:  # ties: only then the left search
                left = np.searchsorted(pos, v, side="left")
            acc += c * (2 * (k - r) + (r - left))
    return acc
