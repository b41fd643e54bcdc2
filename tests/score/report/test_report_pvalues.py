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
    res = CliRunner().invoke(compare, [a, b, "--bootstrap", "200", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["p_values"]["adjustment"] == "holm" and "all metric × pair tests" in doc["p_values"]["family"]
    ps = [r for r in doc["rows"] if r["p_value"] is not None]
    assert ps and all(r["p_value"] >= 1 / (r["n_valid"] + 1) - 1e-15 for r in ps)
    assert any(r["at_floor"] for r in ps) and not any(r["p_value"] == 0.0 for r in ps)
    expected = closed_bonferroni([r["p_value"] for r in ps]) if len(ps) <= 12 else holm([r["p_value"] for r in ps])
    assert [r["p_holm"] for r in ps] == pytest.approx(expected)
    res = CliRunner().invoke(compare, [a, b, "--bootstrap", "200"])
    prose = " ".join(res.output.split())  # the terminal text wraps its notes at 100 columns
    assert "< 0.005" in res.output and "< 0.001" not in res.output
    assert "p (Holm)" in res.output and "Holm-adjusted over all metric × pair tests shown together" in prose
    assert "B = 200 resamples" in prose


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


# -- one definition of "significant": Holm over the distinct tests shown, p_holm < alpha (issue 34) ---------------
def stepdown_by_counting(p: list[float]) -> list[float]:
    """Holm from its definition, without sorting: hypothesis i is rejected at level a once every test with
    p_j <= p_i has min(1, #{k: p_k >= p_j} p_j) <= a, so its adjusted p is the largest of those (ties share it).
    O(m^2); equal to closed testing (checked below) where that is too slow (m > 10)."""
    return [max(min(1.0, sum(pk >= pj for pk in p) * pj) for pj in p if pj <= pi) for pi in p]


def brute_family(p, tests, alpha=0.05):
    """The verdicts written from the definition alone: the distinct tests (rows with the same identity are one;
    None: a test of its own), each adjusted by closed testing over them (by counting when there are more than
    10), then adjusted p < alpha per row."""
    distinct: dict = {}
    for i, (pi, t) in enumerate(zip(p, tests)):
        if pi is not None:
            distinct.setdefault(("t", t) if t is not None else ("r", i), []).append(pi)
    keys = list(distinct)
    family = [max(v) for v in distinct.values()]
    adj = dict(zip(keys, closed_bonferroni(family) if len(family) <= 10 else stepdown_by_counting(family)))
    out = [None if pi is None else adj[("t", t) if t is not None else ("r", i)]
           for i, (pi, t) in enumerate(zip(p, tests))]
    return out, len(keys), [a is not None and a < alpha for a in out]


@pytest.mark.parametrize("seed", range(24))
def test_holm_family_counts_each_test_once_against_brute_force(seed):
    from xbench.score.resampling.engine import holm_family, significant

    rng = np.random.default_rng(100 + seed)
    n_tests = int(rng.integers(1, 9))
    pool = rng.choice([1 / 201, 0.004, 0.006, 0.01, 0.02, 0.03, 0.3, 1.0], size=n_tests)  # ties and the floor
    if seed % 4 == 0:
        pool = rng.random(n_tests) * 0.1
    n_rows = int(rng.integers(n_tests, 2 * n_tests + 2))
    which = np.concatenate([np.arange(n_tests), rng.integers(0, n_tests, n_rows - n_tests)])  # every test shown
    rng.shuffle(which)
    tests = [f"t{k}" for k in which]
    p = [float(pool[k]) for k in which]
    for i in rng.choice(n_rows, size=int(rng.integers(0, 3)), replace=False):  # rows without a test,
        p[i] = None if rng.random() < 0.5 else p[i]
        tests[i] = None if p[i] is not None else tests[i]  # or a row whose identity is unknown: its own test
    got, m = holm_family(p, tests)
    want, m_want, verdicts = brute_family(p, tests)
    family = [q for q in p if q is not None]
    assert stepdown_by_counting(family) == pytest.approx(closed_bonferroni(family), abs=1e-12)
    assert m == m_want
    assert [None if g is None else round(g, 12) for g in got] == [None if w is None else round(w, 12) for w in want]
    assert [significant(g) for g in got] == verdicts


def test_holm_family_of_duplicated_rows_is_the_family_of_the_distinct_tests():
    from xbench.score.resampling.engine import holm_family

    p = [0.01, 0.02, 0.01, 0.02]
    assert holm_family(p, ["x", "y", "x", "y"]) == ([0.02, 0.02, 0.02, 0.02], 2)
    assert holm_family(p, None)[1] == 4 and holm_family(p, None)[0] == pytest.approx([0.04, 0.04, 0.04, 0.04])


@pytest.mark.parametrize("m", [1, 2, 7, 8, 12, 13, 20, 23, 46, 50, 51, 120])
def test_the_least_resamples_for_holm_and_the_sentence(m):
    from xbench.score.resampling.engine import holm_floor_note, holm_min_resamples

    least = next(b for b in range(0, 100_000) if m / (b + 1) < 0.05)  # brute force over B
    assert holm_min_resamples(m) == least
    assert holm_floor_note(m, least) is None and holm_floor_note(m, least + 5) is None
    if least > 1:
        note = holm_floor_note(m, least - 1, option="--bootstrap")
        assert f"B = {least - 1} resamples are too few for any gap to pass the Holm adjustment over {m} tests" in note
        assert f"raise --bootstrap to at least {least}" in note


def _one_dataset_results(root):
    import report_fixtures

    return report_fixtures.make_results(root, n_cases=20, datasets={"phantom": ("disc", "square", "ring")})


def test_one_dataset_overall_rows_are_the_dataset_rows_and_count_once(tmp_path):
    from xbench.score.report import load_results
    from xbench.score.report.paired import compare_results, family_size

    a, _, b = load_results(_one_dataset_results(tmp_path))
    rows = with_holm(compare_results(a, b, bootstrap=300, seed=1, per_class=False))
    overall = {r.metric: r for r in rows if r.scope == "overall"}
    dataset = {r.metric: r for r in rows if r.scope == "phantom"}
    assert overall and set(overall) <= set(dataset)
    for k, r in overall.items():  # the same statistic, resample by resample: one identity
        d = dataset[k]
        assert r.test == d.test and (r.p_value, r.ci_lo, r.ci_hi) == (d.p_value, d.ci_lo, d.ci_hi)
    assert len({dataset[k].test for k in dataset}) == len(dataset)  # distinct metrics are distinct tests
    ps = [r for r in rows if r.p_value is not None]
    want, m, verdicts = brute_family([r.p_value for r in ps], [(r.metric if r.scope == "overall" else r.metric)
                                                               + "/" + ("phantom" if r.scope in ("overall", "phantom")
                                                                        else r.scope) for r in ps])
    assert family_size(rows) == m == len(ps) - len(overall)
    assert [r.p_holm for r in ps] == pytest.approx(want, abs=1e-12)
    assert [r.significant for r in ps] == verdicts


def test_compare_significant_is_holm_below_alpha(result_dirs):
    """compare --json: significant <=> p_holm < 0.05 on every row, the family the distinct tests, and with too few
    resamples for any test to pass Holm the output says so (and marks none)."""
    from xbench.score.report.cli import compare

    a, b = str(result_dirs[0]), str(result_dirs[1])
    branches = []
    for bootstrap in (200, 1000):
        res = CliRunner().invoke(compare, [a, b, "--bootstrap", str(bootstrap), "--json"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.output)
        ps = [r for r in doc["rows"] if r["p_value"] is not None]
        want, m, verdicts = brute_family([r["p_value"] for r in ps], [r["test"] for r in ps])
        assert doc["p_values"]["n_tests"] == m and doc["p_values"]["alpha"] == 0.05
        assert [r["p_holm"] for r in ps] == pytest.approx(want, abs=1e-12)
        assert [r["significant"] for r in ps] == verdicts
        assert all(r["significant"] == (r["p_holm"] is not None and r["p_holm"] < 0.05) for r in doc["rows"])
        note = doc["p_values"]["too_few_resamples"]
        branches.append(m / (bootstrap + 1) >= 0.05)
        if branches[-1]:
            assert note and f"over {m} tests" in note and not any(verdicts)
            text = CliRunner().invoke(compare, [a, b, "--bootstrap", str(bootstrap)]).output
            assert "too few for any gap to pass the Holm adjustment" in " ".join(text.split())
            assert not re.search(r"\d\*", text)  # no difference is marked
        else:
            assert note is None and any(verdicts)
            text = CliRunner().invoke(compare, [a, b, "--bootstrap", str(bootstrap)]).output
            marked = len(re.findall(r"[+-]\d+\.\d\d\*", text))  # the A − B cells marked significant
            assert marked == sum(r["significant"] for r in doc["rows"]) and "Holm-adjusted p < 0.05" in " ".join(text.split())
    assert branches == [True, False]  # 27 tests: 27/201 >= 0.05 > 27/1001


def _page_verdicts(page: str) -> list[str]:
    table = page[page.index('id="gaps"'):]
    return re.findall(r'<td class="(?:sig|ns)">([^<]+)</td>', table[:table.index("</table>")])


def test_page_calls_real_only_what_holm_passes(result_dirs, tmp_path_factory):
    from xbench.score.report import build_report

    out = tmp_path_factory.mktemp("report-holm")
    build_report(out, result_dirs, bootstrap=500, seed=3, overlays=False)
    import csv

    rows = list(csv.DictReader((out / "comparisons.csv").open()))
    verdicts = _page_verdicts((out / "index.html").read_text())
    assert len(verdicts) == len(rows) == 8
    want, m, sig = brute_family([float(r["p_value"]) for r in rows], [None] * len(rows))
    assert m == 8 and [float(r["p_holm"]) for r in rows] == pytest.approx(want, abs=1e-12)
    assert [v == "real" for v in verdicts] == sig == [r["significant"] == "1" for r in rows]
    assert any(sig) and not all(sig)  # both verdicts occur on this fixture
    page = (out / "index.html").read_text()
    assert "A difference is significant (a gap is called real) when its Holm-adjusted p is below 0.05" in page
    assert "too few" not in page


def test_page_says_when_b_is_too_small_for_any_gap(built_report):
    """100 resamples, 2 gaps x 4 metrics: Holm's smallest p is 8/101 >= 0.05, so nothing can be real and the page says
    so (the demo's situation: 12 tests at B = 200)."""
    page = (built_report / "index.html").read_text()
    verdicts = _page_verdicts(page)
    assert verdicts and set(verdicts) == {"too few resamples"}
    assert "B = 100 resamples are too few for any gap to pass the Holm adjustment over 8 tests" in page
    assert "raise --bootstrap to at least 160" in page
    md = (built_report / "leaderboard.md").read_text()
    assert "too few for any gap to pass the Holm adjustment over 8 tests" in md and not re.search(r"\d\* \|", md)
