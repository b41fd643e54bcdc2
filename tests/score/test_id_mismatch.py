"""A submission whose case ids are not the ground truth's (issue 35 item 4).

Scored against the wrong split, a submission used to be told "pass --allow-missing to score the 0 of N cases
present", and --allow-missing then answered "holds none of the ground truth's cases": advice that led nowhere.
Both now say that none of the ids match, with an id of each side, and so does the container's last log line
(participants cannot pass flags there). Cases a submission holds beyond the ground truth's are not scored: one
counted note line says so. The oracle for every count and example is plain set arithmetic on the ids written.
"""
from __future__ import annotations

import dataclasses
import os
import shutil

import pytest

from score_stores import make_gt, make_submission, restrict_gt, run_score_cli
from xbench.package import grand_challenge_main
from xbench.score.scoring import score_submission


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("mismatch")
    gt = make_gt(d / "gt.zarr", datasets={"phantom": dict(n=10, classes=["Cardiomegaly", "Pneumothorax"],
                                                          grid=(8, 8))}, seed=3)
    # "another split": the same dataset and classes, other case ids
    other = {"phantom": dataclasses.replace(gt["phantom"], case_ids=[f"val-{i:03d}" for i in range(12)])}
    make_submission(d / "val.zarr", other, seed=4)
    make_submission(d / "full.zarr", gt, seed=5)
    keep = {"phantom": gt["phantom"].case_ids[:6]}
    restrict_gt(d / "gt.zarr", d / "gt6.zarr", keep)
    return d, gt, keep


def test_wrong_split_says_no_id_matches_and_does_not_offer_allow_missing(world, tmp_path, capsys):
    d, gt, _ = world
    code, _, err = run_score_cli([d / "val.zarr", "--gt", d / "gt.zarr", "--out", tmp_path / "r", "--bootstrap", "0"],
                                 capsys)
    assert code == 2, err
    sub_ids, gt_ids = [f"val-{i:03d}" for i in range(12)], gt["phantom"].case_ids
    assert not set(sub_ids) & set(gt_ids)  # the oracle: the two sides share no id
    assert "none of the submission's 12 case id(s) is a case of the ground truth (10 case(s))" in err
    assert f"the submission has {min(sub_ids)!r}, the ground truth {min(gt_ids)!r}" in err
    assert "pass --allow-missing" not in err and "allow-missing would have nothing to score" in err
    assert not (tmp_path / "r").exists()


def test_allow_missing_on_the_wrong_split_names_both_sides(world, tmp_path, capsys):
    d, gt, _ = world
    code, _, err = run_score_cli([d / "val.zarr", "--gt", d / "gt.zarr", "--out", tmp_path / "r", "--bootstrap", "0",
                                  "--allow-missing"], capsys)
    assert code == 2, err
    assert "holds none of the ground truth's cases" in err
    assert "none of the submission's 12 case id(s)" in err and "'val-000'" in err and "'phantom-000'" in err


def test_the_container_log_says_the_ids_do_not_match(world, tmp_path, monkeypatch, capsys):
    d, _, _ = world
    inp = tmp_path / "input"
    inp.mkdir()
    shutil.copytree(d / "val.zarr", inp / "team.zarr")
    out = tmp_path / "output"
    out.mkdir()
    monkeypatch.setenv("XBENCH_GT", str(d / "gt.zarr"))
    monkeypatch.setenv("XBENCH_BOOTSTRAP", "0")
    assert grand_challenge_main(str(inp), str(out)) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("invalid submission: ") and "none of the submission's 12 case id(s)" in last, last
    assert "'val-000'" in last and "'phantom-000'" in last
    assert os.listdir(out) == []


def test_cases_beyond_the_ground_truth_are_one_counted_note(world, tmp_path, capsys):
    d, gt, keep = world
    res = score_submission(d / "full.zarr", d / "gt6.zarr", bootstrap=0)
    extra = sorted(set(gt["phantom"].case_ids) - set(keep["phantom"]))  # the oracle
    lines = [n for n in res.notes if "not in the ground truth" in n]
    assert lines == [f"phantom: {len(extra)} of the submission's {len(gt['phantom'].case_ids)} cases are not in the "
                     f"ground truth and were not scored (e.g. {extra[0]!r})"]
    code, _, err = run_score_cli([d / "full.zarr", "--gt", d / "gt6.zarr", "--out", tmp_path / "r", "--bootstrap",
                                  "0"], capsys)
    assert code == 0 and err.count("not in the ground truth") == 1, err
    # a submission of exactly the ground truth's cases: no such note
    assert not [n for n in score_submission(d / "full.zarr", d / "gt.zarr", bootstrap=0).notes
                if "not in the ground truth" in n]
