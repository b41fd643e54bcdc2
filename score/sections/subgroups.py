"""Subgroups: does grounding hold for every patient group? (``xbench-score --by FIELD[,FIELD]``; issue 38).

For each dataset whose ground truth keeps case attributes (gt.zarr ``attributes/``, schemas/attributes.py), the
cases are split by the ``--by`` fields (several fields: their cross product; ``age`` in ``--age-bands``; a case
missing any of the fields is in no group and is counted as missing). For every group, every dataset-summary
metric of metrics.json (the registry's summary keys: grounding means over classes, AUROC, F1, ...) is computed on
the group's cases exactly as on the whole dataset (best τ searched on the group), with its 95 % percentile
bootstrap interval. Among the groups of at least ``--min-group`` cases (the *ranked* groups; smaller ones are
reported, never ranked), per metric: the best and the worst group at the point estimate, the **gap** best −
worst (the worst group's value beside it), with the paired-bootstrap interval and two-sided p-value of that gap
(:func:`xbench.score.resampling.intervals.paired_row`, the one p-value rule of ``xbench compare``).

Resampling: one draw per resample over all the dataset's cases (:func:`case_draws`, multinomial as every
interval of metrics.json, seeded ``default_rng(seed)`` per dataset in sorted order); a group's replicate is its
metric on the drawn copies of its own cases. The draws are shared by every group and metric, so a gap's two
sides see the same resample. Definitions: docs/contract.md, "Subgroups".
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from xbench.score.metrics import registry as R
from xbench.score.resampling.bootstrap import dataset_replicates, serial_blas
from xbench.score.resampling.engine import resample_weights, stream
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.resampling.intervals import defined, paired_row, percentile_interval

SECTION = "subgroups"
#: metrics.json schema minor that adds the "subgroups" section (only with --by)
SUBGROUP_METRICS_MINOR = 9
DEFAULT_MIN_GROUP = 20
DEFAULT_AGE_BANDS = (40.0, 60.0, 80.0)
#: the label of a cross-product group joins "field=value" parts with this
JOIN = ", "


def group_labels(attributes: Mapping, by: Sequence[str], age_bands: Sequence[float] = DEFAULT_AGE_BANDS) -> np.ndarray:
    """Each case's group label ("sex=F", "sex=F, age=40-59"); "" when any ``by`` field is missing for it.

    ``attributes``: {field: Attribute} (schemas/attributes.py). A number field is banded by ``age_bands``."""
    from xbench.schemas.attributes import banded

    parts = []
    for f in by:
        a = attributes[f]
        v = banded(a.values, tuple(age_bands)) if a.kind == "number" else np.asarray(a.values, dtype=str)
        parts.append(v)
    n = len(parts[0]) if parts else 0
    out = np.empty(n, dtype=object)
    for i in range(n):
        vals = [p[i] for p in parts]
        out[i] = "" if any(v == "" for v in vals) else JOIN.join(f"{f}={v}" for f, v in zip(by, vals))
    return out.astype(str)


def case_draws(n_cases: int, n_resamples: int, seed: int):
    """The resamples of one dataset: blocks of case multiplicities (b, n) (every interval's draw)."""
    return resample_weights(n_cases, n_resamples, stream(seed))


def _replicates(dc: DatasetCounts, weights: np.ndarray, cache: dict) -> dict[str, np.ndarray]:
    with serial_blas():
        return dataset_replicates(dc, weights, per_pair=cache)[1]


def dataset_subgroups(dc: DatasetCounts, labels: np.ndarray, *, n_resamples: int, seed: int,
                      min_group: int = DEFAULT_MIN_GROUP, level: float = 0.95) -> dict:
    """The subgroup entry of one dataset: groups (value, interval, size, ranked) and, per metric, the gap."""
    keys = R.summary_keys()
    labels = np.asarray(labels, dtype=str)
    groups = sorted(set(labels.tolist()) - {""})
    ind = np.stack([(labels == g).astype(np.float64) for g in groups]) if groups else np.zeros((0, dc.n_cases))
    cache: dict = {}
    point = _replicates(dc, ind, cache) if groups else {k: np.zeros(0) for k in keys}
    reps = {k: [] for k in keys}
    if n_resamples > 0 and groups:
        for w in case_draws(dc.n_cases, n_resamples, seed):
            block = _replicates(dc, (w[None, :, :] * ind[:, None, :]).reshape(-1, dc.n_cases), cache)
            for k in keys:
                reps[k].append(block[k].reshape(len(groups), -1))
    reps = {k: np.concatenate(v, axis=1) for k, v in reps.items()} if n_resamples > 0 and groups else {}
    sizes = ind.sum(axis=1).astype(int)
    out_groups = {}
    for j, g in enumerate(groups):
        entry = {"n_cases": int(sizes[j]), "ranked": bool(sizes[j] >= min_group)}
        entry.update({k: defined(point[k][j]) for k in keys})
        if reps:
            entry["ci95"] = {k: percentile_interval(reps[k][j], level) for k in keys}
        out_groups[g] = entry
    gaps = {k: _gap(k, groups, point[k], reps.get(k), sizes >= min_group, level) for k in keys}
    return {"n_cases": int(dc.n_cases), "n_missing": int((labels == "").sum()), "groups": out_groups,
            "gaps": {k: v for k, v in gaps.items() if v is not None}}


def _gap(key: str, groups: list[str], point: np.ndarray, reps: np.ndarray | None, ranked: np.ndarray,
         level: float) -> dict | None:
    """Best − worst ranked group on ``key`` (better = higher unless the metric says lower), or None (< 2 groups)."""
    ok = [j for j in range(len(groups)) if ranked[j] and defined(point[j]) is not None]
    if len(ok) < 2:
        return None
    sign = 1.0 if R.metric(key).higher_is_better else -1.0
    best = max(ok, key=lambda j: (sign * point[j], -j))
    worst = min(ok, key=lambda j: (sign * point[j], j))
    row = paired_row("", "", key, point[best], point[worst],
                     reps[best] if reps is not None else np.zeros(0), reps[worst] if reps is not None else np.zeros(0),
                     level)
    return {"best": groups[best], "worst": groups[worst], "worst_value": defined(point[worst]),
            "gap": row["diff"], "gap_ci95": None if row["diff_lo"] is None else [row["diff_lo"], row["diff_hi"]],
            "p_value": row["p_value"] if reps is not None else None}


def subgroup_section(counts: Mapping[str, DatasetCounts], attributes: Mapping[str, Mapping], by: Sequence[str], *,
                     n_resamples: int, seed: int, min_group: int = DEFAULT_MIN_GROUP,
                     age_bands: Sequence[float] = DEFAULT_AGE_BANDS, level: float = 0.95) -> dict:
    """metrics.json's "subgroups" section over the scored datasets that keep the ``by`` fields; ``attributes``:
    {dataset: {field: Attribute}} in the order of ``counts[dataset].case_id`` (:func:`aligned`)."""
    datasets = {}
    for k, name in enumerate(sorted(counts)):
        attrs = attributes.get(name) or {}
        if not all(f in attrs for f in by):
            continue
        dc = counts[name]
        datasets[name] = dataset_subgroups(dc, group_labels(attrs, by, age_bands), n_resamples=n_resamples, seed=seed + k,
                                           min_group=min_group, level=level)
    return {"by": list(by), "age_bands": [float(b) for b in age_bands], "min_group": int(min_group),
            "keys": list(R.summary_keys()), "datasets": datasets}


def with_subgroups(result, request: dict, *, n_resamples: int, seed: int):
    """``result`` (a ScoreResult) with the "subgroups" section (``request``: the checked --by, see
    score/cli.py) and metrics.json's schema minor raised to SUBGROUP_METRICS_MINOR at least."""
    attrs = {name: aligned(a, gt_ids, result.counts[name].case_id)
             for name, (gt_ids, a) in request["attributes"].items() if name in result.counts}
    result.metrics[SECTION] = subgroup_section(result.counts, attrs, request["by"], n_resamples=n_resamples, seed=seed,
                                               min_group=request["min_group"], age_bands=request["age_bands"])
    header = result.metrics["xbench"]
    header["schema_minor"] = max(int(header.get("schema_minor", 0) or 0), SUBGROUP_METRICS_MINOR)
    return result


def aligned(attributes: Mapping, gt_case_ids: np.ndarray, case_ids: np.ndarray) -> dict:
    """``attributes`` (rows in the ground truth's case order) reordered to the scored cases ``case_ids``."""
    from xbench.schemas.attributes import Attribute

    row = {str(c): i for i, c in enumerate(np.asarray(gt_case_ids, dtype=str))}
    take = np.asarray([row[str(c)] for c in case_ids], dtype=np.int64)
    return {f: Attribute(np.asarray(a.values)[take], a.kind, a.source) for f, a in attributes.items()}


def by_group_frame(entry: dict, keys: Sequence[str]):
    """One dataset's groups as fairlearn's ``MetricFrame.by_group`` is shaped: index = group, columns = metrics."""
    import pandas as pd

    rows = {g: {k: e.get(k) for k in keys} for g, e in entry["groups"].items()}
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=list(keys), dtype=float)
    frame.index.name = "group"
    return frame


def write_subgroup_tables(metrics: dict, folder, label: str) -> list:
    """``subgroups_<dataset>.csv`` (MetricFrame.by_group's shape, plus n_cases and ranked) and
    ``table_subgroups.md`` (per dataset and metric: worst group, gap, interval, p)."""
    from pathlib import Path

    from xbench.score.outputs.cells import md_cell

    sec = metrics.get(SECTION) or {}
    keys = sec.get("keys", [])
    paths = []
    lines = [f"## Subgroups by {', '.join(sec.get('by', []))} ({label})", "",
             f"Ranked groups hold at least {sec.get('min_group')} cases; the gap is best - worst with its 95% "
             "paired-bootstrap interval and p-value.", "",
             "| dataset | metric | best | worst | worst value | gap | 95% CI | p |", "|---|---|---|---|---|---|---|---|"]
    for name, entry in sec.get("datasets", {}).items():
        frame = by_group_frame(entry, keys)
        frame.insert(0, "ranked", [entry["groups"][g]["ranked"] for g in frame.index])
        frame.insert(0, "n_cases", [entry["groups"][g]["n_cases"] for g in frame.index])
        path = Path(folder) / f"subgroups_{name}.csv"
        frame.to_csv(path)
        paths.append(path)
        for k, gap in entry["gaps"].items():
            ci = gap["gap_ci95"]
            lines.append("| " + " | ".join(md_cell(x) for x in (
                name, k, gap["best"], gap["worst"], _f(gap["worst_value"]), _f(gap["gap"]),
                "" if ci is None else f"[{_f(ci[0])}, {_f(ci[1])}]",
                "" if gap["p_value"] is None else f"{gap['p_value']:.3f}")) + " |")
    path = Path(folder) / "table_subgroups.md"
    path.write_text("\n".join(lines) + "\n")
    return [*paths, path]


def _f(v) -> str:
    return "" if v is None else f"{v:.3f}"


def prepare(values: dict, gt, names, submissions) -> dict | None:
    """--by's fields, bands and minimum group size, checked against the scored datasets' case attributes before
    anything is scored; None without --by."""
    by, age_bands, min_group = values.get("by"), values.get("age_bands", "40,60,80"), values.get("min_group", 20)
    if by is None:
        return None
    from xbench.schemas._cli import NOT_WRITTEN_HINT as _NOTHING_WRITTEN, UserError
    from xbench.schemas.attributes import FIELD_NAME, read_attributes
    from xbench.schemas.store import open_store_group

    fields = [f.strip() for f in by.split(",") if f.strip()]
    if not fields or len(set(fields)) != len(fields) or not all(FIELD_NAME.fullmatch(f) for f in fields):
        raise UserError(f"--by {by!r}: give field names separated by commas, each once (e.g. sex or sex,view)",
                        _NOTHING_WRITTEN)
    try:
        bands = tuple(sorted(float(x) for x in age_bands.split(",") if x.strip()))
    except ValueError:
        bands = ()
    if not bands or any(not (0 <= b <= 130) for b in bands) or len(set(bands)) != len(bands):
        raise UserError(f"--age-bands {age_bands!r}: give ages in years, e.g. 40,60,80", _NOTHING_WRITTEN)
    root = open_store_group(gt.path)
    attributes, problems = {}, []
    for name in (names or sorted(gt.datasets)):
        attrs = read_attributes(root[name])
        lacking = [f for f in fields if f not in attrs]
        if lacking:
            problems.append(f"--by {', '.join(lacking)}: {name} in {gt.path} has no such case attribute (it has "
                            f"{', '.join(sorted(attrs)) or 'none'})")
            continue
        bad = [f for f in fields if attrs[f].kind == "number" and f != "age"]
        if bad:
            problems.append(f"--by {', '.join(bad)}: a number field; only age is banded (--age-bands)")
        attributes[name] = (np.asarray(gt.datasets[name].case_id, dtype=str), attrs)
    if problems:
        raise UserError(problems, _NOTHING_WRITTEN)
    return {"by": fields, "age_bands": bands, "min_group": min_group, "attributes": attributes}


def add(result, request: dict, *, bootstrap: int, seed: int):
    """``result`` with the subgroups section (:func:`with_subgroups`)."""
    return with_subgroups(result, request, n_resamples=bootstrap, seed=seed)
