"""The terminal tables (issue 35 item 10): one board renderer for xbench-score, xbench report and xbench run/demo,
the same headers everywhere, every line within 100 columns, and `xbench compare` as plain text (no Markdown
escapes) for a terminal."""
from __future__ import annotations

import json
import re
import shutil

from click.testing import CliRunner

from xbench.score.cli import ranked_table
from xbench.score.outputs.leaderboard import TERMINAL_COLUMNS
from xbench.score.report.terminal import WIDTH, board_text, leaderboard_text, overall_lines
from xbench.suite import format_leaderboard

OVERALL = {"pointing_game": 0.4143, "dice_best": 0.3, "iou_best": 0.2, "dice_fixed": 0.25, "auroc": 0.7}
CI = {k: (v - 0.1, v + 0.1) for k, v in OVERALL.items()}


def _header(text: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.lstrip().startswith("#"))
    return line.split()


def test_every_board_has_the_same_header():
    """xbench-score (ranked_table), xbench run/demo (format_leaderboard) and xbench report (leaderboard_text)."""
    from xbench.score.report._load import load_results  # noqa: F401 - the report's loader is importable

    want = ["#", "model", *[h for _, h in TERMINAL_COLUMNS]]
    assert _header(ranked_table([("m", OVERALL, CI)])) == want
    assert _header(format_leaderboard([{"model": "m", **OVERALL, "ci95": CI}])) == want

    class R:  # a loaded result, as the report has it
        name, metrics = "m", {"overall": OVERALL, "ci95": {k: list(v) for k, v in CI.items()}}

    assert _header(leaderboard_text([R()])) == want
    assert ranked_table([("m", OVERALL, CI)]) == format_leaderboard([{"model": "m", **OVERALL, "ci95": CI}])


def test_boards_fit_100_columns_with_long_names_and_intervals():
    rows = [(f"model-{i}-" + "x" * (10 * i), OVERALL, CI) for i in range(6)]
    text = board_text(rows)
    assert all(len(ln) <= WIDTH for ln in text.splitlines()), max(map(len, text.splitlines()))
    # every interval printed, independent of where it sits: 6 models x 5 metrics
    assert len(re.findall(r"\[\d+\.\d\d, \d+\.\d\d\]", text)) == 6 * len(TERMINAL_COLUMNS)
    # a long name stands on its own line; its values are on the next line, under the header's columns
    lines = text.splitlines()
    header = lines[1]
    long_at = next(i for i, ln in enumerate(lines) if "model-5-" in ln)
    assert "41.43" not in lines[long_at] and "41.43" in lines[long_at + 1]
    assert lines[long_at + 1].index("41.43") + 5 == header.index("pointing") + len("pointing")


def test_one_submission_prints_a_short_table_not_23_values_on_a_line():
    overall = dict(OVERALL, **{f"metric_{i}": i / 100 for i in range(18)})  # 23 values, as the scorer writes
    lines = overall_lines(overall, CI)
    assert all(len(ln) <= WIDTH for ln in lines)
    text = "\n".join(lines)
    for i in range(18):  # every value still printed, in percent
        assert f"metric_{i} {i:.2f}" in text
    assert "[31.43, 51.43]" in text and lines[0].split() == [h for _, h in TERMINAL_COLUMNS]


def test_scorer_and_report_commands_print_within_100_columns(result_dirs, tmp_path):
    from xbench.score.report.cli import report

    res = CliRunner().invoke(report, [*map(str, result_dirs), "--out", str(tmp_path / "o"), "--bootstrap", "20",
                                      "--no-overlays"])
    assert res.exit_code == 0, res.output
    board = (tmp_path / "o" / "leaderboard.txt").read_text().splitlines()
    assert board and all(len(ln) <= WIDTH for ln in board)
    assert _header("\n".join(board)) == ["#", "model", *[h for _, h in TERMINAL_COLUMNS]]


def test_compare_prints_names_unescaped_and_fits_100_columns(result_dirs, tmp_path):
    """`xbench compare` in a terminal: "dog (dog) [dog]" as it is, not Markdown's "\\[dog\\]"."""
    from xbench.score.report.cli import compare

    a = tmp_path / "a"
    shutil.copytree(result_dirs[0], a)
    m = json.loads((a / "metrics.json").read_text())
    m["xbench"].setdefault("submission", {})["model"] = "dog (dog) [dog]"
    (a / "metrics.json").write_text(json.dumps(m))
    res = CliRunner().invoke(compare, [str(a), str(result_dirs[1]), "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "\\[" not in out and "\\]" not in out and "|---" not in out
    assert all(len(ln) <= WIDTH for ln in out.splitlines()), max(map(len, out.splitlines()))
    assert re.search(r"^  Point ", out, re.M)
    # the gap printed agrees with the two values printed beside it (A - B)
    row = next(ln for ln in out.splitlines() if re.search(r"\d+\.\d\d\s+\d+\.\d\d\s+[+-]\d+\.\d\d", ln))
    va, vb, d = re.search(r"(\d+\.\d\d)\s+(\d+\.\d\d)\s+([+-]\d+\.\d\d)", row).groups()
    assert abs(float(va) - float(vb) - float(d)) <= 0.011
