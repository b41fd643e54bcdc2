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
