"""Reading an HDF5 file from outside without leaving it, running its filters, or decoding without bound.

``xbench-convert`` reads teams' HDF5 outputs. HDF5 can pull bytes from elsewhere (external links to other
files, external raw storage, virtual datasets mapping other files), hold types that are not numbers or text
(references, compounds, variable-length sequences, opaque blobs) and compress a chunk so that it inflates
to gigabytes. This module is the one way XBench reads such a file:

- the file itself must be a regular file (a FIFO would block forever);
- links are walked one name at a time with ``getlink=True``, never followed by HDF5 itself: hard links
  are the only thing opened; a soft link is resolved by the same walk (at most :data:`MAX_HOPS` soft links,
  so a loop ends), and an external or user-defined link anywhere on the way is refused;
- a dataset is read only when its type is an integer, a float (2, 4 or 8 bytes) or a string (where a
  string is wanted), its layout is compact, contiguous or chunked (virtual refused), it has no external
  raw storage, and its filters are among :data:`ALLOWED_FILTERS`;
- every byte it declares is there (contiguous storage the size it declares; every chunk written), it
  declares no more than a thousand times what the file stores for it beyond a floor (a compression bomb),
  and a chunk decodes to at most :attr:`~xbench.schemas.budget.Limits.max_chunk_bytes`;
- filtered chunks are decoded here, not by HDF5 (no filter plugin is ever loaded, and inflating stops at
  the chunk's declared size), and data is read in blocks of rows;
- attributes are numbers or strings, at most :data:`MAX_ATTR_BYTES` each.

Every refusal is an :class:`~xbench.schemas.errors.InputError` whose problems name the object
(``file.h5:/group/name``) and what is wrong, one line each.
"""
from __future__ import annotations

import itertools
import math
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xbench.schemas.errors import InputError, InputLimitError, Problem

MAX_HOPS = 16  # soft links followed while resolving one name: a loop or a chain longer than this is refused
MAX_MEMBERS = 1_000  # links in one group we list (the root lists dataset keys; a million names is hostile)
MAX_ATTR_BYTES = 1 << 20  # one attribute (provenance, class lists) at most 1 MiB ...
MAX_ATTRS_BYTES = 4 << 20  # ... and all of one object's together at most 4 MiB (a zarr.json's limit)
MAX_RATIO = 1_000  # declared bytes per stored byte beyond RATIO_FLOOR (the Zarr path's rule)
RATIO_FLOOR = 1 << 30

_FILTER_NAMES = {1: "gzip (deflate)", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset",
                 32000: "lzf", 32001: "blosc", 32004: "lz4", 32008: "bitshuffle", 32015: "zstd"}
#: HDF5 filter ids decoded here: deflate, shuffle, fletcher32 (checksum stripped, not verified)
ALLOWED_FILTERS = (1, 2, 3)


def _h5():
    import h5py

    return h5py


@dataclass(frozen=True)
class Checked:
    """A dataset that passed every check: read it with :meth:`rows` (a block) or :meth:`read` (whole)."""

    dset: object  # h5py.Dataset
    where: str
    kind: str  # "number" | "string"
    filters: tuple[tuple[int, tuple[int, ...]], ...]  # (filter id, client values) in pipeline order
    chunks: tuple[int, ...] | None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.dset.shape)

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` (first axis) as a NumPy array of the dataset's own dtype (strings: ``str``)."""
        try:
            if self.filters:
                out = _read_filtered(self, start, stop)
            else:
                out = self.dset[start:stop]
        except InputError:
            raise
        except (OSError, ValueError, TypeError, RuntimeError, KeyError) as exc:
            raise InputError(Problem(self.where, f"cannot be read ({_first_line(exc)})")) from None
        if self.kind == "string":
            return _as_text(np.asarray(out), self.where)
        return np.asarray(out)

    def read(self) -> np.ndarray:
        return self.rows(0, self.shape[0]) if self.shape else np.asarray(self.dset[()])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _as_text(values: np.ndarray, where: str) -> np.ndarray:
    out = []
    for v in values.reshape(-1).tolist():
        if isinstance(v, bytes):
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(Problem(where, "holds a string that is not UTF-8")) from None
        out.append(str(v))
    return np.asarray(out, dtype=str).reshape(values.shape)


class H5Source:
    """An HDF5 file opened for reading under the rules of the module docstring (use as a context manager)."""

    def __init__(self, path: str | os.PathLike, where: str | None = None) -> None:
        self.path = Path(path)
        self.where = where or str(path)
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise InputError(Problem(self.where, "no such file")) from None
        except OSError as exc:
            raise InputError(Problem(self.where, f"cannot be read ({exc.strerror or exc})")) from None
        if not stat.S_ISREG(st.st_mode):
            raise InputError(Problem(self.where, "is not a regular file (a folder, pipe or device); give an HDF5 file"))
        h5py = _h5()
        try:
            self.file = h5py.File(self.path, "r", locking=False)
        except OSError as exc:
            raise InputError(Problem(self.where, f"not a readable HDF5 file ({_first_line(exc)})")) from None

    def __enter__(self) -> "H5Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.file.close()

    # -- links ------------------------------------------------------------------------------------
    def names(self, group, where: str) -> list[str]:
        """The link names of ``group`` (nothing is followed), at most :data:`MAX_MEMBERS`."""
        n = len(group)
        if n > MAX_MEMBERS:
            raise InputLimitError(Problem(where, f"holds {n:,} members; the limit is {MAX_MEMBERS:,}"))
        return sorted(group.keys())

    def member(self, group, name: str, where: str, hops: int = 0):
        """The object the link ``name`` of ``group`` names, through hard links only (None when absent)."""
        h5py = _h5()
        try:
            link = group.get(name, getlink=True)
        except TypeError:  # a user-defined link class: what it opens is up to a plugin
            raise InputError(Problem(where, "is a user-defined link; only links inside the file are read")) from None
        except (KeyError, OSError, ValueError) as exc:
            raise InputError(Problem(where, f"cannot be read ({_first_line(exc)})")) from None
        if link is None:
            return None
        if isinstance(link, h5py.ExternalLink):
            raise InputError(Problem(where, f"is an external link to {link.filename}:{link.path}; only data inside "
                                            "the file is read (copy it in)"))
        if isinstance(link, h5py.SoftLink):
            return self._resolve(group, link.path, where, hops + 1)
        if not isinstance(link, h5py.HardLink):
            raise InputError(Problem(where, "is a link of an unknown kind; only links inside the file are read"))
        try:
            return group[name]
        except (KeyError, OSError, ValueError) as exc:
            raise InputError(Problem(where, f"cannot be opened ({_first_line(exc)})")) from None

    def _resolve(self, group, path: str, where: str, hops: int):
        h5py = _h5()
        if hops > MAX_HOPS:
            raise InputError(Problem(where, f"soft links loop or chain more than {MAX_HOPS} deep"))
        current = self.file if path.startswith("/") else group
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise InputError(Problem(where, f"is a soft link to {path!r}; '..' is not a path in HDF5"))
        if not parts:
            return current
        for k, part in enumerate(parts):
            if not isinstance(current, h5py.Group):
                raise InputError(Problem(where, f"is a soft link to {path!r}, which does not exist"))
            current = self.member(current, part, where, hops)
            if current is None:
                raise InputError(Problem(where, f"is a soft link to {path!r}, which does not exist"))
        return current

    # -- objects ----------------------------------------------------------------------------------
    def group(self, parent, name: str, where: str):
        h5py = _h5()
        obj = self.member(parent, name, where)
        if obj is not None and not isinstance(obj, h5py.Group):
            raise InputError(Problem(where, "is not a group"))
        return obj

    def dataset(self, group, name: str, where: str, *, kind: str, ndim: tuple[int, ...]) -> Checked | None:
        """The checked dataset ``name`` of ``group`` (None when absent); ``kind``: "number" or "string"."""
        h5py = _h5()
        obj = self.member(group, name, where)
        if obj is None:
            return None
        if not isinstance(obj, h5py.Dataset):
            raise InputError(Problem(where, "is not a dataset"))
        type_problem = _type_problem(obj.id.get_type(), kind)
        if type_problem:  # the shape of a compound or a sequence says nothing more
            raise InputError(Problem(where, type_problem))
        if len(obj.shape or ()) not in ndim:
            dims = " or ".join(f"{n}-d" for n in ndim)
            raise InputError(Problem(where, f"must be {dims}, got shape {tuple(obj.shape or ())}"))
        filters, chunks = _storage_checks(obj, where, kind)
        return Checked(obj, where, kind, filters, chunks)

    def attrs(self, obj, where: str) -> dict:
        """The attributes of ``obj`` as Python values (numbers, strings and lists of them)."""
        out: dict = {}
        total = 0
        n = len(obj.attrs)
        if n > MAX_MEMBERS:
            raise InputLimitError(Problem(where, f"has {n:,} attributes; the limit is {MAX_MEMBERS:,}"))
        for name in obj.attrs.keys():
            at = f"{where} attribute {name!r}"
            try:
                aid = obj.attrs.get_id(name)
            except (KeyError, OSError) as exc:
                raise InputError(Problem(at, f"cannot be read ({_first_line(exc)})")) from None
            problem = _type_problem(aid.get_type(), "any")
            if problem:
                raise InputError(Problem(at, problem))
            size = aid.get_storage_size()
            n_values = math.prod(aid.shape) if aid.shape else 1
            declared = max(size, n_values * (1 if _is_vlen_str(aid.get_type()) else aid.get_type().get_size()))
            total += declared
            if declared > MAX_ATTR_BYTES or total > MAX_ATTRS_BYTES:
                raise InputLimitError(Problem(at, f"is larger than the limit of {MAX_ATTR_BYTES >> 20} MiB per "
                                                  f"attribute ({MAX_ATTRS_BYTES >> 20} MiB per object)"))
            try:
                value = obj.attrs[name]
            except (OSError, TypeError, ValueError) as exc:
                raise InputError(Problem(at, f"cannot be read ({_first_line(exc)})")) from None
            out[name] = _plain(value, at)
        return out


def _is_vlen_str(tid) -> bool:
    h5t = _h5().h5t
    return isinstance(tid, h5t.TypeStringID) and tid.is_variable_str()


def _type_problem(tid, kind: str) -> str | None:
    """Why an HDF5 type cannot be read as ``kind`` ("number", "string" or "any" of them), or None."""
    h5t = _h5().h5t
    cls = tid.get_class()
    names = {h5t.COMPOUND: "a compound", h5t.ENUM: "an enum", h5t.REFERENCE: "a reference", h5t.OPAQUE: "an opaque",
             h5t.VLEN: "a variable-length sequence", h5t.ARRAY: "an array", h5t.BITFIELD: "a bitfield",
             h5t.TIME: "a time"}
    if cls in names:
        return f"has {names[cls]} type; only numbers and strings are read"
    if cls == h5t.STRING:
        return None if kind in ("string", "any") else "holds strings; numbers are expected"
    if cls == h5t.INTEGER or (cls == h5t.FLOAT and tid.get_size() in (2, 4, 8)):
        return None if kind in ("number", "any") else "holds numbers; strings are expected"
    return f"has a type XBench does not read (HDF5 class {cls}, {tid.get_size()} bytes); only numbers and strings"


def _plain(value, where: str):
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(Problem(where, "is not UTF-8 text")) from None
    if isinstance(value, np.ndarray):
        return [_plain(v, where) for v in value.tolist()] if value.ndim else _plain(value.item(), where)
    if isinstance(value, list):
        return [_plain(v, where) for v in value]
    if isinstance(value, np.generic):
        return _plain(value.item(), where)
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON (the store's attributes) has no NaN
    if isinstance(value, (str, int, float, bool)):
        return value
    raise InputError(Problem(where, f"holds a value XBench does not read ({type(value).__name__})"))


def _storage_checks(dset, where: str, kind: str):
    """Layout, filters and sizes of a dataset before anything is read; (filters, chunk shape)."""
    from xbench.schemas.budget import limits

    h5py = _h5()
    h5d = h5py.h5d
    lim = limits()
    dcpl = dset.id.get_create_plist()
    layout = dcpl.get_layout()
    if layout == h5d.VIRTUAL:
        raise InputError(Problem(where, "is a virtual dataset (its data lives in other files); only data inside "
                                        "the file is read"))
    if dcpl.get_external_count() > 0:
        raise InputError(Problem(where, "keeps its data in external raw files; only data inside the file is read"))
    if layout not in (h5d.COMPACT, h5d.CONTIGUOUS, h5d.CHUNKED):
        raise InputError(Problem(where, f"has a storage layout XBench does not read ({layout})"))
    filters = []
    for i in range(dcpl.get_nfilters()):
        code, _flags, values, _name = dcpl.get_filter(i)
        if code not in ALLOWED_FILTERS:
            name = _FILTER_NAMES.get(code, f"filter {code}")
            raise InputError(Problem(where, f"is compressed with {name}; XBench reads gzip (deflate), shuffle and "
                                            "fletcher32 only (rewrite it with compression='gzip' or none)"))
        filters.append((int(code), tuple(int(v) for v in values)))
    vlen = _is_vlen_str(dset.id.get_type())
    if filters and vlen:
        raise InputError(Problem(where, "holds compressed variable-length strings; store them uncompressed or as "
                                        "fixed-length strings"))
    shape = tuple(int(s) for s in dset.shape or ())
    itemsize = 16 if vlen else dset.dtype.itemsize
    declared = math.prod(shape) * itemsize
    stored = int(dset.id.get_storage_size())
    chunks = None
    if layout == h5d.CHUNKED:
        chunks = tuple(int(c) for c in dcpl.get_chunk())
        chunk_bytes = math.prod(chunks) * itemsize
        if chunk_bytes > lim.max_chunk_bytes:
            raise InputLimitError(Problem(where, f"has chunks of {chunk_bytes / 2**20:.0f} MiB; the limit is "
                                                 f"{lim.max_chunk_bytes / 2**20:.0f} MiB (--max-memory raises it)"))
        expected = math.prod(math.ceil(s / c) for s, c in zip(shape, chunks)) if shape else 1
        if expected > lim.max_chunks * 10:
            raise InputLimitError(Problem(where, f"is split into {expected:,} chunks; the limit is {lim.max_chunks * 10:,}"))
        have = int(dset.id.get_num_chunks())
        if declared and have < expected:
            raise InputError(Problem(where, f"{expected - have:,} of its {expected:,} chunks were never written"))
    elif layout == h5d.CONTIGUOUS and declared and not vlen and stored != declared:
        raise InputError(Problem(where, f"declares {declared:,} bytes but the file stores {stored:,} for it"))
    if declared > RATIO_FLOOR and declared > MAX_RATIO * max(stored, 1):
        raise InputLimitError(Problem(where, f"declares {declared / 2**30:.1f} GiB from {stored:,} stored bytes, "
                                             f"more than {MAX_RATIO}x (a compression bomb?)"))
    return tuple(filters), chunks


# -- filtered chunks, decoded here --------------------------------------------------------------------
def _unshuffle(data: bytes, itemsize: int) -> bytes:
    """HDF5's shuffle filter undone: byte k of every element was stored together."""
    if itemsize <= 1:
        return data
    n = len(data) // itemsize
    head = np.frombuffer(data, np.uint8, count=n * itemsize).reshape(itemsize, n).T.tobytes()
    return head + data[n * itemsize:]


def _inflate(data: bytes, bound: int, where: str) -> bytes:
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, bound + 1)
    except zlib.error as exc:
        raise InputError(Problem(where, f"holds a chunk that is not valid gzip data ({exc})")) from None
    if len(out) > bound or d.unconsumed_tail:
        raise InputLimitError(Problem(where, f"holds a chunk that inflates past its declared {bound:,} bytes"))
    return out


def decode_chunk(raw: bytes, mask: int, filters, chunk_bytes: int, itemsize: int, where: str) -> bytes:
    """One stored chunk through the filter pipeline backwards, never past ``chunk_bytes`` (plus checksums)."""
    data = bytes(raw)
    slack = 4 * sum(1 for code, _ in filters if code == 3)
    for i in reversed(range(len(filters))):
        if mask & (1 << i):  # the writer skipped this filter for this chunk
            continue
        code, values = filters[i]
        if code == 3:
            if len(data) < 4:
                raise InputError(Problem(where, "holds a chunk too short for its fletcher32 checksum"))
            data = data[:-4]
        elif code == 1:
            data = _inflate(data, chunk_bytes + slack, where)
        elif code == 2:
            data = _unshuffle(data, values[0] if values else itemsize)
    if len(data) != chunk_bytes:
        raise InputError(Problem(where, f"holds a chunk of {len(data):,} bytes; its chunk shape needs {chunk_bytes:,}"))
    return data


def _read_filtered(c: Checked, start: int, stop: int) -> np.ndarray:
    dset, chunks, shape = c.dset, c.chunks, c.shape
    dtype = dset.dtype
    chunk_bytes = math.prod(chunks) * dtype.itemsize
    out = np.empty((max(stop - start, 0), *shape[1:]), dtype)
    rest = [range(0, s, k) for s, k in zip(shape[1:], chunks[1:])]
    for r0 in range((start // chunks[0]) * chunks[0], stop, chunks[0]):
        for offsets in itertools.product(*rest):
            origin = (r0, *offsets)
            mask, raw = dset.id.read_direct_chunk(origin)
            block = np.frombuffer(decode_chunk(raw, mask, c.filters, chunk_bytes, dtype.itemsize, c.where),
                                  dtype).reshape(chunks)
            a, b = max(start, r0), min(stop, r0 + chunks[0])
            src = (slice(a - r0, b - r0), *(slice(0, min(s - o, k)) for s, o, k in zip(shape[1:], offsets, chunks[1:])))
            dst = (slice(a - start, b - start), *(slice(o, min(s, o + k)) for s, o, k in zip(shape[1:], offsets, chunks[1:])))
            out[dst] = block[src]
    return out
