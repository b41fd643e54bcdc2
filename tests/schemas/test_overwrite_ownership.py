"""--overwrite deletes only what XBench can prove it wrote (issue 44, class 5), on the submission writer's side:
a submission store XBench wrote (xbench.kind), the remains of a killed creation, or an empty folder is replaced;
a folder of the user's, another kind of store, a file or a link is refused with one line and left as it was."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from schema_stores import CLASSES
from xbench.schemas import DatasetSpec, InvalidStoreError, SubmissionWriter
from xbench.schemas.submission import replace_problem

IDS = [f"c{i}" for i in range(4)]


def _create(path, model="m", overwrite=True):
    w = SubmissionWriter.create(path, model=model, method="similarity", overwrite=overwrite,
                                datasets={"phantom": DatasetSpec(IDS, CLASSES, (7, 7))}, cases_per_block=2)
    for b in w.blocks_todo("phantom"):
        w.write_block("phantom", b, np.zeros((2, len(CLASSES)), np.float32), np.zeros((2, len(CLASSES), 7, 7), np.float16))
    return w


def _listing(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
            for p in sorted(root.rglob("*"))}


def test_a_submission_store_and_an_empty_folder_are_replaced(tmp_path):
    _create(tmp_path / "s.zarr", model="first", overwrite=False)
    assert replace_problem(tmp_path / "s.zarr") is None
    _create(tmp_path / "s.zarr", model="second")  # another specification: replaced with --overwrite
    (tmp_path / "empty").mkdir()
    assert replace_problem(tmp_path / "empty") is None
    _create(tmp_path / "empty")


@pytest.mark.parametrize("make, what", [
    (lambda p: (p.mkdir(), (p / "notes.txt").write_text("mine")), "a folder of other files"),
    (lambda p: (p.mkdir(), (p / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", '
                                                        '"attributes": {"xbench": {"kind": "images"}}}')),
     "xbench.kind='images'"),
    (lambda p: p.write_text("mine"), "a file"),
    (lambda p: os.symlink(p.parent / "target", p), "a link"),
])
def test_anything_else_is_refused_and_left_as_it_was(tmp_path, make, what):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "keep.txt").write_text("mine")
    path = tmp_path / "out.zarr"
    make(path)
    before = _listing(tmp_path)
    assert what in replace_problem(path)
    with pytest.raises(InvalidStoreError) as info:
        _create(path)
    assert len(info.value.problems) == 1 and "nothing was deleted" in str(info.value)
    assert _listing(tmp_path) == before
