"""Leaderboard tables in the layout of the XBench paper's Table 1, and per-class tables (Tables 2-5).

A table has one row per model and column groups (a dataset, or "Overall") of metrics. Every cell
holds the metrics.json value (a fraction), its 95 % interval when known, and a mark: in each column
the best value is **bold** and the second best underlined (paper convention), compared at the
displayed precision (percent, 2 decimals), so equal-looking values share a mark. Marks need at
least two models (second best: at least three).

Renderings: Markdown and HTML show percentages with 2 decimals and the interval in brackets;
CSV keeps full-precision fractions, one column per (group, metric) plus ``…/ci_lo`` and ``…/ci_hi``.
"""
from __future__ import annotations

import csv
import html
import io
from dataclasses import dataclass, field

from xbench.score import registry as R
from xbench.score import tables as score_tables
from xbench.score.tables import DATASET_TITLES, csv_cell, md_cell

from ._load import Result

__all__ = [
    "METRIC_TITLES",
    "Cell",
    "Table",
    "dataset_order",
    "value_of",
    "ci_of",
    "grounding_table",
    "grounding_fixed_table",
    "recognition_table",
    "extra_tables",
    "per_class_table",
    "mark_columns",
]

class _Titles(dict):
    """{metric key: short title}, read from the registry on every lookup (a metric registered later shows)."""

    def get(self, key, default=None):
        m = R.REGISTRY.get(key)
        return m.short if m is not None else default

    def __getitem__(self, key):
        return R.REGISTRY[key].short

    def __contains__(self, key):
        return key in R.REGISTRY


METRIC_TITLES = _Titles()


@dataclass
class Cell:
    value: float | None
    ci: tuple[float, float] | None = None
    mark: str | None = None  # "best", "second" or None


@dataclass
class Table:
    """title: heading; key: file stem; columns: [(group label, group key, metric)]; rows: model -> cells."""

    title: str
    key: str
    columns: list
    rows: dict = field(default_factory=dict)
    caption: str = ""
    metric_in_header: bool = True  # False for per-class tables: one header row of class names

    def to_markdown(self, *, with_ci: bool = True) -> str:
        if self.metric_in_header:
            head = ["Model"] + [f"{g} {METRIC_TITLES.get(m, m)}" for g, _, m in self.columns]
        else:
            head = ["Model"] + [g for g, _, _ in self.columns]
        lines = [f"### {_md_escape(self.title)}", ""]
        if self.caption:
            lines += [_md_escape(self.caption), ""]
        lines.append("| " + " | ".join(_md_escape(h) for h in head) + " |")
        lines.append("|" + "---|" + "---:|" * len(self.columns))
        for model, cells in self.rows.items():
            out = [_md_escape(model)]
            for cell in cells:
                out.append(_fmt_md(cell, with_ci))
            lines.append("| " + " | ".join(out) + " |")
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        head = ["model"]
        for _, gkey, m in self.columns:
            base = f"{gkey}/{m}"
            head += [base, f"{base}/ci_lo", f"{base}/ci_hi"]
        w.writerow([csv_cell(h) for h in head])
        for model, cells in self.rows.items():
            row = [csv_cell(model)]
            for cell in cells:
                row += [_num(cell.value), _num(cell.ci[0] if cell.ci else None), _num(cell.ci[1] if cell.ci else None)]
            w.writerow(row)
        return buf.getvalue()

    def to_html(self, *, with_ci: bool = True) -> str:
        """An HTML <table> with a two-row header (groups, then metrics), as in the paper."""
        groups: list[tuple[str, int]] = []
        for g, _, _ in self.columns:
            if groups and groups[-1][0] == g:
                groups[-1] = (g, groups[-1][1] + 1)
            else:
                groups.append((g, 1))
        e = html.escape
        out = [f'<table class="lb" id="{e(self.key)}">']
        if self.caption:
            out.append(f"<caption>{e(self.caption)}</caption>")
        if self.metric_in_header:
            out.append("<thead><tr><th rowspan=\"2\">Model</th>")
            out += [f'<th colspan="{n}">{e(g)}</th>' for g, n in groups]
            out.append("</tr><tr>")
            out += [f"<th>{e(METRIC_TITLES.get(m, m))}</th>" for _, _, m in self.columns]
        else:
            out.append("<thead><tr><th>Model</th>")
            out += [f"<th>{e(g)}</th>" for g, _, _ in self.columns]
        out.append("</tr></thead><tbody>")
        for model, cells in self.rows.items():
            out.append(f"<tr><th class=\"model\">{e(model)}</th>")
            for cell in cells:
                out.append(f"<td>{_fmt_html(cell, with_ci)}</td>")
            out.append("</tr>")
        out.append("</tbody></table>")
        return "".join(out)


def _num(x) -> str:
    return "" if x is None else repr(float(x))


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _md_escape(s: str) -> str:
    return md_cell(s)


def _fmt(cell: Cell, with_ci: bool, *, na: str, marks: tuple[str, str], ci: str) -> str:
    """A cell as text: ``na`` when undefined; ``marks`` wrap the best/second value ("{}" templates);
    ``ci`` is the interval's template ("{lo}", "{hi}")."""
    if cell.value is None:
        return na
    v = _pct(cell.value)
    if cell.mark in ("best", "second"):
        v = marks[cell.mark == "second"].format(v)
    if with_ci and cell.ci:
        v += ci.format(lo=_pct(cell.ci[0]), hi=_pct(cell.ci[1]))
    return v


def _fmt_md(cell: Cell, with_ci: bool) -> str:
    return _fmt(cell, with_ci, na="–", marks=("**{}**", "<u>{}</u>"), ci=" ({lo}–{hi})")


def _fmt_html(cell: Cell, with_ci: bool) -> str:
    return _fmt(cell, with_ci, na='<span class="na">–</span>', marks=("<b>{}</b>", "<u>{}</u>"),
                ci='<br><span class="ci">{lo}–{hi}</span>')


def dataset_order(results: list[Result]) -> list[str]:
    """Datasets present in any result, in the paper's column order (unknown keys last, sorted)."""
    return score_tables.dataset_order({i: r.metrics for i, r in enumerate(results)})


def value_of(result: Result, scope: str, key: str, cls: str | None = None):
    """The metrics.json value (fraction or None) for scope "overall" or a dataset key (and class)."""
    m = result.metrics
    if scope == "overall":
        return m.get("overall", {}).get(key)
    ds = m.get("datasets", {}).get(scope)
    if ds is None:
        return None
    if cls is None:
        return ds.get("summary", {}).get(key)
    return ds.get("classes", {}).get(cls, {}).get(key)


def _ci_in(metrics: dict, scope: str, key: str, cls: str | None):
    """The interval stored in a dict of the metrics.json layout, or None."""
    if scope == "overall":
        # the scorer writes the overall intervals at the top level ("ci95" beside "overall")
        return (metrics.get("ci95") or metrics.get("overall", {}).get("ci95") or {}).get(key)
    ds = metrics.get("datasets", {}).get(scope, {})
    if cls is not None:
        return (ds.get("classes", {}).get(cls, {}).get("ci95") or {}).get(key)
    return (ds.get("ci95") or ds.get("summary", {}).get("ci95") or {}).get(key)


def ci_of(result: Result, scope: str, key: str, cls: str | None = None, computed: dict | None = None):
    """The 95 % interval: from metrics.json where the scorer wrote one, else from ``computed`` (the
    scorer's intervals computed by the report, in the metrics.json layout: see
    :func:`xbench.score.report.paired.missing_intervals`), else None."""
    ci = _ci_in(result.metrics, scope, key, cls)
    if ci is None and computed:
        ci = _ci_in(computed, scope, key, cls)
    return tuple(ci) if ci else None


def mark_columns(table: Table) -> Table:
    """Set best/second marks in every column (higher is better for every XBench metric)."""
    models = list(table.rows)
    for j in range(len(table.columns)):
        shown = {}
        for mdl in models:
            v = table.rows[mdl][j].value
            if v is not None:
                shown[mdl] = round(100 * v, 2)
        distinct = sorted(set(shown.values()), reverse=True)
        if len(shown) < 2:
            continue
        for mdl, v in shown.items():
            if v == distinct[0]:
                table.rows[mdl][j].mark = "best"
            elif len(shown) >= 3 and len(distinct) > 1 and v == distinct[1]:
                table.rows[mdl][j].mark = "second"
    return table


def _groups(results) -> list[str]:
    """The column groups: each dataset, then Overall, which is left out when it would repeat the one dataset."""
    datasets = dataset_order(results)
    return datasets + (["overall"] if len(datasets) != 1 else [])


def _ranked(results) -> list:
    """Rows ranked by overall pointing game (the stated key), best first; models without it last."""
    def key(r):
        v = value_of(r, "overall", "pointing_game")
        return (v is None, -(v or 0.0))

    return sorted(results, key=key)


def _table(results, title, key, groups, metrics, computed, caption, *, extra_dataset_metrics=()):
    results = _ranked(results)
    caption = caption + " Rows ranked by overall pointing game."
    columns = []
    for gkey in groups:
        label = "Overall" if gkey == "overall" else DATASET_TITLES.get(gkey, gkey)
        ms = list(metrics) + (list(extra_dataset_metrics) if gkey != "overall" else [])
        columns += [(label, gkey, m) for m in ms]
    t = Table(title=title, key=key, columns=columns, caption=caption)
    for r in results:
        comp = (computed or {}).get(r.name)
        t.rows[r.name] = [Cell(value_of(r, g, m), ci_of(r, g, m, computed=comp)) for _, g, m in columns]
    return mark_columns(t)


def grounding_table(results, computed=None) -> Table:
    """Table 1: per dataset (and overall) the pointing game and best-threshold Dice and IoU."""
    groups = _groups(results)
    return _table(results, "Grounding (best threshold)", "grounding", groups,
                  ("pointing_game", "dice_best", "iou_best"), computed,
                  "Pointing game and best-threshold Dice/IoU, percent; 95% bootstrap interval in brackets. "
                  "Best in each column bold, second best underlined.")


def grounding_fixed_table(results, computed=None) -> Table:
    """Dice and IoU at the fixed threshold tau = 0.5 per dataset (and overall)."""
    groups = _groups(results)
    return _table(results, "Grounding (fixed threshold 0.5)", "grounding_fixed", groups,
                  ("dice_fixed", "iou_fixed"), computed, "Dice and IoU at tau = 0.5, percent.")


def recognition_table(results, computed=None) -> Table:
    """Zero-shot recognition: AUROC, AUPRC, F1, accuracy per dataset and overall (+ Hamming per dataset)."""
    groups = _groups(results)
    return _table(results, "Recognition", "recognition", groups, ("auroc", "auprc", "f1", "accuracy"),
                  computed, "Macro AUROC, AUPRC, F1 and accuracy over classes, percent; Hamming accuracy per dataset.",
                  extra_dataset_metrics=("hamming_accuracy",))


def per_class_table(results, dataset: str, metric: str, computed=None) -> Table:
    """Tables 2-5: one metric per class of one dataset, with the dataset mean first.

    ``computed``: {model name: intervals in the metrics.json layout} for results whose metrics.json has none.
    """
    classes: list[str] = []
    for r in results:
        for c in r.metrics.get("datasets", {}).get(dataset, {}).get("classes", {}):
            if c not in classes:
                classes.append(c)
    columns = [("Mean", "mean", metric)] + [(c, c, metric) for c in classes]
    title = f"{DATASET_TITLES.get(dataset, dataset)}: {METRIC_TITLES.get(metric, metric)} per class"
    t = Table(title=title, key=f"{dataset}_{metric}", columns=columns, metric_in_header=False,
              caption=f"{METRIC_TITLES.get(metric, metric)} per class on {dataset}, percent; mean over classes first.")
    for r in results:
        comp = (computed or {}).get(r.name)
        cells = [Cell(value_of(r, dataset, metric), ci_of(r, dataset, metric, computed=comp))]
        cells += [Cell(value_of(r, dataset, metric, c), ci_of(r, dataset, metric, c, comp)) for c in classes]
        t.rows[r.name] = cells
    return mark_columns(t)


def extra_tables(results, computed=None) -> list[Table]:
    """Tables of registered metrics beyond the paper's, each only when some result holds its metrics:
    grounding by lesion size, then any other grounding metric."""
    out = []
    groups = _groups(results)
    for group, title, caption in (
            ("lesion_size", "Grounding by lesion size",
             "Pointing game and Dice/IoU at each class's best threshold over the positive pairs whose region "
             "covers < 1 % (small), 1-5 % (medium) or >= 5 % (large) of the image; mean over the classes "
             "with such a region, percent."),
            ("other", "More grounding metrics", "Registered grounding metrics beyond the paper's, percent.")):
        ms = R.table_metrics(group)
        if not ms or not any(value_of(r, "overall", ms[0].key) is not None or
                             ms[0].key in r.metrics.get("overall", {}) for r in results):
            continue
        out.append(_table(results, title, group, groups, [m.key for m in ms], computed, caption))
    return out
