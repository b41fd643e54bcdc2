"""Every module, command and file that the build recipes and the docs name exists in the installed package
(issue 48: the evaluation image's Dockerfile ran `python -m xbench.score.warm` for months after the module moved,
and nothing noticed because the Docker tests skip where there is no daemon). No Docker is needed here: the names
are read from the files and resolved against the package this test runs with.

Read: the platform recipes (platforms/**: Dockerfile, shell scripts, Python entry points), the Makefile, .ci/run,
the release workflow, README.md, CONTRIBUTING.md, docs/, the model and data cards, suites/ and benchmarks/.
Checked:

* every dotted name ``xbench.a.b...`` resolves: its longest module prefix imports and the rest are attributes
  of it (a name whose first part is no module is one of the store attribute keys or plug-in entry-point groups
  listed below, each with what it is);
* every ``python -m MODULE`` of the project names a module that exists;
* every command at a command position in the recipes and the docs' code (``xbench-score``, ``xbench warm``,
  ``xbench package codabench``) is an installed console script or a subcommand ``xbench`` has;
* every file the Dockerfile copies and ``build.sh`` packs exists in the repository (patterns with ``[..]``,
  which match nothing when the file is absent, excepted);
* every ``from xbench... import name`` of the platform entry points resolves.
"""
from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import re
import shlex
from functools import cache
from pathlib import Path

import click
import pytest

from xbench.cli import SUBCOMMANDS
from xbench.schemas.registry import ENTRY_POINT_GROUPS

ROOT = Path(__file__).resolve().parents[1]

#: ``xbench.<key>`` names that are not Python paths: keys of the stores' and outputs' ``xbench`` attribute
#: (docs/contract.md) and of human.json; the plug-in entry-point groups are added from the registry.
ATTRIBUTE_KEYS = {
    "kind": "a store's kind (xbench.kind: images, ground-truth, submission)",
    "schema_minor": "a store's minor version (xbench.schema_minor)",
    "augment": "an augmented submission's record (xbench.augment)",
    "faithfulness": "a round-2 images store's record (xbench.faithfulness)",
    "scores_only": "a scores-only submission's flag",
    "submission": "metrics.json's record of the submission (xbench.submission.model, ...)",
    "inputs": "metrics.json's record of the input paths",
    "pointing_tolerance_px": "metrics.json's record of the tolerant pointing game's parameter",
    "bootstrap": "metrics.json's record of the resampling (xbench.bootstrap.n_resamples, seed)",
    "phantom": "human.json's record of the phantom's simulated readers (xbench.phantom.model)",
}

#: ``xbench-<name>`` words that are not commands: the distribution, the images `make container` builds.
NOT_COMMANDS = {"xbench-cxr", "xbench-eval", "xbench-eval-codabench"}


def _files() -> list[Path]:
    globs = ("platforms/**/*", "Makefile", ".ci/run", ".github/workflows/*.yml", "README.md", "CONTRIBUTING.md",
             "docs/**/*.md", "model_cards/*.md", "data_cards/*.md", "suites/*.yaml", "benchmarks/*.py")
    out = []
    for g in globs:
        out += [p for p in sorted(ROOT.glob(g)) if p.is_file() and "__pycache__" not in p.parts
                and p.suffix not in (".zip", ".crt")]
    return out


def _rel(p: Path, root: Path = ROOT) -> str:
    return p.relative_to(root).as_posix() if p.is_relative_to(root) else p.name


# -- dotted names -----------------------------------------------------------------------------------------
DOTTED = re.compile(r"(?<![\w./-])xbench(?:\.[A-Za-z_]\w*)+")


@cache
def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent that is a module, not a package
        return False


@cache
def resolve(dotted: str) -> str | None:
    """None when ``dotted`` names a module or an attribute path of one; else what is wrong, in words."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if not _is_module(module):
            continue
        if i == len(parts):
            return None
        obj = importlib.import_module(module)
        for j, attr in enumerate(parts[i:], start=i):
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:j])} has no attribute {attr!r}"
            obj = getattr(obj, attr)
        return None
    return f"no module {'.'.join(parts[:2])}"


def _groups() -> set[str]:
    return {g.split(".", 1)[1] for g in ENTRY_POINT_GROUPS.values()}


def dotted_problems(files: list[Path]) -> list[str]:
    problems = []
    for path in files:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in DOTTED.finditer(line):
                name = m.group(0)
                first = name.split(".")[1]
                if not _is_module(f"xbench.{first}") and (first in ATTRIBUTE_KEYS or first in _groups()):
                    continue
                why = resolve(name)
                if why:
                    problems.append(f"{_rel(path)}:{n}: {name}: {why}")
    return problems


# -- python -m ----------------------------------------------------------------------------------------------
PYTHON_M = re.compile(r"\bpython3?\s+-m\s+([A-Za-z_][\w.]*)")


def python_m_problems(files: list[Path]) -> list[str]:
    problems = []
    for path in files:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in PYTHON_M.finditer(line):
                module = m.group(1)
                if module.split(".")[0] == "xbench" and not _is_module(module):
                    problems.append(f"{_rel(path)}:{n}: python -m {module}: no such module")
    return problems


# -- commands -----------------------------------------------------------------------------------------------
def _code_lines(path: Path) -> list[tuple[int, str]]:
    """The lines of ``path`` that are shell code: recipes, scripts, RUN/ENTRYPOINT lines, fenced code blocks and
    inline code that starts with a command of ours."""
    lines = path.read_text(errors="replace").splitlines()
    name = path.name
    if path.suffix == ".md":
        out, fenced, shell = [], False, False
        for n, line in enumerate(lines, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                shell = fenced and line.strip()[3:] in ("", "bash", "sh", "shell", "console", "dockerfile")
                continue
            if shell:
                out.append((n, line))
            else:
                out += [(n, code) for code in re.findall(r"`([^`]+)`", line) if code.startswith("xbench")]
        return out
    if name == "Makefile":
        return [(n, line) for n, line in enumerate(lines, 1) if line.startswith("\t")]
    if name.startswith("Dockerfile"):
        out, run = [], False
        for n, line in enumerate(lines, 1):
            word = line.split(maxsplit=1)[0] if line.strip() else ""
            if word in ("RUN", "ENTRYPOINT", "CMD"):
                run = True
                line = line.split(maxsplit=1)[1] if len(line.split(maxsplit=1)) > 1 else ""
            elif word.isupper() and word.isalpha():
                run = False
            if run and not line.lstrip().startswith("#"):
                out.append((n, line))
        return out
    if path.suffix in (".sh", ".yml") or name == "run":
        return [(n, line) for n, line in enumerate(lines, 1) if not line.lstrip().startswith("#")]
    return []


SPLIT = re.compile(r"&&|\|\||[;|(`]|\$\(")
PREFIX = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+|exec\s+|time\s+|!\s+|then\s+|do\s+|else\s+|\$\s+)*")
PATH_PREFIX = re.compile(r"^(?:\$\(BIN\)/|\S*/bin/)")


@cache
def _console_scripts() -> frozenset[str]:
    eps = importlib.metadata.entry_points(group="console_scripts")
    return frozenset(ep.name for ep in eps if ep.value.startswith("xbench."))


def _subcommand_problem(words: list[str]) -> str | None:
    """``xbench SUB [SUBSUB]``: SUB one of ``xbench``'s subcommands, SUBSUB one of a group's."""
    if len(words) < 2 or not re.fullmatch(r"[a-z][a-z0-9-]*", words[1]):  # an option, a placeholder, prose
        return None
    sub = words[1]
    if sub not in SUBCOMMANDS:
        return f"xbench {sub}: xbench has no such subcommand"
    target = SUBCOMMANDS[sub][0]
    module, _, attr = target.partition(":")
    cmd = getattr(importlib.import_module(module), attr)
    if isinstance(cmd, click.Group) and len(words) > 2 and re.fullmatch(r"[a-z][a-z0-9-]*", words[2]):
        if words[2] not in cmd.commands:
            return f"xbench {sub} {words[2]}: no such subcommand of xbench {sub}"
    return None


def command_problems(files: list[Path]) -> list[str]:
    problems = []
    for path in files:
        for n, line in _code_lines(path):
            for segment in SPLIT.split(line):
                segment = PREFIX.sub("", segment.strip())
                segment = PATH_PREFIX.sub("", segment)
                try:
                    words = shlex.split(segment, comments=True)
                except ValueError:  # a quote closed on the next line
                    words = segment.split()
                if not words or not words[0].startswith("xbench"):
                    continue
                head = words[0].strip("\"',[]")
                why = None
                if head == "xbench":
                    why = _subcommand_problem(words)
                elif re.fullmatch(r"xbench-[a-z]+", head) and head not in NOT_COMMANDS:
                    if head not in _console_scripts():
                        why = f"{head}: no such command is installed"
                if why:
                    problems.append(f"{_rel(path)}:{n}: {why}")
    return problems


# -- files the image is built from ----------------------------------------------------------------------------
def copy_problems(root: Path = ROOT) -> list[str]:
    problems = []
    docker = root / "platforms/grand-challenge/Dockerfile"
    for n, line in enumerate(docker.read_text().splitlines(), 1):
        words = line.split()
        if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
            continue
        for src in words[1:-1]:
            if "[" not in src and not (root / src).exists():
                problems.append(f"{_rel(docker, root)}:{n}: COPY {src}: no such file in the repository")
    build = (root / "platforms/grand-challenge/build.sh").read_text()
    m = re.search(r"^files=\(([^)]*)\)", build, re.M)
    assert m, "build.sh no longer lists its files as files=(...): update this test"
    problems += [f"platforms/grand-challenge/build.sh: files: {f}: no such file in the repository"
                 for f in m.group(1).split() if not (root / f).exists()]
    return problems


def import_problems(files: list[Path]) -> list[str]:
    problems = []
    for path in files:
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "xbench":
                for alias in node.names:
                    why = resolve(f"{node.module}.{alias.name}")
                    if why:
                        problems.append(f"{_rel(path)}:{node.lineno}: from {node.module} import {alias.name}: {why}")
    return problems


# -- the tests ------------------------------------------------------------------------------------------------
FILES = _files()


def test_the_files_read_include_the_recipes():
    names = {_rel(p) for p in FILES}
    assert {"platforms/grand-challenge/Dockerfile", "platforms/grand-challenge/build.sh", "Makefile", ".ci/run",
            "README.md", "docs/how-to/platforms.md"} <= names


@pytest.mark.parametrize("check", [dotted_problems, python_m_problems, command_problems, import_problems],
                         ids=lambda f: f.__name__)
def test_every_name_the_recipes_and_docs_use_exists(check):
    assert check(FILES) == []


def test_every_file_the_image_copies_exists():
    assert copy_problems() == []


def test_the_warm_up_is_a_command_of_the_package():
    """The image and `make install` warm the kernels through `xbench warm`, not a module path a refactor moves."""
    docker = (ROOT / "platforms/grand-challenge/Dockerfile").read_text()
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^RUN xbench warm\b", docker, re.M) and "$(BIN)/xbench warm" in make
    assert "python -m xbench" not in docker


# -- the checks catch what they are for -----------------------------------------------------------------------
def test_a_moved_module_is_caught(tmp_path):
    docker = tmp_path / "Dockerfile"
    docker.write_text("FROM x AS build\nRUN python -m xbench.score.warmup \\\n    && chmod a+rwX /opt\n"
                      "RUN xbench-scor sub.zarr && /opt/xbench/venv/bin/xbench wram\n")
    doc = tmp_path / "guide.md"
    doc.write_text("Use `xbench.score.kernels.warmer` or\n```bash\nxbench package codabench-contest --out x\n"
                   "xbench-score a.zarr --gt g.zarr   # fine\n```\nand `xbench.schema_minor` (a key).\n")
    script = tmp_path / "evaluate.py"
    script.write_text("from xbench.package import grand_challenge_mian\n")
    files = [docker, doc, script]
    assert [p.split(": ", 1)[1] for p in python_m_problems(files)] == ["python -m xbench.score.warmup: no such module"]
    assert [p.split(": ", 1)[1] for p in dotted_problems(files)] == [
        "xbench.score.warmup: xbench.score has no attribute 'warmup'",
        "xbench.score.kernels.warmer: xbench.score.kernels has no attribute 'warmer'"]
    assert [p.split(": ", 1)[1] for p in command_problems(files)] == [
        "xbench-scor: no such command is installed", "xbench wram: xbench has no such subcommand",
        "xbench package codabench-contest: no such subcommand of xbench package"]
    assert [p.split(": ", 1)[1] for p in import_problems(files)] == [
        "from xbench.package import grand_challenge_mian: xbench.package has no attribute 'grand_challenge_mian'"]


def test_a_missing_copy_source_is_caught(tmp_path):
    (tmp_path / "platforms/grand-challenge").mkdir(parents=True)
    (tmp_path / "platforms/grand-challenge/Dockerfile").write_text(
        "COPY pyproject.toml README.md ./\nCOPY gone ./gone\nCOPY a.cr[t] /x/\nCOPY --from=build /a /a\n")
    (tmp_path / "platforms/grand-challenge/build.sh").write_text("files=(pyproject.toml lost)\n")
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "README.md").write_text("")
    assert copy_problems(tmp_path) == [
        "platforms/grand-challenge/Dockerfile:2: COPY gone: no such file in the repository",
        "platforms/grand-challenge/build.sh: files: lost: no such file in the repository"]
