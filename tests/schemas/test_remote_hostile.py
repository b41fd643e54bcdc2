"""Hostile remote stores: a real HTTP server on 127.0.0.1 that drips, sends an endless zarr.json, lists a
million entries, redirects to another port, answers 404, or changes a store between two reads.

Each behaviour goes through xbench-validate and xbench-score as organisers run them (``--max-memory 1GiB
--timeout 60``, each run in its own process, forked by test_hostile's driver, which measures its peak memory):
exit 2, one problem line naming the cause, no traceback, nothing written, well within 60 s and 1 GiB. The
server runs in this process's threads and stops at the end of the module.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from schema_stores import make_gt, write_submission
from xbench.schemas import InvalidStoreError
from test_hostile import run_all

pytest.importorskip("aiohttp", reason="the remote extra (aiohttp) is not installed")

BUDGET = ["--max-memory", "1GiB", "--timeout", "60"]
MAX_SECONDS = 20  # per run; a refusal must not wait for the 60 s budget
MAX_RSS_MIB = 1024
DRIP_TIMEOUT = "3"  # $XBENCH_REMOTE_TIMEOUT for the runs: one request's whole answer
ENTRIES = 10**6


class Hostile(http.server.SimpleHTTPRequestHandler):
    """Serves ``directory`` as a plain file server with folder pages, except under the store names below, which
    stand for ``sub.zarr`` served with one hostile behaviour each."""

    stop: threading.Event
    other: str  # base URL of a second, honest server (the target of the redirect)

    def log_message(self, *args):
        pass

    def _send(self, status: int, headers: dict) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def _forever(self, first: bytes, piece: bytes, pause: float, limit: int) -> None:
        """Write ``first`` then ``piece`` again and again until the client leaves (or ``limit`` bytes)."""
        sent = 0
        try:
            self.wfile.write(first)
            while sent < limit and not self.stop.is_set():
                self.wfile.write(piece)
                self.wfile.flush()
                sent += len(piece)
                if pause:
                    time.sleep(pause)
        except OSError:  # the client hung up: what a bounded reader does
            pass

    def translate_path(self, path):
        name, _, rest = path.lstrip("/").partition("/")
        if name in ("drip.zarr", "dripchunk.zarr", "endless.zarr", "huge.zarr", "changing.zarr", "nolist.zarr",
                    "endlesschunk.zarr"):
            path = "/sub.zarr/" + rest
        return super().translate_path(path)

    def do_GET(self):
        name, _, rest = self.path.lstrip("/").partition("/")
        if name == "broken.zarr":
            return self._send(500, {"Content-Length": "0"})
        if name == "moved.zarr":
            return self._send(302, {"Location": f"{self.other}/sub.zarr/{rest}", "Content-Length": "0"})
        if name == "drip.zarr" and rest == "zarr.json":
            self._send(200, {"Content-Type": "application/json"})
            return self._forever(b"{", b" ", 0.5, 10**6)
        if name == "dripchunk.zarr" and "/c/" in rest and not rest.endswith("/"):  # a chunk, not a folder page
            self._send(200, {"Content-Type": "application/octet-stream"})
            return self._forever(b"", b"\0", 0.5, 10**6)
        if name == "endlesschunk.zarr" and "/c/" in rest and not rest.endswith("/"):  # HEAD gives the true size
            self._send(200, {"Content-Type": "application/octet-stream"})
            return self._forever(b"", b"\0" * 65536, 0, 2**30)
        if name == "endless.zarr" and rest == "zarr.json":
            self._send(200, {"Content-Type": "application/json"})
            return self._forever(b'{"attributes": {"a": "', b"x" * 65536, 0, 2**30)
        if name == "huge.zarr" and rest == "":
            self._send(200, {"Content-Type": "text/html"})
            try:
                self.wfile.write(b"<html><body><ul>\n")
                for start in range(0, ENTRIES, 10_000):  # written 10,000 lines at a time: the server is not the test
                    self.wfile.write("".join(f'<li><a href="f{i:07d}">f{i:07d}</a></li>\n'
                                             for i in range(start, start + 10_000)).encode())
                    if self.stop.is_set():
                        break
            except OSError:
                pass
            return None
        if name == "changing.zarr" and rest == "zarr.json":
            doc = json.loads(Path(self.translate_path(self.path)).read_text())
            Hostile.count += 1
            doc["attributes"]["xbench"]["served"] = Hostile.count
            body = json.dumps(doc).encode()
            self._send(200, {"Content-Type": "application/json", "Content-Length": str(len(body))})
            self.wfile.write(body)
            return None
        if name == "nolist.zarr" and (rest == "" or rest.endswith("/")):
            return self._send(404, {"Content-Length": "0"})
        return super().do_GET()

    count = 0


@contextmanager
def serve(folder: Path, handler=http.server.SimpleHTTPRequestHandler, **attrs):
    cls = type("Handler", (handler,), {"log_message": lambda *a: None, **attrs})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(cls, directory=str(folder)))
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


#: name -> (the URL's store, a fragment of the one problem line)
BEHAVIOURS = {
    "drip": ("drip.zarr", f"no complete answer within {DRIP_TIMEOUT} s"),
    "drip-chunk": ("dripchunk.zarr", f"/c/0: no complete answer within {DRIP_TIMEOUT} s"),
    "endless-chunk": ("endlesschunk.zarr", "the server sends more than the"),
    "endless-zarr-json": ("endless.zarr", "metadata document is larger than 4 MiB"),
    "million-entries": ("huge.zarr", "holds more than 200000 files and folders"),
    "redirect-to-another-port": ("moved.zarr", "HTTP 302 (a redirect to http://127.0.0.1:"),
    "not-found": ("missing.zarr", "not found (HTTP 404)"),
    "server-error": ("broken.zarr", "the server answered HTTP 500 (Internal Server Error)"),
    "changing-metadata": ("changing.zarr", "changed between two reads"),
    "no-folder-pages": ("nolist.zarr", "the server gives no folder listing"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote-hostile")
    gt = make_gt(root)
    served = root / "srv"
    served.mkdir()
    write_submission(served / "sub.zarr")
    stop = threading.Event()
    env = {"XBENCH_REMOTE_TIMEOUT": os.environ.get("XBENCH_REMOTE_TIMEOUT")}
    os.environ["XBENCH_REMOTE_TIMEOUT"] = DRIP_TIMEOUT  # read by the forked runs at import of the remote module
    try:
        with serve(served) as honest, serve(served, Hostile, stop=stop, other=honest) as base:
            jobs, keys = [], []
            for name, (store, _) in BEHAVIOURS.items():
                out = root / name / "out"
                jobs.append({"argv": ["validate", f"{base}/{store}", "--gt", str(gt), *BUDGET], "cap": 50})
                jobs.append({"argv": ["score", f"{base}/{store}", "--gt", str(gt), "--out", str(out), "--bootstrap",
                                      "0", *BUDGET], "cap": 50})
                keys += [(name, "validate"), (name, "score")]
            jobs.append({"argv": ["validate", f"{honest}/sub.zarr", "--gt", str(gt), *BUDGET]})
            jobs.append({"argv": ["score", f"{honest}/sub.zarr", "--gt", str(gt), "--out", str(root / "ok"),
                                  "--bootstrap", "0", "--quiet", *BUDGET]})
            keys += [("honest", "validate"), ("honest", "score")]
            results = dict(zip(keys, run_all(jobs, root)))
            stop.set()
    finally:
        if env["XBENCH_REMOTE_TIMEOUT"] is None:
            os.environ.pop("XBENCH_REMOTE_TIMEOUT", None)
        else:
            os.environ["XBENCH_REMOTE_TIMEOUT"] = env["XBENCH_REMOTE_TIMEOUT"]
    return root, results


@pytest.mark.parametrize("command", ["validate", "score"])
@pytest.mark.parametrize("behaviour", sorted(BEHAVIOURS))
def test_a_hostile_server_is_refused_in_one_line_within_budget(runs, behaviour, command):
    root, results = runs
    res = results[(behaviour, command)]
    errors = [line for line in res["stderr"].splitlines() if ": error: " in line]
    assert res["rc"] == 2, (res["rc"], res["stderr"][-2000:])
    assert len(errors) == 1 and BEHAVIOURS[behaviour][1] in errors[0], res["stderr"][-2000:]
    assert "Traceback" not in res["stderr"] and "budget of" not in res["stderr"]  # a check, not the watchdog
    assert not res["killed"] and res["seconds"] < MAX_SECONDS, res["seconds"]
    assert res["maxrss_mib"] < MAX_RSS_MIB, res["maxrss_mib"]
    assert not (root / behaviour / "out").exists()


def test_the_same_server_serves_an_honest_store_that_validates_and_scores(runs):
    """The control: the honest server's store passes both commands (the refusals above are not blanket)."""
    root, results = runs
    assert results[("honest", "validate")]["rc"] == 0, results[("honest", "validate")]["stderr"][-2000:]
    assert results[("honest", "score")]["rc"] == 0, results[("honest", "score")]["stderr"][-2000:]
    assert json.loads((root / "ok" / "metrics.json").read_text())["overall"]


def test_only_the_run_budget_ends_a_drip_when_the_request_deadline_is_long(tmp_path):
    """With a request deadline longer than the run (--timeout 4), the run's deadline still ends the drip: one
    line, exit 2, in about 4 s."""
    gt = make_gt(tmp_path)
    served = tmp_path / "srv"
    served.mkdir()
    write_submission(served / "sub.zarr")
    stop = threading.Event()
    saved = os.environ.pop("XBENCH_REMOTE_TIMEOUT", None)
    try:
        with serve(served, Hostile, stop=stop, other="http://127.0.0.1:9") as base:
            res = run_all([{"argv": ["validate", f"{base}/drip.zarr", "--gt", str(gt), "--timeout", "4"], "cap": 50}],
                          tmp_path)[0]
            stop.set()
    finally:
        if saved is not None:
            os.environ["XBENCH_REMOTE_TIMEOUT"] = saved
    errors = [line for line in res["stderr"].splitlines() if ": error: " in line or "budget of" in line]
    assert res["rc"] == 2 and len(errors) == 1 and "--timeout" in errors[0], res["stderr"][-2000:]
    assert res["seconds"] < 15


def test_a_folder_without_zarr_json_is_named_in_the_users_terms(tmp_path, capsys):
    from xbench.schemas.cli import validate_cmd

    (tmp_path / "empty.zarr").mkdir()
    with pytest.raises(SystemExit) as exc:
        validate_cmd.main(args=[str(tmp_path / "empty.zarr")], prog_name="xbench-validate", standalone_mode=True)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "holds no zarr.json at its top" in err and "LocalStore" not in err and "file://" not in err


def test_the_documented_url_example_runs_against_a_served_store(tmp_path):
    """docs/how-to/score.md's and xbench-validate --help's URL example, with the port of a server started here."""
    from xbench.schemas.cli import validate_cmd

    root = Path(__file__).resolve().parents[2]
    doc = next(line for line in (root / "docs" / "how-to" / "score.md").read_text().splitlines() if "127.0.0.1:8000" in line)
    assert doc.strip() in (validate_cmd.help or "")
    gt = make_gt(tmp_path)
    served = tmp_path / "srv"
    served.mkdir()
    write_submission(served / "submission.zarr")
    with serve(served) as base:
        argv = doc.split()[1:]
        argv = [a.replace("http://127.0.0.1:8000", base).replace("gt.zarr", str(gt)) if a != "--gt" else a
                for a in argv]
        res = run_all([{"argv": ["validate", *argv]}], tmp_path)[0]
    assert res["rc"] == 0 and "valid submission store" in res["stdout"], res["stderr"][-2000:]


@pytest.mark.parametrize(("href", "entry"), [
    ("f1", "f1"), ("c/", "c/"), ("zarr.json", "zarr.json"), ("/base/a.zarr/c/", "c/"), ("a%20b", "a b"),
    ("http://127.0.0.1:1/base/a.zarr/x", "x"),
    ("../", None), ("./", None), ("/", None), ("?C=N;O=D", None), ("#top", None), ("c/0", None),
    ("http://elsewhere/base/a.zarr/x", None), ("%2e%2e/", None), ("a%2Fb", None), ("/other/", None),
])
def test_a_folder_page_lists_only_what_lies_directly_in_the_folder(href, entry):
    from xbench.schemas.remote import page_entry

    assert page_entry("http://127.0.0.1:1/base/a.zarr/", href) == entry


def test_urls_other_than_http_and_s3_and_a_missing_extra_are_one_line_each(monkeypatch):
    from xbench.schemas import InvalidStoreError
    from xbench.schemas.store import open_store_group

    with pytest.raises(InvalidStoreError, match=r"ftp:// URLs are not read"):
        open_store_group("ftp://127.0.0.1/a.zarr")
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # as if the remote extra were not installed
    with pytest.raises(InvalidStoreError, match=r"needs the 'remote' extra: pip install '\.\[remote\]' in a checkout"):
        open_store_group("http://127.0.0.1:9/never-contacted.zarr")
    from xbench.schemas.remote import forget

    forget("http://127.0.0.1:9/never-contacted.zarr")  # a refusal is remembered for a minute unless forgotten


def test_a_listing_is_cut_at_the_file_cap_and_a_chunk_longer_than_listed_is_refused(tmp_path):
    """In-process, with small limits: the listing stops at max_files; a chunk the server lengthens after the
    store was inspected is refused when read (the snapshot's size is the cap), not decoded."""
    from xbench.schemas import budget
    from xbench.schemas.remote import inspect_remote
    from xbench.schemas.store import open_store_group

    served = tmp_path / "srv"
    served.mkdir()
    write_submission(served / "sub.zarr")
    with serve(served) as base:
        inventory, problems = inspect_remote(f"{base}/sub.zarr", budget.Limits(max_files=5))
        assert inventory is None and [str(p) for p in problems] == [
            f"{base}/sub.zarr: holds more than 5 files and folders; the limit is 5"]
        group = open_store_group(f"{base}/sub.zarr")
        chunk = served / "sub.zarr" / "phantom" / "scores" / "c" / "0" / "0"
        chunk.write_bytes(chunk.read_bytes() + b"\0" * 100)
        with pytest.raises(InvalidStoreError, match=r"sends more than the \d+ bytes it listed"):
            group["phantom/scores"][...]


def test_a_bad_request_timeout_setting_is_one_line(monkeypatch):
    from xbench.schemas.errors import InputError
    from xbench.schemas.store import open_store_group

    monkeypatch.setenv("XBENCH_REMOTE_TIMEOUT", "soon")
    with pytest.raises(InputError, match=r"\$XBENCH_REMOTE_TIMEOUT is 'soon'; give a positive number of seconds"):
        open_store_group("http://127.0.0.1:9/also-never-contacted.zarr")
