"""xbench-validate and xbench-convert as a user runs them: exit codes, one problem a line, no traceback."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from xbench.schemas import read_submission, validate_submission

from schema_stores import CLASSES, N, case_ids, handmade_submission


def run(*args):
    return subprocess.run([sys.executable, "-c", "import sys; from xbench.schemas.cli import {0}; sys.argv[0]='x'; {0}()".format(args[0]), *args[1:]],
                          capture_output=True, text=True, timeout=120)


def test_validate_valid_and_invalid(tmp_path, gt_path, sub_path):
    ok = run("validate_main", str(sub_path), "--gt", str(gt_path))
    assert ok.returncode == 0 and "valid submission store" in ok.stdout
    scores = np.zeros((N, 3), np.float32)
    scores[0, 0] = np.nan
    bad = handmade_submission(tmp_path / "bad.zarr", ids=case_ids()[:-2], scores=scores[:-2], saliency=np.zeros((N - 2, 3, 4, 4), np.float32))
    res = run("validate_main", str(bad), "--gt", str(gt_path))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in res.stderr
    assert any("non-finite score" in line for line in lines) and any("2 case(s) of the ground truth are missing" in line for line in lines)


def test_validate_json_output(tmp_path):
    bad = handmade_submission(tmp_path / "bad.zarr", score_kind="odds")
    res = run("validate_main", str(bad), "--json")
    assert res.returncode == 2
    report = json.loads(res.stdout)
    assert report["valid"] is False and "score_kind" in report["problems"][0]


def test_validate_detects_store_kind(gt_path):
    res = run("validate_main", str(gt_path))
    assert res.returncode == 0 and "valid ground-truth store" in res.stdout


def write_h5(path, ids, maps, scores, **attrs):
    with h5py.File(path, "w") as f:
        f.attrs["model"] = "h5-model"
        f.attrs["method"] = "similarity"
        f.attrs["prompts"] = np.array([b"a", b"b"])
        g = f.create_group("phantom")
        g.attrs["classes"] = np.array([c.encode() for c in CLASSES])
        g.attrs["score_kind"] = attrs.get("score_kind", "logit")
        g.create_dataset("case_id", data=np.array([i.encode() for i in ids]))
        g.create_dataset("scores", data=scores)
        g.create_dataset("saliency", data=maps)


def test_convert_hdf5(tmp_path, gt_path):
    rng = np.random.default_rng(0)
    maps, scores = rng.random((N, 3, 7, 7)), rng.normal(size=(N, 3))
    write_h5(tmp_path / "out.h5", case_ids(), maps, scores)
    res = run("convert_main", str(tmp_path / "out.h5"), "--out", str(tmp_path / "sub.zarr"), "--gt", str(gt_path), "-q", "--cases-per-block", "5")
    assert res.returncode == 0, res.stderr
    sub = read_submission(tmp_path / "sub.zarr")
    assert sub.attrs["model"] == "h5-model" and sub.attrs["prompts"] == ["a", "b"]
    ds = sub.datasets["phantom"]
    np.testing.assert_allclose(ds.scores, scores.astype(np.float32))
    np.testing.assert_allclose(np.asarray(ds.saliency[:], np.float32), maps.astype(np.float16).astype(np.float32))
    assert validate_submission(tmp_path / "sub.zarr", gt_path) == []


def test_convert_invalid_hdf5_writes_nothing(tmp_path):
    maps = np.zeros((N, 3, 7, 7))
    maps[3] = np.nan
    write_h5(tmp_path / "out.h5", case_ids(), maps, np.zeros((N, 3)))
    res = run("convert_main", str(tmp_path / "out.h5"), "--out", str(tmp_path / "sub.zarr"), "-q")
    assert res.returncode == 2 and "non-finite" in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.h5"]


def test_convert_npz_dir(tmp_path, gt_path):
    src = tmp_path / "npz"
    (src / "phantom").mkdir(parents=True)
    (src / "meta.json").write_text(json.dumps({"model": "npz-model", "method": "gradcam",
                                               "datasets": {"phantom": {"classes": CLASSES, "score_kind": "probability"}}}))
    rng = np.random.default_rng(1)
    expected = {}
    for cid in case_ids():
        s, m = rng.random(3), rng.random((3, 4, 6))
        np.savez(src / "phantom" / f"{cid}.npz", scores=s, saliency=m)
        expected[cid] = s
    res = run("convert_main", str(src), "--out", str(tmp_path / "sub.zarr"), "--map-dtype", "float32", "-q")
    assert res.returncode == 0, res.stderr
    ds = read_submission(tmp_path / "sub.zarr").datasets["phantom"]
    assert ds.score_kind == "probability" and ds.saliency.shape == (N, 3, 4, 6)
    for row, cid in enumerate(ds.case_id):
        np.testing.assert_allclose(ds.scores[row], expected[cid].astype(np.float32))
    assert validate_submission(tmp_path / "sub.zarr", gt_path) == []


def test_convert_npz_reports_bad_files(tmp_path):
    src = tmp_path / "npz"
    (src / "phantom").mkdir(parents=True)
    (src / "meta.json").write_text(json.dumps({"model": "m", "method": "x", "datasets": {"phantom": {"classes": CLASSES}}}))
    np.savez(src / "phantom" / "a.npz", scores=np.zeros(3), saliency=np.zeros((3, 4, 4)))
    np.savez(src / "phantom" / "b.npz", scores=np.zeros(2), saliency=np.zeros((3, 4, 4)))
    np.savez(src / "phantom" / "c.npz", maps=np.zeros(3))
    res = run("convert_main", str(src), "--out", str(tmp_path / "sub.zarr"), "-q")
    assert res.returncode == 2
    assert "b.npz: expected scores (3,)" in res.stderr and "c.npz: lacks array(s) 'scores', 'saliency'" in res.stderr
    assert not (tmp_path / "sub.zarr").exists()


def test_convert_never_writes_into_its_source_or_the_ground_truth(tmp_path, gt_path):
    from xbench.schemas import InvalidStoreError
    from xbench.schemas.convert import convert_npz_dir

    src = tmp_path / "npz"
    src.mkdir()
    before = sorted(p.name for p in gt_path.rglob("*"))
    for out, what in ((src / "sub.zarr", "the source"), (gt_path / "sub.zarr", "the ground truth")):
        with pytest.raises(InvalidStoreError, match=f"lies inside {what}"):
            convert_npz_dir(src, out, gt=gt_path)
    assert os.listdir(src) == [] and sorted(p.name for p in gt_path.rglob("*")) == before
