"""NIH ChestX-ray14 bbox reader: odd header read by position, 'Infiltrate', negatives option."""
from __future__ import annotations

import numpy as np
import pytest
from fixtures import write_nih

from xbench.extract.datasets import Box, ReaderError
from xbench.extract.datasets.chestxray14 import ChestXray14Reader

CLASSES = ("Atelectasis", "Cardiomegaly", "Pleural effusion", "Infiltration", "Mass", "Nodule", "Pneumonia",
           "Pneumothorax")


def test_boxes_only(tmp_path):
    info = write_nih(tmp_path)
    reader = ChestXray14Reader(tmp_path)
    recs = {r.case_id: r for r in reader.records()}
    assert reader.problems == [] and list(recs) == ["00000001_000", "00000002_000"]
    a = recs["00000001_000"]
    # Classes without a box are not annotated (-1) unless negatives are asked for.
    assert a.labels == {c: 1 if c in ("Infiltration", "Pleural effusion") else -1 for c in CLASSES}
    assert a.regions == {"Infiltration": [Box(100.5, 200.25, 400.5, 350.25)],
                         "Pleural effusion": [Box(600, 700, 800, 950)]}
    assert recs["00000002_000"].regions == {"Nodule": [Box(50, 60, 70, 90), Box(500, 400, 525, 425)]}
    assert a.orig_size == (1024, 1024)
    # The first image is an RGBA PNG; the second lives in the Kaggle images_002/images/ folder.
    np.testing.assert_array_equal(reader.load_image(a), info["image"])
    np.testing.assert_array_equal(reader.load_image(recs["00000002_000"]), info["image"])


def test_negatives_from_data_entry(tmp_path):
    write_nih(tmp_path)
    reader = ChestXray14Reader(tmp_path, negatives=True)
    recs = {r.case_id: r for r in reader.records()}
    assert list(recs) == ["00000001_000", "00000002_000", "00000003_000", "00000004_000"]
    # 00000001_000: Data_Entry lists Effusion|Infiltration|Emphysema -> every class without a box is 0.
    assert recs["00000001_000"].labels == {c: 1 if c in ("Infiltration", "Pleural effusion") else 0 for c in CLASSES}
    # 00000002_000: Data_Entry lists Mass but there is no Mass box -> Mass stays -1.
    assert recs["00000002_000"].labels == {c: {"Nodule": 1, "Mass": -1}.get(c, 0) for c in CLASSES}
    for neg in ("00000003_000", "00000004_000"):  # 'No Finding' images, all 0, no regions
        assert recs[neg].labels == {c: 0 for c in CLASSES} and recs[neg].regions == {}
    # 00000005_000 (Atelectasis, no box, not 'No Finding') is not a case.
    one = ChestXray14Reader(tmp_path, negatives=1).records()
    assert len(one) == 3 and one[-1].case_id in ("00000003_000", "00000004_000")
    assert ChestXray14Reader(tmp_path, negatives=1).records()[-1].case_id == one[-1].case_id  # seeded


def test_negatives_need_data_entry(tmp_path):
    write_nih(tmp_path)
    (tmp_path / "Data_Entry_2017_v2020.csv").unlink()
    with pytest.raises(ReaderError, match="negatives need"):
        ChestXray14Reader(tmp_path, negatives=True).records()
    with pytest.raises(ValueError, match="negatives must be"):
        ChestXray14Reader(tmp_path, negatives="maybe")


@pytest.mark.parametrize("value, expected", [("true", True), ("data_entry", True), ("false", False), ("250", 250),
                                             (True, True), (0, 0)])
def test_negatives_option_from_the_cli(value, expected):
    assert ChestXray14Reader("x", negatives=value).describe() == {"split": "bbox", "negatives": expected}


def test_bad_rows(tmp_path):
    info = write_nih(tmp_path, bad=True)
    reader = ChestXray14Reader(tmp_path)
    assert [r.case_id for r in reader.records()] == ["00000001_000", "00000002_000"]
    rows = info["bad_rows"]
    got = {p.source: (p.case_id, p.message) for p in reader.problems}
    expected = {"unknown": ("00000011_000", "unknown finding label 'Infection'"),
                "short": ("00000012_000", "expected 6 fields"), "outside": ("00000013_000", "outside the 1024x1024"),
                "notnumber": ("00000014_000", "bad box"), "noimage": ("00000015_000", "no image 00000015_000.png")}
    assert len(got) == len(expected)
    for name, (case, text) in expected.items():
        case_got, message = got[f"BBox_List_2017.csv:row {rows[name]}"]
        assert case_got == case and text in message


def test_missing_bbox_file(tmp_path):
    with pytest.raises(ReaderError, match="BBox_List_2017.csv"):
        ChestXray14Reader(tmp_path).records()


# -- case attributes (issue 38): Data_Entry's sex, age and view position, read exactly --------------------------
def test_attributes_from_data_entry(tmp_path):
    write_nih(tmp_path)
    plain = ChestXray14Reader(tmp_path)
    assert plain.case_attributes(plain.records()) is None and "attributes" not in plain.describe()
    r = ChestXray14Reader(tmp_path, negatives="true", attributes="true")
    recs = r.records()
    got = r.case_attributes(recs)
    assert r.describe()["attributes"] is True
    table = {rec.case_id: (got["sex"].values[i], float(got["age"].values[i]), got["view"].values[i])
             for i, rec in enumerate(recs)}
    assert table == {"00000001_000": ("M", 58.0, "PA"), "00000002_000": ("M", 81.0, "PA"),
                     "00000003_000": ("F", 81.0, "PA"), "00000004_000": ("F", 40.0, "AP")}
    assert got["sex"].source == "Data_Entry: Patient Gender"


def test_attributes_need_data_entry(tmp_path):
    write_nih(tmp_path)
    (tmp_path / "Data_Entry_2017_v2020.csv").unlink()
    r = ChestXray14Reader(tmp_path, attributes="true")
    with pytest.raises(ReaderError, match="attributes need"):
        r.case_attributes(r.records())


def test_native_ages():
    from xbench.extract.datasets.chestxray14 import native_age

    assert [native_age(t) for t in ("58", "058Y", "006M", "013W", "010D", "414", "", "x", "-3")] == \
        [58.0, 58.0, 0.5, pytest.approx(13 / 52.1775), pytest.approx(10 / 365.25), None, None, None, None]


def test_prepare_keeps_the_attributes(tmp_path):
    import zarr

    from xbench.extract.datasets.prepare import prepare_dataset
    from xbench.schemas import validate_ground_truth
    from xbench.schemas.attributes import read_attributes

    write_nih(tmp_path / "nih")
    prepare_dataset(ChestXray14Reader(tmp_path / "nih", attributes="true"), tmp_path / "out", grid=(16, 16),
                    image_size=32, workers=1, progress=False)
    gt = tmp_path / "out/gt.zarr"
    assert validate_ground_truth(gt) == []
    attrs = read_attributes(zarr.open_group(str(gt / "chestxray14")))
    assert list(attrs["sex"].values) == ["M", "M"] and list(attrs["age"].values) == [58.0, 81.0]
