"""The paper's tables from one or more metrics dicts, as DataFrames, CSV and Markdown.

Every builder takes ``results``: an ordered mapping {row label (e.g. the model name): metrics dict in the
``metrics.json`` layout}, so the same functions serve one submission (``xbench-score``) and a comparison
of many (the report). Values are printed as percentages with two decimals; undefined values are empty in
CSV and ``–`` in Markdown.

- :func:`grounding_table` — Table 1: datasets x (Point, Dice, IoU), best-threshold Dice/IoU.
- :func:`pointing_table` — Tables 2-5: per-class pointing game of one dataset, with the class mean first.
- :func:`recognition_table` — AUROC, AUPRC, F1, accuracy and Hamming accuracy per dataset.
- :func:`metric_table` — any group of registered metrics per dataset (:func:`xbench.score.registry.table_metrics`):
  grounding by lesion size, and the grounding metrics beyond the paper's.
- :func:`write_tables` — all of them into a folder (``<stem>.csv`` and ``<stem>.md``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from . import registry as R
from xbench.schemas import catalog

__all__ = ["DATASET_TITLES", "csv_cell", "dataset_order", "grounding_table", "md_cell", "pointing_table",
           "recognition_table", "to_markdown", "write_table", "write_tables"]

# -- escaping at the writers: labels (model, class, dataset names) come from submissions, i.e. from anyone --------

_MD_SPECIAL = {c: "\\" + c for c in "\\|*_`[]$~"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;", "\n": " ", "\r": " "}
#: OWASP's CSV-injection rule: a cell starting with one of these is a formula to a spreadsheet (\0 per ASVS 1.2.10).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\0")


def md_cell(text) -> str:
    """``text`` as literal Markdown table-cell content: no column break (``|``), no new row (line breaks become
    spaces), no HTML (``<script>`` shows as text), no emphasis, links, code or math."""
    return "".join(_MD_SPECIAL.get(ch, ch) for ch in str(text))


def csv_cell(text):
    """A text cell that a spreadsheet shows as text: a leading ``'`` when it starts like a formula (OWASP).
    Numbers pass unchanged (a negative value is data, not a formula); quoting is left to the csv writer."""
    if not isinstance(text, str):
        return text
    return "'" + text if text.startswith(_FORMULA_START) else text

#: Column titles and order of the paper's Table 1 (phantom last; unknown keys after it, sorted), from the
#: dataset catalog (schemas/datasets.toml).
DATASET_TITLES = catalog.titles()


def _pct(v) -> float:
    return np.nan if v is None else 100.0 * float(v)


def _shown(m, v) -> float:
    """A value as the tables print it: percent for a fraction metric, as is for a number."""
    return _pct(v) if m.fmt == "percent" else (np.nan if v is None else float(v))


def dataset_order(results: Mapping[str, dict]) -> list[str]:
    """Datasets present in any metrics dict of ``results``, in the paper's column order (unknown keys last, sorted)."""
    seen = {d for m in results.values() for d in m.get("datasets", {})}
    known = [d for d in DATASET_TITLES if d in seen]
    return known + sorted(seen - set(known))


def grounding_table(results: Mapping[str, dict], *, best: bool = True) -> pd.DataFrame:
    """Table 1: one row per result, columns (dataset title, Point | Dice | IoU) in percent.

    ``best=False`` uses the fixed-threshold (tau = 0.5) Dice and IoU instead.
    """
    dice, iou = ("dice_best", "iou_best") if best else ("dice_fixed", "iou_fixed")
    cols, data = [], {}
    for d in dataset_order(results):
        title = DATASET_TITLES.get(d, d)
        for label, key in (("Point", "pointing_game"), ("Dice", dice), ("IoU", iou)):
            cols.append((title, label))
            data[(title, label)] = [_pct(m["datasets"].get(d, {}).get("summary", {}).get(key))
                                    for m in results.values()]
    df = pd.DataFrame(data, index=pd.Index(list(results), name="Method"))
    df.columns = pd.MultiIndex.from_tuples(cols, names=["Dataset", "Metric"]) if cols else df.columns
    return df


def pointing_table(results: Mapping[str, dict], dataset: str) -> pd.DataFrame:
    """Tables 2-5: per-class pointing game (percent) of ``dataset``; first column is the class mean."""
    classes: list[str] = []
    for m in results.values():
        for c in m["datasets"].get(dataset, {}).get("classes", {}):
            if c not in classes:
                classes.append(c)
    rows = []
    for m in results.values():
        ds = m["datasets"].get(dataset, {})
        row = {"Mean": _pct(ds.get("summary", {}).get("pointing_game"))}
        row.update({c: _pct(ds.get("classes", {}).get(c, {}).get("pointing_game")) for c in classes})
        rows.append(row)
    return pd.DataFrame(rows, index=pd.Index(list(results), name="Method"), columns=["Mean", *classes])


def recognition_table(results: Mapping[str, dict]) -> pd.DataFrame:
    """Recognition per (method, dataset): AUROC, AUPRC, F1, Accuracy, Hamming (percent)."""
    return metric_table(results, "recognition")


def _column(m) -> str:
    return m.column or (f"{m.stratum} {R.metric(m.base).column or R.metric(m.base).short}" if m.stratum else m.short)


def metric_table(results: Mapping[str, dict], group: str) -> pd.DataFrame:
    """A group of registered metrics (:func:`xbench.score.registry.table_metrics`) per (method, dataset),
    with each method's overall mean last (percent for fraction metrics)."""
    keys = [(_column(m), m) for m in R.table_metrics(group)]
    rows, index = [], []
    for label, m in results.items():
        for d in dataset_order({label: m}):
            s = m["datasets"][d]["summary"]
            rows.append({t: _shown(mm, s.get(mm.key)) for t, mm in keys})
            index.append((label, DATASET_TITLES.get(d, d)))
        rows.append({t: _shown(mm, m.get("overall", {}).get(mm.key)) for t, mm in keys})
        index.append((label, "Mean"))
    return pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=["Method", "Dataset"]),
                        columns=[t for t, _ in keys])


def to_markdown(df: pd.DataFrame, *, digits: int = 2) -> str:
    """A GitHub Markdown table (no extra dependency); NaN prints as ``–``."""
    def cell(v) -> str:
        if isinstance(v, (float, np.floating)):
            return "–" if np.isnan(v) else f"{v:.{digits}f}"
        return str(v)

    if isinstance(df.columns, pd.MultiIndex):
        headers = [" ".join(str(x) for x in c) for c in df.columns]
    else:
        headers = [str(c) for c in df.columns]
    index_names = [n or "" for n in (df.index.names if df.index.nlevels > 1 else [df.index.name])]
    lines = ["| " + " | ".join(md_cell(h) for h in index_names + headers) + " |",
             "|" + "|".join(["---"] * len(index_names) + ["---:"] * len(headers)) + "|"]
    for idx, row in df.iterrows():
        keys = list(idx) if isinstance(idx, tuple) else [idx]
        lines.append("| " + " | ".join([md_cell(k) for k in keys] + [cell(v) for v in row]) + " |")
    return "\n".join(lines) + "\n"


def write_table(df: pd.DataFrame, out_dir: str | os.PathLike, stem: str, *, digits: int = 2) -> list[Path]:
    """Write ``<stem>.csv`` (rounded to ``digits``) and ``<stem>.md`` into ``out_dir``; return the paths."""
    out = Path(out_dir)
    csv_path, md_path = out / f"{stem}.csv", out / f"{stem}.md"
    flat = df.copy()
    if isinstance(flat.columns, pd.MultiIndex):
        flat.columns = [" ".join(str(x) for x in c) for c in flat.columns]
    flat.columns = [csv_cell(str(c)) for c in flat.columns]
    flat.index = flat.index.map(lambda k: tuple(csv_cell(str(x)) for x in k) if isinstance(k, tuple) else csv_cell(str(k)))
    flat.index.names = [csv_cell(n) if n else n for n in df.index.names]
    flat.round(digits).to_csv(csv_path)
    md_path.write_text(to_markdown(df, digits=digits))
    return [csv_path, md_path]


def write_tables(results: Mapping[str, dict], out_dir: str | os.PathLike) -> list[Path]:
    """Table 1 (best and fixed threshold), one pointing table per dataset, and the recognition table."""
    paths = write_table(grounding_table(results), out_dir, "table1_grounding")
    paths += write_table(grounding_table(results, best=False), out_dir, "table1_grounding_fixed")
    for d in dataset_order(results):
        paths += write_table(pointing_table(results, d), out_dir, f"table_pointing_{d}")
    paths += write_table(recognition_table(results), out_dir, "table_recognition")
    for group, stem in (("lesion_size", "table_lesion_size"), ("other", "table_grounding_more")):
        if _present(results, group):
            paths += write_table(metric_table(results, group), out_dir, stem)
    return paths


def _present(results: Mapping[str, dict], group: str) -> bool:
    """True when some result has a value (or null) of a metric of ``group``: a metrics.json written before the
    metric existed gets no empty table."""
    keys = {m.key for m in R.table_metrics(group)}
    return any(keys & set(m.get("overall", {})) for m in results.values())
