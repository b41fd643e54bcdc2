"""Results where people look: the ranked terminal table, the report page's ranking, p-values and
resamples, overlays in the scorer's multi-submission flow, and `xbench show`."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from click.testing import CliRunner

from xbench.score.cli import RANK_COLUMNS, ranked_table
from xbench.score.report import format_p


def _ranked(lines):
    """The board's ranked rows (a rank, a name, the values), without the interval lines under them."""
    return [ln for ln in lines if re.match(r"^\s*\d+\s", ln)]


def test_ranked_table_orders_by_pointing_game_and_prints_percent():
    rows = [("b", {"pointing_game": 0.25, "auroc": 0.5}), ("a", {"pointing_game": 0.75, "dice_best": 0.123456}),
            ("none", {"pointing_game": None}), ("c", {"pointing_game": 0.25, "auroc": 0.9})]
    lines = ranked_table(rows).splitlines()
    assert "ranked by pointing game" in lines[0] and "95% interval" in lines[0]
    body = [ln.split() for ln in _ranked(lines)]
    assert [r[1] for r in body] == ["a", "b", "c", "none"]  # ties by name, a missing key last
    assert [r[0] for r in body] == ["1", "2", "3", "4"]
    assert body[0][2:4] == ["75.00", "12.35"]
    under_a = lines[lines.index(_ranked(lines)[0]) + 1]
    assert under_a.split()[:2] == ["[–]", "[–]"]  # no interval given: said so, under the value
    assert body[3][2:] == ["-"] * len(RANK_COLUMNS)


def test_ranked_table_prints_intervals_under_values():
    rows = [("m", {"pointing_game": 0.4143, "auroc": 0.5}, {"pointing_game": (0.3021, 0.538), "auroc": None})]
    lines = ranked_table(rows).splitlines()
    row, under = lines[2], lines[3]
    assert "41.43" in row and "50.00" in row and "[30.21, 53.80]" in under and "[–]" in under
    # each interval ends in the column of its value (right-aligned under it)
    assert row.index("41.43") + len("41.43") == under.index("[30.21, 53.80]") + len("[30.21, 53.80]")
    header = lines[1]
    assert header.index("pointing") < header.index("auroc")


def test_ranked_table_keeps_each_model_on_its_line():
    # model names come from submissions: a newline or an escape sequence in one cannot forge a row
    lines = ranked_table([("evil\n 1  forged", {"pointing_game": 0.5}), ("x\x1b[2J", {"pointing_game": 0.1})]).splitlines()
    assert len(_ranked(lines)) == 2
    assert "evil\\n 1  forged" in _ranked(lines)[0] and "x\\x1b[2J" in _ranked(lines)[1]


@pytest.mark.parametrize("p,shown", [(None, "–"), (0.0, "< 0.001"), (0.000999, "< 0.001"), (0.001, "0.001"),
                                     (0.0456, "0.046"), (1.0, "1.000")])
def test_p_values(p, shown):
    assert format_p(p) == shown


torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    from xbench import cli

    d = tmp_path_factory.mktemp("results")
    inv = lambda *a: CliRunner().invoke(cli.main, [str(x) for x in a])  # noqa: E731
    assert inv("prepare", "phantom", "--out", d / "data", "--n-cases", "10", "--image-size", "64", "-q").exit_code == 0
    for m in ("dog", "random"):
        res = inv("extract", "--model", m, "--images", d / "data/images.zarr", "--out", d / f"{m}.zarr", "-q",
                  "--workers", "0")
        assert res.exit_code == 0, res.output
    res = inv("score", d / "dog.zarr", d / "random.zarr", "--gt", d / "data/gt.zarr", "--out", d / "results",
              "--images", d / "data/images.zarr", "--bootstrap", "20")
    assert res.exit_code == 0, res.output
    return d, res, inv


def test_multi_submission_scoring_prints_the_ranking_and_draws_overlays(flow):
    d, res, _ = flow
    table = res.stdout[res.stdout.index("overall (%) ranked"):].splitlines()
    names = [ln.split()[1] for ln in _ranked(table)[:2]]
    pg = {m: json.loads((d / "results" / m / "metrics.json").read_text())["overall"]["pointing_game"]
          for m in ("dog", "random")}
    assert names == sorted(pg, key=lambda m: -pg[m])
    overlays = sorted(p.name for p in (d / "results" / "figures").glob("overlay_*.png"))
    assert overlays == ["overlay_dog_phantom.png", "overlay_random_phantom.png"]


def test_report_page_states_ranking_and_resamples_and_has_one_group_per_dataset(flow):
    d, _, _ = flow
    page = (d / "results" / "index.html").read_text()
    assert "Models ranked by overall pointing game" in page
    assert "scorer intervals: 20 resamples" in page
    header = (d / "results" / "leaderboard.csv").read_text().splitlines()[0]
    assert "overall" not in header.lower()  # one dataset: its columns are the overall ones, shown once
    assert re.search(r"<th[^>]*>p</th>", page)


def test_show_draws_one_case_and_agrees_with_the_scorer(flow, tmp_path):
    d, _, inv = flow
    pairs = pd.read_parquet(d / "results" / "dog" / "pairs.parquet")
    positives = pairs[pairs["has_region"].astype(bool)]
    for _, row in positives.head(4).iterrows():
        out = tmp_path / f"{row['case_id']}.png"
        res = inv("show", d / "dog.zarr", "--gt", d / "data/gt.zarr", "--images", d / "data/images.zarr",
                  "--case", row["case_id"], "--class", row["class"], "--out", out, "--json")
        assert res.exit_code == 0, res.output
        info = json.loads(res.stdout)
        assert info["hit"] == bool(row["hit"])  # the scorer's own pointing game, computed independently
        assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = inv("show", d / "dog.zarr", "--gt", d / "data/gt.zarr", "--images", d / "data/images.zarr",
              "--case", "nope", "--class", "Nodule")
    assert res.exit_code == 2 and "case 'nope' is in no dataset" in res.stderr
    res = inv("show", d / "data/gt.zarr", "--gt", d / "dog.zarr", "--images", d / "data/images.zarr",
              "--case", "x", "--class", "Nodule")
    assert res.exit_code == 2 and "did you swap" in res.stderr
