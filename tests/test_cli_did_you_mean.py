"""A mistyped xbench command names the command meant (issue 35: `xbench scor` got no "did you mean")."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from xbench import cli


@pytest.mark.parametrize("typed,meant", [("scor", "score"), ("sco", "score"), ("repot", "report"),
                                         ("compar", "compare"), ("validat", "validate"), ("pertub", "perturb")])
def test_a_mistyped_command_says_which_was_meant(typed, meant):
    res = CliRunner().invoke(cli.main, [typed])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert f"No such command '{typed}'. Did you mean '{meant}'" in res.output


def test_a_word_close_to_no_command_gets_no_suggestion_and_real_commands_still_run():
    res = CliRunner().invoke(cli.main, ["xyzzy"])
    assert res.exit_code == 2 and "No such command 'xyzzy'." in res.output and "Did you mean" not in res.output
    assert CliRunner().invoke(cli.main, ["score", "--help"]).exit_code == 0
    assert CliRunner().invoke(cli.main, ["--version"]).exit_code == 0
