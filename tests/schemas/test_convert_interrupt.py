"""xbench-convert stopped from outside (issue 25): a real process killed mid-write, terminated, interrupted,
or stopped by its own --timeout / --max-memory. What is left beside --out is at most a hidden work folder of a
dead process, and the next conversion into that folder removes it; SIGTERM, Ctrl-C and the watchdog remove
their own."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

CONVERT = str(Path(sys.executable).parent / "xbench-convert")
CLASSES = ["Cardiomegaly", "Nodule", "Pneumothorax"]


def write_h5(path: Path, n: int, side: int = 32) -> Path:
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        g = f.create_group("phantom")
        g.attrs["classes"] = CLASSES
        g["case_id"] = np.array([f"case-{i:04d}".encode() for i in range(n)])
        g["scores"] = rng.normal(size=(n, 3))
        g["saliency"] = rng.random((n, 3, side, side), dtype=np.float32)
    return path


@pytest.fixture(scope="module")
def slow_source(tmp_path_factory):
    """A source that takes seconds to convert one case per block: time to stop it mid-write."""
    return write_h5(tmp_path_factory.mktemp("slow") / "big.h5", 600)


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def start_and_wait_for_work_folder(source: Path, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([CONVERT, str(source), "--out", str(out), "--cases-per-block", "1", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        blocks = list(out.parent.glob(f".{out.name}.xbench-new-{proc.pid}-*/{out.name}/phantom/saliency/c/*"))
        if len(blocks) >= 3:  # writing blocks: the store is half-written now
            return proc
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the conversion never started writing")


def test_a_killed_conversion_leaves_nothing_after_the_next_run(tmp_path, slow_source):
    """SIGKILL cannot be caught: the hidden folder stays, named with the dead pid; the next conversion into
    the same folder, whatever its --out, removes it (and never a live conversion's folder)."""
    out_dir = tmp_path / "outs"
    out_dir.mkdir()
    proc = start_and_wait_for_work_folder(slow_source, out_dir / "sub.zarr")
    proc.kill()
    proc.wait()
    assert len(hidden(out_dir)) == 1 and str(proc.pid) in hidden(out_dir)[0]
    live = out_dir / f".other.zarr.xbench-new-{1}-abc"  # pid 1 is alive: a live writer's folder is left alone
    live.mkdir()
    (live / ".xbench-convert").write_text("")
    small = write_h5(tmp_path / "small.h5", 4, side=4)
    res = subprocess.run([CONVERT, str(small), "--out", str(out_dir / "another.zarr"), "-q"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert hidden(out_dir) == [live.name]
    assert sorted(p.name for p in out_dir.iterdir() if not p.name.startswith(".")) == ["another.zarr"]


def test_a_killed_conversion_is_cleaned_by_a_run_into_the_same_out(tmp_path, slow_source):
    out = tmp_path / "sub.zarr"
    proc = start_and_wait_for_work_folder(slow_source, out)
    proc.kill()
    proc.wait()
    assert hidden(tmp_path)
    small = write_h5(tmp_path / "small.h5", 4, side=4)
    res = subprocess.run([CONVERT, str(small), "--out", str(out), "-q"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert hidden(tmp_path) == [] and out.is_dir()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_terminate_and_ctrl_c_remove_their_own_work_folder(tmp_path, slow_source, sig):
    out = tmp_path / "sub.zarr"
    proc = start_and_wait_for_work_folder(slow_source, out)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["xbench-convert: interrupted; nothing was written"]
    assert hidden(tmp_path) == [] and not out.exists()


@pytest.mark.parametrize("flags, line", [(["--timeout", "2"], "the time budget of 2 s ran out (--timeout)"),
                                         (["--max-memory", "1MiB"], "the memory budget of 1 MiB was exceeded")])
def test_the_budget_flags_stop_a_conversion_and_leave_nothing(tmp_path, slow_source, flags, line):
    """The watchdog stops the process from a thread (os._exit): the conversion's hidden folder, half-written
    after 2 s, is removed before it leaves."""
    out = tmp_path / "sub.zarr"
    res = subprocess.run([CONVERT, str(slow_source), "--out", str(out), "--cases-per-block", "1", "-q", *flags],
                         capture_output=True, text=True, timeout=120)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"xbench-convert: {line}"), res.stderr
    assert hidden(tmp_path) == [] and not out.exists()


def test_help_shows_the_budget_flags_with_the_scorers_defaults():
    res = subprocess.run([CONVERT, "--help"], capture_output=True, text=True, timeout=60)
    score = subprocess.run([str(Path(sys.executable).parent / "xbench-score"), "--help"], capture_output=True,
                           text=True, timeout=60)
    for flag, default in (("--max-memory", "2GiB"), ("--timeout", "1800")):
        assert flag in res.stdout and flag in score.stdout
        assert default in res.stdout.split(flag, 1)[1].split("--", 1)[0].replace("\n", " ")


def test_an_interrupt_python_swallows_still_stops_the_conversion(capsys):
    """A signal handler's KeyboardInterrupt can land inside a weakref callback or a finaliser, where Python
    prints "Exception ignored" and carries on (it happened to the SIGTERM test above): the stop flag still
    stops the conversion before anything is published, and no traceback reaches stderr."""
    import gc
    import weakref

    from xbench.schemas import convert

    class Obj:
        pass

    def callback(_):
        raise KeyboardInterrupt

    with convert.terminate_as_interrupt():
        convert._STOP.set()  # what the handler does first
        obj = Obj()
        ref = weakref.ref(obj, callback)
        del obj
        gc.collect()
        with pytest.raises(KeyboardInterrupt):
            convert._check_stop()
    assert ref() is None and capsys.readouterr().err == ""
    convert._check_stop()  # the flag is cleared on the way out
