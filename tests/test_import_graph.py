"""The package's layering, read from the source with ast (nothing is imported, so it runs without torch).

- ``xbench.extract.models`` never imports ``xbench.extract.datasets``: the finding vocabulary both need lives in
  ``xbench.schemas``, so a model can be built without the dataset readers (and their pydicom/pycocotools);
- ``xbench.schemas`` imports neither ``xbench.extract`` nor ``xbench.score`` (both sides import it, not each
  other), and nothing of torch.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: import name -> source folder (pyproject's package-dir)
FOLDERS = {"xbench.schemas": "schemas", "xbench.extract": "extract", "xbench.score": "score"}


def _module_name(path: Path) -> str:
    for name, folder in FOLDERS.items():
        base = ROOT / folder
        if base in path.parents:
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join([name, *parts])
    raise ValueError(path)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved; lazy imports inside
    functions included, since they run too)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{a.name}" for a in node.names)  # `from pkg import submodule`
    return found


def _offenders(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for mod in sorted(imported_modules(path)):
            if any(mod == f or mod.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(ROOT)} imports {mod}")
    return out


def test_models_never_import_the_dataset_readers():
    assert _offenders("extract/models", ("xbench.extract.datasets",)) == []


def test_schemas_import_neither_side_nor_torch():
    assert _offenders("schemas", ("xbench.extract", "xbench.score", "torch", "torchvision")) == []


def test_score_imports_neither_extract_nor_torch():
    """docs/architecture.md's layer table: score imports ``schemas``, never ``extract``, never torch."""
    assert _offenders("score", ("xbench.extract", "torch", "torchvision")) == []


def test_the_scanner_sees_relative_lazy_and_from_imports(tmp_path, monkeypatch):
    """The checks above can fail: each spelling of an import of the readers is caught."""
    pkg = tmp_path / "extract" / "models"
    pkg.mkdir(parents=True)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    spellings = {
        "rel.py": "from ..datasets import vocabulary\n",
        "lazy.py": "def f():\n    from ..datasets.base import Box\n",
        "abs.py": "import xbench.extract.datasets.rsna\n",
        "fromabs.py": "from xbench.extract import datasets\n",
        "ok.py": "from xbench.schemas import vocabulary\nfrom ..registry import Registry\n",
    }
    for name, text in spellings.items():
        (pkg / name).write_text(text)
    bad = _offenders("extract/models", ("xbench.extract.datasets",))
    assert sorted({b.split()[0].rsplit("/", 1)[1] for b in bad}) == ["abs.py", "fromabs.py", "lazy.py", "rel.py"]


@pytest.mark.parametrize("module", ["xbench.schemas.vocabulary", "xbench.extract.datasets.vocabulary"])
def test_the_vocabulary_is_one_module(module):
    import importlib

    from xbench.schemas import vocabulary

    got = importlib.import_module(module)
    assert got.classes_for is vocabulary.classes_for and got.prompts is vocabulary.prompts


# ------------------------------------------------------------------------------ no import circle in score/
def score_import_graph(root: Path | None = None) -> dict[str, set[str]]:
    """{module: modules of xbench.score it imports}, read with ast from score/ (imports inside functions and
    under TYPE_CHECKING included: a lazy import only hides a circle, it does not remove it). ``from pkg
    import name`` is an edge to the submodule ``pkg.name`` when that is a module, else to ``pkg`` itself."""
    base = (root or ROOT) / "score"
    modules = {}
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        modules[".".join(["xbench.score", *parts])] = (path, is_pkg)
    graph: dict[str, set[str]] = {}
    for module, (path, is_pkg) in modules.items():
        package = module if is_pkg else module.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = package.split(".")
                    up = up[: len(up) - (node.level - 1)]
                    stem = ".".join(up + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                subs = [f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in modules]
                targets = subs + ([stem] if len(subs) < len(node.names) else [])
            else:
                continue
            edges.update(t for t in targets if t in modules and t != module)
        graph[module] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_score_has_no_import_circle():
    """Layers of score/ import downwards only: a circle (even through an import inside a function) means two
    modules are one, or a helper lives in the wrong one."""
    assert import_cycles(score_import_graph()) == []  # the report package included


def test_the_circle_finder_sees_lazy_and_package_imports(tmp_path):
    pkg = tmp_path / "score"
    (pkg / "sub").mkdir(parents=True)
    files = {"__init__.py": "", "a.py": "from . import b\n", "b.py": "def f():\n    from .c import x\n",
             "c.py": "from xbench.score.a import y\n", "d.py": "from .a import z\n",
             "sub/__init__.py": "", "sub/e.py": "from .. import d\nfrom xbench.score.sub import f\n",
             "sub/f.py": "def g():\n    from . import e\n"}
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = score_import_graph(tmp_path)
    assert graph["xbench.score.b"] == {"xbench.score.c"} and graph["xbench.score.d"] == {"xbench.score.a"}
    assert import_cycles(graph) == [["xbench.score.a", "xbench.score.b", "xbench.score.c"],
                                    ["xbench.score.sub.e", "xbench.score.sub.f"]]
