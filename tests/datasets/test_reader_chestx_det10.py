"""ChestX-Det10 reader: JSON lists, xyxy boxes, empty syms as negatives."""
from __future__ import annotations

import numpy as np
import pytest
from fixtures import write_det10

from xbench.extract.datasets import Box, ReaderError
from xbench.extract.datasets.chestx_det10 import ChestXDet10Reader

CLASSES = ("Atelectasis", "Calcification", "Consolidation", "Pleural effusion", "Emphysema",
           "Pulmonary fibrosis", "Fracture", "Mass", "Nodule", "Pneumothorax")


def test_test_split(tmp_path):
    info = write_det10(tmp_path)
    reader = ChestXDet10Reader(tmp_path)
    assert reader.split == "test" and reader.classes == CLASSES
    recs = {r.case_id: r for r in reader.records()}
    assert reader.problems == [] and list(recs) == ["36204", "36205", "36206"]
    a = recs["36204"]
    assert a.labels == {c: int(c in ("Nodule", "Pleural effusion")) for c in CLASSES}
    assert a.regions == {"Nodule": [Box(100, 120, 140, 170), Box(300, 310, 330, 350)],
                         "Pleural effusion": [Box(600, 700, 900, 1000)]}
    assert recs["36205"].labels == {c: 0 for c in CLASSES} and recs["36205"].regions == {}
    assert recs["36206"].regions == {"Pulmonary fibrosis": [Box(1, 1, 1022, 400)]}
    assert a.orig_size == (1024, 1024)
    img = reader.load_image(a)
    np.testing.assert_array_equal(img, info["image"])
    assert str(reader.load_image(a).dtype) == "uint8"


def test_train_split(tmp_path):
    write_det10(tmp_path)
    reader = ChestXDet10Reader(tmp_path, split="train")
    (rec,) = reader.records()
    assert rec.case_id == "36199" and rec.labels["Pneumothorax"] == 1
    assert rec.image_ref.parent.name == "train_data"


def test_bad_items(tmp_path):
    info = write_det10(tmp_path, bad=True)
    reader = ChestXDet10Reader(tmp_path)
    ids = [r.case_id for r in reader.records()]
    assert ids == ["36204", "36205"]  # 36206 is listed twice: both copies are dropped
    got = {p.source: (p.case_id, p.message) for p in reader.problems}
    items = info["bad_items"]
    expected = {"unknown": ("40001", "unknown sym 'Tuberculosis'"), "mismatch": ("40002", "2 syms but 1 boxes"),
                "outside": ("40003", "outside the 1024x1024"), "notnumbers": ("40004", "is not [x1, y1, x2, y2]"),
                "duplicate": ("36206", "more than once"), "noimage": ("40005", "no image 40005.png")}
    assert len(got) == len(expected)
    for name, (case, text) in expected.items():
        case_got, message = got[f"test.json:item {items[name]}"]
        assert case_got == case and text in message


def test_missing_json(tmp_path):
    with pytest.raises(ReaderError, match=r"test\.json"):
        ChestXDet10Reader(tmp_path).records()
    (tmp_path / "test.json").write_text('{"file_name": "1.png"}')
    with pytest.raises(ReaderError, match="expected a JSON list"):
        ChestXDet10Reader(tmp_path).records()
