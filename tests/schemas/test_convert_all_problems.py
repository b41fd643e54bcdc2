"""``xbench-convert`` lists every problem of a source in one run, each naming its file or case (issue 35 item 8).

Before, a run stopped at the first bad block: a wrong shape, then (next run) a NaN named by its row ("case
row 3" for the file phantom-test-000004), then (a third run) the cases and classes the ground truth needs.
The oracle: the problems the test plants, each computed from what it wrote (which file, which case id).
"""
from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from schema_stores import CLASSES, N, case_ids, make_gt
from xbench.schemas.cli import convert_main
from xbench.schemas.convert import MAX_LISTED


def convert(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        convert_main([str(a) for a in args])
    return exc.value.code, capsys.readouterr().err


def npz_source(folder, ids, classes=CLASSES, *, bad_shape=(), nan=(), inf_scores=()):
    (folder / "phantom").mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"model": "m", "method": "x",
                                                  "datasets": {"phantom": {"classes": list(classes)}}}))
    rng = np.random.default_rng(0)
    for cid in ids:
        scores, maps = rng.normal(size=len(classes)), rng.random((len(classes), 6, 6))
        if cid in bad_shape:
            maps = maps[:, :4]
        if cid in nan:
            maps[1, 2, 3] = np.nan
        if cid in inf_scores:
            scores[0] = np.inf
        np.savez(folder / "phantom" / f"{cid}.npz", scores=scores, saliency=maps)
    return folder


def test_an_npz_folder_gets_every_problem_in_one_run(tmp_path, capsys):
    gt = make_gt(tmp_path)
    ids = [c for c in case_ids() if c != "case-002"]  # so row 3 of the folder is case-004: rows are not names
    src = npz_source(tmp_path / "npz", ids, ["Cardiomegaly", "nodule", "Pneumothorax"],
                     bad_shape={"case-009"}, nan={"case-004", "case-010"}, inf_scores={"case-010"})
    out = tmp_path / "sub.zarr"
    code, err = convert(capsys, src, "--out", out, "--gt", gt, "--cases-per-block", "4", "-q")
    assert code == 2
    d = src / "phantom"
    want = [f"{out}/phantom/case_id: 1 case(s) of the ground truth are missing, e.g. 'case-002'",
            f"{out}/phantom: class 'Nodule' is missing (the submission has 'nodule': misnamed?)",
            f"{d / 'case-004.npz'}: maps hold non-finite values (NaN, inf)",
            f"{d / 'case-009.npz'}: expected scores (3,) and saliency (3, 6, 6) (the maps' size of 10 of the 11 files), "
            "got (3,) and (3, 4, 6)",
            f"{d / 'case-010.npz'}: scores hold non-finite values (NaN, inf)",
            f"{d / 'case-010.npz'}: maps hold non-finite values (NaN, inf)"]
    got = [ln.removeprefix("xbench-convert: error: ") for ln in err.strip().splitlines()]
    assert sorted(got) == sorted(want), err
    assert "row 3" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gt.zarr", "npz"]  # nothing written


def test_a_wrong_shape_does_not_hide_a_nan_in_the_same_block(tmp_path, capsys):
    src = npz_source(tmp_path / "npz", case_ids(), bad_shape={"case-005"}, nan={"case-001", "case-007"})
    code, err = convert(capsys, src, "--out", tmp_path / "sub.zarr", "-q")  # one block of 64 rows
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 3, err
    assert [ln.split("phantom/")[1].split(":")[0] for ln in lines] == ["case-001.npz", "case-005.npz", "case-007.npz"]


def test_hdf5_rows_are_named_by_case_id(tmp_path, capsys):
    gt = make_gt(tmp_path)
    ids = case_ids()[:-1][::-1]  # reversed, and the last case missing: row r is not case r
    rng = np.random.default_rng(1)
    maps = rng.random((len(ids), 3, 5, 5))
    maps[[1, 6], 0, 0, 0] = np.nan
    with h5py.File(tmp_path / "out.h5", "w") as f:
        f.attrs["model"], f.attrs["method"] = "h", "x"
        g = f.create_group("phantom")
        g.attrs["classes"], g.attrs["score_kind"] = CLASSES, "logit"
        g["case_id"] = np.array([i.encode() for i in ids])
        g["scores"] = rng.normal(size=(len(ids), 3))
        g["saliency"] = maps
    out = tmp_path / "sub.zarr"
    code, err = convert(capsys, tmp_path / "out.h5", "--out", out, "--gt", gt, "--cases-per-block", "3", "-q")
    assert code == 2
    bad = [ids[r] for r in np.flatnonzero(np.isnan(maps).reshape(len(ids), -1).any(axis=1))]  # the oracle
    want = [f"{out}/phantom/case_id: 1 case(s) of the ground truth are missing, e.g. {case_ids()[-1]!r}"]
    want += [f"{tmp_path / 'out.h5'}: phantom: case {c!r}: maps hold non-finite values (NaN, inf)" for c in bad]
    assert [ln.removeprefix("xbench-convert: error: ") for ln in err.strip().splitlines()] == want, err


def test_the_listing_is_bounded_and_counted(tmp_path, capsys):
    ids = [f"case-{i:03d}" for i in range(MAX_LISTED + 9)]
    src = npz_source(tmp_path / "npz", ids, nan=set(ids))
    code, err = convert(capsys, src, "--out", tmp_path / "sub.zarr", "--cases-per-block", "8", "-q")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == MAX_LISTED + 1, err
    assert lines[-1].endswith("... and 9 more problem(s) like these")
    assert all(f"{c}.npz: maps hold non-finite" in ln for c, ln in zip(ids, lines[:-1]))


def test_a_clean_source_still_converts(tmp_path, capsys):
    gt = make_gt(tmp_path)
    src = npz_source(tmp_path / "npz", case_ids())
    with pytest.raises(SystemExit) as exc:
        convert_main([str(src), "--out", str(tmp_path / "sub.zarr"), "--gt", str(gt), "-q"])
    assert exc.value.code in (0, None)
    from xbench.schemas import read_submission

    assert len(read_submission(tmp_path / "sub.zarr").datasets["phantom"].case_id) == N
