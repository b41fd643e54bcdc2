"""`make install` (which `make demo` and `make test` run first) says what it installs and how large before it
starts, shows pip's progress for torch, and takes torch from TORCH_INDEX (issue 35: 6.8 GB installed silently).
Checked on `make -n` (the commands, not run) for a virtual environment that does not exist yet."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU = "https://download.pytorch.org/whl/cpu"

pytestmark = pytest.mark.skipif(shutil.which("make") is None or not (ROOT / "Makefile").exists(),
                                reason="no make, or not a checkout")


def dry_run(tmp_path, *args: str) -> list[str]:
    done = subprocess.run(["make", "--no-print-directory", "-n", "install", f"VENV={tmp_path / 'venv'}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.replace("\\\n", " ").splitlines()


def _steps(lines):
    torch_line = next(i for i, line in enumerate(lines) if "pip install" in line and " torch torchvision" in line)
    main_line = next(i for i, line in enumerate(lines) if "pip install" in line and '".[extract,dev]"' in line)
    return torch_line, main_line


def test_torch_is_announced_with_its_size_then_installed_with_progress(tmp_path):
    lines = dry_run(tmp_path)
    t, m = _steps(lines)
    assert t < m and lines[-1].startswith("touch ") and lines[-1].endswith("/.installed")  # the cache stays
    announce = lines[t - 1]
    assert announce.startswith("echo ") and "6.8 GB" in announce and "CUDA" in announce
    assert f"TORCH_INDEX={CPU}" in announce  # says how to avoid it
    assert " -q " not in lines[t] and "--progress-bar on" in lines[t] and "--index-url" not in lines[t]
    assert "-c constraints/torch.txt" in lines[t] and "-c constraints/torch.txt" in lines[m]


def test_torch_index_points_pip_at_a_cpu_build(tmp_path):
    lines = dry_run(tmp_path, f"TORCH_INDEX={CPU}")
    t, m = _steps(lines)
    assert f"--index-url {CPU}" in lines[t] and "--index-url" not in lines[m]  # the rest still comes from PyPI
    assert CPU in lines[t - 1] and "6.8 GB" not in lines[t - 1]


def test_the_pinned_packages_are_read_from_the_constraints_file(tmp_path):
    pinned = [line.split("==")[0] for line in (ROOT / "constraints/torch.txt").read_text().split() if "==" in line]
    t, _ = _steps(dry_run(tmp_path))
    assert pinned and dry_run(tmp_path)[t].split("||")[0].split()[-len(pinned):] == pinned


def test_a_failed_torch_install_ends_with_one_line_saying_why_and_what_instead(tmp_path):
    """Issue 46: an unreachable TORCH_INDEX gave ~100 retry lines and pip's last error, no hint. The real
    `make install` against a closed local port (no network needed; pip told not to retry): it fails, and its
    last stderr line says why and what to run instead."""
    import os
    import sys

    env = {**os.environ, "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": os.devnull}
    done = subprocess.run(["make", "--no-print-directory", "install", f"VENV={tmp_path / 'venv'}", f"PYTHON={sys.executable}",
                           "TORCH_INDEX=http://127.0.0.1:9/simple"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-2:]  # make's own "Error 1" line follows the hint
    hint = next(line for line in last if line.startswith("make: torch did not install"))
    assert "http://127.0.0.1:9/simple" in hint and "pip install ." in hint and "TORCH_INDEX" in hint
    assert not (tmp_path / "venv" / ".installed").exists()
