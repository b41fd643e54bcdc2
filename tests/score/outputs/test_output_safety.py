"""xbench-score writes nothing outside --out and nothing into an input; its tables are injection-safe."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from score_stores import make_gt, make_submission, run_score_cli
from xbench.schemas.store import store_sha256
from xbench.score.cells import csv_cell, md_cell
from xbench.score.table import Cell, Table, write_table


run = run_score_cli


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("safe")
    gt = make_gt(d / "gt.zarr", seed=3)
    make_submission(d / "a.zarr", gt, seed=4)
    return d


def _files(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("where", ["gt.zarr/out", "gt.zarr", "a.zarr", "a.zarr/phantom", "."])
def test_out_into_or_around_an_input_is_refused_and_nothing_changes(stores, capsys, where):
    before = store_sha256(stores / "gt.zarr"), store_sha256(stores / "a.zarr"), _files(stores)
    code, _, err = run([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", stores / where, "--bootstrap", "0"],
                       capsys)
    assert code == 2, err
    assert "--out" in err and "nothing was written" in err and "Traceback" not in err
    assert (store_sha256(stores / "gt.zarr"), store_sha256(stores / "a.zarr"), _files(stores)) == before


def test_hostile_submission_names_become_safe_distinct_folders(stores, tmp_path, capsys):
    subs = tmp_path / "subs"
    # "." as a stem, too long, case twins, the name of a report file
    names = ["..zarr", "x" * 200 + ".zarr", "A.zarr", "a.zarr", "index.html.zarr"]
    for n in names:
        shutil.copytree(stores / "a.zarr", subs / n)
    out = tmp_path / "res"
    code, _, err = run([*(subs / n for n in names), "--gt", stores / "gt.zarr", "--out", out, "--bootstrap", "0",
                        "--quiet"], capsys)
    assert code == 0, err
    marker = json.loads((out / "xbench-output.json").read_text())
    folders = marker["names"]["submissions"]
    assert list(folders) == [".", "x" * 200, "A", "a", "index.html"]
    assert len({f.casefold() for f in folders.values()}) == 5 and folders["index.html"] != "index.html"
    assert (out / "index.html").is_file()  # the report's page, not a submission's folder
    for folder in folders.values():
        assert (out / folder / "metrics.json").is_file() and len(folder) <= 80
    assert sorted(os.listdir(tmp_path)) == ["res", "subs"]  # nothing beside --out


def test_rerun_replaces_the_whole_output(stores, tmp_path, capsys):
    out = tmp_path / "res"
    assert run([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", out, "--bootstrap", "0", "--quiet"],
               capsys)[0] == 0
    (out / "table_stale.csv").write_text("from an older version")  # listed as ours by the marker? no: a user file
    marker = json.loads((out / "xbench-output.json").read_text())
    marker["files"].append("table_stale.csv")  # pretend the previous run wrote it
    (out / "xbench-output.json").write_text(json.dumps(marker))
    (out / "mine.txt").write_text("keep")
    assert run([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", out, "--bootstrap", "0", "--quiet",
                "--overwrite"], capsys)[0] == 0  # without --overwrite refused (tests/score/outputs/test_nothing_lost.py)
    assert not (out / "table_stale.csv").exists() and (out / "mine.txt").read_text() == "keep"
    assert sorted(os.listdir(tmp_path)) == ["res"]


HOSTILE = ["<script>alert(1)</script>", "a | b", "x\n| evil | row |", "=cmd|' /C calc'!A0", "+1", "-2", "@SUM(1)",
           "\tTAB", "$\\frac{a}{$", "**bold** [link](http://x)"]


def _hostile_table(value, headers, index="Method"):
    """A table whose row labels are HOSTILE and whose column headers are ``headers`` (class-style columns)."""
    t = Table("t", "t", [(h, h, "pointing_game") for h in headers], metric_in_header=False, index=(index,))
    t.rows = {h: [Cell(value) for _ in headers] for h in HOSTILE}
    return t


def _md_rows(text):
    return [ln for ln in text.splitlines() if ln.startswith("|")]


def _md_cells(line):
    # split on unescaped pipes only
    return [c for c in pd.Series([line]).str.split(r"(?<!\\)\|", regex=True)[0]][1:-1]


def test_markdown_cells_are_literal():
    text = _hostile_table(0.005, HOSTILE[:3]).to_markdown(heading=False)
    rows = _md_rows(text)
    assert len(rows) == 2 + len(HOSTILE)  # no extra row
    assert all(len(_md_cells(r)) == 4 for r in rows)  # no extra column
    assert "<script>" not in text and "&lt;script&gt;" in text
    for raw in HOSTILE:
        assert "\n" not in md_cell(raw) and "<" not in md_cell(raw)


def test_csv_cells_that_a_spreadsheet_would_evaluate_are_neutralised(tmp_path):
    write_table(_hostile_table(-0.005, HOSTILE, index="=Method"), tmp_path, "t")
    cells = list(csv.reader(io.StringIO((tmp_path / "t.csv").read_text())))
    texts = cells[0] + [row[0] for row in cells[1:]]
    assert not [c for c in texts if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert "'=cmd|' /C calc'!A0" in texts and "'-2" in texts
    assert all(row[1] == "-0.5" for row in cells[1:])  # numbers stay numbers
    assert csv_cell(-3.0) == -3.0 and csv_cell("ok") == "ok"


def test_an_injected_model_name_goes_through_the_whole_scorer(stores, tmp_path, capsys):
    import zarr

    sub = tmp_path / "evil.zarr"
    shutil.copytree(stores / "a.zarr", sub)
    g = zarr.open_group(str(sub), mode="r+")
    meta = dict(g.attrs["xbench"])
    meta["model"] = HOSTILE[3] + HOSTILE[2]
    g.attrs["xbench"] = meta
    out = tmp_path / "res"
    code, _, err = run([sub, "--gt", stores / "gt.zarr", "--out", out, "--bootstrap", "0", "--quiet"], capsys)
    assert code == 0, err
    md = (out / "table1_grounding.md").read_text()
    assert len(_md_rows(md)) == 3 and "=cmd\\|' /C calc'!A0x \\| evil \\| row \\|" in md
    rows = list(csv.reader(io.StringIO((out / "table1_grounding.csv").read_text())))
    assert len(rows) == 2 and rows[1][0] == "'" + meta["model"]  # one data row, quoted by the csv writer
    assert np.isfinite(float(rows[1][1])) or rows[1][1] == ""


def test_a_failed_report_leaves_the_scores_and_no_half_report(stores, tmp_path, capsys, monkeypatch):
    import xbench.score.report as report

    def half_then_fail(out, *args, **kwargs):
        (out / "leaderboard.md").write_text("half")
        raise RuntimeError("figure failed")

    monkeypatch.setattr(report, "build_report", half_then_fail)
    shutil.copytree(stores / "a.zarr", tmp_path / "b.zarr")
    out = tmp_path / "res"
    code, _, err = run([stores / "a.zarr", tmp_path / "b.zarr", "--gt", stores / "gt.zarr", "--out", out,
                        "--bootstrap", "0", "--quiet"], capsys)
    assert code == 0 and "the report failed: unexpected RuntimeError: figure failed (run again with --debug" in err
    assert sorted(os.listdir(out)) == ["a", "b", "xbench-output.json"]
