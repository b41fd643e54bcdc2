"""`xbench show` as its --help and the README show it: the examples run on the phantom set and draw a case whose
class has a region; a mistyped case or class gets the close names."""
from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def phantom(tmp_path_factory):
    """The layout the examples assume: data/images.zarr, data/gt.zarr (the phantom set) and dog.zarr."""
    from xbench import cli

    d = tmp_path_factory.mktemp("show")
    inv = lambda *a: CliRunner().invoke(cli.main, [str(x) for x in a])  # noqa: E731
    res = inv("prepare", "phantom", "--out", d / "data", "--n-cases", "12", "--image-size", "64", "-q")
    assert res.exit_code == 0, res.output
    res = inv("extract", "--model", "dog", "--images", d / "data/images.zarr", "--out", d / "dog.zarr", "-q",
              "--workers", "0")
    assert res.exit_code == 0, res.output
    return d


def _run_in(folder: Path, argv: list[str]):
    from xbench import cli

    old = os.getcwd()
    os.chdir(folder)
    try:
        return CliRunner().invoke(cli.main, argv)
    finally:
        os.chdir(old)


def _example_argv(line: str) -> list[str]:
    tokens = shlex.split(line.strip())
    assert tokens[:2] == ["xbench", "show"], line
    return tokens[1:]


def _check_drawn(phantom, argv, tmp_path):
    res = _run_in(phantom, [*argv, "--out", str(tmp_path / "x.png"), "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["has_region"] and info["label"] == 1 and info["peak"] is not None  # something to see
    assert (tmp_path / "x.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_help_example_runs_and_shows_a_region(phantom, tmp_path):
    from xbench import cli

    help_text = CliRunner().invoke(cli.main, ["show", "--help"]).output
    lines = [ln for ln in help_text.splitlines() if ln.strip().startswith("xbench show ")]
    assert len(lines) == 1, help_text
    _check_drawn(phantom, _example_argv(lines[0]), tmp_path)


def test_the_readme_example_runs_and_shows_a_region(phantom, tmp_path):
    lines = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.strip().startswith("xbench show ")]
    assert lines
    for line in lines:
        _check_drawn(phantom, _example_argv(line), tmp_path)


def test_the_docs_example_runs_and_shows_a_region(phantom, tmp_path):
    lines = [ln for ln in (ROOT / "docs" / "how-to" / "report.md").read_text().splitlines()
             if ln.strip().startswith("xbench show ")]
    assert lines
    for line in lines:
        _check_drawn(phantom, _example_argv(line), tmp_path)


@pytest.mark.parametrize("case,cls,hint", [("phantom_0006", "Nodule", "did you mean phantom-test-000006"),
                                           ("phantom-test-000006", "Nodle", "did you mean Nodule")])
def test_a_wrong_case_or_class_gets_close_names(phantom, tmp_path, case, cls, hint):
    res = _run_in(phantom, ["show", "dog.zarr", "--gt", "data/gt.zarr", "--images", "data/images.zarr",
                            "--case", case, "--class", cls, "--out", str(tmp_path / "y.png")])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and hint in lines[0], res.stderr
    assert not (tmp_path / "y.png").exists()


def test_a_case_id_with_control_characters_prints_one_line(phantom, tmp_path):
    res = _run_in(phantom, ["show", "dog.zarr", "--gt", "data/gt.zarr", "--images", "data/images.zarr",
                            "--case", "x\nxbench: forged", "--class", "Nodule", "--out", str(tmp_path / "z.png")])
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert re.search(r"x\\nxbench: forged", res.stderr)
