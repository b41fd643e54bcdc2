"""The resource budget for reading stores that strangers made (contract §"Exit codes": untrusted input).

A submission is read unattended next to the private ground truth, so nothing it declares may make a
reader allocate or compute without bound. Three layers, cheapest first:

1. :func:`inspect_store`, before Zarr parses anything: the store's files (no symlinks, no special
   files, no zip member with ``..``, an absolute name or a duplicate), how many there are, their sizes,
   and every ``zarr.json`` (size, UTF-8, nesting depth counted without recursion, an object).
2. :func:`array_problems` and :func:`stored_chunk_problems`, from metadata and the file listing alone:
   allowed codecs only, no zero chunk dimension, a cap on chunks per array, each stored chunk at most
   ``max_ratio`` times smaller than what it declares to decode to (a floor keeps tiny and constant chunks
   legal), and every shard's index complete.
3. Bounded decoders: importing this module makes Zarr decode ``zstd``, ``gzip`` and ``blosc`` chunks with
   the classes below, which never produce more than the chunk's declared size (plus a small slack), so a
   chunk that would inflate to gigabytes fails after allocating its declared size, not the bomb's.

:class:`Limits` holds the numbers; the command-line tools set them once (``--max-memory``) with
:func:`set_limits`, and a :class:`Watchdog` enforces ``--max-memory`` and ``--timeout`` on the
whole process as a last resort. Everything here is pure Python over numcodecs and zlib: no torch.
"""
from __future__ import annotations

import json
import math
import os
import stat
import sys
import threading
import time
import zipfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numcodecs import Blosc, Zstd
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

from xbench.schemas import _zarr
from xbench.schemas._zarr import as_numpy_array_wrapper
from xbench.schemas.errors import InputLimitError, Problem
from xbench.schemas.inputs import DEFAULT_TIMEOUT, DuplicateKeyError, json_depth, unique_object  # noqa: F401  (json_depth: part of this module's interface)

MiB = 2**20
GiB = 2**30


@dataclass(frozen=True)
class Limits:
    """Caps on what reading one store may cost. Defaults suit the paper's scale with ~10x headroom."""

    max_memory: int = 2 * GiB        # whole process, resident (--max-memory)
    timeout: float = DEFAULT_TIMEOUT  # seconds, whole command (--timeout); 0 = none
    max_json_bytes: int = 4 * MiB    # one zarr.json (attributes carry prompts and provenance)
    max_json_depth: int = 32         # nesting of objects and arrays in one zarr.json
    max_metadata_bytes: int = 64 * MiB  # all zarr.json documents of a store together
    max_files: int = 200_000         # entries in a store (directory entries or zip members)
    max_chunks: int = 100_000        # stored objects one array may declare; each costs a read and a decode
    max_ratio: int = 1_000           # declared decoded bytes per stored byte of one array's chunks ...
    decoded_floor: int = 1 * GiB     # ... checked only beyond this much (sparse masks and constant maps compress far)
    max_string_bytes: int = 1024     # one case id, class name or other string element, UTF-8
    max_name_chars: int = 256        # case ids and class names, characters

    @property
    def max_chunk_bytes(self) -> int:
        """Largest decoded chunk: a reader may hold a few at once beside their decoded copies."""
        return max(MiB, min(512 * MiB, self.max_memory // 8))

    @property
    def max_file_bytes(self) -> int:
        """Largest file a store may hold: a chunk stored uncompressed, plus room for a codec's framing."""
        return self.max_chunk_bytes + MiB


_limits = Limits()


def limits() -> Limits:
    return _limits


def set_limits(new: Limits | None = None, **changes) -> Limits:
    """Replace the process's limits (the command-line tools call this once, from their flags)."""
    global _limits
    _limits = replace(new or _limits, **changes)
    return _limits


#: the largest --max-memory taken (1 PiB): a budget is a bound, not a way around one
MAX_SIZE = 2**50


def parse_size(text: str) -> int:
    """'2GiB', '512M', '1.5G', '1000000' -> bytes (binary units; a bare number is bytes)."""
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(s[-1:], 1)
    number = s[:-1] if scale != 1 else s
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a size; write e.g. 2GiB, 512MiB or a number of bytes") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    if value * scale > MAX_SIZE:  # a bound like every numeric option's (docs/contract.md, "Option bounds")
        raise ValueError(f"{text!r} is more than the largest size taken, 1 PiB")
    return int(value * scale)


def is_int(value) -> bool:
    """A JSON integer: Python's bool is an int, but ``true`` is not ``1`` in a store's metadata."""
    return isinstance(value, int) and not isinstance(value, bool)


# -- layer 1: files and metadata documents ---------------------------------------------------------------
@dataclass
class Inventory:
    """What a store holds on disk: ``sizes[key]`` = bytes Zarr reads for that key; ``stored[key]`` = bytes
    it occupies (smaller for a deflated zip member)."""

    sizes: dict[str, int]
    stored: dict[str, int]


def json_document_problems(raw: bytes, where: str, lim: Limits) -> list[Problem]:
    """Problems of one ``zarr.json`` read as at most ``max_json_bytes + 1`` bytes."""
    if len(raw) > lim.max_json_bytes:
        return [Problem(where, f"metadata document is larger than {lim.max_json_bytes // MiB} MiB")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [Problem(where, f"metadata is not UTF-8 (byte {exc.start})")]
    # Scanning is cheap (bounded by the size cap) and keeps json.loads and Zarr away from deep nesting,
    # where they fail with RecursionError. Fewer brackets than the cap cannot nest past it: no scan.
    depth = json_depth(text) if text.count("[") + text.count("{") > lim.max_json_depth else 0
    if depth > lim.max_json_depth:
        return [Problem(where, f"metadata nests {depth} levels deep; the limit is {lim.max_json_depth}")]
    try:
        doc = json.loads(text, object_pairs_hook=unique_object)
    except DuplicateKeyError as exc:  # Zarr's parser would keep the last value without a word
        return [Problem(where, f"metadata has the key {exc.key[:80]!r} twice in one object")]
    except ValueError as exc:
        return [Problem(where, f"metadata is not valid JSON ({exc})")]
    if not isinstance(doc, dict):
        return [Problem(where, "metadata must be a JSON object")]
    if doc.get("node_type") == "array":  # before Zarr builds (and warns about) codecs it would refuse later
        return _codec_problems(_raw_codecs(doc.get("codecs")), where)
    return []


def _walk_directory(root: Path, lim: Limits) -> tuple[dict[str, int], list[Problem]]:
    """Regular files under ``root`` by key, without following any link; refuses links and special files."""
    sizes: dict[str, int] = {}
    problems: list[Problem] = []
    todo = [""]
    while todo:
        rel = todo.pop()
        try:
            entries = list(os.scandir(root / rel if rel else root))
        except OSError as exc:
            return sizes, [Problem(f"{root}/{rel}", f"cannot list ({exc.strerror})")]
        for entry in entries:
            key = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink():
                problems.append(Problem(f"{root}/{key}", "is a symbolic link; stores must hold plain files only"))
            elif entry.is_dir(follow_symlinks=False):
                todo.append(key)
            elif entry.is_file(follow_symlinks=False):
                sizes[key] = entry.stat(follow_symlinks=False).st_size
                if sizes[key] > lim.max_file_bytes:
                    problems.append(Problem(f"{root}/{key}", f"is {sizes[key] / MiB:.0f} MiB; no chunk may be larger than "
                                                             f"{lim.max_file_bytes // MiB} MiB"))
            else:
                problems.append(Problem(f"{root}/{key}", "is not a regular file (device, pipe or socket)"))
            if len(sizes) + len(problems) > lim.max_files:
                return sizes, problems + [Problem(str(root), f"holds more than {lim.max_files} files; the limit is {lim.max_files}")]
    return sizes, problems


def _read_capped(path: Path, cap: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        return f.read(cap + 1)


def open_zip(path: Path, lim: Limits) -> tuple[zipfile.ZipFile | None, list[Problem]]:
    """A zip file from outside opened only after its end record's entry count and central-directory size are
    within ``lim`` (zipfile would parse a directory of millions of entries whole); (None, problems) otherwise."""
    where = str(path)
    try:
        with open(path, "rb") as fp:
            end = zipfile._EndRecData(fp)  # the central directory's size, before zipfile parses it
    except OSError as exc:
        return None, [Problem(where, f"cannot read ({exc.strerror})")]
    if end is None:
        return None, [Problem(where, "not a readable zip file (File is not a zip file)")]
    if end[zipfile._ECD_ENTRIES_TOTAL] > lim.max_files or end[zipfile._ECD_SIZE] > lim.max_files * 1024:
        return None, [Problem(where, f"holds {end[zipfile._ECD_ENTRIES_TOTAL]} members; the limit is {lim.max_files}")]
    try:
        return zipfile.ZipFile(path), []
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as exc:
        return None, [Problem(where, f"not a readable zip file ({exc})")]


def _zip_inventory(path: Path, zf: zipfile.ZipFile, lim: Limits) -> tuple[dict[str, int], dict[str, int], list[Problem]]:
    sizes: dict[str, int] = {}
    stored: dict[str, int] = {}
    problems: list[Problem] = []
    for info in zf.infolist():
        name = info.filename
        where = f"{path}/{name}"
        parts = name.rstrip("/").split("/")
        if name.startswith("/") or "\\" in name or ".." in parts or (len(name) > 1 and name[1] == ":"):
            problems.append(Problem(where, "zip member name is absolute or climbs out with '..'"))
            continue
        if stat.S_ISLNK(info.external_attr >> 16):
            problems.append(Problem(where, "zip member is a symbolic link; stores must hold plain files only"))
            continue
        if info.flag_bits & 0x1:
            problems.append(Problem(where, "zip member is encrypted"))
            continue
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            problems.append(Problem(where, "zip member uses a compression other than stored or deflate"))
            continue
        if name.endswith("/"):
            continue
        if name in sizes:
            problems.append(Problem(where, "zip member name appears twice; which one is read would be arbitrary"))
            continue
        if info.file_size > lim.max_file_bytes:  # zipfile inflates a member up to its declared size, no further
            problems.append(Problem(where, f"zip member inflates to {info.file_size / MiB:.0f} MiB; no chunk may be larger than "
                                           f"{lim.max_file_bytes // MiB} MiB"))
            continue
        sizes[name] = info.file_size
        stored[name] = info.compress_size
    return sizes, stored, problems


def _metadata_problems(path: Path, sizes: dict[str, int], read, lim: Limits) -> list[Problem]:
    """Every ``zarr.json`` of the store, read with ``read(key, cap)`` (at most ``cap + 1`` bytes)."""
    keys = [k for k in sizes if k == "zarr.json" or k.endswith("/zarr.json")]
    total = sum(sizes[k] for k in keys)
    if total > lim.max_metadata_bytes:
        return [Problem(str(path), f"its zarr.json documents hold {total / MiB:.0f} MiB; the limit is {lim.max_metadata_bytes // MiB} MiB")]
    problems = []
    for key in keys:
        try:
            raw = read(key, lim.max_json_bytes)
        except (OSError, zipfile.BadZipFile, zlib.error) as exc:
            problems.append(Problem(f"{path}/{key}", f"unreadable ({getattr(exc, 'strerror', None) or exc})"))
            continue
        problems += json_document_problems(raw, f"{path}/{key}", lim)
    return problems


def inspect_store(path: str | os.PathLike, lim: Limits | None = None) -> tuple[Inventory | None, list[Problem]]:
    """Layer 1 for the store at ``path``: its inventory, or None and every problem found.

    A store with problems here is not handed to Zarr at all. The store path itself may be a link (an
    organiser's mount); nothing inside it may.
    """
    lim = lim or _limits
    path = Path(path)
    if str(path).endswith(".zip"):
        if not path.is_file():
            return None, []  # opening reports the missing store
        zf, problems = open_zip(path, lim)
        if zf is None:
            return None, problems
        with zf:
            sizes, stored, problems = _zip_inventory(path, zf, lim)

            def read(key: str, cap: int) -> bytes:
                with zf.open(key) as f:
                    return f.read(cap + 1)

            problems = problems or _metadata_problems(path, sizes, read, lim)
    else:
        if not path.is_dir():
            return None, []
        sizes, problems = _walk_directory(path, lim)
        stored = sizes
        problems = problems or _metadata_problems(path, sizes, lambda key, cap: _read_capped(path / key, cap), lim)
    return (None, problems) if problems else (Inventory(sizes, stored), [])


# -- layer 2: arrays, from metadata and the listing --------------------------------------------------------
#: Codecs a store may use: each one's decoded size is known before decoding (or bounded by the decoders
#: below). Anything else (lz4, bz2, numcodecs.* filters) could inflate without a bound and is refused.
ARRAY_BYTES_CODECS = ("bytes", "vlen-utf8", "sharding_indexed")
BYTES_BYTES_CODECS = ("zstd", "gzip", "blosc", "crc32c")
ARRAY_ARRAY_CODECS = ("transpose",)


@dataclass(frozen=True)
class _RawCodec:
    """A codec as written in zarr.json, with the attributes :func:`_codec_problems` reads."""

    name: str
    codecs: tuple = ()
    index_codecs: tuple = ()


def _raw_codecs(value) -> list[_RawCodec]:
    out = []
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str):
            out.append(_RawCodec(item))
            continue
        item = item if isinstance(item, dict) else {}
        conf = item.get("configuration") if isinstance(item.get("configuration"), dict) else {}
        out.append(_RawCodec(str(item.get("name")), tuple(_raw_codecs(conf.get("codecs", []))),
                             tuple(_raw_codecs(conf.get("index_codecs", [])))))
    return out


def _codec_names(codecs) -> list[tuple[str, object]]:
    out = []
    for c in codecs:
        name = c.name if isinstance(c, _RawCodec) else (c.to_dict() if hasattr(c, "to_dict") else {"name": str(c)}).get("name")
        out.append((str(name), c))
    return out


def _codec_problems(codecs, where: str, inner: bool = False) -> list[Problem]:
    allowed = ARRAY_ARRAY_CODECS + ARRAY_BYTES_CODECS + BYTES_BYTES_CODECS
    problems = []
    for name, codec in _codec_names(codecs):
        if name not in allowed or (inner and name == "sharding_indexed"):
            problems.append(Problem(where, f"codec {name!r} is not allowed; use bytes (or vlen-utf8), then zstd, gzip or blosc, optionally in sharding_indexed"))
        elif name == "sharding_indexed":
            problems += _codec_problems(codec.codecs, where, inner=True)
            problems += _codec_problems(codec.index_codecs, where, inner=True)
    return problems


def inner_chunk_shape(arr) -> tuple[int, ...] | None:
    """The chunk shape inside a shard, or None when the array is not sharded."""
    for name, codec in _codec_names(arr.metadata.codecs):
        if name == "sharding_indexed":
            return tuple(int(c) for c in codec.chunk_shape)
    return None


def array_problems(arr, where: str, lim: Limits | None = None) -> list[Problem]:
    """Metadata problems that make reading ``arr`` unsafe or unbounded (checked before any chunk is read)."""
    lim = lim or _limits
    meta = arr.metadata
    if getattr(meta, "zarr_format", None) != 3:
        return [Problem(where, "only Zarr v3 arrays are read")]
    problems = _codec_problems(meta.codecs, where)
    outer = tuple(int(c) for c in meta.chunk_grid.chunk_shape)
    inner = inner_chunk_shape(arr)
    if any(c < 1 for c in outer) or (inner is not None and any(c < 1 for c in inner)):
        return problems + [Problem(where, f"chunk shape {inner or outer} has a zero dimension")]
    if inner is not None and any(o % i for o, i in zip(outer, inner)):
        return problems + [Problem(where, f"shard shape {outer} is not a multiple of the inner chunk shape {inner}")]
    grid = math.prod(math.ceil(s / c) for s, c in zip(arr.shape, outer))
    per_shard = math.prod(o // i for o, i in zip(outer, inner)) if inner else 1
    if grid * per_shard > lim.max_chunks:
        problems.append(Problem(where, f"declares {grid * per_shard} chunks (chunk shape {inner or outer}); the limit is {lim.max_chunks} — use larger chunks"))
    return problems


def decoded_chunk_bytes(arr) -> int:
    """What one stored object of ``arr`` declares to decode to (the whole shard when sharded)."""
    meta = arr.metadata
    dt = arr.dtype
    if dt.kind in "OT" or str(dt).startswith("StringDType"):
        itemsize = 4 + _limits.max_string_bytes
    else:
        itemsize = max(1, dt.itemsize)
    return math.prod(int(c) for c in meta.chunk_grid.chunk_shape) * itemsize


def stored_chunk_problems(arr, where: str, inventory: Inventory | None, lim: Limits | None = None) -> list[Problem]:
    """The stored objects of ``arr`` against what they declare: decoded bytes within ``max_ratio`` times the
    stored bytes (beyond ``decoded_floor``), and, when sharded, every shard's index complete.

    Bounded decoders already cap the memory one chunk costs; this caps the time: thousands of tiny chunks
    that each inflate to their full declared size would otherwise keep a reader busy for hours. The ratio
    is taken over the whole array, not chunk by chunk, because one chunk of sparse masks or constant maps
    legitimately compresses a thousandfold. Missing objects are reported by
    :func:`xbench.schemas.store.missing_chunks`; this only looks at the ones present.
    """
    lim = lim or _limits
    if inventory is None:
        return []
    meta = arr.metadata
    outer = tuple(int(c) for c in meta.chunk_grid.chunk_shape)
    grid = tuple(math.ceil(s / c) for s, c in zip(arr.shape, outer))
    prefix = f"{arr.path}/" if arr.path else ""
    keys = (prefix + meta.encode_chunk_key(tuple(int(c) for c in coords)) for coords in np.ndindex(*grid))
    present = [k for k in keys if k in inventory.sizes]
    declared = decoded_chunk_bytes(arr) * len(present)
    stored = sum(inventory.stored[k] for k in present)
    if declared > lim.decoded_floor and declared > lim.max_ratio * max(1, stored):
        return [Problem(where, f"its {len(present)} chunk(s) store {stored} bytes for {declared / MiB:.0f} MiB decoded "
                               f"(more than {lim.max_ratio}x); refused as a decompression bomb")]
    if inner_chunk_shape(arr) is not None:
        return _shard_index_problems(arr, where, present, inventory)
    return []


def _shard_index_problems(arr, where: str, keys: list[str], inventory: Inventory) -> list[Problem]:
    """Every shard's index must list each inner chunk that overlaps the array, inside the shard: an empty
    entry would read as the fill value, exactly like a chunk that was never written."""
    codec = next(c for n, c in _codec_names(arr.metadata.codecs) if n == "sharding_indexed")
    outer = tuple(int(c) for c in arr.metadata.chunk_grid.chunk_shape)
    inner = tuple(int(c) for c in codec.chunk_shape)
    per_shard = tuple(o // i for o, i in zip(outer, inner))
    index_size = _zarr.shard_index_size(codec, per_shard)
    store, prefix = _zarr.array_location(arr)[0], f"{arr.path}/" if arr.path else ""
    coords_of = {prefix + arr.metadata.encode_chunk_key(tuple(int(c) for c in xs)): xs
                 for xs in np.ndindex(*(math.ceil(s / o) for s, o in zip(arr.shape, outer)))}
    for key in keys:
        size = inventory.sizes[key]
        if size < index_size:
            return [Problem(where, f"shard {key} is shorter ({size} bytes) than its index ({index_size} bytes)")]
        raw = _zarr.get_buffer(store, key).to_bytes()
        index_bytes = raw[:index_size] if getattr(codec.index_location, "value", "end") == "start" else raw[-index_size:]
        try:
            table = _zarr.shard_index_table(codec, index_bytes, per_shard)
        except Exception as exc:  # noqa: BLE001 - a corrupt index is a problem of the store, reported
            return [Problem(where, f"shard {key} has an unreadable index ({type(exc).__name__}: {exc})")]
        # Inner chunks wholly past the array's end (in the last shard along an axis) are never written.
        inside = np.ones(per_shard, bool)
        for axis, (shard, o, i, n) in enumerate(zip(coords_of[key], outer, inner, arr.shape)):
            starts = shard * o + np.arange(per_shard[axis]) * i
            inside &= (starts < n).reshape([-1 if a == axis else 1 for a in range(len(per_shard))])
        empty = (table[..., 0] == np.uint64(2**64 - 1)) & inside
        if empty.any():
            return [Problem(where, f"shard {key} lists {int(empty.sum())} of its {int(inside.sum())} inner chunks as absent; "
                                   "they would read as the fill value — write every chunk")]
        used = table[inside]
        if ((used[:, 0] + used[:, 1]) > np.uint64(size)).any():
            return [Problem(where, f"shard {key} has an index pointing past its end")]
    return []


# -- layer 3: decoders that stop at the declared size ------------------------------------------------------
#: Bytes a compressor's output may exceed the bytes codec's exact size by (a crc32c suffix, say); the
#: ``bytes`` codec then checks the exact size.
_SLACK = 64


def _decoded_bound(chunk_spec) -> tuple[int, str]:
    """Most bytes a compressor may hand to the next codec for a chunk of ``chunk_spec``, and what sets it."""
    dt = chunk_spec.dtype.to_native_dtype()
    n = math.prod(chunk_spec.shape)
    if dt.kind in "OT" or str(dt).startswith("StringDType"):
        # vlen-utf8: a count, then a length and the bytes of each string
        return 4 + n * (4 + _limits.max_string_bytes) + _SLACK, f"{n} string(s) of at most {_limits.max_string_bytes} bytes"
    return n * dt.itemsize + _SLACK, f"chunk shape {tuple(chunk_spec.shape)} of {dt}"


class DecodeLimitError(InputLimitError, ValueError):
    """A chunk would decode to more than its declared size."""


def zstd_content_size(raw) -> int | None:
    """The decoded size a zstd frame header declares, or None when the frame leaves it out."""
    b = memoryview(raw).cast("B")
    if len(b) < 6 or bytes(b[:4]) != b"\x28\xb5\x2f\xfd":
        raise DecodeLimitError("not a zstd frame")
    fhd = b[4]
    fcs_flag, single, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if width == 0:
        return None
    if len(b) < pos + width:
        raise DecodeLimitError("truncated zstd frame header")
    value = int.from_bytes(bytes(b[pos:pos + width]), "little")
    return value + 256 if width == 2 else value


def zstd_decode_bounded(raw, bound: int, out: np.ndarray | None = None, what: str = "its array") -> np.ndarray:
    """Decode a zstd chunk that declares at most ``bound`` bytes; into ``out`` (exactly that size) if given.

    numcodecs decodes into a fixed buffer and stops with an error when the data would overflow it, so the
    allocation is the declared size whatever the frames hold.
    """
    size = zstd_content_size(raw)
    if size is None:
        raise DecodeLimitError("zstd frame does not declare its decoded size; write it with a standard zstd encoder")
    if size > bound or (out is not None and size != out.nbytes):
        expected = bound if out is None else out.nbytes
        raise DecodeLimitError(f"zstd chunk declares {size} decoded bytes; {what} allows {expected}")
    target = np.empty(size, np.uint8) if out is None else out.reshape(-1).view(np.uint8)
    if size:
        Zstd().decode(raw, out=target)
    return target


def gzip_decode_bounded(raw, bound: int, what: str = "its array") -> np.ndarray:
    """Decode gzip (or zlib) members, stopping as soon as the output would pass ``bound`` bytes."""
    data = bytes(raw)
    parts, total = [], 0
    while data:
        d = zlib.decompressobj(47)  # 32 + 15: a gzip or zlib header, detected
        part = d.decompress(data, bound + 1 - total)
        total += len(part)
        parts.append(part)
        if total > bound or d.unconsumed_tail:
            raise DecodeLimitError(f"gzip chunk decodes to more than the {bound} bytes {what} allows")
        if not d.eof:
            raise DecodeLimitError("gzip chunk is truncated")
        data = d.unused_data
    return np.frombuffer(b"".join(parts), np.uint8)


def blosc_decode_bounded(raw, bound: int, what: str = "its array") -> np.ndarray:
    """Decode a blosc chunk whose header declares at most ``bound`` bytes, into a buffer of that size."""
    b = bytes(memoryview(raw).cast("B")[:16])
    if len(b) < 16:
        raise DecodeLimitError("truncated blosc header")
    nbytes, cbytes = int.from_bytes(b[4:8], "little"), int.from_bytes(b[12:16], "little")
    if nbytes > bound:
        raise DecodeLimitError(f"blosc chunk declares {nbytes} decoded bytes; {what} allows {bound}")
    if cbytes > memoryview(raw).nbytes:
        raise DecodeLimitError("blosc chunk is truncated")
    out = np.empty(nbytes, np.uint8)
    if nbytes:
        Blosc().decode(raw, out=out)
    return out


class BoundedZstdCodec(ZstdCodec):
    """Zarr's zstd codec, decoding into at most the chunk's declared size."""

    def _decode_sync(self, chunk_bytes, chunk_spec):
        bound, what = _decoded_bound(chunk_spec)
        return as_numpy_array_wrapper(lambda raw: zstd_decode_bounded(raw, bound, what=what), chunk_bytes, chunk_spec.prototype)


class BoundedGzipCodec(GzipCodec):
    """Zarr's gzip codec, stopping at the chunk's declared size."""

    def _decode_sync(self, chunk_bytes, chunk_spec):
        bound, what = _decoded_bound(chunk_spec)
        return as_numpy_array_wrapper(lambda raw: gzip_decode_bounded(raw, bound, what=what), chunk_bytes, chunk_spec.prototype)


class BoundedBloscCodec(BloscCodec):
    """Zarr's blosc codec, refusing a header that declares more than the chunk's size."""

    def _decode_sync(self, chunk_bytes, chunk_spec):
        bound, what = _decoded_bound(chunk_spec)
        return as_numpy_array_wrapper(lambda raw: blosc_decode_bounded(raw, bound, what=what), chunk_bytes, chunk_spec.prototype)


def install_bounded_decoders() -> None:
    """Make Zarr pick the bounded classes for ``zstd``, ``gzip`` and ``blosc`` (encoding is unchanged).

    Zarr resolves a codec name to a class through its config when it parses an array's metadata, so this
    must run before any store is opened; :mod:`xbench.schemas.store` calls it on import.
    """
    for name, cls in (("zstd", BoundedZstdCodec), ("gzip", BoundedGzipCodec), ("blosc", BoundedBloscCodec)):
        _zarr.register_codec_class(name, cls)


# -- the whole process: --max-memory and --timeout ---------------------------------------------------------
def resident_bytes() -> int:
    """This process's resident memory now (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Watchdog:
    """Exits the process with status 2 and one line on stderr when it runs past ``timeout`` seconds or its
    resident memory passes ``max_memory``; :meth:`stop` ends the watch (a command run in-process, by tests).

    The checks before decoding keep valid and hostile inputs well inside both; this is the backstop for
    whatever they miss. Exiting from a thread (``os._exit``) is deliberate: a kernel or decoder in C cannot
    be interrupted, and outputs are only ever renamed into place whole.
    """

    def __init__(self, prog: str, lim: Limits | None = None, *, interval: float = 0.1, baseline: int = 0) -> None:
        self.prog, self.lim, self.interval = prog, lim or _limits, interval
        self.baseline = baseline  # resident bytes not counted (a host process's own, when run in-process)
        self._stopped = threading.Event()
        self._deadline = time.monotonic() + self.lim.timeout if self.lim.timeout else math.inf
        self._thread = threading.Thread(target=self._watch, name="xbench-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        lim = self.lim
        while True:  # checked at once, then every interval: a process already past the budget stops now
            if time.monotonic() > self._deadline:
                _stop(f"{self.prog}: the time budget of {lim.timeout:g} s ran out (--timeout); the run was stopped")
            used = resident_bytes() - self.baseline
            if lim.max_memory and used > lim.max_memory:
                _stop(f"{self.prog}: the memory budget of {lim.max_memory / MiB:.0f} MiB was exceeded "
                      f"({used / MiB:.0f} MiB resident, --max-memory); the run was stopped")
            if self._stopped.wait(self.interval):
                return

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


#: what runs before the watchdog ends the process (a command's clean-up of its hidden work folder)
_on_stop: list = []


def on_stop(fn):
    """Run ``fn()`` if the watchdog stops the process; returns a function that forgets it again."""
    _on_stop.append(fn)

    def forget() -> None:
        if fn in _on_stop:
            _on_stop.remove(fn)

    return forget


def _stop(message: str) -> None:
    try:
        from xbench.schemas.paths import remove_staged

        try:
            remove_staged()  # every command's hidden work folders (schemas/paths.py), before leaving
        except Exception:  # noqa: BLE001 - leaving is what matters now
            pass
        for fn in list(_on_stop):
            try:
                fn()
            except Exception:  # noqa: BLE001 - leaving is what matters now
                pass
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    finally:
        os._exit(2)
