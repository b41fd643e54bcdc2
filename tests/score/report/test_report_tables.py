"""The leaderboard tables hold exactly the metrics.json values; marks follow the paper's convention."""
from __future__ import annotations

import csv
import json

import pytest

from xbench.score.report import load_results
from xbench.score.outputs.tables import grounding_table, mark_columns, per_class_table
from xbench.score.table import Cell, Table


def _read_csv(path):
    with open(path, newline="") as fh:
        return {row["model"]: row for row in csv.DictReader(fh)}


def _expected(metrics, scope, key, cls=None):
    if scope == "overall":
        return metrics["overall"].get(key)
    ds = metrics["datasets"][scope]
    if cls is None:
        return ds["summary"].get(key)
    return ds["classes"][cls].get(key)


@pytest.mark.parametrize("name", ["leaderboard.csv", "grounding_fixed.csv", "recognition.csv"])
def test_main_csv_values_equal_metrics_json(built_report, result_dirs, name):
    rows = _read_csv(built_report / name)
    metrics = {json.loads((d / "metrics.json").read_text())["xbench"]["submission"]["model"]:
               json.loads((d / "metrics.json").read_text()) for d in result_dirs}
    assert set(rows) == set(metrics)
    checked = 0
    for model, row in rows.items():
        for col, val in row.items():
            if col == "model" or col.endswith(("/ci_lo", "/ci_hi")):
                continue
            scope, key = col.split("/")
            exp = _expected(metrics[model], scope, key)
            if exp is None:
                assert val == ""
            else:
                assert float(val) == exp  # full precision, no rounding
                checked += 1
    assert checked >= 3 * 6


def test_per_class_csv_values_and_class_intervals_equal_metrics_json(built_report, result_dirs):
    metrics = {d.name: json.loads((d / "metrics.json").read_text()) for d in result_dirs}
    for dataset in ("phantom", "siim_acr"):
        rows = _read_csv(built_report / "per_class" / f"{dataset}_pointing_game.csv")
        for model, row in rows.items():
            m = metrics[model]
            assert float(row["mean/pointing_game"]) == m["datasets"][dataset]["summary"]["pointing_game"]
            for cls, entry in m["datasets"][dataset]["classes"].items():
                assert float(row[f"{cls}/pointing_game"]) == entry["pointing_game"]
                lo, hi = entry["ci95"]["pointing_game"]
                assert float(row[f"{cls}/pointing_game/ci_lo"]) == lo
                assert float(row[f"{cls}/pointing_game/ci_hi"]) == hi


def test_markdown_shows_percentages_and_marks(built_report, result_dirs):
    md = (built_report / "leaderboard.md").read_text()
    m = json.loads((result_dirs[0] / "metrics.json").read_text())  # "strong" is best on overall pointing
    v = m["overall"]["pointing_game"]
    assert f"**{100 * v:.2f}**" in md
    assert "<u>" in md  # a second best exists with three models


def test_marks_best_second_and_ties():
    t = Table("t", "t", [("G", "g", "pointing_game")])
    for name, v in [("a", 0.5), ("b", 0.70001), ("c", 0.7), ("d", 0.6), ("e", None)]:
        t.rows[name] = [Cell(v)]
    mark_columns(t)
    marks = {k: cells[0].mark for k, cells in t.rows.items()}
    # b and c print as 70.00: both best; the second best is then 60.00
    assert marks == {"a": None, "b": "best", "c": "best", "d": "second", "e": None}


def test_marks_need_two_models_and_second_needs_three():
    t = Table("t", "t", [("G", "g", "auroc")])
    t.rows["a"] = [Cell(0.9)]
    assert mark_columns(t).rows["a"][0].mark is None
    t.rows["b"] = [Cell(0.8)]
    mark_columns(t)
    assert [t.rows[k][0].mark for k in "ab"] == ["best", None]


def test_missing_value_renders_as_dash(result_dirs):
    results = load_results(result_dirs)
    results[1].metrics["datasets"]["siim_acr"]["summary"]["pointing_game"] = None
    t = grounding_table(results)
    assert "–" in t.to_markdown()
    assert t.to_csv().count("\n") == 4
    pc = per_class_table(results, "phantom", "dice_best")
    assert pc.columns[0][1] == "mean" and len(pc.columns) == 4
