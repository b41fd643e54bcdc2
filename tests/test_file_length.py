"""No source file over 800 lines outside the Numba kernels (issue 47 item 4): a file that long holds several roles
and is split by role, its public names still importable where they were. Checked here for extract/, schemas/ and
xbench/; score/ is split on its own branch (issue 47), and joins FOLDERS once it holds the rule."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("extract", "schemas", "xbench")
MAX_FILE_LINES = 800


def long_files(root: Path = ROOT, folders=FOLDERS, limit: int = MAX_FILE_LINES) -> list[str]:
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if "__pycache__" in path.parts or "kernels" in path.parts:
                continue
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > limit:
                out.append(f"{path.relative_to(root)} is {n} lines (limit {limit})")
    return out


def test_no_file_is_longer_than_800_lines():
    assert long_files() == []


def test_the_rule_sees_a_long_file(tmp_path):
    for f in FOLDERS:
        (tmp_path / f).mkdir()
    (tmp_path / "xbench" / "big.py").write_text("x = 1\n" * 801)
    (tmp_path / "xbench" / "ok.py").write_text("x = 1\n" * 800)
    (tmp_path / "schemas" / "kernels").mkdir()
    (tmp_path / "schemas" / "kernels" / "k.py").write_text("x = 1\n" * 900)  # kernels are exempt
    assert long_files(tmp_path) == ["xbench/big.py is 801 lines (limit 800)"]
