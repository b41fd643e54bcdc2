"""The region masks are decoded once, while counting: their checks (decodable chunks, no empty region) must
still stop xbench-score with exit 2, list the validator's exact problems and write nothing."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from score_stores import make_gt, make_submission
from xbench.schemas import InvalidStoreError, read_ground_truth, read_submission, validate_ground_truth
from xbench.score import scoring
from xbench.score.cli import main


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    return exc.value.code, capsys.readouterr().err


def _empty_region(gt_path, dataset, k):
    arr = zarr.open_group(str(gt_path), mode="r+")[f"{dataset}/region_mask"].with_config({"write_empty_chunks": True})
    masks = np.asarray(arr[...])
    masks[k] = False
    arr[...] = masks


def _expected(gt_path):
    problems = validate_ground_truth(gt_path)
    assert problems, "the fixture must break the ground truth"
    return [str(p) for p in problems]


@pytest.mark.parametrize("case", ["supported", "unsupported_class", "unscored_dataset", "corrupt_chunk",
                                  "with_bad_submission"])
def test_region_problems_exit_2_with_the_validator_messages(tmp_path, capsys, case):
    gt_path, sub_path = tmp_path / "gt.zarr", tmp_path / "sub.zarr"
    gt = make_gt(gt_path, seed=3)
    unsupported = None
    ri = gt["phantom"].region_index
    k = len(ri) - 1  # the last region: found only if every chunk is scanned
    if case == "unsupported_class":
        unsupported = {"phantom": (gt["phantom"].classes[int(ri[k, 1])],)}
    make_submission(sub_path, gt, seed=4, unsupported=unsupported)
    args = [sub_path, "--gt", gt_path, "--out", tmp_path / "out", "--bootstrap", "0"]
    if case == "corrupt_chunk":
        (gt_path / "phantom" / "region_mask" / "c" / "0" / "0" / "0").write_bytes(b"not a chunk")
    else:
        _empty_region(gt_path, "phantom", k)
    if case == "unscored_dataset":
        args += ["--datasets", "chexlocalize"]
    if case == "with_bad_submission":
        del zarr.open_group(str(sub_path), mode="r+")["chexlocalize"]
    expected = _expected(gt_path)
    # the cheap validation (masks deferred to counting) does not see it: counting must
    assert not validate_ground_truth(gt_path, scan_masks=False)
    code, err = run(args, capsys)
    assert code == 2
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    for msg in expected:
        assert any(msg in ln for ln in lines), (msg, lines)
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()
    with pytest.raises(InvalidStoreError) as exc:
        scoring.score_submission(sub_path, gt_path, bootstrap=0,
                                 datasets=["chexlocalize"] if case == "unscored_dataset" else None)
    assert [str(p) for p in exc.value.problems] == expected


def test_count_dataset_reports_the_first_empty_region_once(tmp_path):
    gt_path, sub_path = tmp_path / "gt.zarr", tmp_path / "sub.zarr"
    gt = make_gt(gt_path, seed=5)
    make_submission(sub_path, gt, seed=6)
    n = len(gt["phantom"].region_index)
    _empty_region(gt_path, "phantom", n - 1)
    _empty_region(gt_path, "phantom", 1)
    g, s = read_ground_truth(gt_path), read_submission(sub_path)
    problems: list = []
    scoring.count_dataset(s.datasets["phantom"], g.datasets["phantom"], mask_chunk=2, region_problems=problems,
                          where="W")
    assert [str(p) for p in problems] == ["W/region_mask: region 1 is empty; every listed region must cover at "
                                          "least one grid cell"]
    with pytest.raises(InvalidStoreError):
        scoring.count_dataset(s.datasets["phantom"], g.datasets["phantom"], workers=1)
