"""The grand-challenge entry point and the Codabench scoring program, run as the platforms run them (no Docker)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from score_stores import make_gt, make_submission
from xbench.package import codabench_main, grand_challenge_main, package

ROOT = Path(__file__).resolve().parents[2]
EVALUATE = ROOT / "platforms" / "grand-challenge" / "evaluate.py"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """gt.zarr, a valid submission, and a folder of one-submission inputs, valid and hostile."""
    d = tmp_path_factory.mktemp("platforms")
    gt = make_gt(d / "gt.zarr", seed=11)
    make_submission(d / "sub.zarr", gt, seed=12)
    inputs = d / "inputs"
    cases = {}

    def case(name):
        cases[name] = inputs / name
        cases[name].mkdir(parents=True)
        return cases[name]

    shutil.copytree(d / "sub.zarr", case("valid-dir") / "team.zarr")
    with zipfile.ZipFile(case("valid-zip") / "team.zarr.zip", "w", zipfile.ZIP_STORED) as zf:
        for p in sorted((d / "sub.zarr").rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(d / "sub.zarr").as_posix())
    shutil.copytree(d / "sub.zarr", case("nan-maps") / "team.zarr")
    g = zarr.open_group(str(cases["nan-maps"] / "team.zarr"), mode="r+")
    block = g["phantom/saliency"][0:2]
    block[0, 0, 0, 0] = np.nan
    g["phantom/saliency"][0:2] = block
    with zipfile.ZipFile(case("zip-slip") / "team.zarr.zip", "w") as zf:
        zf.writestr("../../escaped.txt", "should never be extracted")
        zf.writestr("zarr.json", "{not json")
    (case("not-a-zip") / "team.zarr.zip").write_bytes(b"PK\x03\x04 this is not a zip")
    case("empty")
    shutil.copytree(d / "sub.zarr", case("two") / "a.zarr")
    shutil.copytree(d / "sub.zarr", cases["two"] / "b.zarr")
    return {"root": d, "gt": d / "gt.zarr", "cases": cases}


EXPECT = {  # case -> (exit status, text the last stderr line must hold; None = scored)
    "valid-dir": (0, None),
    "valid-zip": (0, None),
    "nan-maps": (2, "invalid submission: "),
    "zip-slip": (2, "invalid submission: "),
    "not-a-zip": (2, "invalid submission: "),
    "empty": (2, "expected exactly one submission"),
    "two": (2, "expected exactly one submission"),
}


@pytest.mark.parametrize("name", list(EXPECT))
def test_grand_challenge_scores_a_folder_of_submissions(world, tmp_path, monkeypatch, capsys, name):
    monkeypatch.setenv("XBENCH_GT", str(world["gt"]))
    monkeypatch.setenv("XBENCH_BOOTSTRAP", "0")
    out = tmp_path / "output"
    out.mkdir()  # the platform's /output exists and is empty
    code = grand_challenge_main(str(world["cases"][name]), str(out))
    err = capsys.readouterr().err
    want_code, want_reason = EXPECT[name]
    assert code == want_code, err
    if want_reason is None:
        metrics = json.loads((out / "metrics.json").read_text())
        assert set(metrics["aggregates"]) >= {"pointing_game", "auroc"}
    else:
        last = err.strip().splitlines()[-1]
        assert last.startswith(want_reason) or want_reason in last, err
        assert "Traceback" not in err and os.listdir(out) == []
    assert not (world["root"] / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
    assert sorted(os.listdir(tmp_path)) == ["output"]


def test_grand_challenge_entry_script_as_the_container_runs_it(world, tmp_path):
    out = tmp_path / "output"
    out.mkdir()
    env = {**os.environ, "XBENCH_INPUT": str(world["cases"]["valid-zip"]), "XBENCH_OUTPUT": str(out),
           "XBENCH_GT": str(world["gt"]), "XBENCH_BOOTSTRAP": "0"}
    done = subprocess.run([sys.executable, str(EVALUATE)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "aggregates" in json.loads((out / "metrics.json").read_text())
    env["XBENCH_INPUT"] = str(world["cases"]["nan-maps"])
    shutil.rmtree(out)
    out.mkdir()
    done = subprocess.run([sys.executable, str(EVALUATE)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith("invalid submission: ")
    assert "non-finite" in done.stderr.strip().splitlines()[-1]


def test_grand_challenge_without_a_ground_truth_says_where_to_put_it(world, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("XBENCH_GT", raising=False)
    monkeypatch.setattr("xbench.platform_scoring.GC_GROUND_TRUTH", (str(tmp_path / "nowhere"),))
    assert grand_challenge_main(str(world["cases"]["valid-dir"]), str(tmp_path / "o")) == 2
    assert "no ground truth" in capsys.readouterr().err.strip().splitlines()[-1]


def test_codabench_bundle_scores_like_the_platform(world, tmp_path):
    bundle = tmp_path / "scoring_program.zip"
    res = CliRunner().invoke(package, ["codabench", "--gt", str(world["gt"]), "--gt-in-program", "--out", str(bundle)])
    assert res.exit_code == 0, res.output
    program = tmp_path / "program"
    with zipfile.ZipFile(bundle) as zf:
        assert sorted(zf.namelist()) == ["gt.zarr.zip", "metadata.yaml", "score.py"]
        zf.extractall(program)  # what Codabench does with the scoring program
    meta = (program / "metadata.yaml").read_text()
    assert "command: python3 $program/score.py $input $output" in meta
    inp, out = tmp_path / "input", tmp_path / "output"
    shutil.copytree(world["cases"]["valid-dir"], inp / "res")
    (inp / "ref").mkdir()  # no reference data: the packaged ground truth is used
    out.mkdir()
    env = {**os.environ, "XBENCH_BOOTSTRAP": "0"}
    done = subprocess.run([sys.executable, str(program / "score.py"), str(inp), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    scores = json.loads((out / "scores.json").read_text())
    assert scores["pointing_game"] == json.loads((out / "metrics.json").read_text())["overall"]["pointing_game"]
    # the same ground truth read from the bundle's zip and from the folder gives the same scores
    direct = tmp_path / "direct"
    assert codabench_main(str(inp), str(direct), program=str(program), bootstrap=0) == 0  # as $XBENCH_BOOTSTRAP above
    assert json.loads((direct / "scores.json").read_text()) == scores


def test_a_scoring_program_holding_the_ground_truth_needs_an_explicit_flag_and_warns(world, tmp_path):
    """Issue 35: the scoring program may be shared with participants (make_programs_available); the ground
    truth inside it is refused unless --gt-in-program acknowledges it, and then warned about on stderr."""
    bundle = tmp_path / "scoring_program.zip"
    res = CliRunner().invoke(package, ["codabench", "--gt", str(world["gt"]), "--out", str(bundle)])
    assert res.exit_code == 2 and not bundle.exists()
    assert "--gt-in-program" in res.output and "make_programs_available" in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(package, ["codabench", "--gt", str(world["gt"]), "--gt-in-program", "--out", str(bundle)])
    assert res.exit_code == 0 and bundle.exists()
    assert res.stderr.startswith("WARNING: ") and "private ground truth" in res.stderr
    assert "WARNING" not in res.stdout
    with zipfile.ZipFile(bundle) as zf:
        assert "gt.zarr.zip" in zf.namelist()


@pytest.mark.parametrize("name", ["nan-maps", "zip-slip", "empty", "two"])
def test_codabench_hostile_submissions_fail_with_a_reason(world, tmp_path, capsys, name):
    inp = tmp_path / "input"
    shutil.copytree(world["cases"][name], inp / "res")
    (inp / "ref").mkdir()
    shutil.copytree(world["gt"], inp / "ref" / "gt.zarr")
    assert codabench_main(str(inp), str(tmp_path / "output")) == 2
    err = capsys.readouterr().err
    assert EXPECT[name][1] in err.strip().splitlines()[-1] and "Traceback" not in err
    assert not (tmp_path / "output").exists()


def test_package_refuses_an_invalid_ground_truth_and_an_out_inside_it(world, tmp_path):
    res = CliRunner().invoke(package, ["codabench", "--gt", str(tmp_path / "nope.zarr"), "--out",
                                       str(tmp_path / "p.zip")])
    assert res.exit_code == 2 and not (tmp_path / "p.zip").exists()
    before = sorted(p.name for p in world["gt"].rglob("*"))
    res = CliRunner().invoke(package, ["codabench", "--gt", str(world["gt"]), "--gt-in-program", "--out",
                                       str(world["gt"] / "p.zip")])
    assert res.exit_code == 2 and "inside the ground truth" in res.output
    assert sorted(p.name for p in world["gt"].rglob("*")) == before
