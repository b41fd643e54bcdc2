"""Submissions and ground truths read from real servers on 127.0.0.1: a plain HTTP server for https-style
URLs, and an S3-compatible server (s3rver, from npm) for s3:// when one is installed.

The servers start in the test and stop at its end; nothing leaves the machine.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from score_stores import make_gt, make_submission, run_score_cli
from xbench.schemas import InvalidStoreError, read_ground_truth, validate_submission
from xbench.schemas.store import open_store_group, store_sha256
from xbench.score.scoring import score_submission

pytest.importorskip("aiohttp", reason="the remote extra (fsspec over HTTP) is not installed")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("remote")
    gt = make_gt(d / "gt.zarr", seed=21)
    make_submission(d / "a.zarr", gt, seed=22)
    return d


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@contextmanager
def http_server(folder):
    """A plain HTTP file server over ``folder`` on 127.0.0.1 (any free port), stopped on exit."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


run = run_score_cli


def test_scoring_over_http_matches_scoring_the_local_folders(stores, tmp_path, capsys):
    local = score_submission(stores / "a.zarr", stores / "gt.zarr", bootstrap=0)
    with http_server(stores) as base:
        code, _, err = run([f"{base}/a.zarr", "--gt", f"{base}/gt.zarr", "--out", tmp_path / "res", "--bootstrap", "0",
                            "--quiet"], capsys)
        assert code == 0, err
        assert store_sha256(f"{base}/gt.zarr") == store_sha256(stores / "gt.zarr")
    metrics = json.loads((tmp_path / "res" / "metrics.json").read_text())
    assert metrics["overall"] == json.loads(json.dumps(local.metrics["overall"]))
    assert metrics["xbench"]["inputs"]["submission"] == f"{base}/a.zarr"  # the URL as given, not a mangled path
    assert sorted(os.listdir(tmp_path)) == ["res"]


def test_remote_stores_are_read_only_and_bad_urls_are_one_line_problems(stores, tmp_path, capsys):
    with http_server(stores) as base:
        with pytest.raises(InvalidStoreError, match="read-only"):
            open_store_group(f"{base}/a.zarr", mode="r+")
        with pytest.raises(InvalidStoreError, match="remote .zip"):
            open_store_group(f"{base}/a.zarr.zip")
        code, _, err = run([f"{base}/missing.zarr", "--gt", f"{base}/gt.zarr", "--out", tmp_path / "never",
                            "--bootstrap", "0"], capsys)
    assert code == 2 and "missing.zarr" in err and "Traceback" not in err
    assert not (tmp_path / "never").exists()


def test_a_hostile_remote_submission_meets_the_same_limits(stores, tmp_path):
    bad = tmp_path / "srv" / "bad.zarr"
    shutil.copytree(stores / "a.zarr", bad)
    meta = json.loads((bad / "phantom" / "saliency" / "zarr.json").read_text())
    meta["shape"] = [10**9] + meta["shape"][1:]  # declares an absurd array: refused from metadata alone
    (bad / "phantom" / "saliency" / "zarr.json").write_text(json.dumps(meta))
    gt = read_ground_truth(stores / "gt.zarr")
    local = [str(p).split(": ", 1)[-1] for p in validate_submission(bad, gt)]
    with http_server(tmp_path / "srv") as base:
        remote = [str(p).split(": ", 1)[-1] for p in validate_submission(f"{base}/bad.zarr", gt)]
    assert remote and remote == local


def test_a_stalled_server_fails_within_the_timeout(stores, monkeypatch):
    from xbench.schemas import remote as R

    monkeypatch.setattr(R, "REMOTE_TIMEOUT", 1.0)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)  # accepts the connection, never answers
    t0 = time.monotonic()
    try:
        with pytest.raises(InvalidStoreError, match="no complete answer within 1 s"):
            open_store_group(f"http://127.0.0.1:{sock.getsockname()[1]}/a.zarr")
    finally:
        sock.close()
    assert time.monotonic() - t0 < 15


# -- S3 -------------------------------------------------------------------------------------------------------

def _s3rver() -> str | None:
    """$XBENCH_S3RVER, s3rver on PATH, or the copy `make s3rver` installs under .cache/."""
    local = Path(__file__).resolve().parents[2] / ".cache" / "s3rver" / "node_modules" / ".bin" / "s3rver"
    for found in (os.environ.get("XBENCH_S3RVER"), shutil.which("s3rver"), str(local)):
        if found and os.path.exists(found):
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def s3_server(tmp_path, bucket):
    """s3rver (an S3-compatible server) on 127.0.0.1 with one bucket; stopped on exit."""
    port = _free_port()
    proc = subprocess.Popen([_s3rver(), "-d", str(tmp_path / "s3data"), "-a", "127.0.0.1", "-p", str(port), "-s",
                             "--configure-bucket", bucket], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.skip("s3rver did not start")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.skipif(_s3rver() is None, reason="no S3-compatible server installed (make s3rver, or "
                                                 "set XBENCH_S3RVER to an s3rver)")
def test_scoring_from_an_s3_compatible_server(stores, tmp_path, capsys, monkeypatch):
    s3fs = pytest.importorskip("s3fs", reason="the remote extra (s3fs) is not installed")
    with s3_server(tmp_path, "xbench") as endpoint:
        for k, v in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER",
                     "AWS_DEFAULT_REGION": "us-east-1"}.items():
            monkeypatch.setenv(k, v)
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="S3RVER", secret="S3RVER")
        fs.put(str(stores / "a.zarr"), "xbench/a.zarr", recursive=True)
        fs.put(str(stores / "gt.zarr"), "xbench/gt.zarr", recursive=True)
        code, _, err = run(["s3://xbench/a.zarr", "--gt", "s3://xbench/gt.zarr", "--out", tmp_path / "res",
                            "--bootstrap", "0", "--quiet"], capsys)
        assert code == 0, err
        assert store_sha256("s3://xbench/gt.zarr") == store_sha256(stores / "gt.zarr")
    local = score_submission(stores / "a.zarr", stores / "gt.zarr", bootstrap=0)
    metrics = json.loads((tmp_path / "res" / "metrics.json").read_text())
    assert metrics["overall"] == json.loads(json.dumps(local.metrics["overall"]))


@pytest.mark.skipif(_s3rver() is None, reason="no S3-compatible server installed (make s3rver, or "
                                                 "set XBENCH_S3RVER to an s3rver)")
def test_s3_listing_is_cut_at_the_file_cap_and_a_missing_store_is_named(stores, tmp_path, monkeypatch):
    """The same limits over S3: the paged listing stops at max_files; a prefix with nothing under it is 'not
    found', in one line."""
    s3fs = pytest.importorskip("s3fs", reason="the remote extra (s3fs) is not installed")
    from xbench.schemas import budget
    from xbench.schemas.remote import inspect_remote

    with s3_server(tmp_path, "xbench") as endpoint:
        for k, v in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER",
                     "AWS_DEFAULT_REGION": "us-east-1"}.items():
            monkeypatch.setenv(k, v)
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="S3RVER", secret="S3RVER")
        fs.put(str(stores / "a.zarr"), "xbench/a.zarr", recursive=True)
        inventory, problems = inspect_remote("s3://xbench/a.zarr", budget.Limits(max_files=3))
        assert inventory is None and [str(p) for p in problems] == [
            "s3://xbench/a.zarr: holds more than 3 files and folders; the limit is 3"]
        inventory, problems = inspect_remote("s3://xbench/missing.zarr")
        assert inventory is None and [str(p) for p in problems] == [
            "s3://xbench/missing.zarr: not found (no object under this prefix)"]
        inventory, problems = inspect_remote("s3://xbench/a.zarr")
        assert problems == [] and set(inventory.sizes) == {
            p.relative_to(stores / "a.zarr").as_posix() for p in (stores / "a.zarr").rglob("*") if p.is_file()}
