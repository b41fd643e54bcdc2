"""The report over the real scorer's outputs: the fixture's reference metrics equal the scorer's,
the report's identity resample equals the scorer's metrics.json, and the tables hold its values."""
from __future__ import annotations

import csv
import json

import pytest

from xbench.score.outputs import write_outputs
from xbench.score.report import build_report, load_results
from xbench.score.report.paired import paired_bootstrap
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
    for r in paired_bootstrap(a, b, n_boot=0, per_class=True):
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
    index = build_report(tmp_path, scored, n_boot=30)
    assert index.is_file()
    manifest = json.loads((tmp_path / "report.json").read_text())
    assert manifest["skipped"] == [] and len(manifest["files"]["overlays"]) == 12
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
