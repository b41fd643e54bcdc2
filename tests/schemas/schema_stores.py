"""Small stores built two ways: through the writer API and by hand with plain zarr (as a team would)."""
from __future__ import annotations

import numpy as np
import zarr

from xbench.schemas import DatasetSpec, SubmissionWriter, write_ground_truth

CLASSES = ["Cardiomegaly", "Nodule", "Pneumothorax"]
N = 12
GRID = (16, 16)


def case_ids(n=N):
    return [f"case-{i:03d}" for i in range(n)]


def make_gt(tmp_path):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=(N, len(CLASSES))).astype(np.int8)
    labels[0, 2] = -1
    pairs = np.argwhere(labels == 1).astype(np.int32)
    masks = np.zeros((len(pairs), *GRID), bool)
    for k, _ in enumerate(pairs):
        y, x = rng.integers(0, GRID[0] - 3, size=2)
        masks[k, y : y + 3, x : x + 3] = True
    path = tmp_path / "gt.zarr"
    write_ground_truth(path, "phantom", case_ids=case_ids(), classes=CLASSES, labels=labels,
                       region_index=pairs, region_mask=masks, orig_size=np.full((N, 2), 256), grid=GRID)
    return path


def write_submission(path, *, ids=None, classes=CLASSES, map_shape=(7, 7), score_kind="logit", seed=1, cases_per_block=5, **kw):
    ids = list(case_ids()[::-1] if ids is None else ids)
    rng = np.random.default_rng(seed)
    w = SubmissionWriter.create(path, model="test-model", method="similarity", provenance={"seed": seed},
                                datasets={"phantom": DatasetSpec(ids, classes, map_shape, score_kind, **kw)},
                                cases_per_block=cases_per_block)
    for b in w.blocks_todo("phantom"):
        s, e = w.block_rows("phantom", b)
        scores = rng.random((e - s, len(classes))) if score_kind == "probability" else rng.normal(size=(e - s, len(classes)))
        w.write_block("phantom", b, scores, rng.random((e - s, len(classes), *map_shape)))
    w.finish()
    return path




def handmade_submission(path, *, ids=None, classes=CLASSES, scores=None, saliency=None, score_kind="logit",
                        id_dtype="vlen", map_dtype="float32", chunks=4, fill_value=np.nan, root=None):
    """A submission written with plain zarr exactly as the contract describes it."""
    ids = case_ids() if ids is None else ids
    n, c = len(ids), len(classes)
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(n, c)).astype(np.float32) if scores is None else scores
    saliency = rng.random((n, c, 14, 14)).astype(map_dtype) if saliency is None else saliency
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    g.attrs["xbench"] = root or {"kind": "submission", "schema": 1, "model": "hand", "method": "similarity"}
    d = g.create_group("phantom", attributes={"classes": list(classes), "score_kind": score_kind, "unsupported": []})
    if id_dtype == "vlen":
        a = d.create_array("case_id", shape=(n,), dtype=str)
        a[:] = np.array(ids)
    else:
        d.create_array("case_id", data=np.array(ids))
    cfg = {"write_empty_chunks": True}
    d.create_array("scores", data=np.asarray(scores), chunks=(chunks, c), fill_value=fill_value, config=cfg)
    d.create_array("saliency", data=np.asarray(saliency), chunks=(chunks, c, *np.shape(saliency)[2:]), fill_value=fill_value, config=cfg)
    return path
