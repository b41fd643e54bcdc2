"""schemas/budget.py piece by piece, each against an independent computation."""
from __future__ import annotations

import gzip
import json
import os
import zlib

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from numcodecs import Blosc, Zstd

from xbench.schemas import budget
from xbench.schemas.budget import DecodeLimitError

from hostile import write_zip, zstd_rle_frame


def _depth(value) -> int:
    """Nesting depth by recursion over the parsed document (the independent reference)."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\[]{} ', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='k"[{\\', max_size=3), inner, max_size=3),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_json_depth_matches_a_recursive_count(value):
    assert budget.json_depth(json.dumps(value)) == _depth(value)


def test_json_document_problems():
    lim = budget.Limits(max_json_bytes=100, max_json_depth=3)
    assert budget.json_document_problems(b'{"a": [[1]]}', "w", lim) == []
    assert "nests 4 levels" in str(budget.json_document_problems(b'{"a": [[[1]]]}', "w", lim)[0])
    assert "larger than" in str(budget.json_document_problems(b"{}" + b" " * 99, "w", lim)[0])
    assert "not UTF-8 (byte 2)" in str(budget.json_document_problems(b'{"\xff": 1}', "w", lim)[0])
    assert "not valid JSON" in str(budget.json_document_problems(b"{", "w", lim)[0])
    assert "must be a JSON object" in str(budget.json_document_problems(b"[1]", "w", lim)[0])
    assert "key 'a' twice" in str(budget.json_document_problems(b'{"a": 1, "a": 2}', "w", lim)[0])


@pytest.mark.parametrize("n", [0, 1, 255, 256, 300, 65_791, 65_792, 70_000, 2**20])
def test_zstd_content_size_reads_every_header_width(n):
    frame = bytes(Zstd(level=1).encode(np.arange(n, dtype=np.uint8)))
    assert budget.zstd_content_size(frame) == n
    assert bytes(budget.zstd_decode_bounded(frame, n)) == np.arange(n, dtype=np.uint8).tobytes()


def test_zstd_decode_bounded_refuses_more_than_declared():
    data = np.arange(1000, dtype=np.uint16)
    frame = bytes(Zstd().encode(data))
    out = np.empty(1000, np.uint16)
    budget.zstd_decode_bounded(frame, 2000, out=out)
    np.testing.assert_array_equal(out, data)
    with pytest.raises(DecodeLimitError, match="declares 2000 decoded bytes; its array allows 1999"):
        budget.zstd_decode_bounded(frame, 1999)
    with pytest.raises(DecodeLimitError, match="allows 1998"):  # into a buffer: exactly its size
        budget.zstd_decode_bounded(frame, 4000, out=np.empty(999, np.uint16))
    with pytest.raises(DecodeLimitError, match="does not declare its decoded size"):
        budget.zstd_decode_bounded(zstd_rle_frame(1000), 4000)
    with pytest.raises(DecodeLimitError, match="not a zstd frame"):
        budget.zstd_decode_bounded(b"hello world", 4000)
    assert bytes(budget.zstd_decode_bounded(zstd_rle_frame(300_000, declare=300_000), 300_000)) == bytes(300_000)


def test_gzip_decode_bounded():
    data = os.urandom(5000)
    two_members = gzip.compress(data[:2000]) + gzip.compress(data[2000:])
    assert bytes(budget.gzip_decode_bounded(two_members, 5000)) == data
    assert bytes(budget.gzip_decode_bounded(zlib.compress(data), 5000)) == data
    with pytest.raises(DecodeLimitError, match="more than the 4999 bytes"):
        budget.gzip_decode_bounded(two_members, 4999)
    with pytest.raises(DecodeLimitError, match="truncated"):
        budget.gzip_decode_bounded(gzip.compress(data)[:-20], 5000)


def test_blosc_decode_bounded():
    data = np.arange(4000, dtype=np.int32)
    enc = bytes(Blosc(cname="zstd").encode(data))
    assert np.array_equal(budget.blosc_decode_bounded(enc, 16000).view(np.int32), data)
    with pytest.raises(DecodeLimitError, match="declares 16000 decoded bytes"):
        budget.blosc_decode_bounded(enc, 15999)
    with pytest.raises(DecodeLimitError, match="truncated"):
        budget.blosc_decode_bounded(enc[:-10], 16000)


@pytest.mark.parametrize("compressor", [zarr.codecs.ZstdCodec(level=3), zarr.codecs.GzipCodec(level=1),
                                        zarr.codecs.BloscCodec(cname="lz4"), None])
@pytest.mark.parametrize("dtype", ["float32", "int8", "str"])
def test_zarr_reads_through_the_bounded_decoders(tmp_path, compressor, dtype):
    """Round trip through Zarr (which now picks the bounded classes), partial edge chunks included."""
    rng = np.random.default_rng(0)
    data = (np.array([f"id-{i}" * (i % 4) for i in range(37)]) if dtype == "str"
            else rng.normal(size=(37, 5)).astype(dtype))
    zarr.create_array(str(tmp_path / "a.zarr"), data=data, chunks=(8,) + data.shape[1:],
                      compressors=compressor if compressor is not None else "auto")
    arr = zarr.open_array(str(tmp_path / "a.zarr"))  # a store read from disk: its codecs parsed from zarr.json
    bounded = (budget.BoundedZstdCodec, budget.BoundedGzipCodec, budget.BoundedBloscCodec)
    assert isinstance(arr.metadata.codecs[-1], bounded) or (compressor is None and dtype != "str")
    np.testing.assert_array_equal(np.asarray(arr[...]).astype(data.dtype), data)


def test_parse_size_and_is_int():
    assert budget.parse_size("2GiB") == 2 * 2**30
    assert budget.parse_size("512M") == 512 * 2**20
    assert budget.parse_size("1.5g") == 3 * 2**29
    assert budget.parse_size("1000") == 1000
    assert budget.parse_size("1024T") == budget.MAX_SIZE == 2**50  # the bound itself is taken, one past it not
    for bad in ("", "lots", "-1G", "nan", "0", "1025T", "1e30", "100000000000000000000000GiB"):
        with pytest.raises(ValueError):
            budget.parse_size(bad)
    assert budget.is_int(1) and not budget.is_int(True) and not budget.is_int(1.0)


def test_inspect_store_refuses_special_files_and_counts(tmp_path):
    store = tmp_path / "s.zarr"
    (store / "a").mkdir(parents=True)
    (store / "zarr.json").write_text("{}")
    (store / "a" / "zarr.json").write_text("{}")
    inv, problems = budget.inspect_store(store)
    assert problems == [] and inv.sizes == {"zarr.json": 2, "a/zarr.json": 2}
    os.mkfifo(store / "a" / "pipe")
    _, problems = budget.inspect_store(store)
    assert [str(p) for p in problems] == [f"{store}/a/pipe: is not a regular file (device, pipe or socket)"]
    (store / "a" / "pipe").unlink()
    for i in range(5):
        (store / f"f{i}").write_bytes(b"")
    _, problems = budget.inspect_store(store, budget.Limits(max_files=4))
    assert "holds more than 4 files" in str(problems[-1])
    _, problems = budget.inspect_store(store, budget.Limits(max_metadata_bytes=3))
    assert "zarr.json documents hold" in str(problems[0])


def test_inspect_zip_names(tmp_path):
    ok = write_zip(tmp_path / "ok.zarr.zip", [("zarr.json", b"{}"), ("a/", b""), ("a/zarr.json", b"{}")])
    inv, problems = budget.inspect_store(ok)
    assert problems == [] and set(inv.sizes) == {"zarr.json", "a/zarr.json"}
    for name in ("/abs", "a/../../x", "C:/x", "a\\b"):
        bad = write_zip(tmp_path / "bad.zarr.zip", [("zarr.json", b"{}"), (name, b"x")])
        _, problems = budget.inspect_store(bad)
        assert [p.message for p in problems] == ["zip member name is absolute or climbs out with '..'"], name
    many = write_zip(tmp_path / "many.zarr.zip", [(f"k{i}", b"") for i in range(10)])
    assert "holds 10 members; the limit is 9" in str(budget.inspect_store(many, budget.Limits(max_files=9))[1][0])


def test_max_chunk_bytes_follows_the_memory_budget():
    assert budget.Limits(max_memory=2 * 2**30).max_chunk_bytes == 256 * 2**20
    assert budget.Limits(max_memory=64 * 2**30).max_chunk_bytes == 512 * 2**20
    assert budget.Limits(max_memory=2**20).max_chunk_bytes == 2**20
