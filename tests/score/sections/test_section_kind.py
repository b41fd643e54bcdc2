"""One kind of section (issue 36): a throw-away section declared by this file alone runs through scoring
(metrics.json and its minor), the outputs (its table), the report page and ``xbench compare`` with no other edit;
and every track of XBench is a declared section of that kind."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from xbench.cli import main as xbench_main
from xbench.score.sections.rowscope import RowScope, declared_scopes, row_scopes


def xb(*args):
    res = CliRunner().invoke(xbench_main, [str(a) for a in args], catch_exceptions=False)
    return res.exit_code, res.output


def toy_section(run, *, bootstrap, seed, metric_params, timings):
    # made from the opened run: the number of cases scored per dataset
    return {"datasets": {d: {"n_cases": int((run.aligned[d][0] >= 0).sum())} for d in run.scored}}


def toy_tables(metrics, folder, label):
    path = folder / "table_toy.md"
    path.write_text(f"| model | cases |\n|---|---|\n| {label} | "
                    f"{sum(e['n_cases'] for e in metrics['toy']['datasets'].values())} |\n")
    return [path]


def toy_page(results):
    have = [r for r in results if "toy" in r.metrics]
    return (["## Toy", ""] if have else []), ("<h2>Toy section</h2>" if have else "")


def toy_compare(a, b):
    return [f"cases: {a.name} {a.metrics['toy']['datasets']['phantom']['n_cases']}, "
            f"{b.name} {b.metrics['toy']['datasets']['phantom']['n_cases']}"]


TOY = RowScope("toy", "toy", unit="cases", kinds=(), section="toy", minor=99, run_section=toy_section,
               write_tables=toy_tables, page=toy_page, compare=toy_compare)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    pytest.importorskip("torch")  # extracts two submissions (make test-scorer-only has no torch)
    d = tmp_path_factory.mktemp("toy")
    assert xb("prepare", "phantom", "--out", d / "data", "--n-cases", 8, "-q")[0] == 0
    for model in ("dog", "random"):
        assert xb("extract", "--model", model, "--images", d / "data/images.zarr", "--out", d / f"{model}.zarr",
                  "--workers", 0, "-q")[0] == 0
    return d


def test_a_throw_away_section_runs_through_scoring_tables_page_and_compare(stores, tmp_path):
    d = stores
    with declared_scopes(TOY):
        for model in ("dog", "random"):
            code, out = xb("score", d / f"{model}.zarr", "--gt", d / "data/gt.zarr", "--out", tmp_path / model,
                           "--bootstrap", 0, "-q")
            assert code == 0, out
        metrics = json.loads((tmp_path / "dog/metrics.json").read_text())
        assert metrics["toy"] == {"datasets": {"phantom": {"n_cases": 8}}}
        assert metrics["xbench"]["schema_minor"] == 99  # its minor, raised because the section is present
        assert (tmp_path / "dog/table_toy.md").read_text().endswith("| 8 |\n")
        code, out = xb("report", tmp_path / "dog", tmp_path / "random", "--out", tmp_path / "page", "--bootstrap", 0,
                       "--no-overlays", "-q")
        assert code == 0, out
        assert "<h2>Toy section</h2>" in (tmp_path / "page/index.html").read_text()
        assert "## Toy" in (tmp_path / "page/leaderboard.md").read_text()
        code, out = xb("compare", tmp_path / "dog", tmp_path / "random", "--bootstrap", 0)
        assert code == 0 and "toy:\n  cases: dog 8, random 8" in out, out
    assert "toy" not in [s.name for s in row_scopes()]  # gone with the block: nothing else was edited


def test_without_the_section_nothing_of_it_appears(stores, tmp_path):
    code, out = xb("score", stores / "dog.zarr", "--gt", stores / "data/gt.zarr", "--out", tmp_path / "s",
                   "--bootstrap", 0, "-q")
    assert code == 0 and "toy" not in json.loads((tmp_path / "s/metrics.json").read_text())
    assert not (tmp_path / "s/table_toy.md").exists()


def test_every_track_is_a_declared_section():
    declared = {s.name: s for s in row_scopes()}
    assert {"class", "phrase", "gaze", "text_probes", "robustness", "human", "subgroups", "faithfulness"} <= set(declared)
    for name in ("text_probes", "robustness"):
        assert declared[name].run_section is not None
    for name in ("human", "subgroups", "faithfulness"):
        assert declared[name].prepare is not None and declared[name].add is not None and declared[name].options


def test_a_section_declares_how_its_measures_print():
    """A value outside the metric registry prints as the section that reports it declares (the ``measures``
    hook): its title, whether x100, its direction; an unknown key prints as a share."""
    from xbench.score.metrics.registry import Measure, shown_as
    from xbench.score.outputs.tables import METRIC_TITLES, shown_value

    assert shown_as("toy_ratio") is None and shown_value("toy_ratio", 0.5) == 50.0
    toy = RowScope("toy2", "toy", unit="cases", kinds=(), section="toy2",
                   measures=lambda: {"toy_ratio": Measure("toy_ratio", "Toy ratio", "number", False)})
    with declared_scopes(toy):
        assert shown_value("toy_ratio", 0.5) == 0.5 and METRIC_TITLES.get("toy_ratio") == "Toy ratio"
        assert shown_as("toy_ratio").higher_is_better is False
    assert shown_as("toy_ratio") is None
    assert shown_value("nss", 1.25) == 1.25 and shown_as("kl").higher_is_better is False  # the gaze section's
    assert shown_value("auroc", 0.5) == 50.0  # the registry's metrics come first
