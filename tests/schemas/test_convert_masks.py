"""xbench-convert for masks: COCO segmentations (RLE, polygons) and folders of PNG masks become submissions.

The rule is checked against the ground truth's own rasteriser (extract/datasets/rasterise.py: a binary mask at the
original size becomes exactly gt.zarr's region) and a cell-by-cell brute force; RLE decoding against pycocotools;
converted masks score exactly as the same maps handed in directly; hostile masks are refused, one line each, exit
2, nothing written.
"""
from __future__ import annotations

import json
import math
import struct
import zlib
from fractions import Fraction

import numpy as np
import pytest

from xbench.extract.datasets.base import Mask, Polygon
from xbench.extract.datasets.rasterise import rasterise_region
from xbench.schemas import ImagesWriter, read_submission, write_ground_truth
from xbench.schemas.cli import convert_main
from xbench.schemas.convert_masks import (Instance, instance_map, mask_to_grid, polygon_mask, rle_counts,
                                          rle_mask)

CLASSES = ["Cardiomegaly", "Nodule/Mass", "Pneumothorax"]
SIZES = [(40, 60), (50, 50), (30, 20), (64, 48)]
IDS = [f"case-{i}" for i in range(len(SIZES))]
GRID = (16, 16)


def encode(m: np.ndarray) -> str:
    """pycocotools' compressed RLE, written here from its documented layout (runs column-major, starting with
    0s; each run from the third on as the difference to the run two before; 5 bits a character from '0', 0x20 =
    more, sign in 0x10 of the last) — the decoder is checked against pycocotools itself below."""
    flat = m.T.ravel().astype(bool)
    runs, cur, n = [], False, 0
    for v in flat:
        if v != cur:
            runs.append(n)
            cur, n = v, 0
        n += 1
    runs.append(n)
    out = []
    for i, x in enumerate(runs):
        if i > 2:
            x -= runs[i - 2]
        more = True
        while more:
            c = x & 0x1F
            x >>= 5  # arithmetic shift: a negative difference stays negative
            more = x != -1 if c & 0x10 else x != 0
            out.append(chr((c | 0x20 if more else c) + 48))
    return "".join(out)


def native_masks(i: int):
    """Per finding of case i, a binary native mask: two blobs for Nodule/Mass (one a single pixel, smaller than a
    cell), one for Cardiomegaly on even cases; none for Pneumothorax."""
    h, w = SIZES[i]
    nod = np.zeros((h, w), bool)
    nod[h // 4: h // 2, w // 5: w // 2] = True
    nod[h - 2, w - 2] = True  # slips between cell centres: the centroid rule keeps it
    card = np.zeros((h, w), bool)
    if i % 2 == 0:
        card[h // 2:, w // 3: 2 * w // 3] = True
    return {"Nodule/Mass": nod, "Cardiomegaly": card}


@pytest.fixture
def stores(tmp_path):
    images = tmp_path / "images.zarr"
    w = ImagesWriter(images, "phantom", case_ids=IDS, classes=CLASSES, image_size=8, cases_per_block=2)
    for b in w.blocks_todo():
        s, e = w.block_rows(b)
        w.write_block(b, np.zeros((e - s, 8, 8), np.uint8), np.asarray(SIZES[s:e], np.int32))
    w.finish()
    labels = np.zeros((len(IDS), 3), np.int8)
    pairs, regions = [], []
    for i in range(len(IDS)):
        for c, m in native_masks(i).items():
            j = CLASSES.index(c)
            if m.any():
                labels[i, j] = 1
                pairs.append((i, j))
                regions.append(rasterise_region([Mask(lambda m=m: m)], SIZES[i], GRID).mask)
    gt = tmp_path / "gt.zarr"
    write_ground_truth(gt, "phantom", case_ids=IDS, classes=CLASSES, labels=labels,
                       region_index=np.asarray(pairs, np.int32), region_mask=np.asarray(regions, bool),
                       orig_size=np.asarray(SIZES, np.int32), grid=GRID)
    return images, gt


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        convert_main([str(a) for a in args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def score(tmp_path, sub, gt, name):
    from xbench.score.cli import main as score_main

    with pytest.raises(SystemExit) as exc:
        score_main([str(sub), "--gt", str(gt), "--out", str(tmp_path / name), "--bootstrap", "0", "-q"])
    assert exc.value.code == 0
    return json.loads((tmp_path / name / "metrics.json").read_text())


# -- the rule ----------------------------------------------------------------------------------------------
def brute_grid(values, grid):
    """Cell by cell: the value at the pixel holding the cell centre; each 8-connected component of non-zero
    pixels that no centre falls on puts its highest value on its centroid's cell (max with what is there)."""
    h, w = values.shape
    gh, gw = grid
    out = np.zeros(grid)
    hit_pixels = set()
    for r in range(gh):
        for c in range(gw):
            y, x = ((2 * r + 1) * h) // (2 * gh), ((2 * c + 1) * w) // (2 * gw)  # exact: issue 43
            out[r, c] = values[y, x]
            hit_pixels.add((y, x))
    seen = np.zeros(values.shape, bool)
    for y0 in range(h):
        for x0 in range(w):
            if values[y0, x0] <= 0 or seen[y0, x0]:
                continue
            comp, stack = [], [(y0, x0)]
            seen[y0, x0] = True
            while stack:
                y, x = stack.pop()
                comp.append((y, x))
                for dy in (-1, 0, 1):
                    for dx in (-1, 0, 1):
                        yy, xx = y + dy, x + dx
                        if 0 <= yy < h and 0 <= xx < w and values[yy, xx] > 0 and not seen[yy, xx]:
                            seen[yy, xx] = True
                            stack.append((yy, xx))
            if any(p in hit_pixels for p in comp):
                continue
            cy = sum(Fraction(2 * p[0] + 1, 2) for p in comp) / len(comp)  # exact rationals
            cx = sum(Fraction(2 * p[1] + 1, 2) for p in comp) / len(comp)
            r, c = min(math.floor(cy * gh / h), gh - 1), min(math.floor(cx * gw / w), gw - 1)
            out[r, c] = max(out[r, c], max(values[p] for p in comp))
    return out


@pytest.mark.parametrize("h, gh", [(296, 36), (1088, 224), (2624, 224)])
def test_masks_at_sizes_whose_centres_fall_on_pixel_edges(h, gh):
    # issue 43: the cell whose exact centre is the top edge of pixel row c samples row c, not row c - 1
    rng = np.random.default_rng(h)
    ks = [k for k in range(gh) if ((2 * k + 1) * h) % (2 * gh) == 0]
    for k in ks[:3]:
        c = (2 * k + 1) * h // (2 * gh)
        values = np.zeros((h, 5))
        values[c] = rng.uniform(0.1, 1.0, 5)
        values[c - 1] = 0.05
        got = mask_to_grid(values, (gh, 1))
        assert got[k, 0] == values[c, 2]
        np.testing.assert_array_equal(got, brute_grid(values, (gh, 1)))
        lesion = np.zeros((h, 5))
        lesion[c - 3:c - 1, 1:3] = 0.7  # a lesion no centre falls on: its centroid's cell, exactly
        np.testing.assert_array_equal(mask_to_grid(lesion, (gh, 1)), brute_grid(lesion, (gh, 1)))


def test_binary_mask_becomes_the_ground_truths_region():
    rng = np.random.default_rng(0)
    for _ in range(30):
        h, w = rng.integers(5, 70, 2)
        m = rng.random((h, w)) < rng.uniform(0.001, 0.2)
        grid = tuple(int(v) for v in rng.integers(3, 40, 2))
        ref = rasterise_region([Mask(lambda m=m: m)], (h, w), grid)
        got = mask_to_grid(m, grid)
        np.testing.assert_array_equal(got > 0, ref.mask if ref is not None else np.zeros(grid, bool))
        assert set(np.unique(got)) <= {0.0, 1.0}


def test_probability_mask_matches_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(25):
        h, w = rng.integers(3, 40, 2)
        v = rng.random((h, w)) * (rng.random((h, w)) < 0.1)
        grid = tuple(int(x) for x in rng.integers(2, 30, 2))
        np.testing.assert_array_equal(mask_to_grid(v, grid), brute_grid(v, grid))


def test_decoded_integers_with_their_scale_and_many_missed_lesions_match_brute_force():
    """Issue 44, class 4: the missed lesions' cells computed in one vectorised pass (not a loop per lesion), and a
    PNG's decoded integers divided by their full value only where the rule reads them: both equal the brute force
    on the [0, 1] values, also with hundreds of one-pixel lesions between the cell centres."""
    rng = np.random.default_rng(7)
    for k in range(12):
        h, w = (int(v) for v in rng.integers(20, 90, 2))
        one = (1, 255, 65535)[k % 3]
        raw = (rng.integers(1, one + 1, (h, w)) * (rng.random((h, w)) < 0.2)).astype(np.uint16 if one > 255 else np.uint8)
        if k % 2:
            raw[::2, ::2] = 0
            raw[1::2, :] = 0
            raw[:, 1::2] = 0  # isolated dots only
            raw[::3, ::3] = one  # ... a few hundred of them
            raw[1::2, :] = 0
            raw[:, 1::2] = 0
        grid = tuple(int(x) for x in rng.integers(2, 12, 2))
        want = brute_grid(raw.astype(np.float64) / one, grid)
        np.testing.assert_array_equal(mask_to_grid(raw, grid, scale=one), want)


def test_too_many_lesions_are_refused_before_the_work_per_lesion(monkeypatch):
    from xbench.schemas import convert_masks as CM

    dots = np.zeros((40, 40), bool)
    dots[::2, ::2] = True  # 400 one-pixel lesions
    monkeypatch.setattr(CM, "MAX_MASK_LESIONS", 399)
    with pytest.raises(CM.LesionLimitError, match="holds 400 separate lesions"):
        mask_to_grid(dots, (4, 4))
    monkeypatch.setattr(CM, "MAX_MASK_LESIONS", 400)
    np.testing.assert_array_equal(mask_to_grid(dots, (4, 4)), brute_grid(dots.astype(np.float64), (4, 4)))


def test_polygon_is_the_ground_truths_polygon_rule():
    rng = np.random.default_rng(2)
    for _ in range(20):
        h, w = (int(v) for v in rng.integers(10, 80, 2))
        pts = rng.uniform(-5, max(h, w) + 5, 8).round(1).tolist()
        grid = (int(rng.integers(3, 30)), int(rng.integers(3, 30)))
        inst = Instance((h, w), 1.0, polygons=(tuple(pts),))
        ref = rasterise_region([Polygon(tuple(zip(pts[0::2], pts[1::2])))], (h, w), grid)
        np.testing.assert_array_equal(inst.grid_map(grid) > 0, ref.mask if ref is not None else np.zeros(grid, bool))


def test_instances_combine_by_their_maximum():
    a, b = np.zeros((20, 20), bool), np.zeros((20, 20), bool)
    a[2:12, 2:12] = True
    b[8:18, 8:18] = True
    got = instance_map([Instance((20, 20), 0.3, rle=encode(a)), Instance((20, 20), 0.8, rle=encode(b))], (10, 10))
    want = np.maximum(0.3 * brute_grid(a.astype(float), (10, 10)), 0.8 * brute_grid(b.astype(float), (10, 10)))
    np.testing.assert_array_equal(got, want)
    assert got.max() == 0.8


def test_rle_round_trip_and_pycocotools():
    rng = np.random.default_rng(3)
    masks = [np.zeros((7, 5), bool), np.ones((7, 5), bool)]
    masks += [rng.random(tuple(rng.integers(1, 90, 2))) < p for p in (0.02, 0.5, 0.97) for _ in range(5)]
    big = np.zeros((300, 700), bool)
    big[10:290, 3:690] = True  # long runs: several characters each, and negative differences
    masks.append(big)
    for m in masks:
        np.testing.assert_array_equal(rle_mask(rle_counts(encode(m)), m.shape), m)
    cocomask = pytest.importorskip("pycocotools.mask")
    for m in masks:
        rle = cocomask.encode(np.asfortranarray(m.astype(np.uint8)))
        text = rle["counts"].decode()
        assert text == encode(m)
        np.testing.assert_array_equal(rle_mask(rle_counts(text), m.shape), cocomask.decode(rle).astype(bool))


def test_rle_counts_refuses_garbage():
    for bad in ("0\x7f", "`", "0a"):  # out of the alphabet; a string that ends inside a run
        with pytest.raises(ValueError):
            rle_counts(bad)


# -- COCO segmentations end to end -------------------------------------------------------------------------
def coco_results(polygons: bool = False):
    out = []
    for i in range(len(IDS)):
        h, w = SIZES[i]
        for c, m in native_masks(i).items():
            if not m.any():
                continue
            seg = {"size": [h, w], "counts": encode(m)}
            if polygons and c == "Cardiomegaly":
                ys, xs = np.nonzero(m)
                x0, x1, y0, y1 = xs.min(), xs.max(), ys.min(), ys.max()
                seg = [[float(x0), float(y0), float(x1), float(y0), float(x1), float(y1), float(x0), float(y1)]]
            out.append({"image_id": IDS[i], "category_id": c, "segmentation": seg, "score": 0.9, "bbox": [0, 0, 1, 1]})
    out.append({"image_id": IDS[1], "category_id": "Pneumothorax", "score": 0.2,
                "segmentation": {"size": list(SIZES[1]), "counts": [SIZES[1][0] * SIZES[1][1]]}})  # empty mask
    return out


@pytest.mark.parametrize("polygons", [False, True])
def test_coco_masks_score_as_the_regions_themselves(tmp_path, stores, capsys, polygons):
    images, gt = stores
    src = tmp_path / "segm.json"
    src.write_text(json.dumps(coco_results(polygons)))
    out = tmp_path / "masks.zarr"
    code, _, err = run(capsys, src, "--images", images, "--out", out, "--gt", gt, "-q")
    assert code == 0, err
    sub = read_submission(out)
    assert sub.attrs["method"] == "masks" and sub.attrs["source"]["format"] == "coco-segmentation"
    ds = sub.datasets["phantom"]
    assert tuple(ds.saliency.shape[-2:]) == GRID  # the ground truth's grid: the scorer compares the mask itself
    assert ds.scores[1, CLASSES.index("Pneumothorax")] == pytest.approx(0.2)
    metrics = score(tmp_path, out, gt, "s")
    for c in ("Nodule/Mass", "Cardiomegaly"):
        e = metrics["datasets"]["phantom"]["classes"][c]
        assert e["pointing_game"] == 1.0
        assert e["dice_fixed"] == e["dice_best"] == e["iou_fixed"] == 1.0  # binary masks: no threshold to search
    assert metrics["xbench"]["submission"]["method"] == "masks"


def test_converted_masks_score_like_the_same_maps_handed_in(tmp_path, stores, capsys):
    """Masks through xbench-convert, and the same maps (computed here by brute force) handed in as an npz folder:
    the metrics are equal."""
    images, gt = stores
    rng = np.random.default_rng(5)
    src = tmp_path / "segm.json"
    results, direct = [], {}
    for i in range(len(IDS)):
        h, w = SIZES[i]
        maps = np.zeros((3, *GRID))
        for j, c in enumerate(CLASSES):
            for _ in range(2):
                m = rng.random((h, w)) < 0.05
                s = float(rng.uniform(0.1, 1))
                results.append({"image_id": IDS[i], "category_id": c, "score": s,
                                "segmentation": {"size": [h, w], "counts": encode(m)}})
                maps[j] = np.maximum(maps[j], s * brute_grid(m.astype(float), GRID))
        direct[IDS[i]] = maps
    src.write_text(json.dumps(results))
    code, _, err = run(capsys, src, "--images", images, "--out", tmp_path / "a.zarr", "--gt", gt, "-q")
    assert code == 0, err
    npz = tmp_path / "npz"
    (npz / "phantom").mkdir(parents=True)
    (npz / "meta.json").write_text(json.dumps({"model": "segm", "method": "masks", "datasets": {"phantom": {
        "classes": CLASSES, "score_kind": "probability"}}}))
    for i, case in enumerate(IDS):
        top = [max((r["score"] for r in results if r["image_id"] == case and r["category_id"] == c), default=0.0)
               for c in CLASSES]
        np.savez(npz / "phantom" / f"{case}.npz", scores=np.asarray(top, np.float32),
                 saliency=direct[case].astype(np.float32))
    code, _, err = run(capsys, npz, "--out", tmp_path / "b.zarr", "--map-dtype", "float32", "-q")
    assert code == 0, err
    a, b = score(tmp_path, tmp_path / "a.zarr", gt, "sa"), score(tmp_path, tmp_path / "b.zarr", gt, "sb")
    assert a["datasets"] == b["datasets"] and a["overall"] == b["overall"]


# -- PNG folders ---------------------------------------------------------------------------------------------
def write_png(path, values: np.ndarray, mode: str):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "1":
        Image.fromarray(values.astype(bool)).save(path)
    elif mode == "L":
        Image.fromarray(values.astype(np.uint8), mode="L").save(path)
    else:
        Image.fromarray(values.astype(np.uint16)).save(path)


@pytest.mark.parametrize("mode,one", [("1", 1), ("L", 255), ("I;16", 65535)])
def test_png_folder(tmp_path, stores, capsys, mode, one):
    images, gt = stores
    src = tmp_path / "pngs"
    src.mkdir()
    scores = {"phantom": {IDS[0]: {"Nodule/Mass": 0.7}}}
    (src / "masks.json").write_text(json.dumps({"model": "seg-vlm", "scores": scores}))
    for i in range(len(IDS)):
        for c, m in native_masks(i).items():
            if m.any():
                v = m * (one if mode == "1" else one // 2)  # half intensity: derived scores 0.5 (8/16 bit)
                write_png(src / "phantom" / IDS[i] / f"{c.replace('/', '_')}.png", v, mode)
    mapping = tmp_path / "map.toml"
    mapping.write_text('[categories]\n"Nodule_Mass" = "Nodule/Mass"\n')
    out = tmp_path / "png.zarr"
    code, _, err = run(capsys, src, "--images", images, "--mapping", mapping, "--out", out, "--gt", gt, "-q")
    assert code == 0, err
    ds = read_submission(out).datasets["phantom"]
    j = CLASSES.index("Nodule/Mass")
    assert ds.scores[0, j] == pytest.approx(0.7)  # given in masks.json
    half = 1.0 if mode == "1" else (one // 2) / one
    assert ds.scores[1, j] == pytest.approx(half)  # derived: the mask's highest value
    assert ds.scores[1, CLASSES.index("Pneumothorax")] == 0.0
    for i in range(len(IDS)):
        want = brute_grid(native_masks(i)["Nodule/Mass"] * half, GRID)
        np.testing.assert_allclose(np.asarray(ds.saliency[i, j], np.float64), want, rtol=1e-6)
    metrics = score(tmp_path, out, gt, "s")
    assert metrics["datasets"]["phantom"]["classes"]["Nodule/Mass"]["dice_fixed"] == 1.0


# -- hostile input -------------------------------------------------------------------------------------------
def forged_png(path, width: int, height: int, bits: int = 8):
    """A PNG whose header claims width x height grey pixels of ``bits`` (a decompression bomb's header), with a tiny
    body."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, bits, 0, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 10))
                     + chunk(b"IEND", b""))


def test_hostile_coco_masks_one_line_each(tmp_path, stores, capsys):
    images, gt = stores
    h, w = SIZES[0]
    bad = [
        {"image_id": IDS[0], "category_id": "Cardiomegaly", "score": 0.5,
         "segmentation": {"size": [h, w], "counts": [0, h * w + 5]}},  # runs past the image
        {"image_id": IDS[0], "category_id": "Cardiomegaly", "score": 0.5,
         "segmentation": {"size": [h + 1, w], "counts": [h * w + w]}},  # not the image's size
        {"image_id": IDS[0], "category_id": "Cardiomegaly", "score": 0.5,
         "segmentation": {"size": [h, w], "counts": "\x7f\x7f"}},  # not RLE characters
        {"image_id": IDS[0], "category_id": "Cardiomegaly", "score": 0.5,
         "segmentation": {"size": [h, w], "counts": [-3, h * w + 3]}},  # a negative run
        {"image_id": IDS[0], "category_id": "Cardiomegaly", "score": 0.5,
         "segmentation": [[-50, -50, -40, -50, -40, -40]]},  # a polygon wholly outside
        {"image_id": IDS[0], "category_id": "Cardiomegaly", "score": 1.5,
         "segmentation": {"size": [h, w], "counts": [h * w]}},  # score outside [0, 1]
        {"image_id": IDS[0], "category_id": "Cardiomegaly", "score": 0.5, "bbox": [1, 1, 2, 2]},  # no mask
        {"image_id": "nobody", "category_id": "Cardiomegaly", "score": 0.5,
         "segmentation": {"size": [h, w], "counts": [h * w]}},
    ]
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(bad))
    out = tmp_path / "x.zarr"
    code, _, err = run(capsys, src, "--images", images, "--out", out)
    assert code == 2
    lines = [ln for ln in err.splitlines() if "result " in ln]
    assert len(lines) == len(bad), err
    for k, text in enumerate(("past the image", "not the image's original size", "outside the COCO alphabet",
                              "negative run", "wholly outside", "probability in [0, 1]", "lacks segmentation",
                              "not a case")):
        assert text in lines[k], (k, lines[k])
    assert "Traceback" not in err and not out.exists()
    assert not any(p.name.startswith(".x.zarr") for p in tmp_path.iterdir())


def test_hostile_png_folder_one_line_each(tmp_path, stores, capsys):
    images, _ = stores
    src = tmp_path / "pngs"
    case = src / "phantom" / IDS[0]
    case.mkdir(parents=True)
    (src / "masks.json").write_text(json.dumps({"scores": {"phantom": {IDS[0]: {"Cardiomegaly": 2}}}}))
    forged_png(case / "Cardiomegaly.png", 200_000, 200_000)  # the header of a 40-gigapixel bomb
    from PIL import Image

    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(case / "Pneumothorax.png")  # RGB: not one channel
    (case / "Nodule_Mass.png").write_bytes(b"not a png at all")  # no mapping: names no finding
    (src / "phantom" / IDS[2]).mkdir()
    (src / "phantom" / IDS[2] / "Cardiomegaly.png").write_bytes(b"not a png at all")
    (src / "phantom" / "someone-else").mkdir()
    (src / "elsewhere").mkdir()
    outside = tmp_path / "outside.png"
    write_png(outside, np.ones((4, 4)), "1")
    (src / "phantom" / IDS[1]).mkdir()
    (src / "phantom" / IDS[1] / "Cardiomegaly.png").symlink_to(outside)
    out = tmp_path / "x.zarr"
    code, _, err = run(capsys, src, "--images", images, "--out", out)
    assert code == 2, err
    for text in ("at most 16384 a side", "mode RGB", "not a PNG image", "names no finding",
                 "not a case of the images store", "not a dataset of the images store", "symbolic link",
                 "probability in [0, 1]"):
        assert sum(text in ln for ln in err.splitlines()) == 1, (text, err)
    assert "Traceback" not in err and not out.exists()


def test_masks_need_images(tmp_path, stores, capsys):
    src = tmp_path / "pngs"
    src.mkdir()
    (src / "masks.json").write_text("{}")
    code, _, err = run(capsys, src, "--out", tmp_path / "x.zarr")
    assert code == 2 and "masks need --images" in err


def test_polygon_mask_is_pil_rule():
    m = polygon_mask([1, 1, 5, 1, 5, 4], (6, 7))
    assert m.shape == (6, 7) and m[1, 1] and m[1, 5] and not m[5, 0]


def test_the_report_labels_masks(tmp_path):
    from xbench.score.report import load_result

    d = tmp_path / "scores"
    d.mkdir()
    (d / "metrics.json").write_text(json.dumps({"xbench": {"schema": 1, "submission": {"model": "seg", "method": "masks"}},
                                                "datasets": {}}))
    assert load_result(d).name == "seg (masks)"


def test_work_and_decoded_bytes_are_bounded_one_line_each(tmp_path, stores, capsys):
    """Issue 44, class 4 and the 16-bit bomb: a small PNG of 1 M isolated dots (within every pixel cap) is refused
    in one line after labelling instead of seconds of work per lesion; a 16-bit PNG at the pixel cap (128 MiB
    decoded, 1 GB of floats before) is refused from its header. Exit 2, nothing written."""
    from PIL import Image

    images, _ = stores
    src = tmp_path / "pngs"
    dots = np.zeros((2048, 2048), np.uint8)
    dots[::2, ::2] = 255
    (src / "phantom" / IDS[0]).mkdir(parents=True)
    Image.fromarray(dots, mode="L").save(src / "phantom" / IDS[0] / "Cardiomegaly.png")
    assert (src / "phantom" / IDS[0] / "Cardiomegaly.png").stat().st_size < 64 * 1024
    (src / "masks.json").write_text(json.dumps({"scores": {}}))
    out = tmp_path / "x.zarr"
    code, _, err = run(capsys, src, "--images", images, "--out", out)
    assert code == 2 and "Traceback" not in err and not out.exists(), err
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1 and "holds 1,048,576 separate lesions" in lines[0] and IDS[0] in lines[0], err
    forged_png(src / "phantom" / IDS[1] / "Cardiomegaly.png", 8192, 8192, bits=16)  # read first: its header
    code, _, err = run(capsys, src, "--images", images, "--out", out)
    assert code == 2 and "Traceback" not in err and not out.exists(), err
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1 and "of 2 byte(s) each once decoded (128 MiB)" in lines[0] and IDS[1] in lines[0], err


def test_an_rle_of_too_many_lesions_is_one_line(tmp_path, stores, capsys, monkeypatch):
    """The lesion cap on the COCO side (issue 44, class 4): an RLE of 600 one-pixel dots over a cap of 10."""
    from xbench.schemas import convert_masks as CM

    images, _ = stores
    h, w = SIZES[0]
    dots = np.zeros((h, w), bool)
    dots[::2, ::2] = True
    src = tmp_path / "dots.json"
    src.write_text(json.dumps([{"image_id": IDS[0], "category_id": "Cardiomegaly", "score": 0.5,
                                "segmentation": {"size": [h, w], "counts": encode(dots)}}]))
    monkeypatch.setattr(CM, "MAX_MASK_LESIONS", 10)
    out = tmp_path / "x.zarr"
    code, _, err = run(capsys, src, "--images", images, "--out", out)
    assert code == 2 and "Traceback" not in err and not out.exists(), err
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1 and f"RLE segmentation of a {w}x{h} image: holds 600 separate lesions" in lines[0], err
