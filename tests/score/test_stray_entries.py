"""A store folder holding an entry that is no Zarr node (a stray plain folder or file): zarr warns about it on
every listing. Run as programs (real warning filters), xbench-validate and xbench-score print it as one escaped
``PROG: warning:`` line of their own, never zarr's raw ``ZarrUserWarning`` with its source file and line."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from score_stores import make_gt, make_submission

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("stray")
    gt = make_gt(base / "gt.zarr")
    make_submission(base / "sub.zarr", gt)
    (base / "sub.zarr" / "stray").mkdir()  # a plain folder beside the dataset groups
    (base / "sub.zarr" / "notes\x1b[31m.txt").write_text("a file whose name holds an escape sequence\n")
    return base


def _run(*argv, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "XBENCH_DEBUG")}
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("argv,prog", [(("xbench-validate", "sub.zarr"), "xbench-validate"),
                                       (("xbench", "validate", "sub.zarr", "--gt", "gt.zarr"), "xbench validate"),
                                       (("xbench-score", "sub.zarr", "--gt", "gt.zarr", "--out", "out", "-q",
                                         "--bootstrap", "0"), "xbench-score")])
def test_a_stray_entry_is_one_escaped_warning_line(stores, argv, prog):
    res = _run(*argv, cwd=stores)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert "ZarrUserWarning" not in res.stderr and "warnings.warn" not in res.stderr and "group.py" not in res.stderr
    assert "\x1b" not in res.stderr  # the name from the store is escaped
    stray = [line for line in lines if "stray" in line]
    notes = [line for line in lines if "notes" in line]
    assert len(stray) == 1 and len(notes) == 1, lines
    for line in stray + notes:
        assert line.startswith(f"{prog}: warning: ") and "not part of it (no zarr.json), ignored" in line, line
    assert "notes\\x1b[31m.txt" in notes[0]
    assert len(lines) == 2, lines  # nothing else on stderr
