"""Several processes writing one store, and a writer killed with SIGKILL and resumed."""
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from xbench.schemas import SubmissionWriter, read_submission, validate_submission

from schema_stores import CLASSES

N_CASES, BLOCK = 40, 4

WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from xbench.schemas import DatasetSpec, SubmissionWriter
    path, mode, blocks, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    ids = [f"case-{i:03d}" for i in range(%(n)d)]
    spec = {"phantom": DatasetSpec(ids, %(classes)r, (5, 5))}
    if mode == "create":
        w = SubmissionWriter.create(path, model="m", method="similarity", datasets=spec, cases_per_block=%(block)d)
    else:
        w = SubmissionWriter.open(path)
    todo = w.blocks_todo("phantom")
    if blocks != "all":
        lo, hi = map(int, blocks.split(":"))
        todo = [b for b in todo if lo <= b < hi]
    for b in todo:
        s, e = w.block_rows("phantom", b)
        rows = np.arange(s, e, dtype=np.float32)
        scores = np.repeat(rows[:, None], 3, axis=1)
        maps = (rows[:, None, None, None] + np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5) / 100).repeat(3, axis=1)
        w.write_block("phantom", b, scores, maps)
        print(b, flush=True)
        time.sleep(delay)
    """
    % {"n": N_CASES, "classes": CLASSES, "block": BLOCK}
)


def run_writer(tmp_path, *args, wait=True):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen([sys.executable, str(script), *map(str, args)], stdout=subprocess.PIPE, text=True)
    if wait:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
    return proc


def tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(path)).encode() + f.read_bytes())
    return digest.hexdigest()


def expected_scores():
    return np.repeat(np.arange(N_CASES, dtype=np.float32)[:, None], 3, axis=1)


def test_two_processes_write_disjoint_blocks(tmp_path):
    path = tmp_path / "s.zarr"
    run_writer(tmp_path, path, "create", "0:0", 0)  # creates the store, writes nothing
    a = run_writer(tmp_path, path, "open", "0:5", 0.01, wait=False)
    b = run_writer(tmp_path, path, "open", "5:10", 0.01, wait=False)
    assert a.wait(timeout=120) == 0 and b.wait(timeout=120) == 0
    w = SubmissionWriter.open(path)
    assert w.blocks_todo("phantom") == []
    w.finish()
    assert validate_submission(path) == []
    np.testing.assert_array_equal(read_submission(path).datasets["phantom"].scores, expected_scores())


def test_writer_killed_with_sigkill_resumes_to_the_identical_store(tmp_path):
    reference = tmp_path / "ref.zarr"
    run_writer(tmp_path, reference, "create", "all", 0)
    SubmissionWriter.open(reference).finish()

    path = tmp_path / "s.zarr"
    proc = run_writer(tmp_path, path, "create", "all", 0.2, wait=False)
    written = []
    while len(written) < 3:  # let a few blocks land, then kill mid-run
        line = proc.stdout.readline()
        assert line, "writer exited early"
        written.append(int(line))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    w = SubmissionWriter.open(path)
    todo = w.blocks_todo("phantom")
    assert set(written).isdisjoint(todo) and 0 < len(todo) < N_CASES // BLOCK
    run_writer(tmp_path, path, "create", "all", 0)  # the same command again resumes
    SubmissionWriter.open(path).finish()
    assert validate_submission(path) == []
    assert tree_digest(path) == tree_digest(reference)
