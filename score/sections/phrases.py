"""Phrase grounding: scoring the phrase rows (free-text queries) of a dataset, e.g. MS-CXR.

Each phrase row is a positive pair whose "class" is its category, so the class machinery counts it
unchanged: :func:`phrase_counts` hands :func:`xbench.score.kernels.counting.count_dataset` a view of the
ground truth in which the "cases" are the phrase rows, the classes are the categories and every row has
one region (its ``query_mask``), and a view of the submission whose single map column is
``query_saliency``. Pointing game, Dice and IoU at the fixed and at the searched threshold (searched
per category, as per class) come from those counts. The contrast-to-noise ratio is one more per-pair
statistic of the same counting pass (declared for phrase rows in :mod:`xbench.score.kernels.pair_stats`, its kernel
:func:`xbench.score.metrics.cnr.cnr_of_pairs`), the counts' per-row column ``registry.CNR_COLUMN``. What stays
phrase-specific is the view (here) and that the bootstrap resamples images, not phrase rows
(:func:`xbench.score.resampling.bootstrap.phrase_replicates`, :func:`~xbench.score.resampling.bootstrap.paired_phrase_rows`).
The phrase rows are the "phrase" row scope (:mod:`xbench.score.sections.plugins`: its unit, section, row source, paired
rows and tables are declared there, and scoring, paired comparisons and the report loop over the scopes).
Every metric is an entry of the metric registry with the phrase scope (:mod:`xbench.score.metrics.registry`):
this module holds the phrase-row source (the view and :func:`phrase_counts`), the point estimates per
category (the class code's, :func:`phrase_points`) and the phrase table's rows; the metrics.json "phrases"
section is assembled by :func:`xbench.score.sections.plugins.phrases.score_phrases`.

CNR: see :mod:`xbench.score.metrics.cnr` (contract §Phrase grounding).

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
from xbench.score.metrics.cnr import cnr_of_pairs  # noqa: F401  (its home before it became a per-pair statistic)
from xbench.score.kernels.counting import count_dataset
from xbench.score.kernels.counts import PhraseCounts
from xbench.score.metrics.estimates import class_grounding_point
from xbench.score.resampling.intervals import mean_defined
from xbench.score.kernels.maps import THRESHOLDS

__all__ = ["PhraseCounts", "cnr_of_pairs", "phrase_counts", "phrase_points", "phrase_columns", "phrase_rows",
           "phrase_markdown", "phrase_csv", "phrase_ground_truth_problems", "PHRASE_SCOPE", "ALL_PHRASES"]


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
