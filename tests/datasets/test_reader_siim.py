"""SIIM-ACR reader: relative column-major RLE, union of instances, both header spellings."""
from __future__ import annotations

import numpy as np
import pytest
from fixtures import mask_to_relative_rle, write_siim

from xbench.extract.datasets import Mask, ReaderError
from xbench.extract.datasets.siim import SIIMACRReader, decode_runs, parse_rle


def test_hand_worked_rle():
    # '5 3 2 4': pixels 5,6,7 then (8 + 2 =) 10..13 of the flat column-major array, i.e. column 0.
    mask = decode_runs([parse_rle(" 5 3 2 4")])
    assert mask.shape == (1024, 1024) and mask.dtype == bool
    assert sorted(zip(*np.nonzero(mask))) == [(5, 0), (6, 0), (7, 0), (10, 0), (11, 0), (12, 0), (13, 0)]
    # Crossing a column: flat 1023 is (row 1023, col 0), flat 1024 is (row 0, col 1).
    mask = decode_runs([parse_rle("1023 2")])
    assert sorted(zip(*np.nonzero(mask))) == [(0, 1), (1023, 0)]


@pytest.mark.parametrize("value", ["-1", " -1", " -1 "])
def test_negative_spellings(value):
    assert parse_rle(value) is None


@pytest.mark.parametrize(
    "value, message",
    [("5 3 2", "odd number"), ("5 3.5", "non-integer"), ("5 x", "non-integer"), ("", "empty"),
     ("5 -3", "negative"), (f"{1024 * 1024 - 2} 5", "past the end"), ("0 3 1048570 10", "past the end")],
)
def test_malformed_rle(value, message):
    with pytest.raises(ValueError, match=message):
        parse_rle(value)


def test_run_to_the_last_pixel_is_fine():
    mask = decode_runs([parse_rle(f"{1024 * 1024 - 3} 3")])
    assert mask.sum() == 3 and mask[1023, 1023]


@pytest.mark.parametrize("stage", [1, 2])
def test_reader_labels_and_masks(tmp_path, stage):
    info = write_siim(tmp_path, stage=stage)
    reader = SIIMACRReader(tmp_path)
    recs = {r.case_id: r for r in reader.records()}
    assert reader.problems == []
    assert reader.describe()["csv"] == info["csv"]
    masks = info["masks"]
    assert len(recs) == 5
    for neg in ("1.2.276.0.7230010.3.1.4.901", "1.2.276.0.7230010.3.1.4.902"):
        assert recs[neg].labels == {"Pneumothorax": 0} and recs[neg].regions == {}
    one = recs["1.2.276.0.7230010.3.1.4.111"]
    assert one.labels == {"Pneumothorax": 1} and one.orig_size == (1024, 1024)
    (m,) = one.regions["Pneumothorax"]
    assert isinstance(m, Mask)
    got = m.load()
    np.testing.assert_array_equal(got, masks["1.2.276.0.7230010.3.1.4.111"][0])
    assert got[100:180, 700:760].all()  # rows are rows: not transposed
    (m2,) = recs["1.2.276.0.7230010.3.1.4.222"].regions["Pneumothorax"]
    b1, b2 = masks["1.2.276.0.7230010.3.1.4.222"]
    np.testing.assert_array_equal(m2.load(), b1 | b2)  # union of the two (non-adjacent) rows
    assert m2.load().sum() == (b1 | b2).sum() < b1.sum() + b2.sum()  # they overlap
    hand = recs[info["hand"]].regions["Pneumothorax"][0].load()
    assert hand.sum() == 7 and hand[5:8, 0].all() and hand[10:14, 0].all()


def test_stage2_is_preferred_when_both_exist(tmp_path):
    write_siim(tmp_path, stage=1)
    write_siim(tmp_path, stage=2)
    assert SIIMACRReader(tmp_path).describe()["csv"] == "stage_2_train.csv"
    assert SIIMACRReader(tmp_path, csv="train-rle.csv").describe()["csv"] == "train-rle.csv"


def test_independent_encoder_round_trip():
    rng = np.random.default_rng(0)
    m = rng.random((1024, 1024)) > 0.999
    np.testing.assert_array_equal(decode_runs([parse_rle(mask_to_relative_rle(m))]), m)


def test_images_decode(tmp_path):
    write_siim(tmp_path)
    reader = SIIMACRReader(tmp_path)
    img = reader.load_image(reader.records()[0])
    assert img.shape == (1024, 1024) and img.dtype == np.uint8


def test_bad_rows(tmp_path):
    info = write_siim(tmp_path, bad=True)
    reader = SIIMACRReader(tmp_path)
    assert len(reader.records()) == 5
    rows = info["bad_rows"]
    got = {p.case_id: (p.source, p.message) for p in reader.problems}
    assert len(reader.problems) == 7
    for case, key, text in [("bad.odd", "odd", "odd number"), ("bad.nonint", "nonint", "non-integer"),
                            ("bad.pastend", "pastend", "past the end"), ("bad.negative", "negative", "negative"),
                            ("bad.empty", "empty", "empty"), ("bad.mixed", "mixed-a", "both -1 and mask"),
                            ("bad.noimage", "noimage", "no DICOM")]:
        source, message = got[case]
        assert source == f"train-rle.csv:row {rows[key]}"
        assert text in message


def test_missing_csv_and_bad_header(tmp_path):
    with pytest.raises(ReaderError, match="stage_2_train.csv or .*train-rle.csv"):
        SIIMACRReader(tmp_path).records()
    (tmp_path / "train-rle.csv").write_text("ImageId,Mask\n")
    with pytest.raises(ReaderError, match="expected 'ImageId,EncodedPixels'"):
        SIIMACRReader(tmp_path).records()
    with pytest.raises(ValueError, match="csv must be one of"):
        SIIMACRReader(tmp_path, csv="other.csv")
