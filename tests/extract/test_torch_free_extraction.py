"""Issue 46 item 1: the weight-free baselines (catalog ``torch=False``) are extracted without torch, through the
same writer and ledger as the torch loop, and both paths write the same arrays."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import zarr

from cli_run import run_extract
from xbench.extract.models import catalog
from xbench.extract.runner import ExtractOptions, run_extraction

BASELINES = [m for m, info in catalog.MODELS.items() if not info.torch]


def test_the_catalog_marks_exactly_the_weight_free_baselines():
    assert sorted(BASELINES) == ["center", "dog", "random"]
    assert catalog.needs_torch("clip") and catalog.needs_torch("mypkg.mod:build") and not catalog.needs_torch("dog")


@pytest.fixture(scope="module")
def phrase_images(tmp_path_factory):
    """22 phantom cases with phrase rows (S = 64, 8 cases per block: three blocks, the last one short)."""
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset

    out = tmp_path_factory.mktemp("tf")
    prepare_dataset(PhantomReader(n_cases=22, size=64, phrases=True), out, grid=(32, 32), image_size=64, workers=1,
                    cases_per_block=8, progress=False)
    return out / "images.zarr"


def _arrays(path) -> dict:
    root = zarr.open_group(str(path), mode="r")
    return {name: np.asarray(a[...]) for name, a in root.arrays()} | {
        f"{g}/{name}": np.asarray(a[...]) for g, grp in root.groups() for name, a in grp.arrays()}


def _extract(monkeypatch, model, images, out, on_torch: bool, **kw):
    from xbench.extract import runner

    def other_path(*a, **k):
        raise AssertionError("the other extraction path ran")

    if on_torch:  # the same adapter through the torch loop (DataLoader, micro-batches, block writer thread)
        monkeypatch.setitem(catalog.MODELS, model, dataclasses.replace(catalog.MODELS[model], torch=True))
    monkeypatch.setattr(runner, "_run_numpy" if on_torch else "_run_torch", other_path)
    try:
        return run_extraction(ExtractOptions(model=model, images=images, out=out, workers=0, batch_size=5,
                                             cases_per_block=8, quiet=True, **kw))
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("model", ["random", "center", "dog"])
@pytest.mark.parametrize("augment", [None, "hflip"])
def test_torch_and_torch_free_paths_write_the_same_arrays(monkeypatch, phrase_images, tmp_path, model, augment):
    pytest.importorskip("torch")
    kw = {"augment": [augment]} if augment else {}
    via_torch = _extract(monkeypatch, model, phrase_images, tmp_path / "t.zarr", True, **kw)
    numpy = _extract(monkeypatch, model, phrase_images, tmp_path / "n.zarr", False, **kw)
    assert via_torch["device"] == "cpu" and numpy["blocks_written"] == via_torch["blocks_written"] == 3
    a, b = _arrays(tmp_path / "t.zarr"), _arrays(tmp_path / "n.zarr")
    assert sorted(a) == sorted(b) and any("query" in k for k in a), sorted(a)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f"), k
    ra, rb = (json.loads(json.dumps(dict(zarr.open_group(str(p), mode="r").attrs))) for p in (tmp_path / "t.zarr",
                                                                                           tmp_path / "n.zarr"))
    assert ra == rb  # the root attributes too: model, method, provenance (software versions included)


@pytest.mark.parametrize("model", ["dog", "random"])
def test_the_cli_extracts_a_baseline_without_torch_and_resumes(phrase_images, tmp_path, model):
    """With a ``torch`` that exits 99 on import first on the path: a run killed after its first block is
    resumed by the same command, and the store equals an uninterrupted torch-free run's."""
    args = ["--model", model, "--images", phrase_images, "--workers", "0", "--cases-per-block", "8"]
    whole = run_extract([*args, "--out", tmp_path / "whole.zarr"], tmp_path, no_torch=True, cap_s=120)
    assert whole.rc == 0 and "TORCH WAS IMPORTED" not in whole.stderr, whole.stderr[-2000:]
    os.environ["XBENCH_EXTRACT_KILL_AFTER_BLOCKS"] = "1"
    try:
        killed = run_extract([*args, "--out", tmp_path / "r.zarr"], tmp_path, no_torch=True, cap_s=120)
    finally:
        del os.environ["XBENCH_EXTRACT_KILL_AFTER_BLOCKS"]
    assert killed.rc == -9, (killed.rc, killed.stderr[-2000:])
    resumed = run_extract([*args, "--out", tmp_path / "r.zarr", "--json"], tmp_path, no_torch=True, cap_s=120)
    assert resumed.rc == 0 and "TORCH WAS IMPORTED" not in resumed.stderr, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout)["blocks_written"] == 2  # the two blocks the killed run had not written
    a, b = _arrays(tmp_path / "whole.zarr"), _arrays(tmp_path / "r.zarr")
    assert sorted(a) == sorted(b)
    for k in a:
        assert np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f"), k
