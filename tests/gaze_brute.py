"""The gaze density map by a plain loop: the brute force that schemas/gaze.py's ``density_map`` and the REFLACX and
EGD-CXR readers' stored ``gaze_map`` are checked against (one definition for every test that needs it)."""
from __future__ import annotations

import math

import numpy as np


def brute_density(fix, orig, grid, sigma):
    """Each fixation (x, y, duration) inside the image a Gaussian of ``sigma`` original pixels, weighted by its
    duration and sampled at the grid's cell centres; normalised to sum 1 (zeros when no fixation is inside)."""
    h, w = orig
    out = np.zeros(grid)
    for i in range(grid[0]):
        for j in range(grid[1]):
            v, u = (i + 0.5) * h / grid[0], (j + 0.5) * w / grid[1]
            for x, y, d in fix:
                if 0 <= x < w and 0 <= y < h:
                    out[i, j] += d * math.exp(-((u - x) ** 2 + (v - y) ** 2) / (2 * sigma * sigma))
    return out / out.sum() if out.sum() > 0 else out
