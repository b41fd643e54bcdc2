"""`make install` (which `make test` and `make demo-models` run first) says what it installs and how large before it
starts, shows pip's progress for torch, and takes torch from TORCH_INDEX (issue 35: 6.8 GB installed silently);
`make demo`, the README's first command, installs no torch (issue 46 item 1). Checked on `make -n` (the commands,
not run) for a virtual environment that does not exist yet."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU = "https://download.pytorch.org/whl/cpu"

pytestmark = pytest.mark.skipif(shutil.which("make") is None or not (ROOT / "Makefile").exists(),
                                reason="no make, or not a checkout")


def dry_run(tmp_path, *args: str, target: str = "install") -> list[str]:
    done = subprocess.run(["make", "--no-print-directory", "-n", target, f"VENV={tmp_path / 'venv'}", *args], cwd=ROOT,
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


def test_make_demo_installs_no_torch_and_runs_the_weight_free_baselines(tmp_path):
    lines = dry_run(tmp_path, target="demo")
    text = "\n".join(lines)
    pip = [line for line in lines if "pip install" in line]
    assert len(pip) == 1 and '-e ".[demo]"' in pip[0], pip
    assert "constraints/torch.txt" not in text and "[extract" not in text and "torchvision" not in text
    assert lines[-1].endswith("xbench demo --out demo-out --models random,center,dog")
    assert any(line.startswith("touch ") and line.endswith("/.installed-demo") for line in lines)
    assert not any(line.startswith("touch ") and line.endswith("/.installed") for line in lines)
    # the baselines the target names are the catalog's torch-free models, and the demo extra brings no torch
    import tomllib

    from xbench.extract.models import catalog

    free = sorted(m for m, info in catalog.MODELS.items() if not info.torch)
    assert sorted(lines[-1].rsplit(" ", 1)[-1].split(",")) == free
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["demo"]
    assert extra and not any(d.split(">")[0].split("=")[0].strip().lower().startswith(("torch", "open_clip", "xbench"))
                             for d in extra)


def test_make_demo_models_is_the_second_step_with_torch(tmp_path):
    lines = dry_run(tmp_path, target="demo-models")
    t, m = _steps(lines)
    assert t < m and lines[-1].endswith("xbench demo --out demo-out")  # every demo model, clip-tiny included


def test_make_install_upgrades_a_torch_free_demo_venv(tmp_path):
    """A venv that `make demo` made (its own marker) is still upgraded by `make install` (test, lint)."""
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-demo").touch()
    t, m = _steps(dry_run(tmp_path))
    assert t < m


def test_make_demo_keeps_a_full_venv_as_it_is(tmp_path):
    """After `make install`, `make demo`'s install step installs nothing (the real command, run)."""
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()
    done = subprocess.run(["make", "--no-print-directory", "install-demo", f"VENV={venv}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "already the full install" in done.stdout and (venv / ".installed-demo").exists()
    assert sorted(p.name for p in venv.iterdir()) == [".installed", ".installed-demo"]
