"""Every subcommand's options come from a declaration (issue 36 item 4): a dataclass of :func:`opt` fields turned
into click options by :func:`click_options`. Read from the click commands themselves, not from a list kept here."""
from __future__ import annotations

import importlib

import click
import pytest

from xbench.cli import SUBCOMMANDS
from xbench.schemas.options import declaration_of, declared, flag_of


def _commands():
    """(name, click command) of every leaf command of ``xbench`` (a group's subcommands included)."""
    out = []
    for name, (target, _, _) in SUBCOMMANDS.items():
        module, _, attr = target.partition(":")
        try:
            cmd = getattr(importlib.import_module(module), attr)
        except ImportError as exc:  # the scorer-only install: the extract side is absent
            pytest.skip(f"{name}: {exc}")
        if isinstance(cmd, click.Group):
            out += [(f"{name} {sub}", c) for sub, c in cmd.commands.items()]
        else:
            out.append((name, cmd))
    return out


def test_every_subcommand_is_counted():
    assert len(SUBCOMMANDS) == 16
    assert {n.split()[0] for n, _ in _commands()} == set(SUBCOMMANDS)


#: options not declared yet, by command: xbench-score's own command is reworked into declared sections by issue 36's
#: sections item (score/cli.py, score/options.py); the entry goes when it lands (the test then fails to say so)
NOT_YET = {"score": {"as_json"}}


@pytest.mark.parametrize("name, cmd", _commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_options_come_from_a_declaration(name, cmd):
    classes = declaration_of(cmd)
    assert classes, f"xbench {name}: its options are not declared (no click_options)"
    fields = {f.name: (f, o) for cls in classes for f, o in declared(cls)}
    for param in cmd.params:
        if not isinstance(param, click.Option) or not param.expose_value:  # --help, --debug: the Command's own
            continue
        if param.name in NOT_YET.get(name, ()):
            assert param.name not in fields, f"xbench {name}: --{param.name} is declared now; drop it from NOT_YET"
            continue
        assert param.name in fields, f"xbench {name}: --{param.name} is a click option no dataclass declares"
        f, o = fields[param.name]
        assert param.opts[0] == flag_of(f, o).partition("/")[0]
        assert param.help == o.help and param.required == o.required
    # and the other way round: every command-line field is an option of the command
    names = {p.name for p in cmd.params}
    assert {n for n, (_, o) in fields.items() if o.cli} <= names


def test_the_callback_receives_the_options_object():
    """A declared command builds its options object from click's values (one call, no long parameter list)."""
    from xbench.human import HumanOptions, human
    from xbench.schemas.options import parse

    ctx = human.make_context("human", ["phantom", "--images", ".", "--out", "x", "--seed", "3", "-q"])
    o = parse(HumanOptions, ctx.params)
    assert isinstance(o, HumanOptions) and o.seed == 3 and o.quiet and o.bootstrap == 1000 and o.root is None
    assert str(o.images) == "."


def test_an_undeclared_option_is_caught():
    """The check can fail: a command with one hand-written click option beside its declaration."""
    from xbench.schemas.options import Flag, click_options, opt
    from dataclasses import dataclass

    @dataclass
    class Few:
        quiet: bool = opt(False, check=Flag(), short="-q", help="quiet")

    @click.command()
    @click.option("--loud", is_flag=True)
    @click_options(Few)
    def cmd(loud, **params):
        pass

    assert declaration_of(cmd) == (Few,)
    fields = {f.name for f, _ in declared(Few)}
    assert "loud" not in fields and any(p.name == "loud" for p in cmd.params)
