"""Every numeric option of every command has a finite upper bound, declared in its option (issue 44, class 2):
the bound itself parses, one past it is refused by click with exit 2 and one error line naming the flag, and a
suite's value is checked by the same rule. Read from the click commands themselves, as tests/test_cli_options.py.

That the bound is accepted downstream is held where the consumers are: the readers import the same constants
(xbench.schemas.options; checked below), and tests/score/sections/test_subgroups.py scores at --min-group MAX_CASES and
--seed MAX_SEED and has ``xbench compare`` read the result."""
from __future__ import annotations

import math

import click
import pytest
from click.testing import CliRunner

from test_cli_options import _commands
from xbench.schemas import options as O


def _numeric():
    """(command name, click command, its click option, the field's constraint) of every numeric option."""
    out = []
    for name, cmd in _commands():
        checks = {f.name: o.check for cls in O.declaration_of(cmd) for f, o in O.declared(cls)}
        for param in cmd.params:
            check = checks.get(param.name)
            if isinstance(param, click.Option) and isinstance(check, (O.Int, O.Float, O.Grid)):
                out.append((name, cmd, param, check))
    return out


NUMERIC = _numeric()
IDS = [f"{n} {p.opts[0]}" for n, _, p, _ in NUMERIC]


def test_the_walk_sees_the_options():
    """The walk is not empty: the options the issue named are in it."""
    names = set(IDS)
    assert {"score --min-group", "score --seed", "score --bootstrap", "score --timeout", "compare --seed",
            "perturb --road-noise", "sanity --threshold", "package codabench-competition --time-limit"} <= names
    assert len(NUMERIC) >= 50


@pytest.mark.parametrize("name, cmd, param, check", NUMERIC, ids=IDS)
def test_every_numeric_option_has_a_finite_upper_bound(name, cmd, param, check):
    assert check.high is not None and math.isfinite(check.high), f"xbench {name} {param.opts[0]}: no upper bound"
    assert check.low is not None and math.isfinite(check.low), f"xbench {name} {param.opts[0]}: no lower bound"
    assert check.problem(check.high) is None and check.problem(check.low) is None  # a suite's value: same rule
    past = check.high + 1
    assert check.problem(past) is not None and check.problem(check.low - 1) is not None
    ctx = click.Context(cmd)
    assert param.type.convert(str(check.high), param, ctx) is not None
    for bad in (past, check.low - 1, 10**20, "nan", "inf", "-inf"):
        with pytest.raises(click.BadParameter):
            param.type.convert(str(bad), param, ctx)


def _argv(cmd, param, value) -> list[str]:
    """The command's required arguments and options with placeholder values, then ``param`` at ``value``."""
    argv = []
    for p in cmd.params:
        if isinstance(p, click.Argument) and p.required:
            argv.append(_placeholder(p))
        elif isinstance(p, click.Option) and p.required:
            argv += [p.opts[0], _placeholder(p)]
    return argv + [param.opts[0], str(value)]


def _placeholder(p) -> str:
    """A value click takes for a required parameter: a choice's first word, an existing folder or file."""
    if isinstance(p.type, click.Choice):
        return list(p.type.choices)[0]
    if isinstance(p.type, click.Path) and not p.type.dir_okay:
        return "placeholder.txt"
    return "placeholder"


@pytest.mark.parametrize("name, cmd, param, check", NUMERIC, ids=IDS)
def test_one_past_the_bound_is_exit_2_with_one_line(name, cmd, param, check, tmp_path, monkeypatch):
    """Through the whole command line (xbench's own error format): nothing runs, nothing is written."""
    from xbench.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "placeholder").mkdir()  # required paths that must exist (click checks them before the bound)
    (tmp_path / "placeholder.txt").write_text("")
    words = name.split()
    past = check.high + 1 if isinstance(check, O.Int) else check.high * 2 + 1
    res = CliRunner().invoke(main, [*words, *_argv(cmd, param, past)])
    assert res.exit_code == 2, res.output
    errors = [ln for ln in res.output.splitlines() if ": error:" in ln]
    assert len(errors) == 1 and param.opts[0] in errors[0], res.output
    assert "Traceback" not in res.output and sorted(p.name for p in tmp_path.rglob("*")) == ["placeholder", "placeholder.txt"]


def test_the_readers_accept_the_options_bounds():
    """The consumers that read an option's value back check it against the option's own constant."""
    from xbench.schemas import store
    from xbench.score.metrics.params import POINTING_TOLERANCE
    from xbench.score.options import ScoreOptions

    assert store.MAX_CASES == O.MAX_CASES
    checks = {f.name: o.check for f, o in O.declared(ScoreOptions)}
    assert checks["min_group"].high == O.MAX_CASES and checks["seed"].high == O.MAX_SEED
    assert checks["bootstrap"].high == O.MAX_RESAMPLES
    assert POINTING_TOLERANCE.check(checks["pointing_tolerance"].high) is None
    assert POINTING_TOLERANCE.check(checks["pointing_tolerance"].high * 2) is not None
    from xbench.extract.datasets import phantom

    assert phantom.MAX_CASES == O.MAX_PHANTOM_CASES


def test_a_suite_value_past_a_bound_is_one_line():
    from xbench.score.options import ScoreOptions

    lines = O.problems(ScoreOptions, {"bootstrap": O.MAX_RESAMPLES + 1, "seed": O.MAX_SEED}, "score")
    assert lines == [f"score.bootstrap: must be an integer between 0 and {O.MAX_RESAMPLES}, got {O.MAX_RESAMPLES + 1}"]
    assert O.Float(0, 1).problem(float("inf")) and O.Float(0, 1).problem(float("nan"))


def test_suite_only_numeric_fields_are_bounded_too():
    """Fields a suite sets but no flag (cli=False: extract's threads, prepare's perturb_seed) follow the rule."""
    seen = 0
    for _, cmd in _commands():
        for cls in O.declaration_of(cmd):
            for f, o in O.declared(cls):
                if isinstance(o.check, (O.Int, O.Float, O.Grid)):
                    seen += 1
                    assert o.check.high is not None and math.isfinite(o.check.high), f"{cls.__name__}.{f.name}"
                    assert o.check.problem(o.check.high + 1) is not None
    assert seen > len(NUMERIC)  # the cli=False fields are among them


def test_max_memory_is_bounded_like_the_numeric_options():
    from xbench.schemas import budget

    assert budget.parse_size(f"{budget.MAX_SIZE}") == budget.MAX_SIZE
    with pytest.raises(ValueError, match="1 PiB"):
        budget.parse_size(f"{budget.MAX_SIZE + 1}")


def test_the_seed_consumers_take_the_seed_bound():
    """--seed reaches CheXlocalize's legacy RandomState (the human ceiling's own block: 32 bits) and sanity's
    per-layer torch seed (seed x 1,000,003 + layer); both take MAX_SEED, the first refuses one more."""
    import numpy as np

    from xbench.score.resampling.engine import legacy_choice_weights

    assert legacy_choice_weights(3, 2, O.MAX_SEED).shape == (2, 3)
    with pytest.raises(ValueError):
        np.random.RandomState(O.MAX_SEED + 1)
    torch = pytest.importorskip("torch")
    torch.Generator().manual_seed(O.MAX_SEED * 1_000_003 + 100_000)  # extract/sanity.py, randomise
