"""exit_fast: a console entry point leaves with its code, its buffered output flushed, and no teardown."""
from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAM = """
import atexit, sys
from xbench.schemas._cli import exit_fast
atexit.register(lambda: print("teardown ran"))
def run():
    print("x" * 100000)          # more than a pipe buffer, still buffered when exit_fast is reached
    print("to stderr", file=sys.stderr)
    sys.exit({code!r})
exit_fast(run)
"""


@pytest.mark.parametrize("code, want", [(0, 0), (2, 2), (None, 0), ("a message", 1)])
def test_exit_code_and_flushed_output_without_teardown(code, want):
    out = subprocess.run([sys.executable, "-c", PROGRAM.format(code=code)], capture_output=True, text=True,
                         timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == want
    assert out.stdout == "x" * 100000 + "\n"  # flushed whole; the atexit handler never ran
    assert out.stderr.startswith("to stderr\n") and ("a message" in out.stderr) == (code == "a message")


def test_xbench_debug_keeps_the_ordinary_exit():
    out = subprocess.run([sys.executable, "-c", PROGRAM.format(code=3)], capture_output=True, text=True,
                         timeout=60, env={"PATH": "/usr/bin:/bin", "XBENCH_DEBUG": "1"})
    assert out.returncode == 3 and out.stdout.endswith("teardown ran\n")


def test_main_with_arguments_still_raises_system_exit(tmp_path):
    from xbench.score.cli import main

    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "missing.zarr"), "--gt", str(tmp_path / "gt.zarr"), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
