"""read_rows(..., out=buffer): whole row chunks decoded straight into a reused buffer, else read through Zarr."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import zarr

from xbench.schemas.errors import Problem
from xbench.schemas.store import _decode_row_chunk_into, read_rows


def _array(tmp_path, data, chunks, **kw):
    store = zarr.storage.LocalStore(tmp_path / "a.zarr")
    arr = zarr.create_array(store, shape=data.shape, dtype=data.dtype, chunks=chunks, config={"write_empty_chunks": True},
                            **kw)
    arr[...] = data
    return arr


def _chunks(arr):
    step = arr.chunks[0]
    return [(s, min(s + step, arr.shape[0])) for s in range(0, arr.shape[0], step)]


@pytest.mark.parametrize("dtype", ["bool", "float16", "float32", "int8"])
def test_fast_path_equals_zarr_for_every_chunk_including_the_last_partial_one(tmp_path, dtype):
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((23, 6, 5)) > 0.3).astype(dtype)
    arr = _array(tmp_path, data, (8, 6, 5))
    buf = np.empty((8, 6, 5), dtype=dtype)
    for start, stop in _chunks(arr):
        assert _decode_row_chunk_into(arr, start, stop, buf) is not None  # the fast path was taken
        got = read_rows(arr, start, stop, "a", [], out=buf)
        assert np.shares_memory(got, buf)
        np.testing.assert_array_equal(got, data[start:stop])


def test_zip_store_takes_the_fast_path(tmp_path):
    data = np.random.default_rng(1).random((10, 4, 4)) > 0.5
    _array(tmp_path, data, (4, 4, 4))
    zip_path = tmp_path / "a.zarr.zip"
    shutil.move(shutil.make_archive(str(tmp_path / "a"), "zip", root_dir=tmp_path / "a.zarr"), zip_path)
    zarr_zip = zarr.open_array(zarr.storage.ZipStore(zip_path, mode="r"), mode="r")
    buf = np.empty((4, 4, 4), bool)
    for start, stop in _chunks(zarr_zip):
        assert _decode_row_chunk_into(zarr_zip, start, stop, buf) is not None
        np.testing.assert_array_equal(buf[: stop - start], data[start:stop])


@pytest.mark.parametrize("layout", ["blosc", "gzip", "no_compressor", "chunked_along_columns", "sharded"])
def test_other_layouts_fall_back_to_zarr_with_the_same_values(tmp_path, layout):
    from zarr.codecs import BloscCodec, GzipCodec

    data = np.random.default_rng(2).random((12, 4, 6)) > 0.5
    kw: dict = {}
    chunks = (4, 4, 6)
    if layout == "blosc":
        kw["compressors"] = [BloscCodec()]
    elif layout == "gzip":
        kw["compressors"] = [GzipCodec()]
    elif layout == "no_compressor":
        kw["compressors"] = None
    elif layout == "chunked_along_columns":
        chunks = (4, 4, 3)
    else:
        kw["shards"] = (4, 4, 6)
    arr = _array(tmp_path, data, chunks, **kw)
    buf = np.empty((4, 4, 6), bool)
    fast = _decode_row_chunk_into(arr, 0, 4, buf)
    assert (fast is not None) == (layout == "no_compressor")  # bytes only is ours too
    for start in (0, 4, 8):
        np.testing.assert_array_equal(read_rows(arr, start, start + 4, "a", [], out=buf), data[start:start + 4])
    # rows that are not exactly one chunk, or a buffer of the wrong shape, go through Zarr as well
    assert _decode_row_chunk_into(arr, 2, 6, buf) is None
    assert _decode_row_chunk_into(arr, 0, 4, np.empty((5, 4, 6), bool)) is None
    np.testing.assert_array_equal(read_rows(arr, 2, 6, "a", [], out=buf), data[2:6])


def test_corrupt_and_missing_chunks(tmp_path):
    data = np.ones((8, 3, 3), bool)
    arr = _array(tmp_path, data, (4, 3, 3))
    buf = np.empty((4, 3, 3), bool)
    chunk_file = tmp_path / "a.zarr" / "c" / "1" / "0" / "0"
    chunk_file.write_bytes(chunk_file.read_bytes()[:5])  # truncated
    problems: list[Problem] = []
    assert read_rows(arr, 4, 8, "gt/region_mask", problems, out=buf) is None
    assert len(problems) == 1 and "rows 4-7 unreadable, the chunk is corrupt or truncated" in problems[0].message
    chunk_file.unlink()  # never written: the fill value, as Zarr reads it (validation reports the gap)
    np.testing.assert_array_equal(read_rows(arr, 4, 8, "gt/region_mask", [], out=buf), np.zeros((4, 3, 3), bool))
    np.testing.assert_array_equal(read_rows(arr, 0, 4, "gt/region_mask", [], out=buf), data[:4])


def test_numpy_arrays_are_read_as_they_are():
    data = np.arange(24).reshape(6, 2, 2) % 3 == 0
    buf = np.empty((4, 2, 2), bool)
    assert _decode_row_chunk_into(data, 0, 4, buf) is None
    np.testing.assert_array_equal(read_rows(data, 0, 4, "a", [], out=buf), data[:4])


def test_scan_groups_cover_every_row_and_report_each_corrupt_chunk(tmp_path):
    from xbench.schemas.store import scan_row_groups

    data = np.arange(50 * 3, dtype=np.float32).reshape(50, 3)
    arr = _array(tmp_path, data, (4, 3))
    for max_bytes in (1, 40, 10**9):  # one chunk, a few chunks, everything per read
        got = dict(scan_row_groups(arr, "s", [], max_bytes=max_bytes))
        np.testing.assert_array_equal(np.concatenate([got[k] for k in sorted(got)]), data)
    for c in ("2", "5"):
        f = tmp_path / "a.zarr" / "c" / c / "0"
        f.write_bytes(f.read_bytes()[:3])
    problems: list[Problem] = []
    got = dict(scan_row_groups(arr, "sub/x/scores", problems, max_bytes=10**9))
    assert [p.message.split(" unreadable")[0] for p in problems] == ["rows 8-11", "rows 20-23"]
    assert sorted(got) == [s for s in range(0, 50, 4) if s not in (8, 20)]
    for s, block in got.items():
        np.testing.assert_array_equal(block, data[s:s + 4])
