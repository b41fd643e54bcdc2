"""The layout rules of docs/explanation/architecture.md that a reader checks by eye, held by a test (issue 36): no function of
the source is longer than 100 lines (its docstring and nested functions counted), so each reads on one screen
and does one thing; no file is longer than 800 lines but the Numba kernels (score/kernels/), so a module holds
one role (issue 47)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("extract", "score", "schemas", "xbench")
MAX_LINES = 100
MAX_FILE_LINES = 800
#: folders whose files may run longer: the Numba kernels (each kernel beside its checked wrapper)
LONG_FILE_FOLDERS = ("score/kernels",)


def long_functions(root: Path = ROOT, limit: int = MAX_LINES) -> list[str]:
    out = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > limit:
                        out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} is {n} lines (limit {limit})")
    return out


def long_files(root: Path = ROOT, limit: int = MAX_FILE_LINES, exempt=LONG_FILE_FOLDERS) -> list[str]:
    out = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if "__pycache__" in path.parts or any(rel.startswith(f"{e}/") for e in exempt):
                continue
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > limit:
                out.append(f"{rel} is {n} lines (limit {limit})")
    return out


def test_no_file_is_longer_than_800_lines_but_the_kernels():
    assert long_files() == []


def test_the_file_rule_sees_a_long_file_and_exempts_the_kernels(tmp_path):
    for f in FOLDERS:
        (tmp_path / f).mkdir()
    (tmp_path / "score" / "kernels").mkdir()
    body = "\n".join(f"x{i} = {i}" for i in range(801))
    (tmp_path / "score" / "m.py").write_text(body + "\n")
    (tmp_path / "score" / "kernels" / "k.py").write_text(body + "\n")
    (tmp_path / "xbench" / "ok.py").write_text("\n".join(body.splitlines()[:800]) + "\n")
    assert long_files(tmp_path) == ["score/m.py is 801 lines (limit 800)"]


def test_no_function_is_longer_than_100_lines():
    assert long_functions() == []


def test_the_rule_sees_a_long_function(tmp_path):
    (tmp_path / "score").mkdir()
    for f in FOLDERS[:1] + FOLDERS[2:]:
        (tmp_path / f).mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(100))
    (tmp_path / "score" / "m.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path) == ["score/m.py:5 long is 101 lines (limit 100)"]


def test_no_merge_conflict_markers_are_left():
    markers = ("<<<<<<< ", ">>>>>>> ")
    found = []
    for folder in (*FOLDERS, "docs", "tests", "data_cards", "model_cards", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".md", ".toml", ".yaml", ".yml") and "__pycache__" not in path.parts:
                text = path.read_text(errors="replace")
                found += [f"{path.relative_to(ROOT)}" for m in markers if f"\n{m}" in text or text.startswith(m)]
    for name in ("README.md", "CONTRIBUTING.md", "pyproject.toml", "Makefile"):
        text = (ROOT / name).read_text()
        found += [name for m in markers if f"\n{m}" in text]
    assert found == []


def test_the_scorer_tests_are_laid_out_like_the_scorer():
    """tests/score/ mirrors score/ (issue 47 item 4): each role folder of score/ has its tests in the folder of
    the same name, and tests/score/ has no folder score/ lacks; the entry point's, the command's and the
    platforms' tests sit at its top, beside the store builders they share."""
    roles = {p.name for p in (ROOT / "score").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    tested = {p.name for p in (ROOT / "tests" / "score").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert tested == roles
    for role in roles:
        assert sorted((ROOT / "tests" / "score" / role).glob("test_*.py")), role
