"""The package's layering (docs/explanation/architecture.md, "Layers and their import rules"), read from the source with ast:
nothing is imported, so it runs without torch.

Every rule of the architecture page's import table is checked, row by row, for every module of the source
(imports inside functions included, since they run too):

- each import of the project names a layer the importing folder's row allows ("from the project");
- each third-party import names a package of its row, and one listed under "inside a function only" is
  imported in a function body, never at the module's top level;
- ``xbench.extract.models`` never imports ``xbench.extract.datasets``;
- no import circle anywhere in the source (strongly connected components of the module graph).

The rules are read from the page itself, so the page and the test cannot disagree.
"""
from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: import name -> source folder (pyproject's package-dir)
FOLDERS = {"xbench.schemas": "schemas", "xbench.extract": "extract", "xbench.score": "score",
           "xbench.suites": "suites", "xbench": "xbench"}
#: the layer of each folder: the name the architecture page's table uses for it
LAYER_OF_FOLDER = {"schemas": "schemas", "extract": "extract", "score": "score", "xbench": "xbench",
                   "suites": "xbench"}
DOC = "docs/explanation/architecture.md"


# ------------------------------------------------------------------------------ reading the source
@dataclass(frozen=True)
class Import:
    """One import of one module: what it names, where, and whether it runs inside a function."""

    path: str          # the importing file, relative to the checkout
    module: str        # the importing module
    line: int
    target: str        # the imported module (absolute; for ``from pkg import name``: pkg.name when a module)
    deferred: bool     # inside a function body (runs when called, not when the module is imported)

    def __str__(self) -> str:
        where = " inside a function" if self.deferred else ""
        return f"{self.path}:{self.line} ({self.module}) imports {self.target}{where}"


def source_modules(root: Path | None = None) -> dict[str, tuple[Path, bool]]:
    """{module name: (path, is a package)} for every .py file of the source folders."""
    root = root or ROOT
    out = {}
    for name, folder in FOLDERS.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")) if base.is_dir() else ():
            parts = list(path.relative_to(base).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts.pop()
            out[".".join([name, *parts])] = (path, is_pkg)
    return out


def _walk(node: ast.AST, deferred: bool = False):
    for child in ast.iter_child_nodes(node):
        inside = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, inside
        yield from _walk(child, inside)


def imports_of(module: str, path: Path, is_pkg: bool, modules, root: Path | None = None) -> list[Import]:
    """Every import of one module, relative imports resolved. ``from pkg import name`` is an import of the
    module ``pkg.name`` when that is a module of the source, else of ``pkg`` (a name defined there)."""
    package = module if is_pkg else module.rpartition(".")[0]
    rel = str(path.relative_to(root or ROOT))
    out = []
    for node, deferred in _walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                stem = ".".join(up + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            subs = [f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in modules]
            targets = subs + ([stem] if len(subs) < len(node.names) else [])
        out += [Import(rel, module, node.lineno, t, deferred) for t in targets if t != "__future__"]
    return out


def all_imports(root: Path | None = None) -> list[Import]:
    modules = source_modules(root)
    return [i for m, (p, pkg) in modules.items() for i in imports_of(m, p, pkg, modules, root)]


def layer_of(module: str) -> str | None:
    """The layer of a module of the project (None: not the project's)."""
    if module != "xbench" and not module.startswith("xbench."):
        return None
    for name, folder in FOLDERS.items():  # the longest prefix first: xbench.schemas before xbench
        if module == name or module.startswith(name + "."):
            return LAYER_OF_FOLDER[folder]
    return None


def folder_of(module: str) -> str:
    for name, folder in FOLDERS.items():
        if module == name or module.startswith(name + "."):
            return folder
    raise ValueError(module)


# ------------------------------------------------------------------------------ reading the rules
@dataclass(frozen=True)
class Row:
    folders: tuple[str, ...]
    layers: frozenset[str]       # "from the project"
    top: frozenset[str]          # third-party at import time
    deferred: frozenset[str]     # third-party inside a function only


def rules(text: str | None = None) -> dict[str, Row]:
    """{folder: its row} from the architecture page's import table (the one whose header starts with
    "| folder | from the project")."""
    text = (ROOT / DOC).read_text(encoding="utf-8") if text is None else text
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| folder | from the project |"))
    out = {}
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = [tuple(n.rstrip("/") for n in re.findall(r"`([^`]+)`", c)) for c in cells]
        row = Row(names[0], frozenset(names[1]), frozenset(names[2]), frozenset(names[3]))
        for folder in row.folders:
            out[folder] = row
    return out


def _third_party(target: str) -> str | None:
    top = target.split(".")[0]
    return None if top in sys.stdlib_module_names or top == "xbench" or not top else top


def layer_breaks(imports: list[Import], table: dict[str, Row]) -> list[str]:
    """One line per import against its folder's row: the module, the import and the rule it breaks."""
    out = []
    for imp in imports:
        folder = folder_of(imp.module)
        row = table[folder]
        rule = f"{DOC}: row `{folder}/`"
        target_layer = layer_of(imp.target)
        if target_layer is not None:
            if target_layer not in row.layers:
                out.append(f"{imp}: layer {target_layer!r}; {rule} allows from the project only "
                           f"{', '.join(sorted(row.layers))}")
            continue
        pkg = _third_party(imp.target)
        if pkg is None:
            continue
        if pkg in row.top:
            continue
        if pkg in row.deferred:
            if not imp.deferred:
                out.append(f"{imp} at the module's top level; {rule} allows {pkg} inside a function only")
            continue
        out.append(f"{imp}: third-party {pkg!r} is not in {rule} (at import time: {', '.join(sorted(row.top))}; "
                   f"inside a function: {', '.join(sorted(row.deferred)) or 'none'})")
    return out


# ------------------------------------------------------------------------------ circles
def import_graph(imports: list[Import], modules) -> dict[str, set[str]]:
    """{module: the modules of the source it imports} (an import of a name defined in a package is an edge to
    the package; the implicit import of a module's parent package is not an edge)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        target = imp.target
        while target and target not in modules:  # `import xbench.schemas.store.x`: the module that exists
            target = target.rpartition(".")[0]
        if target and target != imp.module:
            graph[imp.module].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def _circle_lines(graph, cycles) -> list[str]:
    """A circle as its modules and the imports that close it (each edge inside the component)."""
    lines = []
    for comp in cycles:
        members = set(comp)
        edges = [f"{a} -> {b}" for a in comp for b in sorted(graph[a] & members)]
        lines.append(f"import circle of {len(comp)} modules (rule: no import circle anywhere, {DOC}): "
                     + "; ".join(edges))
    return lines


# ------------------------------------------------------------------------------ the rules, checked
@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return all_imports()


def test_the_table_has_a_row_for_every_folder():
    table = rules()
    assert set(table) == set(FOLDERS.values()), f"{DOC}'s import table must have one row per source folder"
    assert {row.folders for row in table.values()} and all(row.layers for row in table.values())


@pytest.mark.parametrize("folder", sorted(set(FOLDERS.values())))
def test_every_import_follows_its_folders_row(imports, folder):
    """docs/explanation/architecture.md's import table, one row at a time: the project's layers and the third-party
    packages it allows (those listed "inside a function only" never at a module's top level)."""
    mine = [i for i in imports if folder_of(i.module) == folder]
    assert mine or folder == "suites"
    assert layer_breaks(mine, rules()) == []


def test_models_never_import_the_dataset_readers(imports):
    bad = [f"{i}: rule `extract/models/` never imports `extract/datasets/` ({DOC})" for i in imports
           if i.module.startswith("xbench.extract.models")
           and (i.target == "xbench.extract.datasets" or i.target.startswith("xbench.extract.datasets."))]
    assert bad == []


def test_no_import_circle_anywhere(imports):
    """Layers import downwards only: a circle (even through an import inside a function) means two modules
    are one, or a helper lives in the wrong one."""
    graph = import_graph(imports, source_modules())
    assert _circle_lines(graph, import_cycles(graph)) == []


# ------------------------------------------------------------------------------ the checks can fail
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


TABLE = """
| folder | from the project | third-party at import time | third-party inside a function only |
|---|---|---|---|
| `schemas/` | `schemas` | `numpy` | `yaml` |
| `extract/` | `schemas`, `extract` | `numpy`, `torch` | `PIL` |
| `score/` | `schemas`, `score` | `numpy` | `pyarrow` |
| `xbench/`, `suites/` | `schemas`, `extract`, `score`, `xbench` | `click` | `torch` |
"""


def test_the_rules_are_read_from_the_table():
    table = rules(TABLE)
    assert table["suites"] is table["xbench"] and table["xbench"].folders == ("xbench", "suites")
    assert table["extract"] == Row(("extract",), frozenset({"schemas", "extract"}), frozenset({"numpy", "torch"}),
                                   frozenset({"PIL"}))
    real = rules()  # the page's own table: the rows the brief names
    assert "torch" not in real["score"].top | real["score"].deferred
    assert "torch" not in real["schemas"].top | real["schemas"].deferred
    assert real["extract"].layers == {"schemas", "extract"} and real["score"].layers == {"schemas", "score"}
    assert real["schemas"].layers == {"schemas"}


def test_each_rule_catches_each_spelling(tmp_path, monkeypatch):
    """A hand-made tree with one break of every kind, spelled every way (relative, absolute, from-import of a
    submodule, lazy, the root package): each is reported, naming the module, the import and the rule; the
    allowed ones are not."""
    root = _tree(tmp_path, {
        "schemas/__init__.py": "", "schemas/a.py": "import numpy\nimport yaml\n",            # yaml at top: break
        "schemas/b.py": "def f():\n    import yaml\n    from xbench import cli\n",         # umbrella: break
        "schemas/c.py": "def f():\n    from ..score import k\n",                            # score: break
        "extract/__init__.py": "", "extract/ok.py": "import torch\nfrom ..schemas import a\n",
        "extract/bad.py": "def f():\n    from xbench.score.k import x\n    import pandas\n",  # 2 breaks
        "extract/models/__init__.py": "", "extract/models/m.py": "from ..datasets import r\n",
        "extract/datasets/__init__.py": "", "extract/datasets/r.py": "",
        "score/__init__.py": "", "score/k.py": "import torch\n",                            # torch: break
        "score/l.py": "from xbench.extract import ok\nfrom xbench import __version__\n",    # 2 breaks
        "xbench/__init__.py": "", "xbench/cli.py": "import click\nfrom xbench.score import k\n"
                                                   "from xbench.extract import ok\n",
        "suites/__init__.py": "",
    })
    monkeypatch.setattr(sys.modules[__name__], "ROOT", root)
    imports = all_imports(root)
    got = layer_breaks(imports, rules(TABLE))
    where = sorted(line.split(" ")[0] for line in got)
    assert where == ["extract/bad.py:2", "extract/bad.py:3", "schemas/a.py:2", "schemas/b.py:3", "schemas/c.py:2",
                     "score/k.py:1", "score/l.py:1", "score/l.py:2"], got
    by = {line.split(" ")[0]: line for line in got}
    assert "(xbench.schemas.a) imports yaml" in by["schemas/a.py:2"]
    assert "inside a function only" in by["schemas/a.py:2"]
    assert "imports xbench.cli inside a function: layer 'xbench'" in by["schemas/b.py:3"]
    assert "imports xbench.score.k" in by["schemas/c.py:2"] and "row `schemas/`" in by["schemas/c.py:2"]
    assert "third-party 'torch' is not in docs/explanation/architecture.md: row `score/`" in by["score/k.py:1"]
    assert "imports xbench: layer 'xbench'" in by["score/l.py:2"]  # `from xbench import __version__`
    models = [i for i in imports if i.module.startswith("xbench.extract.models")]
    assert [i.target for i in models] == ["xbench.extract.datasets.r"]


def test_the_circle_finder_sees_lazy_and_package_imports(tmp_path):
    root = _tree(tmp_path, {
        "score/__init__.py": "", "score/a.py": "from . import b\n", "score/b.py": "def f():\n    from .c import x\n",
        "score/c.py": "from xbench.score.a import y\n", "score/d.py": "from .a import z\n",
        "score/sub/__init__.py": "from .f import g\n",
        "score/sub/e.py": "from .. import d\nfrom xbench.score.sub import f\n",
        "score/sub/f.py": "def g():\n    from . import e\n",
        "schemas/__init__.py": "", "schemas/p.py": "def f():\n    import xbench.schemas.q.deep\n",
        "schemas/q.py": "from .p import f\n",
    })
    modules = source_modules(root)
    graph = import_graph(all_imports(root), modules)
    assert graph["xbench.score.b"] == {"xbench.score.c"} and graph["xbench.score.d"] == {"xbench.score.a"}
    assert graph["xbench.score.sub.e"] == {"xbench.score.d", "xbench.score.sub.f"}  # not the package __init__
    assert graph["xbench.schemas.p"] == {"xbench.schemas.q"}  # `import a.b.c`: the longest module that exists
    cycles = import_cycles(graph)
    assert cycles == [["xbench.schemas.p", "xbench.schemas.q"],
                      ["xbench.score.a", "xbench.score.b", "xbench.score.c"],
                      ["xbench.score.sub.e", "xbench.score.sub.f"]]
    lines = _circle_lines(graph, cycles)
    assert "xbench.score.b -> xbench.score.c" in lines[1] and "no import circle anywhere" in lines[1]


def test_the_circle_finder_against_brute_force():
    """Tarjan's components equal the brute-force ones (v and w together iff each reaches the other) on random
    graphs."""
    import random

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 9)
        nodes = [f"m{i}" for i in range(n)]
        graph = {v: {w for w in nodes if w != v and rng.random() < 0.2} for v in nodes}

        def reach(v):
            seen, todo = {v}, [v]
            while todo:
                for w in graph[todo.pop()]:
                    if w not in seen:
                        seen.add(w)
                        todo.append(w)
            return seen

        r = {v: reach(v) for v in nodes}
        comps = {tuple(sorted(w for w in nodes if w in r[v] and v in r[w])) for v in nodes}
        assert sorted(import_cycles(graph)) == sorted(list(c) for c in comps if len(c) > 1)


def test_the_vocabulary_is_one_module():
    import importlib.util

    assert importlib.util.find_spec("xbench.schemas.vocabulary") is not None
    assert importlib.util.find_spec("xbench.extract.datasets.vocabulary") is None  # the shim is gone (issue 36)


# ------------------------------------------------------------------------------ the layers inside score/
#: a string naming a module of the source, as a lazy plug-in reference ("xbench.score.x" or "xbench.score.x:attr")
#: or importlib.import_module's argument: it runs as an import when used, so it is an edge like one
_MODULE_STRING = re.compile(r"(xbench(?:\.\w+)+)(?::\w+)?")


def string_references(module: str, path: Path, modules, root: Path | None = None) -> list[Import]:
    """Every string constant of one module whose whole value names a module of the source (``"pkg.mod"`` or
    ``"pkg.mod:attr"``, e.g. a lazy plug-in reference or ``importlib.import_module("pkg.mod")``), as an Import
    (docstrings and prose never match: the whole constant must be the name)."""
    rel = str(path.relative_to(root or ROOT))
    out = []
    for node, deferred in _walk_constants(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        m = _MODULE_STRING.fullmatch(node.value)
        if m is None:
            continue
        target = m.group(1)
        while target and target not in modules:  # "pkg.mod.attr" spelled with dots: the module that exists
            target = target.rpartition(".")[0]
        if target and target != module:
            out.append(Import(rel, module, node.lineno, target, deferred))
    return out


def _walk_constants(node: ast.AST, deferred: bool = False):
    for child in ast.iter_child_nodes(node):
        inside = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
            yield child, inside
        yield from _walk_constants(child, inside)


def score_layers(text: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """[(layer, its modules and packages under ``xbench.score``)], bottom first, from the architecture page's
    table of score/'s layers (the one whose header starts with "| score/ layer | holds")."""
    text = (ROOT / DOC).read_text(encoding="utf-8") if text is None else text
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| score/ layer | holds |"))
    out = []
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        parts = tuple(n.removesuffix(".py").rstrip("/").replace("/", ".") for n in re.findall(r"`([^`]+)`", cells[1]))
        out.append((cells[0].strip("`* "), parts))
    return out


def score_layer_of(module: str, layers) -> int | None:
    """The index (0: the bottom) of the layer holding a module of score/ (None: not under xbench.score, or the
    package ``xbench.score`` itself, which sits above every layer: its lazy names re-export the top)."""
    if not module.startswith("xbench.score."):
        return None
    rest = module[len("xbench.score."):]
    for i, (_, parts) in enumerate(layers):
        if any(rest == p or rest.startswith(p + ".") for p in parts):
            return i
    raise LookupError(f"{module}: in no layer of {DOC}'s table of score/'s layers")


def score_layer_breaks(edges: list[Import], layers) -> list[str]:
    """One line per import (or string reference) from a layer of score/ to a higher one."""
    out = []
    for imp in edges:
        a, b = score_layer_of(imp.module, layers), score_layer_of(imp.target, layers)
        if a is not None and b is not None and b > a:
            out.append(f"{imp}: layer {layers[a][0]!r} reaches up to {layers[b][0]!r} ({DOC}: score/'s layers, "
                       "each imports only those below it and itself)")
    return out


def score_edges(root: Path | None = None) -> list[Import]:
    """Every import and every string reference of every module of score/."""
    modules = source_modules(root)
    return [i for m, (p, pkg) in modules.items() if m.startswith("xbench.score")
            for i in imports_of(m, p, pkg, modules, root) + string_references(m, p, modules, root)]


def test_score_has_its_layers_and_every_module_is_in_one():
    layers = score_layers()
    names = [name for name, _ in layers]
    assert names.index("kernels") < names.index("metrics") < names.index("resampling") < names.index("sections") \
        < names.index("outputs") < names.index("report") < names.index("entry")
    for module in source_modules():
        if module.startswith("xbench.score."):
            score_layer_of(module, layers)  # raises for a module in no layer


def test_score_layers_import_downwards_only_strings_included():
    """docs/explanation/architecture.md's score/ layers: no import, deferred import or "module:attr" string reaches
    up, without exception (issue 47 item 3; the last back edges went with the counting pass's move above the
    metrics and the paired bootstrap's into sections/)."""
    assert score_layer_breaks(score_edges(), score_layers()) == []


LAYERS = """
| score/ layer | holds |
|---|---|
| low | `low.py` |
| mid | `mid/` |
| top | `top.py` |
"""


def test_the_score_layer_check_fails_on_a_back_edge_and_on_a_string(tmp_path):
    """A hand-made score/ with one allowed edge, one back import (deferred) and two back string references (a
    lazy "module:attr" and importlib.import_module's argument): the three back ones are reported."""
    root = _tree(tmp_path, {
        "score/__init__.py": "", "score/top.py": "from xbench.score.mid import m\n",            # down: fine
        "score/mid/__init__.py": "", "score/mid/m.py": "def f():\n    from xbench.score import top\n",  # up: break
        "score/low.py": 'import importlib\nREF = "xbench.score.mid.m:f"\n'                   # up: break
                        'def g():\n    return importlib.import_module("xbench.score.top")\n'  # up: break
                        'DOC = "see xbench.score.top for more"\n',                             # prose: fine
    })
    layers = score_layers(LAYERS)
    assert layers == [("low", ("low",)), ("mid", ("mid",)), ("top", ("top",))]
    got = score_layer_breaks(score_edges(root), layers)
    assert sorted(line.split(" ")[0] for line in got) == ["score/low.py:2", "score/low.py:4", "score/mid/m.py:2"], got
    assert all("reaches up" in line for line in got)
    with pytest.raises(LookupError):
        score_layer_of("xbench.score.nowhere", layers)
