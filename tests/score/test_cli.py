"""xbench-score: exit codes, outputs, formats, and that invalid input writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import zarr

from score_stores import make_gt, make_submission, run_score_cli
from xbench.score.kernels.counts import load_pair_counts


run = run_score_cli


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    gt = make_gt(d / "gt.zarr", seed=7)
    make_submission(d / "a.zarr", gt, seed=8)
    make_submission(d / "b.zarr", gt, seed=9, map_dtype="float32")
    return d


def _tree(path):
    return sorted((str(p.relative_to(path)), p.stat().st_mtime_ns) for p in path.rglob("*"))


def test_scores_and_writes_everything(stores, tmp_path, capsys):
    before = _tree(stores / "gt.zarr"), _tree(stores / "a.zarr")
    code, out, err = run(["a.zarr" if False else stores / "a.zarr", "--gt", stores / "gt.zarr", "--out",
                          tmp_path / "res", "--bootstrap", "30", "--format", "grand-challenge", "--format",
                          "codabench", "--quiet"], capsys)
    assert code == 0, err
    assert out == ""
    files = {p.name for p in (tmp_path / "res").iterdir()}
    assert {"metrics.json", "pairs.parquet", "pair_counts.npz", "scores.json", "table1_grounding.csv",
            "table1_grounding.md", "table_recognition.md", "table_pointing_phantom.csv"} <= files
    m = json.loads((tmp_path / "res" / "metrics.json").read_text())
    assert set(m) >= {"xbench", "overall", "datasets", "aggregates"}
    cls = m["datasets"]["phantom"]["classes"]["Cardiomegaly"]
    assert {"n_positive", "n_regions", "tau_dice", "tau_iou", "ci95", "pointing_game", "auroc"} <= set(cls)
    lo, hi = cls["ci95"]["dice_best"]
    assert lo <= hi
    scores = json.loads((tmp_path / "res" / "scores.json").read_text())
    assert scores["pointing_game"] == m["overall"]["pointing_game"] == m["aggregates"]["pointing_game"]
    pairs = pd.read_parquet(tmp_path / "res" / "pairs.parquet")
    assert {"dataset", "case_id", "class", "label", "probability", "hit", "dice_fixed", "iou_best"} <= set(pairs)
    counts = load_pair_counts(tmp_path / "res" / "pair_counts.npz")
    assert counts["phantom"].b.shape[1] == 101
    assert not any(p.name.startswith(".res.tmp") for p in tmp_path.iterdir())
    assert (_tree(stores / "gt.zarr"), _tree(stores / "a.zarr")) == before  # inputs untouched


def test_same_seed_same_intervals(stores, tmp_path, capsys):
    for name in ("r1", "r2"):
        assert run([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", tmp_path / name, "--bootstrap", "20",
                    "--seed", "3", "--quiet"], capsys)[0] == 0
    m1 = json.loads((tmp_path / "r1" / "metrics.json").read_text())
    m2 = json.loads((tmp_path / "r2" / "metrics.json").read_text())
    assert m1["datasets"] == m2["datasets"]


def test_json_output(stores, tmp_path, capsys):
    code, out, err = run([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", tmp_path / "j",
                          "--bootstrap", "0", "--json", "--datasets", "chexlocalize"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert list(summary["datasets"]) == ["chexlocalize"] and "overall" in summary


def test_several_submissions_go_into_subfolders(stores, tmp_path, capsys):
    code, _, err = run([stores / "a.zarr", stores / "b.zarr", "--gt", stores / "gt.zarr", "--out", tmp_path / "many",
                        "--bootstrap", "0", "--quiet"], capsys)
    assert code == 0, err
    assert (tmp_path / "many" / "a" / "metrics.json").exists() and (tmp_path / "many" / "b" / "metrics.json").exists()


def test_thresholds_from_earlier_metrics(stores, tmp_path, capsys):
    assert run([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", tmp_path / "val", "--bootstrap", "0",
                "--quiet"], capsys)[0] == 0
    code, _, err = run([stores / "b.zarr", "--gt", stores / "gt.zarr", "--out", tmp_path / "test", "--bootstrap", "0",
                        "--thresholds-from", tmp_path / "val" / "metrics.json", "--quiet"], capsys)
    assert code == 0, err
    val = json.loads((tmp_path / "val" / "metrics.json").read_text())
    test = json.loads((tmp_path / "test" / "metrics.json").read_text())
    for d, ds in val["datasets"].items():
        for c, e in ds["classes"].items():
            assert test["datasets"][d]["classes"][c]["tau_dice"] == e["tau_dice"]
    assert test["xbench"]["thresholds"] == "transferred"


def test_invalid_submission_exits_2_lists_problems_and_writes_nothing(stores, tmp_path, capsys):
    bad = tmp_path / "bad.zarr"
    gt = make_gt(tmp_path / "gt.zarr", seed=7)
    make_submission(bad, gt, seed=1)
    g = zarr.open_group(str(bad), mode="r+")
    sal = g["phantom/saliency"]
    block = sal[0:2]
    block[0, 0, 0, 0] = np.nan
    sal[0:2] = block
    del g["chexlocalize"]
    code, out, err = run([bad, "--gt", tmp_path / "gt.zarr", "--out", tmp_path / "never"], capsys)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert any("non-finite" in ln for ln in lines) and any("chexlocalize" in ln for ln in lines)
    assert "Traceback" not in err
    assert not (tmp_path / "never").exists()


def test_bad_thresholds_and_datasets_exit_2_with_one_line(stores, tmp_path, capsys):
    # invalid input, as the README promises (issue 12: these used to exit 1)
    (tmp_path / "m.json").write_text("{not json")
    code, _, err = run([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", tmp_path / "x",
                        "--thresholds-from", tmp_path / "m.json"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "JSON" in err
    code, _, err = run([stores / "a.zarr", "--gt", stores / "gt.zarr", "--datasets", "nope"], capsys)
    assert code == 2 and "nope" in err
    assert not (tmp_path / "x").exists()


def test_help_teaches(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and "--thresholds-from" in out and "Examples" in out


@pytest.mark.slow
def test_console_script_runs_in_a_fresh_process(stores, tmp_path):
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", "from xbench.score.cli import main; main()", str(stores / "a.zarr"),
                           "--gt", str(stores / "gt.zarr"), "--out", str(tmp_path / "p"), "--bootstrap", "10",
                           "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "p" / "metrics.json").exists()
