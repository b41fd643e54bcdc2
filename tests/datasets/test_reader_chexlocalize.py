"""CheXlocalize reader: COCO RLE via pycocotools, 10 grounding tasks, 13 recognition classes."""
from __future__ import annotations

import numpy as np
import pytest
from fixtures import chexlocalize_masks, coco_rle, write_chexlocalize

from xbench.extract.datasets import ReaderError
from xbench.extract.datasets.chexlocalize import CheXlocalizeReader, coco_counts, rle_area

P1, P2, P3 = ("patient64541_study1_view1_frontal", "patient64542_study1_view1_frontal",
              "patient64542_study1_view2_lateral")


def test_labels_and_masks(tmp_path):
    info = write_chexlocalize(tmp_path)
    assert CheXlocalizeReader(tmp_path).split == "test"  # the default is the evaluation split
    reader = CheXlocalizeReader(tmp_path, split="val")
    assert reader.split == "val" and len(reader.classes) == 13 and len(reader.grounding_classes) == 10
    recs = {r.case_id: r for r in reader.records()}
    assert reader.problems == [] and list(recs) == [P1, P2, P3]
    a = recs[P1]
    expected = {c: 0 for c in reader.classes}
    expected.update({"Cardiomegaly": 1, "Lung opacity": 1, "Pneumonia": -1})  # CSV -1.0 (uncertain) -> -1
    assert a.labels == expected
    assert set(a.regions) == {"Cardiomegaly", "Lung opacity"}  # all-zero masks are no region
    assert a.orig_size == info["size"] == (48, 64)  # size [h, w]
    masks = chexlocalize_masks()
    np.testing.assert_array_equal(a.regions["Cardiomegaly"][0].load(), masks["Cardiomegaly"])
    np.testing.assert_array_equal(a.regions["Lung opacity"][0].load(), masks["Airspace Opacity"])
    b = recs[P2]
    assert b.labels["Support devices"] == 1 and "Support devices" not in b.regions  # CSV 1, empty mask
    assert b.labels["Edema"] == 1  # CSV 0.0 but the radiologist drew a mask: the mask wins
    np.testing.assert_array_equal(b.regions["Edema"][0].load(), info["edema"])
    c = recs[P3]  # lateral view, not segmented: recognition only; empty cell -> -1
    assert c.regions == {} and c.orig_size is None and c.labels["Fracture"] == -1
    img = reader.load_image(a)
    assert img.shape == (48, 64) and img.dtype == np.uint8
    assert np.abs(img.astype(int) - info["image"]).max() <= 8  # JPEG (lossy at the block edge)


def test_coco_counts_matches_pycocotools():
    from pycocotools import mask as coco_mask

    rng = np.random.default_rng(1)
    for h, w in [(7, 5), (48, 64), (100, 3)]:
        m = rng.random((h, w)) > 0.6
        rle = coco_rle(m)
        size, area = rle_area(rle)
        assert size == (h, w) and area == m.sum() == coco_mask.area({**rle, "counts": rle["counts"].encode()})
        runs = coco_counts(rle["counts"])
        # independent expansion of the runs: alternate 0/1 in column-major order
        flat = np.concatenate([np.full(n, i % 2, bool) for i, n in enumerate(runs)])
        np.testing.assert_array_equal(flat.reshape(w, h).T, m)


@pytest.mark.parametrize(
    "rle, message",
    [({"size": [5, 7], "counts": "zzz"}, "outside the COCO alphabet"),
     ({"size": [5, 7], "counts": "c0"}, "cover"),  # decodes, but not to 35 pixels
     ({"size": [5, 7], "counts": "a"}, "ends inside a number"),
     ({"size": [5], "counts": "0"}, "not \\[height, width\\]"),
     ({"size": [5, 7], "counts": [35]}, "not a compressed string"),
     ({"counts": "0"}, "not a \\{size, counts\\}")],
)
def test_malformed_rle(rle, message):
    with pytest.raises(ValueError, match=message):
        rle_area(rle)


def test_bad_input(tmp_path):
    info = write_chexlocalize(tmp_path, bad=True)
    reader = CheXlocalizeReader(tmp_path, split="val")
    assert [r.case_id for r in reader.records()] == [P1, P2, P3]
    got = {p.case_id: (p.source, p.message) for p in reader.problems}
    assert got["patient90000_study1_view1_frontal"][1].startswith("RLE counts has a character")
    assert got["patient90001_study1_view1_frontal"][1] == "unknown pathology key 'Nodule'"
    assert "not in val_labels.csv" in got["patient99999_study1_view1_frontal"][1]
    assert got["patient90002_study1_view1_frontal"] == (
        f"val_labels.csv:row {info['bad']['label_row']}", "column 'Edema' has value '2'; expected 1.0, 0.0, -1.0 or empty")
    assert "no image" in got["patient90003_study1_view1_frontal"][1]
    assert got["patient90000_study1_view1_frontal"][0] == "gt_segmentations_val.json:patient90000_study1_view1_frontal"
    assert len(reader.problems) == 5


def test_missing_files(tmp_path):
    with pytest.raises(ReaderError, match=r"CheXpert/val_labels\.csv"):
        CheXlocalizeReader(tmp_path, split="val").records()
    with pytest.raises(ValueError, match="unknown split"):
        CheXlocalizeReader(tmp_path, split="train")


# -- case attributes (issue 38): the labels CSV's Sex/Age/view and the user's demographics file, read exactly --
def _table(reader):
    recs = reader.records()
    got = reader.case_attributes(recs)
    return {r.case_id: {f: (a.values[i] if a.kind == "category" else (None if np.isnan(a.values[i]) else
                                                                       float(a.values[i])))
                        for f, a in got.items()} for i, r in enumerate(recs)}, got


def test_attributes_from_the_labels_csv(tmp_path):
    write_chexlocalize(tmp_path)
    plain = CheXlocalizeReader(tmp_path, split="val")
    assert plain.case_attributes(plain.records()) is None and "attributes" not in plain.describe()
    table, got = _table(CheXlocalizeReader(tmp_path, split="val", attributes="true"))
    assert table == {P1: {"sex": "F", "age": 72.0, "view": "AP"},
                     P2: {"sex": "M", "age": 60.0, "view": "PA"},
                     P3: {"sex": "", "age": None, "view": "LATERAL"}}  # Unknown and an empty Age are missing
    assert got["sex"].source == "val_labels.csv: Sex" and got["age"].values.dtype == np.float32


def test_attributes_from_a_demographics_file(tmp_path):
    write_chexlocalize(tmp_path)
    demo = tmp_path / "demo.csv"
    demo.write_text("PATIENT,GENDER,AGE_AT_CXR,PRIMARY_RACE,ETHNICITY\n"
                    "patient64541,Female,71,\"White, non-Hispanic\",Non-Hispanic/Non-Latino\n"
                    "patient99999,Male,40,Asian,Unknown\n")
    r = CheXlocalizeReader(tmp_path, split="val", demographics=str(demo))
    assert r.describe()["attributes"] is True and r.describe()["demographics"] == str(demo)
    table, got = _table(r)
    # sex and age stay the labels CSV's (per image); race and ethnicity from the file; patient64542 unlisted
    assert table[P1] == {"sex": "F", "age": 72.0, "view": "AP", "race": "White, non-Hispanic",
                         "ethnicity": "Non-Hispanic/Non-Latino"}
    assert table[P2]["race"] == table[P3]["race"] == "" and table[P2]["ethnicity"] == ""
    assert got["race"].source == "demo.csv: PRIMARY_RACE"


def test_demographics_fill_sex_and_age_when_the_labels_csv_lacks_them(tmp_path):
    import csv

    write_chexlocalize(tmp_path)
    path = tmp_path / "CheXpert/val_labels.csv"
    rows = list(csv.reader(path.read_text().splitlines()))
    keep = [i for i, h in enumerate(rows[0]) if h not in ("Sex", "Age", "Frontal/Lateral", "AP/PA")]
    path.write_text("\n".join(",".join(r[i] for i in keep) for r in rows) + "\n")
    demo = tmp_path / "demo.csv"
    demo.write_text("PATIENT,GENDER,AGE_AT_CXR\npatient64541,Female,71\npatient64542,Male,999\n")
    table, got = _table(CheXlocalizeReader(tmp_path, split="val", demographics=str(demo)))
    assert table == {P1: {"sex": "F", "age": 71.0}, P2: {"sex": "M", "age": None}, P3: {"sex": "M", "age": None}}
    assert got["age"].source == "demo.csv: AGE_AT_CXR"  # 999 years is no age: missing, never clipped


def test_bad_demographics_files(tmp_path):
    write_chexlocalize(tmp_path)
    for text, message in (("NAME,GENDER\nx,Male\n", "header lacks 'PATIENT'"),
                          ("PATIENT,GENDER\npatient64541,Male\npatient64541,Female\n", "listed more than once")):
        (tmp_path / "d.csv").write_text(text)
        r = CheXlocalizeReader(tmp_path, split="val", demographics=str(tmp_path / "d.csv"))
        with pytest.raises(ReaderError, match=message):
            r.case_attributes(r.records())
    r = CheXlocalizeReader(tmp_path, split="val", demographics=str(tmp_path / "absent.csv"))
    with pytest.raises(ReaderError, match="not found"):
        r.case_attributes(r.records())
    with pytest.raises(ReaderError, match="attributes must be true or false"):
        CheXlocalizeReader(tmp_path, split="val", attributes="maybe")


def test_prepare_keeps_the_chexlocalize_attributes(tmp_path):
    import zarr

    from xbench.extract.datasets.prepare import prepare_dataset
    from xbench.schemas import validate_ground_truth
    from xbench.schemas.attributes import read_attributes

    write_chexlocalize(tmp_path / "cx")
    prepare_dataset(CheXlocalizeReader(tmp_path / "cx", split="val", attributes="true"), tmp_path / "out",
                    grid=(16, 16), image_size=32, workers=1, progress=False)
    gt = tmp_path / "out/gt.zarr"
    assert validate_ground_truth(gt) == []
    attrs = read_attributes(zarr.open_group(str(gt / "chexlocalize")))
    assert list(attrs["sex"].values) == ["F", "M", ""] and list(attrs["view"].values) == ["AP", "PA", "LATERAL"]
