"""The page as a reader meets it: tables scroll in their own box with the header kept, bars carry the tables'
intervals, a figure and a table under one label show one quantity, overlays are captioned with the model's label,
labels and file names stay unique, and the terminal leaderboard prints intervals."""
from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from xbench.score.report import build_report, load_results
from xbench.score.report._load import Result, unique_labels


def test_every_table_scrolls_in_its_own_box_with_a_sticky_header(built_report):
    page = (built_report / "index.html").read_text()
    css = page[page.index("<style>"):page.index("</style>")]
    assert re.search(r"\.scroll\{[^}]*overflow:auto", css) and re.search(r"thead th\{[^}]*position:sticky", css)
    assert re.search(r"tr>th:first-child\{[^}]*position:sticky;left:0", css)  # the model column stays in view
    tables = re.findall(r'(.{0,40})<table class="lb"', page)
    assert tables and all(t.endswith('<div class="scroll">') for t in tables), tables
    # captions below the box, readable whatever the table's width (inside a table they scroll away with it)
    assert "<caption>" not in page and page.count('</table></div><p class="caption">') == len(tables)


def test_lesion_size_figure_shows_the_tables_numbers(scorer_results, tmp_path):
    from xbench.score.report import figures as F
    from xbench.score.outputs.tables import extra_tables

    results = load_results(scorer_results)
    info = F.region_size(results, tmp_path / "region_size", bins="fixed")
    assert info["quantity"] == "mean over classes"
    table = next(t for t in extra_tables(results) if t.key == "lesion_size")
    cols = [(g, m) for _, g, m in table.columns]
    for r in results:
        cells = dict(zip(cols, table.rows[r.name]))
        for k, size in enumerate(("small", "medium", "large")):
            for metric in ("pointing_game", "dice_best"):
                cell = cells[("overall", f"{metric}_{size}")]  # two datasets: the table's Overall group
                shown = info["values"][r.name][metric][k]
                if cell.value is None:
                    assert shown != shown  # NaN: no bar
                    continue
                assert shown == pytest.approx(100 * cell.value)
                ci = info["values"][r.name]["ci95"][metric][k]
                assert ci == pytest.approx((100 * cell.ci[0], 100 * cell.ci[1]))


def test_tercile_figure_says_it_pools_pairs_and_has_intervals(built_report, result_dirs, tmp_path):
    from xbench.score.report import figures as F

    results = load_results(result_dirs)
    info = F.region_size(results, tmp_path / "t", bins="tercile", bootstrap=50, seed=1)
    assert info["quantity"] == "pooled over pairs"
    for r in results:
        for metric in ("pointing_game", "dice_best"):
            for v, ci in zip(info["values"][r.name][metric], info["values"][r.name]["ci95"][metric]):
                if v == v:
                    assert ci is not None and ci[0] - 1e-9 <= v <= ci[1] + 1e-9


def test_fixed_vs_best_bars_carry_the_tables_intervals(built_report):
    page = (built_report / "index.html").read_text()
    assert "Error bars: 95% intervals, as in the tables." in page


def test_overlays_are_captioned_with_the_models_label(built_report):
    page = (built_report / "index.html").read_text()
    captions = re.findall(r'<img src="figures/overlay_[^"]+" alt="([^"]+)"', page)
    assert captions and all(" on " in c and "best and worst case" in c for c in captions)
    assert not any(c.startswith(("strong_", "medium_", "weak_")) for c in captions)  # never a file stem


def _result(name: str, path: str, method: str | None = None) -> Result:
    sub = {"model": name} if method is None else {"model": name, "method": method}
    return Result(name=name, path=Path(path), metrics={"datasets": {}, "xbench": {"submission": sub}})


def test_labels_are_unique_and_stable():
    rs = [_result("clip", "/a/clip"), _result("clip", "/b/clip"), _result("clip [clip]", "/c/x"),
          _result("dog", "/d/dog", "gradcam"), _result("dog", "/e/dog", "gradcam")]
    unique_labels(rs)
    names = [r.name for r in rs]
    assert len(set(names)) == len(names), names
    again = [_result("clip", "/a/clip"), _result("clip", "/b/clip"), _result("clip [clip]", "/c/x"),
             _result("dog", "/d/dog", "gradcam"), _result("dog", "/e/dog", "gradcam")]
    unique_labels(again)
    assert [r.name for r in again] == names  # the same inputs, the same labels
    same = [_result("m", "/a/m"), _result("m", "/a/m")]  # one folder given twice
    unique_labels(same)
    assert len({r.name for r in same}) == 2


@pytest.mark.parametrize("names", [("clip.v1", "clip.v2"), ("a.b", "a-b"), ("clip.v1", "clip_v1")])
def test_dotted_model_names_get_their_own_files(result_dirs, tmp_path, names):
    dirs = []
    for k, name in enumerate(names):
        d = tmp_path / f"r{k}"
        shutil.copytree(result_dirs[k], d)
        m = json.loads((d / "metrics.json").read_text())
        m["xbench"]["submission"]["model"] = name
        (d / "metrics.json").write_text(json.dumps(m))
        dirs.append(d)
    out = tmp_path / "rep"
    build_report(out, dirs, bootstrap=0, submissions={n: Path(result_dirs[k]).parent / "stores" /
                                                    f"{Path(result_dirs[k]).name}.zarr" for k, n in enumerate(names)})
    manifest = json.loads((out / "report.json").read_text())
    overlays = manifest["files"]["overlays"]
    assert len(overlays) == len(set(overlays)) == 2 * 2  # two models x two datasets, none overwritten
    for rel in overlays:
        assert (out / rel).is_file()
    figures = manifest["files"]["figures"]
    assert len(figures) == len(set(figures))
    page = (out / "index.html").read_text()
    for name in names:
        assert f"{name} on " in page


def test_terminal_leaderboard_prints_intervals(built_report, result_dirs):
    text = (built_report / "leaderboard.txt").read_text()
    lines = text.splitlines()
    assert "95% interval" in lines[0]
    with open(built_report / "leaderboard.csv", newline="") as fh:
        rows = {r["model"]: r for r in csv.DictReader(fh)}
    ranked = [i for i, ln in enumerate(lines) if re.match(r"\s*\d+\s", ln)]
    assert len(ranked) == len(rows)
    for i in ranked:  # a model's row, then its intervals on the line under it (first column: pointing game)
        line = lines[i] + " " + lines[i + 1]
        name = line.split()[1]
        m = re.search(r"^\s*\d+\s+\S+\s+(\d+\.\d\d)\s.*?\[(\d+\.\d\d), (\d+\.\d\d)\]", line)
        row = rows[name]
        key = "overall/pointing_game" if "overall/pointing_game" in row else next(k for k in row if k.endswith("/pointing_game"))
        assert float(m.group(1)) == pytest.approx(100 * float(row[key]), abs=0.0051)
        assert float(m.group(2)) == pytest.approx(100 * float(row[key + "/ci_lo"]), abs=0.0051)
        assert float(m.group(3)) == pytest.approx(100 * float(row[key + "/ci_hi"]), abs=0.0051)


def test_report_command_prints_the_leaderboard_with_intervals(result_dirs, tmp_path):
    from click.testing import CliRunner

    from xbench.score.report.cli import report

    res = CliRunner().invoke(report, [*map(str, result_dirs), "--out", str(tmp_path / "o"), "--bootstrap", "20",
                                      "--no-overlays"])
    assert res.exit_code == 0, res.output
    out = res.stdout.splitlines()
    board = [i for i, ln in enumerate(out) if re.match(r"\s*\d+\s", ln)]
    assert len(board) == 3 and all(re.search(r"^\s+\[\d+\.\d\d, \d+\.\d\d\]", out[i + 1]) for i in board)


@pytest.mark.parametrize("where", ["dataset", "top"])
def test_partial_results_are_said_on_the_page_and_in_the_terminal(result_dirs, tmp_path, where):
    d = tmp_path / "strong"
    shutil.copytree(result_dirs[0], d)
    m = json.loads((d / "metrics.json").read_text())
    if where == "dataset":
        m["datasets"]["phantom"]["partial"] = {"cases": 15, "of": 20}
    else:
        m["partial"] = {"phantom": {"cases": 15, "of": 20}}
    (d / "metrics.json").write_text(json.dumps(m))
    out = tmp_path / "rep"
    build_report(out, [d, result_dirs[1]], bootstrap=0, overlays=False)
    page = (out / "index.html").read_text()
    assert "partial: 15 of 20 cases" in page and page.index("partial: 15") < page.index("<h2>Leaderboard")
    assert "strong (partial: 15 of 20 cases)" in (out / "leaderboard.txt").read_text()


def test_an_impossible_partial_is_refused(result_dirs, tmp_path):
    from xbench.score.report import ReportInputError

    d = tmp_path / "strong"
    shutil.copytree(result_dirs[0], d)
    m = json.loads((d / "metrics.json").read_text())
    m["datasets"]["phantom"]["partial"] = {"cases": 30, "of": 20}
    (d / "metrics.json").write_text(json.dumps(m))
    with pytest.raises(ReportInputError, match="partial"):
        load_results([d])
