"""The package ships every sub-package, and the scorer side never needs torch."""
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"xbench": "xbench", "schemas": "xbench.schemas", "extract": "xbench.extract", "score": "xbench.score"}


def test_every_subpackage_is_listed_in_pyproject():
    pyproject = ROOT / "pyproject.toml"
    if not pyproject.exists():  # running against an installed wheel, outside the checkout
        pytest.skip("no checkout")
    listed = set(tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for folder, dotted in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((dotted, *rel)))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


BLOCK_TORCH = "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None; sys.modules['open_clip'] = None\n"


@pytest.mark.parametrize("module", ["xbench.schemas", "xbench.score", "xbench.score.cli", "xbench.score.report", "xbench.cli"])
def test_scorer_side_imports_without_torch(module):
    res = subprocess.run([sys.executable, "-c", BLOCK_TORCH + f"import {module}"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_umbrella_help_lists_every_step_without_torch():
    code = BLOCK_TORCH + "from xbench.cli import main; main(['--help'])"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    for name in ("demo", "prepare", "extract", "score", "report", "validate", "convert"):
        assert f"  {name}" in res.stdout


def test_a_subcommand_whose_extra_is_missing_says_what_to_install(monkeypatch):
    import click
    from click.testing import CliRunner

    from xbench import cli

    monkeypatch.setitem(cli.SUBCOMMANDS, "needs-torch", ("xbench_missing_module_for_test:cmd", "test", "extract"))
    res = CliRunner().invoke(cli.main, ["needs-torch"])
    assert res.exit_code == 2  # a usage error: this install cannot run the command
    assert "pip install 'xbench-cxr[extract]'" in res.output and "Traceback" not in res.output


def test_test_modules_have_unique_basenames():
    # pytest's default import mode needs unique basenames across folders without __init__.py.
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_the_distribution_is_xbench_cxr_and_no_text_installs_pypis_other_xbench():
    """On PyPI `xbench` is another project: every install line must name ours (xbench-cxr)."""
    import re

    pyproject = ROOT / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("no checkout")
    assert tomllib.loads(pyproject.read_text())["project"]["name"] == "xbench-cxr"
    wrong = re.compile(r"pip install\s+(-\S+\s+)*['\"]?xbench(?![-\w])")
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "platforms").rglob("*"),
             *(p for folder in ("xbench", "schemas", "score", "extract") for p in (ROOT / folder).rglob("*.py"))]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in texts if p.is_file()
             for m in wrong.finditer(p.read_text(errors="replace"))]
    assert found == []
