"""Numba's cache goes to the user's cache directory when the package folder is read-only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xbench.score.kernels._numba_cache import choose_cache_dir


def test_writable_package_keeps_numbas_default(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert choose_cache_dir(tmp_path, writable=True) is None


def test_read_only_package_uses_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert choose_cache_dir(tmp_path, writable=False) == tmp_path / "cache" / "xbench" / "numba"


def test_user_setting_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    assert choose_cache_dir(tmp_path, writable=False) == tmp_path / "mine"


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() == 0, reason="root can write to read-only folders, so the probe cannot be tested")
def test_read_only_copy_compiles_into_user_cache(tmp_path):  # pragma: no cover - runs only as a normal user
    import shutil

    src = Path(__file__).resolve().parents[3] / "score"
    pkg = tmp_path / "ro" / "xbench_score_copy"
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__", "report"))
    for p in [pkg, *pkg.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(tmp_path / "ro")}
    env.pop("NUMBA_CACHE_DIR", None)
    code = ("import numpy as np; from xbench_score_copy import kernels as K; "
            "K.grounding_counts(np.ones((1, 2, 2), np.float32), np.ones((1, 3, 3), bool))")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    assert any((tmp_path / "cache" / "xbench" / "numba").rglob("*.nbi"))


def test_unwritable_cache_dir_falls_back_to_temp_then_to_no_cache(tmp_path, monkeypatch):
    from xbench.score.kernels import _numba_cache as NC

    bad = Path("/proc/xbench-cannot-exist")  # not creatable, even by root
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(bad))
    monkeypatch.setattr(NC, "_temp_cache_dir", lambda: tmp_path / "tmpcache")
    assert NC.configure_numba_cache(tmp_path) == tmp_path / "tmpcache"
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "tmpcache")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(bad))
    monkeypatch.setattr(NC, "_temp_cache_dir", lambda: bad / "tmp")
    disabled = []
    monkeypatch.setattr(NC, "disable_numba_caching", lambda: disabled.append(True))
    assert NC.configure_numba_cache(tmp_path) is None and disabled == [True]


def test_with_caching_disabled_a_cached_kernel_still_compiles():
    # A function whose source file does not exist has no cache locator at all: Numba refuses cache=True with
    # "cannot cache function"; after disable_numba_caching it compiles and runs from memory.
    code = ("import numba\n"
            "src = 'def f(x):\\n    return x + 1\\n'\n"
            "ns = {}\nexec(compile(src, '/nonexistent/xbench_kernel.py', 'exec'), ns)\n"
            "import sys\n"
            "if sys.argv[1] == 'off':\n"
            "    from xbench.score.kernels._numba_cache import disable_numba_caching\n"
            "    disable_numba_caching()\n"
            "print(numba.njit(cache=True)(ns['f'])(1))\n")
    before = subprocess.run([sys.executable, "-c", code, "on"], capture_output=True, text=True, timeout=300)
    assert before.returncode != 0 and "cannot cache function" in before.stderr
    after = subprocess.run([sys.executable, "-c", code, "off"], capture_output=True, text=True, timeout=300)
    assert after.returncode == 0 and after.stdout.strip() == "2", after.stderr
