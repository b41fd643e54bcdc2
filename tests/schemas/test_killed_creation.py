"""A writer killed while it creates a store leaves nothing the same command cannot resume or restart."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from schema_stores import CLASSES, case_ids
from xbench.schemas import DatasetSpec, ImagesWriter, SubmissionWriter, read_images, read_submission

KILL = {
    # kill at the last step of creation, after every array exists: the worst moment for the old writer
    "submission": ("xbench.schemas._blocks", "create_ledger", "from xbench.schemas import DatasetSpec, SubmissionWriter\n"
                   "SubmissionWriter.create(out, model='m', method='similarity', "
                   "datasets={'phantom': DatasetSpec([f'c{i}' for i in range(6)], CLASSES, (7, 7))}, cases_per_block=2)"),
    "images": ("xbench.schemas._blocks", "create_ledger", "from xbench.schemas import ImagesWriter\n"
               "ImagesWriter(out, 'phantom', case_ids=[f'c{i}' for i in range(6)], classes=CLASSES, image_size=8, "
               "cases_per_block=2)"),
    "images-root": ("xbench.schemas.store", "root_attrs", "from xbench.schemas import ImagesWriter\n"
                    "ImagesWriter(out, 'phantom', case_ids=[f'c{i}' for i in range(6)], classes=CLASSES, "
                    "image_size=8, cases_per_block=2)"),
}


def _killed(out, which):
    module, func, body = KILL[which]
    code = (f"import os, sys, importlib; sys.path[:0] = {sys.path!r}\n"
            f"from schema_stores import CLASSES\nout = {str(out)!r}\n"
            f"m = importlib.import_module({module!r})\n"
            f"def die(*a, **k): os.kill(os.getpid(), 9)\n"
            f"setattr(m, {func!r}, die)\n" + body)
    return subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(__file__)).returncode


@pytest.mark.parametrize("which", list(KILL))
def test_killed_creation_is_restarted_by_the_same_call(tmp_path, which):
    out = tmp_path / ("s.zarr" if which == "submission" else "images.zarr")
    if which == "images":  # a store that exists already, so only the dataset group is being created
        ImagesWriter(out, "phantom", case_ids=case_ids(2), classes=CLASSES, image_size=8, cases_per_block=2)
    assert _killed(out, which) == -9
    ids = [f"c{i}" for i in range(6)]
    if which == "submission":
        w = SubmissionWriter.create(out, model="m", method="similarity",
                                    datasets={"phantom": DatasetSpec(ids, CLASSES, (7, 7))}, cases_per_block=2)
        for b in w.blocks_todo("phantom"):
            w.write_block("phantom", b, np.zeros((2, len(CLASSES)), np.float32),
                          np.zeros((2, len(CLASSES), 7, 7), np.float16))
        w.finish()
        assert w.is_complete() and len(read_submission(out).datasets["phantom"].case_id) == 6
    else:
        w = ImagesWriter(out, "phantom", case_ids=ids, classes=CLASSES, image_size=8, cases_per_block=2)
        assert w.blocks_todo() == [0, 1, 2]
        for b in w.blocks_todo():
            w.write_block(b, np.zeros((2, 8, 8), np.uint8), np.ones((2, 2)))
        w.finish()
        assert len(read_images(out).datasets["phantom"].case_id) == 6
    assert sorted(os.listdir(tmp_path)) == [out.name]  # the killed run's work folder is gone
