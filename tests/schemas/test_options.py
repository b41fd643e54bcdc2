"""Each command option is written once (xbench/schemas/options.py, xbench/extract/options.py): the click options,
the suite's section checks and the argv a suite hands on are derived from the one declaration. These tests hold
the derivations to it: same flags, defaults and help; the suite's keys are exactly the declared ones; options ->
argv -> click's parse -> options is the identity; a value one surface refuses the other refuses too."""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xbench import suite as S
from xbench.extract import cli as extract_cli
from xbench.extract import prepare_cli
from xbench.extract.options import ExtractOptions, PrepareOptions
from xbench.schemas import options as O
from xbench.score import cli as score_cli
from xbench.score.options import ReportOptions, ScoreOptions
from xbench.score.report import cli as report_cli

COMMANDS = [(ExtractOptions, extract_cli.main, {"as_json", "list_models", "list_methods", "debug", "help"}),
            (PrepareOptions, prepare_cli.main, {"dataset", "list_only", "quiet", "as_json", "debug", "help"}),
            (ScoreOptions, score_cli.score_command, {"submissions", "as_json", "max_memory", "timeout", "debug", "help"}),
            (ReportOptions, report_cli.report, {"result_dirs", "max_memory", "timeout", "debug", "help"})]


def _params(command) -> dict[str, click.Parameter]:
    return {p.name: p for p in command.params}


@pytest.mark.parametrize("cls, command, own", COMMANDS, ids=["extract", "prepare", "score", "report"])
def test_every_declared_field_is_the_commands_option_with_its_default_and_help(cls, command, own):
    params = _params(command)
    cli_fields = {f.name: (f, o) for f, o in O.declared(cls) if o.cli}
    assert set(params) - own == set(cli_fields)  # nothing else is declared beside the dataclass
    for name, (f, o) in cli_fields.items():
        p = params[name]
        assert "/".join([p.opts[0], *p.secondary_opts]) == O.flag_of(f, o) and p.help == o.help, name
        if isinstance(o.check, O.Flag):
            assert p.is_flag and (p.default is True) == bool(O.default_of(f)), name  # "--x/--no-x": on by default
        elif o.multiple:
            assert p.multiple, name
        elif o.required:
            assert p.required, name
        else:
            assert p.default == O.default_of(f), name
            assert p.show_default == (O.default_of(f) is not None), name


@pytest.mark.parametrize("cls, defaults", [(ExtractOptions, S.EXTRACT_DEFAULTS), (PrepareOptions, S.PREPARE_DEFAULTS),
                                           (ScoreOptions, S.SCORE_DEFAULTS), (ReportOptions, S.REPORT_DEFAULTS)],
                         ids=["extract", "prepare", "score", "report"])
def test_the_suites_keys_are_exactly_the_declared_ones(cls, defaults):
    declared = {f.name: (f, o) for f, o in O.declared(cls) if o.suite}
    assert list(defaults) == list(declared)
    for name, (f, o) in declared.items():
        expected = O.default_of(f) if o.suite_default is O._UNSET else o.suite_default
        assert defaults[name] == expected, name


def _suite(**sections) -> dict:
    return {"datasets": {"phantom": {}}, "models": ["dog"], **sections}


def test_a_suite_may_set_every_declared_key_and_nothing_else(tmp_path):
    s = S.parse_suite(_suite(extract=dict(S.EXTRACT_DEFAULTS), prepare=dict(S.PREPARE_DEFAULTS),
                             score=dict(S.SCORE_DEFAULTS), report=dict(S.REPORT_DEFAULTS)), tmp_path)
    assert s.models[0].extract == S.EXTRACT_DEFAULTS and s.datasets[0].prepare == S.PREPARE_DEFAULTS
    assert s.score == S.SCORE_DEFAULTS and s.report == S.REPORT_DEFAULTS
    with pytest.raises(S.SuiteError) as err:
        S.parse_suite(_suite(extract={"bach_size": 4}, prepare={"gird": 4},
                             report={"n_boot": 5, "overlays": "no", "size_bins": "terciles"}), tmp_path, source="s.yaml")
    lines = [str(p) for p in err.value.problems]
    assert any("report: unknown key(s) n_boot" in line for line in lines), lines
    assert any("report.overlays: must be true or false, got 'no'" in line for line in lines), lines
    assert any("report.size_bins: must be fixed or tercile, got 'terciles'" in line for line in lines), lines
    assert any("extract: unknown key(s) bach_size (did you mean batch_size?)" in line for line in lines), lines
    assert any("prepare: unknown key(s) gird (did you mean grid?)" in line for line in lines), lines


# a value each constraint refuses, and the flag a command refuses it on
BAD = {O.Int: [0, -1, 5000, "3", 2.5, True], O.Float: [-0.5, 2, "x", True], O.Choice: ["nope", 3],
       O.Text: [3], O.Grid: [0, [1], [1, 2, 3], "x", 5000]}


HEADS = {ExtractOptions: ["--model", "dog"], PrepareOptions: ["phantom"], ScoreOptions: ["s.zarr", "--gt", "gt.zarr"],
         ReportOptions: ["r", "--out", "o"]}


@pytest.mark.parametrize("cls, command", [(ExtractOptions, extract_cli.main), (PrepareOptions, prepare_cli.main),
                                          (ScoreOptions, score_cli.score_command), (ReportOptions, report_cli.report)],
                         ids=["extract", "prepare", "score", "report"])
def test_a_value_the_suite_refuses_the_command_refuses_too(cls, command, tmp_path):
    for f, o in O.declared(cls):
        if not o.suite:
            continue
        for value in BAD.get(type(o.check), []):
            suite_says = O.problems(cls, {f.name: value}, "x")
            if not suite_says:  # e.g. 5000 workers for extraction: no upper bound; check the command agrees
                continue
            assert len(suite_says) == 1 and suite_says[0].startswith(f"x.{f.name}: must be "), suite_says
            numeric = isinstance(o.check, (O.Int, O.Float, O.Grid))
            if not o.cli or isinstance(value, bool) or not isinstance(value, (int, float) if numeric else str):
                continue  # a command line carries text: "3" is an integer there
            args = HEADS[cls] + [O.flag_of(f, o), str(value)]
            with pytest.raises(click.BadParameter):
                command.make_context(command.name, args)


def test_config_suffixes_have_one_definition():
    from xbench.extract import models

    assert S.CONFIG_SUFFIXES is O.CONFIG_SUFFIXES and models.CONFIG_SUFFIXES is O.CONFIG_SUFFIXES


# -------------------------------------------------------------------------------- the round trip
_WORDS = st.text("abcdefghij_", min_size=1, max_size=8).filter(lambda w: w[0] != "_")
_SCALARS = st.one_of(st.integers(-10**6, 10**6), st.booleans(), _WORDS.map(lambda w: "w" + w),
                     st.lists(st.integers(0, 99), min_size=1, max_size=3))


def _strategy(f: dataclasses.Field, o: O.Opt):
    c = o.check
    if f.name == "overrides":
        return st.dictionaries(_WORDS, st.one_of(_SCALARS, st.dictionaries(_WORDS, _SCALARS, min_size=1, max_size=2)),
                               max_size=3)
    if f.name == "options":
        return st.dictionaries(_WORDS, _WORDS, max_size=3)
    if f.name == "augment":  # canonical specs, each once (a repeated spec is refused)
        return st.lists(st.sampled_from(["hflip", "rotate:degrees=5", "noise:sigma=2", "jpeg:quality=50"]),
                        min_size=1, max_size=3, unique=True)  # parsed back as a list
    if o.multiple:  # given once per value
        return st.lists(_one(c), max_size=3).map(tuple)
    if f.name == "datasets":
        return st.one_of(st.none(), st.lists(_WORDS, min_size=1, max_size=3))
    return _one(c)


def _one(c):
    """Values a constraint accepts (bounded to keep the examples small)."""
    if isinstance(c, O.Flag):
        return st.booleans()
    if isinstance(c, O.Int):
        return st.integers(c.low if c.low is not None else -100, c.high if c.high is not None else 10**6)
    if isinstance(c, O.Float):
        return st.floats(c.low, c.high, allow_nan=False)
    if isinstance(c, O.Choice):
        return st.sampled_from(c.choices)
    if isinstance(c, O.Grid):
        return st.tuples(st.integers(c.low, c.high), st.integers(c.low, c.high))
    if isinstance(c.type, click.Path) and c.type.type is Path:  # click gives a Path back
        return _WORDS.map(Path)
    return _WORDS


def _values(cls, fixed: dict):
    fields = {f.name: _strategy(f, o) for f, o in O.declared(cls) if o.cli and f.name not in fixed}
    optional = {n: s for n, s in fields.items()}
    return st.fixed_dictionaries({}, optional=optional).map(lambda d: {**d, **fixed})


_IMAGES = tempfile.mkdtemp(prefix="xbench-options-")  # --images must exist


def _round_trip(cls, command, values: dict, head: list[str]) -> dict:
    argv = O.to_argv(cls, values)
    params = command.make_context(command.name, head + argv).params
    return cls(**O.from_params(cls, params))


def _expected(cls, values: dict):
    out = cls(**values)
    if cls is PrepareOptions and isinstance(out.grid, int):  # a square grid is (H, H) once parsed
        out.grid = (out.grid, out.grid)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values(ExtractOptions, {"model": "dog", "images": _IMAGES, "out": "o.zarr"}))
def test_extract_options_to_argv_to_click_and_back_is_the_identity(values):
    assert _round_trip(ExtractOptions, extract_cli.main, values, []) == _expected(ExtractOptions, values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values(ScoreOptions, {"gt_path": "gt.zarr"}))
def test_score_options_to_argv_to_click_and_back_is_the_identity(values):
    assert _round_trip(ScoreOptions, score_cli.score_command, values, ["s.zarr"]) == _expected(ScoreOptions, values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values(PrepareOptions, {"out": Path("prepared"), "root": Path("raw")}))
def test_prepare_options_to_argv_to_click_and_back_is_the_identity(values):
    assert _round_trip(PrepareOptions, prepare_cli.main, values, ["phantom"]) == _expected(PrepareOptions, values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values(ReportOptions, {"out_dir": Path("o")}))
def test_report_options_to_argv_to_click_and_back_is_the_identity(values):
    assert _round_trip(ReportOptions, report_cli.report, values, ["r"]) == _expected(ReportOptions, values)


def test_the_suites_extract_argv_is_the_declared_one(tmp_path):
    opts = {"model": "clip", "overrides": {"method": "gem"}, "datasets": ["phantom"], **S.EXTRACT_DEFAULTS}
    argv = S.extract_argv(opts, tmp_path, Path("/o.zarr"))
    params = extract_cli.main.make_context("xbench-extract", argv).params
    got = ExtractOptions(**O.from_params(ExtractOptions, params))
    assert (got.model, got.overrides, got.datasets, got.batch_size, got.workers, got.quiet) == \
        ("clip", {"method": "gem"}, ["phantom"], 32, 2, True)
    assert "--nproc-per-node" not in argv and "--threads" not in argv  # launch options stay with the suite


def test_a_huge_or_odd_suite_value_is_one_short_line():
    lines = O.problems(ExtractOptions, {"batch_size": list(range(10**5)), "precision": {"a": 1}, "workers": None}, "e")
    assert len(lines) == 3 and all(len(line) < 200 for line in lines)
    assert lines[0].startswith("e.batch_size: must be an integer between 1 and 4096, got [0, 1, 2") and lines[0].endswith("...")
    assert lines[2] == "e.workers: must be an integer between 0 and 1024, got None"  # None is no default of workers
