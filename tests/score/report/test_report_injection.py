"""Names from data reach the report as text, never as markup, formulas, mathtext or paths."""
from __future__ import annotations

import csv
import io
import os

import report_fixtures
from click.testing import CliRunner

from xbench.score.report.cli import report

MODELS = ["$\\frac{a}{$ <script>alert(1)</script>", "=HYPERLINK(\"http://x\")", "a | b\n| evil | row |"]
DATASETS = {"../../escape": ["=cls|' /C calc'!A0", "$x$ <b>"], "phantom": ["Mass"]}


def test_hostile_model_dataset_and_class_names(tmp_path):
    truth = report_fixtures.make_truth(0, datasets=DATASETS, n_cases=12)
    dirs = [report_fixtures.write_result(tmp_path / f"r{k}", truth, model=m, skill=0.3 * k, seed=k)
            for k, m in enumerate(MODELS)]
    out = tmp_path / "rep"
    res = CliRunner().invoke(report, [*map(str, dirs), "--out", str(out), "--bootstrap", "10", "--quiet"])
    assert res.exit_code == 0, res.output
    # nothing outside --out, and the data-derived file names stay inside it
    assert sorted(os.listdir(tmp_path)) == ["r0", "r1", "r2", "rep"]
    root = out.resolve()
    for p in out.rglob("*"):
        assert root in p.resolve().parents
    md = (out / "leaderboard.md").read_text()
    assert "<script>" not in md and "<b>" not in md
    table_rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert not any(ln.startswith("| evil") for ln in table_rows)  # no injected row
    for name in ("leaderboard.csv", "comparisons.csv", *(f"per_class/{f}" for f in os.listdir(out / "per_class"))):
        for row in csv.reader(io.StringIO((out / name).read_text())):
            for cell in row:
                try:
                    float(cell)
                    continue  # a number, negative ones included
                except ValueError:
                    assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r"), (name, cell)
    import json

    manifest = json.loads((out / "report.json").read_text())
    assert "../../escape_pointing_game" in manifest["names"]["per_class"]
    html = (out / "index.html").read_text()
    assert "<script>alert" not in html
