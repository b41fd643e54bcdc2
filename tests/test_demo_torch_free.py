"""Issue 46 item 1: `make demo`'s first run needs no torch. `xbench demo` in a process where torch cannot be
imported runs the weight-free baselines (prepare, extract, score, report) and writes the report."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

BLOCK_TORCH = "import sys\nsys.modules['torch'] = None  # as if torch were not installed\n"


@pytest.mark.slow
def test_the_demo_runs_end_to_end_without_torch(tmp_path):
    code = (BLOCK_TORCH + "from xbench.cli import main\ntry:\n    main(['demo', '--quick', '--out', 'out'])\n"
            "except SystemExit as e:\n    print('exit', e.code, sys.modules.get('torch'), flush=True)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.stdout.strip().splitlines()[-1] == "exit 0 None", done.stdout + done.stderr[-3000:]
    assert done.stderr.startswith("torch is not installed: the demo runs the weight-free baselines (random, center, "
                                  "dog); `make demo-models`"), done.stderr[:500]
    info = json.loads((tmp_path / "out" / "demo.json").read_text())
    assert info["models"] == ["random", "center", "dog"] and (tmp_path / "out/report/index.html").stat().st_size > 0
    assert {r["model"] for r in info["leaderboard"]} == {"random", "center", "dog"}
    for m in info["models"]:
        attrs = json.loads((tmp_path / f"out/submissions/{m}.zarr/zarr.json").read_text())["attributes"]["xbench"]
        assert attrs["complete"] and attrs["model"] == m


def test_the_default_demo_models_follow_torch(monkeypatch):
    import importlib.util

    from xbench import demo

    real = importlib.util.find_spec
    assert demo.torch_free_models() == ("random", "center", "dog")
    assert demo.default_models() == demo.DEMO_MODELS  # this venv has torch
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert demo.default_models() == ("random", "center", "dog")


def test_a_missing_demo_dependency_names_the_demo_extra(monkeypatch, tmp_path):
    import importlib.util

    from xbench import demo
    from xbench.schemas._cli import UserError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "yaml" else real(name, *a))
    with pytest.raises(UserError, match=r"needs the demo extra \(no torch\): make demo, or pip install '\.\[demo\]'"):
        demo.run_demo(tmp_path / "o", models=("dog",))
    assert not (tmp_path / "o").exists()
