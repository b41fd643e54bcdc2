"""xbench-convert for boxes and points: COCO results and the marks JSON become submissions by the stated rule.

The map rule is checked against a cell-by-cell brute force; the submissions validate and score with the
unchanged scorer; every kind of bad input is refused, one problem a line, exit 2, nothing written.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from xbench.schemas import ImagesWriter, read_submission, validate_submission, write_ground_truth
from xbench.schemas.cli import convert_main
from xbench.schemas.convert_boxes import Finding, Mark, finding_score, mark_map

CLASSES = ["Cardiomegaly", "Nodule/Mass", "Pneumothorax"]
N = 8
#: (height, width) of each case: non-square, portrait and landscape, so x and y cannot be swapped unnoticed
SIZES = [(400, 600), (512, 512), (300, 200), (1000, 800)] * 2
IDS = [f"case-{i:02d}" for i in range(N)]


@pytest.fixture
def stores(tmp_path):
    """images.zarr (phantom: IDS at SIZES) and a gt.zarr whose Nodule/Mass region is a known box per case."""
    images = tmp_path / "images.zarr"
    w = ImagesWriter(images, "phantom", case_ids=IDS, classes=CLASSES, image_size=8, cases_per_block=4)
    for b in w.blocks_todo():
        s, e = w.block_rows(b)
        w.write_block(b, np.zeros((e - s, 8, 8), np.uint8), np.asarray(SIZES[s:e], np.int32))
    w.finish()
    labels = np.zeros((N, 3), np.int8)
    labels[:, 1] = [1, 1, 1, 1, 0, 0, 0, 0]
    labels[:, 0] = [1, 0] * 4
    pairs = np.argwhere(labels == 1).astype(np.int32)
    grid = (16, 16)
    masks = np.zeros((len(pairs), *grid), bool)
    for k, (i, c) in enumerate(pairs):
        masks[k, 4:8, 2:6] = True  # rows 4..7, cols 2..5 of the grid: a box in original pixels below
    gt = tmp_path / "gt.zarr"
    write_ground_truth(gt, "phantom", case_ids=IDS, classes=CLASSES, labels=labels, region_index=pairs,
                       region_mask=masks, orig_size=np.asarray(SIZES, np.int32), grid=grid)
    return images, gt


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        convert_main([str(a) for a in args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


# -- the rule, by brute force ----------------------------------------------------------------------------
def brute_map(marks, size, grid):
    """Cell by cell: a cell takes every box whose (clipped) area holds its centre, and every point inside it;
    a box holding no centre goes to the cell of its clipped centre."""
    h0, w0 = size
    out = np.zeros((grid, grid))
    for m in marks:  # in exact rationals (issue 43: float products can round across a cell centre or edge)
        if len(m.coords) == 2:
            x, y = (Fraction(v) for v in m.coords)
            r = min(math.floor(y * grid / h0), grid - 1)
            c = min(math.floor(x * grid / w0), grid - 1)
            out[r, c] += m.score
            continue
        x, y, w, h = (Fraction(v) for v in m.coords)
        x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, w0), min(y + h, h0)
        # a cell is in when both of its centre's coordinates are: each axis checked centre by centre
        rows = [r for r in range(grid) if y0 <= Fraction(2 * r + 1, 2) * h0 / grid < y1]
        cols = [c for c in range(grid) if x0 <= Fraction(2 * c + 1, 2) * w0 / grid < x1]
        out[np.ix_(rows, cols)] += m.score
        if not (rows and cols):
            r = min(math.floor((y0 + y1) / 2 * grid / h0), grid - 1)
            c = min(math.floor((x0 + x1) / 2 * grid / w0), grid - 1)
            out[r, c] += m.score
    return out


def test_mark_map_matches_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(60):
        size = (int(rng.integers(20, 700)), int(rng.integers(20, 700)))
        grid = int(rng.choice([1, 3, 7, 16, 64]))
        marks = []
        for _ in range(int(rng.integers(0, 6))):
            if rng.random() < 0.3:
                marks.append(Mark((rng.uniform(0, size[1]), rng.uniform(0, size[0])), float(rng.random())))
            else:  # some tiny, some running off the image on any side
                w, h = rng.uniform(0.1, size[1] * 0.8), rng.uniform(0.1, size[0] * 0.8)
                marks.append(Mark((rng.uniform(-w / 2, size[1] - 0.05), rng.uniform(-h / 2, size[0] - 0.05), w, h),
                                  float(rng.random())))
        np.testing.assert_allclose(mark_map(marks, size, grid), brute_map(marks, size, grid), err_msg=f"trial {trial}")


@pytest.mark.parametrize("n, grid", [(296, 36), (1088, 224), (3648, 224)])
def test_mark_map_on_exact_centres_and_edges(n, grid):
    # issue 43: sizes where a cell centre (2k+1) n / (2 grid) is a whole pixel that the float product
    # (k + 0.5) * (n / grid) misses; boxes start or end exactly on it, or a float step away, or at a sum
    # x + w that rounds in floats; points on exact cell edges k n / grid and a float step either side
    rng = np.random.default_rng(43)
    ks = [k for k in range(grid) if ((2 * k + 1) * n) % (2 * grid) == 0]
    marks = []
    for k in ks[:4]:
        c = (2 * k + 1) * n // (2 * grid)
        for v in (float(c), math.nextafter(c, 0), math.nextafter(c, n)):
            marks.append(Mark((1.0, v, 3.0, 40.0), 0.5))
            marks.append(Mark((v, 1.0, 40.0, 3.0), 0.25))
            marks.append(Mark((0.1, 0.3, v - 0.1, v - 0.3), 0.125))  # x + w, y + h: float sums near c
        e = float(Fraction(k * n, grid))
        for v in (e, math.nextafter(e, 0), math.nextafter(e, n)):
            marks.append(Mark((v, float(rng.uniform(0, n))), 1.0))
    for m in marks:
        np.testing.assert_array_equal(mark_map([m], (n, n), grid), brute_map([m], (n, n), grid), err_msg=str(m))


def test_mark_map_edges_and_sums():
    # a 64 x 64 image on a 4 x 4 grid: cell centres at 8, 24, 40, 56
    full = mark_map([Mark((8, 8, 16, 16), 0.5)], (64, 64), 4)  # holds centres 8 and 16? only 8 (24 is excluded)
    assert full[0, 0] == 0.5 and full.sum() == 0.5
    both = mark_map([Mark((8, 8, 16.001, 16.001), 0.5), Mark((0, 0, 64, 64), 0.25)], (64, 64), 4)
    assert both[1, 1] == 0.75 and both[0, 0] == 0.75 and both[3, 3] == 0.25  # overlapping boxes sum
    tiny = mark_map([Mark((30, 50, 1, 1), 0.9)], (64, 64), 4)  # between centres: its centre's cell
    assert tiny[3, 1] == 0.9 and tiny.sum() == pytest.approx(0.9)
    edge = mark_map([Mark((64, 64), 1.0)], (64, 64), 4)  # a point on the far corner: the last cell
    assert edge[3, 3] == 1.0
    assert not mark_map([], (64, 64), 4).any()


def test_finding_score_rule():
    assert finding_score(None) == 0.0
    assert finding_score(Finding([])) == 0.0
    assert finding_score(Finding([Mark((1, 1, 2, 2), 0.2), Mark((3, 3), 0.7)])) == 0.7
    assert finding_score(Finding([Mark((1, 1, 2, 2), 0.2)], score=0.1)) == 0.1  # an explicit score wins


# -- COCO results ------------------------------------------------------------------------------------------
def coco_files(tmp_path):
    """A detector's COCO results (exact format: a JSON list, integer ids, float bbox and score), the COCO
    dataset JSON naming its images, and a TOML mapping; returns the paths and the results list."""
    results = []
    for i, (h, w) in enumerate(SIZES):
        # on the gt grid (16 x 16) rows 4..7 and cols 2..5 = y in [h/4, h/2), x in [w/8, 3w/8)
        results.append({"image_id": 100 + i, "category_id": 2, "bbox": [w / 8 + 1, h / 4 + 1, w / 4 - 2, h / 4 - 2],
                        "score": 0.9 if i < 4 else 0.2})
        results.append({"image_id": 100 + i, "category_id": 7, "bbox": [0.0, 0.0, w / 2, h / 2], "score": 0.3})
    results.append({"image_id": 101, "category_id": 1, "bbox": [-20.0, -20.0, 100.0, 80.0], "score": 0.6})
    coco = {"images": [{"id": 100 + i, "file_name": f"train/{c}.png", "height": h, "width": w}
                       for i, (c, (h, w)) in enumerate(zip(IDS, SIZES))],
            "categories": [{"id": 1, "name": "cardiomegaly"}, {"id": 2, "name": "nodule"}, {"id": 7, "name": "tube"}]}
    (tmp_path / "detections.json").write_text(json.dumps(results))
    (tmp_path / "instances.json").write_text(json.dumps(coco))
    (tmp_path / "categories.toml").write_text('model = "detr-cxr"\n[categories]\nnodule = "Nodule/Mass"\n7 = ""\n')
    return tmp_path / "detections.json", tmp_path / "instances.json", tmp_path / "categories.toml", results


def test_coco_results_become_a_submission_that_validates_and_scores(tmp_path, stores, capsys):
    images, gt = stores
    det, inst, mapping, results = coco_files(tmp_path)
    out = tmp_path / "boxes.zarr"
    code, _, err = run(capsys, det, "--images", images, "--coco-images", inst, "--mapping", mapping, "--grid", "32",
                       "--out", out, "--gt", gt, "-q")
    assert code == 0, err
    assert validate_submission(out, gt) == []
    sub = read_submission(out)
    assert sub.attrs["model"] == "detr-cxr" and sub.attrs["method"] == "boxes"
    import hashlib

    assert sub.attrs["source"]["sha256"] == hashlib.sha256(det.read_bytes()).hexdigest()
    assert sub.attrs["source"]["format"] == "coco-results"
    ds = sub.datasets["phantom"]
    assert ds.score_kind == "probability"
    assert list(ds.unsupported) == ["Pneumothorax"]  # no category maps to it
    maps = np.asarray(ds.saliency[...], np.float64)
    row = {str(c): i for i, c in enumerate(ds.case_id)}
    for i, case in enumerate(IDS):
        r = row[case]
        for j, cls in enumerate(ds.classes):
            mine = [x for x in results if x["image_id"] == 100 + i and
                    {1: "Cardiomegaly", 2: "Nodule/Mass"}.get(x["category_id"]) == cls]
            marks = [Mark(tuple(x["bbox"]), x["score"]) for x in mine]
            np.testing.assert_allclose(maps[r, j], brute_map(marks, SIZES[i], 32), rtol=1e-6)
            assert ds.scores[r, j] == pytest.approx(max((x["score"] for x in mine), default=0.0))
    # the unchanged scorer: every Nodule/Mass box sits in its region, so the pointing game is 1
    from xbench.score.cli import main as score_main

    with pytest.raises(SystemExit) as exc:
        score_main([str(out), "--gt", str(gt), "--out", str(tmp_path / "scores"), "--bootstrap", "0", "-q"])
    assert exc.value.code == 0, capsys.readouterr().err
    metrics = json.loads((tmp_path / "scores" / "metrics.json").read_text())
    nodule = metrics["datasets"]["phantom"]["classes"]["Nodule/Mass"]
    assert nodule["pointing_game"] == 1.0
    assert nodule["auroc"] == 1.0  # 0.9 on the four positives, 0.2 on the negatives
    assert metrics["xbench"]["submission"]["method"] == "boxes"


def test_coco_image_ids_can_be_the_case_ids(tmp_path, stores, capsys):
    images, _ = stores
    det = tmp_path / "d.json"
    det.write_text(json.dumps([{"image_id": "case-03", "category_id": 5, "bbox": [10, 10, 50, 50], "score": 0.5}]))
    (tmp_path / "m.json").write_text(json.dumps({"categories": {"5": "Pneumothorax"}}))
    code, _, err = run(capsys, det, "--images", images, "--mapping", tmp_path / "m.json", "--out", tmp_path / "s.zarr", "-q")
    assert code == 0, err
    ds = read_submission(tmp_path / "s.zarr").datasets["phantom"]
    assert list(ds.unsupported) == ["Cardiomegaly", "Nodule/Mass"]
    assert ds.scores[3, 2] == 0.5 and float(np.asarray(ds.saliency[3, 2]).max()) == 0.5
    assert not np.asarray(ds.saliency[2]).any()  # a case with no result: constant zero maps, score 0
    assert not ds.scores[2].any()


def test_coco_bad_input_one_line_per_problem(tmp_path, stores, capsys):
    images, _ = stores
    det = tmp_path / "bad.json"
    det.write_text(json.dumps([
        {"image_id": "case-00", "category_id": 9, "bbox": [1, 1, 5, 5], "score": 0.5},       # unknown category
        {"image_id": "case-00", "category_id": 9, "bbox": [1, 1, 5, 5], "score": 0.5},       # (counted, one line)
        {"image_id": "nope", "category_id": 5, "bbox": [1, 1, 5, 5], "score": 0.5},          # not in the store
        {"image_id": "case-01", "category_id": 5, "bbox": [1, 1, -5, 5], "score": 0.5},      # negative width
        {"image_id": ["case-01"], "category_id": 5, "bbox": [1, 1, 5, 5], "score": 0.5},    # an id that is a list
        {"image_id": "case-01", "category_id": 5, "bbox": [700, 1, 5, 5], "score": 0.5},     # outside 600 wide? no: 512
        {"image_id": "case-00", "category_id": 5, "bbox": [1, 1, 5, 5], "score": 1.5},       # score > 1
        {"image_id": "case-00", "category_id": 5, "bbox": [1, 1, 5], "score": 0.5},          # 3 numbers
    ]))
    (tmp_path / "m.toml").write_text('[categories]\n5 = "Pneumothorax"\n')
    out = tmp_path / "s.zarr"
    code, _, err = run(capsys, det, "--images", images, "--mapping", tmp_path / "m.toml", "--out", out, "-q")
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err
    expect = ["category 9 (2 result(s)) maps to no finding", "image_id nope (case 'nope') is not in",
              "width or height that is not positive", "image_id must be an integer or a string", "wholly outside the 512x512 image",
              "score 1.5 is outside [0, 1]", "bbox must be [x, y, w, h]"]
    for e in expect:
        assert sum(e in ln for ln in lines) == 1, (e, err)
    assert not out.exists() and not list(tmp_path.glob(".s.zarr*"))


def test_json_source_needs_images_and_others_refuse_box_options(tmp_path, stores, capsys):
    images, _ = stores
    det, _, mapping, _ = coco_files(tmp_path)
    code, _, err = run(capsys, det, "--out", tmp_path / "s.zarr")
    assert code == 2 and "need --images" in err
    (tmp_path / "npz").mkdir()
    code, _, err = run(capsys, tmp_path / "npz", "--out", tmp_path / "s.zarr", "--mapping", mapping)
    assert code == 2 and "--mapping: only for boxes and points" in err
    code, _, err = run(capsys, det, "--images", images, "--mapping", mapping, "--out", tmp_path / "s.zarr", "--dataset", "siim_acr")
    assert code == 2 and "'siim_acr' is not in the images store" in err


# -- the marks JSON ------------------------------------------------------------------------------------------
def marks_doc(normalised: bool):
    def px(v, i, axis):  # axis 0 = x (width), 1 = y (height)
        h, w = SIZES[i]
        return v / (w if axis == 0 else h) if normalised else v

    doc = {"model": "maira-2", "coordinates": "normalised" if normalised else "pixels", "unsupported": ["pneumothorax"],
           "datasets": {"phantom": {}}}
    for i in range(4):
        h, w = SIZES[i]
        doc["datasets"]["phantom"][IDS[i]] = {
            "nodule": {"points": [[px(w / 4, i, 0), px(3 * h / 8, i, 1), 0.8]]},
            "Cardiomegaly": {"boxes": [[px(w / 4, i, 0), px(h / 4, i, 1), px(w / 2, i, 0), px(h / 2, i, 1)]], "score": 0.4},
        }
    return doc


@pytest.mark.parametrize("normalised", [False, True])
def test_marks_json_points_and_boxes(tmp_path, stores, capsys, normalised):
    images, gt = stores
    src = tmp_path / "answers.json"
    src.write_text(json.dumps(marks_doc(normalised)))
    (tmp_path / "m.json").write_text(json.dumps({"categories": {"nodule": "Nodule/Mass"}}))
    out = tmp_path / "marks.zarr"
    code, _, err = run(capsys, src, "--images", images, "--mapping", tmp_path / "m.json", "--out", out, "--gt", gt,
                       "--grid", "16", "-q")
    assert code == 0, err
    sub = read_submission(out)
    assert sub.attrs["method"] == "boxes" and sub.attrs["model"] == "maira-2"
    ds = sub.datasets["phantom"]
    assert list(ds.unsupported) == ["Pneumothorax"]
    maps = np.asarray(ds.saliency[...], np.float64)
    for i in range(4):
        h, w = SIZES[i]
        peak = np.zeros((16, 16))
        peak[6, 4] = 0.8  # y = 3h/8 -> row 6, x = w/4 -> col 4
        np.testing.assert_allclose(maps[i, 1], peak, atol=1e-7)
        np.testing.assert_allclose(maps[i, 0], brute_map([Mark((w / 4, h / 4, w / 2, h / 2), 1.0)], SIZES[i], 16), atol=1e-7)
        assert ds.scores[i, 0] == pytest.approx(0.4) and ds.scores[i, 1] == pytest.approx(0.8)
    assert not maps[4:].any() and not np.asarray(ds.scores[4:]).any()


def test_marks_json_points_only_is_method_points(tmp_path, stores, capsys):
    images, _ = stores
    src = tmp_path / "p.json"
    src.write_text(json.dumps({"datasets": {"phantom": {"case-01": {"Pneumothorax": {"points": [[10, 20]]}}}}}))
    code, _, err = run(capsys, src, "--images", images, "--out", tmp_path / "p.zarr", "-q")
    assert code == 0, err
    sub = read_submission(tmp_path / "p.zarr")
    assert sub.attrs["method"] == "points" and sub.attrs["model"] == "p"
    assert sub.datasets["phantom"].scores[1, 2] == 1.0  # a mark without a score counts 1


def test_marks_json_bad_input(tmp_path, stores, capsys):
    images, _ = stores
    src = tmp_path / "bad.json"
    src.write_text(json.dumps({"coordinates": "normalised", "datasets": {
        "phantom": {"case-00": {"Lung cancer": {"points": [[0.5, 0.5]]},
                                "Pneumothorax": {"points": [[1.5, 0.5]], "boxes": [[0.1, 0.1, 0.2]]},
                                "Cardiomegaly": {"score": 2}},
                    "ghost": {"Pneumothorax": {}}},
        "vindr_cxr": {}}}))
    code, _, err = run(capsys, src, "--images", images, "--out", tmp_path / "s.zarr", "-q")
    assert code == 2 and "Traceback" not in err
    for e in ["Lung cancer: names no finding of phantom", "points[0]: normalised coordinates must lie in [0, 1]",
              "boxes[0]: must be 4 numbers", "Cardiomegaly/score: must be a probability", "case 'ghost' is not in",
              "vindr_cxr: is not a dataset of the images store"]:
        assert e in err, (e, err)
    assert not (tmp_path / "s.zarr").exists()


def test_output_may_not_go_into_the_source_folder_nor_exist(tmp_path, stores, capsys):
    images, _ = stores
    det, inst, mapping, _ = coco_files(tmp_path)
    args = [det, "--images", images, "--coco-images", inst, "--mapping", mapping, "-q"]
    assert run(capsys, *args, "--out", tmp_path / "a.zarr")[0] == 0
    code, _, err = run(capsys, *args, "--out", tmp_path / "a.zarr")
    assert code == 2 and "already exists" in err
    assert not math.isnan(float(read_submission(tmp_path / "a.zarr").datasets["phantom"].scores[0, 1]))


def test_the_report_labels_boxes(tmp_path):
    from xbench.score.report import load_result

    d = tmp_path / "scores"
    d.mkdir()
    (d / "metrics.json").write_text(json.dumps({"xbench": {"schema": 1, "submission": {"model": "detr", "method": "boxes"}},
                                                "datasets": {}}))
    assert load_result(d).name == "detr (boxes)"
