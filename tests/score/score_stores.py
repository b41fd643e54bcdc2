"""Tiny ground truths and submissions for the scorer tests, written through xbench.schemas.

Each builder returns the raw arrays too, so the tests can compute every metric by brute force.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xbench.schemas import DatasetSpec, SubmissionWriter, write_ground_truth


@dataclass
class GTData:
    case_ids: list
    classes: list
    labels: np.ndarray
    region_index: np.ndarray
    masks: np.ndarray
    grid: tuple


def make_gt(path, *, datasets=None, seed=0) -> dict[str, GTData]:
    """Default: two datasets with non-square grids, unlabelled pairs, a single-label class, varied regions."""
    rng = np.random.default_rng(seed)
    datasets = datasets or {
        "phantom": dict(n=14, classes=["Cardiomegaly", "Nodule/Mass", "Pneumothorax"], grid=(12, 16)),
        "chexlocalize": dict(n=9, classes=["Edema", "Atelectasis"], grid=(10, 10)),
    }
    out = {}
    for name, spec in datasets.items():
        n, classes, grid = spec["n"], spec["classes"], spec["grid"]
        labels = rng.integers(0, 2, size=(n, len(classes))).astype(np.int8)
        labels[rng.random(labels.shape) < 0.1] = -1
        if "labels" in spec:
            labels = np.asarray(spec["labels"], dtype=np.int8)
        pairs = np.argwhere(labels == 1).astype(np.int32)
        masks = np.zeros((len(pairs), *grid), bool)
        for k in range(len(pairs)):
            kind = k % 4
            if kind == 0:  # one pixel
                masks[k, rng.integers(grid[0]), rng.integers(grid[1])] = True
            elif kind == 1:  # whole grid
                masks[k] = True
            else:
                y, x = rng.integers(0, grid[0] - 2), rng.integers(0, grid[1] - 2)
                hh, ww = rng.integers(1, grid[0] - y + 1), rng.integers(1, grid[1] - x + 1)
                masks[k, y:y + hh, x:x + ww] = True
        ids = [f"{name}-{i:03d}" for i in range(n)]
        write_ground_truth(path, name, case_ids=ids, classes=classes, labels=labels, region_index=pairs,
                           region_mask=masks, orig_size=np.full((n, 2), 512), grid=grid)
        out[name] = GTData(ids, classes, labels, pairs, masks, grid)
    return out


@dataclass
class SubData:
    case_ids: list
    classes: list
    scores: np.ndarray
    saliency: np.ndarray
    score_kind: str
    unsupported: tuple


def make_submission(path, gt: dict[str, GTData], *, seed=1, map_shape=(7, 5), score_kind="logit",
                    map_dtype="float16", shuffle=True, unsupported=None, reverse_classes=True,
                    cases_per_block=4, quantise=False, datasets=None) -> dict[str, SubData]:
    """Random submission covering ``gt``; cases shuffled and classes reversed unless told otherwise."""
    rng = np.random.default_rng(seed)
    specs, data = {}, {}
    for name, g in gt.items():
        if datasets is not None and name not in datasets:
            continue
        ids = list(g.case_ids)
        if shuffle:
            ids = [ids[i] for i in rng.permutation(len(ids))]
        classes = list(g.classes)[::-1] if reverse_classes else list(g.classes)
        n, c = len(ids), len(classes)
        if score_kind == "probability":
            scores = rng.random((n, c)).astype(np.float32)
            scores[0, 0] = 0.5  # exactly on the decision threshold: predicted positive
        else:
            scores = rng.normal(size=(n, c)).astype(np.float32)
            scores[0, 0] = 0.0  # sigmoid(0) = 0.5 exactly
        maps = rng.standard_normal((n, c, *map_shape))
        if quantise:
            maps = np.round(maps * 4) / 4  # many exact ties and on-threshold values
        maps[1 % n, 0] = 2.5  # a constant map
        maps = maps.astype(map_dtype)
        uns = tuple((unsupported or {}).get(name, ()))
        specs[name] = DatasetSpec(ids, classes, map_shape, score_kind, uns)
        data[name] = SubData(ids, classes, scores, maps, score_kind, uns)
    w = SubmissionWriter.create(path, model="test-model", method="similarity", provenance={"seed": seed},
                                datasets=specs, cases_per_block=cases_per_block, map_dtype=map_dtype)
    for name, d in data.items():
        for b in w.blocks_todo(name):
            s, e = w.block_rows(name, b)
            w.write_block(name, b, d.scores[s:e], d.saliency[s:e])
    w.finish()
    return data


def run_score_cli(args, capsys):
    """Run ``xbench-score`` in-process: (exit code, stdout, stderr)."""
    import pytest

    from xbench.score.cli import main

    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err
