"""The package ships every sub-package, and the scorer side never needs torch."""
import re
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
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "platforms").rglob("*"),
             *(p for folder in ("xbench", "schemas", "score", "extract") for p in (ROOT / folder).rglob("*.py"))]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in texts if p.is_file()
             for m in wrong.finditer(p.read_text(errors="replace"))]
    assert found == []


def _pyproject_version() -> str:
    pyproject = ROOT / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("no checkout")
    return tomllib.loads(pyproject.read_text())["project"]["version"]


def test_the_version_is_read_from_the_installed_metadata():
    import importlib.metadata

    import xbench
    from xbench.schemas.store import root_attrs

    assert xbench.__version__ == importlib.metadata.version("xbench-cxr") == _pyproject_version()
    assert root_attrs("submission")["xbench"]["version"] == xbench.__version__


# `__version__ = "1.2.3"`, `version_option("1.2.3"`: a version hard-coded, whichever it is
VERSION_ASSIGNMENT = re.compile(r"""(?:__version__\s*=|version_option\()\s*["']\d+\.""")


def _hard_coded(line: str, version: str) -> bool:
    """A line that assigns a literal version, or names this version (an image tag, `image:0.1.0`, is not it)."""
    return bool(VERSION_ASSIGNMENT.search(line) or re.search(rf"(?<![:\w.-]){re.escape(version)}(?![\w.])", line))


def test_the_version_is_written_in_pyproject_alone():
    """Issue 35: one place for the version (pyproject.toml); code reads importlib.metadata, the release
    workflow checks the tag against pyproject."""
    version = _pyproject_version()
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    found = []
    for rel in files.stdout.splitlines():
        path = ROOT / rel
        if rel in ("pyproject.toml", "tests/test_packaging.py") or rel.startswith("tests/fixtures/") \
                or not path.is_file() \
                or path.suffix not in (".py", ".toml", ".cfg", ".yml", ".yaml", ".sh") and path.name != "Dockerfile":
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        found += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(lines, 1) if _hard_coded(line, version)]
    assert found == [], "the version is hard-coded outside pyproject.toml"


def test_the_version_check_catches_a_hard_coded_version():
    assert _hard_coded('__version__ = "9.9"', "0.1.0") and _hard_coded('@click.version_option("0.1.0")', "0.1.0")
    assert _hard_coded('out = {"xbench": "0.1.0"}', "0.1.0")
    assert not _hard_coded("__version__ = version('xbench-cxr')", "0.1.0")
    assert not _hard_coded('"version": __version__', "0.1.0") and not _hard_coded('__version__ = "0+unknown"', "0.1.0")
    assert not _hard_coded("docker.io/team/xbench-codabench:0.1.0", "0.1.0")
    assert not _hard_coded("zarr 3.0.1.0", "0.1.0") and not _hard_coded("v10.1.0", "0.1.0")


def test_the_release_workflow_builds_checks_tests_and_publishes_on_a_tag_with_trusted_publishing():
    yaml = pytest.importorskip("yaml")
    path = ROOT / ".github" / "workflows" / "release.yml"
    if not path.exists():
        pytest.skip("no checkout")
    text = path.read_text()
    flow = yaml.safe_load(text)
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads the key `on` as true
    assert on == {"push": {"tags": ["v*"]}}
    jobs = flow["jobs"]
    assert set(jobs) == {"build", "test-scorer-only", "publish"}
    run = lambda job: "\n".join(s.get("run", "") for s in jobs[job]["steps"])  # noqa: E731
    uses = lambda job: [s.get("uses", "") for s in jobs[job]["steps"]]  # noqa: E731
    assert "python -m build" in run("build") and "twine check --strict" in run("build")
    assert 'test "${GITHUB_REF_NAME}" = "v${version}"' in run("build") and '["project"]["version"]' in run("build")
    assert jobs["test-scorer-only"]["needs"] == "build"
    assert "find_spec('torch') is not None" in run("test-scorer-only") and "pytest" in run("test-scorer-only")
    assert set(jobs["publish"]["needs"]) == {"build", "test-scorer-only"}
    assert jobs["publish"]["permissions"] == {"id-token": "write"} and flow["permissions"] == {"contents": "read"}
    assert any(u.startswith("pypa/gh-action-pypi-publish@") for u in uses("publish"))
    assert "secrets." not in text and "password" not in text  # trusted publishing: no stored token
