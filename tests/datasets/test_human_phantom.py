"""``xbench human phantom``: simulated second and third readers of the phantom, so that the human ceiling exists
on the built-in set.

Checked here: the readers are deterministic and leave the phantom's cases alone; each reading differs from the
truth exactly as the stated model says (a brute-force per-pixel transform of the true region, miss and
false-mark rates within binomial bounds, the shift and scale spreads); the ceiling equals a brute-force
computation of the contract's metrics from the readers' masks (the brute force of test_human.py); bad inputs
exit 2 with nothing written."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from test_human import (GRID, KEYS, _class_values, _mean, _metrics, _prepare, _reader_map, _run,
                        reader_as_model_vs_reading)

from xbench import cli
from xbench.extract.datasets import phantom as ph
from xbench.extract.datasets.base import Mask
from xbench.extract.datasets.phantom import PHANTOM_CLASSES, PhantomReader, draw_case, draw_reading, render_finding
from xbench.schemas.ground_truth import read_ground_truth

SIZE = 64


def _binomial_ok(k: int, n: int, p: float, z: float = 4.5) -> bool:
    """k successes of n within z standard deviations of n * p (a test that fails by chance about never)."""
    return abs(k - n * p) <= z * math.sqrt(n * p * (1 - p)) + 1


def _brute_jitter(mask: np.ndarray, shift, scale) -> np.ndarray:
    """The model's drawn region, pixel by pixel: p is set when the pixel holding c + (p - c - shift) / scale is,
    c the true region's centroid (pixel centres), nothing outside the image."""
    h, w = mask.shape
    pts = [(y + 0.5, x + 0.5) for y in range(h) for x in range(w) if mask[y, x]]
    cy, cx = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    out = np.zeros_like(mask)
    for y in range(h):
        for x in range(w):
            sy = math.floor(cy + (y + 0.5 - cy - shift[1]) / scale)
            sx = math.floor(cx + (x + 0.5 - cx - shift[0]) / scale)
            out[y, x] = 0 <= sy < h and 0 <= sx < w and bool(mask[sy, sx])
    return out


def _brute_point(mask: np.ndarray) -> tuple[float, float]:
    pts = [(y, x) for y in range(mask.shape[0]) for x in range(mask.shape[1]) if mask[y, x]]
    cy = sum(y + 0.5 for y, _ in pts) / len(pts)
    cx = sum(x + 0.5 for _, x in pts) / len(pts)
    best = min(pts, key=lambda p: ((p[0] + 0.5 - cy) ** 2 + (p[1] + 0.5 - cx) ** 2, p))
    return best[1] + 0.5, best[0] + 0.5


def test_readers_are_deterministic_and_their_own():
    a = draw_reading(0, "test", 7, 1, SIZE)
    b = draw_reading(0, "test", 7, 1, SIZE)
    assert a.keys() == b.keys() == set(PHANTOM_CLASSES)
    for c in PHANTOM_CLASSES:
        assert (a[c].kind, a[c].shift, a[c].scale, a[c].point) == (b[c].kind, b[c].shift, b[c].scale, b[c].point)
        assert (a[c].mask is None and b[c].mask is None) or np.array_equal(a[c].mask, b[c].mask)
    # another reader, case, seed or split draws other numbers
    for other in (draw_reading(0, "test", 7, 2, SIZE), draw_reading(0, "test", 8, 1, SIZE),
                  draw_reading(1, "test", 7, 1, SIZE), draw_reading(0, "val", 7, 1, SIZE)):
        assert [other[c].shift for c in PHANTOM_CLASSES] != [a[c].shift for c in PHANTOM_CLASSES]
    # drawing readings consumes nothing of the case's own stream: the case is the one the stores hold
    assert draw_case(0, "test", 7) == draw_case(0, "test", 7)
    assert PhantomReader(None, n_cases=3).describe() == {"split": "test", "n_cases": 3, "seed": 0, "size": 256}


def test_readings_differ_from_the_truth_as_the_model_says():
    n_cases, readers = 300, 2
    kinds = {c: {"drawn": 0, "missed": 0, "false": 0, "none": 0} for c in PHANTOM_CLASSES}
    shifts, log_scales, brute_checked = [], [], 0
    for i in range(n_cases):
        case = draw_case(0, "test", i)
        for r in range(1, readers + 1):
            for c, m in draw_reading(0, "test", i, r, SIZE).items():
                kinds[c][m.kind] += 1
                assert (m.kind in ("drawn", "missed")) == (c in case.findings)
                assert (m.mask is None) == (m.kind in ("missed", "none")) and (m.point is None) == (m.mask is None)
                lo, hi = ph.READER_SCALE_RANGE
                assert lo <= m.scale <= hi
                shifts.extend(v / SIZE for v in m.shift)
                log_scales.append(math.log(m.scale))
                if m.mask is None:
                    continue
                # the salient point: the region's pixel nearest its centroid, so always inside it
                x, y = m.point
                assert m.mask[int(y), int(x)]
                if m.kind == "drawn":
                    truth = render_finding(case, SIZE, c)
                    if brute_checked < 60:  # the per-pixel brute force is slow in Python: a sample of 60
                        assert np.array_equal(m.mask, _brute_jitter(truth, m.shift, m.scale)), (i, r, c)
                        assert m.point == _brute_point(m.mask)
                        brute_checked += 1
                    # the area scales by about scale^2 (nearest neighbour: up to a pixel ring off; cut at the edge)
                    ratio = m.mask.sum() / truth.sum()
                    assert ratio <= m.scale ** 2 * 1.6 + 0.3
                elif c == "Cardiomegaly":  # an overcalled heart is the normal silhouette
                    assert np.array_equal(m.mask, ph._heart(case, SIZE))
                else:  # a round patch of radius 3-7 % of the width
                    area = m.mask.sum() / SIZE ** 2
                    assert math.pi * 0.03 ** 2 * 0.5 <= area <= math.pi * 0.07 ** 2 * 1.5
    assert brute_checked == 60
    for c in PHANTOM_CLASSES:
        k = kinds[c]
        present, absent = k["drawn"] + k["missed"], k["false"] + k["none"]
        assert _binomial_ok(k["missed"], present, ph.READER_MISS[c]), (c, k)
        assert _binomial_ok(k["false"], absent, ph.READER_FALSE_MARK), (c, k)
    # the spreads: N(0, 0.02) per axis, log-scale N(0, 0.15) clipped (the clip is 2.2 sd out: barely changes it)
    s, ls = np.asarray(shifts), np.asarray(log_scales)
    assert abs(s.mean()) < 4.5 * ph.READER_SHIFT_SD / math.sqrt(s.size)
    assert s.std() == pytest.approx(ph.READER_SHIFT_SD, rel=0.06)
    assert ls.std() == pytest.approx(ph.READER_SCALE_SD, rel=0.08)


@pytest.fixture(scope="module")
def phantom_data(tmp_path_factory):
    base = tmp_path_factory.mktemp("phantom_human")
    _prepare(PhantomReader(None, n_cases=14, seed=3, size=SIZE), base / "data")
    return base


def test_phantom_ceiling_equals_brute_force(phantom_data, tmp_path):
    base = phantom_data
    out = tmp_path / "human"
    _run(["human", "phantom", "--images", str(base / "data/images.zarr"), "--gt", str(base / "data/gt.zarr"),
          "--out", str(out), "--readers", "2", "--bootstrap", "20", "-q"])
    doc = json.loads((out / "human.json").read_text())
    entry = doc["datasets"]["phantom"]
    assert entry["readers"] == ["R1", "R2"]
    assert doc["xbench"]["phantom"]["seed"] == 3 and doc["xbench"]["phantom"]["readers"] == 2
    gt = read_ground_truth(base / "data/gt.zarr").datasets["phantom"]
    regions = {(str(gt.case_id[i]), gt.classes[c]): np.asarray(gt.region_mask[k])
               for k, (i, c) in enumerate(np.asarray(gt.region_index))}
    per: dict = {}  # (reader, class) -> [pair metrics]
    for r in (1, 2):
        for (case, cls), region in regions.items():
            mark = draw_reading(3, "test", int(case.rsplit("-", 1)[1]), r, SIZE)[cls]
            m = (np.zeros(GRID) if mark.mask is None
                 else _reader_map([Mask(load=lambda: mark.mask)], (SIZE, SIZE), mark.point))
            # the ceiling's pointing game is the map's peak (the salient point's cell when it lies in the region;
            # unmarked: a constant map, a miss), as the reader scored as a model
            per.setdefault((r, cls), []).append(_metrics(m, region))
    classes = sorted({c for _, c in per})
    per_class = {c: {k: _mean(_class_values(p)[k] for (r, cc), p in per.items() if cc == c) for k in KEYS}
                 for c in classes}
    assert {c for c, e in entry["classes"].items() if e["n_pairs"]} == set(classes)
    for c in classes:
        for k in KEYS:
            assert entry["classes"][c][k] == pytest.approx(per_class[c][k], rel=1e-12), (c, k)
    for k in KEYS:
        assert entry["summary"][k] == pytest.approx(_mean(per_class[c][k] for c in classes), rel=1e-12)
    # the readers are not the truth: below 100 %, and not all alike
    assert entry["summary"]["dice_best"] < 1.0
    assert entry["per_reader"]["R1"]["dice_best"] != entry["per_reader"]["R2"]["dice_best"]
    # a model scored with --human gets the section; the reader's own submission is 100 % of a one-reader ceiling
    one = tmp_path / "one"
    _run(["human", "phantom", "--images", str(base / "data/images.zarr"), "--gt", str(base / "data/gt.zarr"),
          "--out", str(one), "--readers", "1", "--bootstrap", "0", "-q"])
    _run(["score", str(one / "readers/R1/submission.zarr"), "--gt", str(base / "data/gt.zarr"), "--out",
          str(tmp_path / "res"), "--human", str(one), "--bootstrap", "10", "-q"])
    block = json.loads((tmp_path / "res/metrics.json").read_text())["human"]["datasets"]["phantom"]
    for k in KEYS:  # the pointing game too: the map's peak is the reader's salient point, as the reading's
        assert block["summary"][k]["percent_of_human"] == pytest.approx(100.0), k
    for (r, c), (as_model, reading) in reader_as_model_vs_reading(out, "phantom").items():  # both readers
        assert as_model == pytest.approx(reading, rel=1e-12), (r, c)
    # the same options draw the same readers: the folder is reproducible
    again = tmp_path / "again"
    _run(["human", "phantom", "--images", str(base / "data/images.zarr"), "--gt", str(base / "data/gt.zarr"),
          "--out", str(again), "--readers", "2", "--bootstrap", "20", "-q"])
    assert json.loads((again / "human.json").read_text()) == doc


def _edit_attrs(store: Path, fn) -> None:
    meta = store / "phantom" / "zarr.json"
    doc = json.loads(meta.read_text())
    fn(doc["attributes"])
    meta.write_text(json.dumps(doc))


@pytest.mark.parametrize("name", ["no options", "huge size", "another seed", "option misuse"])
def test_bad_phantom_inputs_exit_2(phantom_data, tmp_path, name):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(phantom_data / "data", data)
    args = ["human", "phantom", "--images", str(data / "images.zarr"), "--gt", str(data / "gt.zarr"),
            "--out", str(tmp_path / "out"), "--bootstrap", "0", "-q"]
    expect = {"no options": "does not record the phantom's options", "huge size": "does not record",
              "another seed": "another store's ground truth", "option misuse": "--root"}[name]
    if name == "no options":
        _edit_attrs(data / "images.zarr", lambda a: a.pop("reader"))
    elif name == "huge size":
        _edit_attrs(data / "images.zarr", lambda a: a["reader"].update(size=10**12))
    elif name == "another seed":
        _edit_attrs(data / "images.zarr", lambda a: a["reader"].update(seed=4))
    else:
        args += ["--root", str(tmp_path)]
    res = CliRunner().invoke(cli.main, args)
    assert res.exit_code == 2, res.output
    assert expect in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


def test_root_and_readers_belong_to_their_datasets(phantom_data, tmp_path):
    base = phantom_data
    res = CliRunner().invoke(cli.main, ["human", "chexlocalize", "--images", str(base / "data/images.zarr"),
                                        "--gt", str(base / "data/gt.zarr"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--root: required" in res.output
    res = CliRunner().invoke(cli.main, ["human", "vindr_cxr", "--root", str(tmp_path), "--images",
                                        str(base / "data/images.zarr"), "--out", str(tmp_path / "o"), "--readers", "2"])
    assert res.exit_code == 2 and "--readers" in res.output
    res = CliRunner().invoke(cli.main, ["human", "phantom", "--images", str(base / "data/images.zarr"),
                                        "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--gt" in res.output
    assert not (tmp_path / "o").exists()


def test_a_salient_point_outside_its_marks_cells_points_where_the_map_does():
    """A thin crescent holds its salient point in a native pixel whose grid cell the rasterised region leaves out
    (about 2 % of the phantom's marks): the reading's hit is the map's peak (the region's), not the point's, so the
    reader scored as a model equals its reading; CheXlocalize's rule would take the point."""
    from xbench.extract.datasets.base import Mask as M
    from xbench.extract.human import reader_map, reading_rows
    from xbench.extract.human_marks import Mark
    from xbench.schemas.pointing import peak_cell

    size, grid = (8, 8), (4, 4)  # 2 x 2 native pixels a cell; a cell is in the region when its centre pixel is
    mask = np.zeros(size, bool)
    mask[0:4, 1] = True  # cells (0, 0), (1, 0) hold centre pixels (1, 1) and (3, 1): in the mark
    mask[4, 0] = True  # the crescent's tip (8-connected to (3, 1)), in cell (2, 0), whose centre pixel (5, 1) is not
    point = (0.5, 4.5)  # the tip's centre: in the mark, in cell (2, 0), which the rasterised region leaves out
    mark = Mark(shapes=[M(load=lambda: mask)], points=[point])
    truth = np.zeros(grid, bool)
    truth[2, 0] = True  # the truth is the point's cell only
    region = reader_map(mark, size, grid)  # the region at MASK_LEVEL; the point outside it is left out
    assert region[2, 0] == 0 and region.max() < 1 and peak_cell(region) != (2, 0)
    for points_rule, want in ((False, 0.0), (True, 1.0)):
        rows = reading_rows(["c"], ["Nodule"], {"c": {"Nodule": mark}}, {"c": size}, grid, lambda c, k: truth,
                            points_rule=points_rule)
        assert rows["hit"].tolist() == [want], points_rule
    assert _metrics(region, truth)["hit"] == 0.0  # the map scored as a model: the region's peak, a miss
