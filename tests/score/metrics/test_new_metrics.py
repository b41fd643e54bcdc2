"""The localisation metrics of schema minor 1 against brute force, pair by pair and in metrics.json.

Oracles are written from docs/contract.md "Metrics" with no scorer code: the map is resized and
normalised by score_reference, binned by a loop over the thresholds, ranked and compared cell by cell,
with exact fractions where the scorer promises an exact result.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import score_reference as ref
from score_stores import make_gt, make_submission
from xbench.score.kernels import maps as K
from xbench.score.metrics.localisation import map_auroc_from_counts, rank_accuracy_from_counts
from xbench.score.scoring import score_submission

NEW = ("energy_pointing_game", "relevance_rank_accuracy", "map_auroc", "tolerant_pointing_game")


def qbins(m):
    """k(u) = max{k : k/100 <= M~(u)} per cell, by a loop over the thresholds."""
    out = np.zeros(m.shape, np.int64)
    for k, t in enumerate(ref.TAUS):
        out[m >= t] = k
    return out


def brute(raw, region, tol=None, cell=(1.0, 1.0)):
    """(energy share, RRA, map AUROC or None, tolerant hit or None) of one pair."""
    r = ref.resize(raw, region.shape)
    m = ref.normalise(r)
    energy = float(m[region].sum() / m.sum()) if m.sum() > 0 else 0.0
    q = qbins(m).ravel()
    reg = region.ravel()
    K_ = int(reg.sum())
    t = np.sort(q)[::-1][K_ - 1]  # the K-th highest bin
    above, tie = q > t, q == t
    rra = (Fraction(int((above & reg).sum())) + Fraction(K_ - int(above.sum())) * Fraction(int((tie & reg).sum()), int(tie.sum()))) / K_
    pos, neg = q[reg], q[~reg]
    auc = None
    if neg.size:
        wins = sum(2 * int((p > neg).sum()) + int((p == neg).sum()) for p in pos)
        auc = Fraction(wins, 2 * pos.size * neg.size)
    hit_tol = None
    if tol is not None and ref.peak(r) is None:  # a constant map points nowhere
        hit_tol = False
    elif tol is not None:
        ra, ca = ref.peak(r)  # the centroid of the maximum's cells (the first maximum when it is unique)
        rr, cc = np.nonzero(region)
        dy = (rr - ra).astype(np.float64) * cell[0]
        dx = (cc - ca).astype(np.float64) * cell[1]
        hit_tol = bool((dy * dy + dx * dx <= tol * tol).any())
    return energy, float(rra), None if auc is None else float(auc), hit_tol


def cases():
    rng = np.random.default_rng(7)
    grid = (9, 11)
    out = []
    for k in range(40):
        shape = [(4, 3), (9, 11), (20, 25), (5, 11)][k % 4]
        raw = rng.standard_normal(shape).astype(np.float32)
        if k % 5 == 1:
            raw = np.round(raw * 2) / 2  # many exact ties
        region = np.zeros(grid, bool)
        kind = k % 6
        if kind == 0:
            region[rng.integers(grid[0]), rng.integers(grid[1])] = True  # one cell
        elif kind == 1:
            region[:] = True  # whole grid
        else:
            y, x = rng.integers(0, grid[0] - 1), rng.integers(0, grid[1] - 1)
            region[y:y + rng.integers(1, 5), x:x + rng.integers(1, 6)] = True
        out.append((raw.astype(np.float32), region))
    out.append((np.full((4, 3), 3.0, np.float32), out[2][1]))  # constant map
    out.append((np.full((4, 3), -1.0, np.float32), np.ones(grid, bool)))  # constant map, whole grid
    return out


@pytest.mark.parametrize("tol,cell", [(0.0, (1.0, 1.0)), (1.0, (1.0, 1.0)), (15.0, (5.5, 7.25)), (2.5, (1.0, 2.0))])
def test_per_pair_values_equal_brute_force(tol, cell):
    pairs = cases()
    maps = [m for m, _ in pairs]
    regions = np.stack([r for _, r in pairs])
    for i, (m, region) in enumerate(pairs):  # one shape per call: the kernels take a stack
        got = K.grounding_counts(m[None], region[None], tolerance=tol, cell=cell)
        e, rra, auc, hit_tol = brute(m, region, tol, cell)
        assert got.energy[0] == pytest.approx(e, rel=1e-12, abs=1e-15), i
        assert rank_accuracy_from_counts(got.b, got.br, got.region_pixels)[0] == rra, i  # exact
        a = map_auroc_from_counts(got.b, got.br, got.region_pixels)[0]
        assert (np.isnan(a) and auc is None) or a == auc, i  # exact
        assert bool(got.hit_tolerant[0]) == hit_tol, i
        if tol == 0.0:
            assert got.hit_tolerant[0] == got.hit[0]  # tolerance 0 is the plain pointing game
    assert len(maps) == regions.shape[0]


def test_edge_cases_by_hand():
    grid = (4, 4)
    one = np.zeros((1, *grid), bool)
    one[0, 1, 2] = True
    flat = np.zeros((1, *grid), np.float32)
    g = K.grounding_counts(flat, one, tolerance=0.0)
    # constant map: no mass (0), its one bin shared (RRA = |R| / HW), AUROC 0.5
    assert g.energy[0] == 0.0
    assert rank_accuracy_from_counts(g.b, g.br, g.region_pixels)[0] == 1 / 16
    assert map_auroc_from_counts(g.b, g.br, g.region_pixels)[0] == 0.5
    peak = flat.copy()
    peak[0, 1, 2] = 1.0  # all the mass on the region's one cell
    g = K.grounding_counts(peak, one, tolerance=0.0)
    assert g.energy[0] == 1.0 and g.hit[0] and g.hit_tolerant[0]
    assert rank_accuracy_from_counts(g.b, g.br, g.region_pixels)[0] == 1.0
    assert map_auroc_from_counts(g.b, g.br, g.region_pixels)[0] == 1.0
    whole = np.ones((1, *grid), bool)
    g = K.grounding_counts(peak, whole)
    assert np.isnan(map_auroc_from_counts(g.b, g.br, g.region_pixels)[0])  # no cell outside R
    assert rank_accuracy_from_counts(g.b, g.br, g.region_pixels)[0] == 1.0 and g.energy[0] == 1.0
    # tolerance: the peak one cell (10 px) right of the region; 9.99 px misses, 10 px hits
    far = flat.copy()
    far[0, 1, 3] = 1.0
    assert not K.grounding_counts(far, one, tolerance=9.99, cell=(10.0, 10.0)).hit_tolerant[0]
    assert K.grounding_counts(far, one, tolerance=10.0, cell=(10.0, 10.0)).hit_tolerant[0]
    with pytest.raises(ValueError, match="tolerance"):
        K.grounding_counts(far, one, tolerance=-1.0)


def test_metrics_json_new_metrics_equal_brute_force(tmp_path):
    gt = make_gt(tmp_path / "gt.zarr")
    sub = make_submission(tmp_path / "sub.zarr", gt, map_shape=(7, 5))
    tol = 40.0  # orig_size 512 x 512 on 12 x 16 and 10 x 10 grids: cells of 42.7 x 32 and 51.2 px
    res = score_submission(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=20,
                           metric_params={"pointing_tolerance": tol})
    assert res.metrics["xbench"]["pointing_tolerance_px"] == tol
    for name, g in gt.items():
        s = sub[name]
        row = {cid: i for i, cid in enumerate(s.case_ids)}
        col = {c: j for j, c in enumerate(s.classes)}
        cell = (512 / g.grid[0], 512 / g.grid[1])
        for ci, cname in enumerate(g.classes):
            vals = [brute(s.saliency[row[g.case_ids[i]], col[cname]].astype(np.float32), g.masks[k], tol, cell)
                    for k, (i, c) in enumerate(g.region_index) if c == ci]
            entry = res.metrics["datasets"][name]["classes"][cname]
            if not vals:
                assert all(entry[k] is None for k in NEW)
                continue
            assert entry["energy_pointing_game"] == pytest.approx(np.mean([v[0] for v in vals]), rel=1e-12)
            assert entry["relevance_rank_accuracy"] == pytest.approx(np.mean([v[1] for v in vals]), rel=1e-15)
            aucs = [v[2] for v in vals if v[2] is not None]
            assert (entry["map_auroc"] is None) if not aucs else entry["map_auroc"] == pytest.approx(np.mean(aucs), rel=1e-15)
            assert entry["tolerant_pointing_game"] == np.mean([v[3] for v in vals])
            for k in NEW:  # intervals exist wherever the pointing game's do
                if entry[k] is not None and entry["ci95"]["pointing_game"] is not None:
                    lo, hi = entry["ci95"][k]
                    assert lo <= hi
