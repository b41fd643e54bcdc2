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


def subset_submission(src, dst, keep: dict, *, seed=0):
    """A copy of the submission ``src`` holding only the cases ``keep`` ({dataset: case ids}) in a shuffled
    order, and the phrase rows of those cases (ids "<case id>#..." as the test stores name them: a smoke run,
    e.g. ``xbench-extract --limit``); datasets not
    in ``keep`` are left out."""
    from xbench.schemas import read_submission

    rng = np.random.default_rng(seed)
    s = read_submission(src)
    specs, data = {}, {}
    for name, d in s.datasets.items():
        if name not in keep:
            continue
        ids = d.case_id.tolist()
        rows = [ids.index(c) for c in keep[name]]
        rows = [rows[i] for i in rng.permutation(len(rows))]
        q_rows = []
        if d.query_id is not None:
            q_rows = [k for k, qid in enumerate(d.query_id.tolist()) if qid.split("#")[0] in set(keep[name])]
        reason = d.attrs.get("phrases_unsupported")
        # a model without free text: the writer records the reason when it is told of phrase rows (ids not stored)
        qids = ["unsupported"] if reason else [str(d.query_id[k]) for k in q_rows]
        specs[name] = DatasetSpec([ids[r] for r in rows], d.classes, tuple(d.saliency.shape[2:]), d.score_kind,
                                  d.unsupported, query_ids=qids, phrases_unsupported=reason)
        data[name] = (d.scores[rows], np.asarray(d.saliency[...])[rows],
                      None if not q_rows else (d.query_scores[q_rows], np.asarray(d.query_saliency[...])[q_rows]))
    w = SubmissionWriter.create(dst, model=s.attrs.get("model", "m"), method=s.attrs.get("method", "x"),
                                provenance={}, datasets=specs, cases_per_block=3,
                                map_dtype=str(next(iter(s.datasets.values())).saliency.dtype))
    for name, (scores, maps, q) in data.items():
        for b in w.blocks_todo(name):
            a, e = w.block_rows(name, b)
            w.write_block(name, b, scores[a:e], maps[a:e])
        for b in w.query_blocks_todo(name):
            a, e = w.query_block_rows(name, b)
            w.write_query_block(name, b, q[0][a:e], q[1][a:e])
    w.finish()


def restrict_gt(src, dst, keep: dict):
    """The ground truth ``src`` with only the cases ``keep`` ({dataset: case ids}; every case of a dataset not
    in it), written anew: the brute-force reference of a run scored on those cases (``--allow-missing``)."""
    from xbench.schemas import read_ground_truth
    from xbench.schemas.queries import Queries

    gt = read_ground_truth(src)
    for name, d in gt.datasets.items():
        ids = np.asarray(d.case_id, dtype=str)
        present = np.isin(ids, list(keep.get(name, ids)))
        if not present.any():
            continue
        new_row = np.cumsum(present) - 1
        ri = np.asarray(d.region_index, np.int64).reshape(-1, 2)
        regions = present[ri[:, 0]]
        masks = np.asarray(d.region_mask[...])[regions]
        kw = {}
        if d.queries is not None:
            qk = present[d.queries.case]
            if qk.any():
                kw = {"queries": Queries.of(d.queries.id[qk], new_row[d.queries.case[qk]], d.queries.category[qk]),
                      "query_mask": np.asarray(d.query_mask[...])[qk]}
        attrs = {k: v for k, v in d.attrs.items() if k not in ("classes", "grid")}
        write_ground_truth(dst, name, case_ids=ids[present], classes=list(d.classes), labels=d.labels[present],
                           region_index=np.stack([new_row[ri[regions, 0]], ri[regions, 1]], axis=1).astype(np.int32),
                           region_mask=masks, orig_size=d.orig_size[present], grid=tuple(d.grid), attrs=attrs, **kw)
