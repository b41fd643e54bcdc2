"""A hostile corpus: one function per attack, each writing a tiny crafted store beside a valid phantom one.

Every attack starts from a valid submission (``schema_stores.write_submission``: 12 cases, 3 classes, 7x7
float16 maps, chunks of 5 cases, codecs bytes + zstd) and changes as little as it takes. Bombs are crafted
byte by byte (zstd RLE blocks, repeated deflate segments), so a store that would inflate to gigabytes costs
kilobytes and milliseconds to write. ``ATTACKS`` maps a name to ``(make, expected)``: ``make(tmp, gt)``
returns the store to hand to the tools, ``expected`` is a fragment of the one problem line that names the
cause.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np

from schema_stores import N, write_submission

GiB = 2**30


# -- crafted payloads ----------------------------------------------------------------------------------------
def zstd_rle_frame(decoded: int, *, declare: int | None = None) -> bytes:
    """A zstd frame of RLE blocks (4 bytes per 128 KiB of zeros) that decodes to ``decoded`` bytes.

    ``declare``: the content size written in the header (None: left out, as a streaming encoder does).
    """
    if declare is None:
        header = b"\x28\xb5\x2f\xfd" + bytes([0x00, 0x38])  # no content size; window 128 KiB
    else:
        header = b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + struct.pack("<Q", declare)  # single segment, 8-byte size
    block = 128 * 1024
    full, rest = divmod(decoded, block)
    sizes = [block] * full + ([rest] if rest else [])
    body = bytearray()
    for i, size in enumerate(sizes):
        last = i == len(sizes) - 1
        body += (last | (1 << 1) | (size << 3)).to_bytes(3, "little") + b"\x00"
    return header + bytes(body)


def deflate_bomb(mib: int, *, wbits: int) -> bytes:
    """A deflate stream of ``mib`` MiB of zeros built from one repeated full-flush segment (no valid trailer:
    an inflater allocates everything before it could notice)."""
    zeros = bytes(2**20)
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    first = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    segment = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    return first + segment * (mib - 1)


def write_zip(path: Path, members: list[tuple[str, bytes]], *, deflated: dict[str, int] | None = None,
              links: tuple[str, ...] = ()) -> Path:
    """A zip file written field by field, so it can hold what ``zipfile`` would not write: duplicate and
    climbing names, links, and deflated members whose declared size is ``deflated[name]``."""
    deflated = deflated or {}
    out, central = bytearray(), bytearray()
    for name, data in members:
        raw = name.encode()
        method, size = (8, deflated[name]) if name in deflated else (0, len(data))
        crc = zlib.crc32(data) if method == 0 else 0
        attr = (0o120777 << 16) if name in links else (0o100644 << 16)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x0314, 20, 0, method, 0, 0x21, crc, len(data), size,
                               len(raw), 0, 0, 0, 0, attr, len(out)) + raw
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), size, len(raw), 0) + raw + data
    n = len(members)
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(central), len(out), 0)
    path.write_bytes(bytes(out + central + eocd))
    return path


def store_members(store: Path) -> list[tuple[str, bytes]]:
    return sorted((p.relative_to(store).as_posix(), p.read_bytes()) for p in store.rglob("*") if p.is_file())


# -- small editing helpers --------------------------------------------------------------------------------------
def base(tmp: Path, name: str = "sub.zarr", **kw) -> Path:
    return write_submission(tmp / name, **kw)


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def set_codecs(arr: Path, codecs: list) -> None:
    edit_json(arr / "zarr.json", lambda d: d.__setitem__("codecs", codecs))


def nested(depth: int):
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
ZSTD = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}


# -- the attacks ---------------------------------------------------------------------------------------------
def zstd_bomb(tmp, gt):
    """A saliency chunk whose zstd header declares 4 GiB."""
    s = base(tmp)
    (s / "phantom/saliency/c/0/0/0/0").write_bytes(zstd_rle_frame(4 * GiB, declare=4 * GiB))
    return s


def zstd_stream_bomb(tmp, gt):
    """A saliency chunk in a zstd frame without a content size that inflates to 2 GiB."""
    s = base(tmp)
    (s / "phantom/saliency/c/0/0/0/0").write_bytes(zstd_rle_frame(2 * GiB))
    return s


def zstd_lying_size(tmp, gt):
    """A frame that declares exactly the chunk's size but holds 2 GiB of blocks."""
    s = base(tmp)
    (s / "phantom/saliency/c/0/0/0/0").write_bytes(zstd_rle_frame(2 * GiB, declare=5 * 3 * 7 * 7 * 2))
    return s


def gzip_bomb(tmp, gt):
    """Saliency coded with gzip; one chunk inflates to 2 GiB."""
    s = base(tmp)
    sal = s / "phantom/saliency"
    set_codecs(sal, [BYTES, {"name": "gzip", "configuration": {"level": 5}}])
    good = np.zeros((5, 3, 7, 7), "<f2").tobytes()
    for key in ("c/1/0/0/0", "c/2/0/0/0"):
        (sal / key).write_bytes(zlib.compress(good, wbits=31))
    (sal / "c/0/0/0/0").write_bytes(deflate_bomb(2048, wbits=31))
    return s


def zip_deflate_bomb(tmp, gt):
    """A .zarr.zip whose saliency chunk member is deflated and declares 3 GiB."""
    s = base(tmp)
    members = store_members(s)
    key = "phantom/saliency/c/0/0/0/0"
    members = [(k, deflate_bomb(3072, wbits=-15) if k == key else v) for k, v in members]
    return write_zip(tmp / "bomb.zarr.zip", members, deflated={key: 3 * GiB})


def many_tiny_chunks(tmp, gt):
    """A saliency of 12x3x1024x1024 in 1x1x1x1 chunks: 37 million chunks declared, none stored."""
    s = base(tmp)
    sal = s / "phantom/saliency"
    shutil.rmtree(sal / "c")

    def change(d):
        d["shape"] = [N, 3, 1024, 1024]
        d["chunk_grid"]["configuration"]["chunk_shape"] = [1, 1, 1, 1]
    edit_json(sal / "zarr.json", change)
    return s


def shard_amplification(tmp, gt):
    """One shard holding 2.4 million 4x4 inner chunks."""
    s = base(tmp)
    sal = s / "phantom/saliency"
    shutil.rmtree(sal / "c")

    def change(d):
        d["shape"] = [N, 3, 1024, 1024]
        d["chunk_grid"]["configuration"]["chunk_shape"] = [N, 3, 1024, 1024]
        d["codecs"] = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [1, 1, 4, 4], "codecs": [BYTES, ZSTD],
            "index_codecs": [BYTES, {"name": "crc32c"}], "index_location": "end"}}]
    edit_json(sal / "zarr.json", change)
    (sal / "c/0/0/0").mkdir(parents=True)
    (sal / "c/0/0/0/0").write_bytes(b"\0" * 64)
    return s


def ratio_time_bomb(tmp, gt):
    """1,000 cases of 1024x1024 float32 maps (12 GiB decoded) stored as 250 RLE frames of 200 bytes."""
    ids = [f"case-{i:04d}" for i in range(1000)]
    s = base(tmp, ids=ids, cases_per_block=250, map_shape=(1, 1))
    sal = s / "phantom/saliency"
    shutil.rmtree(sal / "c")

    def change(d):
        d["shape"] = [1000, 3, 1024, 1024]
        d["data_type"] = "float32"
        d["chunk_grid"]["configuration"]["chunk_shape"] = [4, 3, 1024, 1024]
    edit_json(sal / "zarr.json", change)
    frame = zstd_rle_frame(4 * 3 * 1024 * 1024 * 4, declare=4 * 3 * 1024 * 1024 * 4)
    for i in range(250):
        (sal / f"c/{i}/0/0").mkdir(parents=True, exist_ok=True)
        (sal / f"c/{i}/0/0/0").write_bytes(frame)
    return s


def long_case_id(tmp, gt):
    """The case_id chunk: one string of 1 GiB (its zstd frame declares it)."""
    s = base(tmp)
    # vlen-utf8 would be a count, then each string's length and bytes; the declared size alone is refused
    (s / "phantom/case_id/c/0").write_bytes(zstd_rle_frame(GiB + 8, declare=GiB + 8))
    return s


def case_id_too_long(tmp, gt):
    """A case id of 300 characters (small and well-formed, but past the 256-character cap)."""
    ids = [f"case-{i:03d}" for i in range(N)]
    ids[3] = "x" * 300
    return base(tmp, ids=ids)


def huge_declared_cases(tmp, gt):
    """case_id declares 9 million cases (scores and ids would not fit the memory budget)."""
    s = base(tmp)
    for arr, shape, chunks in (("case_id", [9_000_000], [100_000]), ("scores", [9_000_000, 3], [100_000, 3]),
                               ("saliency", [9_000_000, 3, 1, 1], [100_000, 3, 1, 1])):
        def change(d, shape=shape, chunks=chunks):
            d["shape"] = shape
            d["chunk_grid"]["configuration"]["chunk_shape"] = chunks
        edit_json(s / "phantom" / arr / "zarr.json", change)
    return s


def deep_json_root(tmp, gt):
    """Root zarr.json attributes nested 500 deep."""
    s = base(tmp)
    edit_json(s / "zarr.json", lambda d: d["attributes"]["xbench"].__setitem__("provenance", nested(500)))
    return s


def deep_json_child(tmp, gt):
    """A dataset group's zarr.json nested 500 deep."""
    s = base(tmp)
    edit_json(s / "phantom/zarr.json", lambda d: d["attributes"].__setitem__("extra", nested(500)))
    return s


def huge_json(tmp, gt):
    """A 6 MiB root zarr.json."""
    s = base(tmp)
    edit_json(s / "zarr.json", lambda d: d["attributes"]["xbench"].__setitem__("notes", "x" * (6 * 2**20)))
    return s


def non_utf8_metadata(tmp, gt):
    """A dataset group's zarr.json with a byte that is not UTF-8."""
    s = base(tmp)
    path = s / "phantom/zarr.json"
    path.write_bytes(path.read_bytes().replace(b'"score_kind"', b'"score\xff_kind"'))
    return s


def schema_true(tmp, gt):
    """Root attribute xbench.schema = true (a bool is an int in Python)."""
    s = base(tmp)
    edit_json(s / "zarr.json", lambda d: d["attributes"]["xbench"].__setitem__("schema", True))
    return s


def zero_chunk_dim(tmp, gt):
    """A chunk shape with a zero."""
    s = base(tmp)
    edit_json(s / "phantom/scores/zarr.json", lambda d: d["chunk_grid"]["configuration"].__setitem__("chunk_shape", [0, 3]))
    return s


def unhashable_unsupported(tmp, gt):
    """Attribute unsupported = [["Nodule"]]."""
    s = base(tmp)
    edit_json(s / "phantom/zarr.json", lambda d: d["attributes"].__setitem__("unsupported", [["Nodule"]]))
    return s


def unknown_codec(tmp, gt):
    """Saliency coded with bz2 (numcodecs), which cannot be bounded before decoding."""
    s = base(tmp)
    set_codecs(s / "phantom/saliency", [BYTES, {"name": "numcodecs.bz2", "configuration": {"level": 1}}])
    return s


def empty_shard_index(tmp, gt):
    """scores sharded; the one shard's index lists no inner chunk (it would read as the NaN fill)."""
    s = base(tmp)
    sc = s / "phantom/scores"
    shutil.rmtree(sc / "c")

    def change(d):
        d["chunk_grid"]["configuration"]["chunk_shape"] = [N, 3]
        d["codecs"] = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [4, 3], "codecs": [BYTES, ZSTD],
            "index_codecs": [BYTES, {"name": "crc32c"}], "index_location": "end"}}]
    edit_json(sc / "zarr.json", change)
    import google_crc32c

    index = np.full((3, 1, 2), 2**64 - 1, "<u8").tobytes()
    (sc / "c/0").mkdir(parents=True)
    (sc / "c/0/0").write_bytes(index + struct.pack("<I", google_crc32c.value(index)))
    return s


def oversized_file(tmp, gt):
    """A 3 GiB (sparse) file as a saliency chunk."""
    s = base(tmp)
    with open(s / "phantom/saliency/c/0/0/0/0", "r+b") as f:
        f.truncate(3 * GiB)
    return s


def symlink_chunk(tmp, gt):
    """A scores chunk that is a link to the ground truth's labels chunk, outside the store."""
    s = base(tmp)
    chunk = s / "phantom/scores/c/0/0"
    chunk.unlink()
    os.symlink(Path(gt).resolve() / "phantom/labels/c/0/0", chunk)
    return s


def zip_duplicate(tmp, gt):
    """A zip store with the scores chunk twice (zipfile would read the last one)."""
    members = store_members(base(tmp))
    key = "phantom/scores/c/0/0"
    return write_zip(tmp / "dup.zarr.zip", members + [(key, dict(members)[key])])


def zip_dotdot(tmp, gt):
    """A zip store with a member named ../escape."""
    return write_zip(tmp / "dots.zarr.zip", store_members(base(tmp)) + [("../escape", b"x")])


def zip_link(tmp, gt):
    """A zip store whose scores chunk is a symbolic link member."""
    members = store_members(base(tmp))
    return write_zip(tmp / "link.zarr.zip", members, links=("phantom/scores/c/0/0",))


ATTACKS = {
    "zstd_bomb": (zstd_bomb, "zstd chunk declares 4294967296 decoded bytes"),
    "zstd_stream_bomb": (zstd_stream_bomb, "zstd frame does not declare its decoded size"),
    "zstd_lying_size": (zstd_lying_size, "Destination buffer is too small"),
    "gzip_bomb": (gzip_bomb, "gzip chunk decodes to more than"),
    "zip_deflate_bomb": (zip_deflate_bomb, "zip member inflates to 3072 MiB"),
    "many_tiny_chunks": (many_tiny_chunks, "declares 37748736 chunks"),
    "shard_amplification": (shard_amplification, "declares 2359296 chunks"),
    "ratio_time_bomb": (ratio_time_bomb, "refused as a decompression bomb"),
    "long_case_id": (long_case_id, "12 string(s) of at most 1024 bytes"),
    "case_id_too_long": (case_id_too_long, "case id 3 is 300 characters long; the limit is 256"),
    "huge_declared_cases": (huge_declared_cases, "more than a quarter of the memory budget"),
    "deep_json_root": (deep_json_root, "zarr.json: metadata nests 503 levels deep; the limit is 32"),
    "deep_json_child": (deep_json_child, "phantom/zarr.json: metadata nests 502 levels deep; the limit is 32"),
    "huge_json": (huge_json, "metadata document is larger than 4 MiB"),
    "non_utf8_metadata": (non_utf8_metadata, "phantom/zarr.json: metadata is not UTF-8"),
    "schema_true": (schema_true, "xbench.schema is True"),
    "zero_chunk_dim": (zero_chunk_dim, "scores"),
    "unhashable_unsupported": (unhashable_unsupported, "attribute 'unsupported' must list class names"),
    "unknown_codec": (unknown_codec, "codec 'numcodecs.bz2' is not allowed"),
    "empty_shard_index": (empty_shard_index, "lists 3 of its 3 inner chunks as absent"),
    "oversized_file": (oversized_file, "is 3072 MiB; no chunk may be larger than"),
    "symlink_chunk": (symlink_chunk, "scores/c/0/0: is a symbolic link"),
    "zip_duplicate": (zip_duplicate, "zip member name appears twice"),
    "zip_dotdot": (zip_dotdot, "climbs out with '..'"),
    "zip_link": (zip_link, "zip member is a symbolic link"),
}
