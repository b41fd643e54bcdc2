"""VinDr-CXR reader: .dicom files, 'No finding' rows, consensus test, union or one-reader train."""
from __future__ import annotations

import numpy as np
import pytest
from fixtures import VINDR_IDS as IDS
from fixtures import write_vindr

from xbench.extract.datasets import Box, ReaderError
from xbench.extract.datasets.dicom import ImageReadError
from xbench.extract.datasets.vindr import VinDrCXRReader


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("vindr")
    return root, write_vindr(root)


def _positives(rec):
    return {c for c, v in rec.labels.items() if v == 1}


def test_test_split(root):
    path, info = root
    reader = VinDrCXRReader(path)
    recs = {r.case_id: r for r in reader.records()}
    assert reader.problems == [] and list(recs) == [IDS["a"], IDS["b"], IDS["c"]]
    assert len(reader.classes) == 22
    a, b, c = recs[IDS["a"]], recs[IDS["b"]], recs[IDS["c"]]
    assert set(a.labels.values()) == {0, 1} and _positives(a) == {"Cardiomegaly", "Pleural effusion"}
    # x_max 64 and y_max 48 touch the border of the 64x48 image: allowed.
    assert a.regions == {"Cardiomegaly": [Box(20, 25, 45, 40)],
                         "Pleural effusion": [Box(0, 30, 12, 47.5), Box(50, 30, 64, 48)]}
    assert b.labels == {cls: 0 for cls in reader.classes} and b.regions == {}  # 'No finding', empty coordinates
    assert c.regions == {"Nodule/Mass": [Box(10.5, 10.5, 14.5, 16)]}
    assert all(r.orig_size == (48, 64) for r in recs.values())  # from the DICOM headers


def test_test_images_decode(root):
    path, info = root
    reader = VinDrCXRReader(path)
    recs = {r.case_id: r for r in reader.records()}
    a = reader.load_image(recs[IDS["a"]])  # 12-bit MONOCHROME1 -> min-max stretched, inverted
    np.testing.assert_array_equal(a, np.rint((1 - (info["g12"] - 100) / 3900) * 255))
    np.testing.assert_array_equal(reader.load_image(recs[IDS["b"]]), info["g8"])  # no file meta: force=True
    assert np.abs(reader.load_image(recs[IDS["c"]]).astype(int) - info["g8"]).max() <= 2  # JPEG baseline


def test_train_union(root):
    path, _ = root
    recs = {r.case_id: r for r in VinDrCXRReader(path, split="train").records()}
    assert list(recs) == [IDS["d"], IDS["e"], IDS["f"]]
    assert recs[IDS["d"]].regions == {"Aortic enlargement": [Box(30, 5, 40, 15), Box(32, 4, 44, 16)]}
    assert _positives(recs[IDS["d"]]) == {"Aortic enlargement"}  # R3's 'No finding' does not veto
    assert _positives(recs[IDS["e"]]) == set()
    assert _positives(recs[IDS["f"]]) == {"Lung opacity", "Nodule/Mass"}


def test_train_one_reader(root):
    path, _ = root
    reader = VinDrCXRReader(path, split="train", reader="R1")
    recs = {r.case_id: r for r in reader.records()}
    assert list(recs) == [IDS["d"], IDS["e"], IDS["f"]]  # R1 read all three
    assert recs[IDS["d"]].regions == {"Aortic enlargement": [Box(30, 5, 40, 15)]}
    assert _positives(recs[IDS["f"]]) == {"Nodule/Mass"}  # R4's opacity is not R1's
    assert reader.describe()["reader"] == "R1"
    only_r4 = VinDrCXRReader(path, split="train", reader="R4").records()
    assert [r.case_id for r in only_r4] == [IDS["f"]] and _positives(only_r4[0]) == {"Lung opacity"}


def test_reader_option_checks():
    with pytest.raises(ValueError, match="reader must be 'union' or a rad_id"):
        VinDrCXRReader("x", split="train", reader="majority")
    with pytest.raises(ValueError, match="only be chosen on the train split"):
        VinDrCXRReader("x", split="test", reader="R1")


def test_check_sizes_off(root):
    path, _ = root
    reader = VinDrCXRReader(path, check_sizes="false")  # CLI spelling
    assert reader.describe() == {"split": "test", "check_sizes": False, "reader": "union", "voi": "header"}
    assert all(r.orig_size is None for r in reader.records())
    with pytest.raises(ValueError, match="check_sizes must be true or false"):
        VinDrCXRReader(path, check_sizes="maybe")


def test_bad_rows(tmp_path):
    info = write_vindr(tmp_path, bad=True)
    reader = VinDrCXRReader(tmp_path)
    recs = {r.case_id: r for r in reader.records()}
    nopix = "ffffffffffffffffffffffffffffff05"
    assert list(recs) == [IDS["a"], IDS["b"], IDS["c"], nopix]
    rows = info["bad_rows"]
    got = {p.source: (p.case_id, p.message) for p in reader.problems}
    expected = {"unknown": ("01", "unknown class_name 'Lung tumor'"), "nocoords": ("02", "without coordinates"),
                "outside": ("03", "outside the 64x48 image"), "noimage": ("04", "no image test/")}
    assert len(got) == len(expected)
    for name, (case, text) in expected.items():
        case_got, message = got[f"annotations_test.csv:row {rows[name]}"]
        assert case_got == "ffffffffffffffffffffffffffffff" + case and text in message
    # A header-only file passes records() (its header has a size) and fails at decoding.
    with pytest.raises(ImageReadError, match="no PixelData"):
        reader.load_image(recs[nopix])


def test_missing_annotations(tmp_path):
    with pytest.raises(ReaderError, match=r"annotations/annotations_test\.csv"):
        VinDrCXRReader(tmp_path).records()
