"""The report and compare commands: exit codes, one line per problem, outputs written."""
from __future__ import annotations

import json
import os

from click.testing import CliRunner

from xbench.score.report.cli import compare, report


def test_report_cli_writes_the_page(result_dirs, tmp_path):
    out = tmp_path / "rep"
    res = CliRunner().invoke(report, [*map(str, result_dirs), "--out", str(out), "--bootstrap", "20", "--quiet",
                                      "--no-overlays"])
    assert res.exit_code == 0, res.output
    assert (out / "index.html").is_file() and (out / "leaderboard.csv").is_file()
    assert not list(out.glob("figures/overlay_*"))


def test_report_cli_json_prints_manifest(result_dirs, tmp_path):
    res = CliRunner().invoke(report, [str(result_dirs[0]), "--out", str(tmp_path / "r"), "--bootstrap", "0", "--json",
                                      "--no-overlays"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["models"][0]["name"] == "strong"


def test_report_cli_bad_inputs_exit_2_one_line_each(tmp_path):
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(report, [str(tmp_path / "nope"), str(tmp_path / "empty"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.startswith("report: ")]  # the CLI layer names the command
    assert len(lines) == 2 and "not a directory" in lines[0] and "no metrics.json" in lines[1]
    assert "Traceback" not in res.output


def test_report_cli_rejects_bad_submission_option(result_dirs, tmp_path):
    res = CliRunner().invoke(report, [str(result_dirs[0]), "--out", str(tmp_path / "o"), "--submission", "noequals"])
    assert res.exit_code == 2 and "NAME=PATH" in res.output


def test_compare_cli_markdown_json_and_csv(result_dirs, tmp_path):
    a, b = str(result_dirs[0]), str(result_dirs[2])
    res = CliRunner().invoke(compare, [a, b, "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    # plain text for a terminal (score/report/terminal.py): the pair, the scope as a heading, no Markdown table
    assert "strong vs weak: paired bootstrap of A − B" in res.output and "\nOverall\n" in res.output
    assert "|" not in res.output
    res = CliRunner().invoke(compare, [a, b, "--bootstrap", "0", "--json", "--per-class", "--out", str(tmp_path / "c.csv")])
    rows = json.loads(res.output)["rows"]
    assert any(r["cls"] == "disc" for r in rows)
    assert (tmp_path / "c.csv").read_text().startswith("a,b,scope,class,metric")


def test_rerun_removes_what_the_earlier_report_wrote_and_this_one_did_not(result_dirs, tmp_path):
    out = tmp_path / "rep"
    first = CliRunner().invoke(report, [*map(str, result_dirs), "--out", str(out), "--bootstrap", "20", "--quiet"])
    assert first.exit_code == 0, first.output
    before = json.loads((out / "report.json").read_text())["files"]
    assert before["overlays"] and (out / "comparisons.csv").is_file()
    (out / "notes.txt").write_text("mine")  # not the report's: must survive
    second = CliRunner().invoke(report, [str(result_dirs[0]), "--out", str(out), "--bootstrap", "20", "--quiet",
                                         "--no-overlays"])
    assert second.exit_code == 0, second.output
    after = json.loads((out / "report.json").read_text())["files"]
    assert not after["overlays"] and not list(out.glob("figures/overlay_*"))
    assert not (out / "comparisons.csv").exists()  # one model: no gaps any more
    listed = {f for group in after.values() for f in group}
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert written - listed == {"index.html", "report.json", "notes.txt", "xbench-output.json"}


def test_report_beside_the_score_folders_it_reads_keeps_them(result_dirs, tmp_path):
    import shutil

    results = tmp_path / "results"
    dirs = [shutil.copytree(d, results / d.name) for d in result_dirs[:2]]
    before = {p.name: p.read_bytes() for p in dirs[0].iterdir()}
    for _ in range(2):  # the second run replaces the first run's report, never the score folders
        res = CliRunner().invoke(report, [*map(str, dirs), "--out", str(results), "--bootstrap", "0", "--quiet",
                                          "--no-overlays"])
        assert res.exit_code == 0, res.output
        assert (results / "index.html").is_file()
        assert {p.name: p.read_bytes() for p in dirs[0].iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == ["results"]
    res = CliRunner().invoke(report, [*map(str, dirs), "--out", str(dirs[0]), "--bootstrap", "0"])
    assert res.exit_code == 2 and "is the result folder" in res.output
    assert {p.name: p.read_bytes() for p in dirs[0].iterdir()} == before


def test_compare_never_writes_into_a_result_folder(result_dirs):
    before = (result_dirs[0] / "metrics.json").read_bytes()
    res = CliRunner().invoke(compare, [str(result_dirs[0]), str(result_dirs[1]), "--bootstrap", "0", "--out",
                                       str(result_dirs[0] / "metrics.json")])
    assert res.exit_code == 2 and "inside the result folder" in res.output
    assert (result_dirs[0] / "metrics.json").read_bytes() == before
