"""prepare_dataset and xbench-prepare: round trip, determinism, groups, resuming, bad input."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fixtures import components8

from xbench.extract.datasets.base import Box, CaseRecord, DatasetReader, Mask, ReaderError, ReadProblem
from xbench.extract.datasets.phantom import PhantomReader
from xbench.extract.datasets.prepare import (
    WORK_DIR,
    PrepareError,
    TooManySkippedError,
    prepare_dataset,
    resize_image,
)
from xbench.extract.prepare_cli import main as cli
from xbench.schemas import read_ground_truth, read_images, store_sha256, validate_ground_truth, validate_images

SMALL = dict(grid=(16, 16), image_size=32, cases_per_block=8, progress=False)


def _phantom(n=20, seed=0, **kw):
    return PhantomReader(n_cases=n, seed=seed, size=64, **kw)


def _group_arrays(path: Path, kind: str, dataset: str) -> dict:
    if kind == "images":
        d = read_images(path).datasets[dataset]
        return {"case_id": d.case_id, "image": np.asarray(d.image[...]), "orig_size": d.orig_size, "attrs": d.attrs}
    d = read_ground_truth(path).datasets[dataset]
    return {"case_id": d.case_id, "labels": d.labels, "region_index": d.region_index,
            "region_mask": np.asarray(d.region_mask[...]), "orig_size": d.orig_size, "attrs": d.attrs}


def _assert_same(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        if k == "attrs":
            assert {x: y for x, y in a[k].items() if not x.startswith("_")} == {x: y for x, y in b[k].items() if not x.startswith("_")}
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ----------------------------------------------------------------------------------------------
# round trip


def test_phantom_round_trip_matches_an_independent_computation(tmp_path):
    reader = _phantom(20)
    summary = prepare_dataset(reader, tmp_path, workers=1, **SMALL)
    assert validate_images(tmp_path / "images.zarr") == []
    assert validate_ground_truth(tmp_path / "gt.zarr") == []
    assert (summary.n_written, summary.n_skipped) == (20, 0)
    assert not (tmp_path / WORK_DIR).exists()

    records = reader.records()
    img = read_images(tmp_path / "images.zarr").datasets["phantom"]
    gt = read_ground_truth(tmp_path / "gt.zarr").datasets["phantom"]
    assert list(img.case_id) == list(gt.case_id) == [r.case_id for r in records]
    assert img.classes == gt.classes == reader.classes and gt.grid == (16, 16)
    np.testing.assert_array_equal(gt.orig_size, np.full((20, 2), 64))
    masks = np.asarray(gt.region_mask[...])
    pairs = {(int(r), int(c)): masks[k] for k, (r, c) in enumerate(gt.region_index)}
    n_fallback = 0
    for i, rec in enumerate(records):
        np.testing.assert_array_equal(img.image[i], resize_image(reader.load_image(rec), 32))
        for c, cls in enumerate(reader.classes):
            assert gt.labels[i, c] == rec.labels[cls]
            if rec.labels[cls] == 1:
                # oracle: each 8-connected blob of the native mask sampled at the mapped cell centres
                # (64 -> 16: pixel 4j + 2), or its centroid's cell when no centre falls on it
                native = rec.regions[cls][0].load()
                expected = np.zeros((16, 16), bool)
                for blob in components8(native):
                    own = np.zeros_like(native)
                    own[tuple(np.array(blob).T)] = True
                    if own[2::4, 2::4].any():
                        expected |= own[2::4, 2::4]
                    else:  # a nodule smaller than a cell: its centroid's cell
                        rows, cols = np.array(blob).T
                        expected[int((rows.mean() + 0.5) / 4), int((cols.mean() + 0.5) / 4)] = True
                        n_fallback += 1
                np.testing.assert_array_equal(pairs[(i, c)], expected)
            else:
                assert (i, c) not in pairs
    assert summary.n_regions == len(pairs)
    assert summary.n_fallback_regions == n_fallback


def test_same_seed_gives_byte_identical_stores_for_any_worker_count(tmp_path):
    prepare_dataset(_phantom(30, seed=5), tmp_path / "a", workers=1, **SMALL)
    prepare_dataset(_phantom(30, seed=5), tmp_path / "b", workers=2, **SMALL)
    for store in ("images.zarr", "gt.zarr"):
        assert store_sha256(tmp_path / "a" / store) == store_sha256(tmp_path / "b" / store)
    prepare_dataset(_phantom(30, seed=6), tmp_path / "c", workers=2, **SMALL)
    assert store_sha256(tmp_path / "a" / "gt.zarr") != store_sha256(tmp_path / "c" / "gt.zarr")


# ----------------------------------------------------------------------------------------------
# a tiny reader with hand-made problems


class FakeReader(DatasetReader):
    """Native 40x40 images; classes A (grounding) and B (recognition only)."""

    key = "chestx_det10"
    classes = ("A", "B")
    grounding_classes = ("A",)
    loads = 0

    def __init__(self, root=".", split=None, *, cases=None, problems=(), crash_at=None, fatal=None, **options):
        super().__init__(root, split, **options)
        self._cases = cases if cases is not None else [good_case(i) for i in range(6)]
        self._extra = list(problems)
        self.crash_at = crash_at
        self.fatal = fatal

    def records(self):
        if self.fatal:
            raise ReaderError(self.fatal)
        self.problems.extend(self._extra)
        return list(self._cases)

    def load_image(self, record):
        type(self).loads += 1
        if record.case_id == self.crash_at:
            raise _Crash(record.case_id)
        if record.image_ref == "missing":
            raise FileNotFoundError(f"{record.case_id}.png")
        seed = int(record.case_id.split("-")[1]) if "-" in record.case_id else 0
        return np.random.default_rng(seed).integers(0, 256, (40, 40), dtype=np.uint8)


class _Crash(BaseException):
    """Not an Exception: it escapes the per-case handling, like a kill."""


def good_case(i, **kw):
    defaults = dict(case_id=f"case-{i}", image_ref=None, labels={"A": 1, "B": 0},
                    regions={"A": [Box(4, 4, 20, 20)]}, orig_size=(40, 40), source=f"fake.csv row {i + 2}")
    defaults.update(kw)
    return CaseRecord(**defaults)


def _bad_rle():
    raise ValueError("RLE run lengths exceed the image (row 7)")


def bad_input_reader(**kw):
    cases = [
        good_case(0),
        good_case(1, regions={"A": [Box(30, 30, 55, 55)]}),  # partly outside: clipped, kept
        good_case(2, regions={"A": [Box(50, 50, 60, 60)]}),  # wholly outside: skipped
        good_case(3, labels={"A": 1, "Zebra": 1}),  # unknown label
        good_case(4, labels={"A": 0, "B": 0}),  # region on a negative
        good_case(5, regions={"A": [Mask(_bad_rle)]}),  # malformed RLE, found by a worker
        good_case(6, image_ref="missing"),  # unreadable image, found by a worker
        good_case(7), good_case(7),  # duplicate case id
        good_case(8, labels={"A": 0, "B": 1}, regions={}),
    ]
    extra = [ReadProblem("fake.csv row 40", "annotation names image 'ghost.png', which is not in images/", "ghost")]
    return FakeReader(cases=cases, problems=extra, **kw)


def test_bad_input_is_reported_skipped_and_recorded(tmp_path):
    summary = prepare_dataset(bad_input_reader(), tmp_path, workers=1, max_skip_fraction=1.0, **SMALL)
    reasons = {s["case_id"]: s["reason"] for s in summary.skipped}
    assert set(reasons) == {"ghost", "case-2", "case-3", "case-4", "case-5", "case-6", "case-7"}
    assert "wholly outside" in reasons["case-2"]
    assert "unknown label 'Zebra'" in reasons["case-3"]
    assert "labelled 0" in reasons["case-4"]
    assert "RLE run lengths" in reasons["case-5"]
    assert "cannot read image" in reasons["case-6"] and "case-6.png" in reasons["case-6"]
    assert reasons["case-7"] == "duplicate case id"
    by_case = {s["case_id"]: s["source"] for s in summary.skipped}
    assert by_case["ghost"] == "fake.csv row 40" and by_case["case-2"] == "fake.csv row 4"
    assert summary.n_listed == 10 and summary.n_skipped == 7 and summary.n_clipped_boxes == 1

    img = read_images(tmp_path / "images.zarr").datasets["chestx_det10"]
    gt = read_ground_truth(tmp_path / "gt.zarr").datasets["chestx_det10"]
    assert list(gt.case_id) == list(img.case_id) == ["case-0", "case-1", "case-8"]
    assert validate_images(tmp_path / "images.zarr") == [] and validate_ground_truth(tmp_path / "gt.zarr") == []
    assert gt.attrs["skipped"] == img.attrs["skipped"] == summary.skipped
    np.testing.assert_array_equal(gt.labels, [[1, 0], [1, 0], [0, 1]])
    # the rows after the dropped cases moved up: images belong to their own case ids
    reader = FakeReader()
    np.testing.assert_array_equal(img.image[2], resize_image(reader.load_image(good_case(8)), 32))
    # case-1's box clipped to [30, 40) x [30, 40): centres (2.5j + 1.25) in it are j = 12..15
    masks = np.asarray(gt.region_mask[...])
    expected = np.zeros((16, 16), bool)
    expected[12:, 12:] = True
    np.testing.assert_array_equal(masks[1], expected)
    assert not (tmp_path / WORK_DIR).exists()


def test_too_many_skipped_fails_before_the_ground_truth_and_resumes(tmp_path):
    with pytest.raises(TooManySkippedError) as info:
        prepare_dataset(bad_input_reader(), tmp_path, workers=1, max_skip_fraction=0.5, **SMALL)
    assert "7 of 10" in str(info.value)
    # before decoding: 5 annotation problems of 10 is not over 0.5; the worker failures tip it
    assert not (tmp_path / "gt.zarr").exists()
    FakeReader.loads = 0
    summary = prepare_dataset(bad_input_reader(), tmp_path, workers=1, max_skip_fraction=1.0, **SMALL)
    assert FakeReader.loads == 0  # nothing decoded again
    assert summary.n_written == 3


def test_skip_fraction_checked_before_decoding(tmp_path):
    FakeReader.loads = 0
    with pytest.raises(TooManySkippedError):
        prepare_dataset(bad_input_reader(), tmp_path, workers=1, max_skip_fraction=0.1, **SMALL)
    assert FakeReader.loads == 0


def test_fatal_problems_stop_the_run(tmp_path):
    with pytest.raises(PrepareError, match="annotation file missing"):
        prepare_dataset(FakeReader(fatal="annotation file missing: labels.csv"), tmp_path, **SMALL)
    fatal = ReadProblem("labels.csv", "header is not 'Image Index,Finding Label,...'", fatal=True)
    with pytest.raises(PrepareError) as info:
        prepare_dataset(FakeReader(problems=[fatal]), tmp_path, **SMALL)
    assert [str(p) for p in info.value.problems] == ["labels.csv: header is not 'Image Index,Finding Label,...'"]
    assert not (tmp_path / "gt.zarr").exists()


def test_lesion_smaller_than_a_cell_is_kept_by_the_centroid_rule(tmp_path):
    tiny = np.zeros((40, 40), bool)
    tiny[20, 20] = True  # centres sit at 1.25 + 2.5j (floors 18, 21, ...): pixel 20 is never sampled
    cases = [good_case(0, regions={"A": [Mask(lambda: tiny)]})]
    summary = prepare_dataset(FakeReader(cases=cases), tmp_path, workers=1, **SMALL)
    assert summary.n_fallback_regions == 1
    mask = np.asarray(read_ground_truth(tmp_path / "gt.zarr").datasets["chestx_det10"].region_mask[0])
    assert np.argwhere(mask).tolist() == [[8, 8]]  # centroid 20.5 * 16 / 40 = 8.2


def test_ground_truth_records_the_per_lesion_rule(tmp_path):
    # a small box beside a big sibling of the same finding keeps its own (centroid) cell, and the
    # group says which rule made its masks (gt.zarr minor version 1)
    cases = [good_case(0, regions={"A": [Box(0, 0, 20, 20), Box(30.2, 30.2, 30.8, 30.8)]})]
    summary = prepare_dataset(FakeReader(cases=cases), tmp_path, workers=1, **SMALL)
    assert summary.n_fallback_regions == 1
    gt = read_ground_truth(tmp_path / "gt.zarr").datasets["chestx_det10"]
    mask = np.asarray(gt.region_mask[0])
    assert mask[12, 12] and mask[:8, :8].all()  # 30.5 * 16 / 40 = 12.2; the big box's 8 x 8 cells
    assert mask.sum() == 65
    import zarr

    assert zarr.open_group(str(tmp_path / "gt.zarr"), mode="r")["chestx_det10"].attrs["rasterisation"] == "per-lesion"


# ----------------------------------------------------------------------------------------------
# groups and resuming


def test_preparing_again_replaces_only_its_own_group(tmp_path):
    prepare_dataset(_phantom(12), tmp_path, workers=1, **SMALL)
    prepare_dataset(FakeReader(), tmp_path, workers=1, **SMALL)
    fake_before = {k: _group_arrays(tmp_path / f"{k}.zarr", k if k == "images" else "gt", "chestx_det10") for k in ("images", "gt")}
    prepare_dataset(_phantom(9, seed=3), tmp_path, workers=1, **SMALL)
    for k in ("images", "gt"):
        _assert_same(fake_before[k], _group_arrays(tmp_path / f"{k}.zarr", k if k == "images" else "gt", "chestx_det10"))
    assert len(read_ground_truth(tmp_path / "gt.zarr").datasets["phantom"].case_id) == 9
    assert sorted(read_images(tmp_path / "images.zarr").datasets) == ["chestx_det10", "phantom"]


def test_resume_after_a_crash_equals_an_uninterrupted_run(tmp_path):
    cases = [good_case(i) for i in range(30)]
    prepare_dataset(FakeReader(cases=cases), tmp_path / "ref", workers=1, **SMALL)
    with pytest.raises(_Crash):
        prepare_dataset(FakeReader(cases=cases, crash_at="case-20"), tmp_path / "run", workers=1, **SMALL)
    done = sorted(p.name for p in (tmp_path / "run" / WORK_DIR / "chestx_det10").glob("block-*.npz"))
    assert done == ["block-00000.npz", "block-00001.npz"]  # blocks of 8: case-20 is in block 2
    FakeReader.loads = 0
    summary = prepare_dataset(FakeReader(cases=cases), tmp_path / "run", workers=1, **SMALL)
    assert summary.n_resumed_blocks == 2 and FakeReader.loads == 30 - 16
    for store in ("images.zarr", "gt.zarr"):
        assert store_sha256(tmp_path / "ref" / store) == store_sha256(tmp_path / "run" / store)


def _phantom_24():
    return PhantomReader(n_cases=24, seed=2, size=64)  # three blocks of 8


def test_resume_after_a_kill_inside_a_chunk_write(tmp_path, monkeypatch):
    # killed between zarr's write of block 1's image chunk to its temporary file and the rename: the
    # temporary file stays in the store (zarr removes it only when the write raises an Exception)
    replace = os.replace

    def killed_at_the_rename(src, dst):
        if Path(dst).parts[-6:] == ("phantom", "image", "c", "1", "0", "0"):
            raise _Crash
        return replace(src, dst)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", killed_at_the_rename)
        with pytest.raises(_Crash):
            prepare_dataset(_phantom_24(), tmp_path / "run", workers=1, **SMALL)
    assert len(list((tmp_path / "run" / "images.zarr").rglob("*.partial"))) == 1
    summary = prepare_dataset(_phantom_24(), tmp_path / "run", workers=1, **SMALL)
    assert summary.n_resumed_blocks == 1  # block 1 has its side file but no ledger entry: written again
    prepare_dataset(_phantom_24(), tmp_path / "ref", workers=1, **SMALL)
    for store in ("images.zarr", "gt.zarr"):
        assert store_sha256(tmp_path / "ref" / store) == store_sha256(tmp_path / "run" / store)


def test_resume_after_a_kill_while_removing_the_side_files(tmp_path, monkeypatch):
    import shutil

    rmtree = shutil.rmtree

    def killed_half_way(path, *args, **kwargs):
        path = Path(path)
        if path.parent.name == WORK_DIR:  # the side folder goes in some order; block 0 first here
            (path / "block-00000.npz").unlink()
            raise _Crash
        return rmtree(path, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(shutil, "rmtree", killed_half_way)
        with pytest.raises(_Crash):
            prepare_dataset(_phantom_24(), tmp_path / "run", workers=1, **SMALL)
    prepare_dataset(_phantom_24(), tmp_path / "run", workers=1, **SMALL)
    prepare_dataset(_phantom_24(), tmp_path / "ref", workers=1, **SMALL)
    for store in ("images.zarr", "gt.zarr"):
        assert store_sha256(tmp_path / "ref" / store) == store_sha256(tmp_path / "run" / store)
    assert not (tmp_path / "run" / WORK_DIR).exists()


def test_changed_options_start_again(tmp_path):
    cases = [good_case(i) for i in range(20)]
    with pytest.raises(_Crash):
        prepare_dataset(FakeReader(cases=cases, crash_at="case-12"), tmp_path, workers=1, **SMALL)
    summary = prepare_dataset(FakeReader(cases=cases), tmp_path, workers=1, **{**SMALL, "grid": (8, 8)})
    assert summary.n_resumed_blocks == 0
    assert read_ground_truth(tmp_path / "gt.zarr").datasets["chestx_det10"].grid == (8, 8)


def test_changed_reader_options_do_not_resume_stale_images(tmp_path):
    cases = [good_case(i) for i in range(20)]
    with pytest.raises(_Crash):
        prepare_dataset(FakeReader(cases=cases, crash_at="case-12", voi="header"), tmp_path, workers=1, **SMALL)
    summary = prepare_dataset(FakeReader(cases=cases, voi="minmax"), tmp_path, workers=1, **SMALL)
    assert summary.n_resumed_blocks == 0
    for attrs in (read_images(tmp_path / "images.zarr").datasets["chestx_det10"].attrs,
                  read_ground_truth(tmp_path / "gt.zarr").datasets["chestx_det10"].attrs):
        assert attrs["reader"] == {"split": "test", "voi": "minmax"}


_SLOW_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset

    class Slow(PhantomReader):
        def load_image(self, record):
            time.sleep(0.02)
            return super().load_image(record)

    prepare_dataset(Slow(n_cases=96, seed=2, size=64), sys.argv[1], workers=2, grid=(16, 16), image_size=32,
                    cases_per_block=8, progress=False)
    """
)


@pytest.mark.slow
def test_resume_after_sigkill(tmp_path):
    out = tmp_path / "run"
    # its own process group, so that the kill takes the forked workers too (as a job kill would)
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_SCRIPT, str(out)], start_new_session=True)
    work = out / WORK_DIR / "phantom"
    deadline = time.monotonic() + 60
    while len(list(work.glob("block-*.npz"))) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    n_done = len(list(work.glob("block-*.npz")))
    assert 3 <= n_done < 12, n_done
    summary = prepare_dataset(PhantomReader(n_cases=96, seed=2, size=64), out, workers=2, **SMALL)
    # the kill may land between a block's side file and its image block: that one is done again
    assert n_done - 1 <= summary.n_resumed_blocks <= n_done
    prepare_dataset(PhantomReader(n_cases=96, seed=2, size=64), tmp_path / "ref", workers=1, **SMALL)
    for store in ("images.zarr", "gt.zarr"):
        assert store_sha256(tmp_path / "ref" / store) == store_sha256(out / store)


# ----------------------------------------------------------------------------------------------
# the command line


def test_cli_phantom_json(tmp_path):
    res = CliRunner().invoke(cli, ["phantom", "--out", str(tmp_path), "--n-cases", "12", "--grid", "16",
                                   "--image-size", "32", "--workers", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["ok"] and out["summary"]["n_written"] == 12
    assert read_ground_truth(tmp_path / "gt.zarr").datasets["phantom"].grid == (16, 16)


def test_cli_list_and_errors(tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli, ["--list"])
    assert res.exit_code == 0 and "phantom" in res.output.split() and "vindr_cxr" in res.output.split()
    cases = [
        (["phantm", "--out", str(tmp_path)], "Did you mean: phantom?"),
        (["siim_acr", "--out", str(tmp_path)], "--root is required"),
        (["siim_acr", "--root", str(tmp_path / "nope"), "--out", str(tmp_path)], "no such folder"),
        (["phantom", "--out", str(tmp_path), "--split", "train"], "unknown split 'train'"),
        (["phantom", "--out", str(tmp_path), "--option", "size=big"], "must be integers"),
        (["phantom", "--out", str(tmp_path), "--option", "nokey"], "not KEY=VALUE"),
        (["phantom", "--out", str(tmp_path), "--option", "colour=red"], "unknown option 'colour' for phantom; options: n_cases, seed, size, phrases"),
        (["phantom", "--out", str(tmp_path), "--option", "sise=128"], "unknown option 'sise' for phantom; did you mean 'size'?"),
        (["siim_acr", "--root", str(tmp_path), "--out", str(tmp_path), "--option", "cvs=x"], "did you mean 'csv'?"),
        (["siim_acr", "--root", str(tmp_path), "--out", str(tmp_path), "--seed", "3"], "phantom only"),
    ]
    for args, message in cases:
        res = runner.invoke(cli, args)
        assert res.exit_code == 2, (args, res.output)
        assert message in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.output


def test_cli_too_many_skipped_exit_2(tmp_path, monkeypatch):
    from xbench.extract import prepare_cli

    class Registry:
        @staticmethod
        def get(name):
            return lambda root, split, **kw: bad_input_reader()

    monkeypatch.setattr(prepare_cli, "DATASETS", Registry)
    res = CliRunner().invoke(cli, ["chestx_det10", "--root", str(tmp_path), "--out", str(tmp_path / "o"),
                                   "--workers", "1", "--quiet", "--grid", "16", "--image-size", "32"])
    assert res.exit_code == 2
    lines = res.stderr.splitlines()
    assert "error: chestx_det10: 5 of 10 case(s) skipped" in lines[0]  # after the command name
    assert any("fake.csv row 40: annotation names image 'ghost.png'" in line for line in lines)
    assert "Traceback" not in res.output


# ----------------------------------------------------------------------------------------------
# Ctrl-C


def _prepare_cmd(out: Path) -> list[str]:
    exe = Path(sys.executable).with_name("xbench-prepare")
    return [str(exe), "phantom", "--out", str(out), "--n-cases", "192", "--workers", "2", "--cases-per-block", "16",
            "--image-size", "1024", "--grid", "32"]


def _cmdline(proc_dir: Path) -> str:
    try:
        return (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _has_children(pid: int) -> bool:
    """Whether process ``pid`` has forked (its decoding pool exists, so its Ctrl-C handling is in place)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            return True
    return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_ctrl_c_at_any_moment_is_exit_130_and_one_resume_line(tmp_path):
    """SIGINT while the workers decode, while the parent writes a block (zarr's event loop busy), and in
    between: exit 130 with the resume line alone on stderr (no asyncio or executor noise), every time.
    Each run resumes the previous one; the moments count the blocks this run has written."""
    out = tmp_path / "run"
    work = out / WORK_DIR / "phantom"
    allowed = {"xbench-prepare: interrupted; run the same command again to resume"}
    # (new side files to wait for, then this many seconds): once the workers run, right after a block lands
    moments = [(0, 0.0), (1, 0.0), (1, 0.01), (1, 0.0), (0, 0.3), (1, 0.02), (1, 0.0), (2, 0.0)]
    for new_blocks, extra in moments:
        before = len(list(work.glob("block-*.npz")))
        proc = subprocess.Popen(_prepare_cmd(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not _has_children(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        while (len(list(work.glob("block-*.npz"))) < before + new_blocks and proc.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.001)
        time.sleep(extra)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # the command, or workers it left behind, still hold the pipes
            left = [d.name for d in Path("/proc").glob("[0-9]*") if _cmdline(d).count(str(out))]
            proc.kill()
            for pid in left:
                os.kill(int(pid), signal.SIGKILL)
            pytest.fail(f"still running 60 s after Ctrl-C at {(new_blocks, extra)}: processes {left}")
        if proc.returncode == 0:  # finished before the signal: nothing left to interrupt
            break
        lines = [ln for ln in err.splitlines() if not ln.startswith("prepare phantom:")]  # progress lines
        assert proc.returncode == 130, err
        assert set(lines) == allowed and len(lines) == 1, err
    done = subprocess.run(_prepare_cmd(out) + ["--quiet"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert not (out / WORK_DIR).exists()


def test_a_block_without_any_region_is_written(tmp_path):
    """A block of cases where no finding has a region (here: blocks of one case) packs an empty mask array."""
    reader = FakeReader(cases=[good_case(0), good_case(1, labels={"A": 0, "B": 1}, regions={}), good_case(2)])
    prepare_dataset(reader, tmp_path, **{**SMALL, "cases_per_block": 1})
    validate_ground_truth(tmp_path / "gt.zarr")
    index = np.asarray(read_ground_truth(tmp_path / "gt.zarr").datasets["chestx_det10"].region_index)
    assert index[:, 0].tolist() == [0, 2]


def _failing_block(task):
    """A block that fails in the worker: the error reaches the parent, which stops the pool (module level: the
    pool pickles it by name)."""
    raise RuntimeError("a block failed")


def test_workers_leave_on_their_own_after_a_normal_end(tmp_path, monkeypatch):
    """When every block is done the pool is closed, not terminated: a SIGTERM that reaches a worker still
    starting up is dropped by CPython's after-fork reset, and terminate() then joined that worker for ever (a
    prepare of a few blocks hung a CI run that way). An error while the blocks run still terminates."""
    import multiprocessing.pool as mp_pool

    calls = []
    for name in ("close", "terminate"):
        real = getattr(mp_pool.Pool, name)
        monkeypatch.setattr(mp_pool.Pool, name, lambda self, _n=name, _r=real: (calls.append(_n), _r(self))[1])
    prepare_dataset(_phantom(24, seed=3), tmp_path / "a", workers=2, **SMALL)
    assert calls == ["close"]
    calls.clear()
    import xbench.extract.datasets.prepare as P

    monkeypatch.setattr(P, "_process_block", _failing_block)
    with pytest.raises(RuntimeError, match="a block failed"):
        prepare_dataset(_phantom(24, seed=3), tmp_path / "b", workers=2, **SMALL)
    assert calls == ["terminate"]
