"""Numba's cache goes to the user's cache directory when the package folder is read-only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xbench.score._numba_cache import choose_cache_dir


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

    src = Path(__file__).resolve().parents[2] / "score"
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
