"""The hostile corpus (``hostile.py``) through xbench-validate and xbench-score as organisers run them.

Each crafted store goes to both commands, each in its own process with ``--max-memory 1GiB --timeout 60``;
every one must exit 2 with a one-line problem naming the cause (not the watchdog's line: the checks refuse
bombs before decoding them), no traceback, nothing written, well within the budget.

The commands run in children forked from one driver process that has imported the scorer once, so forty
runs cost seconds; the driver reads each child's peak resident memory from ``wait4`` and kills a child that
outlives the time cap.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

from forked import run_forked
from hostile import ATTACKS, store_members, write_zip
from schema_stores import make_gt, write_submission

BUDGET = ["--max-memory", "1GiB", "--timeout", "60"]
MAX_RSS_MIB = 1024
MAX_SECONDS = 20  # per run; far below the 60 s budget, so a refusal never relies on the watchdog

def run_all(jobs: list[dict], tmp_path) -> list[dict]:
    """Each job through xbench-validate or xbench-score (its argv's first word), forked from one driver."""
    for job in jobs:
        cmd, job["argv"] = job["argv"][0], job["argv"][1:]
        job["entry"] = {"score": "xbench.score.cli:score_command", "validate": "xbench.schemas.cli:validate_cmd"}[cmd]
        job["prog"] = f"xbench-{cmd}"
    return run_forked(jobs, tmp_path, entry="", prog="", cap=MAX_SECONDS * 3, timeout=600,
                      preload=("xbench.score.cli", "xbench.score.scoring", "xbench.score.outputs.folder", "xbench.schemas.cli"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Every attack through both commands, run once for the module's tests."""
    root = tmp_path_factory.mktemp("hostile")
    gt = make_gt(root)
    jobs, names = [], []
    for name, (make, _) in ATTACKS.items():
        d = root / name
        d.mkdir()
        store = make(d, gt)
        jobs.append({"argv": ["validate", str(store), "--gt", str(gt), *BUDGET]})
        jobs.append({"argv": ["score", str(store), "--gt", str(gt), "--out", str(d / "out"), "--bootstrap", "0", *BUDGET]})
        names += [(name, "validate", d), (name, "score", d)]
    return root, dict(zip(names, run_all(jobs, root)))


@pytest.mark.parametrize("command", ["validate", "score"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_refused_within_budget(corpus, attack, command):
    root, results = corpus
    res = next(r for (name, cmd, _), r in results.items() if name == attack and cmd == command)
    out_dir = next(d for (name, cmd, d) in results if name == attack) / "out"
    expected = ATTACKS[attack][1]
    lines = res["stderr"].strip().splitlines()
    assert res["rc"] == 2, (res["rc"], res["stderr"][-2000:])
    assert not res["killed"] and res["seconds"] < MAX_SECONDS, res["seconds"]
    assert res["maxrss_mib"] < MAX_RSS_MIB, res["maxrss_mib"]
    assert any(expected in line for line in lines), lines
    assert "Traceback" not in res["stderr"] and "budget of" not in res["stderr"]  # refused by a check, not the watchdog
    assert not out_dir.exists()


def test_valid_controls_pass_in_every_layout(tmp_path):
    """The bounded decoders and the checks accept what a team may legitimately write: a directory and a zip,
    gzip, blosc and sharded arrays, fixed-width ids; and xbench-score scores them."""
    gt = make_gt(tmp_path)
    plain = write_submission(tmp_path / "plain.zarr")
    zipped = write_zip(tmp_path / "plain.zarr.zip", store_members(plain))
    recoded = {}
    for label, extra in (("gzip", {"compressors": zarr.codecs.GzipCodec(level=5)}),
                         ("blosc", {"compressors": zarr.codecs.BloscCodec(cname="lz4")}),
                         ("sharded", {"shards": (8, 3, 7, 7)})):
        path = tmp_path / f"{label}.zarr"
        recoded[label] = recode(plain, path, extra)
    jobs = []
    for path in (plain, zipped, *recoded.values()):
        jobs.append({"argv": ["validate", str(path), "--gt", str(gt), *BUDGET]})
        jobs.append({"argv": ["score", str(path), "--gt", str(gt), "--out", str(tmp_path / f"out-{path.name}"),
                              "--bootstrap", "0", "--quiet", *BUDGET], "cap": 300})
    results = run_all(jobs, tmp_path)
    for job, res in zip(jobs, results):
        assert res["rc"] == 0, (job["argv"][:2], res["stderr"][-2000:])
    metrics = [json.loads((tmp_path / f"out-{p.name}" / "metrics.json").read_text())["overall"]
               for p in (plain, zipped, *recoded.values())]
    assert all(m == metrics[0] for m in metrics)


def recode(src, dst, extra: dict):
    """The submission at ``src`` written again with other codecs or sharding (a team using plain zarr)."""
    s = zarr.open_group(str(src), mode="r")
    d = zarr.open_group(str(dst), mode="w", zarr_format=3)
    d.attrs.update(dict(s.attrs))
    for name, g in s.groups():
        dg = d.create_group(name, attributes=dict(g.attrs))
        for arr_name, arr in g.arrays():
            data = np.asarray(arr[...])
            kw = dict(extra) if arr_name == "saliency" else {}
            if arr_name == "case_id":
                data = np.array(data.tolist(), dtype=str)  # fixed-width ids
            dg.create_array(arr_name, data=data, chunks=arr.chunks if "shards" not in kw else (4, 3, 7, 7), **kw)
    return dst


def test_images_store_is_not_a_submission(tmp_path):
    """xbench-validate names the store kind it got and refuses --gt for anything but a submission."""
    from xbench.schemas import ImagesWriter

    gt = make_gt(tmp_path)
    w = ImagesWriter(tmp_path / "images.zarr", "phantom", case_ids=["a", "b"], classes=["Nodule"], image_size=8)
    w.write_block(0, np.zeros((2, 8, 8), np.uint8), np.full((2, 2), 8))
    w.finish()
    jobs = [{"argv": ["validate", str(tmp_path / "images.zarr"), "--gt", str(gt)]},
            {"argv": ["validate", str(tmp_path / "images.zarr")]},
            {"argv": ["validate", str(tmp_path / "images.zarr"), "--kind", "submission"]}]
    with_gt, alone, as_submission = run_all(jobs, tmp_path)
    assert with_gt["rc"] == 2 and "is an images store; --gt checks a submission" in with_gt["stderr"]
    assert alone["rc"] == 0 and "valid images store" in alone["stdout"]
    assert as_submission["rc"] == 2 and "this is an images store (xbench.kind='images')" in as_submission["stderr"]
    assert "needs a submission.zarr" in as_submission["stderr"]


def test_watchdog_stops_a_run_past_its_budget(tmp_path):
    """The last resort: a run past --timeout or --max-memory exits 2 with one line naming the flag."""
    gt = make_gt(tmp_path)
    sub = write_submission(tmp_path / "s.zarr")
    jobs = [{"argv": ["score", str(sub), "--gt", str(gt), "--out", str(tmp_path / "o1"), "--timeout", "0.01"]},
            {"argv": ["validate", str(sub), "--max-memory", "1MiB"]}]
    slow, fat = run_all(jobs, tmp_path)
    assert slow["rc"] == 2 and slow["stderr"].strip().splitlines()[-1].startswith(
        "xbench-score: the time budget of 0.01 s ran out (--timeout)")
    assert fat["rc"] == 2 and "memory budget of 1 MiB was exceeded" in fat["stderr"]
    assert not (tmp_path / "o1").exists()
