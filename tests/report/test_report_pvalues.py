"""p-values of the paired comparisons: floored at 1/(B+1), printed "< 1/(B+1)" there, Holm beside them (checked
against closed testing of Bonferroni tests, brute force over every subset), stated on the page and in compare."""
from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from xbench.score.report import floor_text, format_p
from xbench.score.report.paired import ComparisonRow, holm, with_holm


def closed_bonferroni(p: list[float]) -> list[float]:
    """Adjusted p by the closed testing principle with Bonferroni intersection tests: for each hypothesis, the
    largest p of every intersection holding it, p_S = min(1, |S| min_{j in S} p_j). Exponential; Holm's
    step-down is its shortcut, so the two must agree exactly."""
    m = len(p)
    out = []
    for i in range(m):
        worst = 0.0
        for k in range(1, m + 1):
            for S in itertools.combinations(range(m), k):
                if i in S:
                    worst = max(worst, min(1.0, k * min(p[j] for j in S)))
        out.append(worst)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_holm_equals_closed_testing(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 9))
    p = [float(x) for x in rng.choice([0.001, 0.004975, 0.01, 0.02, 0.04, 0.3, 0.5, 1.0], size=m)]  # ties too
    if seed % 3 == 0:
        p = [float(x) for x in rng.random(m)]
    assert holm(p) == pytest.approx(closed_bonferroni(p), abs=1e-12)


def test_holm_leaves_missing_tests_out_of_the_family():
    assert holm([0.01, None, 0.04]) == pytest.approx([0.02, None, 0.04])
    assert holm([]) == []


@pytest.mark.parametrize("b,shown", [(200, "< 0.005"), (1000, "< 0.001"), (100, "< 0.01"), (2000, "< 0.0005"),
                                     (20, "< 0.05"), (9, "< 0.1")])
def test_the_floor_is_printed_as_an_upper_bound(b, shown):
    floor = 1 / (b + 1)
    assert format_p(floor, floor) == shown
    assert float(floor_text(floor)) >= floor  # the printed bound stays true


def test_rows_are_floored_and_adjusted():
    row = lambda p, n: ComparisonRow("overall", None, "pointing_game", .5, .4, .1, .05, .15, p, n)  # noqa: E731
    from xbench.score.report.paired import _floored

    assert _floored(0.0, 200) == pytest.approx(1 / 201)
    assert _floored(0.3, 200) == 0.3 and _floored(None, 200) is None and _floored(0.0, 0) is None
    rows = with_holm([row(1 / 201, 200), row(0.02, 200), row(None, 0)])
    assert rows[0].at_floor and not rows[1].at_floor
    assert rows[0].p_holm == pytest.approx(2 / 201) and rows[1].p_holm == pytest.approx(0.02) and rows[2].p_holm is None


def test_compare_never_prints_p_below_the_floor_and_states_holm(result_dirs, tmp_path):
    from xbench.score.report.cli import compare

    a, b = str(result_dirs[0]), str(result_dirs[2])  # strong vs weak: every resample on one side
    res = CliRunner().invoke(compare, [a, b, "--n-boot", "200", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["p_values"]["adjustment"] == "holm" and "all metric × pair tests" in doc["p_values"]["family"]
    ps = [r for r in doc["rows"] if r["p_value"] is not None]
    assert ps and all(r["p_value"] >= 1 / (r["n_valid"] + 1) - 1e-15 for r in ps)
    assert any(r["at_floor"] for r in ps) and not any(r["p_value"] == 0.0 for r in ps)
    expected = closed_bonferroni([r["p_value"] for r in ps]) if len(ps) <= 12 else holm([r["p_value"] for r in ps])
    assert [r["p_holm"] for r in ps] == pytest.approx(expected)
    res = CliRunner().invoke(compare, [a, b, "--n-boot", "200"])
    assert "< 0.005" in res.output and "< 0.001" not in res.output
    assert "p (Holm)" in res.output and "Holm-adjusted over all metric × pair tests shown together" in res.output
    assert "B = 200 resamples" in res.output


def test_report_page_states_resamples_floor_and_holm(built_report):
    page = (built_report / "index.html").read_text()
    assert "<th>p (Holm)</th>" in page and "Holm-adjusted over all metric × pair tests shown together" in page
    assert "B = 100 resamples" in page and "never below 1/(B+1)" in page
    assert "100 resamples" in page
    cells = re.findall(r"<td>(&lt; [0-9.]+|[0-9.]+)</td>", page)
    assert "&lt; 0.001" not in cells  # 100 resamples cannot show p < 0.001
    csv = (built_report / "comparisons.csv").read_text().splitlines()
    header = csv[0].split(",")
    assert "p_holm" in header and "p_floor" in header and len(csv) > 2
    assert sum(line.startswith("a,b,") for line in csv) == 1  # one header for every gap
