"""The two kinds of section plug-in (issue 47 item 2): every built-in section is a module of
score/sections/plugins/ whose ``PLUGIN`` resolves to a RowScope or a Track with real callables of the declared
signatures, no "module:attr" string is left in score/sections/, and a throw-away track written to a temporary file
as CONTRIBUTING.md's recipe says (one module in the plugins package, nothing else edited) runs through scoring
(metrics.json and its minor), the outputs (its table), the report page and ``xbench compare``."""
from __future__ import annotations

import ast
import inspect
import json
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from xbench.cli import main as xbench_main
from xbench.score.sections import kinds
from xbench.score.sections import plugins as P

ROOT = Path(__file__).resolve().parents[3]


def xb(*args):
    res = CliRunner().invoke(xbench_main, [str(a) for a in args], catch_exceptions=False)
    return res.exit_code, res.output


#: the recipe's plug-in module, as a contributor would write it into score/sections/plugins/toy.py
TOY_SOURCE = '''"""A throw-away track: the number of cases scored per dataset."""
from xbench.score.sections.kinds import Track


def toy_section(run):
    return {"datasets": {d: {"n_cases": int((run.aligned[d][0] >= 0).sum())} for d in run.scored}}


class Toy(Track):
    name = "toy"
    title = "toy"
    section = "toy"
    minor = 99

    def run_section(self, run, *, bootstrap, seed, metric_params, timings):
        return toy_section(run)

    def write_tables(self, metrics, folder, label):
        path = folder / "table_toy.md"
        path.write_text(f"| model | cases |\\n|---|---|\\n| {label} | "
                        f"{sum(e['n_cases'] for e in metrics['toy']['datasets'].values())} |\\n")
        return [path]

    def page(self, results):
        have = [r for r in results if "toy" in r.metrics]
        return (["## Toy", ""] if have else []), ("<h2>Toy section</h2>" if have else "")

    def compare(self, a, b):
        return [f"cases: {a.name} {a.metrics['toy']['datasets']['phantom']['n_cases']}, "
                f"{b.name} {b.metrics['toy']['datasets']['phantom']['n_cases']}"]


PLUGIN = Toy()
'''


@contextmanager
def plugin_module(tmp_path: Path, name: str, source: str):
    """``source`` as the module ``name`` of the plugins package (a temporary folder added to the package's path,
    so the package is listed as it is, with one more file): found, used, then gone."""
    folder = tmp_path / "plugins_extra"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(source)
    before = list(P.__path__)
    P.__path__.append(str(folder))
    P.reload()
    try:
        yield
    finally:
        P.__path__[:] = before
        sys.modules.pop(f"{P.__name__}.{name}", None)
        P.reload()


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    pytest.importorskip("torch")  # extracts two submissions (make test-scorer-only has no torch)
    d = tmp_path_factory.mktemp("toy")
    assert xb("prepare", "phantom", "--out", d / "data", "--n-cases", 8, "-q")[0] == 0
    for model in ("dog", "random"):
        assert xb("extract", "--model", model, "--images", d / "data/images.zarr", "--out", d / f"{model}.zarr",
                  "--workers", 0, "-q")[0] == 0
    return d


def test_a_throw_away_section_from_a_file_runs_through_scoring_tables_page_and_compare(stores, tmp_path):
    """CONTRIBUTING.md's recipe, step 2: one module in score/sections/plugins/ (here a temporary file the package
    lists) is the whole declaration; the command, the outputs, the page and compare find it."""
    d = stores
    with plugin_module(tmp_path, "toy", TOY_SOURCE):
        assert [s.name for s in P.tracks()][-1] == "toy"
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
    assert "toy" not in [s.name for s in P.sections()]  # gone with the file: nothing else was edited


def test_without_the_section_nothing_of_it_appears(stores, tmp_path):
    code, out = xb("score", stores / "dog.zarr", "--gt", stores / "data/gt.zarr", "--out", tmp_path / "s",
                   "--bootstrap", 0, "-q")
    assert code == 0 and "toy" not in json.loads((tmp_path / "s/metrics.json").read_text())
    assert not (tmp_path / "s/table_toy.md").exists()


def test_every_track_is_a_declared_section():
    declared = {s.name: s for s in P.sections()}
    assert list(declared) == ["class", "phrase", "gaze", "text_probes", "robustness", "human", "subgroups",
                              "faithfulness"]
    assert [s.name for s in P.row_scopes()] == ["class", "phrase", "gaze"]
    for name in ("text_probes", "robustness"):
        assert _overrides(declared[name], "run_section")
    for name in ("human", "subgroups", "faithfulness"):
        assert _overrides(declared[name], "prepare") and _overrides(declared[name], "add") and declared[name].options


def _overrides(plugin, hook: str) -> bool:
    return getattr(type(plugin), hook) is not getattr(kinds.Track if isinstance(plugin, kinds.Track) else
                                                       kinds.RowScope, hook)


def _hooks(kind: type) -> list[str]:
    return [n for n, v in {**vars(kinds.Section), **vars(kind)}.items() if callable(v) and not n.startswith("_")]


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "score/sections/plugins").glob("[!_]*.py")))
def test_every_plugin_module_resolves_to_real_hooks_of_the_declared_signatures(module):
    """Each module of the package is a section: its PLUGIN a RowScope or Track, every hook it overrides a callable
    taking the declared hook's parameters (a hook bound to the wrong function fails here, not on the path that
    runs it), and its name, section and minor well formed."""
    import importlib

    plugin = importlib.import_module(f"{P.__name__}.{module}").PLUGIN
    assert plugin in P.sections()
    kind = kinds.RowScope if isinstance(plugin, kinds.RowScope) else kinds.Track
    assert isinstance(plugin, kind) and plugin.name and plugin.title and isinstance(plugin.minor, int)
    if kind is kinds.RowScope:
        assert _overrides(plugin, "score") and _overrides(plugin, "keys") and plugin.keys()
    for hook in _hooks(kind):
        if not _overrides(plugin, hook):
            continue
        params = list(inspect.signature(getattr(kind, hook)).parameters.values())[1:]  # without self
        args = [None for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        kwargs = {p.name: None for p in params if p.kind is p.KEYWORD_ONLY}
        if hook == "score" and plugin.section is None:  # the primary scope's counting pass takes the run's too
            kwargs.update(aligned=None, progress=None, metric_params=None)
        try:  # called as the loops call it: the positional ones by place, the keyword-only ones by name
            inspect.signature(getattr(plugin, hook)).bind(*args, **kwargs)
        except TypeError as err:
            pytest.fail(f"{module}: {hook} cannot be called as declared: {err}")
    if plugin.saves_counts:
        assert all(_overrides(plugin, h) for h in ("save_counts", "counts_problems", "load_counts"))


def test_no_string_hook_is_left_in_the_sections():
    """Behaviour is imported, never named by a "package.module:attr" string (a typo would fail only on the path
    that runs it, and the import test could not see the edge)."""
    found = []
    for path in sorted((ROOT / "score/sections").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"xbench(\.\w+)+(:\w+)?", node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert found == []
    assert not (ROOT / "score/sections/rowscope.py").exists()


def test_a_section_declares_how_its_measures_print():
    """A value outside the metric registry prints as the section that reports it declares (the ``measures``
    hook): its title, whether x100, its direction; an unknown key prints as a share."""
    from xbench.score.metrics.registry import Measure, shown_as
    from xbench.score.table import METRIC_TITLES, shown_value

    assert shown_as("toy_ratio") is None and shown_value("toy_ratio", 0.5) == 50.0
    class Toy2(kinds.Track):
        name = title = section = "toy2"

        def measures(self):
            return {"toy_ratio": Measure("toy_ratio", "Toy ratio", "number", False)}

    with P.declared(Toy2()):
        assert shown_value("toy_ratio", 0.5) == 0.5 and METRIC_TITLES.get("toy_ratio") == "Toy ratio"
        assert shown_as("toy_ratio").higher_is_better is False
    assert shown_as("toy_ratio") is None
    assert shown_value("nss", 1.25) == 1.25 and shown_as("kl").higher_is_better is False  # the gaze section's
    assert shown_value("auroc", 0.5) == 50.0  # the registry's metrics come first
