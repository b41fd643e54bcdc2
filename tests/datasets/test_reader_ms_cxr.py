"""MS-CXR reader: the local-alignment CSV (v1.1.0 with split, v1.0.0 without), multi-box phrases,
MIMIC-CXR-JPG paths; prepared into phrase rows exactly as the fixture says."""
from __future__ import annotations

import csv

import numpy as np
import pytest
from fixtures import gradient, write_jpg

from xbench.extract.datasets import Box, ReaderError
from xbench.extract.datasets.ms_cxr import MSCXRReader
from xbench.extract.datasets.prepare import prepare_dataset
from xbench.extract.datasets.rasterise import rasterise_region

HEADER = ["dicom_id", "category_name", "label_text", "path", "x", "y", "w", "h", "image_width", "image_height"]
SIZE = {"d1": (60, 80), "d2": (64, 64), "d3": (50, 70)}  # (height, width)
PATH = {d: f"files/p1{i}/p1{i}000001/s5{i}000001/{d}.jpg" for i, d in enumerate(SIZE)}
ROWS = [  # dicom_id, category, text, x, y, w, h, split
    ("d1", "Pneumothorax", "small left apical pneumothorax", 50, 5, 20, 10, "test"),
    ("d1", "Pleural Effusion", "bilateral pleural effusions", 2, 40, 20, 15, "test"),
    ("d1", "Pleural Effusion", "bilateral pleural effusions", 55, 42, 20, 14, "test"),  # second box, same phrase
    ("d1", "Lung Opacity", "patchy right basal opacity", 5, 30, 10, 8, "test"),
    ("d2", "Cardiomegaly", "the heart is enlarged", 15, 30, 34, 20, "test"),
    ("d3", "Edema", "mild pulmonary edema", 10, 10, 50, 30, "train"),
]


def write_ms_cxr(root, *, version="1.1.0", extra=()):
    root.mkdir(parents=True, exist_ok=True)
    header = HEADER + (["split"] if version == "1.1.0" else [])
    with open(root / f"MS_CXR_Local_Alignment_v{version}.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for d, cat, text, x, y, bw, bh, split in list(ROWS) + list(extra):
            h, wd = SIZE.get(d, (60, 80))
            row = [d, cat, text, PATH.get(d, f"files/p19/p19000001/s59000001/{d}.jpg"), x, y, bw, bh, wd, h]
            w.writerow(row + ([split] if version == "1.1.0" else []))
    for d, (h, wd) in SIZE.items():
        write_jpg(root / PATH[d], gradient(h, wd))


def test_reads_phrases_boxes_and_splits(tmp_path):
    write_ms_cxr(tmp_path)
    recs = {r.case_id: r for r in MSCXRReader(tmp_path).records()}
    assert list(recs) == ["d1", "d2"]
    d1 = recs["d1"]
    assert [(p.category, p.text, p.shapes) for p in d1.phrases] == [
        ("Pneumothorax", "small left apical pneumothorax", (Box(50, 5, 70, 15),)),
        ("Pleural effusion", "bilateral pleural effusions", (Box(2, 40, 22, 55), Box(55, 42, 75, 56))),
        ("Lung opacity", "patchy right basal opacity", (Box(5, 30, 15, 38),)),
    ]
    assert d1.orig_size == (60, 80) and d1.labels["Pneumothorax"] == 1 and d1.labels["Edema"] == -1
    assert d1.regions["Pleural effusion"] == [Box(2, 40, 22, 55), Box(55, 42, 75, 56)]
    assert [r.case_id for r in MSCXRReader(tmp_path, split="train").records()] == ["d3"]
    assert len(MSCXRReader(tmp_path, split="all").records()) == 3
    assert MSCXRReader(tmp_path, split="val").records() == []


def test_v1_0_0_layout_needs_split_all(tmp_path):
    write_ms_cxr(tmp_path, version="1.0.0")
    with pytest.raises(ReaderError, match="split all"):
        MSCXRReader(tmp_path).records()
    assert [r.case_id for r in MSCXRReader(tmp_path, split="all").records()] == ["d1", "d2", "d3"]


def test_bad_rows_skip_their_image(tmp_path):
    write_ms_cxr(tmp_path, extra=[("d2", "Tuberculosis", "cavity", 1, 1, 5, 5, "test"),
                                  ("d9", "Edema", "edema", 1, 1, 5, 5, "test"),            # no image file
                                  ("d1x", "Edema", "edema", 70, 1, 50, 5, "test")])        # box outside
    reader = MSCXRReader(tmp_path)
    assert [r.case_id for r in reader.records()] == ["d1"]
    msgs = " | ".join(str(p) for p in reader.problems)
    assert "unknown category_name 'Tuberculosis'" in msgs and "no image" in msgs and "outside" in msgs
    with pytest.raises(ReaderError, match="no MS-CXR CSV"):
        MSCXRReader(tmp_path / "nothing").records()


def test_prepare_gives_exactly_the_fixture_phrases(tmp_path):
    from xbench.schemas import read_ground_truth, read_images, validate_ground_truth, validate_images

    write_ms_cxr(tmp_path / "raw")
    out = tmp_path / "out"
    prepare_dataset(MSCXRReader(tmp_path / "raw"), out, grid=(16, 20), image_size=32, workers=1, progress=False)
    assert validate_images(out / "images.zarr") == [] and validate_ground_truth(out / "gt.zarr") == []
    img = read_images(out / "images.zarr").datasets["ms_cxr"]
    gt = read_ground_truth(out / "gt.zarr").datasets["ms_cxr"]
    test_rows = [r for r in ROWS if r[7] == "test"]
    phrases = list(dict.fromkeys((d, c, t) for d, c, t, *_ in test_rows))
    assert img.queries.text.tolist() == [t for _, _, t in phrases]
    assert img.queries.id.tolist() == ["d1#0", "d1#1", "d1#2", "d2#0"]
    assert img.case_id[img.queries.case].tolist() == [d for d, _, _ in phrases]
    assert gt.queries.id.tolist() == img.queries.id.tolist()
    masks = np.asarray(gt.query_mask[...])
    for k, (d, c, t) in enumerate(phrases):
        boxes = [Box(x, y, x + w, y + h) for dd, cc, tt, x, y, w, h, _ in test_rows if (dd, cc, tt) == (d, c, t)]
        want = rasterise_region(boxes, SIZE[d], (16, 20)).mask
        np.testing.assert_array_equal(masks[k], want)
    assert read_images(out / "images.zarr").attrs["schema_minor"] >= 2
