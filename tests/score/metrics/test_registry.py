"""The metric registry: lesion-size strata against brute force, and a new metric added in this one file.

The worked example (:func:`test_a_new_metric_is_one_registration`) registers "Dice at tau = 0.3" with a
pairs-table column, and finds it in metrics.json (class, summary, overall), its ci95, xbench-score's
tables, the report and pairs.parquet, each value checked against the slow reference of score_reference.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

import score_reference as ref
from score_stores import make_gt, make_submission
from xbench.score.resampling import bootstrap as BS
from xbench.score.metrics import registry as R
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.kernels.maps import grounding_counts
from xbench.score.outputs.folder import write_outputs
from xbench.score.scoring import score_submission

SIZES = ("small", "medium", "large")


def _stratum(region) -> str:
    """The contract's lesion size, written out: share of the grid's cells < 1 %, < 5 %, else large."""
    share = region.sum() / region.size
    return "small" if share < 0.01 else "medium" if share < 0.05 else "large"


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("reg")
    gt = make_gt(root / "gt.zarr", seed=4)
    sub = make_submission(root / "sub.zarr", gt, seed=5)
    return root, gt, sub


def _brute_pairs(gt, sub, name, cname):
    g, s = gt[name], sub[name]
    row = {cid: i for i, cid in enumerate(s.case_ids)}
    ci, j = g.classes.index(cname), s.classes.index(cname)
    return [(s.saliency[row[g.case_ids[i]], j], g.masks[k]) for k, (i, c) in enumerate(g.region_index) if c == ci]


def test_lesion_size_cut_offs_are_exact():
    assert R.lesion_size([1, 99, 100, 499, 500, 10_000], (100, 100)).tolist() == [0, 0, 1, 1, 2, 2]
    assert R.lesion_size([1, 2, 9, 10], (12, 16)).tolist() == [0, 1, 1, 2]  # 1.92 and 9.6 cells
    assert [s for s, _, _ in R.LESION_SIZES] == list(SIZES)


def test_lesion_size_strata_equal_brute_force(stores):
    root, gt, sub = stores
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = score_submission(root / "sub.zarr", root / "gt.zarr", bootstrap=0).metrics
    assert m["xbench"]["schema_minor"] == 1
    seen = set()
    for name, g in gt.items():
        per_class = {}
        for cname in g.classes:
            pairs = _brute_pairs(gt, sub, name, cname)
            got = m["datasets"][name]["classes"][cname]
            exp = {}
            if pairs:
                vals = [ref.pair_values(mp, r) for mp, r in pairs]
                kd = int(np.argmax([np.mean([v[1][k] for v in vals]) for k in range(101)]))
                ki = int(np.argmax([np.mean([v[2][k] for v in vals]) for k in range(101)]))
                for size in SIZES:
                    inside = [v for v, (_, r) in zip(vals, pairs) if _stratum(r) == size]
                    if inside:
                        seen.add(size)
                        exp[f"pointing_game_{size}"] = np.mean([v[0] for v in inside])
                        exp[f"dice_best_{size}"] = np.mean([v[1][kd] for v in inside])
                        exp[f"iou_best_{size}"] = np.mean([v[2][ki] for v in inside])
            for size in SIZES:
                for base in ("pointing_game", "dice_best", "iou_best"):
                    key = f"{base}_{size}"
                    if key in exp:
                        assert got[key] == pytest.approx(exp[key], abs=1e-12), (name, cname, key)
                    else:
                        assert got[key] is None, (name, cname, key)
            per_class[cname] = exp
        for key in (f"{b}_{s}" for b in ("pointing_game", "dice_best", "iou_best") for s in SIZES):
            vals = [e[key] for e in per_class.values() if key in e]
            got = m["datasets"][name]["summary"][key]
            assert got == (pytest.approx(np.mean(vals), abs=1e-12) if vals else None), (name, key)
    assert seen == set(SIZES)  # the fixture holds every stratum
    for key in ("dice_best_small", "pointing_game_large"):
        vals = [d["summary"][key] for d in m["datasets"].values() if d["summary"][key] is not None]
        assert m["overall"][key] == pytest.approx(np.mean(vals), abs=1e-12)


def _counts(seed=0, n=40, grid=(20, 20)):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=(n, 2)).astype(np.int8)
    pairs = np.argwhere(labels == 1)
    masks = np.zeros((len(pairs), *grid), bool)
    for k in range(len(pairs)):  # 1 cell (small, 0.25 %), 3x3 (medium, 2.25 %), 5x6 (large, 7.5 %)
        h, w = ((1, 1), (3, 3), (5, 6))[k % 3]
        y, x = rng.integers(0, grid[0] - h + 1), rng.integers(0, grid[1] - w + 1)
        masks[k, y:y + h, x:x + w] = True
    res = grounding_counts(rng.standard_normal((len(pairs), 4, 4)).astype(np.float32), masks)
    order = np.lexsort((pairs[:, 0], pairs[:, 1]))
    return DatasetCounts(name="phantom", classes=("A", "B"), supported=np.ones(2, bool),
                         case_id=np.array([f"c{i}" for i in range(n)]), labels=labels, prob=rng.random((n, 2)),
                         pair_case=pairs[order, 0], pair_class=pairs[order, 1],
                         region_pixels=res.region_pixels[order], hit=res.hit[order], b=res.b[order],
                         br=res.br[order], grid=grid)


@pytest.mark.parametrize("budget", [None, 0])
def test_strata_replicates_equal_explicit_resamples(budget):
    """In each resample: tau re-chosen on the class-mean curve of all drawn pairs, then each stratum's mean
    at that tau over the drawn pairs of the stratum (cached curves or recomputed in chunks of 5 pairs)."""
    dc = _counts()
    draws = np.random.default_rng(2).integers(0, dc.n_cases, size=(20, dc.n_cases))
    w = np.stack([np.bincount(d, minlength=dc.n_cases) for d in draws]).astype(np.float64)
    cache = {} if budget is None else {"budget": budget, "pair_chunk": 5}
    classes, _ = BS.dataset_replicates(dc, w, per_pair=cache)
    size = R.lesion_size(dc.region_pixels, dc.grid)
    for r, d in enumerate(draws):
        for c, name in enumerate(dc.classes):
            idx = dc.class_pairs(c)
            rows = np.array([j for case in d for j in idx[dc.pair_case[idx] == case]], dtype=int)
            b, br, rp = dc.b[rows].astype(float), dc.br[rows].astype(float), dc.region_pixels[rows].astype(float)
            dice = 2 * br / (b + rp[:, None])
            iou = br / (b + rp[:, None] - br)
            kd, ki = np.argmax(dice.mean(axis=0)), np.argmax(iou.mean(axis=0))
            for s, label in enumerate(SIZES):
                inside = size[rows] == s
                got = {k: classes[name][f"{k}_{label}"][r] for k in ("pointing_game", "dice_best", "iou_best")}
                if not inside.any():
                    assert all(np.isnan(v) for v in got.values())
                    continue
                assert got["pointing_game"] == pytest.approx(dc.hit[rows][inside].mean(), abs=1e-12)
                assert got["dice_best"] == pytest.approx(dice[inside, kd].mean(), abs=1e-12)
                assert got["iou_best"] == pytest.approx(iou[inside, ki].mean(), abs=1e-12)


# ------------------------------------------------------------------------- the worked example
def _dice_values(view: R.PairView) -> np.ndarray:
    b, br = view.b.astype(np.float64), view.br.astype(np.float64)
    return 2.0 * br / (b + view.region_pixels[:, None])


DICE_030 = R.Metric("dice_030", "Dice at tau = 0.3", "Dice@0.3", "grounding", _dice_values, curve=True,
                    threshold=30, pair_column=True)


@pytest.fixture
def dice_030():
    with R.registered(DICE_030):
        yield DICE_030
    assert "dice_030" not in R.REGISTRY  # nothing leaks into other tests


def test_a_new_metric_is_one_registration(stores, dice_030, tmp_path):
    root, gt, sub = stores
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = score_submission(root / "sub.zarr", root / "gt.zarr", bootstrap=30, seed=1)
        write_outputs(res, tmp_path / "out")
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    pairs = pd.read_parquet(tmp_path / "out" / "pairs.parquet")
    assert "dice_030" in pairs.columns
    for name, g in gt.items():
        means = []
        for cname in g.classes:
            brute = [ref.pair_values(mp, r)[1][30] for mp, r in _brute_pairs(gt, sub, name, cname)]
            entry = m["datasets"][name]["classes"][cname]
            if not brute:
                assert entry["dice_030"] is None
                continue
            assert entry["dice_030"] == pytest.approx(np.mean(brute), abs=1e-12)
            lo, hi = entry["ci95"]["dice_030"]
            assert lo <= hi
            means.append(np.mean(brute))
            col = pairs[(pairs["dataset"] == name) & (pairs["class"] == cname) & pairs["has_region"]]
            assert sorted(col["dice_030"]) == pytest.approx(sorted(brute), abs=1e-12)
        assert m["datasets"][name]["summary"]["dice_030"] == pytest.approx(np.mean(means), abs=1e-12)
        assert "dice_030" in m["datasets"][name]["ci95"]
    assert "dice_030" in m["overall"] and "dice_030" in m["ci95"]
    table = (tmp_path / "out" / "table_grounding_more.md").read_text()
    assert "Dice@0.3" in table and f"{100 * m['overall']['dice_030']:.2f}" in table

    from xbench.score.report import build_report

    build_report(tmp_path / "report", [tmp_path / "out"], bootstrap=0, overlays=False)
    board = (tmp_path / "report" / "leaderboard.md").read_text()
    assert "More grounding metrics" in board and "Dice@0.3" in board
    assert f"{100 * m['overall']['dice_030']:.2f}" in board
    assert (tmp_path / "report" / "grounding_more.csv").is_file()


def test_registering_twice_or_a_bad_rule_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        R.register(R.REGISTRY["dice_best"])
    with pytest.raises(ValueError, match="Best metric"):
        with R.registered(R.Metric("x", "x", "x", "grounding", _dice_values, curve=True,
                                   threshold=R.ChosenBy("dice_fixed"))):
            pass
    with pytest.raises(ValueError, match="threshold rule"):
        R.Metric("y", "y", "y", "grounding", _dice_values, curve=True)
    assert "x" not in R.REGISTRY
