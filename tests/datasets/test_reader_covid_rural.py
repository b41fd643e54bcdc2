"""COVID-rural reader: LabelMe polygons, lung outlines excluded, 'groud_glass_opacity'."""
from __future__ import annotations

import numpy as np
import pytest
from fixtures import write_covid

from xbench.extract.datasets import Polygon, ReaderError
from xbench.extract.datasets.covid_rural import CovidRuralReader

A, B, C = ("COVID-19-AR-16406488_01-15-2012-XR", "COVID-19-AR-16406500_02-01-2012-XR",
           "COVID-19-AR-16406511_03-03-2012-XR")


def _poly(points):
    return Polygon(tuple((float(x), float(y)) for x, y in points))


def test_labels_and_polygons(tmp_path):
    info = write_covid(tmp_path)
    reader = CovidRuralReader(tmp_path)
    recs = {r.case_id: r for r in reader.records()}
    assert reader.problems == [] and list(recs) == [A, B, C]
    assert reader.classes == ("COVID-19",)
    a = recs[A]
    assert a.labels == {"COVID-19": 1} and a.orig_size == (60, 80)  # imageHeight, imageWidth
    assert a.regions == {"COVID-19": [_poly(info["cons"]), _poly(info["ggo"])]}  # lungs dropped
    assert recs[B].labels == {"COVID-19": 0} and recs[B].regions == {}  # only lung outlines
    assert recs[C].regions == {"COVID-19": [_poly(info["cons"])]}
    assert abs(reader.load_image(a).astype(int) - info["image"]).max() <= 8  # the JPG (lossy at the block edge)
    np.testing.assert_array_equal(reader.load_image(recs[C]), info["image"])  # embedded PNG imageData


def test_root_may_be_the_annot_folder(tmp_path):
    write_covid(tmp_path)
    assert len(CovidRuralReader(tmp_path / "covid_rural_annot").records()) == 3


def test_bad_files(tmp_path):
    write_covid(tmp_path, bad=True)
    reader = CovidRuralReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [A, B, C]
    got = {p.case_id: (p.source, p.message) for p in reader.problems}
    assert got["BAD-unknown"] == ("jsons/BAD-unknown.json:shape 1",
                                  "unknown covid_rural label 'nodule'; known labels: 'consolidation', "
                                  "'groud_glass_opacity', 'ground_glass_opacity'")
    assert "at least 3 points" in got["BAD-twopoints"][1]
    assert "(90.0, 5.0) lies outside the 80x60 image" in got["BAD-outside"][1]
    assert "no embedded imageData" in got["BAD-noimage"][1]
    assert got["BAD-notjson"][0] == "jsons/BAD-notjson.json" and "is not valid JSON" in got["BAD-notjson"][1]
    assert len(reader.problems) == 5


def test_missing_folder(tmp_path):
    with pytest.raises(ReaderError, match="covid_rural_annot/jpgs/jsons"):
        CovidRuralReader(tmp_path).records()


def test_rectangle_shape_becomes_a_box(tmp_path):
    import json

    from fixtures import labelme, write_jpg

    from xbench.extract.datasets import Box

    base = tmp_path / "covid_rural_annot" / "jpgs"
    doc = labelme([], 60, 80)
    doc["shapes"] = [{"label": "consolidation", "points": [[30, 40], [10, 5]], "shape_type": "rectangle"},
                     {"label": "consolidation", "points": [[1, 1], [2, 2], [3, 1]], "shape_type": "circle"}]
    (base / "jsons").mkdir(parents=True)
    (base / "jsons" / "R.json").write_text(json.dumps(doc))
    write_jpg(base / "R.jpg", np.zeros((60, 80)))
    reader = CovidRuralReader(tmp_path)
    assert reader.records() == []
    (problem,) = reader.problems
    assert problem.source == "jsons/R.json:shape 1" and "shape_type 'circle'" in problem.message
    doc["shapes"] = doc["shapes"][:1]
    (base / "jsons" / "R.json").write_text(json.dumps(doc))
    (rec,) = reader.records()
    assert reader.problems == [] and rec.regions == {"COVID-19": [Box(10, 5, 30, 40)]}
