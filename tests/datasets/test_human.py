"""``xbench human``: the human ceiling read from files in their published formats (fixtures written from the
CheXlocalize README and eval code, and from VinDr-CXR's annotations_train.csv with its rad_id column), scored
like any model, and checked against a brute-force computation of the contract's metrics from the masks.

Also: ``xbench-score --human`` adds the section only when asked (without it metrics.json is unchanged), the tables
and ``xbench compare`` show the human row, and every hostile input file exits 2 with one line per problem."""
from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import fixtures as F
from forked import run_forked

pytest.importorskip("pycocotools")
pytest.importorskip("pydicom")

from xbench import cli  # noqa: E402
from xbench.extract.datasets.base import Box, Mask  # noqa: E402
from xbench.extract.datasets.rasterise import rasterise_region  # noqa: E402
from xbench.schemas.ground_truth import read_ground_truth  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "score"))
import score_reference as ref  # noqa: E402  (the scorer tests' oracles: the pointing game's peak in fractions)

GRID = (12, 16)
P1, P2 = "patient64541_study1_view1_frontal", "patient64542_study1_view1_frontal"
KEYS = ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best")
LEVEL = 1.0 - 2.0 ** -10


def hb_cardio(h=48, w=64) -> np.ndarray:
    """The human benchmark's Cardiomegaly: shifted against the ground truth's block."""
    m = np.zeros((h, w), bool)
    m[24:44, 18:40] = True
    return m


def hb_opacity(h=48, w=64) -> np.ndarray:
    """The human benchmark's Airspace Opacity: only the first of the ground truth's two blobs, a bit larger."""
    m = np.zeros((h, w), bool)
    m[4:16, 2:14] = True
    return m


def write_chexlocalize_test(root: Path) -> dict:
    """CheXlocalize's test split (the one with a human benchmark) and the three hb files, in the published
    layouts: hb_segmentations_test.json as the ground truth's ({cxr_id: {pathology: {size, counts}}}, every
    pathology key present), hb_annotations_test.json ({cxr_id: {"img_size": [h, w], pathology: [polygons]}})
    and hb_salient_pt_test.json ({cxr_id: {pathology: [[x, y], ...]}})."""
    info = F.write_chexlocalize(root)
    (root / "CheXpert" / "val_labels.csv").rename(root / "CheXpert" / "test_labels.csv")
    (root / "CheXpert" / "val").rename(root / "CheXpert" / "test")
    (root / "CheXlocalize" / "gt_segmentations_val.json").rename(root / "CheXlocalize" / "gt_segmentations_test.json")
    zero = np.zeros((48, 64), bool)
    segs = {P1: {t: F.coco_rle({"Cardiomegaly": hb_cardio(), "Airspace Opacity": hb_opacity()}.get(t, zero))
                 for t in F.CHEXLOCALIZE_TASKS},
            # the reader missed P2's Edema and drew Support Devices instead (a false positive)
            P2: {t: F.coco_rle(hb_opacity() if t == "Support Devices" else zero) for t in F.CHEXLOCALIZE_TASKS}}
    (root / "CheXlocalize" / "hb_segmentations_test.json").write_text(json.dumps(segs))
    polys = {P1: {"img_size": [48, 64], "Cardiomegaly": [[[18, 24], [40, 24], [40, 44], [18, 44]]],
                  "Airspace Opacity": [[[2, 4], [14, 4], [14, 16], [2, 16]]]}}
    (root / "CheXlocalize" / "hb_annotations_test.json").write_text(json.dumps(polys))
    # a point for Cardiomegaly inside the ground truth; none for the opacity (its map's maximum is the
    # region's first cell in row-major order)
    pts = {P1: {"Cardiomegaly": [[30.5, 33.0], [5.0, 5.0]]}}
    (root / "CheXlocalize" / "hb_salient_pt_test.json").write_text(json.dumps(pts))
    return info


def _prepare(reader, out: Path) -> None:
    from xbench.extract.datasets.prepare import prepare_dataset

    prepare_dataset(reader, out, grid=GRID, image_size=32, workers=1, progress=False)


@pytest.fixture(scope="module")
def chex(tmp_path_factory):
    from xbench.extract.datasets.chexlocalize import CheXlocalizeReader

    base = tmp_path_factory.mktemp("chex")
    root = base / "CheXlocalize_download"
    root.mkdir()
    write_chexlocalize_test(root)
    _prepare(CheXlocalizeReader(root, split="test"), base / "data")
    return base, root


@pytest.fixture(scope="module")
def vindr(tmp_path_factory):
    from xbench.extract.datasets.vindr import VinDrCXRReader

    base = tmp_path_factory.mktemp("vindr")
    root = base / "vindr"
    root.mkdir()
    F.write_vindr(root)
    _prepare(VinDrCXRReader(root, split="train"), base / "data")
    return base, root


def _run(args, expect=0):
    res = CliRunner().invoke(cli.main, args, catch_exceptions=False)
    assert res.exit_code == expect, res.output
    return res


# -- brute force: the contract's metrics from a map and a region, cell by cell -------------------------------
def _metrics(map_: np.ndarray, region: np.ndarray) -> dict:
    """Pointing game (the map's peak: the contract's rule in exact fractions, score_reference.peak), and Dice / IoU
    at every tau_k, from the raw map (min-max normalised, >= tau)."""
    lo, hi = float(map_.min()), float(map_.max())
    norm = np.zeros_like(map_, dtype=np.float64) if hi == lo else (map_.astype(np.float64) - lo) / (hi - lo)
    hit = float(ref.hit_of(map_.astype(np.float64), region))
    dice, iou = [], []
    for k in range(101):
        b = norm >= k / 100
        inter = float((b & region).sum())
        dice.append(2 * inter / (b.sum() + region.sum()))
        iou.append(inter / (b | region).sum())
    return {"hit": hit, "dice": dice, "iou": iou}


def reader_as_model_vs_reading(out: Path, dataset: str) -> dict:
    """Per reader and class of a human folder: (the pointing game of the reader's map scored as a model, in its
    own ``metrics.json``; the reading's, ``reading.npz``, which the ceiling averages), for every class the truth
    has a region of. A reader scored as a model is at 100 % of its own ceiling when the two agree."""
    from xbench.score.sections.human.reading import load_reading

    entry = json.loads((out / "human.json").read_text())["datasets"][dataset]
    got = {}
    for r in entry["readers"]:
        own = json.loads((out / "readers" / r / "metrics.json").read_text())["datasets"][dataset]["classes"]
        z = load_reading(out / "readers" / r / "reading.npz")
        for c in sorted({str(c) for c in z.cls[z.gt]}):
            hits = z.hit[(z.cls == c) & z.gt]
            got[r, c] = (own[c]["pointing_game"], float(hits.mean()))
    assert got, "the fixture must give pairs"
    return got


def _class_values(pairs: list[dict]) -> dict:
    n = len(pairs)
    dice = [sum(p["dice"][k] for p in pairs) / n for k in range(101)]
    iou = [sum(p["iou"][k] for p in pairs) / n for k in range(101)]
    return {"pointing_game": sum(p["hit"] for p in pairs) / n, "dice_fixed": dice[50], "iou_fixed": iou[50],
            "dice_best": max(dice), "iou_best": max(iou)}


def _reader_map(shapes, size, point=None) -> np.ndarray:
    """The contract's reader map: the region at 1 - 2**-10, the salient point's cell 1 when it lies in the
    region (a point outside it is left out: every tau <= 0.99 sees exactly the region)."""
    m = np.zeros(GRID)
    if shapes:
        region = rasterise_region(shapes, size, GRID).mask
        m[region] = LEVEL
        if point is not None:
            cell = (int(point[1] * GRID[0] / size[0]), int(point[0] * GRID[1] / size[1]))
            if region[cell]:
                m[cell] = 1.0
    return m


def _point_hit(point, size, region) -> float:
    """CheXlocalize's hit of one salient point (x, y) on the grid: its cell lies in the truth's region."""
    if point is None:
        return 0.0
    return float(region[int(point[1] * GRID[0] / size[0]), int(point[0] * GRID[1] / size[1])])


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


@pytest.fixture(scope="module")
def chex_human(chex) -> Path:
    """The human folder of the CheXlocalize fixture (made once)."""
    base, root = chex
    out = base / "human"
    _run(["human", "chexlocalize", "--root", str(root), "--images", str(base / "data/images.zarr"),
          "--gt", str(base / "data/gt.zarr"), "--out", str(out), "--bootstrap", "20", "-q"])
    return out


def test_chexlocalize_human_benchmark_equals_brute_force(chex, chex_human):
    base, root = chex
    out = chex_human
    doc = json.loads((out / "human.json").read_text())
    entry = doc["datasets"]["chexlocalize"]
    assert entry["readers"] == ["hb"] and doc["xbench"]["kind"] == "human-ceiling"
    gt = read_ground_truth(base / "data/gt.zarr").datasets["chexlocalize"]
    masks = {(str(gt.case_id[i]), gt.classes[c]): np.asarray(gt.region_mask[k])
             for k, (i, c) in enumerate(np.asarray(gt.region_index))}
    size = (48, 64)
    point = {(P1, "Cardiomegaly"): (30.5, 33.0)}  # Lung opacity: a region and no salient point
    human = {(P1, "Cardiomegaly"): _reader_map([Mask(load=lambda: hb_cardio())], size, (30.5, 33.0)),
             (P1, "Lung opacity"): _reader_map([Mask(load=lambda: hb_opacity())], size)}
    ceiling, as_model = {}, {}
    for (case, cls), region in masks.items():
        m = human.get((case, cls), np.zeros(GRID))  # unmarked (P2's Edema): the constant map 0
        scored = _metrics(m, region)
        as_model.setdefault(cls, []).append(scored)
        # the ceiling's pointing game is CheXlocalize's: the salient point's hit, a miss without a point
        ceiling.setdefault(cls, []).append({**scored, "hit": _point_hit(point.get((case, cls)), size, region)})
    per_class = {c: _class_values(p) for c, p in ceiling.items()}
    assert set(per_class) == {"Cardiomegaly", "Lung opacity", "Edema"}
    for c, values in per_class.items():
        for k in KEYS:
            assert entry["classes"][c][k] == pytest.approx(values[k], rel=1e-12), (c, k)
    for k in KEYS:
        assert entry["summary"][k] == pytest.approx(_mean(v[k] for v in per_class.values()), rel=1e-12)
    assert per_class["Cardiomegaly"]["pointing_game"] == 1.0  # the salient point, not the mask's middle
    # the reader scored like any model (its own metrics.json: its map, the peak by the scorer's rule) agrees with
    # the brute force of its map, and with the ceiling wherever the map carries the reading: a salient point in
    # the region is the map's one maximum, an unmarked class a constant map (a miss both ways)
    own = json.loads((out / "readers/hb/metrics.json").read_text())["datasets"]["chexlocalize"]
    own_brute = {c: _class_values(p) for c, p in as_model.items()}
    for c in per_class:
        for k in KEYS:
            assert own["classes"][c][k] == pytest.approx(own_brute[c][k], rel=1e-12), (c, k)
            if k != "pointing_game" or c != "Lung opacity":
                assert own["classes"][c][k] == pytest.approx(entry["classes"][c][k], rel=1e-12), (c, k)
    # ... but not where CheXlocalize's rule and a map part: a region drawn without a salient point is a miss for
    # eval.py whatever the region, while a map always points somewhere in its region (here its middle, in the
    # truth's first blob); the contract's "Human ceilings" names the cases
    assert own["classes"]["Lung opacity"]["pointing_game"] == 1.0
    assert entry["classes"]["Lung opacity"]["pointing_game"] == 0.0
    for (r, c), (as_model, reading) in reader_as_model_vs_reading(out, "chexlocalize").items():
        if c != "Lung opacity":
            assert as_model == pytest.approx(reading, rel=1e-12), (r, c)
    # recognition: the reader's score is 1 where they marked the finding
    assert own["classes"]["Support devices"]["auroc"] is not None
    assert entry["per_reader"]["hb"]["auroc"] == own["summary"]["auroc"]


def test_chexlocalize_polygons_give_the_masks_values(chex, chex_human):
    base, root = chex
    out = base / "human_polygons"
    _run(["human", "chexlocalize", "--root", str(root), "--images", str(base / "data/images.zarr"),
          "--gt", str(base / "data/gt.zarr"), "--out", str(out), "--source", "annotations", "--bootstrap", "0", "-q"])
    seg = json.loads((base / "human/human.json").read_text())["datasets"]["chexlocalize"]["classes"]
    poly = json.loads((out / "human.json").read_text())["datasets"]["chexlocalize"]["classes"]
    # the polygons trace the same rectangles as the masks: on the 12x16 grid they rasterise alike
    for k in KEYS:
        assert poly["Cardiomegaly"][k] == pytest.approx(seg["Cardiomegaly"][k])


def _vindr_rows(root: Path):
    with open(root / "annotations/annotations_train.csv") as f:
        return list(csv.DictReader(f))


def _vindr_brute(root: Path, sizes: dict, rule: str) -> tuple[dict, dict]:
    """Each reader against the other readers of each image: per class the mean over readers of the reader's
    class mean; the dataset mean over classes."""
    from xbench.schemas.vocabulary import canonical

    marks: dict = {}
    for row in _vindr_rows(root):
        per = marks.setdefault(row["image_id"], {}).setdefault(row["rad_id"], {})
        if row["class_name"] != "No finding":
            box = Box(*(float(row[k]) for k in ("x_min", "y_min", "x_max", "y_max")))
            per.setdefault(canonical("vindr_cxr", row["class_name"]), []).append(box)
    pairs: dict = {}  # (reader, class) -> [metrics]
    for image, readers in marks.items():
        for r in readers:
            others = [o for o in readers if o != r]
            need = 1 if rule == "union" else len(others) // 2 + 1
            for cls in {c for o in others for c in readers[o]}:
                votes = np.zeros(GRID, int)
                for o in others:
                    if cls in readers[o]:
                        votes += rasterise_region(readers[o][cls], sizes[image], GRID).mask
                if sum(cls in readers[o] for o in others) < need or not (votes >= need).any():
                    continue
                m = _reader_map(readers[r].get(cls, []), sizes[image])
                pairs.setdefault((r, cls), []).append(_metrics(m, votes >= need))
    classes = sorted({c for _, c in pairs})
    per_class = {c: {k: _mean(_class_values(p)[k] for (r, cc), p in pairs.items() if cc == c) for k in KEYS}
                 for c in classes}
    summary = {k: _mean(per_class[c][k] for c in classes) for k in KEYS}
    return per_class, summary


@pytest.mark.parametrize("rule", ["union", "majority"])
def test_vindr_readers_against_each_other_equal_brute_force(vindr, rule):
    base, root = vindr
    out = base / f"human_{rule}"
    _run(["human", "vindr_cxr", "--root", str(root), "--split", "train", "--images", str(base / "data/images.zarr"),
          "--gt", str(base / "data/gt.zarr"), "--rule", rule, "--out", str(out), "--bootstrap", "0", "-q"])
    doc = json.loads((out / "human.json").read_text())
    entry = doc["datasets"]["vindr_cxr"]
    assert entry["readers"] == ["R1", "R2", "R3", "R4", "R5"]
    sizes = {i: (48, 64) for i in F.VINDR_IDS.values()}
    per_class, summary = _vindr_brute(root, sizes, rule)
    got = {c: e for c, e in entry["classes"].items() if e["n_pairs"]}
    assert set(got) == set(per_class)
    for c in per_class:
        for k in KEYS:
            assert got[c][k] == pytest.approx(per_class[c][k], rel=1e-12), (rule, c, k)
    for k in KEYS:
        assert entry["summary"][k] == pytest.approx(summary[k], rel=1e-12)
    assert (out / "readers/R1/gt.zarr").is_dir() and (out / "readers/R1/submission.zarr").is_dir()
    # each reader scored as a model points where its reading does: one peak rule (xbench.schemas.pointing)
    for (r, c), (as_model, reading) in reader_as_model_vs_reading(out, "vindr_cxr").items():
        assert as_model == pytest.approx(reading, rel=1e-12), (rule, r, c)


def test_score_with_human_adds_the_section_and_without_it_nothing(chex, chex_human, tmp_path):
    base, _ = chex
    human = chex_human
    sub = human / "readers/hb/submission.zarr"  # any submission: the reader's own scores 100 % of human
    plain, with_h = tmp_path / "plain", tmp_path / "with"
    _run(["score", str(sub), "--gt", str(base / "data/gt.zarr"), "--out", str(plain), "--bootstrap", "20", "-q"])
    _run(["score", str(sub), "--gt", str(base / "data/gt.zarr"), "--out", str(with_h), "--bootstrap", "20", "-q",
          "--human", str(human)])
    a = json.loads((plain / "metrics.json").read_text())
    b = json.loads((with_h / "metrics.json").read_text())
    assert "human" not in a and not (plain / "table_human.csv").exists()
    assert b["xbench"]["schema_minor"] == 6
    b_rest = {k: v for k, v in b.items() if k != "human"}
    b_rest["xbench"] = {k: v for k, v in b["xbench"].items() if k not in ("schema_minor", "inputs")}
    a_rest = dict(a, xbench={k: v for k, v in a["xbench"].items() if k not in ("schema_minor", "inputs")})
    assert a_rest == b_rest  # the section is added; nothing else changes
    s = b["human"]["datasets"]["chexlocalize"]["summary"]["dice_best"]
    assert s["percent_of_human"] == pytest.approx(100.0) and s["percentage_decrease"] == pytest.approx(0.0)
    assert s["paired"]["gap"] == pytest.approx(0.0) and s["paired"]["gap_ci95"] == [0.0, 0.0]
    md = (with_h / "table_human.md").read_text()
    assert "% of human" in md and "| chexlocalize | (mean) | dice_best |" in md
    res = _run(["compare", str(with_h), str(human), "--bootstrap", "20"])
    assert "| chexlocalize | (mean) | pointing_game |" in res.output
    res = _run(["compare", str(with_h), str(human), "--bootstrap", "20", "--json"])
    rows = {(r["dataset"], r["class"], r["metric"]): r for r in json.loads(res.output)["rows"]}
    for key, row in rows.items():
        if key[0] == "chexlocalize" and key[2] != "pointing_game":
            assert row["percent_of_human"] == pytest.approx(100.0), key
    # the pointing game parts on one class of three only: Lung opacity was drawn without a salient point,
    # CheXlocalize's miss, while the map points into the truth (the contract's "Human ceilings" names the cases
    # where one map cannot carry CheXlocalize's points rule); Cardiomegaly's point and Edema's miss agree
    pg = rows["chexlocalize", "(mean)", "pointing_game"]
    assert pg["model"] - pg["human"] == pytest.approx(1 / 3)
    # the page: a "human: ..." line and the rows, only for a result that carries the section
    _run(["report", str(with_h), str(human / "readers/hb"), "--out", str(tmp_path / "report"), "--bootstrap", "0", "-q"])
    page = (tmp_path / "report/index.html").read_text()
    assert "Human ceiling" in page and "human ceiling (chexlocalize, 1 reader(s)): pointing_game" in page
    assert "Radiologists' own annotations" in page  # CheXlocalize's readers are radiologists, not simulated
    _run(["report", str(plain), str(human / "readers/hb"), "--out", str(tmp_path / "report2"), "--bootstrap", "0", "-q"])
    assert "Human ceiling" not in (tmp_path / "report2/index.html").read_text()


# -- hostile input files ----------------------------------------------------------------------------------
def _hb(root: Path) -> Path:
    return root / "CheXlocalize" / "hb_segmentations_test.json"


def _edit_hb(root: Path, fn) -> None:
    doc = json.loads(_hb(root).read_text())
    fn(doc)
    _hb(root).write_text(json.dumps(doc))


def _bomb(doc):
    from test_hostile_prepare import _coco_number

    doc[P1]["Edema"] = {"size": [100000, 100000], "counts": _coco_number(10**10)}


def _outside(root: Path) -> None:
    target = root.parent / "elsewhere.json"
    shutil.copyfile(_hb(root), target)
    _hb(root).unlink()
    _hb(root).symlink_to(target)


HOSTILE = {
    "malformed RLE": (lambda r: _edit_hb(r, lambda d: d[P1].update(Edema={"size": [48, 64], "counts": "zzz"})),
                      "outside the COCO alphabet"),
    "RLE of 10^10 pixels": (lambda r: _edit_hb(r, _bomb), "exceeds"),
    "RLE of another size": (lambda r: _edit_hb(r, lambda d: d[P1].update(Edema=F.coco_rle(np.zeros((40, 64), bool)))),
                            "not the image's"),
    "a key twice": (lambda r: _hb(r).write_text('{"%s": {}, "%s": {}}' % (P1, P1)), "twice"),
    "unknown pathology": (lambda r: _edit_hb(r, lambda d: d[P1].update(Nodule=F.coco_rle(np.zeros((48, 64), bool)))),
                          "unknown pathology"),
    "nested 10^5 deep": (lambda r: _hb(r).write_text("[" * 100000 + "]" * 100000), "deep"),
    "link outside the root": (_outside, "outside"),
    "point outside the image": (lambda r: (r / "CheXlocalize/hb_salient_pt_test.json").write_text(
        json.dumps({P1: {"Cardiomegaly": [[640, 5]]}})), "inside the 64x48 image"),
    "NaN point": (lambda r: (r / "CheXlocalize/hb_salient_pt_test.json").write_text(
        '{"%s": {"Cardiomegaly": [[NaN, 5]]}}' % P1), "NaN"),
    "missing file": (lambda r: _hb(r).unlink(), "not found"),
    "huge img_size (polygons)": (lambda r: (r / "CheXlocalize/hb_annotations_test.json").write_text(
        json.dumps({P1: {"img_size": [10**9, 10**9], "Cardiomegaly": [[[0, 0], [10**9, 0], [10**9, 10**9]]]}})),
        "is not the image's [height, width]"),
    "polygon of two points": (lambda r: (r / "CheXlocalize/hb_annotations_test.json").write_text(
        json.dumps({P1: {"img_size": [48, 64], "Cardiomegaly": [[[0, 0], [5, 5]]]}})), "at least 3"),
}
#: the hostile cases read from the polygons file instead of the masks
POLYGON_CASES = ("huge img_size (polygons)", "polygon of two points")


@pytest.fixture(scope="module")
def hostile(chex, tmp_path_factory):
    base, root = chex
    jobs = []
    for i, (name, (make, _)) in enumerate(HOSTILE.items()):
        case = tmp_path_factory.mktemp(f"hostile{i}")
        r = case / "root"
        shutil.copytree(root, r, symlinks=True)
        make(r)
        jobs.append({"argv": ["chexlocalize", "--root", str(r), "--images", str(base / "data/images.zarr"),
                              "--gt", str(base / "data/gt.zarr"), "--out", str(case / "out"), "--bootstrap", "0", "-q",
                              *(["--source", "annotations"] if name in POLYGON_CASES else [])],
                     "case": str(case)})
    vroot = tmp_path_factory.mktemp("hostile_vindr")
    for name, text in (("no rad_id", "image_id,class_name,x_min,y_min,x_max,y_max\n"),
                       ("box past the image", "image_id,rad_id,class_name,x_min,y_min,x_max,y_max\n"
                                              f"{F.VINDR_IDS['d']},R1,Nodule/Mass,10,10,80,20\n"),
                       ("bad rad_id", "image_id,rad_id,class_name,x_min,y_min,x_max,y_max\n"
                                      f"{F.VINDR_IDS['d']},../R1,No finding,,,,\n"),
                       ("unicode digit rad_id", "image_id,rad_id,class_name,x_min,y_min,x_max,y_max\n"  # str.isdigit
                                                f"{F.VINDR_IDS['d']},R\u00b2,No finding,,,,\n"
                                                f"{F.VINDR_IDS['d']},R1,No finding,,,,\n"),
                       # issue 44, class 4: each reader's truth is the others' marks; 10^8 truths before the cap
                       ("10,000 readers of one image", "image_id,rad_id,class_name,x_min,y_min,x_max,y_max\n" + "".join(
                           f"{F.VINDR_IDS['d']},R{k},Nodule/Mass,{k % 40},5,{k % 40 + 8},20\n"
                           for k in range(1, 10_001)))):
        case = vroot / name.replace(" ", "_")
        r = case / "root"
        (r / "annotations").mkdir(parents=True)
        (r / "annotations/annotations_train.csv").write_text(text)
        jobs.append({"argv": ["vindr_cxr", "--root", str(r), "--images", str(vindr_images(tmp_path_factory)),
                              "--out", str(case / "out"), "--bootstrap", "0", "-q"], "case": str(case)})
    results = run_forked(jobs, tmp_path_factory.mktemp("hostile-human"), entry="xbench.human:human",
                         prog="xbench human", preload=("xbench.extract.human", "xbench.human",
                                                       "xbench.score.scoring"))
    return dict(zip([*HOSTILE, "no rad_id", "box past the image", "bad rad_id", "unicode digit rad_id",
                     "10,000 readers of one image"],
                    zip(jobs, results)))


_VINDR_IMAGES: list = []


def vindr_images(factory) -> Path:
    """A VinDr train images store (made once)."""
    if not _VINDR_IMAGES:
        from xbench.extract.datasets.vindr import VinDrCXRReader

        base = factory.mktemp("vindr_images")
        (base / "root").mkdir()
        F.write_vindr(base / "root")
        _prepare(VinDrCXRReader(base / "root", split="train"), base / "data")
        _VINDR_IMAGES.append(base / "data/images.zarr")
    return _VINDR_IMAGES[0]


HOSTILE_MESSAGES = {**{k: v[1] for k, v in HOSTILE.items()}, "no rad_id": "rad_id", "box past the image": "bad box",
                    "bad rad_id": "not like R8", "unicode digit rad_id": "not like R8",
                    "10,000 readers of one image": "with 10,000); readers are scored against each other, at most 32"}


@pytest.mark.parametrize("rad", ["R8", "R17", "R1234567", "R\u00b2", "R\u0661", "R\uff18", "R8\n", "R", "r8",
                                 "R12345678", "R-1", "../R1", "R 8"])
def test_a_rad_id_is_written_only_when_score_human_reads_its_folder_back(rad):
    """The writer's rule (a VinDr rad_id, also the reader option) never takes a name the reading side
    (xbench-score --human: a reader's folder name) refuses; both checked against the contract's text."""
    import re

    from xbench.extract.datasets.vindr import VinDrCXRReader, is_rad_id
    from xbench.schemas.paths import is_reader_name

    folder_name = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", rad, flags=re.ASCII) is not None
    vindr_form = rad[:1] == "R" and 2 <= len(rad) <= 8 and all(c in "0123456789" for c in rad[1:])
    assert is_reader_name(rad) == folder_name
    assert is_rad_id(rad) == (vindr_form and folder_name)
    if not is_rad_id(rad):
        with pytest.raises(ValueError, match="reader must be 'union' or a rad_id"):
            VinDrCXRReader("x", split="train", reader=rad)
    else:
        assert VinDrCXRReader("x", split="train", reader=rad).options["reader"] == rad


@pytest.mark.parametrize("name", list(HOSTILE_MESSAGES))
def test_hostile_file_exits_2_with_one_line(hostile, name):
    job, res = hostile[name]
    assert res["rc"] == 2, (name, res["stderr"])
    assert "Traceback" not in res["stderr"]
    lines = [line for line in res["stderr"].splitlines() if line.strip()]
    assert 1 <= len(lines) <= 3, lines
    assert HOSTILE_MESSAGES[name] in res["stderr"], res["stderr"]
    assert res["seconds"] < 60 and res["maxrss_mib"] < 1024
    assert not Path(job["case"], "out").exists()  # nothing half-written


def test_out_may_not_be_or_hold_an_input(chex):
    base, root = chex
    for out in (base / "data/images.zarr", base / "data", root / "human"):
        res = CliRunner().invoke(cli.main, ["human", "chexlocalize", "--root", str(root), "--images",
                                            str(base / "data/images.zarr"), "--gt", str(base / "data/gt.zarr"),
                                            "--out", str(out), "--bootstrap", "0", "-q"])
        assert res.exit_code == 2 and "--out" in res.output, res.output
    assert (base / "data/images.zarr/zarr.json").is_file()


def test_docs_worked_example_runs_as_written(tmp_path, monkeypatch):
    """docs/how-to/human.md's worked example, every command as written, on the fixture laid out under its names."""
    import re
    import shlex

    pytest.importorskip("torch")  # the example extracts the dog baseline
    doc = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "human.md").read_text()
    lines = [line.strip() for block in re.findall(r"```bash\n(.*?)```", doc, flags=re.S)
             for line in block.splitlines() if "chexlocalize_test/" in line]
    assert len(lines) == 6 and lines[1].startswith("xbench human chexlocalize")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chexlocalize_test/download").mkdir(parents=True)
    write_chexlocalize_test(tmp_path / "chexlocalize_test/download")
    outputs = []
    for line in lines:
        argv = shlex.split(line)
        argv = argv[1:] if argv[0] == "xbench" else [argv[0].removeprefix("xbench-"), *argv[1:]]
        res = CliRunner().invoke(cli.main, argv)
        assert res.exit_code == 0, (line, res.output)
        outputs.append(res.output)
    # the values docs/how-to/human.md quotes
    assert "summary (%): pointing_game 33.33, dice_fixed 34.29, iou_fixed 23.38, dice_best 34.75, iou_best 23.61" \
        in outputs[1]
    assert ("CheXlocalize eval.py (native resolution, mean over classes, %): miou_true_pos_only 48.78, miou_all "
            "24.39, hit_rate 33.33") in outputs[1]
    assert ("human ceiling (chexlocalize, 1 reader(s)): pointing_game 33.3% (model at 0% of it), dice_best 34.7% "
            "(model at 39% of it), iou_best 23.6% (model at 33% of it)") in outputs[3]
    assert "| chexlocalize | (mean) | dice_best | 13.5 | 34.7 [1.4, 51.4] | 38.9 | -21.2 [-32.1, +0.6] |" in outputs[4]
    assert "| chexlocalize | (mean) | dice_best |" in outputs[4]
    metrics = json.loads((tmp_path / "chexlocalize_test/results/metrics.json").read_text())
    assert metrics["human"]["datasets"]["chexlocalize"]["readers"] == ["hb"]
    assert "Human ceiling" in (tmp_path / "chexlocalize_test/report/index.html").read_text()


def test_score_refuses_a_human_folder_of_another_dataset(chex_human, vindr, tmp_path):
    vbase, vroot = vindr
    human_v = tmp_path / "human_v"
    _run(["human", "vindr_cxr", "--root", str(vroot), "--images", str(vbase / "data/images.zarr"), "--out",
          str(human_v), "--bootstrap", "0", "-q"])
    res = CliRunner().invoke(cli.main, ["score", str(human_v / "readers/R1/submission.zarr"), "--gt",
                                        str(vbase / "data/gt.zarr"), "--allow-missing", "--out", str(tmp_path / "r"),
                                        "--human", str(chex_human), "-q"])
    assert res.exit_code == 2 and "holds the ceiling of chexlocalize" in res.output, res.output
    assert not (tmp_path / "r").exists()


def test_score_with_a_hostile_human_folder_exits_2(chex, chex_human, tmp_path):
    base, _ = chex
    bad = tmp_path / "human"
    shutil.copytree(chex_human, bad)
    (bad / "human.json").write_text('{"xbench": {"kind": "human-ceiling"}, "xbench": {}, "datasets": {}}')
    res = CliRunner().invoke(cli.main, ["score", str(chex_human / "readers/hb/submission.zarr"), "--gt",
                                        str(base / "data/gt.zarr"), "--out", str(tmp_path / "r"), "--human", str(bad),
                                        "-q"])
    assert res.exit_code == 2 and "twice" in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not (tmp_path / "r").exists()
    res = CliRunner().invoke(cli.main, ["compare", str(chex_human / "readers/hb"), str(chex_human), "--out",
                                        str(chex_human / "x.csv")])
    assert res.exit_code == 2 and "lies inside" in res.output


def test_an_images_store_of_another_split_is_refused(chex, tmp_path):
    base, root = chex
    r = tmp_path / "root"
    shutil.copytree(root, r)
    doc = json.loads(_hb(r).read_text())
    _hb(r).write_text(json.dumps({k.replace("patient", "patient9"): v for k, v in doc.items()}))
    res = CliRunner().invoke(cli.main, ["human", "chexlocalize", "--root", str(r), "--images",
                                        str(base / "data/images.zarr"), "--gt", str(base / "data/gt.zarr"), "--out",
                                        str(tmp_path / "out"), "--bootstrap", "0", "-q"])
    assert res.exit_code == 2 and "none of its CXRs" in res.output, res.output


def test_vindr_model_against_the_readers_paired_on_case_and_class(vindr, tmp_path):
    """A model scored on VinDr train (against all readers' union) with --human: the paired model value is the
    class mean of the model's per-pair values (pairs.parquet) over the (case, class) pairs some reader was
    scored on, and the gap is that minus the ceiling."""
    import pandas as pd

    from xbench.schemas.images import read_images
    from xbench.schemas.submission import DatasetSpec, SubmissionWriter

    base, root = vindr
    human = tmp_path / "human"
    _run(["human", "vindr_cxr", "--root", str(root), "--images", str(base / "data/images.zarr"), "--gt",
          str(base / "data/gt.zarr"), "--out", str(human), "--bootstrap", "0", "-q"])
    ds = read_images(base / "data/images.zarr").datasets["vindr_cxr"]
    rng = np.random.default_rng(5)
    spec = DatasetSpec(case_ids=[str(c) for c in ds.case_id], classes=tuple(ds.classes), map_shape=(6, 8),
                       score_kind="probability")
    w = SubmissionWriter.create(tmp_path / "model.zarr", model="rand", method="x", provenance={},
                                datasets={"vindr_cxr": spec}, cases_per_block=64, map_dtype="float32")
    for b in w.blocks_todo("vindr_cxr"):
        s, e = w.block_rows("vindr_cxr", b)
        w.write_block("vindr_cxr", b, rng.random((e - s, len(ds.classes))).astype(np.float32),
                      rng.random((e - s, len(ds.classes), 6, 8)).astype(np.float32))
    w.finish()
    out = tmp_path / "results"
    _run(["score", str(tmp_path / "model.zarr"), "--gt", str(base / "data/gt.zarr"), "--out", str(out),
          "--bootstrap", "30", "--human", str(human), "-q"])
    block = json.loads((out / "metrics.json").read_text())["human"]["datasets"]["vindr_cxr"]
    pairs = pd.read_parquet(out / "pairs.parquet")
    pairs = pairs[pairs["has_region"]]
    aligned = set()
    for r in block["readers"]:
        rp = pd.read_parquet(human / "readers" / r / "pairs.parquet")
        aligned |= {(str(a), str(b)) for a, b in zip(rp[rp["has_region"]]["case_id"], rp[rp["has_region"]]["class"])}
    assert sum(e["n_paired"] for e in block["classes"].values()) >= 2
    for cls, entry in block["classes"].items():
        mine = pairs[[(str(a), str(b)) in aligned and str(b) == cls for a, b in zip(pairs["case_id"], pairs["class"])]]
        assert entry["n_paired"] == len(mine)
        if len(mine):
            p = entry["pointing_game"]["paired"]
            assert p["model"] == pytest.approx(float(mine["hit"].mean()))
            assert p["gap"] == pytest.approx(p["model"] - entry["pointing_game"]["human"])
            assert entry["dice_fixed"]["paired"]["model"] == pytest.approx(float(mine["dice_fixed"].mean()))


def test_stores_holding_other_datasets_too(chex, chex_human, tmp_path):
    """images.zarr and gt.zarr that also hold the phantom: only chexlocalize is read and scored, with the same
    ceiling."""
    from xbench.extract.datasets.phantom import PhantomReader

    base, root = chex
    shutil.copytree(base / "data", tmp_path / "data")
    _prepare(PhantomReader(tmp_path, n_cases=4), tmp_path / "data")
    out = tmp_path / "human"
    _run(["human", "chexlocalize", "--root", str(root), "--images", str(tmp_path / "data/images.zarr"),
          "--gt", str(tmp_path / "data/gt.zarr"), "--out", str(out), "--bootstrap", "20", "-q"])
    a = json.loads((out / "human.json").read_text())["datasets"]
    b = json.loads((chex_human / "human.json").read_text())["datasets"]
    assert a == b


def test_a_readers_point_on_an_exact_cell_edge_lands_in_the_cell_the_contract_names():
    # issue 43: floor(x * W / w) decided exactly; x = 2402.6666666666665 on a 2544-wide image at 36 cells is just
    # below the edge 34 * 2544 / 36 = 2402.666..., in cell 33, while the float product rounds to 34
    import math
    from fractions import Fraction

    from xbench.extract.human import _point_cell
    for w, W in [(2544, 36), (1088, 224), (296, 36)]:
        for k in range(1, W):
            e = float(Fraction(k * w, W))
            for x in (e, math.nextafter(e, 0), math.nextafter(e, w)):
                want = min(math.floor(Fraction(x) * W / w), W - 1)
                assert _point_cell((x, x), (w, w), (W, W)) == (want, want), (w, W, x)


def test_reader_count_bounds_from_the_counts_alone():
    """The bounds on readers (issue 44, class 4), one line each, before any truth is built."""
    from xbench.extract.human_marks import MAX_READERS, MAX_READERS_PER_IMAGE, reader_count_problems

    assert reader_count_problems({"a": MAX_READERS_PER_IMAGE, "*": MAX_READERS}, "f.csv") == []
    lines = [str(p) for p in reader_count_problems({"a": 33, "b": 40, "c": 2, "*": MAX_READERS + 1}, "f.csv")]
    assert lines == [f"f.csv: 2 image(s) have more than {MAX_READERS_PER_IMAGE} readers (the most: b with 40); "
                     f"readers are scored against each other, at most {MAX_READERS_PER_IMAGE} an image",
                     f"f.csv: holds {MAX_READERS + 1:,} readers; each is scored on its own, at most {MAX_READERS:,}"]
