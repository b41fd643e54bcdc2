"""`xbench demo` end to end on a reduced size, and the phantom sanity check (dog beats random)."""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def test_demo_quick_writes_the_full_report(tmp_path):
    from click.testing import CliRunner

    from xbench.demo import demo

    out = tmp_path / "demo"
    res = CliRunner().invoke(demo, ["--out", str(out), "--quick", "--quiet"])
    assert res.exit_code == 0, res.output
    assert res.output.strip().startswith("report: ") and res.output.strip().endswith("index.html")
    report = out / "report"
    manifest = json.loads((report / "report.json").read_text())
    # the untrained CLIP says so in every table and board, not only on the page (issue 46 item 3)
    assert [m["name"] for m in manifest["models"]] == ["random", "center", "dog", "clip-tiny (untrained)"]
    assert "clip-tiny (untrained)" in (report / "leaderboard.md").read_text()
    assert "clip-tiny (untrained)" in (report / "leaderboard.txt").read_text()
    assert len(manifest["files"]["figures"]) == 8
    assert len(manifest["files"]["overlays"]) == 4  # one figure per model, PNG only (raster panels)
    for group in manifest["files"].values():
        for rel in group:
            assert (report / rel).stat().st_size > 0, rel
    assert manifest["skipped"] == []
    info = json.loads((out / "demo.json").read_text())
    assert info["n_cases"] == 24 and set(info["timings_s"]) >= {"prepare", "report", "total"}
    # without --quiet the ranked leaderboard comes first (a second run: everything is done, nothing reruns)
    res = CliRunner().invoke(demo, ["--out", str(out), "--quick"])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    at = [i for i, ln in enumerate(lines) if ln.split() and ln.split()[0].isdigit()]
    assert sum("clip-tiny (untrained)" in lines[i] for i in at) == 1
    # a name too long for its column ("clip-tiny (untrained)") has a line of its own, its values on the next
    values = {i: i + 1 if len(lines[i].replace(" (untrained)", "").split()) == 2 else i for i in at}
    board = [lines[i].replace(" (untrained)", "").split()[:2] + (lines[values[i]].split() if values[i] != i else
             lines[i].replace(" (untrained)", "").split()[2:]) for i in at]
    assert sorted(r[1] for r in board) == ["center", "clip-tiny", "dog", "random"]
    assert [r[0] for r in board] == ["1", "2", "3", "4"] and lines[-1].startswith("report: ")
    # point estimates, and their 95 % intervals on the line under them (the demo scores with resamples)
    assert all(len(re.findall(r"^\d+\.\d\d$", " ".join(r[2:]).replace(" ", "\n"), re.M)) == 5 for r in board), board
    assert all(len(re.findall(r"\[\d+\.\d\d, \d+\.\d\d\]", lines[values[i] + 1])) == 5 for i in at), lines
    board_lines = lines[min(at) - 2:max(at) + 3]  # the leaderboard: its title, header, rows and interval lines
    assert all(len(ln) <= 100 for ln in board_lines), [ln for ln in board_lines if len(ln) > 100]


def test_dog_beats_random_on_phantom(tmp_path):
    from xbench.demo import run_demo
    from xbench.score.report import load_results
    from xbench.score.report.paired import compare_results as paired_bootstrap

    run_demo(tmp_path, n_cases=100, models=("random", "dog"), bootstrap=0, progress=False)
    rnd, dog = load_results([tmp_path / "scores" / "random", tmp_path / "scores" / "dog"])
    assert dog.metrics["overall"]["pointing_game"] > rnd.metrics["overall"]["pointing_game"]
    rows = {(r.scope, r.metric): r for r in paired_bootstrap(dog, rnd, bootstrap=500, per_class=False)}
    assert rows[("overall", "pointing_game")].ci_lo > 0  # the gap is real, not noise


def test_demo_without_the_extract_extra_writes_nothing(tmp_path, monkeypatch):
    """On the scorer-only install a demo model on torch (clip-tiny) makes the demo say which extra to install and
    which models need none, exit 2, and leave no folder behind (the torch-free default: tests/test_demo_torch_free.py)."""
    import importlib.util

    from click.testing import CliRunner

    from xbench.demo import demo

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    out = tmp_path / "demo-out"
    result = CliRunner().invoke(demo, ["--out", str(out), "--quick", "--models", "dog,clip-tiny"], standalone_mode=False)
    assert result.exception is not None and "extract extra" in str(result.exception)
    assert "torch not installed; clip-tiny need(s) torch, the others do not: --models random,center,dog" \
        in str(result.exception)
    assert not out.exists()
