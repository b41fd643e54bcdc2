"""The gaze measures (score/metrics/gaze.py) against plain-loop brute forces and against pysaliency.

pysaliency (the MIT/Tübingen saliency benchmark's code) is not a dependency: its tests run where it imports
(``PYTHONPATH=<a venv with pysaliency>/lib/python3.11/site-packages``) and are skipped elsewhere.
Fixtures hit the edges the issue names: uniform maps, maps with zeros, a single fixation, fixations on the
border and outside the image.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from xbench.score.metrics import gaze as G

GRID = (6, 7)


# ------------------------------------------------------------------------------ brute forces (plain loops)
def bf_cells(xy, orig, grid):
    h, w = orig
    H, W = grid
    out = []
    for x, y in xy:
        if not (0 <= x < w and 0 <= y < h):
            continue
        col = next(j for j in range(W) if j * w / W <= x < (j + 1) * w / W)
        row = next(i for i in range(H) if i * h / H <= y < (i + 1) * h / H)
        out.append((row, col))
    return out


def bf_cells_of(cells):
    return [r for r, _ in cells], [c for _, c in cells]


def bf_flat(m):
    return [float(v) for row in np.asarray(m).tolist() for v in row]


def bf_mean_std(vals):
    mu = sum(vals) / len(vals)
    return mu, math.sqrt(sum((v - mu) ** 2 for v in vals) / len(vals))


def bf_nss(m, cells):
    if not cells:
        return None
    mu, sd = bf_mean_std(bf_flat(m))
    vals = [(float(m[r][c]) - mu) / (sd if sd else 1.0) for r, c in cells]
    return sum(vals) / len(vals)


def bf_cc(m, g):
    a, b = bf_flat(m), bf_flat(g)
    ma, sa = bf_mean_std(a)
    mb, sb = bf_mean_std(b)
    if sb == 0:
        return None
    if sa == 0:
        return 0.0
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / len(a) / (sa * sb)


def bf_density(m):
    a = bf_flat(m)
    lo = min(a)
    if lo < 0:
        a = [v - lo for v in a]
    s = sum(a)
    return [v / s for v in a] if s else [1.0 / len(a)] * len(a)


def bf_sim(m, g):
    return sum(min(p, q) for p, q in zip(bf_density(m), bf_density(g)))


def bf_kl(m, g):
    eps = 2.2204e-16
    return sum(q * math.log(eps + q / (p + eps)) for p, q in zip(bf_density(m), bf_density(g)))


def bf_auc_judd(m, cells):
    if not cells:
        return None
    m = np.asarray(m, float) + np.random.RandomState(42).randn(*np.shape(m)) * 1e-7
    H, W = m.shape
    fixated = set(cells)
    pos = [float(m[r, c]) for r, c in cells]
    neg = [float(m[i, j]) for i in range(H) for j in range(W) if (i, j) not in fixated]
    if not neg:
        return None
    thresholds = sorted(pos + [max(pos + neg) + 1, min(pos + neg)], reverse=True)
    xs, ys = [0.0], [0.0]
    for t in thresholds:
        xs.append(sum(1 for v in neg if v >= t) / len(neg))
        ys.append(sum(1 for v in pos if v >= t) / len(pos))
    return sum((xs[i + 1] - xs[i]) * (ys[i + 1] + ys[i]) / 2 for i in range(len(xs) - 1))


def bf_auc_shuffled(m, cells, neg_cells):
    if not cells or not neg_cells:
        return None
    m = np.asarray(m, float)
    total = 0.0
    for r, c in cells:
        for i, j in neg_cells:
            p, n = m[r, c], m[i, j]
            total += 1.0 if p > n else 0.5 if p == n else 0.0
    return total / (len(cells) * len(neg_cells))


# ------------------------------------------------------------------------------ fixtures
def _maps():
    rng = np.random.default_rng(3)
    H, W = GRID
    smooth = rng.random(GRID)
    zeros = smooth.copy()
    zeros[:, :3] = 0.0  # a map with zeros (a min-max normalised map is 0 at its minimum)
    ties = np.round(rng.random(GRID) * 3) / 3  # many ties
    return {"smooth": smooth, "zeros": zeros, "ties": ties, "uniform": np.full(GRID, 0.5),
            "all_zero": np.zeros(GRID), "negative": smooth - 0.7, "peak": np.eye(H, W)}


ORIG = (60.0, 70.0)  # an image of 60 x 70 pixels on the 6 x 7 grid (10 pixels per cell)
FIXATIONS = {
    "single": [(33.0, 21.0)],
    "border": [(0.0, 0.0), (69.999, 59.999), (0.0, 59.5), (69.5, 0.0), (10.0, 10.0)],  # corners and a cell edge
    "outside": [(-0.001, 5.0), (70.0, 5.0), (5.0, 60.0), (1e9, 3.0), (35.0, 25.0)],  # only the last is inside
    "repeated": [(12.0, 12.0), (12.5, 13.0), (55.0, 41.0), (55.0, 41.0)],
    "none_inside": [(-5.0, -5.0), (70.0, 60.0)],
    "many": [(x * 9.7 % 70, x * 6.1 % 60) for x in range(1, 30)],
}


def _gaze_map(cells):
    g = np.zeros(GRID)
    for r, c in cells:
        g[r, c] += 1.0
    return g / g.sum() if g.sum() else g


CASES = [(mk, fk) for mk in _maps() for fk in FIXATIONS]


def test_fixation_cells_equal_brute_force():
    for fk, xy in FIXATIONS.items():
        rows, cols = G.fixation_cells(np.asarray(xy, np.float32).astype(np.float64), ORIG, GRID)
        assert list(zip(rows.tolist(), cols.tolist())) == bf_cells(xy, ORIG, GRID), fk
    # on the border: x = 0 is inside (cell 0), x = width is outside, the last pixel is the last cell
    rows, cols = G.fixation_cells([(0.0, 0.0, 0.2), (70.0, 0.0, 0.2), (69.999, 59.999, 0.1)], ORIG, GRID)
    assert rows.tolist() == [0, 5] and cols.tolist() == [0, 6]


@pytest.mark.parametrize("w, W", [(1088, 224), (2544, 36), (296, 36), (3648, 64)])
def test_fixation_cells_on_exact_cell_edges(w, W):
    # issue 43: a fixation on a cell edge k w / W (or a float step either side) lands in the cell that the exact
    # floor(x W / w) names; the float product x * W / w rounds onto the edge for hundreds of such points
    from fractions import Fraction
    xs = []
    for k in range(W + 1):
        e = float(Fraction(k * w, W))
        xs += [v for v in (e, math.nextafter(e, 0), math.nextafter(e, w)) if 0 <= v < w]
    xy = np.array([(x, x * 0 + 1.0) for x in xs])
    rows, cols = G.fixation_cells(xy, (w, w), (W, W))
    assert cols.tolist() == [min(math.floor(Fraction(x) * W / w), W - 1) for x in xs]
    assert len(rows) == len(xs)


@pytest.mark.parametrize("mk,fk", CASES)
def test_measures_equal_brute_force(mk, fk):
    m = _maps()[mk]
    cells = bf_cells(FIXATIONS[fk], ORIG, GRID)
    g = _gaze_map(cells) if fk != "many" else _maps()["smooth"] ** 2  # a smooth gaze map too
    rows, cols = G.fixation_cells(FIXATIONS[fk], ORIG, GRID)
    other = bf_cells(FIXATIONS["many"] + FIXATIONS["border"], ORIG, GRID)  # "other images'" fixations
    counts = G.cell_counts(*bf_cells_of(other), GRID)
    assert counts.sum() == len(other)

    def close(got, want):
        if want is None:
            return got is None
        return got is not None and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)

    assert close(G.nss(m, rows, cols), bf_nss(m, cells))
    assert close(G.auc_judd(m, rows, cols), bf_auc_judd(m, cells))
    assert close(G.auc_shuffled(m, rows, cols, counts), bf_auc_shuffled(m, cells, other))
    assert close(G.cc(m, g), bf_cc(m, g))
    assert close(G.sim(m, g), bf_sim(m, g))
    assert close(G.kl(m, g), bf_kl(m, g))
    every = G.all_measures(m, g, rows, cols, counts)
    assert list(every) == list(G.MEASURES)
    if not cells:
        assert all(v is None for v in every.values())  # no fixation inside the image: nothing to compare
    else:  # the row's arguments checked once, the densities shared: exactly the six public functions' values
        assert every == {"nss": G.nss(m, rows, cols), "cc": G.cc(m, g), "sim": G.sim(m, g), "kl": G.kl(m, g),
                         "auc_judd": G.auc_judd(m, rows, cols), "auc_shuffled": G.auc_shuffled(m, rows, cols, counts)}


def test_edges_by_hand():
    u = np.full(GRID, 0.5)
    g = _gaze_map([(1, 1), (2, 3)])
    assert G.nss(u, [1], [1]) == 0.0  # a constant map is not divided by its zero std
    assert G.cc(u, g) == 0.0 and G.cc(g, u) is None and G.cc(u, u) is None
    assert math.isclose(G.sim(g, g), 1.0) and math.isclose(G.kl(g, g), 0.0, abs_tol=1e-12)
    assert math.isclose(G.sim(u, np.zeros(GRID)), 1.0)  # a map of zeros is the uniform density
    assert G.auc_shuffled(g, [1], [1], np.zeros(GRID, np.int64)) is None  # no negative
    everything = [(i, j) for i in range(GRID[0]) for j in range(GRID[1])]
    assert G.auc_judd(g, *bf_cells_of(everything)) is None  # every cell fixated: no negative
    peak = np.zeros(GRID)
    peak[2, 3] = 1.0
    assert math.isclose(G.auc_judd(peak, [2], [3]), 1.0, abs_tol=1e-6)
    assert math.isclose(G.auc_shuffled(peak, [2], [3], np.ones(GRID, np.int64)), 1 - 0.5 / peak.size)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="2-D"):
        G.nss(np.zeros(3), [0], [0])
    with pytest.raises(ValueError, match="NaN"):
        G.cc(np.full(GRID, np.nan), np.ones(GRID))
    with pytest.raises(ValueError, match="grid"):
        G.nss(np.ones(GRID), [GRID[0]], [0])
    with pytest.raises(ValueError, match="one shape"):
        G.sim(np.ones(GRID), np.ones((2, 2)))
    with pytest.raises(ValueError, match="positive"):
        G.fixation_cells([(1.0, 1.0)], (0, 10), GRID)


# ------------------------------------------------------------------------------ pysaliency, where it imports
def _pysaliency():
    ps = pytest.importorskip("pysaliency")
    if not hasattr(np, "trapz"):  # pysaliency 0.2.22 calls np.trapz, gone from NumPy 2.x: the same function
        np.trapz = np.trapezoid
    return ps


@pytest.mark.parametrize("mk,fk", CASES)
def test_measures_equal_pysaliency(mk, fk):
    ps = _pysaliency()
    from pysaliency import metrics as PM
    from pysaliency.saliency_map_models import SaliencyMapModel

    maps = _maps()
    m = maps[mk]
    cells = bf_cells(FIXATIONS[fk], ORIG, GRID)
    if not cells:
        pytest.skip("no fixation inside the image: our measures are undefined, pysaliency has no such case")
    g = _gaze_map(cells) if fk != "many" else maps["smooth"] ** 2
    rows, cols = G.fixation_cells(FIXATIONS[fk], ORIG, GRID)
    assert math.isclose(G.nss(m, rows, cols), float(PM.NSS(m, cols, rows).mean()), rel_tol=1e-9, abs_tol=1e-12)
    want_cc = float(PM.CC(m, g)) if np.std(g) else None  # pysaliency: NaN for a constant gaze map
    got_cc = G.cc(m, g)
    assert (got_cc is None and want_cc is None) or math.isclose(got_cc, want_cc, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(G.sim(m, g), float(PM.SIM(m, g)), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(G.kl(m, g), float(PM.MIT_KLDiv(m, g)), rel_tol=1e-9, abs_tol=1e-12)

    # AUC-Judd and shuffled AUC through pysaliency's model interface: three images on the grid, the fixations
    # at their cells (x, y in grid units), so its shuffled nonfixations are the other two images' fixations
    others = [bf_cells(FIXATIONS["many"], ORIG, GRID), bf_cells(FIXATIONS["border"], ORIG, GRID)]
    images = [m, maps["smooth"], maps["ties"]]

    class Fixed(SaliencyMapModel):
        def __init__(self):
            super().__init__(caching=False)

        def _saliency_map(self, stimulus):
            return images[int(stimulus[0, 0, 0])]

    stimuli = ps.Stimuli([np.full((*GRID, 3), k, np.uint8) for k in range(3)])
    all_cells = [cells] + others
    xs = np.array([c + 0.5 for k, cs in enumerate(all_cells) for _, c in cs], float)
    ys = np.array([r + 0.5 for k, cs in enumerate(all_cells) for r, _ in cs], float)
    ns = np.array([k for k, cs in enumerate(all_cells) for _ in cs], int)
    fix = ps.Fixations.create_without_history(xs, ys, ns)
    first = ps.Fixations.create_without_history(xs[ns == 0], ys[ns == 0], ns[ns == 0])
    judd = G.auc_judd(m, rows, cols)
    if judd is not None:
        assert math.isclose(judd, float(Fixed().AUC_Judd(ps.Stimuli([stimuli.stimuli[0]]), first)),
                            rel_tol=1e-9, abs_tol=1e-12)
    shuffled = Fixed().AUC_per_image(stimuli, fix, nonfixations="shuffled", thresholds="all")[0]
    counts = G.cell_counts(*bf_cells_of(others[0] + others[1]), GRID)
    assert math.isclose(G.auc_shuffled(m, rows, cols, counts), float(shuffled), rel_tol=1e-9, abs_tol=1e-12)


def test_docs_worked_example():
    """docs/how-to/gaze.md's worked example: the numbers printed there, and its sAUC and NSS worked by hand."""
    m = np.array([[0, 1, 0.5], [0, 0.25, 0]])
    g = np.array([[0, 0.6, 0.2], [0, 0.2, 0]])
    rows, cols = [0, 0, 1], [1, 1, 2]
    n = np.array([[1, 0, 2], [0, 1, 0]])
    got = G.all_measures(m, g, rows, cols, n)
    printed = {"nss": 1.026, "cc": 0.979, "sim": 0.914, "kl": 0.0252, "auc_judd": 0.833, "auc_shuffled": 0.708}
    for k, v in printed.items():
        assert abs(got[k] - v) < 6e-4, k
    assert math.isclose(got["auc_shuffled"], (1 + 1 + 0.5 / 4) / 3)
    mu = 1.75 / 6
    sd = math.sqrt(sum((v - mu) ** 2 for v in (0, 1, 0.5, 0, 0.25, 0)) / 6)
    assert math.isclose(got["nss"], (2 * (1 - mu) + (0 - mu)) / 3 / sd)
    text = (Path(__file__).resolve().parents[3] / "docs" / "how-to" / "gaze.md").read_text()
    for v in ("**1.026**", "**0.979**", "**0.914**", "**0.0252**", "**0.708**", "**0.833**"):
        assert v in text
