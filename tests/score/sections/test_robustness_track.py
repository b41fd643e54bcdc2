"""The robustness track (contract §Robustness track): perturbed copies at preparation, their table in the ground
truth, and the scorer's "robustness" section against brute force.

Brute force here never calls the scorer's robustness code: warped-back maps are numpy flips and quarter turns
(the direction pinned against the augmentation's image function), Spearman's rho is scipy's, the flips are
loops over sigmoid probabilities, and the copies' grounding metrics are those of an explicit ground truth and
submission in which every copy is an ordinary case with its maps already warped back.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from xbench.schemas import DatasetSpec, SubmissionWriter, read_ground_truth, write_ground_truth
from xbench.schemas import perturbations as PT
from xbench.schemas.augment import parse_spec
from xbench.score.scoring import score_submission

from score_stores import run_score_cli
from nested import assert_nested_close

ROOT = Path(__file__).resolve().parents[3]
CLASSES = ["Cardiomegaly", "Nodule/Mass", "Pneumothorax"]
SPECS = ["hflip", "brightness:delta=-20..20", "rotate:degrees=90"]
K = 2
KS = (1, K, 1)  # copies per case of each SPEC: one for a SPEC whose copies could not differ (neither seeded nor ranged)


# --------------------------------------------------------------------------------------------- fixtures
def _clean(n=9, grid=(8, 8), seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=(n, len(CLASSES))).astype(np.int8)
    labels[rng.random(labels.shape) < 0.1] = -1
    pairs = np.argwhere(labels == 1).astype(np.int32)
    masks = np.zeros((len(pairs), *grid), bool)
    for k in range(len(pairs)):
        y, x = rng.integers(0, grid[0] - 2), rng.integers(0, grid[1] - 2)
        masks[k, y:y + rng.integers(1, grid[0] - y + 1), x:x + rng.integers(1, grid[1] - x + 1)] = True
    ids = [f"case-{i:02d}" for i in range(n)]
    orig = np.stack([rng.integers(200, 600, n), rng.integers(200, 600, n)], axis=1)
    return dict(case_ids=ids, classes=CLASSES, labels=labels, region_index=pairs, region_mask=masks,
                orig_size=orig, grid=grid)


def _table(ids):
    return PT.plan_copies("phantom", ids, PT.parse_templates(SPECS), K, 11)


def _write_sub(path, ids, scores, maps, score_kind="logit", classes=CLASSES):
    w = SubmissionWriter.create(path, model="m", method="x", provenance={}, cases_per_block=5, map_dtype="float32",
                                datasets={"phantom": DatasetSpec(list(ids), list(classes), maps.shape[2:], score_kind, ())})
    for b in w.blocks_todo("phantom"):
        s, e = w.block_rows("phantom", b)
        w.write_block("phantom", b, scores[s:e], maps[s:e])
    w.finish()


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """gt with copies, the same gt without, and a random submission holding every case and copy (maps with
    ties and a constant map; scores with exact zeros), as raw arrays too."""
    d = tmp_path_factory.mktemp("robust")
    clean = _clean()
    table = _table(clean["case_ids"])
    write_ground_truth(d / "gt.zarr", "phantom", **clean, perturbations=table)
    write_ground_truth(d / "plain.zarr", "phantom", **clean)
    rng = np.random.default_rng(3)
    ids = list(clean["case_ids"]) + table.id.tolist()
    ids = [ids[i] for i in rng.permutation(len(ids))]  # any order: rows are matched by id
    n, c = len(ids), len(CLASSES)
    scores = rng.normal(size=(n, c)).astype(np.float32)
    scores[rng.random(scores.shape) < 0.15] = 0.0  # exactly on the decision threshold
    maps = (np.round(rng.standard_normal((n, c, *clean["grid"])) * 2) / 2).astype(np.float32)  # ties
    maps[3, 1] = 1.5  # a constant map
    maps[5] = 0.25  # constant maps in every class
    _write_sub(d / "sub.zarr", ids, scores, maps)
    clean_rows = [ids.index(x) for x in clean["case_ids"]]
    _write_sub(d / "sub_clean.zarr", clean["case_ids"], scores[clean_rows], maps[clean_rows])
    return dict(dir=d, clean=clean, table=table, ids=ids, scores=scores, maps=maps)


def _brute_warp(spec_text: str, m: np.ndarray) -> np.ndarray:
    """The map over the original frame, by the definition of each augmentation (no invert_map)."""
    name = spec_text.split(":")[0]
    if name == "hflip":
        return m[..., ::-1]
    if name == "rotate":  # a quarter turn counter-clockwise as displayed: undone by a clockwise one
        return np.rot90(m, -1, axes=(-2, -1))
    return m  # photometric: the frame does not move


def test_the_brute_warps_match_the_augmentations_image_functions():
    im = np.arange(64, dtype=np.uint8).reshape(8, 8)
    assert np.array_equal(parse_spec("hflip").apply_image(im, seed=0), im[:, ::-1])
    assert np.array_equal(parse_spec("rotate:degrees=90").apply_image(im, seed=0), np.rot90(im, 1))


def _score(sub, gt, **kw):
    return score_submission(sub, gt, bootstrap=kw.pop("bootstrap", 0), **kw).metrics


@pytest.fixture(scope="module")
def scored(stores):
    return _score(stores["dir"] / "sub.zarr", stores["dir"] / "gt.zarr", bootstrap=50)


# ------------------------------------------------------------------------------------------ clean exactness
def test_clean_metrics_are_exactly_those_without_copies(stores, scored):
    plain = _score(stores["dir"] / "sub.zarr", stores["dir"] / "plain.zarr", bootstrap=50)
    assert "robustness" not in plain and plain["xbench"]["schema_minor"] < 4
    assert scored["xbench"]["schema_minor"] == 4
    for key in ("datasets", "overall", "ci95"):
        assert scored[key] == plain[key]
    assert list(scored)[-1] == "robustness"


def test_a_submission_without_the_copies_scores_clean_and_says_why(stores, scored):
    m = _score(stores["dir"] / "sub_clean.zarr", stores["dir"] / "gt.zarr", bootstrap=50)
    assert m["datasets"] == scored["datasets"]
    entry = m["robustness"]["datasets"]["phantom"]
    assert entry["available"] is False and "none of the perturbed copies" in entry["reason"]
    assert entry["n_copies"] == len(stores["table"]) == 9 * sum(KS)


# ----------------------------------------------------------------------------------------------- brute force
def _copies_view(stores, s):
    """Copies of SPEC s as ordinary cases: (ids, labels, region_index, masks, orig, scores, warped maps,
    clean row per copy, spec per copy)."""
    t, clean = stores["table"], stores["clean"]
    sel = [j for j in range(len(t)) if t.group[j] == s]
    row = {cid: i for i, cid in enumerate(stores["ids"])}
    labels = clean["labels"][t.case[sel]]
    ri, masks = [], []
    for v, j in enumerate(sel):
        for r, (case, cls) in enumerate(clean["region_index"]):
            if case == t.case[j]:
                ri.append((v, cls))
                masks.append(clean["region_mask"][r])
    maps = np.stack([_brute_warp(str(t.spec[j]), stores["maps"][row[t.id[j]]]) for j in sel]).astype(np.float32)
    scores = stores["scores"][[row[t.id[j]] for j in sel]]
    return [t.id[j] for j in sel], labels, np.array(ri, np.int32), np.array(masks), clean["orig_size"][t.case[sel]], \
        scores, maps, sel


@pytest.mark.parametrize("s", range(len(SPECS)))
def test_copies_metrics_equal_an_explicit_store_of_warped_copies(stores, scored, tmp_path, s):
    ids, labels, ri, masks, orig, scores, maps, _ = _copies_view(stores, s)
    write_ground_truth(tmp_path / "gt.zarr", "phantom", case_ids=ids, classes=CLASSES, labels=labels, region_index=ri,
                       region_mask=masks, orig_size=orig, grid=stores["clean"]["grid"])
    _write_sub(tmp_path / "sub.zarr", ids, scores, maps)
    want = _score(tmp_path / "sub.zarr", tmp_path / "gt.zarr")["datasets"]["phantom"]
    got = _score(stores["dir"] / "sub.zarr", stores["dir"] / "gt.zarr")["robustness"]["datasets"]["phantom"]
    spec = PT.parse_templates([SPECS[s]])[0].text
    entry = got["specs"][spec]
    assert entry["n_copies"] == len(ids) == 9 * KS[s]
    _close(entry["metrics"], want)


def _close(a, b, where="metrics"):
    """Nested metrics.json values equal up to float summation order."""
    assert_nested_close(a, b, where, rel=1e-12, abs=1e-15)


def _rho(a, b):
    from scipy.stats import spearmanr

    ca, cb = np.ptp(a) == 0, np.ptp(b) == 0
    if ca or cb:
        return 1.0 if ca and cb else 0.0
    return float(spearmanr(a.ravel(), b.ravel()).statistic)


# ------------------------------------------------------------------------------------- the cluster bootstrap
def test_cluster_weights_are_the_case_bootstrap_with_one_case_per_cluster_and_else_whole_clusters():
    from xbench.score.resampling.engine import cluster_weights, resample_weights

    n, b = 7, 300  # several blocks
    one = np.concatenate(list(cluster_weights(np.arange(n), n, b, np.random.default_rng(5))))
    case = np.concatenate(list(resample_weights(n, b, np.random.default_rng(5))))
    assert np.array_equal(one, case)
    cluster = np.array([0, 0, 1, 2, 2, 2, 3])  # 4 clean cases with 2, 1, 3, 1 copies
    got = np.concatenate(list(cluster_weights(cluster, cluster.size, b, np.random.default_rng(5))))
    draws = np.random.default_rng(5).integers(0, 4, size=(b, 4))  # one call: the draws do not depend on blocks
    for r in range(b):
        taken = [j for i in draws[r] for j in np.flatnonzero(cluster == i)]  # every copy of every drawn case
        assert np.array_equal(got[r], np.bincount(taken, minlength=cluster.size))


def _auroc_or_nan(y, p):
    from sklearn.metrics import roc_auc_score

    keep = y >= 0
    y, p = y[keep], p[keep]
    return float(roc_auc_score(y, p)) if 0 < y.sum() < y.size else np.nan


@pytest.mark.parametrize("s", [0, 1])  # hflip (one copy per case) and brightness (K = 2 per case)
def test_copy_intervals_are_a_cluster_bootstrap_over_clean_cases(stores, tmp_path, s):
    """An explicit loop over the draws of default_rng(seed) (clean cases with replacement, every copy of each):
    the copies' metric intervals (all metrics, via the explicit copies store's counts; AUROC also by sklearn) and
    the stability intervals come from the same draws."""
    from xbench.score.resampling import bootstrap as BS
    from xbench.score.scoring import score_submission

    b, seed = 40, 7
    ids, labels, ri, masks, orig, scores, maps, sel = _copies_view(stores, s)
    write_ground_truth(tmp_path / "gt.zarr", "phantom", case_ids=ids, classes=CLASSES, labels=labels, region_index=ri,
                       region_mask=masks, orig_size=orig, grid=stores["clean"]["grid"])
    _write_sub(tmp_path / "sub.zarr", ids, scores, maps)
    dc = score_submission(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=0).counts["phantom"]
    m = score_submission(stores["dir"] / "sub.zarr", stores["dir"] / "gt.zarr", bootstrap=b, seed=seed).metrics
    entry = m["robustness"]["datasets"]["phantom"]["specs"][PT.parse_templates([SPECS[s]])[0].text]
    t, n = stores["table"], len(stores["clean"]["case_ids"])
    case_of = t.case[sel]
    draws = np.random.default_rng(seed).integers(0, n, size=(b, n))
    reps_cls: dict = {}
    reps_sum: dict = {}
    aurocs = []
    for r in range(b):
        taken = np.concatenate([np.flatnonzero(case_of == i) for i in draws[r]])  # explicit-store rows
        w = np.bincount(taken, minlength=len(ids)).astype(np.float64)
        classes, summary = BS.dataset_replicates(dc, w[None])
        for c, stats in classes.items():
            for k, v in stats.items():
                reps_cls.setdefault(c, {}).setdefault(k, []).append(float(v[0]))
        for k, v in summary.items():
            reps_sum.setdefault(k, []).append(float(v[0]))
        aurocs.append([_auroc_or_nan(labels[taken, c], scores[taken, c]) for c in range(len(CLASSES))])
    got = entry["metrics"]
    for k, v in reps_sum.items():
        _close(got["ci95"][k], BS.percentile_interval(np.array(v)), f"ci95.{k}")
    for c, stats in reps_cls.items():
        for k, v in stats.items():
            _close(got["classes"][c]["ci95"][k], BS.percentile_interval(np.array(v)), f"{c}.ci95.{k}")
    aurocs = np.array(aurocs)
    for c, name in enumerate(CLASSES):
        _close(got["classes"][name]["ci95"]["auroc"], BS.percentile_interval(aurocs[:, c]), f"{name} auroc by sklearn")
    # stability: the same draws, the per-case values averaged over the drawn cases
    row = {cid: i for i, cid in enumerate(stores["ids"])}
    sig = lambda x: 1.0 / (1.0 + np.exp(-np.float64(x)))  # noqa: E731
    for c, name in enumerate(CLASSES):
        rate = np.zeros(n)
        for i, cid in enumerate(stores["clean"]["case_ids"]):
            mine = [j for j in sel if t.case[j] == i]
            rate[i] = np.mean([(sig(stores["scores"][row[t.id[j]], c]) >= 0.5)
                               != (sig(stores["scores"][row[cid], c]) >= 0.5) for j in mine])
        want = BS.percentile_interval(rate[draws].mean(axis=1))
        _close(entry["stability"]["classes"][name]["ci95"]["flip_rate"], want, f"{name} flip_rate")


def test_with_one_copy_per_case_the_intervals_are_the_case_bootstrap_over_the_copies(stores, tmp_path):
    """K = 1 (hflip): the numbers the case bootstrap gave before the cluster bootstrap existed, on the copies
    ordered by clean case (the scorer's view)."""
    ids, labels, ri, masks, orig, scores, maps, sel = _copies_view(stores, 0)
    order = np.argsort(stores["table"].case[sel], kind="stable")
    assert len(order) == 9
    inv = {v: k for k, v in enumerate(order.tolist())}
    ri2 = np.array([(inv[v], c) for v, c in ri], np.int32)
    keep = np.lexsort((ri2[:, 1], ri2[:, 0]))
    write_ground_truth(tmp_path / "gt.zarr", "phantom", case_ids=[ids[i] for i in order], classes=CLASSES,
                       labels=labels[order], region_index=ri2[keep], region_mask=masks[keep], orig_size=orig[order],
                       grid=stores["clean"]["grid"])
    _write_sub(tmp_path / "sub.zarr", [ids[i] for i in order], scores[order], maps[order])
    want = _score(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=30, seed=4)["datasets"]["phantom"]
    got = _score(stores["dir"] / "sub.zarr", stores["dir"] / "gt.zarr", bootstrap=30, seed=4)
    _close(got["robustness"]["datasets"]["phantom"]["specs"]["hflip"]["metrics"], want)


@pytest.mark.parametrize("s", range(len(SPECS)))
def test_stability_equals_brute_force(stores, scored, s):
    t, clean = stores["table"], stores["clean"]
    row = {cid: i for i, cid in enumerate(stores["ids"])}
    n = len(clean["case_ids"])
    rho_mean, rho_worst, flip_rate, flip_any = (np.zeros((n, len(CLASSES))) for _ in range(4))
    sig = lambda x: 1.0 / (1.0 + np.exp(-np.float64(x)))  # noqa: E731
    for i, cid in enumerate(clean["case_ids"]):
        mine = [j for j in range(len(t)) if t.group[j] == s and t.case[j] == i]
        assert len(mine) == KS[s]
        for c in range(len(CLASSES)):
            a = stores["maps"][row[cid], c].astype(np.float64)  # map size = grid: the resize is the identity
            rhos, flips = [], []
            for j in mine:
                b = _brute_warp(str(t.spec[j]), stores["maps"][row[t.id[j]]])[c].astype(np.float64)
                rhos.append(_rho(a, b))
                flips.append((sig(stores["scores"][row[t.id[j]], c]) >= 0.5) != (sig(stores["scores"][row[cid], c]) >= 0.5))
            rho_mean[i, c], rho_worst[i, c] = np.mean(rhos), np.min(rhos)
            flip_rate[i, c], flip_any[i, c] = np.mean(flips), float(any(flips))
    spec = PT.parse_templates([SPECS[s]])[0].text
    got = scored["robustness"]["datasets"]["phantom"]["specs"][spec]["stability"]
    for c, name in enumerate(CLASSES):
        e = got["classes"][name]
        assert e["n_pairs"] == n
        assert e["map_spearman_mean"] == pytest.approx(rho_mean[:, c].mean(), abs=1e-12)
        assert e["map_spearman_worst"] == pytest.approx(rho_worst[:, c].mean(), abs=1e-12)
        assert e["flip_rate"] == pytest.approx(flip_rate[:, c].mean(), abs=1e-15)
        assert e["flip_any"] == pytest.approx(flip_any[:, c].mean(), abs=1e-15)
        assert e["ci95"]["flip_rate"][0] <= e["flip_rate"] <= e["ci95"]["flip_rate"][1]
    assert got["summary"]["map_spearman_mean"] == pytest.approx(rho_mean.mean(axis=0).mean(), abs=1e-12)
    if SPECS[s] == "hflip":  # a map and its exact warp back: rho is 1 wherever the submission's maps agree
        assert got["summary"]["map_spearman_worst"] <= 1.0


def test_spearman_ties_and_constant_maps():
    from scipy.stats import spearmanr

    from xbench.score.sections.robustness import average_ranks, spearman

    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = np.round(rng.normal(size=(6, 7)) * 2), np.round(rng.normal(size=(6, 7)))
        assert spearman(a, b) == pytest.approx(spearmanr(a.ravel(), b.ravel()).statistic, abs=1e-12)
    x = np.array([3.0, 1.0, 3.0, 2.0, 3.0])
    assert average_ranks(x).tolist() == [4.0, 1.0, 4.0, 2.0, 4.0]
    assert spearman(np.ones((3, 3)), np.full((3, 3), 7.0)) == 1.0
    assert spearman(np.ones((3, 3)), np.arange(9.0).reshape(3, 3)) == 0.0
    assert spearman(np.arange(9.0), np.arange(9.0)[::-1]) == pytest.approx(-1.0)


def test_a_symmetric_baseline_is_exactly_stable_under_hflip(stores, tmp_path):
    """Maps that are mirror-symmetric and scores equal on every copy: rho 1 and no flip under hflip."""
    ids = stores["ids"]
    maps = stores["maps"].copy()
    maps = (maps + maps[..., ::-1]) / 2  # symmetric about the vertical axis
    t = stores["table"]
    row = {cid: i for i, cid in enumerate(ids)}
    scores = stores["scores"].copy()
    for j in range(len(t)):  # every copy scores as its clean case; hflip copies map as their clean case
        case_id = stores["clean"]["case_ids"][t.case[j]]
        scores[row[t.id[j]]] = scores[row[case_id]]
        if str(t.spec[j]) == "hflip":
            maps[row[t.id[j]]] = maps[row[case_id]]
    _write_sub(tmp_path / "sym.zarr", ids, scores, maps)
    m = _score(tmp_path / "sym.zarr", stores["dir"] / "gt.zarr")
    st = m["robustness"]["datasets"]["phantom"]["specs"]["hflip"]["stability"]["summary"]
    assert st == {"map_spearman_mean": 1.0, "map_spearman_worst": 1.0, "flip_rate": 0.0, "flip_any": 0.0}


# ------------------------------------------------------------------------------------------- the gt table
def test_table_design_ranges_seeds_ids():
    t = _table([f"c{i}" for i in range(5)])
    assert len(t) == 5 * sum(KS) and list(t.id) == sorted(t.id)
    drawn = [float(s.split("=")[1]) for s in t.spec if s.startswith("brightness")]
    assert len(set(drawn)) == len(drawn) and all(-20 <= v <= 20 for v in drawn)
    assert all(round(v, 4) == v for v in drawn)
    assert len(set(t.seed.tolist())) == len(t)  # every copy its own seed
    again = _table([f"c{i}" for i in range(5)])
    assert all(np.array_equal(getattr(t, a), getattr(again, a)) for a in ("id", "case", "group", "spec", "seed"))
    other = PT.plan_copies("phantom", [f"c{i}" for i in range(5)], PT.parse_templates(SPECS), K, 12)
    assert not set(other.id) & set(t.id)  # another key: unrelated ids
    # an integer parameter draws integers, both ends included
    ints = PT.plan_copies("d", [f"c{i}" for i in range(200)], PT.parse_templates(["jpeg:quality=40..41"]), 1, 0)
    assert set(ints.spec.tolist()) == {"jpeg:quality=40", "jpeg:quality=41"}


@pytest.mark.parametrize("a,b", [("rotate", "rotate:degrees=10"), ("rotate:degrees=-10.0..10", "rotate:degrees=-10..10"),
                                 ("translate:y=0..4, x=2", "translate:x=2,y=0..4,side=512"),
                                 ("noise:sigma=8.0", "noise:sigma=8"), ("jpeg:quality=20..60", "jpeg:quality=20..60")])
def test_two_spellings_of_one_spec_are_one_canonical_spec(a, b):
    ta, tb = PT.parse_templates([a])[0], PT.parse_templates([b])[0]
    assert ta.text == tb.text == b and PT.parse_template(ta.text) == ta  # canonical text parses back to itself
    with pytest.raises(PT.InputError, match="twice"):
        PT.parse_templates([a, b])
    ids = [f"c{i}" for i in range(4)]
    pa, pb = (PT.plan_copies("d", ids, [t], 3, 5) for t in (ta, tb))
    assert all(np.array_equal(getattr(pa, k), getattr(pb, k)) for k in ("id", "case", "group", "spec", "seed"))


@pytest.mark.parametrize("spec,k,want", [("hflip", 4, 1), ("jpeg:quality=30", 4, 1), ("rotate:degrees=5..5", 4, 1),
                                         ("rotate", 3, 1), ("noise", 4, 4), ("noise:sigma=0", 2, 2),
                                         ("rotate:degrees=-5..5", 3, 3), ("jpeg:quality=40..41", 2, 2), ("hflip", 1, 1)])
def test_a_spec_whose_copies_cannot_differ_makes_one_copy_whatever_k(spec, k, want):
    t = PT.parse_templates([spec])[0]
    assert t.copies(k) == want
    table = PT.plan_copies("d", ["a", "b", "c"], [t], k, 0)
    assert len(table) == 3 * want and np.bincount(table.case).tolist() == [want] * 3
    assert table.attrs()["copies"] == k  # the run's K is recorded as asked
    assert PT.check(table, ["a", "b", "c"], "gt/d") == []
    if want == 1 and k > 1:  # a table with K copies of such a SPEC (the layout before) is refused, one line
        many = PT.plan_copies("d", ["a", "b", "c"], [PT.parse_templates(["noise"])[0]], k, 0)
        bad = PT.Perturbations(many.id, many.case, many.group, np.full(len(many), t.text), many.seed, (t.text,), k, 0)
        problems = PT.check(bad, ["a", "b", "c"], "gt/d")
        assert problems and any("copies" in str(p) for p in problems)


def _corrupt(src: Path, dst: Path, how: str) -> None:
    from xbench.schemas.store import consolidate

    shutil.copytree(src, dst)
    g = zarr.open_group(str(dst), mode="r+")["phantom"]
    if how == "case out of range":
        g["perturb_case"][0] = 999
    elif how == "array missing":
        shutil.rmtree(dst / "phantom" / "perturb_seed")
    elif how == "minor too low":
        root = zarr.open_group(str(dst), mode="r+")
        root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": 2}
    elif how == "unknown spec":
        g["perturb_spec"][0] = "nosuch:x=1"
    elif how == "id is a case id":
        g["perturb_id"][0] = "case-00"
    elif how == "copies count":
        g.attrs["perturbation"] = {**g.attrs["perturbation"], "copies": 3}
    elif how == "group out of range":
        g["perturb_group"][1] = 7
    consolidate(dst)


@pytest.mark.parametrize("how", ["case out of range", "array missing", "minor too low", "unknown spec",
                                 "id is a case id", "copies count", "group out of range"])
def test_an_inconsistent_perturbation_table_exits_2(stores, tmp_path, capsys, how):
    bad = tmp_path / "gt.zarr"
    _corrupt(stores["dir"] / "gt.zarr", bad, how)
    code, out, err = run_score_cli([stores["dir"] / "sub.zarr", "--gt", bad, "--out", tmp_path / "res", "-q"], capsys)
    assert code == 2, err
    assert "Traceback" not in err and "perturb" in err
    assert not (tmp_path / "res").exists()
    from xbench.cli import main

    res = CliRunner().invoke(main, ["validate", str(bad)])
    assert res.exit_code == 2 and "perturb" in res.output and "Traceback" not in res.output, res.output


# ---------------------------------------------------------------------------------------------- prepare
def _prepare(out: Path, *extra) -> object:
    from xbench.cli import main

    return CliRunner().invoke(main, ["prepare", "phantom", "--out", str(out), "--n-cases", "6", "--image-size", "32",
                                     "--grid", "16", "-q", *map(str, extra)])


@pytest.mark.parametrize("args,says", [
    (["--perturb", "nosuch"], "unknown augmentation"),
    (["--perturb", "rotate:degrees=abc"], "degrees"),
    (["--perturb", "rotate:degrees=5..1"], "low to a high"),
    (["--perturb", "rotate:degrees=1..9999"], "360"),
    (["--perturb", "rotate:degres=1..2"], "did you mean degrees"),
    (["--perturb", "hflip:" + "x" * 5000], "characters"),
    (["--perturb", ",".join(f"noise:sigma={i + 1}" for i in range(17))], "at most 16"),
    (["--perturb", "hflip,hflip"], "twice"),
    (["--perturb", "hflip", "--perturb-copies", "33"], "perturb-copies"),
    (["--perturb", "hflip", "--perturb-copies", str(10**12)], "perturb-copies"),
    (["--perturb", "hflip", "--seed", str(2**64)], "seed"),
])
def test_bad_perturb_options_exit_2_in_one_line(tmp_path, args, says):
    res = _prepare(tmp_path / "out", *args)
    assert res.exit_code == 2, res.output
    assert says in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out" / "gt.zarr").exists()


def test_too_many_copies_for_the_store_limit_exit_2(tmp_path, monkeypatch):
    import xbench.extract.datasets.prepare  # noqa: F401  (every module that copies the limit at import, first)
    import xbench.schemas.ground_truth  # noqa: F401
    import xbench.schemas.images  # noqa: F401
    import xbench.schemas.store as store

    monkeypatch.setattr(store, "MAX_CASES", 30)  # 6 cases x (1 + 1 hflip + 2 noise + 2 blur copies) = 36 rows
    res = _prepare(tmp_path / "out", "--perturb", "hflip,noise,blur:sigma=0.5..2", "--perturb-copies", "2", "--workers", "1")
    assert res.exit_code == 2 and "limit" in res.output, res.output
    assert not (tmp_path / "out" / "gt.zarr").exists()


def test_prepare_writes_copies_deterministically_with_any_worker_count(tmp_path):
    from xbench.schemas import read_images, validate_ground_truth, validate_images

    args = ["--perturb", "hflip,rotate:degrees=-10..10,noise", "--perturb-copies", "2", "--seed", "99", "--keep-original"]
    assert _prepare(tmp_path / "a", *args, "--workers", "1").exit_code == 0
    assert _prepare(tmp_path / "b", *args, "--workers", "2", "--cases-per-block", "5").exit_code == 0
    assert validate_images(tmp_path / "a" / "images.zarr") == [] and validate_ground_truth(tmp_path / "a" / "gt.zarr") == []
    ta, tb = (read_ground_truth(tmp_path / x / "gt.zarr").datasets["phantom"].perturbations for x in "ab")
    for a in ("id", "case", "group", "spec", "seed"):
        assert np.array_equal(getattr(ta, a), getattr(tb, a))
    ia, ib = (read_images(tmp_path / x / "images.zarr").datasets["phantom"] for x in "ab")
    assert np.array_equal(np.asarray(ia.image[...]), np.asarray(ib.image[...]))
    gt = read_ground_truth(tmp_path / "a" / "gt.zarr").datasets["phantom"]
    n = len(gt.case_id)
    assert ia.case_id[:n].tolist() == gt.case_id.tolist() and ia.case_id[n:].tolist() == ta.id.tolist()
    assert np.bincount(ta.group).tolist() == [n, 2 * n, 2 * n]  # hflip: one copy whatever K; ranged and seeded: K
    root = zarr.open_group(str(tmp_path / "a" / "images.zarr"), mode="r")
    assert root.attrs["xbench"]["schema_minor"] >= 3 and root["phantom"].attrs["perturbed_copies"] == len(ta)
    assert ta.attrs() == {"specs": ["hflip", "rotate:degrees=-10..10", "noise:sigma=8"], "copies": 2, "seed": 99}
    # a copy is its augmentation applied to the clean image (and to the original) with its own seed
    for j in range(len(ta)):
        spec, clean = parse_spec(str(ta.spec[j])), int(ta.case[j])
        want = spec.apply_image(np.asarray(ia.image[clean]), seed=int(ta.seed[j]))
        assert np.array_equal(np.asarray(ia.image[n + j]), want)
        assert np.array_equal(ia.original(n + j), spec.apply_image(ia.original(clean), seed=int(ta.seed[j])))
    plain = tmp_path / "plain"
    assert _prepare(plain, "--workers", "1", "--keep-original", "--seed", "99").exit_code == 0  # phantom: --seed is its seed too
    ip = read_images(plain / "images.zarr").datasets["phantom"]
    assert np.array_equal(np.asarray(ip.image[...]), np.asarray(ia.image[:n]))  # clean rows unchanged


# -------------------------------------------------------------------------------------- tables and report
def test_the_robustness_table_and_hostile_sections(stores, scored, tmp_path):
    from xbench.score.sections.robustness_table import robustness_table

    t = robustness_table({"m": scored})
    assert [r[2] for r in t.rows] == ["clean", "hflip", "brightness:delta=-20..20", "rotate:degrees=90"]
    assert t.rows[("m", "Phantom", "hflip", str(9 * KS[0]))][4].value == \
        scored["robustness"]["datasets"]["phantom"]["specs"]["hflip"]["stability"]["summary"]["map_spearman_mean"]
    for junk in ([], {"datasets": []}, {"datasets": {"phantom": []}},
                 {"datasets": {"phantom": {"available": True, "specs": {"x": {"metrics": 3, "stability": {"summary": {
                     "flip_rate": "high"}, "ci95": {"flip_rate": [None, 1]}}}}}}}):
        table = robustness_table({"m": {**scored, "robustness": junk}})
        if table is not None:
            table.to_markdown(), table.to_csv(), table.to_html()


@pytest.mark.slow
def test_the_robustness_suite_runs(tmp_path):
    """suites/robustness.yaml as it stands (docs/how-to/robustness.md shows it)."""
    pytest.importorskip("torch")  # the suite extracts (make test-scorer-only has no torch)
    from xbench.cli import main

    res = CliRunner().invoke(main, ["run", str(ROOT / "suites" / "robustness.yaml"), "--out", str(tmp_path / "run"), "-q"])
    assert res.exit_code == 0, res.output
    for model in ("random", "center", "dog", "clip-tiny"):
        m = json.loads((tmp_path / "run" / "scores" / model / "metrics.json").read_text())
        entry = m["robustness"]["datasets"]["phantom"]
        assert entry["available"] is True and len(entry["specs"]) == 3
        assert (tmp_path / "run" / "scores" / model / "table_robustness.md").exists()
    dog = json.loads((tmp_path / "run" / "scores" / "dog" / "metrics.json").read_text())
    assert dog["robustness"]["datasets"]["phantom"]["specs"]["hflip"]["stability"]["summary"]["flip_rate"] == 0.0
    assert "Robustness" in (tmp_path / "run" / "report" / "index.html").read_text()


@pytest.mark.parametrize("block,says", [
    ('perturb: ["hflip", 5]', "a SPEC string or a list"),
    ('perturb: ["rotate:degrees=abc"]', "degrees"),
    ("perturb: [hflip]\n  perturb_copies: 99", "perturb_copies"),
    ("perturb: nosuch", "unknown augmentation"),
])
def test_a_suite_with_bad_perturbations_is_refused_before_running(tmp_path, block, says):
    from xbench.cli import main

    suite = tmp_path / "s.yaml"
    suite.write_text(f"name: s\nout: o\nprepare:\n  {block}\ndatasets:\n  phantom:\n    options: {{n_cases: 4}}\n"
                     "models: [center]\n")
    res = CliRunner().invoke(main, ["run", str(suite), "--dry-run"])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output, res.output


def test_stability_resizes_maps_to_the_grid_first(tmp_path):
    """Maps of 5 x 5 over an 8 x 8 grid: rho is taken on the grid (torch's bilinear, the contract's resize)."""
    torch = pytest.importorskip("torch")
    from scipy.stats import spearmanr

    clean = _clean(n=5, grid=(8, 8), seed=4)
    table = PT.plan_copies("phantom", clean["case_ids"], PT.parse_templates(["hflip"]), 2, 3)
    write_ground_truth(tmp_path / "gt.zarr", "phantom", **clean, perturbations=table)
    rng = np.random.default_rng(8)
    ids = list(clean["case_ids"]) + table.id.tolist()
    maps = rng.standard_normal((len(ids), len(CLASSES), 5, 5)).astype(np.float32)
    scores = rng.normal(size=(len(ids), len(CLASSES))).astype(np.float32)
    _write_sub(tmp_path / "sub.zarr", ids, scores, maps)
    got = _score(tmp_path / "sub.zarr", tmp_path / "gt.zarr")["robustness"]["datasets"]["phantom"]["specs"]["hflip"]

    def grid(m):
        t = torch.from_numpy(m.astype(np.float64))[None, None]
        return torch.nn.functional.interpolate(t, size=(8, 8), mode="bilinear", align_corners=False)[0, 0].numpy()

    for c, name in enumerate(CLASSES):
        per_case = []
        for i in range(5):
            rhos = [spearmanr(grid(maps[i, c]).ravel(), grid(maps[len(clean["case_ids"]) + j, c][:, ::-1]).ravel()).statistic
                    for j in range(len(table)) if table.case[j] == i]
            per_case.append((np.mean(rhos), np.min(rhos)))
        e = got["stability"]["classes"][name]
        assert e["map_spearman_mean"] == pytest.approx(np.mean([p[0] for p in per_case]), abs=1e-9)
        assert e["map_spearman_worst"] == pytest.approx(np.mean([p[1] for p in per_case]), abs=1e-9)


def test_a_partial_run_reports_robustness_as_unavailable(stores, tmp_path):
    keep = stores["clean"]["case_ids"][:5]
    row = {cid: i for i, cid in enumerate(stores["ids"])}
    ids = keep + stores["table"].id.tolist()
    rows = [row[x] for x in ids]
    _write_sub(tmp_path / "part.zarr", ids, stores["scores"][rows], stores["maps"][rows])
    m = _score(tmp_path / "part.zarr", stores["dir"] / "gt.zarr", allow_missing=True)
    entry = m["robustness"]["datasets"]["phantom"]
    assert entry["available"] is False and "part of the cases" in entry["reason"]
    assert m["xbench"]["schema_minor"] == 4 and m["partial"]["cases"] == 5


class _Crash(Exception):
    pass


@pytest.mark.parametrize("crash_at", ["staging", "copies"])
def test_a_run_killed_while_writing_copies_resumes_to_the_same_stores(tmp_path, monkeypatch, crash_at):
    from xbench.extract.datasets import perturb as P
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset
    from xbench.schemas.store import store_sha256

    kw = dict(grid=(16, 16), image_size=32, workers=1, cases_per_block=4, progress=False,
              perturb=["hflip,noise"], perturb_copies=2, perturb_seed=5)
    prepare_dataset(PhantomReader(n_cases=6, seed=1, size=64), tmp_path / "ref", **kw)
    calls = {"n": 0}
    if crash_at == "staging":
        def crash(*a, **k):
            raise _Crash
        monkeypatch.setattr(P, "_stage_clean", crash)
    else:
        real = P._row_image

        def crash(*a, **k):  # dies in the middle of the copies' blocks
            calls["n"] += 1
            if calls["n"] > 13:
                raise _Crash
            return real(*a, **k)
        monkeypatch.setattr(P, "_row_image", crash)
    with pytest.raises(_Crash):
        prepare_dataset(PhantomReader(n_cases=6, seed=1, size=64), tmp_path / "run", **kw)
    assert not (tmp_path / "run" / "gt.zarr" / "phantom").exists()  # no ground truth before the copies are done
    monkeypatch.undo()
    prepare_dataset(PhantomReader(n_cases=6, seed=1, size=64), tmp_path / "run", **kw)
    for store in ("images.zarr", "gt.zarr"):
        assert store_sha256(tmp_path / "ref" / store) == store_sha256(tmp_path / "run" / store)


@pytest.mark.parametrize("model", ["dog", "center", "clip-tiny"])
def test_clean_metrics_of_an_extraction_with_copies_equal_those_without(tmp_path, model):
    """End to end: prepare with and without --perturb, extract on the whole store, score: the clean numbers
    are identical (the copies only add rows, matched away by id)."""
    pytest.importorskip("torch")
    from xbench.cli import main

    out = {}
    for name, extra in (("plain", []), ("perturbed", ["--perturb", "hflip,noise", "--perturb-copies", "2"])):
        d = tmp_path / name
        assert _prepare(d, "--workers", "1", "--seed", "3", *extra).exit_code == 0
        res = CliRunner().invoke(main, ["extract", "--model", model, "--images", str(d / "images.zarr"),
                                        "--out", str(d / "sub.zarr"), "--workers", "0", "-q"])
        assert res.exit_code == 0, res.output
        out[name] = _score(d / "sub.zarr", d / "gt.zarr", bootstrap=30)
    for key in ("datasets", "overall", "ci95"):
        assert out["plain"][key] == out["perturbed"][key]
    assert out["perturbed"]["robustness"]["datasets"]["phantom"]["available"] is True


@pytest.mark.parametrize("value,minor", [(-1, 3), ("7", 3), (10**9, 3), (True, 3), (4, 2)])
def test_an_images_store_with_a_wrong_copy_count_is_invalid(tmp_path, value, minor):
    from xbench.schemas import validate_images
    from xbench.schemas.store import consolidate

    assert _prepare(tmp_path / "a", "--workers", "1", "--perturb", "hflip").exit_code == 0
    store = tmp_path / "a" / "images.zarr"
    assert validate_images(store) == []
    root = zarr.open_group(str(store), mode="r+")
    root["phantom"].attrs["perturbed_copies"] = value
    root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": minor}
    consolidate(store)
    problems = validate_images(store)
    assert problems and all("perturbed copies" in p.message or "perturbed_copies" in p.message for p in problems)
