"""A metric registered with fmt="number" prints as a number (not x100) in every table: the report's
leaderboard.md, index.html and CSV, and xbench-score's tables (one tables module, score/outputs/tables.py)."""
from __future__ import annotations

import csv
import json
import shutil

import numpy as np

from xbench.score.metrics import registry as R
from xbench.score.report import build_report
from xbench.score.outputs.tables import mark_columns, write_tables
from xbench.score.table import Cell, Table

# a per-pair ratio (not a fraction): shown as is, 2 decimals, lower is better
RATIO = R.Metric("ratio_x", "A ratio", "Ratio", "grounding", lambda v: v.hit.astype(np.float64), fmt="number",
                 higher_is_better=False)
VALUES = {"strong": 3.14159, "medium": 12.5, "weak": 0.5}  # per model, in every dataset and overall


def _with_ratio(result_dirs, root):
    """Copies of the result folders whose metrics.json hold the ratio (value, and an interval per dataset)."""
    dirs = []
    for d in result_dirs:
        dst = root / d.name
        shutil.copytree(d, dst)
        m = json.loads((dst / "metrics.json").read_text())
        v = VALUES[d.name]
        m["overall"]["ratio_x"] = v
        for ds in m["datasets"].values():
            ds["summary"]["ratio_x"] = v
            ds.setdefault("ci95", {})["ratio_x"] = [v - 0.25, v + 1.0]
        (dst / "metrics.json").write_text(json.dumps(m))
        dirs.append(dst)
    return dirs


def test_a_number_metric_is_no_percentage_in_the_report(result_dirs, tmp_path):
    dirs = _with_ratio(result_dirs, tmp_path / "in")
    with R.registered(RATIO):
        build_report(tmp_path / "rep", dirs, bootstrap=0, overlays=False)
    md = (tmp_path / "rep" / "leaderboard.md").read_text()
    section = md[md.index("### More grounding metrics"):]
    head = next(ln for ln in section.splitlines() if ln.startswith("| Model"))
    assert "Phantom Ratio" in head and "Overall Ratio" in head
    weak = next(ln for ln in section.splitlines() if ln.startswith("| weak "))
    # lower is better: weak (0.50) is best, strong (3.14) second; the interval is in the metric's units too
    assert "**0.50** (0.25–1.50)" in weak and "50.00" not in weak
    strong = next(ln for ln in section.splitlines() if ln.startswith("| strong "))
    assert "<u>3.14</u> (2.89–4.14)" in strong and "314.16" not in md
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "<b>0.50</b><br><span class=\"ci\">0.25–1.50</span>" in page and "<u>3.14</u>" in page
    assert "314.16" not in page and "1250.00" not in page and ">12.50<" in page
    with open(tmp_path / "rep" / "grounding_more.csv", newline="") as fh:
        rows = {r["model"]: r for r in csv.DictReader(fh)}
    assert float(rows["medium"]["overall/ratio_x"]) == 12.5  # the metrics.json value, full precision
    assert float(rows["medium"]["phantom/ratio_x/ci_hi"]) == 13.5


def test_a_number_metric_is_no_percentage_in_the_scorer_tables(tmp_path):
    m = {"overall": {"pointing_game": 0.5, "ratio_x": 3.14159},
         "datasets": {"phantom": {"summary": {"pointing_game": 0.5, "ratio_x": 3.14159}, "classes": {}}}}
    with R.registered(RATIO):
        write_tables({"A": m}, tmp_path)
    lines = (tmp_path / "table_grounding_more.csv").read_text().splitlines()
    col = lines[0].split(",").index("Ratio")
    assert [ln.split(",")[col] for ln in lines[1:]] == ["3.14", "3.14"]
    md = (tmp_path / "table_grounding_more.md").read_text()
    assert "| 3.14 |" in md and "314.16" not in md


def test_marks_follow_the_metric_direction_in_its_units():
    t = Table("t", "t", [("G", "g", "ratio_x")])
    for name, v in [("a", 1.004), ("b", 1.0), ("c", 2.0), ("d", 0.5)]:
        t.rows[name] = [Cell(v)]
    with R.registered(RATIO):
        mark_columns(t)
        text = t.to_markdown()
    # 1.004 and 1.0 both print 1.00: they share the second mark; 0.50 is best (lower is better)
    assert {k: c[0].mark for k, c in t.rows.items()} == {"a": "second", "b": "second", "c": None, "d": "best"}
    assert "| d | **0.50** |" in text and "| a | <u>1.00</u> |" in text
