"""Converted submissions score against a ground truth with phrase rows (issue 27, item 1).

The phantom set prepared with phrase rows (``xbench-prepare phantom --option phrases=true``) is the ground
truth. Each of the four layouts xbench-convert reads (HDF5, npz folder, COCO results, marks JSON) is converted
with phrase rows and without: with them, the phrase maps land on the right phrase ids (a perfect map per
phrase gets a pointing game of 1; a box lands on the cells the rule says); without them, the store says
``phrases_unsupported`` and scores with null phrase metrics and the reason. Every run goes through the
commands as docs/how-to/convert.md shows them; no message shows the hidden work folder.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from xbench.schemas import read_images, read_submission
from xbench.schemas.ground_truth import read_ground_truth

BIN = Path(sys.executable).parent


def xb(tool: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def phantom(tmp_path_factory):
    d = tmp_path_factory.mktemp("phrases")
    res = xb("xbench-prepare", "phantom", "--out", d / "data", "--n-cases", 24, "--option", "phrases=true", "-q")
    assert res.returncode == 0, res.stderr
    images, gt = read_images(d / "data/images.zarr").datasets["phantom"], read_ground_truth(d / "data/gt.zarr")
    assert gt.datasets["phantom"].queries is not None and len(gt.datasets["phantom"].queries) > 0
    return d, images, gt.datasets["phantom"]


def perfect_maps(gt_ds) -> tuple[list[str], np.ndarray]:
    """Each phrase's own region as its map (on the ground truth's grid), in reverse id order."""
    ids = [str(q) for q in gt_ds.queries.id][::-1]
    masks = np.asarray(gt_ds.query_mask[...], np.float32)[::-1]
    return ids, masks


def write_hdf5(path: Path, images, gt_ds, *, phrases: bool, reason: str | None = None) -> Path:
    rng = np.random.default_rng(0)
    n, c = len(images.case_id), len(images.classes)
    h, w = gt_ds.grid
    with h5py.File(path, "w") as f:
        f.attrs["model"], f.attrs["method"] = "h5-model", "similarity"
        g = f.create_group("phantom")
        g.attrs["classes"] = list(images.classes)
        if reason:
            g.attrs["phrases_unsupported"] = reason
        g["case_id"] = np.array([str(x).encode() for x in images.case_id])
        g["scores"] = rng.normal(size=(n, c))
        g.create_dataset("saliency", data=rng.random((n, c, h, w), dtype=np.float32), compression="gzip")
        if phrases:
            ids, maps = perfect_maps(gt_ds)
            g["query_id"] = np.array([i.encode() for i in ids])
            g["query_scores"] = np.linspace(-1, 1, len(ids))
            g.create_dataset("query_saliency", data=maps, compression="gzip", shuffle=True)
    return path


def write_npz(folder: Path, images, gt_ds, *, phrases: bool) -> Path:
    rng = np.random.default_rng(1)
    (folder / "phantom").mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"model": "npz-model", "method": "gradcam",
                                                  "datasets": {"phantom": {"classes": list(images.classes)}}}))
    h, w = gt_ds.grid
    for case in images.case_id:
        np.savez(folder / "phantom" / f"{case}.npz", scores=rng.normal(size=len(images.classes)),
                 saliency=rng.random((len(images.classes), h, w)))
    if phrases:
        (folder / "phantom" / "phrases").mkdir()
        for qid, m in zip(*perfect_maps(gt_ds)):
            np.savez(folder / "phantom" / "phrases" / f"{qid}.npz", scores=np.array([0.5]), saliency=m[None])
    return folder


BOX = [40.0, 80.0, 20.0, 12.0]  # on a 256 x 256 image and a 64 grid: rows 20..22, columns 10..14 (cell centres)


def box_cells(score: float) -> np.ndarray:
    expected = np.zeros((64, 64), np.float32)
    expected[20:23, 10:15] = score
    return expected


def write_coco(path: Path, images, *, phrases: bool) -> Path:
    ids = [str(c) for c in images.case_id]
    results = [{"image_id": c, "category_id": "Nodule", "bbox": [10, 20, 30, 40], "score": 0.5} for c in ids]
    if phrases:
        q = images.queries
        results += [{"image_id": ids[int(q.case[i])], "query_id": str(q.id[i]), "bbox": BOX, "score": 0.75}
                    for i in range(len(q))]
    path.write_text(json.dumps(results))
    return path


def write_marks(path: Path, images, *, phrases: bool, reason: str | None = None) -> Path:
    ids = [str(c) for c in images.case_id]
    data = {"model": "my-mllm", "datasets": {"phantom": {ids[0]: {"nodule": {"points": [[100, 120, 0.8]]}}}}}
    if phrases:
        data["phrases"] = {"phantom": {str(q): {"boxes": [BOX + [0.6]]} for q in images.queries.id}}
    if reason:
        data["phrases_unsupported"] = reason
    path.write_text(json.dumps(data))
    return path


def source(kind: str, d: Path, images, gt_ds, *, phrases: bool, images_store: Path) -> list:
    """The SOURCE argument (and --images) of a conversion of layout ``kind``, written into ``d``."""
    tag = "with" if phrases else "without"
    if kind == "hdf5":
        return [write_hdf5(d / f"outputs_{tag}.h5", images, gt_ds, phrases=phrases)]
    if kind == "npz":
        return [write_npz(d / f"npz_{tag}", images, gt_ds, phrases=phrases)]
    if kind == "coco":
        return [write_coco(d / f"detections_{tag}.json", images, phrases=phrases), "--images", images_store]
    return [write_marks(d / f"answers_{tag}.json", images, phrases=phrases), "--images", images_store]


KINDS = ["hdf5", "npz", "coco", "marks"]


@pytest.mark.parametrize("phrases", [True, False], ids=["phrase-rows", "no-phrase-rows"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_layout_validates_and_scores_against_phrase_rows(phantom, kind, phrases):
    d, images, gt_ds = phantom
    tag = f"{kind}_{'with' if phrases else 'without'}"
    out, scores = d / f"{tag}.zarr", d / f"scores_{tag}"
    gt = d / "data/gt.zarr"
    args = source(kind, d, images, gt_ds, phrases=phrases, images_store=d / "data/images.zarr")
    res = xb("xbench-convert", *args, "--out", out, "--gt", gt, "-q")
    assert res.returncode == 0, res.stderr
    assert xb("xbench-validate", out, "--gt", gt).returncode == 0
    res = xb("xbench-score", out, "--gt", gt, "--out", scores, "--bootstrap", 0, "-q")
    assert res.returncode == 0, res.stderr
    entry = json.loads((scores / "metrics.json").read_text())["phrases"]["datasets"]["phantom"]
    sub = read_submission(out).datasets["phantom"]
    if not phrases:
        assert entry["unsupported"] is True and entry["reason"] == "the converted source holds no phrase rows"
        assert sub.query_id is None and sub.attrs["phrases_unsupported"] == entry["reason"]
        return
    assert entry["n_phrases"] == len(gt_ds.queries) and "unsupported" not in entry
    assert all(entry["summary"][k] is not None for k in ("pointing_game", "dice_best", "iou_best"))
    assert sorted(sub.query_id.tolist()) == sorted(str(q) for q in gt_ds.queries.id)
    if kind in ("hdf5", "npz"):  # each phrase's own region as its map, in another order: matched by id
        assert entry["summary"]["pointing_game"] == 1.0
    else:
        row = {q: i for i, q in enumerate(sub.query_id.tolist())}[str(images.queries.id[0])]
        np.testing.assert_array_equal(np.asarray(sub.query_saliency[row, 0], np.float32),
                                      box_cells(0.75 if kind == "coco" else 0.6))
        assert sub.query_scores[row] == pytest.approx(0.75 if kind == "coco" else 0.6)


@pytest.mark.parametrize("kind", KINDS)
def test_require_phrases_refuses_a_source_without_them(phantom, kind, tmp_path):
    d, images, gt_ds = phantom
    args = source(kind, tmp_path, images, gt_ds, phrases=False, images_store=d / "data/images.zarr")
    res = xb("xbench-convert", *args, "--out", tmp_path / "s.zarr", "--require-phrases")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "holds no phrase rows (--require-phrases)" in lines[0], lines
    assert not (tmp_path / "s.zarr").exists() and not list(tmp_path.glob(".s.zarr*"))


def test_a_sources_own_reason_is_kept_and_phrases_reason_sets_the_default(phantom, tmp_path):
    d, images, gt_ds = phantom
    h5 = write_hdf5(tmp_path / "own.h5", images, gt_ds, phrases=False, reason="a detector: no free text")
    marks = write_marks(tmp_path / "own.json", images, phrases=False, reason="answers carry no phrases")
    runs = [([h5], "a detector: no free text"),
            ([marks, "--images", d / "data/images.zarr"], "answers carry no phrases"),
            ([write_npz(tmp_path / "npz", images, gt_ds, phrases=False), "--phrases-reason", "CNN classifier"],
             "CNN classifier")]
    for k, (args, reason) in enumerate(runs):
        out = tmp_path / f"s{k}.zarr"
        res = xb("xbench-convert", *args, "--out", out, "--gt", d / "data/gt.zarr", "-q")
        assert res.returncode == 0, res.stderr
        assert read_submission(out).datasets["phantom"].attrs["phrases_unsupported"] == reason


def test_phrase_rows_and_a_reason_together_are_refused(phantom, tmp_path):
    d, images, gt_ds = phantom
    h5 = write_hdf5(tmp_path / "both.h5", images, gt_ds, phrases=True, reason="no")
    res = xb("xbench-convert", h5, "--out", tmp_path / "s.zarr")
    assert res.returncode == 2 and "holds phrase rows and also declares phrases_unsupported" in res.stderr


def test_messages_name_the_users_paths_never_the_work_folder(phantom, tmp_path):
    """A phrase row of the ground truth missing from the source, a non-finite map: the lines name --out."""
    d, images, gt_ds = phantom
    h5 = write_hdf5(tmp_path / "short.h5", images, gt_ds, phrases=True)
    with h5py.File(h5, "a") as f:
        g = f["phantom"]
        ids, scores, maps = g["query_id"][1:], g["query_scores"][1:], g["query_saliency"][1:]
        for k in ("query_id", "query_scores", "query_saliency"):
            del g[k]
        g["query_id"], g["query_scores"], g["query_saliency"] = ids, scores, maps
    out = tmp_path / "sub.zarr"
    res = xb("xbench-convert", h5, "--out", out, "--gt", d / "data/gt.zarr", "-q")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, lines
    assert f"{out}/phantom/query_id: 1 phrase row(s) of the ground truth are missing" in lines[0]
    assert "xbench-new" not in res.stderr and ".partial" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["short.h5"]
