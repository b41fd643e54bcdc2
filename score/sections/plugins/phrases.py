"""The phrase rows: free-text queries of each category, a row scope beside the class rows.

metrics.json "phrases"; a resample draws *images* (one image carries several phrases). The counts and tables are
:mod:`xbench.score.sections.phrases`'; the section is assembled here (:func:`score_phrases`).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xbench.schemas.schema_versions import minor as schema_minor
from xbench.score.kernels.counts import phrase_arrays, phrase_arrays_problems, phrase_from_arrays
from xbench.score.metrics import registry as R
from xbench.score.resampling.bootstrap import percentile_interval, phrase_replicates
from xbench.score.resampling.engine import prior_units
from xbench.score.resampling.intervals import mean_defined
from xbench.score.sections import phrases as P
from xbench.score.sections.phrases import PhraseCounts, paired_phrase_rows, phrase_counts, phrase_points
from xbench.score.sections.kinds import RowScope
from xbench.score.sections.probes import originals_only
from xbench.score.sections.units import scored_units
from xbench.score.table import DATASET_TITLES, Cell, Table

__all__ = ["PLUGIN", "phrase_metrics", "phrase_table", "score_phrases"]

def phrase_metrics(pc: PhraseCounts, *, bootstrap: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """The metrics.json "phrases" entry of one dataset (contract §metrics.json): per category, the
    summary (unweighted mean over categories with a phrase) and the pooled mean over every phrase."""
    dc = pc.counts
    points = phrase_points(pc)
    categories = points["categories"]
    entry = {"n_phrases": int(dc.pair_case.size), "n_images": int(np.unique(pc.image).size),
             "n_cnr_undefined": int(np.isnan(pc.cnr).sum()), "summary": points["summary"],
             "all_phrases": points["pooled"], "categories": categories}
    if bootstrap > 0 and dc.pair_case.size:
        reps = phrase_replicates(pc, bootstrap, seed)
        for name, stats in reps["categories"].items():
            categories[name]["ci95"] = {k: percentile_interval(v, level) for k, v in stats.items()}
        entry["ci95"] = {k: percentile_interval(v, level) for k, v in reps["summary"].items()}
        entry["all_phrases"]["ci95"] = {k: percentile_interval(v, level) for k, v in reps["pooled"].items()}
    return entry


def score_phrases(sub, gt, names, *, bootstrap: int = 1000, seed: int = 0, where: str = "",
                  region_problems: list | None = None, timings: dict | None = None,
                  cases: Mapping[str, np.ndarray] | None = None) -> tuple[dict, dict]:
    """The metrics.json "phrases" section for the datasets ``names`` whose ground truth has phrase rows,
    and their :class:`PhraseCounts`. A submission that declares its model cannot take free text
    (``phrases_unsupported``) gets null metrics with the reason. Returns ({} , {}) when no dataset has any.

    ``cases``: {dataset: bool per ground-truth case} for datasets scored on some of their images only
    (:func:`phrase_counts`); a dataset none of whose phrase rows is among them has no entry, as with a
    ground truth of those images alone."""
    from xbench.schemas.queries import UNSUPPORTED_ATTR

    import dataclasses

    section: dict = {}
    counts: dict[str, PhraseCounts] = {}
    cases = cases or {}
    units = scored_units(sub, gt, names, cases)
    for name in sorted(names):
        gt_ds, sub_ds = originals_only(gt.datasets[name]), sub.datasets[name]  # text probes score apart
        if getattr(gt_ds, "queries", None) is None:
            continue
        present = cases.get(name)
        if present is not None and not np.asarray(present, bool)[np.asarray(gt_ds.queries.case, np.int64)].any():
            continue
        reason = sub_ds.attrs.get(UNSUPPORTED_ATTR)
        if reason is not None or sub_ds.query_id is None:
            n_phrases = len(gt_ds.queries) if present is None else int(
                np.count_nonzero(np.asarray(present, bool)[np.asarray(gt_ds.queries.case, np.int64)]))
            section[name] = {"n_phrases": n_phrases, "unsupported": True,
                             "reason": str(reason or "the submission has no phrase rows"),
                             "summary": {k: None for k in R.phrase_keys()}}
            continue
        pc = phrase_counts(sub_ds, gt_ds, region_problems=region_problems, where=f"{where}/{name}" if where else name,
                           timings=timings, cases=present)
        # its images are its scored cases: the dataset's own draws, after those of the datasets before it
        pc = counts[name] = dataclasses.replace(pc, prior=prior_units(units, name))
        section[name] = phrase_metrics(pc, bootstrap=bootstrap, seed=seed)
    if section:
        section = {"overall": {k: mean_defined(np.array([np.nan if d["summary"][k] is None else d["summary"][k]
                                                  for d in section.values()], dtype=np.float64))
                               for k in R.phrase_keys()},
                   "datasets": section}
    return section, counts


def phrase_table(results) -> Table | None:
    """Phrase grounding (metrics.json "phrases"): one row per (model, dataset, category), the dataset's mean over
    categories first, with the columns and rows of leaderboard.md's phrase table (:func:`xbench.score.sections.phrases.
    phrase_rows`) and their 95 % intervals; None when no result has phrase rows. No marks: rows are different
    categories, not rivals."""
    rows = P.phrase_rows(list(results.values()) if isinstance(results, Mapping) else results)
    if not rows:
        return None
    notes = [f"{r['model']} on {r['dataset']}: {r['note']}" for r in rows if r["note"]]
    caption = ("Per category, and the mean over categories (all categories); CNR = |mu_in - mu_out| / "
               "sqrt(var_in + var_out) on the map resized to the grid, a ratio; CNR± = (mu_in - mu_out) / "
               "sqrt(var_in + var_out), the same with its sign (negative: the map is lower inside the region than "
               "outside); the others in percent; 95% bootstrap interval over images as low–high." + (" Not scored: " + "; ".join(notes) + "." if notes else ""))
    columns = P.phrase_columns()
    t = Table(title="Phrase grounding", key="phrases", columns=[(None, None, k) for k, _ in columns],
              caption=caption, index=("Model", "Dataset", "Category", "Phrases"), labels=dict(columns))
    for r in rows:
        label = (r["model"], DATASET_TITLES.get(r["dataset"], r["dataset"]), r["category"],
                 "" if r["n_phrases"] is None else str(r["n_phrases"]))
        t.rows[label] = [Cell(r[k], tuple(r["ci95"][k]) if r["ci95"].get(k) else None) for k, _ in columns]
    return t


class PhraseRows(RowScope):
    name = "phrase"
    title = "phrase rows"
    unit = "images"
    section = "phrases"
    minor = schema_minor("metrics", "phrases")
    order = 10
    saves_counts = True
    doc = "the phrase rows (free-text queries) of each category; one image carries several phrases"
    keys = staticmethod(R.phrase_keys)
    score = staticmethod(score_phrases)
    ground_truth_problems = staticmethod(P.phrase_ground_truth_problems)
    paired_rows = staticmethod(paired_phrase_rows)
    table_rows = staticmethod(P.phrase_rows)
    markdown = staticmethod(P.phrase_markdown)
    csv = staticmethod(P.phrase_csv)
    save_counts = staticmethod(phrase_arrays)
    counts_problems = staticmethod(phrase_arrays_problems)
    load_counts = staticmethod(phrase_from_arrays)

    table = staticmethod(phrase_table)


PLUGIN = PhraseRows()
