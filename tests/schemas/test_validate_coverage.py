"""``xbench-validate SUB --images images.zarr``: a team checks coverage before it submits (issue 35 item 3).

Without the private ground truth, a submission missing a case or with a misnamed class used to be "valid";
the error appeared only on the platform. Against the public images store, every case id, class and phrase row
id the submission must hold is checked, one line per missing one (the first COVERAGE_LISTED of a kind, then
a counted line). The oracle is set arithmetic on the ids the test writes.
"""
from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from xbench.schemas import DatasetSpec, ImagesWriter, SubmissionWriter
from xbench.schemas.cli import validate_main
from xbench.schemas.queries import Queries
from xbench.schemas.submission import COVERAGE_LISTED

CLASSES = ["Cardiomegaly", "Pleural effusion", "Pneumothorax"]


def ids_of(n):
    return [f"case-{i:03d}" for i in range(n)]


def phrase_ids(cases):
    return [f"{c}#{k}" for c in cases for k in range(2)]


def write_images(path, n, *, phrases=True):
    cases = ids_of(n)
    queries = None
    if phrases:
        qids = phrase_ids(cases)
        queries = Queries.of(qids, [i // 2 for i in range(len(qids))], [CLASSES[i % 3] for i in range(len(qids))],
                             [f"finding {i}" for i in range(len(qids))])
    w = ImagesWriter(path, "phantom", case_ids=cases, classes=CLASSES, image_size=8, cases_per_block=8,
                     queries=queries)
    for b in w.blocks_todo():
        s, e = w.block_rows(b)
        w.write_block(b, np.zeros((e - s, 8, 8), np.uint8), np.full((e - s, 2), 64, np.int32))
    w.finish()
    return path


def write_sub(path, cases, classes=CLASSES, query_ids=(), phrases_unsupported=None):
    rng = np.random.default_rng(0)
    spec = DatasetSpec(list(cases), list(classes), (4, 4), query_ids=list(query_ids),
                       phrases_unsupported=phrases_unsupported)
    w = SubmissionWriter.create(path, model="team", method="x", datasets={"phantom": spec}, cases_per_block=8)
    for b in w.blocks_todo("phantom"):
        s, e = w.block_rows("phantom", b)
        w.write_block("phantom", b, rng.normal(size=(e - s, len(classes))), rng.random((e - s, len(classes), 4, 4)))
    for b in w.query_blocks_todo("phantom"):
        s, e = w.query_block_rows("phantom", b)
        w.write_query_block("phantom", b, rng.normal(size=e - s), rng.random((e - s, 4, 4)))
    w.finish()
    return path


def validate(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        validate_main([str(a) for a in args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def zipped(folder, path):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(folder).as_posix())
    return path


def test_every_missing_case_class_and_phrase_row_is_one_line(tmp_path, capsys):
    images = write_images(tmp_path / "images.zarr", 12)
    all_cases, all_phrases = ids_of(12), phrase_ids(ids_of(12))
    cases = [c for c in all_cases if c not in ("case-003", "case-010")]
    phrases = [q for q in all_phrases if q not in ("case-005#1",)]
    classes = ["Cardiomegaly", "Effusion", "Pneumothorax"]  # the team's own name for "Pleural effusion"
    sub = write_sub(tmp_path / "sub.zarr", cases, classes, phrases)
    # alone, the submission is valid: nothing says it falls short
    assert validate(capsys, sub)[0] == 0
    code, out, err = validate(capsys, sub, "--images", images)
    assert code == 2, err
    lines = [ln.removeprefix("xbench-validate: error: ") for ln in err.strip().splitlines()]
    want = [f"{sub}/phantom: class 'Pleural effusion' is missing (the submission has 'Effusion': misnamed?)"]
    want += [f"{sub}/phantom/case_id: case {c!r} is missing" for c in sorted(set(all_cases) - set(cases))]
    want += [f"{sub}/phantom/query_id: phrase row {q!r} is missing" for q in sorted(set(all_phrases) - set(phrases))]
    assert lines == want
    code, out, _ = validate(capsys, sub, "--images", images, "--json")
    assert code == 2 and json.loads(out)["problems"] == want and json.loads(out)["valid"] is False


def test_a_long_listing_is_capped_and_counted(tmp_path, capsys):
    images = write_images(tmp_path / "images.zarr", 40, phrases=False)
    cases = ids_of(40)[::3]  # 14 of 40
    sub = write_sub(tmp_path / "sub.zarr", cases)
    code, _, err = validate(capsys, sub, "--images", images)
    missing = sorted(set(ids_of(40)) - set(cases))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == COVERAGE_LISTED + 1, err
    assert all(f"case {c!r} is missing" in ln for c, ln in zip(missing[:COVERAGE_LISTED], lines))
    assert lines[-1].endswith(f"… and {len(missing) - COVERAGE_LISTED} more missing cases ({len(missing)} in all)")


def test_a_covering_submission_is_valid_on_a_folder_and_a_zip(tmp_path, capsys):
    images = write_images(tmp_path / "images.zarr", 12)
    sub = write_sub(tmp_path / "sub.zarr", ids_of(12)[::-1], CLASSES[::-1], phrase_ids(ids_of(12)))
    for store in (images, zipped(images, tmp_path / "images.zarr.zip")):
        for s in (sub, zipped(sub, tmp_path / "sub.zarr.zip")):
            code, out, err = validate(capsys, s, "--images", store)
            assert code == 0 and err == "", err
            assert out.strip() == f"{s}: valid submission store, holding every case, class and phrase row of {store}"


def test_missing_cases_are_found_in_a_zipped_images_store(tmp_path, capsys):
    images = zipped(write_images(tmp_path / "images.zarr", 12), tmp_path / "images.zarr.zip")
    sub = zipped(write_sub(tmp_path / "sub.zarr", ids_of(11), CLASSES, phrase_ids(ids_of(11))),
                 tmp_path / "sub.zarr.zip")
    code, _, err = validate(capsys, sub, "--images", images)
    assert code == 2 and "case 'case-011' is missing" in err and "phrase row 'case-011#0' is missing" in err


def test_cases_beyond_the_images_store_are_a_counted_warning(tmp_path, capsys):
    images = write_images(tmp_path / "images.zarr", 6, phrases=False)
    sub = write_sub(tmp_path / "sub.zarr", ids_of(10))
    code, out, err = validate(capsys, sub, "--images", images, "--json")
    assert code == 0, err
    assert json.loads(out)["notes"] == [f"{sub}/phantom: 4 of the submission's 10 case ids are not in the images "
                                        "store (they would not be scored), e.g. 'case-006'"]
    assert err.count("warning:") == 1


def test_declared_phrases_unsupported_needs_no_phrase_rows_but_silence_does(tmp_path, capsys):
    images = write_images(tmp_path / "images.zarr", 4)
    ok = write_sub(tmp_path / "ok.zarr", ids_of(4), phrases_unsupported="the model takes no free text")
    assert validate(capsys, ok, "--images", images)[0] == 0
    silent = write_sub(tmp_path / "silent.zarr", ids_of(4))
    code, _, err = validate(capsys, silent, "--images", images)
    assert code == 2 and "the images store has 8 phrase rows but the submission has no query arrays" in err


def test_another_split_says_no_id_matches(tmp_path, capsys):
    images = write_images(tmp_path / "images.zarr", 5, phrases=False)
    sub = write_sub(tmp_path / "sub.zarr", [f"val-{i}" for i in range(7)])
    code, _, err = validate(capsys, sub, "--images", images)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert ("none of the submission's 7 case id(s) is a case of the images store (5 case(s)): e.g. the submission "
            "has 'val-0', the images store 'case-000'") in err


def test_wrong_stores_are_one_line(tmp_path, capsys):
    images = write_images(tmp_path / "images.zarr", 4, phrases=False)
    sub = write_sub(tmp_path / "sub.zarr", ids_of(4))
    code, _, err = validate(capsys, sub, "--images", sub)
    assert code == 2 and "this is a submission store" in err and "--images needs images.zarr" in err
    code, _, err = validate(capsys, images, "--images", images)
    assert code == 2 and "is an images store; --images checks a submission" in err
    code, _, err = validate(capsys, sub, "--images", tmp_path / "nowhere.zarr")
    assert code == 2 and "no such file or folder (--images)" in err
