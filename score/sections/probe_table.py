"""The text-probe table (metrics.json "text_probes", :mod:`xbench.score.sections.probes`): xbench-score's
``table_text_probes.csv`` / ``.md`` and the report page's section. Apart from :mod:`~xbench.score.sections.probes` so that
the scoring layer never imports the tables."""
from __future__ import annotations

from pathlib import Path

from xbench.score.sections.probes import COLUMNS, probe_rows
from xbench.score.table import Cell, Table, write_table

__all__ = ["probe_table", "write_probe_table"]


def probe_table(results):
    """The text-probe table (xbench-score's ``table_text_probes``), or None when no result has probes."""
    rows = probe_rows(results)
    if not rows:
        return None
    t = Table(title="Text probes", key="text_probes", columns=[(None, None, k) for k, _ in COLUMNS],
              caption=("How much a phrase's map changes when the phrase is negated, its side swapped or its words "
                       "shuffled: 1 - Spearman of the resized maps and the total variation distance of the "
                       "normalised maps (0 = unchanged); for side swaps, the share of probes whose map mass moved "
                       "to the other image half and the mean share moved (docs/how-to/text-probes.md); all in percent; "
                       "95% bootstrap interval over images below."),
              index=("Model", "Dataset", "Category", "Probe", "Probes"), labels=dict(COLUMNS))
    for r in rows:
        label = (r["model"], r["dataset"], r["category"], r["kind"], str(r["n_probes"]))
        t.rows[label] = [Cell(r[k], tuple(r["ci95"][k]) if r["ci95"].get(k) else None) for k, _ in COLUMNS]
    return t


def write_probe_table(results, out_dir) -> list[Path]:
    """``table_text_probes.csv`` and ``.md`` in ``out_dir`` when some result has probes (else nothing)."""
    t = probe_table(results)
    return [] if t is None else write_table(t, out_dir, "table_text_probes")


def section_tables(metrics: dict, folder, label: str) -> list[Path]:
    """The track's files beside metrics.json (:mod:`xbench.score.sections.plugins`)."""
    return write_probe_table({label: metrics}, folder)


def page(results) -> tuple[list[str], str]:
    """The report's text-probe section: no Markdown, the table for index.html ("" when no result has probes)."""
    from xbench.score.cells import html_box as _box
    from xbench.score.cells import html_text as _e

    t = probe_table([(r.name, r.metrics) for r in results])
    return [], "" if t is None else f"<h2>{_e(t.title)}</h2>{_box(t.to_html())}"
