"""The report over the real scorer's outputs: the fixture's reference metrics equal the scorer's,
the report's identity resample equals the scorer's metrics.json, and the tables hold its values."""
from __future__ import annotations

import csv
import json

import pytest

from xbench.score.outputs.folder import write_outputs
from xbench.score.report import build_report, load_results
from xbench.score.report.paired import compare_results as paired_bootstrap
from xbench.score.scoring import score_submission

KEYS = ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best", "auroc", "auprc", "f1", "accuracy")


@pytest.fixture(scope="module")
def scored(result_dirs, tmp_path_factory):
    """The fixture's submission stores scored by xbench.score (50 resamples), one folder each."""
    root = tmp_path_factory.mktemp("scored")
    out = []
    for d in result_dirs:
        inputs = json.loads((d / "metrics.json").read_text())["xbench"]["inputs"]
        res = score_submission(inputs["submission"], inputs["gt"], bootstrap=50, seed=1)
        res.metrics["xbench"]["inputs"]["images"] = inputs["images"]
        write_outputs(res, root / d.name)
        out.append(root / d.name)
    return out


def test_reference_metrics_equal_the_scorer(result_dirs, scored):
    for ref_dir, real_dir in zip(result_dirs, scored):
        ref = json.loads((ref_dir / "metrics.json").read_text())
        real = json.loads((real_dir / "metrics.json").read_text())
        for d, ds in ref["datasets"].items():
            for c, e in ds["classes"].items():
                for k in KEYS + ("tau_dice", "tau_iou"):
                    assert real["datasets"][d]["classes"][c][k] == pytest.approx(e[k], abs=1e-12), (d, c, k)
            for k in KEYS:
                assert real["datasets"][d]["summary"][k] == pytest.approx(ds["summary"][k], abs=1e-12)


def test_identity_resample_equals_scorer_metrics(scored):
    a, b = load_results([scored[0], scored[1]])
    for r in paired_bootstrap(a, b, bootstrap=0, per_class=True):
        if r.scope == "overall":
            ea, eb = a.metrics["overall"].get(r.metric), b.metrics["overall"].get(r.metric)
        elif r.cls is None:
            ea, eb = (x.metrics["datasets"][r.scope]["summary"][r.metric] for x in (a, b))
        else:
            ea, eb = (x.metrics["datasets"][r.scope]["classes"][r.cls][r.metric] for x in (a, b))
        if ea is None or eb is None:
            continue
        assert r.diff == pytest.approx(ea - eb, abs=1e-12), r


def test_report_over_scorer_outputs(scored, tmp_path):
    index = build_report(tmp_path, scored, bootstrap=30)
    assert index.is_file()
    manifest = json.loads((tmp_path / "report.json").read_text())
    assert manifest["skipped"] == [] and len(manifest["files"]["overlays"]) == 6  # 3 models x 2 datasets, PNG
    with open(tmp_path / "leaderboard.csv", newline="") as fh:
        rows = {r["model"]: r for r in csv.DictReader(fh)}
    for d in scored:
        m = json.loads((d / "metrics.json").read_text())
        row = rows[m["xbench"]["submission"]["model"]]
        assert float(row["overall/pointing_game"]) == m["overall"]["pointing_game"]
        lo, hi = m["ci95"]["pointing_game"]  # the scorer's own overall interval is used
        assert (float(row["overall/pointing_game/ci_lo"]), float(row["overall/pointing_game/ci_hi"])) == (lo, hi)
        for ds, entry in m["datasets"].items():
            assert float(row[f"{ds}/dice_best"]) == entry["summary"]["dice_best"]
            assert float(row[f"{ds}/dice_best/ci_lo"]) == entry["ci95"]["dice_best"][0]


def _metrics_json_intervals(m):
    """Every ci95 of a metrics.json: {(dataset or None, class or None, key): [lo, hi] or None}."""
    out = {(None, None, k): v for k, v in m["ci95"].items()}
    for d, ds in m["datasets"].items():
        out.update({(d, None, k): v for k, v in ds["ci95"].items()})
        for c, e in ds["classes"].items():
            out.update({(d, c, k): v for k, v in e.get("ci95", {}).items()})
    return out


def test_report_intervals_equal_the_scorers_exactly(scored, tmp_path):
    """Same n and seed: the engine's replicates, the report's missing intervals and its tables reproduce
    metrics.json's ci95 to the last bit (the scorer wrote them with 50 resamples and seed 1)."""
    import shutil

    import numpy as np

    from xbench.score.resampling import bootstrap as BS
    from xbench.score.report.paired import missing_intervals

    a = load_results([scored[0]])[0]
    want = _metrics_json_intervals(a.metrics)
    assert sum(v is not None for v in want.values()) > 40
    reps = BS.bootstrap_replicates(a.counts, bootstrap=50, seed=1)
    got = {(None, None, k): BS.percentile_interval(v) for k, v in BS.overall_replicates(reps).items()}
    for d, r in reps.items():
        got.update({(d, None, k): BS.percentile_interval(v) for k, v in r.summary.items()})
        got.update({(d, c, k): BS.percentile_interval(v) for c, s in r.classes.items() for k, v in s.items()})
    assert got == want
    assert _metrics_json_intervals(missing_intervals(a, bootstrap=50, seed=1)) == want

    # a copy of the result without intervals (as if scored with --bootstrap 0): the report fills them in
    bare = tmp_path / "bare"
    shutil.copytree(scored[0], bare)
    m = json.loads((bare / "metrics.json").read_text())
    m.pop("ci95")
    for ds in m["datasets"].values():
        ds.pop("ci95")
        for e in ds["classes"].values():
            e.pop("ci95", None)
    (bare / "metrics.json").write_text(json.dumps(m))
    build_report(tmp_path / "rep", [bare], bootstrap=50, seed=1, overlays=False)
    with open(tmp_path / "rep" / "leaderboard.csv", newline="") as fh:
        row = next(csv.DictReader(fh))
    for d in a.datasets:
        for k in ("pointing_game", "dice_best", "iou_best"):
            assert [float(row[f"{d}/{k}/ci_lo"]), float(row[f"{d}/{k}/ci_hi"])] == want[(d, None, k)]
    assert [float(row["overall/pointing_game/ci_lo"]), float(row["overall/pointing_game/ci_hi"])] == \
        want[(None, None, "pointing_game")]
    with open(tmp_path / "rep" / "per_class" / "phantom_pointing_game.csv", newline="") as fh:
        row = next(csv.DictReader(fh))
    for c in a.metrics["datasets"]["phantom"]["classes"]:
        assert [float(row[f"{c}/pointing_game/ci_lo"]), float(row[f"{c}/pointing_game/ci_hi"])] == \
            want[("phantom", c, "pointing_game")]
    assert np.isfinite(float(row["mean/pointing_game/ci_lo"]))


def test_paired_comparison_uses_the_scorers_resamples(scored):
    """A result compared with itself shifted by nothing: each side's replicates are those behind its own
    metrics.json intervals, so A vs B replicates reproduce both metrics.json interval sets."""
    from xbench.score.resampling import bootstrap as BS

    a, b = load_results([scored[0], scored[1]])
    rows = {(r.scope, r.cls, r.metric): r for r in paired_bootstrap(a, b, bootstrap=50, seed=1)}
    reps_a = BS.bootstrap_replicates(a.counts, bootstrap=50, seed=1)
    reps_b = BS.bootstrap_replicates(b.counts, bootstrap=50, seed=1)
    for d in a.datasets:
        for k in ("pointing_game", "auroc"):
            diff = reps_a[d].summary[k] - reps_b[d].summary[k]
            assert [rows[(d, None, k)].ci_lo, rows[(d, None, k)].ci_hi] == BS.percentile_interval(diff)
        assert BS.percentile_interval(reps_b[d].summary["dice_best"]) == \
            b.metrics["datasets"][d]["ci95"]["dice_best"]


def test_transferred_thresholds_are_kept(scored, tmp_path):
    """A result scored with thresholds transferred from another: the report's point values and intervals
    keep those thresholds (as the scorer's did) instead of re-choosing them."""
    from xbench.score.report.paired import missing_intervals

    inputs = json.loads((scored[1] / "metrics.json").read_text())["xbench"]["inputs"]
    res = score_submission(inputs["submission"], inputs["gt"], bootstrap=20, seed=2,
                           thresholds=scored[0] / "metrics.json")
    write_outputs(res, tmp_path / "t")
    t, b = load_results([tmp_path / "t", scored[1]])
    assert t.metrics["xbench"]["thresholds"] == "transferred"
    n_checked = 0
    for r in paired_bootstrap(t, b, bootstrap=0, per_class=True):
        if r.cls is not None and r.metric in ("dice_best", "iou_best") and r.a is not None:
            assert r.a == pytest.approx(t.metrics["datasets"][r.scope]["classes"][r.cls][r.metric], abs=1e-12)
            n_checked += 1
    assert n_checked > 0
    assert _metrics_json_intervals(missing_intervals(t, bootstrap=20, seed=2)) == _metrics_json_intervals(t.metrics)
