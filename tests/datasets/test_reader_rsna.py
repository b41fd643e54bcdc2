"""RSNA Pneumonia reader on a fixture in the Kaggle stage-2 layout."""
from __future__ import annotations

import numpy as np
import pytest
from fixtures import write_rsna

from xbench.extract.datasets import Box, ReaderError
from xbench.extract.datasets.rsna import RSNAPneumoniaReader


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("rsna")
    info = write_rsna(root)
    reader = RSNAPneumoniaReader(root)
    return reader, {r.case_id: r for r in reader.records()}, info


def test_labels_and_boxes(good):
    reader, recs, _ = good
    assert list(recs) == ["neg-0001", "pos-0002", "neg-0003", "pos-0004"]  # file order, one per patient
    assert reader.problems == []
    assert recs["neg-0001"].labels == {"Pneumonia": 0} and recs["neg-0001"].regions == {}
    assert recs["pos-0002"].labels == {"Pneumonia": 1}
    # x,y,width,height -> x0,y0,x1,y1 ; both rows of the patient are one region
    assert recs["pos-0002"].regions == {"Pneumonia": [Box(100, 200, 150, 280), Box(600, 300, 700, 420)]}
    assert recs["pos-0004"].regions == {"Pneumonia": [Box(10, 20, 40, 60)]}
    assert all(r.orig_size == (1024, 1024) for r in recs.values())


def test_images_decode(good):
    reader, recs, info = good
    for rec in (recs["neg-0001"], recs["pos-0002"]):  # JPEG baseline and uncompressed
        img = reader.load_image(rec)
        assert img.dtype == np.uint8 and img.shape == (1024, 1024)
        assert np.abs(img.astype(int) - info["image"]).max() <= 2


def test_bad_rows_are_reported_and_skipped(tmp_path):
    info = write_rsna(tmp_path, bad=True)
    reader = RSNAPneumoniaReader(tmp_path)
    ids = [r.case_id for r in reader.records()]
    assert ids == ["neg-0001", "pos-0002", "neg-0003", "pos-0004"]
    got = {(p.case_id, p.source) for p in reader.problems}
    rows = info["bad_rows"]
    f = "stage_2_train_labels.csv:row"
    assert got == {
        ("bad-target", f"{f} {rows['bad-target']}"),
        ("bad-nobox", f"{f} {rows['bad-nobox']}"),
        ("bad-outside", f"{f} {rows['bad-outside']}"),
        ("bad-mixed", f"{f} {rows['bad-mixed-a']}"),
        ("bad-noimage", f"{f} {rows['bad-noimage']}"),
    }
    msgs = {p.case_id: p.message for p in reader.problems}
    assert "Target must be 0 or 1" in msgs["bad-target"]
    assert "outside the 1024x1024 image" in msgs["bad-outside"]
    assert "both Target=0 and Target=1" in msgs["bad-mixed"]
    assert "no image" in msgs["bad-noimage"]


def test_missing_labels_file_names_path_and_layout(tmp_path):
    with pytest.raises(ReaderError, match=r"stage_2_train_labels\.csv(.|\n)*stage_2_train_images/<patientId>\.dcm"):
        RSNAPneumoniaReader(tmp_path).records()


def test_unknown_option_and_split():
    with pytest.raises(ValueError, match="unknown option"):
        RSNAPneumoniaReader("x", negatives=True)
    with pytest.raises(ValueError, match="unknown split 'test'"):
        RSNAPneumoniaReader("x", split="test")
