"""REFLACX's readers for the readers' ceiling (extract/human_reflacx.py): each reading's ellipses as its marks and
the other readings of the same image as its truth, exactly as the native fixture draws them."""
from __future__ import annotations

import numpy as np
import pytest
from gaze_fixtures import IMAGES, write_reflacx
from test_reader_reflacx import brute_ellipse

from xbench.extract.human import truth_region
from xbench.extract.human_reflacx import read_reflacx
from xbench.schemas.errors import InputError
from xbench.schemas.vocabulary import classes_for

D1, D2, D3 = IMAGES


def test_each_reading_against_the_other_readings_of_its_image(tmp_path):
    write_reflacx(tmp_path)
    sizes = {d: v[2] for d, v in IMAGES.items()}
    classes = classes_for("reflacx")
    reading = read_reflacx(tmp_path, sizes, classes)
    readers = ["P101R000001", "P101R000002", "P101R000003"]  # phase 1: D1 read three times; phase 3 left out
    assert sorted(reading.cases) == readers and all(reading.cases[r] == [D1] for r in readers)
    m1 = reading.marks["P101R000001"][D1]
    assert sorted(m1) == ["Pleural effusion"]  # Support devices labelled but not drawn; cardiac below certainty
    got = [s.load() for s in m1["Pleural effusion"].shapes]
    assert [g.tolist() for g in got] == [brute_ellipse(b, (60, 80)).tolist() for b in [(5, 30, 30, 58), (50, 35, 78, 57)]]
    assert sorted(reading.marks["P101R000002"][D1]) == ["Atelectasis", "Pleural effusion"]  # discarded gaze, kept
    t3 = reading.truth["P101R000003"][D1]
    assert sorted(t3) == ["Atelectasis", "Pleural effusion"] and len(t3["Pleural effusion"]) == 2
    # union vs majority over the two other readings of P101R000003
    label, region = truth_region(t3["Pleural effusion"], (60, 80), (12, 16), "majority")
    from xbench.extract.datasets.rasterise import rasterise_region

    a = rasterise_region(t3["Pleural effusion"][0], (60, 80), (12, 16)).mask
    b = rasterise_region(t3["Pleural effusion"][1], (60, 80), (12, 16)).mask
    assert label == 1 and np.array_equal(region, a & b)
    assert truth_region(t3["Atelectasis"], (60, 80), (12, 16), "majority")[0] == 0  # one of two: no majority


def test_refused_without_two_readings_or_with_bad_files(tmp_path):
    write_reflacx(tmp_path)
    sizes = {d: v[2] for d, v in IMAGES.items()}
    with pytest.raises(InputError, match="two or more"):
        read_reflacx(tmp_path, sizes, classes_for("reflacx"), phases=(3,))
    fx = tmp_path / "main_data" / "P101R000003" / "fixations.csv"
    fx.write_bytes(fx.read_bytes().replace(b"0.25,60", b"-0.25,60"))
    with pytest.raises(InputError) as exc:
        read_reflacx(tmp_path, sizes, classes_for("reflacx"))
    assert len(exc.value.problems) == 1 and "P101R000003" in str(exc.value.problems[0])
