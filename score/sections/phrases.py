"""Phrase grounding: scoring the phrase rows (free-text queries) of a dataset, e.g. MS-CXR.

Each phrase row is a positive pair whose "class" is its category, so the class machinery counts it
unchanged: :func:`phrase_counts` hands :func:`xbench.score.counting.count_dataset` a view of the
ground truth in which the "cases" are the phrase rows, the classes are the categories and every row has
one region (its ``query_mask``), and a view of the submission whose single map column is
``query_saliency``. Pointing game, Dice and IoU at the fixed and at the searched threshold (searched
per category, as per class) come from those counts. The contrast-to-noise ratio is one more per-pair
statistic of the same counting pass (declared for phrase rows in :mod:`xbench.score.kernels.pair_stats`, its kernel
:func:`xbench.score.kernels.cnr.cnr_of_pairs`), the counts' per-row column ``registry.CNR_COLUMN``. What stays
phrase-specific is the view (here) and that the bootstrap resamples images, not phrase rows
(:func:`xbench.score.resampling.bootstrap.phrase_replicates`; the paired rows, :func:`paired_phrase_rows`, here).
The phrase rows are the "phrase" row scope (:mod:`xbench.score.sections.plugins`: its unit, section, row source, paired
rows and tables are declared there, and scoring, paired comparisons and the report loop over the scopes).
Every metric is an entry of the metric registry with the phrase scope (:mod:`xbench.score.metrics.registry`):
this module holds the phrase-row source (the view and :func:`phrase_counts`), the point estimates per
category (the class code's, :func:`phrase_points`) and the phrase table's rows; the metrics.json "phrases"
section is assembled by :func:`xbench.score.sections.plugins.phrases.score_phrases`.

CNR: see :mod:`xbench.score.kernels.cnr` (contract §Phrase grounding).

Recognition metrics do not apply to phrase rows (every phrase describes a finding that is present).
Bootstrap intervals resample *images* (the dataset's cases) with replacement, because one image carries
several phrases: a resample takes each drawn image with all its phrases; the best thresholds are chosen
again in each resample, per category (:mod:`xbench.score.resampling.bootstrap`).
"""
from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

import numpy as np

from xbench.score.metrics import registry as R
from xbench.score.cells import md_cell
from xbench.score.kernels.cnr import cnr_of_pairs  # noqa: F401  (its home before it became a per-pair statistic)
from xbench.score.counting import count_dataset
from xbench.score.kernels.counts import PhraseCounts
from xbench.score.metrics.estimates import class_grounding_point
from xbench.score.resampling.bootstrap import phrase_replicates
from xbench.score.resampling.intervals import mean_defined, nanmean_rows, paired_row
from xbench.score.kernels.maps import THRESHOLDS

__all__ = ["PhraseCounts", "cnr_of_pairs", "phrase_counts", "phrase_points", "phrase_columns", "phrase_rows",
           "phrase_markdown", "phrase_csv", "phrase_ground_truth_problems", "paired_phrase_rows", "PHRASE_SCOPE",
           "ALL_PHRASES"]


# ------------------------------------------------------------------------------------------- counting
def _views(sub_ds, gt_ds):
    """The ground truth and submission seen as a dataset of phrase rows (see the module doc)."""
    q = gt_ds.queries
    categories = tuple(gt_ds.classes)
    col = np.array([categories.index(c) for c in q.category.tolist()], dtype=np.int64)
    labels = np.full((len(q), len(categories)), -1, dtype=np.int8)
    labels[np.arange(len(q)), col] = 1
    gt_view = SimpleNamespace(name=gt_ds.name, classes=categories, case_id=q.id, labels=labels,
                              region_index=np.stack([np.arange(len(q)), col], axis=1), region_mask=gt_ds.query_mask,
                              grid=tuple(gt_ds.grid))
    sub_view = SimpleNamespace(name=sub_ds.name, unsupported=(), score_kind="logit",
                               scores=np.asarray(sub_ds.query_scores, np.float32).reshape(-1, 1),
                               saliency=sub_ds.query_saliency)
    return gt_view, sub_view


def phrase_counts(sub_ds, gt_ds, *, region_problems: list | None = None, where: str | None = None,
                  timings: dict | None = None, cases: np.ndarray | None = None) -> PhraseCounts:
    """Counts and CNR of every phrase row of one dataset (``gt_ds.queries`` must exist; the submission's
    phrase rows are matched by id).

    ``cases`` (bool per ground-truth case): only the phrase rows of those images, counted as against a
    ground truth of those images alone (a submission scored on the cases it holds); None: every row."""
    from xbench.schemas.submission import align_queries

    gt_view, sub_view = _views(sub_ds, gt_ds)
    rows = align_queries(sub_ds, gt_ds, cases)
    n_cat = len(gt_view.classes)
    dc = count_dataset(sub_view, gt_view, case_rows=rows, class_cols=np.zeros(n_cat, np.int64),
                       region_problems=region_problems, where=where, timings=timings, scope="phrase")
    image = np.asarray(gt_ds.queries.case, np.int64)
    n_images = int(np.asarray(gt_ds.case_id).shape[0])
    if cases is not None:  # the rows and images present, renumbered as a ground truth of them alone would be
        image = (np.cumsum(cases) - 1)[image[np.flatnonzero(rows >= 0)]]
        n_images = int(np.count_nonzero(cases))
    return PhraseCounts(counts=dc, image=image[dc.pair_case], n_images=n_images)


# -------------------------------------------------------------------------------------------- metrics
def _category_point(pc: PhraseCounts, c: int) -> dict:
    """A category's metrics.json entry: its counts, every phrase metric of the registry (the class code's
    point estimates, :func:`xbench.score.metrics.estimates.class_grounding_point`), the chosen thresholds after the
    curve metrics, and the phrases whose CNR is undefined."""
    dc = pc.counts
    idx = dc.class_pairs(c)
    keys = R.phrase_keys()
    entry: dict = {"n_phrases": int(idx.size), "n_images": int(np.unique(pc.image[idx]).size)}
    taus = dict.fromkeys(t.tau_key for t in (m.threshold for m in R.metrics("grounding", scope="phrase"))
                         if isinstance(t, R.Best))
    if not idx.size:
        entry.update({k: None for k in keys})
        entry.update({k: None for k in taus})
        entry["n_cnr_undefined"] = 0
        return entry
    values, chosen, _ = class_grounding_point(dc, idx, scope="phrase")
    last_curve = max((i for i, m in enumerate(R.metrics(scope="phrase")) if m.curve), default=-1)
    for i, k in enumerate(keys):  # the chosen thresholds follow the curve metrics, as in a class entry
        entry[k] = values[k]
        if i == last_curve:
            entry.update({t: float(THRESHOLDS[chosen[t]]) for t in taus})
    if last_curve < 0:
        entry.update({t: float(THRESHOLDS[chosen[t]]) for t in taus})
    entry["n_cnr_undefined"] = int(np.isnan(pc.cnr[idx]).sum())
    return entry


def phrase_points(pc: PhraseCounts) -> dict:
    """Point estimates: {"categories": {category: entry}, "summary": {key: value}, "pooled": {key: value}}
    (values float or None), as metrics.json reports them."""
    dc = pc.counts
    categories = {name: _category_point(pc, c) for c, name in enumerate(dc.classes)}
    defined = [e for e in categories.values() if e["n_phrases"]]
    summary = {k: mean_defined(np.array([np.nan if e[k] is None else e[k] for e in defined], dtype=np.float64))
               for k in R.phrase_keys()}
    pooled_keys = R.pooled_keys()
    pooled = dict.fromkeys(pooled_keys)
    if dc.pair_case.size:
        values, _, _ = class_grounding_point(dc, np.arange(dc.pair_case.size), scope="phrase")
        pooled = {k: values[k] for k in pooled_keys}
    return {"categories": categories, "summary": summary, "pooled": pooled}


# ----------------------------------------------------------------------------------- paired comparisons
#: ``dataset`` of a paired-comparison row of the phrase metrics: "phrases" (the mean over datasets, as
#: metrics.json "phrases.overall") or "phrases/<dataset>" (dataset keys never contain "/")
PHRASE_SCOPE = "phrases"
#: ``class`` of a paired-comparison row of the mean over every phrase of a dataset ("all_phrases")
ALL_PHRASES = "all phrases"


def phrase_ground_truth_problems(a: Mapping[str, PhraseCounts], b: Mapping[str, PhraseCounts]) -> list[str]:
    """One message per dataset both hold whose phrase rows were scored against different ground truth."""
    return [f"{name}: the two submissions' phrase rows were scored against different ground truth (phrases, "
            "categories, images or regions differ); a paired bootstrap needs the same."
            for name in sorted(set(a) & set(b)) if not a[name].same_ground_truth(b[name])]


# --------------------------------------------------------------------------------------------- report
def phrase_rows(results) -> list[dict]:
    """One row per (model, dataset, category or "all categories") of the metrics.json "phrases" sections
    of score results (objects with ``name`` and ``metrics``): CNR and pointing game beside IoU/Dice, and the
    95 % intervals (``ci95``, {key: [lo, hi]}; empty without a bootstrap)."""
    rows = []
    for r in results:
        section = (r.metrics.get("phrases") or {}).get("datasets", {})
        for d, entry in sorted(section.items()):
            scopes = [("all categories", entry.get("summary", {}), entry.get("n_phrases"))]
            scopes += [(c, e, e.get("n_phrases")) for c, e in sorted((entry.get("categories") or {}).items())]
            for scope, vals, n in scopes:
                rows.append({"model": r.name, "dataset": d, "category": scope, "n_phrases": n,
                             **{k: vals.get(k) for k in R.phrase_keys()},
                             "ci95": dict((entry if scope == "all categories" else vals).get("ci95") or {}),
                             "note": entry.get("reason", "") if entry.get("unsupported") else ""})
    return rows


def _table_metrics() -> list:
    """The phrase metrics as the table shows them: the ratios (CNR) first, then the shares, registry order."""
    ms = R.metrics(scope="phrase")
    return [m for m in ms if m.fmt == "number"] + [m for m in ms if m.fmt != "number"]


def phrase_columns() -> list[tuple[str, str]]:
    """(metrics.json key, column title) of the phrase table, in the order of leaderboard.md and index.html."""
    return [(m.key, m.short) for m in _table_metrics()]


def phrase_markdown(rows: list[dict]) -> str:
    """The phrase-grounding table of the leaderboard (Markdown; fractions as %, ratios such as CNR as is)."""
    ms = _table_metrics()

    def cell(m, v):
        if v is None:
            return "n/a"
        return f"{v:.2f}" if m.fmt == "number" else f"{100 * v:.1f}"

    head = ["model", "dataset", "category", "phrases"] + [m.short for m in ms]
    out = ["## Phrase grounding (per category; CNR = |mu_in - mu_out| / sqrt(var_in + var_out))", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        out.append("| " + " | ".join([md_cell(row["model"]), md_cell(row["dataset"]), md_cell(row["category"]),
                                      str(row["n_phrases"])] + [cell(m, row.get(m.key)) for m in ms]) + " |")
    return "\n".join(out) + "\n"


def phrase_csv(rows: list[dict]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["model", "dataset", "category", "n_phrases", *R.phrase_keys(), "note"],
                       extrasaction="ignore")  # the intervals are the report's (index.html), not this file's
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


# ------------------------------------------------------------------------- paired rows (two submissions)
def _memo(pc: PhraseCounts, bootstrap: int, seed: int, cache: dict | None, name: str | None) -> tuple[dict, dict]:
    """(replicates, points) of one submission's phrase rows of one dataset, kept in ``cache`` under its name."""
    key = (name, pc.name, "phrases", bootstrap, seed)
    if cache is not None and name is not None and key in cache:
        return cache[key]
    found = (phrase_replicates(pc, bootstrap, seed), phrase_points(pc))
    if cache is not None and name is not None:
        cache[key] = found
    return found


def paired_phrase_rows(a: Mapping[str, PhraseCounts], b: Mapping[str, PhraseCounts], *, bootstrap: int,
                       seed: int, level: float = 0.95, per_group: bool = True, cache: dict | None = None,
                       names: tuple[str, str] | None = None) -> list[dict]:
    """Paired bootstrap of ``a - b`` on the phrase metrics of the datasets both hold, as rows of
    :data:`xbench.score.resampling.bootstrap.PAIRED_COLUMNS`.

    Both submissions get the resamples of their own metrics.json phrase intervals (:func:`~xbench.score.resampling.bootstrap.phrase_replicates`:
    images drawn with replacement from ``default_rng(seed)`` per dataset, every phrase of a drawn image with
    it), so each resample compares the two on the same images. Point values are the metrics.json values
    (:func:`phrase_points`). Rows: the mean over datasets (``dataset`` = :data:`PHRASE_SCOPE`), then per
    dataset (``"phrases/<dataset>"``) its summary (``class`` None), the mean over every phrase (``class`` =
    :data:`ALL_PHRASES`) and, with ``per_group``, each category.
    """
    problems = phrase_ground_truth_problems(a, b)
    if problems:
        from xbench.score.errors import GroundTruthMismatchError

        raise GroundTruthMismatchError(problems)
    shared = sorted(set(a) & set(b))
    name_a, name_b = names if names is not None else (None, None)
    got = {d: (_memo(a[d], bootstrap, seed, cache, name_a), _memo(b[d], bootstrap, seed, cache, name_b))
           for d in shared}
    keys = R.phrase_keys()
    rows: list[dict] = []
    if shared:
        # all-NaN columns are expected (undefined in some resamples)
        over = [{k: nanmean_rows(np.stack([got[d][i][0]["summary"][k] for d in shared])) for k in keys}
                for i in (0, 1)]
        pts = [{k: mean_defined(np.array([np.nan if got[d][i][1]["summary"][k] is None else got[d][i][1]["summary"][k]
                                   for d in shared], dtype=np.float64)) for k in keys} for i in (0, 1)]
        rows += [paired_row(PHRASE_SCOPE, None, k, pts[0][k], pts[1][k], over[0][k], over[1][k], level) for k in keys]
    for d in shared:
        (ra, pa), (rb, pb) = got[d]
        scope = f"{PHRASE_SCOPE}/{d}"
        rows += [paired_row(scope, None, k, pa["summary"][k], pb["summary"][k], ra["summary"][k], rb["summary"][k],
                             level) for k in keys]
        rows += [paired_row(scope, ALL_PHRASES, k, pa["pooled"][k], pb["pooled"][k], ra["pooled"][k],
                             rb["pooled"][k], level) for k in ra["pooled"]]
        if per_group:
            rows += [paired_row(scope, c, k, pa["categories"][c][k], pb["categories"][c][k], stats[k],
                                 rb["categories"][c][k], level)
                     for c, stats in ra["categories"].items() if c in rb["categories"] for k in stats]
    return rows
