"""The robustness table (metrics.json "robustness", contract §Robustness track): per model, dataset and SPEC,
grounding and AUROC on the perturbed copies beside the clean values, and the stability of maps and scores.

``xbench-score`` writes it as ``table_robustness.csv/.md`` and the report page shows it, only when a result has
the section (so every other output is unchanged).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from xbench.score.table import DATASET_TITLES, Cell, Table, write_table

#: (metrics.json key, where it is read, column header); every value printed in percent (rho x 100)
COLUMNS = (
    ("pointing_game", "metrics", "Point"),
    ("dice_best", "metrics", "Dice best"),
    ("iou_best", "metrics", "IoU best"),
    ("auroc", "metrics", "AUROC"),
    ("map_spearman_mean", "stability", "Map rho mean x100"),
    ("map_spearman_worst", "stability", "Map rho worst x100"),
    ("flip_rate", "stability", "Flips at 0.5"),
    ("flip_any", "stability", "Any copy flips"),
)
#: shown only when some copies carry phrase rows: (key, where, header)
PHRASE_COLUMN = ("pointing_game", "phrases", "Phrase point")
STEM = "table_robustness"


def _d(x) -> dict:
    """A metrics.json object, or {} for anything else: a result folder may come from anyone."""
    return x if isinstance(x, dict) else {}


def _num(v) -> float | None:
    import math

    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _ci(entry, key: str):
    ci = _d(_d(entry).get("ci95")).get(key)
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_num(v) is not None for v in ci):
        return (float(ci[0]), float(ci[1]))
    return None


def _has_phrases(results: Mapping[str, dict]) -> bool:
    """Whether some result's copies carry phrase rows (robustness.datasets.*.specs.*.phrases)."""
    return any("phrases" in _d(spec) for m in results.values()
               for entry in _d(_d(_d(m).get("robustness")).get("datasets")).values()
               for spec in _d(_d(entry).get("specs")).values())


def robustness_table(results: Mapping[str, dict]) -> Table | None:
    """One row per (model, dataset, "clean" or SPEC); None when no result has a robustness section. ``results``:
    {model: metrics.json dict}; anything malformed in it reads as absent (a null cell)."""
    rows: dict = {}
    notes = []
    columns = COLUMNS + ((PHRASE_COLUMN,) if _has_phrases(results) else ())
    for model, m in results.items():
        section = _d(_d(_d(m).get("robustness")).get("datasets"))
        for name, entry in section.items():
            title, entry = DATASET_TITLES.get(name, name), _d(entry)
            if entry.get("available") is not True:
                notes.append(f"{model} on {title}: {entry.get('reason')}")
                continue
            clean = {"metrics": _d(_d(_d(m).get("datasets")).get(name)),
                     "phrases": _d(_d(_d(_d(m).get("phrases")).get("datasets")).get(name))}
            rows[(model, title, "clean", "")] = [
                Cell(_num(_d(clean[where].get("summary")).get(k)), _ci(clean[where], k)) if where in clean
                else Cell(None, None) for k, where, _ in columns]
            for spec, e in _d(entry.get("specs")).items():
                cells = []
                for k, where, _ in columns:
                    part = _d(_d(e).get(where))
                    cells.append(Cell(_num(_d(part.get("summary")).get(k)), _ci(part, k)))
                n = _d(e).get("n_copies")
                rows[(model, title, str(spec), str(n) if isinstance(n, int) else "")] = cells
    if not rows and not notes:
        return None
    caption = ("Robustness track: each SPEC's perturbed copies scored against their clean cases' regions (maps "
               "warped back), and how far maps (Spearman rho with the clean map, mean and worst over the copies of a "
               "case) and predictions at 0.5 (share of copies that flip, share of cases with any flip) move; mean over "
               "classes, percent." + (" Not scored: " + "; ".join(notes) + "." if notes else ""))
    if len(columns) > len(COLUMNS):
        caption += " Phrase point: the pointing game of the phrase rows (on the copies: the copies' phrase rows)."
    def key(k: str, where: str) -> str:  # the phrase column's key must not clash with the class rows' pointing game
        return f"phrase_{k}" if where == "phrases" else k

    t = Table(title="Robustness", key="robustness", columns=[(None, None, key(k, w)) for k, w, _ in columns],
              caption=caption, index=("Model", "Dataset", "Copies of", "Copies"),
              labels={key(k, w): label for k, w, label in columns})
    t.rows = rows
    return t


def write_robustness_table(results: Mapping[str, dict], out_dir: str | os.PathLike) -> list[Path]:
    t = robustness_table(results)
    return [] if t is None else write_table(t, out_dir, STEM)


def section_tables(metrics: dict, folder, label: str) -> list[Path]:
    """The track's files beside metrics.json (:mod:`xbench.score.sections.plugins`)."""
    return write_robustness_table({label: metrics}, folder)


def page(results) -> tuple[list[str], str]:
    """The report's robustness section: no Markdown, the table for index.html ("" when no result has one)."""
    from xbench.score.cells import html_box as _box
    from xbench.score.cells import html_text as _e

    t = robustness_table({r.name: r.metrics for r in results})
    return [], "" if t is None else f"<h2>{_e(t.title)}</h2><p>{_e(t.caption)}</p>{_box(t.to_html())}"
