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
from dataclasses import dataclass

import numpy as np

from xbench.schemas.options import MAX_CASES

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
    """The resamples of one dataset: blocks of case multiplicities (b, n) (every interval's draw; the one draw
    of this module, shared by every group and metric, and by both submissions of a paired comparison)."""
    return resample_weights(n_cases, n_resamples, stream(seed))


def _replicates(dc: DatasetCounts, weights: np.ndarray, cache: dict) -> dict[str, np.ndarray]:
    with serial_blas():
        return dataset_replicates(dc, weights, per_pair=cache)[1]


def group_indicators(labels: np.ndarray) -> tuple[list[str], np.ndarray]:
    """(the groups, sorted; their case indicators (G, N) float64): "" (a case missing a field) is no group."""
    labels = np.asarray(labels, dtype=str)
    groups = sorted(set(labels.tolist()) - {""})
    ind = np.stack([(labels == g).astype(np.float64) for g in groups]) if groups else np.zeros((0, labels.size))
    return groups, ind


def group_replicates(dc: DatasetCounts, ind: np.ndarray, *, n_resamples: int, seed: int
                     ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every summary metric per group: (point {key: (G,)}, replicates {key: (G, B)}; {} without resamples).

    A group's value is its metric on its own cases (the weights of the other cases 0); a replicate, on the drawn
    copies of its cases in the dataset's resample (:func:`case_draws`)."""
    keys = R.summary_keys()
    G = ind.shape[0]
    if G == 0:
        return {k: np.zeros(0) for k in keys}, {}
    cache: dict = {}
    point = _replicates(dc, ind, cache)
    if n_resamples <= 0:
        return point, {}
    reps = {k: [] for k in keys}
    for w in case_draws(dc.n_cases, n_resamples, seed):
        block = _replicates(dc, (w[None, :, :] * ind[:, None, :]).reshape(-1, dc.n_cases), cache)
        for k in keys:
            reps[k].append(block[k].reshape(G, -1))
    return point, {k: np.concatenate(v, axis=1) for k, v in reps.items()}


def dataset_subgroups(dc: DatasetCounts, labels: np.ndarray, *, n_resamples: int, seed: int,
                      min_group: int = DEFAULT_MIN_GROUP, level: float = 0.95) -> dict:
    """The subgroup entry of one dataset: groups (value, interval, size, ranked) and, per metric, the gap."""
    keys = R.summary_keys()
    labels = np.asarray(labels, dtype=str)
    groups, ind = group_indicators(labels)
    point, reps = group_replicates(dc, ind, n_resamples=n_resamples, seed=seed)
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


def best_worst(key: str, point: np.ndarray, ranked: np.ndarray) -> tuple[int, int] | None:
    """The rows of the best and the worst ranked group with a value on ``key`` at the point estimate (better =
    higher unless the metric says lower; ties: the first group in sorted order is best, the last worst), or
    None (fewer than two such groups)."""
    ok = [j for j in range(len(point)) if ranked[j] and defined(point[j]) is not None]
    if len(ok) < 2:
        return None
    sign = 1.0 if R.metric(key).higher_is_better else -1.0
    best = max(ok, key=lambda j: (sign * point[j], -j))
    worst = min(ok, key=lambda j: (sign * point[j], j))
    return best, worst


def _gap(key: str, groups: list[str], point: np.ndarray, reps: np.ndarray | None, ranked: np.ndarray,
         level: float) -> dict | None:
    """Best − worst ranked group on ``key`` (:func:`best_worst`), or None (< 2 groups)."""
    bw = best_worst(key, point, ranked)
    if bw is None:
        return None
    best, worst = bw
    row = paired_row("", "", key, point[best], point[worst],
                     reps[best] if reps is not None else np.zeros(0), reps[worst] if reps is not None else np.zeros(0),
                     level)
    return {"best": groups[best], "worst": groups[worst], "worst_value": defined(point[worst]),
            "gap": row["diff"], "gap_ci95": None if row["diff_lo"] is None else [row["diff_lo"], row["diff_hi"]],
            "p_value": row["p_value"] if reps is not None else None}


def dataset_labels(counts: Mapping[str, DatasetCounts], attributes: Mapping[str, Mapping], by: Sequence[str],
                   age_bands: Sequence[float] = DEFAULT_AGE_BANDS) -> dict[str, tuple[int, np.ndarray]]:
    """{dataset: (k, each case's group label)} of the scored datasets that keep the ``by`` fields; k: the
    dataset's place among every scored dataset in sorted order (its draws are ``default_rng(seed + k)``)."""
    out = {}
    for k, name in enumerate(sorted(counts)):
        attrs = attributes.get(name) or {}
        if all(f in attrs for f in by):
            out[name] = (k, group_labels(attrs, by, age_bands))
    return out


def subgroup_section(counts: Mapping[str, DatasetCounts], attributes: Mapping[str, Mapping], by: Sequence[str], *,
                     n_resamples: int, seed: int, min_group: int = DEFAULT_MIN_GROUP,
                     age_bands: Sequence[float] = DEFAULT_AGE_BANDS, level: float = 0.95) -> dict:
    """metrics.json's "subgroups" section over the scored datasets that keep the ``by`` fields; ``attributes``:
    {dataset: {field: Attribute}} in the order of ``counts[dataset].case_id`` (:func:`aligned`)."""
    datasets = {name: dataset_subgroups(counts[name], labels, n_resamples=n_resamples, seed=seed + k,
                                        min_group=min_group, level=level)
                for name, (k, labels) in dataset_labels(counts, attributes, by, age_bands).items()}
    return {"by": list(by), "age_bands": [float(b) for b in age_bands], "min_group": int(min_group),
            "keys": list(R.summary_keys()), "datasets": datasets}


def with_subgroups(result, request: dict, *, n_resamples: int, seed: int):
    """``result`` (a ScoreResult) with the "subgroups" section (``request``: the checked --by, see
    :func:`prepare`), metrics.json's schema minor raised to SUBGROUP_METRICS_MINOR at least, and each dataset's
    groups kept for paired comparisons (``result.scope_counts["subgroups"]``, saved in pair_counts.npz)."""
    attrs = {name: aligned(a, gt_ids, result.counts[name].case_id)
             for name, (gt_ids, a) in request["attributes"].items() if name in result.counts}
    by, bands, min_group = tuple(request["by"]), tuple(float(x) for x in request["age_bands"]), int(request["min_group"])
    result.metrics[SECTION] = subgroup_section(result.counts, attrs, by, n_resamples=n_resamples, seed=seed,
                                               min_group=min_group, age_bands=bands)
    result.scope_counts[SECTION] = {
        name: SubgroupCounts(labels, by, bands, min_group, k, result.counts[name])
        for name, (k, labels) in dataset_labels(result.counts, attrs, by, bands).items()}
    header = result.metrics["xbench"]
    header["schema_minor"] = max(int(header.get("schema_minor", 0) or 0), SUBGROUP_METRICS_MINOR)
    return result


# -- xbench compare: two submissions' gaps, paired ----------------------------------------------------------------
@dataclass(frozen=True)
class SubgroupCounts:
    """One dataset's groups, kept for paired comparisons (the scope's counts; pair_counts.npz
    ``<d>.subgroups.*``): each case's group label in the order of ``counts.case_id`` ("" = in no group), the
    request (``by``, ``age_bands``, ``min_group``), the dataset's place k among the scored datasets (its draws
    are ``default_rng(seed + k)``), and the dataset's class counts."""

    labels: np.ndarray
    by: tuple[str, ...]
    age_bands: tuple[float, ...]
    min_group: int
    seed_offset: int
    counts: DatasetCounts

    def same_groups(self, other: "SubgroupCounts") -> bool:
        """True when both split the same cases into the same groups under the same request."""
        return (self.by == other.by and self.age_bands == other.age_bands and self.min_group == other.min_group
                and self.seed_offset == other.seed_offset and np.array_equal(self.labels, other.labels))


#: a group label is at most this long in pair_counts.npz (32 fields of "name=value" joined by ", ")
MAX_LABEL = 32 * (32 + 1 + 64) + 31 * len(JOIN)
#: a dataset splits into at most this many groups (a cross product beyond it is refused at --by)
MAX_GROUPS = 1000


def save_counts(prefix: str, sc: SubgroupCounts) -> dict[str, np.ndarray]:
    """The scope's ``save_counts``: one dataset's groups as ``pair_counts.npz`` arrays."""
    return {f"{prefix}.group": np.asarray(sc.labels, dtype=str), f"{prefix}.by": np.asarray(sc.by, dtype=str),
            f"{prefix}.age_bands": np.asarray(sc.age_bands, dtype=np.float64),
            f"{prefix}.min_group": np.asarray(sc.min_group, dtype=np.int64),
            f"{prefix}.seed_offset": np.asarray(sc.seed_offset, dtype=np.int64)}


def counts_problems(z: Mapping[str, np.ndarray], prefix: str, where: str) -> list[str]:
    """The scope's ``counts_problems``: the arrays of :func:`save_counts` from outside, one line per problem."""
    w = f"{where}: {prefix}"
    name = prefix.rsplit(".", 1)[0]
    want = {"group": ("U", 1), "by": ("U", 1), "age_bands": ("f", 1), "min_group": ("iu", 0), "seed_offset": ("iu", 0)}
    bad = [f for f, (kinds, ndim) in want.items()
           if f"{prefix}.{f}" not in z or z[f"{prefix}.{f}"].dtype.kind not in kinds or z[f"{prefix}.{f}"].ndim != ndim]
    if bad:
        return [f"{w}.{', '.join(bad)}: missing or of the wrong type or shape"]
    problems = []
    group, case_id = z[f"{prefix}.group"], z.get(f"{name}.case_id")
    if case_id is None or group.shape != case_id.shape:
        problems.append(f"{w}.group must hold one group label per case of {name}")
    elif group.dtype.itemsize // 4 > MAX_LABEL or len(set(group.tolist()) - {""}) > MAX_GROUPS:
        problems.append(f"{w}.group holds labels over {MAX_LABEL} characters or over {MAX_GROUPS} groups")
    by, bands = z[f"{prefix}.by"], z[f"{prefix}.age_bands"]
    from xbench.schemas.attributes import FIELD_NAME

    if not 1 <= by.size <= 32 or not all(FIELD_NAME.fullmatch(str(f)) for f in by.tolist()):
        problems.append(f"{w}.by must list 1 to 32 field names")
    if bands.size > 32 or not np.all(np.isfinite(bands)):
        problems.append(f"{w}.age_bands must hold at most 32 finite ages")
    if not 1 <= int(z[f"{prefix}.min_group"]) <= MAX_CASES or not 0 <= int(z[f"{prefix}.seed_offset"]) < 2**20:
        problems.append(f"{w}.min_group / .seed_offset out of range")
    return problems


def load_counts(z: Mapping[str, np.ndarray], prefix: str, name: str) -> SubgroupCounts:
    """The scope's ``load_counts``: the inverse of :func:`save_counts` (with the dataset's class counts)."""
    from xbench.score.kernels.counts import _get as class_counts

    return SubgroupCounts(np.asarray(z[f"{prefix}.group"], dtype=str), tuple(str(f) for f in z[f"{prefix}.by"]),
                          tuple(float(x) for x in z[f"{prefix}.age_bands"]), int(z[f"{prefix}.min_group"]),
                          int(z[f"{prefix}.seed_offset"]), class_counts(z, name, name))


def _group_replicates(sc: SubgroupCounts, ind: np.ndarray, n_resamples: int, seed: int, cache: dict | None,
                      name: str | None, dataset: str):
    key = (name, dataset, SECTION, n_resamples, seed)
    if cache is not None and name is not None and key in cache:
        return cache[key]
    found = group_replicates(sc.counts, ind, n_resamples=n_resamples, seed=seed + sc.seed_offset)
    if cache is not None and name is not None:
        cache[key] = found
    return found


def paired_rows(a: Mapping[str, SubgroupCounts], b: Mapping[str, SubgroupCounts], *, n_resamples: int, seed: int,
                level: float = 0.95, per_group: bool = True, cache: dict | None = None,
                names: tuple[str, str] | None = None) -> list[dict]:
    """The scope's rows of ``xbench compare``: per dataset both split into the same groups and metric both rank
    (:func:`best_worst`), A's gap − B's gap (each its own best − worst at its point estimate), with the percentile
    interval and two-sided p-value of that difference over the same case resamples for both (:func:`case_draws`
    with ``seed + k``, as their metrics.json intervals when ``seed`` and ``n_resamples`` are the scorer's).
    Rows name ``subgroups/<dataset>`` as their dataset and ``gap`` as their class."""
    name_a, name_b = names if names is not None else (None, None)
    rows = []
    for d in sorted(set(a) & set(b)):
        sa, sb = a[d], b[d]
        if not sa.same_groups(sb) or not sa.counts.same_ground_truth(sb.counts):
            continue  # said by the compare hook (compare_lines)
        groups, ind = group_indicators(sa.labels)
        ranked = ind.sum(axis=1) >= sa.min_group
        pa, ra = _group_replicates(sa, ind, n_resamples, seed, cache, name_a, d)
        pb, rb = _group_replicates(sb, ind, n_resamples, seed, cache, name_b, d)
        for k in R.summary_keys():
            ga, gb = best_worst(k, pa[k], ranked), best_worst(k, pb[k], ranked)
            if ga is None or gb is None:
                continue
            da = ra[k][ga[0]] - ra[k][ga[1]] if ra else np.zeros(0)
            db = rb[k][gb[0]] - rb[k][gb[1]] if rb else np.zeros(0)
            rows.append(paired_row(f"{SECTION}/{d}", "gap", k, pa[k][ga[0]] - pa[k][ga[1]],
                                   pb[k][gb[0]] - pb[k][gb[1]], da, db, level))
    return rows


def compare_lines(a, b) -> list[str]:
    """The scope's ``compare`` hook: what ``xbench compare`` could not pair (two report Results that both hold the
    section), one line each; the gaps themselves are rows of its table (:func:`paired_rows`)."""
    sa, sb = a.scope_counts.get(SECTION, {}), b.scope_counts.get(SECTION, {})
    lines = []
    for d in sorted(set(a.metrics[SECTION].get("datasets", {})) | set(b.metrics[SECTION].get("datasets", {}))):
        if d not in sa or d not in sb:
            lines.append(f"{d}: gaps not compared (pair_counts.npz of {a.name if d not in sa else b.name} keeps no "
                         "groups; score it again with --by)")
        elif not sa[d].same_groups(sb[d]):
            lines.append(f"{d}: gaps not compared (the two were scored with different --by, --age-bands or "
                         "--min-group)")
    return lines


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


#: the metrics the report page shows per model (every metric is in table_subgroups.md and the CSVs)
PAGE_KEYS = ("pointing_game", "dice_best", "iou_best", "auroc", "f1")
PAGE_HEAD = ("model", "dataset", "metric", "ranked groups", "best", "worst", "worst value", "gap", "95% CI", "p")


def page_rows(results) -> list[tuple]:
    """The page's rows: per model holding the section, dataset and :data:`PAGE_KEYS` metric with a gap."""
    rows = []
    for r in results:
        sec = r.metrics.get(SECTION)
        if not isinstance(sec, dict):
            continue
        for name, entry in sorted(sec.get("datasets", {}).items()):
            n_ranked = sum(bool(g.get("ranked")) for g in entry.get("groups", {}).values())
            for k in PAGE_KEYS:
                gap = entry.get("gaps", {}).get(k)
                if gap is None:
                    continue
                ci = gap.get("gap_ci95")
                rows.append((r.name, name, k, f"{n_ranked} of {len(entry['groups'])}", gap["best"], gap["worst"],
                             _f(gap["worst_value"]), _f(gap["gap"]), "" if ci is None else f"[{_f(ci[0])}, {_f(ci[1])}]",
                             "" if gap["p_value"] is None else f"{gap['p_value']:.3f}"))
    return rows


def page(results) -> tuple[list[str], str]:
    """The report page's "Subgroups" section (Markdown lines for leaderboard.md, HTML for index.html), or
    ([], "") when no result holds one."""
    import html

    from xbench.score.outputs.cells import md_cell

    rows = page_rows(results)
    if not rows:
        return [], ""
    by = sorted({", ".join(r.metrics[SECTION].get("by", [])) for r in results if SECTION in r.metrics})
    mins = sorted({str(r.metrics[SECTION].get("min_group")) for r in results if SECTION in r.metrics})
    caption = (f"Every metric per group of cases by {' / '.join(by)} (xbench-score --by); ranked groups hold at least "
               f"{' / '.join(mins)} cases. Gap = best − worst ranked group with its 95% paired-bootstrap interval and "
               "p-value; every metric and group: table_subgroups.md and subgroups_<dataset>.csv of each result.")
    md = ["## Subgroups", "", caption, "", "| " + " | ".join(PAGE_HEAD) + " |", "|" + "---|" * len(PAGE_HEAD)]
    md += ["| " + " | ".join(md_cell(x) for x in row) + " |" for row in rows]
    head = "".join(f"<th>{html.escape(h)}</th>" for h in PAGE_HEAD)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in row) + "</tr>" for row in rows)
    return [*md, ""], (f"<h2>Subgroups</h2><p>{html.escape(caption)}</p><div class=\"scroll\"><table class=\"lb\">"
                       f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


#: bytes one row of group replicates holds besides its case weights: the threshold curves' sums and the metrics'
#: values of one resample (measured: 13-16 KiB a row with the default thresholds; the test holds the bound)
ROW_BYTES = 16 * 1024


def work_bytes(n_groups: int, n_cases: int, n_resamples: int) -> int:
    """What one block of group replicates holds at once (:func:`group_replicates`): a row per group and resample of
    the block, each with its case weights about four times over in float64 (the product, its transpose, a class's
    pairs' weights) and :data:`ROW_BYTES` of sums."""
    from xbench.score.resampling.engine import _block_sizes

    rows = n_groups * (_block_sizes(n_cases, n_resamples)[0] if n_resamples > 0 else 1)
    return rows * (4 * 8 * n_cases + ROW_BYTES)


def work_problems(name: str, fields: Sequence[str], n_groups: int, n_cases: int, n_resamples: int) -> list[str]:
    """One line when the groups' resamples would not fit half of ``--max-memory``, from the counts alone, before
    anything is allocated (550 groups of 2 cases held gigabytes a block; issue 44)."""
    from xbench.schemas.budget import MiB, limits

    need, cap = work_bytes(n_groups, n_cases, n_resamples), limits().max_memory // 2
    if need <= cap:
        return []
    return [f"--by {','.join(fields)}: {name} splits {n_cases:,} cases into {n_groups:,} groups, whose resamples "
            f"would hold {need / MiB:,.0f} MiB at once, more than half of --max-memory ({limits().max_memory / MiB:,.0f} "
            "MiB): split by fewer groups, or raise --max-memory"]


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
    for name, (_, attrs) in attributes.items():
        n_groups = len(set(group_labels(attrs, fields, bands).tolist()) - {""})
        if n_groups > MAX_GROUPS:
            problems.append(f"--by {','.join(fields)}: {name} splits into {n_groups:,} groups; at most {MAX_GROUPS:,}")
        else:
            problems += work_problems(name, fields, n_groups, len(gt.datasets[name].case_id),
                                      int(values.get("bootstrap") or 0))
    if problems:
        raise UserError(problems, _NOTHING_WRITTEN)
    return {"by": fields, "age_bands": bands, "min_group": min_group, "attributes": attributes}


def add(result, request: dict, *, bootstrap: int, seed: int):
    """``result`` with the subgroups section (:func:`with_subgroups`)."""
    return with_subgroups(result, request, n_resamples=bootstrap, seed=seed)
