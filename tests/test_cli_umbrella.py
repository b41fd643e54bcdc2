"""Every command resolves and answers --help, through the umbrella (xbench NAME) and its own entry point.

The umbrella's targets are strings (imported on use), so nothing else would notice a target that does
not exist: issue 12's `xbench score` crash. This test resolves every one of them.
"""
from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from xbench import cli

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
EXTRACT_SIDE = {name for name, (_, _, extra) in cli.SUBCOMMANDS.items() if extra == "extract"}


def _resolve(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_every_umbrella_target_resolves_to_a_command(name):
    if name in EXTRACT_SIDE and not _has_torch():
        pytest.skip("the extract extra is not installed")
    target = cli.SUBCOMMANDS[name][0]
    cmd = _resolve(target)
    assert isinstance(cmd, click.Command), f"xbench {name} -> {target} is a {type(cmd).__name__}"


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_umbrella_help(name):
    if name in EXTRACT_SIDE and not _has_torch():
        pytest.skip("the extract extra is not installed")
    res = CliRunner().invoke(cli.main, [name, "--help"])
    assert res.exit_code == 0, res.output
    assert f"Usage: xbench {name}" in res.output and "--debug" in res.output
    group = _resolve(cli.SUBCOMMANDS[name][0])
    leaves = [[name, sub] for sub in group.commands] if isinstance(group, click.Group) else [[name]]
    for words in leaves:  # a group (xbench package) promises the output modes on each of its commands
        res = CliRunner().invoke(cli.main, [*words, "--help"])
        assert res.exit_code == 0, res.output
        assert "--quiet" in res.output and "--json" in res.output  # the same output modes everywhere


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_console_script_help(script):
    cmd = _resolve(SCRIPTS[script])
    if isinstance(cmd, click.Command):
        res = CliRunner().invoke(cmd, ["--help"], prog_name=script)
        assert res.exit_code == 0, res.output
        assert "Usage:" in res.output
    else:  # a plain function that calls the command's main
        with pytest.raises(SystemExit) as exc:
            cmd(["--help"])
        assert exc.value.code == 0


def test_umbrella_help_lists_every_subcommand():
    res = CliRunner().invoke(cli.main, ["--help"])
    assert res.exit_code == 0
    for name in cli.SUBCOMMANDS:
        assert name in res.output


def test_unknown_subcommand_is_a_usage_error():
    res = CliRunner().invoke(cli.main, ["sccore"])
    assert res.exit_code == 2 and "No such command" in res.stderr and "Traceback" not in res.output


@pytest.mark.parametrize("module,func", [("xbench.score.cli", "main"), ("xbench.schemas.cli", "validate_main"),
                                         ("xbench.schemas.cli", "convert_main"), ("xbench.cli", "main")])
def test_help_imports_nothing_heavy(module, func):
    """--help is instant: no zarr, numpy, pandas or torch behind it."""
    code = (f"import sys\nfrom {module} import {func}\ntry:\n    {func}(['--help'])\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "print(sorted(m for m in ('zarr', 'numpy', 'pandas', 'torch', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_contract_gives_exit_codes_for_every_subcommand():
    """The contract's exit-code list names every `xbench` subcommand (a new one cannot be left out)."""
    import re

    from xbench.cli import SUBCOMMANDS

    text = (Path(__file__).resolve().parents[1] / "docs" / "contract.md").read_text()
    section = text.split("## Exit codes of every command", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(?:xbench[- ])?([a-z-]+)`", section.split("ends with one of", 1)[0]))
    assert set(SUBCOMMANDS) - listed == set()


def test_umbrella_help_lists_every_convert_source_and_package_target():
    """`xbench --help` names every SOURCE xbench-convert reads (the list it dispatches on) and every target of
    `xbench package` (its own subcommands), so a new one cannot be left out (issue 46 item 7: the line said
    "an HDF5 file or a folder of .npz files" and "a Codabench scoring program" only)."""
    from xbench.package import package
    from xbench.schemas.cli import CONVERT_SOURCES

    res = CliRunner().invoke(cli.main, ["--help"], terminal_width=10_000)
    assert res.exit_code == 0
    lines = {ln.split(maxsplit=1)[0]: ln for ln in res.output.splitlines() if ln.startswith("  ") and ln.strip()}
    convert, pack = " ".join(lines["convert"].split()), " ".join(lines["package"].split())
    for what in CONVERT_SOURCES.values():
        assert what in convert
    for word in ("HDF5", ".npz", "COCO", "marks", "masks", "answers"):
        assert word in convert
    assert set(package.commands) == {"codabench", "codabench-competition"}
    for target in package.commands:
        assert f"{target} (" in pack


@pytest.mark.parametrize("kind,name", [("hdf5", "outputs.h5"), ("npz", "npz_outputs"), ("masks", "png_masks"),
                                       ("json", "detections.json"), ("answers", "answers.jsonl")])
def test_convert_dispatches_on_the_listed_kinds(tmp_path, kind, name):
    """Each kind `xbench --help` lists is one the converter tells apart, from the name and folder alone."""
    from xbench.schemas.cli import CONVERT_SOURCES, source_kind

    src = tmp_path / name
    if kind in ("npz", "masks"):
        src.mkdir()
        if kind == "masks":
            (src / "masks.json").write_text("{}")
    else:
        src.write_text("")
    assert source_kind(src) == kind and kind in CONVERT_SOURCES
    assert source_kind(tmp_path / "x.h5", answers="chexagent") == "answers"


def test_the_command_reference_lists_every_subcommand_and_what_it_needs():
    """docs/reference/commands.md has a row per `xbench` subcommand, its install column as SUBCOMMANDS declares."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "commands.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `xbench ([a-z-]+)` \|[^|]*\| ([^|]*?) \|", text, re.M)}
    assert set(rows) == set(cli.SUBCOMMANDS)
    for name, (_, _, extra) in cli.SUBCOMMANDS.items():
        assert rows[name] == ("`[extract]`" if extra == "extract" else "base"), name
