"""Every kind of broken submission is reported by name; metadata is checked before data."""
import json
import os

import numpy as np
import pytest
import zarr

from xbench.schemas import validate_ground_truth, validate_submission, write_ground_truth

from schema_stores import CLASSES, N, case_ids, handmade_submission


def messages(path, gt=None):
    return "\n".join(str(p) for p in validate_submission(path, gt))


def test_handmade_plain_zarr_submission_is_valid(tmp_path, gt_path):
    assert messages(handmade_submission(tmp_path / "s.zarr"), gt_path) == ""


def test_fixed_width_case_ids_and_float16_maps_are_accepted(tmp_path, gt_path):
    path = handmade_submission(tmp_path / "s.zarr", id_dtype="fixed", map_dtype="float16")
    assert messages(path, gt_path) == ""


def test_missing_case(tmp_path, gt_path):
    path = handmade_submission(tmp_path / "s.zarr", ids=case_ids()[:-1])
    assert "1 case(s) of the ground truth are missing, e.g. 'case-011'" in messages(path, gt_path)


def test_duplicate_case_id(tmp_path, gt_path):
    ids = case_ids()
    ids[3] = ids[2]
    assert "case id(s) repeat, e.g. 'case-002'" in messages(handmade_submission(tmp_path / "s.zarr", ids=ids), gt_path)


def test_missing_class(tmp_path, gt_path):
    path = handmade_submission(tmp_path / "s.zarr", classes=CLASSES[:2])
    assert "class 'Pneumothorax' is missing" in messages(path, gt_path)  # the words of xbench-validate --images


def test_missing_dataset(tmp_path, gt_path):
    write_ground_truth(gt_path, "siim_acr", case_ids=["a"], classes=["Pneumothorax"], labels=np.zeros((1, 1)),
                       region_index=np.zeros((0, 2)), region_mask=np.zeros((0, 4, 4), bool), orig_size=np.ones((1, 2)), grid=(4, 4))
    assert "siim_acr: dataset of the ground truth is missing from the submission" in messages(handmade_submission(tmp_path / "s.zarr"), gt_path)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_score(tmp_path, value):
    scores = np.zeros((N, 3), np.float32)
    scores[5, 1] = value
    assert "scores: non-finite score(s) (NaN or inf), first at row 5" in messages(handmade_submission(tmp_path / "s.zarr", scores=scores))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_map_value(tmp_path, dtype, value):
    maps = np.zeros((N, 3, 14, 14), dtype)
    maps[7, 2, 3, 3] = value
    maps[9, 0, 13, 13] = value
    assert "saliency: non-finite map value(s) (NaN or inf), first in case row 7" in messages(handmade_submission(tmp_path / "s.zarr", saliency=maps))


def test_finite_rows_of_float16_maps_agree_with_isfinite_on_every_bit_pattern():
    from xbench.schemas.submission import _finite_rows

    every = np.arange(2**16, dtype=np.uint16).view(np.float16)  # all 65,536 values, NaN payloads and -0 included
    np.testing.assert_array_equal(_finite_rows(every.reshape(-1, 1)), np.isfinite(every))
    rows = np.zeros((3, 4, 5), np.float16)
    rows[1, 3, 4] = np.float16(65504.0)  # the largest finite float16
    rows[2, 0, 0] = np.float16(np.inf)
    np.testing.assert_array_equal(_finite_rows(rows), [True, True, False])
    np.testing.assert_array_equal(_finite_rows(rows.astype(np.float32)), [True, True, False])


def test_probability_outside_unit_interval(tmp_path):
    scores = np.full((N, 3), 0.5, np.float32)
    scores[9, 0] = 1.5
    msg = messages(handmade_submission(tmp_path / "s.zarr", scores=scores, score_kind="probability"))
    assert "probability outside [0, 1], first at row 9" in msg
    scores[9, 0] = 1.0  # the bounds themselves are fine
    assert messages(handmade_submission(tmp_path / "t.zarr", scores=scores, score_kind="probability")) == ""


def test_wrong_dtype_and_shape(tmp_path):
    path = handmade_submission(tmp_path / "s.zarr", scores=np.zeros((N, 3), np.float64))
    assert "scores: dtype float64 is not allowed; use float32" in messages(path)
    path = handmade_submission(tmp_path / "t.zarr", scores=np.zeros((N, 2), np.float32))
    assert "scores: shape (12, 2) does not match the expected (12, 3)" in messages(path)


def test_unknown_score_kind_and_unsupported(tmp_path):
    path = handmade_submission(tmp_path / "s.zarr", score_kind="odds")
    g = zarr.open_group(str(path), mode="r+")
    g["phantom"].attrs["unsupported"] = ["Fracture"]
    msg = messages(path)
    assert "attribute 'score_kind' must be 'logit' or 'probability', got 'odds'" in msg
    assert "attribute 'unsupported' must list class names from 'classes'" in msg


def test_root_attributes(tmp_path):
    path = handmade_submission(tmp_path / "s.zarr", root={"kind": "images", "schema": 7, "model": "m", "method": "x"})
    msg = messages(path)
    assert "xbench.kind is 'images'; expected 'submission'" in msg and "xbench.schema is 7" in msg


def test_reports_every_problem_not_just_the_first(tmp_path, gt_path):
    scores = np.zeros((N - 1, 3), np.float32)
    scores[0, 0] = np.nan
    ids = case_ids()[:-1]
    ids[1] = ids[0]
    maps = np.zeros((N - 1, 3, 14, 14), np.float32)
    maps[2] = np.inf
    problems = validate_submission(handmade_submission(tmp_path / "s.zarr", ids=ids, scores=scores, saliency=maps), gt_path)
    text = "\n".join(map(str, problems))
    for needle in ("repeat", "non-finite score", "non-finite map", "missing, e.g."):
        assert needle in text
    assert len(problems) >= 4


def test_chunk_never_written(tmp_path):
    path = handmade_submission(tmp_path / "s.zarr")
    os.remove(path / "phantom" / "saliency" / "c" / "1" / "0" / "0" / "0")
    assert "saliency: 1 chunk(s) were never written (first at rows 4-7)" in messages(path)


def test_chunk_never_written_with_zero_fill_is_still_detected(tmp_path):
    # A team that used fill_value 0 and zarr's default write_empty_chunks=False loses all-zero chunks.
    path = tmp_path / "s.zarr"
    maps = np.random.default_rng(0).random((N, 3, 14, 14)).astype(np.float32)
    maps[:4] = 0
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    g.attrs["xbench"] = {"kind": "submission", "schema": 1, "model": "m", "method": "similarity"}
    d = g.create_group("phantom", attributes={"classes": CLASSES, "score_kind": "logit"})
    d.create_array("case_id", data=np.array(case_ids()))
    d.create_array("scores", data=np.zeros((N, 3), np.float32), chunks=(4, 3), fill_value=0, config={"write_empty_chunks": True})
    d.create_array("saliency", data=maps, chunks=(4, 3, 14, 14), fill_value=0)
    assert "saliency: 1 chunk(s) were never written (first at rows 0-3)" in messages(path)


def test_corrupt_chunk_is_reported_not_raised(tmp_path):
    path = handmade_submission(tmp_path / "s.zarr")
    chunk = path / "phantom" / "saliency" / "c" / "2" / "0" / "0" / "0"
    chunk.write_bytes(chunk.read_bytes()[:20])
    assert "saliency: rows 8-11 unreadable, the chunk is corrupt or truncated" in messages(path)


def test_huge_declared_array_is_rejected_from_metadata(tmp_path):
    # 10^12 elements declared: shape checks must fire before anything is read.
    path = handmade_submission(tmp_path / "s.zarr")
    g = zarr.open_group(str(path), mode="r+")
    del g["phantom/saliency"]
    g["phantom"].create_array("saliency", shape=(N, 3, 1_000_000, 30_000), chunks=(1, 1, 1000, 1000), dtype="float32")
    assert "map size 1000000x30000 is outside the limit of 1..1024 per side" in messages(path)


def test_huge_chunks_are_refused(tmp_path):
    path = handmade_submission(tmp_path / "s.zarr")
    g = zarr.open_group(str(path), mode="r+")
    del g["phantom/saliency"]
    g["phantom"].create_array("saliency", shape=(200, 3, 1024, 1024), chunks=(200, 3, 1024, 1024), dtype="float32")
    # The cap is an eighth of the memory budget (2 GiB by default), at most 512 MiB.
    assert "is 2400 MiB decoded; the limit is 256 MiB" in messages(path)


def test_unfinished_writer_store(tmp_path):
    from xbench.schemas import DatasetSpec, SubmissionWriter

    w = SubmissionWriter.create(tmp_path / "s.zarr", model="m", method="similarity",
                                datasets={"phantom": DatasetSpec(case_ids(), CLASSES, (2, 2))}, cases_per_block=4)
    w.write_block("phantom", 0, np.zeros((4, 3)), np.zeros((4, 3, 2, 2)))
    msg = messages(tmp_path / "s.zarr")
    assert "the writer did not finish this dataset" in msg and "2 chunk(s) were never written" in msg


def test_not_a_store(tmp_path):
    assert "no such store directory" in messages(tmp_path / "nothing.zarr")
    bad_zip = tmp_path / "x.zarr.zip"
    bad_zip.write_bytes(b"not a zip")
    assert "File is not a zip file" in messages(bad_zip)


def test_json_schema_matches_root_attributes(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from importlib.resources import files

    schema = json.loads(files("xbench.schemas").joinpath("xbench-store.schema.json").read_text())
    good = {"xbench": {"kind": "submission", "schema": 1, "model": "m", "method": "similarity", "prompts": ["x"]}}
    jsonschema.validate(good, schema)
    for bad in ({"xbench": {"kind": "submission", "schema": 2, "model": "m", "method": "s"}},
                {"xbench": {"kind": "submission", "schema": 1}},
                {"xbench": {"kind": "other", "schema": 1}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_ground_truth_problems(tmp_path, gt_path):
    g = zarr.open_group(str(gt_path), mode="r+")
    d = g["phantom"]
    labels = np.asarray(d["labels"][:])
    index = np.asarray(d["region_index"][:])
    labels[index[0, 0], index[0, 1]] = 0
    d["labels"][:] = labels
    masks = np.asarray(d["region_mask"][:])
    masks[1] = False
    d["region_mask"].with_config({"write_empty_chunks": True})[:] = masks
    text = "\n".join(map(str, validate_ground_truth(gt_path)))
    assert "region(s) belong to pairs not labelled 1" in text
    assert "region 1 is empty" in text
