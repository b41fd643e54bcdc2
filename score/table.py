"""The table kind every section and every output writes: a :class:`Table` of :class:`Cell` values, its titles and
number formats, and its files.

Below the sections in score/'s layers (docs/explanation/architecture.md), so a section builds its own table with it and the
outputs and the report lay them out; the tables of the class rows are :mod:`xbench.score.outputs.tables`'.
"""
from __future__ import annotations

import csv
import html
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xbench.schemas import catalog
from xbench.score.cells import csv_cell, md_cell
from xbench.score.metrics import registry as R

__all__ = ["DATASET_TITLES", "DIGITS", "METRIC_TITLES", "Cell", "Table", "higher_is_better", "shown_value",
           "write_table"]

#: decimals of every printed value
DIGITS = 2

# -- titles and formats -----------------------------------------------------------------------------------------

#: Column titles and order of the paper's Table 1 (phantom last; unknown keys after it, sorted), from the
#: dataset catalog (schemas/datasets.toml).
DATASET_TITLES = catalog.titles()


class _Titles(dict):
    """{metric key: short title}, read from the registry (and the sections' declared measures) on every lookup
    (a metric registered later shows)."""

    def get(self, key, default=None):
        m = R.shown_as(key)
        return m.short if m is not None else default

    def __getitem__(self, key):
        return R.REGISTRY[key].short

    def __contains__(self, key):
        return key in R.REGISTRY


METRIC_TITLES = _Titles()

def _fmt_of(key: str) -> str:
    m = R.shown_as(key)  # CNR is a registered phrase metric (fmt "number"), NSS a gaze measure; unknown: a share
    return m.fmt if m is not None else "percent"


def higher_is_better(key: str) -> bool:
    m = R.shown_as(key)
    return True if m is None else m.higher_is_better


def shown_value(key: str, v) -> float | None:
    """A value as the tables print it: x100 for a fraction (``fmt="percent"``), as is for a number."""
    if v is None:
        return None
    return 100 * v if _fmt_of(key) == "percent" else float(v)


def _text(key: str, v) -> str:
    return f"{shown_value(key, v):.{DIGITS}f}"


# -- the cell model -----------------------------------------------------------------------------------------------

@dataclass
class Cell:
    value: float | None
    ci: tuple[float, float] | None = None
    mark: str | None = None  # "best", "second" or None
    ranked: bool = True  # False: never marked (a constant score's recognition value, chance by construction)


@dataclass
class Table:
    """title: heading; key: file stem; columns: [(group label, group key, metric key)] (group label None: the
    header is the metric's only); rows: row label (a string, or a tuple with one entry per ``index`` name) ->
    cells; labels: {metric key: header} where it is not the registry's short title; metric_in_header: False
    for per-class tables (one header row of class names)."""

    title: str
    key: str
    columns: list
    rows: dict = field(default_factory=dict)
    caption: str = ""
    metric_in_header: bool = True
    index: tuple = ("Model",)
    labels: dict = field(default_factory=dict)

    def label(self, metric: str) -> str:
        return self.labels.get(metric) or METRIC_TITLES.get(metric, metric)

    def headers(self) -> list[str]:
        """One header per column, as Markdown and the rounded CSV show it."""
        if not self.metric_in_header:
            return [g for g, _, _ in self.columns]
        return [self.label(m) if g is None else f"{g} {self.label(m)}" for g, _, m in self.columns]

    def to_markdown(self, *, with_ci: bool = True, heading: bool = True) -> str:
        """A GitHub Markdown table (``heading``: with the title and the caption above it)."""
        lines = []
        if heading:
            lines += [f"### {md_cell(self.title)}", ""]
            if self.caption:
                lines += [md_cell(self.caption), ""]
        lines.append("| " + " | ".join(md_cell(h) for h in [*self.index, *self.headers()]) + " |")
        lines.append("|" + "---|" * len(self.index) + "---:|" * len(self.columns))
        for row, cells in self.rows.items():
            keys = [md_cell(k) for k in _keys(row)]
            lines.append("| " + " | ".join(keys + [_fmt_md(c, m, with_ci) for c, (_, _, m) in
                                                   zip(cells, self.columns)]) + " |")
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        """metrics.json's values at full precision, one column per (group, metric) plus its interval."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        head = ["model"]
        for _, gkey, m in self.columns:
            base = f"{gkey}/{m}"
            head += [base, f"{base}/ci_lo", f"{base}/ci_hi"]
        w.writerow([csv_cell(h) for h in head])
        for row, cells in self.rows.items():
            out = [csv_cell(k) for k in _keys(row)]
            for cell in cells:
                out += [_num(cell.value), _num(cell.ci[0] if cell.ci else None), _num(cell.ci[1] if cell.ci else None)]
            w.writerow(out)
        return buf.getvalue()

    def to_rounded_csv(self) -> str:
        """The values as printed (percent or number), rounded to two decimals; one header per column."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([csv_cell(str(h)) for h in [*self.index, *self.headers()]])
        for row, cells in self.rows.items():
            w.writerow([csv_cell(str(k)) for k in _keys(row)]
                       + [_rounded(c.value, m) for c, (_, _, m) in zip(cells, self.columns)])
        return buf.getvalue()

    def to_html(self, *, with_ci: bool = True) -> str:
        """An HTML <table>: a two-row header (groups, then metrics) as in the paper; one row of headers when
        no column has a group or the columns are classes."""
        e = html.escape
        out = [f'<table class="lb" id="{e(self.key)}">']
        if self.caption:
            out.append(f"<caption>{e(self.caption)}</caption>")
        two_rows = self.metric_in_header and any(g is not None for g, _, _ in self.columns)
        if two_rows:
            out.append(f"<thead><tr>{_index_th(self.index, 2)}")
            out += [f'<th colspan="{n}">{e(g)}</th>' for g, n in _spans(self.columns)]
            out.append("</tr><tr>")
            out += [f"<th>{e(self.label(m))}</th>" for _, _, m in self.columns]
        else:
            out.append(f"<thead><tr>{_index_th(self.index, 1)}")
            out += [f"<th>{e(h)}</th>" for h in self.headers()]
        out.append("</tr></thead><tbody>")
        for row, cells in self.rows.items():
            out.append("<tr>" + "".join(f'<th class="model">{e(str(k))}</th>' for k in _keys(row)))
            for cell, (_, _, m) in zip(cells, self.columns):
                out.append(f"<td>{_fmt_html(cell, m, with_ci)}</td>")
            out.append("</tr>")
        out.append("</tbody></table>")
        return "".join(out)


def _keys(row) -> list:
    return list(row) if isinstance(row, tuple) else [row]


def _index_th(index, rowspan: int) -> str:
    span = f' rowspan="{rowspan}"' if rowspan > 1 else ""
    return "".join(f"<th{span}>{html.escape(n)}</th>" for n in index)


def _spans(columns) -> list[tuple[str, int]]:
    """Consecutive columns of the same group, as (group label, count)."""
    groups: list[tuple[str, int]] = []
    for g, _, _ in columns:
        if groups and groups[-1][0] == g:
            groups[-1] = (g, groups[-1][1] + 1)
        else:
            groups.append((g, 1))
    return groups


def _num(x) -> str:
    return "" if x is None else repr(float(x))


def _rounded(v, key: str) -> str:
    # numpy's rounding (x 10^d, round half to even, / 10^d), as the tables were always rounded
    return "" if v is None else repr(float(np.round(np.float64(shown_value(key, v)), DIGITS)))


def _fmt(cell: Cell, key: str, with_ci: bool, *, na: str, marks: tuple[str, str], ci: str) -> str:
    """A cell as text: ``na`` when undefined; ``marks`` wrap the best/second value ("{}" templates);
    ``ci`` is the interval's template ("{lo}", "{hi}")."""
    if cell.value is None:
        return na
    v = _text(key, cell.value)
    if cell.mark in ("best", "second"):
        v = marks[cell.mark == "second"].format(v)
    if with_ci and cell.ci:
        v += ci.format(lo=_text(key, cell.ci[0]), hi=_text(key, cell.ci[1]))
    return v


def _fmt_md(cell: Cell, key: str, with_ci: bool) -> str:
    return _fmt(cell, key, with_ci, na="–", marks=("**{}**", "<u>{}</u>"), ci=" ({lo}–{hi})")


def _fmt_html(cell: Cell, key: str, with_ci: bool) -> str:
    return _fmt(cell, key, with_ci, na='<span class="na">–</span>', marks=("<b>{}</b>", "<u>{}</u>"),
                ci='<br><span class="ci">{lo}–{hi}</span>')


# -- files ---------------------------------------------------------------------------------------------------------

def write_table(table: Table, out_dir: str | os.PathLike, stem: str) -> list[Path]:
    """Write ``<stem>.csv`` (printed values rounded to two decimals) and ``<stem>.md`` into ``out_dir``."""
    out = Path(out_dir)
    csv_path, md_path = out / f"{stem}.csv", out / f"{stem}.md"
    csv_path.write_text(table.to_rounded_csv())
    md_path.write_text(table.to_markdown(with_ci=False, heading=False))
    return [csv_path, md_path]
