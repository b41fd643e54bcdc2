"""Subgroups: does grounding hold for every patient group? (``xbench-score --by FIELD[,FIELD]``; issue 38).

For each dataset whose ground truth keeps case attributes (gt.zarr ``attributes/``, schemas/attributes.py), the
cases are split by the ``--by`` fields (several fields: their cross product; ``age`` in ``--age-bands``; a case
missing any of the fields is in no group and is counted as missing). For every group, every dataset-summary
metric of metrics.json (the registry's summary keys: grounding means over classes, AUROC, F1, ...) is computed on
the group's cases exactly as on the whole dataset (best τ searched on the group), with its 95 % percentile
bootstrap interval. Among the groups of at least ``--min-group`` cases (the *ranked* groups; smaller ones are
reported, never ranked), per metric: the best and the worst group at the point estimate (ties: the first tied
group in sorted order is best, the last worst), the **gap** best − worst, the worst group's value and fairlearn's
between-groups ratio beside it; the gap's 95 % interval comes from a simultaneous bootstrap band over the ranked
groups (:func:`gap_interval`: a fixed pair chosen on the point estimate, or a percentile interval of best - worst
re-chosen in each resample, is biased away from 0 and holds 0 far less often than 95 % when groups do not
differ); its p-value is a
permutation test of the group labels (:func:`permutation_p`; DiCiccio, Vasudevan, Basu, Kenthapadi & Agarwal 2020,
"Evaluating fairness using permutation tests"): exact under the null that the labels are exchangeable, floored at
1/(B+1) by construction, and Holm-adjusted over every gap of the section (:func:`holm_gaps`).

Resampling: one draw per resample over all the dataset's cases (:func:`case_draws`): the dataset's own draws in
the run's one stream, the resamples of its metrics.json intervals; a group's replicate is its metric on the drawn
copies of its own cases. Permutations: the dataset's own permutation stream (``default_rng([seed, *name bytes])``).
Definitions: docs/contract.md, "Subgroups" and "Resampling".
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from xbench.schemas.schema_versions import minor
from xbench.schemas.options import MAX_CASES

from xbench.score.metrics import registry as R
from xbench.score.resampling.bootstrap import dataset_replicates, serial_blas
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.resampling.engine import (holm, holm_family, holm_floor_note, label_permutations, permutation_stream,
                                            positioned_stream, prior_units, resample_weights, significant)
from xbench.score.resampling.intervals import defined, paired_row, percentile_interval, test_identity

SECTION = "subgroups"
#: metrics.json schema minor that adds the "subgroups" section (only with --by)
SUBGROUP_METRICS_MINOR = minor("metrics", "subgroups")
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


def case_draws(n_cases: int, bootstrap: int, seed: int, prior: Sequence[int] = ()):
    """The resamples of one dataset: blocks of case multiplicities (b, n), its own draws in the run's one stream
    (:func:`xbench.score.resampling.engine.positioned_stream`: ``default_rng(seed)`` past the ``prior`` datasets'
    draws), so row r is the resample behind row r of the dataset's metrics.json intervals. Shared by every group,
    metric and gap, and by both submissions of a paired comparison."""
    return resample_weights(n_cases, bootstrap, positioned_stream(prior, bootstrap, seed))


def _replicates(dc: DatasetCounts, weights: np.ndarray, cache: dict, taus: Mapping | None = None
                ) -> dict[str, np.ndarray]:
    with serial_blas():
        return dataset_replicates(dc, weights, taus=taus, per_pair=cache)[1]


def dataset_taus(dc: DatasetCounts) -> dict[str, dict[str, int]]:
    """{class: {tau key: index}}: the best thresholds the whole dataset chose at the point estimate (the metrics.json
    ``tau_dice``/``tau_iou`` of each class), to score every group at them."""
    from xbench.score.metrics.estimates import class_grounding_point

    out = {}
    for c, name in enumerate(dc.classes):
        idx = dc.class_pairs(c)
        if idx.size:
            out[str(name)] = class_grounding_point(dc, idx)[1]
    return out


def tau_keys() -> list[str]:
    """The summary keys whose value depends on a chosen best threshold (they differ at the dataset's τ)."""
    return [k for k in R.summary_keys() if isinstance(getattr(R.metric(k), "threshold", None), (R.Best, R.ChosenBy))]


def group_indicators(labels: np.ndarray) -> tuple[list[str], np.ndarray]:
    """(the groups, sorted; their case indicators (G, N) float64): "" (a case missing a field) is no group."""
    labels = np.asarray(labels, dtype=str)
    groups = sorted(set(labels.tolist()) - {""})
    ind = np.stack([(labels == g).astype(np.float64) for g in groups]) if groups else np.zeros((0, labels.size))
    return groups, ind


def _per_group(dc: DatasetCounts, blocks, G: int, cache: dict, taus: Mapping | None = None) -> dict[str, np.ndarray]:
    """Every summary key on each (G, b, N) block of group weights: {key: (G, sum of b)}."""
    keys = R.summary_keys()
    out = {k: [] for k in keys}
    for wg in blocks:
        block = _replicates(dc, wg.reshape(-1, dc.n_cases), cache, taus)
        for k in keys:
            out[k].append(block[k].reshape(G, -1))
    return {k: np.concatenate(v, axis=1) if v else np.zeros((G, 0)) for k, v in out.items()}


def group_replicates(dc: DatasetCounts, ind: np.ndarray, *, bootstrap: int, seed: int, prior: Sequence[int] = (),
                     taus: Mapping | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every summary metric per group: (point {key: (G,)}, replicates {key: (G, B)}; {} without resamples).

    A group's value is its metric on its own cases (the weights of the other cases 0); a replicate, on the drawn
    copies of its cases in the dataset's resample (:func:`case_draws`). ``taus``: every group at these fixed
    thresholds (:func:`dataset_taus`) instead of its own best ones."""
    keys = R.summary_keys()
    G = ind.shape[0]
    if G == 0:
        return {k: np.zeros(0) for k in keys}, {}
    cache: dict = {}
    point = _replicates(dc, ind, cache, taus)
    if bootstrap <= 0:
        return point, {}
    blocks = (w[None, :, :] * ind[:, None, :] for w in case_draws(dc.n_cases, bootstrap, seed, prior))
    return point, _per_group(dc, blocks, G, cache, taus)


def group_permutations(dc: DatasetCounts, labels: np.ndarray, groups: Sequence[str], *, n_permutations: int,
                       seed: int, dataset: str, taus: Mapping | None = None) -> dict[str, np.ndarray]:
    """Every summary metric per group when the group labels are permuted among the labelled cases: {key: (G, P)}.

    Permutation r (:func:`xbench.score.resampling.engine.label_permutations` from the dataset's
    :func:`~xbench.score.resampling.engine.permutation_stream`): the j-th labelled case (in case order) takes the
    label of the ``perm[r, j]``-th; group sizes are kept, cases in no group stay out."""
    labels = np.asarray(labels, dtype=str)
    G = len(groups)
    if G == 0 or n_permutations <= 0:
        return {}
    where = np.flatnonzero(labels != "")
    code = np.searchsorted(np.asarray(groups, dtype=str), labels[where])

    def blocks():
        for perm in label_permutations(where.size, n_permutations, permutation_stream(seed, dataset)):
            wg = np.zeros((G, perm.shape[0], dc.n_cases))
            rows = np.repeat(np.arange(perm.shape[0]), where.size)
            wg[code[perm].ravel(), rows, np.tile(where, perm.shape[0])] = 1.0
            yield wg

    return _per_group(dc, blocks(), G, {}, taus)


def spread(values: np.ndarray, ranked: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """The gap best - worst over the ranked groups defined in each column of ``values`` (G, R): max - min
    (lower-is-better metrics: min - max, so a gap is negative there); NaN where fewer than two ranked groups
    have a value. The best and worst groups are re-chosen in every column."""
    v = np.where(np.asarray(ranked, bool)[:, None], np.asarray(values, np.float64).reshape(len(ranked), -1), np.nan)
    if v.shape[0] == 0:
        return np.full(v.shape[1], np.nan)
    hi, lo = np.fmax.reduce(v, axis=0), np.fmin.reduce(v, axis=0)  # NaN-skipping, no all-NaN warning
    gap = hi - lo if higher_is_better else lo - hi
    return np.where(np.sum(~np.isnan(v), axis=0) >= 2, gap, np.nan)


#: permuted gaps within this (relative, at least absolute 1e-12) of the observed one count as reaching it: a
#: permutation that reproduces the observed groups sums the same values in another order (last bits)
GAP_TIE = 1e-12


def permutation_p(observed: float, permuted: np.ndarray) -> float | None:
    """The permutation p of a gap: (1 + #{|permuted gap| >= |observed| - tol}) / (1 + #defined permuted gaps), tol
    = :data:`GAP_TIE` x max(1, |observed|); at least 1/(P+1) by construction; None without permutations or an
    observed gap."""
    perm = np.asarray(permuted, dtype=np.float64)
    perm = np.abs(perm[~np.isnan(perm)])
    if observed is None or np.isnan(observed) or perm.size == 0:
        return None
    obs = abs(float(observed))
    return float((1 + np.count_nonzero(perm >= obs - GAP_TIE * max(1.0, obs))) / (1 + perm.size))


def gap_interval(point: np.ndarray, replicates: np.ndarray, ranked: np.ndarray, higher_is_better: bool,
                 level: float = 0.95) -> list[float] | None:
    """The gap's interval from a simultaneous bootstrap band over the ranked groups (max-type, as in Cherian &
    Candès 2023, "Statistical inference for fairness auditing"). Over the ranked groups g with a value: s_g the
    standard deviation (ddof 0) of the group's defined replicates, t_r = max_g |rep_gr - value_g| / s_g per
    resample (a group with s_g = 0 adds 0), c the ``level`` quantile (``numpy.percentile``) of the t_r; every
    group's band is value_g -/+ c s_g, and the gap (higher is better) lies in [max(0, max_g lo_g - min_g hi_g),
    max_g hi_g - min_g lo_g] whenever every band holds its group's true value, so at least ``level`` of the time;
    lower-is-better metrics: the mirror image (a negative gap). The lower end is 0 exactly when the bands overlap.
    None with fewer than two such groups or no resample."""
    point = np.asarray(point, np.float64)
    reps = np.asarray(replicates, np.float64).reshape(point.size, -1)
    ok = np.asarray(ranked, bool) & ~np.isnan(point)
    if np.count_nonzero(ok) < 2 or reps.shape[1] == 0:
        return None
    v, r = point[ok], reps[ok]
    defined_r = ~np.isnan(r)
    if not defined_r.any():
        return None
    sd = np.array([r[j][defined_r[j]].std() if defined_r[j].any() else 0.0 for j in range(v.size)])
    dev = np.abs(r - v[:, None])
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(sd[:, None] > 0, dev / np.where(sd > 0, sd, 1.0)[:, None], 0.0)
    t = np.fmax.reduce(np.where(defined_r, t, np.nan), axis=0)  # per resample, over its defined groups
    c = float(np.percentile(t[~np.isnan(t)], 100.0 * level))
    lo, hi = v - c * sd, v + c * sd
    lower, upper = max(0.0, float(lo.max() - hi.min())), float(hi.max() - lo.min())
    return [lower, upper] if higher_is_better else [-upper, -lower]


def gap_ratio(values: np.ndarray, ranked: np.ndarray) -> float | None:
    """fairlearn's ``MetricFrame.ratio(method="between_groups")`` over the ranked groups with a value: the
    smallest value / the largest; None when the largest is not positive or a value is negative."""
    v = np.asarray(values, np.float64)[np.asarray(ranked, bool)]
    v = v[~np.isnan(v)]
    if v.size < 2 or v.max() <= 0 or v.min() < 0:
        return None
    return float(v.min() / v.max())


def dataset_subgroups(dc: DatasetCounts, labels: np.ndarray, *, bootstrap: int, seed: int,
                      prior: Sequence[int] = (), dataset: str = "", min_group: int = DEFAULT_MIN_GROUP,
                      level: float = 0.95) -> tuple[dict, dict]:
    """The subgroup entry of one dataset (groups: value, interval, size, ranked; per metric, the gap, with every
    group at its own best threshold; ``gaps_dataset_tau``: the threshold-dependent metrics again with every group
    at the dataset's own best thresholds) and {(gap table, key): the permuted gaps (P,)} for :func:`holm_gaps`."""
    keys = R.summary_keys()
    labels = np.asarray(labels, dtype=str)
    groups, ind = group_indicators(labels)
    sizes = ind.sum(axis=1).astype(int)
    ranked = sizes >= min_group
    out_groups = {g: {"n_cases": int(sizes[j]), "ranked": bool(ranked[j])} for j, g in enumerate(groups)}
    entry = {"n_cases": int(dc.n_cases), "n_missing": int((labels == "").sum()), "groups": out_groups}
    permuted = {}
    dtaus = dataset_taus(dc)
    for table, taus, which in (("gaps", None, keys), ("gaps_dataset_tau", dtaus, tau_keys())):
        if not which:
            continue
        point, reps = group_replicates(dc, ind, bootstrap=bootstrap, seed=seed, prior=prior, taus=taus)
        perms = group_permutations(dc, labels, groups, n_permutations=bootstrap, seed=seed, dataset=dataset,
                                   taus=taus)
        for j, g in enumerate(groups):
            target = out_groups[g] if taus is None else out_groups[g].setdefault("at_dataset_tau", {})
            target.update({k: defined(point[k][j]) for k in which})
            if reps:
                target["ci95"] = {k: percentile_interval(reps[k][j], level) for k in which}
        entry[table] = {}
        for k in which:
            found = _gap(k, groups, point[k], reps.get(k), perms.get(k), ranked, level)
            if found is not None:
                entry[table][k], permuted[(table, k)] = found
    return entry, permuted


def best_worst(key: str, point: np.ndarray, ranked: np.ndarray) -> tuple[int, int] | None:
    """The rows of the best and the worst ranked group with a value on ``key`` at the point estimate (better =
    higher unless the metric says lower), or None (fewer than two such groups). Ties: the best is the first of
    the tied groups in sorted label order, the worst the last, so they are two different groups."""
    ok = [j for j in range(len(point)) if ranked[j] and defined(point[j]) is not None]
    if len(ok) < 2:
        return None
    sign = 1.0 if R.metric(key).higher_is_better else -1.0
    best = max(ok, key=lambda j: (sign * point[j], -j))
    worst = min(ok, key=lambda j: (sign * point[j], -j))
    return best, worst


def _gap(key: str, groups: list[str], point: np.ndarray, reps: np.ndarray | None, perms: np.ndarray | None,
         ranked: np.ndarray, level: float) -> tuple[dict, np.ndarray] | None:
    """Best - worst ranked group on ``key`` (:func:`best_worst`) with its interval (best and worst re-chosen in
    every resample, :func:`spread`) and permutation p (:func:`permutation_p`), and the permuted gaps; None (< 2
    groups)."""
    bw = best_worst(key, point, ranked)
    if bw is None:
        return None
    best, worst = bw
    higher = R.metric(key).higher_is_better
    gap = defined(point[best] - point[worst])
    permuted = spread(perms, ranked, higher) if perms is not None else np.zeros(0)
    ci = gap_interval(point, reps, ranked, higher, level) if reps is not None else None
    return ({"best": groups[best], "worst": groups[worst], "worst_value": defined(point[worst]), "gap": gap,
             "ratio": gap_ratio(point, ranked), "gap_ci95": ci,
             "p_value": permutation_p(gap, permuted) if perms is not None else None}, permuted)


def holm_gaps(datasets: dict, permuted: Mapping[str, Mapping[tuple[str, str], np.ndarray]]) -> int:
    """Holm over every gap of the section (all datasets, both threshold choices and keys; identical tests once,
    :func:`xbench.score.resampling.engine.holm_family`): sets each gap's ``p_holm`` and ``significant``; returns m."""
    where = [(d, t, k) for d in datasets for t in GAP_TABLES for k in datasets[d].get(t, {})]
    ps = [datasets[d][t][k]["p_value"] for d, t, k in where]
    tests = [test_identity(permuted[d][(t, k)], datasets[d][t][k]["gap"]) for d, t, k in where]
    adjusted, m = holm_family(ps, tests)
    for (d, t, k), p in zip(where, adjusted, strict=True):
        datasets[d][t][k]["p_holm"] = p
        datasets[d][t][k]["significant"] = significant(p)
    return m


#: the gap tables of a dataset's entry: every group at its own best threshold, then at the dataset's
GAP_TABLES = ("gaps", "gaps_dataset_tau")


def dataset_labels(counts: Mapping[str, DatasetCounts], attributes: Mapping[str, Mapping], by: Sequence[str],
                   age_bands: Sequence[float] = DEFAULT_AGE_BANDS) -> dict[str, tuple[tuple[int, ...], np.ndarray]]:
    """{dataset: (prior, each case's group label)} of the scored datasets that keep the ``by`` fields; prior: the
    case counts of the scored datasets before it in sorted order (where its draws start in the run's one stream,
    :func:`xbench.score.resampling.engine.positioned_stream`)."""
    units = {name: int(counts[name].n_cases) for name in counts}
    out = {}
    for name in sorted(counts):
        attrs = attributes.get(name) or {}
        if all(f in attrs for f in by):
            out[name] = (prior_units(units, name), group_labels(attrs, by, age_bands))
    return out


def subgroup_section(counts: Mapping[str, DatasetCounts], attributes: Mapping[str, Mapping], by: Sequence[str], *,
                     bootstrap: int, seed: int, min_group: int = DEFAULT_MIN_GROUP,
                     age_bands: Sequence[float] = DEFAULT_AGE_BANDS, level: float = 0.95) -> dict:
    """metrics.json's "subgroups" section over the scored datasets that keep the ``by`` fields; ``attributes``:
    {dataset: {field: Attribute}} in the order of ``counts[dataset].case_id`` (:func:`aligned`)."""
    datasets, permuted = {}, {}
    for name, (prior, labels) in dataset_labels(counts, attributes, by, age_bands).items():
        datasets[name], permuted[name] = dataset_subgroups(
            counts[name], labels, bootstrap=bootstrap, seed=seed, prior=prior, dataset=name,
            min_group=min_group, level=level)
    m = holm_gaps(datasets, permuted)
    out = {"by": list(by), "age_bands": [float(b) for b in age_bands], "min_group": int(min_group),
           "keys": list(R.summary_keys()), "thresholds": {"gaps": "group", "gaps_dataset_tau": "dataset"},
           "gap_test": "permutation", "holm_m": m,
           "datasets": datasets}
    note = holm_floor_note(m, bootstrap) if bootstrap > 0 else None
    if note:
        out["note"] = note
    return out


def with_subgroups(result, request: dict, *, bootstrap: int, seed: int):
    """``result`` (a ScoreResult) with the "subgroups" section (``request``: the checked --by, see
    :func:`prepare`), metrics.json's schema minor raised to SUBGROUP_METRICS_MINOR at least, and each dataset's
    groups kept for paired comparisons (``result.scope_counts["subgroups"]``, saved in pair_counts.npz)."""
    attrs = {name: aligned(a, gt_ids, result.counts[name].case_id)
             for name, (gt_ids, a) in request["attributes"].items() if name in result.counts}
    by, bands, min_group = tuple(request["by"]), tuple(float(x) for x in request["age_bands"]), int(request["min_group"])
    result.metrics[SECTION] = subgroup_section(result.counts, attrs, by, bootstrap=bootstrap, seed=seed,
                                               min_group=min_group, age_bands=bands)
    result.scope_counts[SECTION] = {
        name: SubgroupCounts(labels, by, bands, min_group, prior, result.counts[name])
        for name, (prior, labels) in dataset_labels(result.counts, attrs, by, bands).items()}
    header = result.metrics["xbench"]
    header["schema_minor"] = max(int(header.get("schema_minor", 0) or 0), SUBGROUP_METRICS_MINOR)
    return result


# -- xbench compare: two submissions' gaps, paired ----------------------------------------------------------------
@dataclass(frozen=True)
class SubgroupCounts:
    """One dataset's groups, kept for paired comparisons (the scope's counts; pair_counts.npz
    ``<d>.subgroups.*``): each case's group label in the order of ``counts.case_id`` ("" = in no group), the
    request (``by``, ``age_bands``, ``min_group``), ``prior``: the case counts of the scored datasets before it in
    sorted order (where its draws start in the one stream, as for its metrics.json intervals), and the dataset's
    class counts."""

    labels: np.ndarray
    by: tuple[str, ...]
    age_bands: tuple[float, ...]
    min_group: int
    prior: tuple[int, ...]
    counts: DatasetCounts

    def same_groups(self, other: "SubgroupCounts") -> bool:
        """True when both split the same cases into the same groups under the same request."""
        return (self.by == other.by and self.age_bands == other.age_bands and self.min_group == other.min_group
                and np.array_equal(self.labels, other.labels))


#: a group label is at most this long in pair_counts.npz (32 fields of "name=value" joined by ", ")
MAX_LABEL = 32 * (32 + 1 + 64) + 31 * len(JOIN)
#: a dataset splits into at most this many groups (a cross product beyond it is refused at --by)
MAX_GROUPS = 1000
#: pair_counts.npz names at most this many datasets before a dataset (``.prior``)
MAX_PRIOR = 10_000


def save_counts(prefix: str, sc: SubgroupCounts) -> dict[str, np.ndarray]:
    """The scope's ``save_counts``: one dataset's groups as ``pair_counts.npz`` arrays."""
    return {f"{prefix}.group": np.asarray(sc.labels, dtype=str), f"{prefix}.by": np.asarray(sc.by, dtype=str),
            f"{prefix}.age_bands": np.asarray(sc.age_bands, dtype=np.float64),
            f"{prefix}.min_group": np.asarray(sc.min_group, dtype=np.int64),
            f"{prefix}.prior": np.asarray(sc.prior, dtype=np.int64).reshape(-1)}


def counts_problems(z: Mapping[str, np.ndarray], prefix: str, where: str) -> list[str]:
    """The scope's ``counts_problems``: the arrays of :func:`save_counts` from outside, one line per problem."""
    w = f"{where}: {prefix}"
    name = prefix.rsplit(".", 1)[0]
    want = {"group": ("U", 1), "by": ("U", 1), "age_bands": ("f", 1), "min_group": ("iu", 0), "prior": ("iu", 1)}
    optional = {"prior"}  # absent in files written before it: the stream's start
    bad = [f for f, (kinds, ndim) in want.items()
           if (f"{prefix}.{f}" not in z and f not in optional) or (f"{prefix}.{f}" in z and (
               z[f"{prefix}.{f}"].dtype.kind not in kinds or z[f"{prefix}.{f}"].ndim != ndim))]
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
    prior = z.get(f"{prefix}.prior", np.zeros(0, np.int64))
    if not 1 <= int(z[f"{prefix}.min_group"]) <= MAX_CASES or prior.size > MAX_PRIOR or (
            prior.size and not (0 <= int(prior.min()) and int(prior.max()) < 2**31)):
        problems.append(f"{w}.min_group / .prior out of range")
    return problems


def load_counts(z: Mapping[str, np.ndarray], prefix: str, name: str) -> SubgroupCounts:
    """The scope's ``load_counts``: the inverse of :func:`save_counts` (with the dataset's class counts)."""
    from xbench.score.kernels.counts import dataset_from as class_counts

    return SubgroupCounts(np.asarray(z[f"{prefix}.group"], dtype=str), tuple(str(f) for f in z[f"{prefix}.by"]),
                          tuple(float(x) for x in z[f"{prefix}.age_bands"]), int(z[f"{prefix}.min_group"]),
                          tuple(int(x) for x in z.get(f"{prefix}.prior", ())), class_counts(z, name, name))


def _group_replicates(sc: SubgroupCounts, ind: np.ndarray, bootstrap: int, seed: int, cache: dict | None,
                      name: str | None, dataset: str):
    key = (name, dataset, SECTION, bootstrap, seed)
    if cache is not None and name is not None and key in cache:
        return cache[key]
    found = group_replicates(sc.counts, ind, bootstrap=bootstrap, seed=seed, prior=sc.prior)
    if cache is not None and name is not None:
        cache[key] = found
    return found


def paired_rows(a: Mapping[str, SubgroupCounts], b: Mapping[str, SubgroupCounts], *, bootstrap: int, seed: int,
                level: float = 0.95, per_group: bool = True, cache: dict | None = None,
                names: tuple[str, str] | None = None) -> list[dict]:
    """The scope's rows of ``xbench compare``: per dataset both split into the same groups and metric both rank
    (:func:`best_worst`), A's gap - B's gap, with the percentile interval and two-sided p-value of the paired
    differences of the two gaps over the same case resamples for both (:func:`case_draws` from the dataset's own
    place in the stream, as their metrics.json intervals when ``seed`` and ``bootstrap`` are the scorer's),
    each side's best and worst group re-chosen in every resample (:func:`spread`). Rows name
    ``subgroups/<dataset>`` as their dataset and ``gap`` as their class."""
    name_a, name_b = names if names is not None else (None, None)
    rows = []
    for d in sorted(set(a) & set(b)):
        sa, sb = a[d], b[d]
        if not sa.same_groups(sb) or not sa.counts.same_ground_truth(sb.counts):
            continue  # said by the compare hook (compare_lines)
        if sb.prior != sa.prior:  # scored beside other datasets: both on A's draws, still paired
            import dataclasses

            sb = dataclasses.replace(sb, prior=sa.prior)
        groups, ind = group_indicators(sa.labels)
        ranked = ind.sum(axis=1) >= sa.min_group
        pa, ra = _group_replicates(sa, ind, bootstrap, seed, cache, name_a, d)
        pb, rb = _group_replicates(sb, ind, bootstrap, seed, cache, name_b, d)
        for k in R.summary_keys():
            ga, gb = best_worst(k, pa[k], ranked), best_worst(k, pb[k], ranked)
            if ga is None or gb is None:
                continue
            higher = R.metric(k).higher_is_better
            da = spread(ra[k], ranked, higher) if ra else np.zeros(0)
            db = spread(rb[k], ranked, higher) if rb else np.zeros(0)
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

    from xbench.score.cells import md_cell

    sec = metrics.get(SECTION) or {}
    keys = sec.get("keys", [])
    paths = []
    lines = [f"## Subgroups by {', '.join(sec.get('by', []))} ({label})", "",
             f"Ranked groups hold at least {sec.get('min_group')} cases; {GAP_WORDS} p (Holm): adjusted over the "
             f"{sec.get('holm_m', 0)} gaps of this table.", "", *([sec["note"], ""] if sec.get("note") else []),
             "| dataset | metric | threshold | best | worst | worst value | gap | ratio | 95% CI | p | p (Holm) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, entry in sec.get("datasets", {}).items():
        frame = by_group_frame(entry, keys)
        frame.insert(0, "ranked", [entry["groups"][g]["ranked"] for g in frame.index])
        frame.insert(0, "n_cases", [entry["groups"][g]["n_cases"] for g in frame.index])
        path = Path(folder) / f"subgroups_{name}.csv"
        frame.to_csv(path)
        paths.append(path)
        for table, tau in zip(GAP_TABLES, TAU_WORDS, strict=True):
            for k, gap in entry.get(table, {}).items():
                ci = gap["gap_ci95"]
                lines.append("| " + " | ".join(md_cell(x) for x in (
                    name, k, tau, gap["best"], gap["worst"], _f(gap["worst_value"]), _f(gap["gap"]),
                    _f(gap.get("ratio")), "" if ci is None else f"[{_f(ci[0])}, {_f(ci[1])}]", _p(gap["p_value"]),
                    _p(gap.get("p_holm")))) + " |")
    path = Path(folder) / "table_subgroups.md"
    path.write_text("\n".join(lines) + "\n")
    return [*paths, path]


def _f(v) -> str:
    return "" if v is None else f"{v:.3f}"


def _p(v) -> str:
    """A p-value as printed: three decimals, or "< 0.001" (it is never 0: the floor is 1/(B+1))."""
    return "" if v is None else ("< 0.001" if v < 0.0005 else f"{v:.3f}")


#: the threshold column of each gap table (:data:`GAP_TABLES`)
TAU_WORDS = ("group's own", "dataset's")
#: what every printed gap is (the page's caption and table_subgroups.md)
GAP_WORDS = ("threshold: each group scored at its own best threshold (which flatters small groups) or at the "
             "dataset's best threshold (the metrics that depend on it); gap = best - worst ranked group, ratio = smallest / "
             "largest group value (fairlearn's between-groups ratio); the 95% interval holds the gap whenever every ranked "
             "group's simultaneous bootstrap band holds its group's value (0 when the bands overlap); p: permutation test of the group labels (is any gap beyond chance);")


#: the metrics the report page shows per model (every metric is in table_subgroups.md and the CSVs)
PAGE_KEYS = ("pointing_game", "dice_best", "iou_best", "auroc", "f1")
PAGE_HEAD = ("model", "dataset", "metric", "threshold", "ranked groups", "best", "worst", "worst value", "gap", "ratio", "95% CI",
             "p", "p (Holm)")


def page_rows(results) -> list[tuple]:
    """The page's rows: per model holding the section, dataset and :data:`PAGE_KEYS` metric with a gap; p (Holm)
    adjusts each model's p-values over that model's rows shown here (the keys shown, every dataset)."""
    rows = []
    for r in results:
        sec = r.metrics.get(SECTION)
        if not isinstance(sec, dict):
            continue
        mine = []
        for name, entry in sorted(sec.get("datasets", {}).items()):
            n_ranked = sum(bool(g.get("ranked")) for g in entry.get("groups", {}).values())
            for k in PAGE_KEYS:
                for table, tau in zip(GAP_TABLES, TAU_WORDS, strict=True):
                    gap = entry.get(table, {}).get(k)
                    if gap is not None:
                        mine.append((name, k, tau, n_ranked, len(entry["groups"]), gap))
        adjusted = holm([g["p_value"] for *_, g in mine])
        for (name, k, tau, n_ranked, n_groups, gap), p_holm in zip(mine, adjusted, strict=True):
            ci = gap.get("gap_ci95")
            rows.append((r.name, name, k, tau, f"{n_ranked} of {n_groups}", gap["best"], gap["worst"],
                         _f(gap["worst_value"]), _f(gap["gap"]), _f(gap.get("ratio")),
                         "" if ci is None else f"[{_f(ci[0])}, {_f(ci[1])}]", _p(gap["p_value"]), _p(p_holm)))
    return rows


def page(results) -> tuple[list[str], str]:
    """The report page's "Subgroups" section (Markdown lines for leaderboard.md, HTML for index.html), or
    ([], "") when no result holds one."""
    import html

    from xbench.score.cells import md_cell

    rows = page_rows(results)
    if not rows:
        return [], ""
    by = sorted({", ".join(r.metrics[SECTION].get("by", [])) for r in results if SECTION in r.metrics})
    mins = sorted({str(r.metrics[SECTION].get("min_group")) for r in results if SECTION in r.metrics})
    caption = (f"Every metric per group of cases by {' / '.join(by)} (xbench-score --by); ranked groups hold at least "
               f"{' / '.join(mins)} cases; {GAP_WORDS} p (Holm): adjusted over each model's rows below. Every metric "
               "and group: table_subgroups.md and subgroups_<dataset>.csv of each result.")
    md = ["## Subgroups", "", caption, "", "| " + " | ".join(PAGE_HEAD) + " |", "|" + "---|" * len(PAGE_HEAD)]
    md += ["| " + " | ".join(md_cell(x) for x in row) + " |" for row in rows]
    head = "".join(f"<th>{html.escape(h)}</th>" for h in PAGE_HEAD)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in row) + "</tr>" for row in rows)
    return [*md, ""], (f"<h2>Subgroups</h2><p>{html.escape(caption)}</p><div class=\"scroll\"><table class=\"lb\">"
                       f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


#: bytes one row of group replicates holds besides its case weights: the threshold curves' sums and the metrics'
#: values of one resample (measured: 13-16 KiB a row with the default thresholds; the test holds the bound)
ROW_BYTES = 16 * 1024


def work_bytes(n_groups: int, n_cases: int, bootstrap: int) -> int:
    """What one block of group replicates holds at once (:func:`group_replicates`): a row per group and resample of
    the block, each with its case weights about four times over in float64 (the product, its transpose, a class's
    pairs' weights) and :data:`ROW_BYTES` of sums."""
    from xbench.score.resampling.engine import _block_sizes

    rows = n_groups * (_block_sizes(n_cases, bootstrap)[0] if bootstrap > 0 else 1)
    return rows * (4 * 8 * n_cases + ROW_BYTES)


def work_problems(name: str, fields: Sequence[str], n_groups: int, n_cases: int, bootstrap: int) -> list[str]:
    """One line when the groups' resamples would not fit half of ``--max-memory``, from the counts alone, before
    anything is allocated (550 groups of 2 cases held gigabytes a block; issue 44)."""
    from xbench.schemas.budget import MiB, limits

    need, cap = work_bytes(n_groups, n_cases, bootstrap), limits().max_memory // 2
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
    return with_subgroups(result, request, bootstrap=bootstrap, seed=seed)
