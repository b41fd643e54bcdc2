"""Filling Numba's cache ahead of the first run (score/warm.py)."""

from __future__ import annotations

import subprocess

import pytest
from click.testing import CliRunner

from xbench.score import warm


def test_a_child_fills_the_cache_with_the_ranking_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # the children's cache; this process keeps its own
    seconds = warm.warm_cache(("rank",), processes=1)
    assert seconds > 0
    index = [p.name for p in tmp_path.rglob("*.nbi")]
    data = [p.name for p in tmp_path.rglob("*.nbc")]
    assert any("_ranked_replicates" in n for n in index) and any("_ranked_replicates" in n for n in data)
    assert not any("_chunk_counts" in n for n in index)  # only the job asked for


def test_unknown_jobs_are_refused():
    with pytest.raises(ValueError, match="unknown job 'nope'"):
        warm.compile_job("nope")
    result = CliRunner().invoke(warm.warm, ["nope"])
    assert result.exit_code == 2 and "'nope' is not one of" in result.output


def test_a_failing_child_is_reported(monkeypatch):
    monkeypatch.setattr(warm, "_child", lambda job: ["python3", "-c", "import sys; sys.exit('boom')"])
    with pytest.raises(RuntimeError, match="compiling the rank kernel failed: boom"):
        warm.warm_cache(("rank",))


def test_background_warm_starts_only_when_the_kernel_is_not_cached(monkeypatch):
    started = []

    class FakePopen:
        def __init__(self, cmd, **kw):
            started.append(cmd)

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    monkeypatch.setattr(warm, "_is_cached", lambda dispatcher: True)
    assert warm.start_background_warm() is None and started == []
    monkeypatch.setattr(warm, "_is_cached", lambda dispatcher: False)
    assert isinstance(warm.start_background_warm(), FakePopen)
    assert "compile_job('rank')" in started[0][-1]


def test_cache_probe_says_cached_when_numba_internals_differ():
    # the probe reads a private Numba API; anything unexpected must mean "start nothing"
    assert warm._is_cached(object()) is True

