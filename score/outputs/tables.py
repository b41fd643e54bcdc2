"""Every table of XBench, defined once: the leaderboard of the report and the paper's tables of ``xbench-score``.

A :class:`Table` holds, per row (a model, or a (model, dataset) pair), one :class:`Cell` per column: the
metrics.json value (a fraction, or a plain number for a metric registered with ``fmt="number"``), its 95 %
interval when known, and a best/second mark. Columns are (group label, group key, metric key) triples; a
group is a dataset, "Overall", or a class. The builders read metric titles, formats and the order of the
metric groups from the registry (:mod:`xbench.score.metrics.registry`) and dataset titles and order from the
dataset catalog, so the report and ``xbench-score`` build from the same definitions and only render
differently:

- the **report** layout (default): a model per row, ranked by overall pointing game, an "Overall" group
  beside the datasets (left out when it would repeat the only dataset), intervals, and in each column the
  best value **bold**, the second best underlined (paper convention);
- the **scorer** layout (``layout="scorer"``, ``xbench-score``'s ``tables/*``): rows in the given order,
  dataset groups only, no marks; metric groups beyond Table 1 as one row per (method, dataset) plus the
  method's mean.

Renderings: :meth:`Table.to_markdown` and :meth:`Table.to_html` print a percent metric x100 and a number
as is, both with two decimals (undefined: ``–``); :meth:`Table.to_csv` keeps full-precision metrics.json
values with ``…/ci_lo`` and ``…/ci_hi`` columns (the report); :meth:`Table.to_rounded_csv` the printed
values rounded to two decimals (``xbench-score``). Labels (model, class, dataset names) come from
submissions, i.e. from anyone, so every writer escapes them (:func:`md_cell`, :func:`csv_cell`,
``html.escape``). No pandas: tables are small, and the scorer imports none until it writes pairs.parquet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import numpy as np

from xbench.score.metrics import registry as R
from xbench.score.table import DATASET_TITLES, DIGITS, METRIC_TITLES, Cell, Table, higher_is_better, shown_value, write_table

__all__ = ["ci_of", "dataset_order", "extra_tables", "grounding_table", "mark_columns", "partial_of", "partial_suffix",
           "per_class_table", "recognition_table", "value_of", "write_tables"]

Layout = Literal["report", "scorer"]

# -- the layouts ---------------------------------------------------------------------------------------------------

def _scorer_header(m: R.Metric) -> str:
    """A metric's header in xbench-score's tables: its ``column``, or "<stratum> <base column>" for a
    lesion-size stratum, else its short title."""
    if m.column:
        return m.column
    if m.stratum:
        base = R.metric(m.base)
        return f"{m.stratum} {base.column or base.short}"
    return m.short


# -- reading metrics.json ----------------------------------------------------------------------------------------

def _metrics_of(results) -> dict[str, dict]:
    """{row label: metrics dict} from a mapping of that shape or from loaded results (``name``, ``metrics``)."""
    if isinstance(results, Mapping):
        return dict(results)
    return {r.name: r.metrics for r in results}


def dataset_order(results) -> list[str]:
    """Datasets present in any metrics dict of ``results`` (a {label: metrics} mapping or loaded results), in
    the paper's column order (unknown keys last, sorted)."""
    seen = {d for m in _metrics_of(results).values() for d in m.get("datasets", {})}
    known = [d for d in DATASET_TITLES if d in seen]
    return known + sorted(seen - set(known))


def value_of(metrics: dict, scope: str, key: str, cls: str | None = None):
    """The metrics.json value (or None) of ``metrics`` for scope "overall" or a dataset key (and class)."""
    if scope == "overall":
        return metrics.get("overall", {}).get(key)
    ds = metrics.get("datasets", {}).get(scope)
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


def partial_of(metrics: dict, scope: str) -> tuple[int, int] | None:
    """(cases scored, cases of the ground truth) when ``metrics`` (a metrics.json dict) was scored on part of
    the cases of ``scope`` (a dataset key, or "overall" for the whole run: ``xbench-score --allow-missing``),
    else None."""
    part = metrics.get("partial") if scope == "overall" else metrics.get("datasets", {}).get(scope, {}).get("partial")
    if isinstance(part, dict) and isinstance(part.get("cases"), int) and isinstance(part.get("of"), int):
        return part["cases"], part["of"]
    return None


def partial_suffix(results, scope: str) -> str:
    """" (partial: N of M cases)" to append to a label whose numbers cover ``scope`` when the results (a
    {label: metrics} mapping or loaded results) were scored on part of its cases; "" for complete results."""
    found = [partial_of(m, scope) for m in _metrics_of(results).values()]
    parts = {p for p in found if p is not None}
    if not parts:
        return ""
    if len(parts) == 1 and len(parts) == len(set(found)):
        cases, of = parts.pop()
        return f" (partial: {cases} of {of} cases)"
    return " (partial for some rows: fewer cases)"


def ci_of(metrics: dict, scope: str, key: str, cls: str | None = None, computed: dict | None = None):
    """The 95 % interval: from ``metrics`` where the scorer wrote one, else from ``computed`` (the scorer's
    intervals computed by the report, in the metrics.json layout: see
    :func:`xbench.score.report.paired.missing_intervals`), else None."""
    ci = _ci_in(metrics, scope, key, cls)
    if ci is None and computed:
        ci = _ci_in(computed, scope, key, cls)
    return tuple(ci) if ci else None


# -- marks and ranking -----------------------------------------------------------------------------------------

def mark_columns(table: Table) -> Table:
    """Set best/second marks in every column, comparing values at the printed precision (equal-looking values
    share a mark) in the metric's direction. Marks need two rows, a second best three; a cell with ``ranked``
    False takes no part (it neither gets a mark nor counts as a row)."""
    rows = list(table.rows)
    for j, (_, _, key) in enumerate(table.columns):
        shown = {r: round(shown_value(key, table.rows[r][j].value), DIGITS) for r in rows
                 if table.rows[r][j].value is not None and table.rows[r][j].ranked}
        if len(shown) < 2:
            continue
        distinct = sorted(set(shown.values()), reverse=higher_is_better(key))
        for r, v in shown.items():
            if v == distinct[0]:
                table.rows[r][j].mark = "best"
            elif len(shown) >= 3 and len(distinct) > 1 and v == distinct[1]:
                table.rows[r][j].mark = "second"
    return table


def _ranked(metrics: dict[str, dict]) -> dict[str, dict]:
    """Rows ranked by overall pointing game (the stated key), best first; models without it last."""
    def key(item):
        v = value_of(item[1], "overall", "pointing_game")
        return (v is None, -(v or 0.0))

    return dict(sorted(metrics.items(), key=key))


# -- the table definitions ---------------------------------------------------------------------------------------

_RANKED = " Rows ranked by overall pointing game."
_GROUP_CAPTIONS = {
    "lesion_size": ("Grounding by lesion size",
                    "Pointing game and Dice/IoU at each class's best threshold over the positive pairs whose region "
                    "covers < 1 % (small), 1-5 % (medium) or >= 5 % (large) of the image; mean over the classes "
                    "with such a region, percent."),
    "other": ("More grounding metrics", "Registered grounding metrics beyond the paper's, percent."),
}
#: xbench-score's file stems of the metric-group tables
_GROUP_STEMS = {"recognition": "table_recognition", "lesion_size": "table_lesion_size", "other": "table_grounding_more"}
#: the paper's Table 1 headers, at either threshold
_TABLE1_HEADERS = ("Point", "Dice", "IoU")


def _wide(results, title, key, metrics, computed, caption, layout: Layout, *, dataset_metrics=(), labels=None) -> Table:
    """One row per result, a column group per dataset (and Overall in the report) of ``metrics`` (+
    ``dataset_metrics`` in dataset groups only)."""
    ms = _metrics_of(results)
    datasets = dataset_order(ms)
    report = layout == "report"
    groups = datasets + (["overall"] if report and len(datasets) != 1 else [])
    columns = []
    for g in groups:
        label = "Overall" if g == "overall" else DATASET_TITLES.get(g, g)
        if not report:  # xbench-score's files say where they cover part of the cases (--allow-missing)
            label += partial_suffix(ms, g)
        columns += [(label, g, m) for m in list(metrics) + (list(dataset_metrics) if g != "overall" else [])]
    t = Table(title=title, key=key, columns=columns, caption=caption + (_RANKED if report else ""),
              index=("Model",) if report else ("Method",), labels=dict(labels or {}))
    constant = _constant_scores(results) if report else {}
    recognition = {m.key for m in R.table_metrics("recognition")}
    for name, m in (_ranked(ms) if report else ms).items():
        comp = (computed or {}).get(name)
        flat = constant.get(name, set())
        t.rows[name] = [Cell(value_of(m, g, k), ci_of(m, g, k, computed=comp),
                             ranked=not (k in recognition and (g in flat or (g == "overall" and flat >= set(datasets)))))
                        for _, g, k in columns]
    return mark_columns(t) if report else t


def _constant_scores(results) -> dict[str, set[str]]:
    """{row label: the datasets where its scores are one constant} for loaded results with pair counts (a mapping
    of metrics dicts has none: {}). A constant score (the ``center`` baseline's 0.5) gives AUROC 0.5 and the
    prevalence's F1 and accuracy by construction: chance, not a rank, so its recognition cells are not marked
    "best" or "second best"."""
    out: dict[str, set[str]] = {}
    if isinstance(results, Mapping):
        return out
    for r in results:
        for d, dc in (getattr(r, "counts", None) or {}).items():
            p = np.asarray(dc.prob, dtype=np.float64)
            p = p[np.isfinite(p)]
            if p.size and p.min() == p.max():
                out.setdefault(r.name, set()).add(d)
    return out


def _long(results, title, key, metrics, computed, caption) -> Table:
    """xbench-score's layout of a metric group: one row per (method, dataset it has) and its mean over datasets."""
    t = Table(title=title, key=key, columns=[(None, None, m.key) for m in metrics], caption=caption,
              index=("Method", "Dataset"), labels={m.key: _scorer_header(m) for m in metrics})
    for name, m in _metrics_of(results).items():
        comp = (computed or {}).get(name)
        for g in dataset_order({name: m}) + ["overall"]:
            row = (name, ("Mean" if g == "overall" else DATASET_TITLES.get(g, g)) + partial_suffix({name: m}, g))
            t.rows[row] = [Cell(value_of(m, g, k.key), ci_of(m, g, k.key, computed=comp)) for k in metrics]
    return t


def grounding_table(results, computed=None, *, best: bool = True, layout: Layout = "report") -> Table:
    """Table 1: per dataset (and overall) the pointing game and Dice and IoU at the best threshold (``best=False``:
    at the fixed tau = 0.5). ``results``: {label: metrics dict} or loaded results; ``computed``: {label:
    intervals in the metrics.json layout} for results whose metrics.json has none."""
    dice, iou = ("dice_best", "iou_best") if best else ("dice_fixed", "iou_fixed")
    keys = ("pointing_game", dice, iou) if best else (dice, iou)
    if best:
        title, key, caption = ("Grounding (best threshold)", "grounding",
                               "Pointing game and best-threshold Dice/IoU, percent; 95% bootstrap interval as low–high. "
                               "Best in each column bold, second best underlined.")
    else:
        title, key, caption = "Grounding (fixed threshold 0.5)", "grounding_fixed", "Dice and IoU at tau = 0.5, percent."
    if layout == "scorer":  # the paper's Table 1: the pointing game beside Dice/IoU, headers Point | Dice | IoU
        keys = ("pointing_game", dice, iou)
        return _wide(results, title, key, keys, computed, caption, layout, labels=dict(zip(keys, _TABLE1_HEADERS)))
    return _wide(results, title, key, keys, computed, caption, layout)


def recognition_table(results, computed=None, *, layout: Layout = "report") -> Table:
    """Zero-shot recognition: the registered recognition metrics (AUROC, AUPRC, F1, accuracy) per dataset and
    overall, and the dataset-level ones (Hamming accuracy) per dataset; xbench-score's layout has one row per
    (method, dataset) and the method's mean, with every metric."""
    title, caption = ("Recognition",
                      "Macro AUROC, AUPRC, F1 and accuracy over classes, percent; Hamming accuracy per dataset. A "
                      "model whose scores are one constant (chance by construction) is not marked best or second.")
    ms = R.table_metrics("recognition")
    if layout == "scorer":
        return _long(results, title, "recognition", ms, computed, caption)
    return _wide(results, title, "recognition", [m.key for m in ms if m.kind == "recognition"], computed, caption,
                 layout, dataset_metrics=[m.key for m in ms if m.kind != "recognition"])


def per_class_table(results, dataset: str, metric: str = "pointing_game", computed=None, *,
                    layout: Layout = "report") -> Table:
    """Tables 2-5: one metric per class of one dataset, with the dataset mean first."""
    ms = _metrics_of(results)
    classes: list[str] = []
    for m in ms.values():
        for c in m.get("datasets", {}).get(dataset, {}).get("classes", {}):
            if c not in classes:
                classes.append(c)
    mean = "Mean" + (partial_suffix(ms, dataset) if layout == "scorer" else "")
    columns = [(mean, "mean", metric)] + [(c, c, metric) for c in classes]
    mt = METRIC_TITLES.get(metric, metric)
    t = Table(title=f"{DATASET_TITLES.get(dataset, dataset)}: {mt} per class", key=f"{dataset}_{metric}",
              columns=columns, metric_in_header=False, index=("Model",) if layout == "report" else ("Method",),
              caption=f"{mt} per class on {dataset}, percent; mean over classes first.")
    for name, m in ms.items():
        comp = (computed or {}).get(name)
        t.rows[name] = [Cell(value_of(m, dataset, metric, None if g == "mean" else g),
                             ci_of(m, dataset, metric, None if g == "mean" else g, comp)) for _, g, _ in columns]
    return mark_columns(t) if layout == "report" else t


def _present(ms: dict[str, dict], group: str) -> bool:
    """True when some result has a value (or null) of a metric of ``group``: a metrics.json written before the
    metric existed gets no empty table."""
    keys = {m.key for m in R.table_metrics(group)}
    return any(keys & set(m.get("overall", {})) for m in ms.values())


def extra_tables(results, computed=None, *, layout: Layout = "report") -> list[Table]:
    """Tables of registered metrics beyond the paper's, each only when some result holds its metrics:
    grounding by lesion size, then any other grounding metric."""
    ms = _metrics_of(results)
    out = []
    for group, (title, caption) in _GROUP_CAPTIONS.items():
        metrics = R.table_metrics(group)
        if not metrics or not _present(ms, group):
            continue
        if layout == "scorer":
            out.append(_long(ms, title, group, metrics, computed, caption))
        else:
            out.append(_wide(ms, title, group, [m.key for m in metrics], computed, caption, layout))
    return out


# -- xbench-score's files -----------------------------------------------------------------------------------------

def write_tables(results: Mapping[str, dict], out_dir: str | os.PathLike) -> list[Path]:
    """Table 1 (best and fixed threshold), one pointing table per dataset, the recognition table and the metric
    groups beyond the paper's, in xbench-score's layout."""
    paths = write_table(grounding_table(results, layout="scorer"), out_dir, "table1_grounding")
    paths += write_table(grounding_table(results, best=False, layout="scorer"), out_dir, "table1_grounding_fixed")
    for d in dataset_order(results):
        paths += write_table(per_class_table(results, d, layout="scorer"), out_dir, f"table_pointing_{d}")
    paths += write_table(recognition_table(results, layout="scorer"), out_dir, _GROUP_STEMS["recognition"])
    for t in extra_tables(results, layout="scorer"):
        paths += write_table(t, out_dir, _GROUP_STEMS[t.key])
    return paths
