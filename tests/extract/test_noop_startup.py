"""A no-op extraction (the store at --out is finished) is decided before torch is imported (issue 35 item 11).

The run is a real ``python -m xbench.extract.cli`` subprocess; ``no_torch=True`` puts a ``torch`` package first
on the path that exits 99 on import (tests/extract/cli_run.py), so a run that imports torch fails visibly. Any
change to the request that the runner would not resume as "already complete" must still reach the runner
(here: it imports the fake torch and exits 99, proving the fast path declined)."""
from __future__ import annotations

import json

import pytest

from cli_run import run_extract


@pytest.fixture(scope="module")
def finished(phantom_images, tmp_path_factory):
    folder = tmp_path_factory.mktemp("noop")
    out = folder / "dog.zarr"
    args = ["--model", "dog", "--images", phantom_images / "images.zarr", "--out", out, "--workers", "0", "--limit", "12"]
    first = run_extract(args, folder, cap_s=300)
    assert first.rc == 0, first.stderr[-2000:]
    assert "wrote" in first.stdout
    return folder, args


def test_a_finished_store_is_nothing_to_do_without_importing_torch(finished, tmp_path):
    folder, args = finished
    res = run_extract(args, tmp_path, no_torch=True, cap_s=60)
    assert res.rc == 0, res.stderr[-2000:]
    assert "TORCH WAS IMPORTED" not in res.stderr
    assert "already complete, nothing to do (12 cases)" in res.stdout
    # the check is the one above (no torch, no model built); the time saved (1.8 s against 6.5 s for dog and
    # 20 s for clip-tiny, measured on a loaded 2-core machine) is docs/how-to/extract.md's figure, not a timed test


def test_the_json_summary_of_a_no_op(finished, tmp_path):
    folder, args = finished
    res = run_extract([*args, "--json"], tmp_path, no_torch=True, cap_s=60)
    assert res.rc == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert summary["ok"] and summary["blocks_written"] == 0 and summary["cases"] == 12
    assert all(v["blocks_todo"] == 0 for v in summary["datasets"].values())


@pytest.mark.parametrize("change", [["--limit", "10"], ["--map-dtype", "float32"], ["--precision", "bf16"],
                                    ["--model-option", "sigma_px=[2, 8]"], ["--cases-per-block", "4"], ["--overwrite"]])
def test_any_other_request_reaches_the_runner(finished, tmp_path, change):
    """A request that differs from the finished store is not answered by the fast path: the runner runs. The
    dog baseline runs without torch (its catalog entry says torch=False), so the fake torch stays unimported; the
    runner's summary names its device (the fast path's says None), or the runner's writer refuses the changed
    specification (the fast path never refuses). A copy of the store: the finished one stays for the other tests."""
    import shutil

    folder, args = finished
    args = [a for a in args]
    if change[0] == "--limit":
        args = args[:-2]
    out = tmp_path / "again.zarr"
    shutil.copytree(args[args.index("--out") + 1], out)
    args[args.index("--out") + 1] = out
    res = run_extract([*args, *change, "--json"], tmp_path, no_torch=True, cap_s=120)
    assert "TORCH WAS IMPORTED" not in res.stderr, res.stderr[-1000:]
    if res.rc == 0:
        assert json.loads(res.stdout)["device"] == "cpu", res.stdout
    else:
        assert res.rc == 2 and "different specification" in res.stdout + res.stderr, (res.rc, res.stdout, res.stderr)


def test_overwrite_refuses_a_folder_of_the_users_before_torch(phantom_images, tmp_path):
    """Issue 44, class 5: ``--overwrite`` replaces a submission store XBench wrote, never a folder of the user's:
    exit 2, one line, before torch is imported, and the folder is as it was."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    args = ["--model", "dog", "--images", phantom_images / "images.zarr", "--out", mine, "--workers", "0",
            "--overwrite"]
    res = run_extract(args, tmp_path, no_torch=True, cap_s=60)
    assert res.rc == 2, (res.stdout, res.stderr[-1000:])
    assert "TORCH WAS IMPORTED" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "is not a submission store XBench wrote" in lines[0] and "nothing was deleted" in lines[0]
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"] and (mine / "notes.txt").read_text() == "mine"
