"""Slow, obvious reference versions of every scorer computation (the oracles of the tests).

Written from the contract's text, pixel by pixel and threshold by threshold, sharing no code with
xbench.score: bilinear/area resize with explicit per-pixel formulas, min-max normalisation, the pointing peak
(the centroid of the maximum's cells, cell by cell in exact fractions),
and a loop over the 101 thresholds with ``>=``; recognition from scikit-learn.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

TAUS = [k / 100 for k in range(101)]


def resize(m, grid):
    m = np.asarray(m, dtype=np.float64)
    h, w = m.shape
    H, W = grid
    out = np.empty((H, W))
    if h >= H and w >= W and (h > H or w > W):
        for oy in range(H):
            y0, y1 = (oy * h) // H, -((-(oy + 1) * h) // H)
            for ox in range(W):
                x0, x1 = (ox * w) // W, -((-(ox + 1) * w) // W)
                s = 0.0
                for y in range(y0, y1):
                    for x in range(x0, x1):
                        s += m[y, x]
                out[oy, ox] = s / (y1 - y0) / (x1 - x0)
        return out

    def src(o, n_in, n_out):
        s = max((n_in / n_out) * (o + 0.5) - 0.5, 0.0)
        i0 = min(int(math.floor(s)), n_in - 1)
        i1 = i0 + 1 if i0 < n_in - 1 else i0
        lam = min(max(s - i0, 0.0), 1.0)
        return i0, i1, lam

    for oy in range(H):
        y0, y1, ly = src(oy, h, H)
        for ox in range(W):
            x0, x1, lx = src(ox, w, W)
            top = m[y0, x0] * (1.0 - lx) + m[y0, x1] * lx
            bottom = m[y1, x0] * (1.0 - lx) + m[y1, x1] * lx
            out[oy, ox] = top * (1.0 - ly) + bottom * ly
    return out


def normalise(r):
    lo, hi = r.min(), r.max()
    return np.zeros_like(r) if hi == lo else (r - lo) / (hi - lo)


def peak(r):
    """(row, col) the pointing game points at on the resized map ``r``, by the contract's words: the centroid of
    the cells holding the maximum, each coordinate rounded to the nearest cell with halves up, if that cell holds
    the maximum, else the maximum's cell nearest the centroid; None when every cell holds the maximum (a constant
    map points nowhere). Exact rational arithmetic, one cell at a time."""
    from fractions import Fraction

    H, W = r.shape
    top = max(float(r[i, j]) for i in range(H) for j in range(W))
    cells = [(i, j) for i in range(H) for j in range(W) if float(r[i, j]) == top]
    if len(cells) == H * W:
        return None
    half = Fraction(1, 2)
    cy = sum(Fraction(i) for i, _ in cells) / len(cells)
    cx = sum(Fraction(j) for _, j in cells) / len(cells)
    p = math.floor(cy + half), math.floor(cx + half)
    if p in cells:
        return p
    # the centroid's cell does not hold the maximum (two blobs, a ring): the maximum's cell nearest the centroid,
    # the first in row-major order among equally near ones
    return min(cells, key=lambda u: ((u[0] - cy) ** 2 + (u[1] - cx) ** 2, u))


def hit_of(r, region) -> bool:
    """The pointing-game hit of resized map ``r`` against ``region``: its peak lies in the region."""
    p = peak(r)
    return p is not None and bool(region[p])


def pair_values(raw_map, region):
    """hit, dice[101], iou[101] of one positive pair, by the definitions."""
    r = resize(raw_map, region.shape)
    hit = hit_of(r, region)
    nm = normalise(r)
    dice, iou = [], []
    for tau in TAUS:
        b = nm >= tau
        inter = np.logical_and(b, region).sum()
        dice.append(2 * inter / (b.sum() + region.sum()))
        iou.append(inter / np.logical_or(b, region).sum())
    return hit, np.array(dice), np.array(iou)


def counts(raw_map, region):
    nm = normalise(resize(raw_map, region.shape))
    b = np.array([(nm >= t).sum() for t in TAUS])
    br = np.array([((nm >= t) & region).sum() for t in TAUS])
    return b, br


def class_grounding(pairs):
    """pairs: list of (raw_map, region). Returns pointing, dice/iou fixed and best, taus."""
    vals = [pair_values(m, r) for m, r in pairs]
    hits = [v[0] for v in vals]
    dice = np.array([v[1] for v in vals])
    iou = np.array([v[2] for v in vals])
    dmean = np.array([np.mean(dice[:, k]) for k in range(101)])
    imean = np.array([np.mean(iou[:, k]) for k in range(101)])
    kd, ki = int(np.argmax(dmean)), int(np.argmax(imean))
    return {"pointing_game": float(np.mean(hits)), "dice_fixed": dmean[50], "iou_fixed": imean[50],
            "dice_best": dmean[kd], "iou_best": imean[ki], "tau_dice": TAUS[kd], "tau_iou": TAUS[ki]}


def sigmoid(s):
    return 1.0 / (1.0 + math.exp(-float(s)))


def class_recognition(y, p):
    y = np.asarray(y)
    p = np.asarray(p, dtype=np.float64)
    yhat = (p >= 0.5).astype(int)
    tp = int(((yhat == 1) & (y == 1)).sum())
    fp = int(((yhat == 1) & (y == 0)).sum())
    fn = int(((yhat == 0) & (y == 1)).sum())
    out = {"f1": 0.0 if 2 * tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn),
           "accuracy": float(np.mean(yhat == y))}
    if len(set(y.tolist())) == 2:
        out["auroc"] = roc_auc_score(y, p)
        out["auprc"] = average_precision_score(y, p)
    else:
        out["auroc"] = out["auprc"] = None
    return out
