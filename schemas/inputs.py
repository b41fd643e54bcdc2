"""The one input boundary for structured files from outside: JSON, YAML and TOML (contract §"Untrusted input").

Every command reads every JSON, YAML or TOML file it did not write itself through these functions
(submissions' ``meta.json``, COCO results and marks, label mappings, model configs, suites, score
outputs given to ``xbench report``, dataset annotation files). Each one:

- reads a regular file only (no FIFO, device or folder), at most ``max_bytes`` of it;
- decodes strict UTF-8 (a BOM is allowed);
- bounds the work *before* a parser walks the value: nesting depth, element count, integer digits
  (Python's own 4,300-digit guard is an exit 1; here it is a problem line), YAML aliases;
- refuses what would be silently wrong: duplicate keys, ``NaN``/``Infinity`` tokens and numbers that
  overflow a float (unless the caller allows non-finite numbers), YAML tags that build objects.

Failures raise :class:`InputError` with one :class:`Problem` naming the file (``where``) and what is
wrong, so a CLI prints one line and exits 2. This module imports nothing heavy: no numpy, no zarr;
PyYAML only when a YAML file is read.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from xbench.schemas.errors import InputError, InputLimitError, Problem

MiB = 2**20


@dataclass(frozen=True)
class TextLimits:
    """Bounds on one structured document. The defaults hold the largest legitimate file by far (a
    ChestX-Det10 or MS-CXR annotation file is a few MiB; a COCO results file at the paper's scale ~30 MiB)."""

    max_bytes: int = 256 * MiB
    max_depth: int = 64           # nesting of objects/arrays (mappings/sequences)
    max_elements: int = 20_000_000  # values of all containers together
    max_int_digits: int = 40      # an integer literal longer than this is refused (no count or id needs more)
    allow_nonfinite: bool = False  # NaN / Infinity tokens (JSON), .nan / .inf (YAML), nan / inf (TOML)


DEFAULT = TextLimits()
#: a configuration a person writes (a suite, a model config, a label mapping): small by nature
CONFIG = TextLimits(max_bytes=4 * MiB, max_depth=32, max_elements=200_000)
#: a whole command's time limit (seconds; ``--timeout``, :class:`xbench.schemas.budget.Limits`): defined here, in
#: the light layer both the CLI layer and the budget import, so neither imports the other for it
DEFAULT_TIMEOUT = 1800.0


def _where(where: str | os.PathLike | None, path: str | os.PathLike | None) -> str:
    return str(where if where is not None else (path if path is not None else ""))


def _fail(where: str, message: str, *, limit: bool = False) -> InputError:
    cls = InputLimitError if limit else InputError
    return cls(Problem(where, message))


def read_bytes(path: str | os.PathLike, *, max_bytes: int, where: str | None = None) -> bytes:
    """The bytes of a regular file, refused (:class:`InputError`) when it is missing, not a regular file
    (a FIFO would block forever, a device never end) or larger than ``max_bytes``."""
    w = _where(where, path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise _fail(w, "no such file") from None
    except IsADirectoryError:
        raise _fail(w, "is a folder, not a file") from None
    except OSError as exc:
        raise _fail(w, f"cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise _fail(w, "is a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise _fail(w, "is not a regular file (a pipe, socket or device); give a file")
        if st.st_size > max_bytes:
            raise _fail(w, f"is {_size(st.st_size)}; the limit for this file is {_size(max_bytes)}", limit=True)
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            data = fh.read(max_bytes + 1)  # the file may grow after fstat
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_bytes:
        raise _fail(w, f"is larger than the limit for this file ({_size(max_bytes)})", limit=True)
    return data


def read_zip_member(data: bytes, member: str, *, max_bytes: int, where: str, max_members: int = 100_000) -> bytes:
    """One member of the zip file ``data`` (bytes already read through :func:`read_bytes`), refused when the zip
    lists more than ``max_members`` entries, lacks ``member``, or when the member declares or inflates to more
    than ``max_bytes`` (a few KB of METADATA inflating to gigabytes is read to the limit and no further)."""
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            if len(zf.filelist) > max_members:
                raise _fail(where, f"holds {len(zf.filelist):,} members; the limit is {max_members:,}", limit=True)
            info = zf.getinfo(member)
            if info.file_size > max_bytes:
                raise _fail(where, f"member {member[:80]!r} declares {_size(info.file_size)}; the limit is "
                                   f"{_size(max_bytes)}", limit=True)
            with zf.open(info) as fh:
                out = fh.read(max_bytes + 1)
    except InputError:
        raise
    except KeyError:
        raise _fail(where, f"holds no {member[:80]!r}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, NotImplementedError) as exc:
        raise _fail(where, f"is not a readable zip file ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})") from None
    if len(out) > max_bytes:
        raise _fail(where, f"member {member[:80]!r} inflates to more than {_size(max_bytes)}", limit=True)
    return out


def read_tree(root: str | os.PathLike, *, max_bytes: int, max_files: int = 100_000,
              where: str | None = None) -> list[tuple[str, bytes]]:
    """(relative POSIX path, bytes) of every regular file below the folder ``root``, in path order, each read
    through :func:`read_bytes` and all of them together at most ``max_bytes`` (sizes summed from ``lstat``
    before anything is read: a sparse file of gigabytes is refused, not copied). Symbolic links are refused
    (their target lies outside what was given); a pipe or device too."""
    w = _where(where, root)
    root = Path(root)
    files, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                raise _fail(f"{w}: {rel[:200]}", "is a symbolic link; give the folder's own files")
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise _fail(f"{w}: {rel[:200]}", "is not a regular file (a pipe, socket or device)")
            files.append((rel, p))
            total += st.st_size
            if len(files) > max_files:
                raise _fail(w, f"holds more than {max_files:,} files", limit=True)
            if total > max_bytes:
                raise _fail(w, f"holds more than {_size(max_bytes)} of files, the limit for it",
                            limit=True)
    out, read = [], 0
    for rel, p in sorted(files):
        data = read_bytes(p, max_bytes=max_bytes - read, where=f"{w}: {rel[:200]}")
        read += len(data)
        out.append((rel, data))
    return out


def _size(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n} bytes"


def decode_text(data: bytes | str, where: str) -> str:
    """Strict UTF-8 (a leading BOM dropped); a problem line with the byte offset otherwise."""
    if isinstance(data, str):
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(where, f"is not UTF-8 text (invalid byte at offset {exc.start})") from None
    return text[1:] if text.startswith("\ufeff") else text


# -- JSON -------------------------------------------------------------------------------------------
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _deepest(brackets: bytes) -> int:
    """The deepest nesting of a string of brackets, without recursion and at C speed (NumPy's running sum)."""
    import numpy as np

    marks = np.frombuffer(brackets, np.uint8)
    steps = np.where((marks == ord("[")) | (marks == ord("{")), 1, -1).astype(np.int32)
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


def json_depth(text: str) -> int:
    """Deepest nesting of ``{``/``[`` outside strings, without recursion and without parsing (strings cut out,
    then a running sum over the brackets left)."""
    return _deepest(_JSON_STRING.sub('""', text).encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS))


def _check_shape(text: str, where: str, lim: TextLimits, string_re: re.Pattern) -> None:
    # A document with fewer brackets than the depth cap cannot nest past it: skip the scan.
    if text.count("[") + text.count("{") <= lim.max_depth and text.count(",") <= lim.max_elements:
        return
    bare = string_re.sub('""', text).encode("utf-8", "surrogatepass")
    brackets = bare.translate(None, _NOT_BRACKETS)  # C speed, whatever the size
    elements = bare.count(b",") + brackets.count(b"[") + brackets.count(b"{")
    # The depth over a bounded prefix of brackets (openers are values, so a document within the value cap
    # has at most twice as many brackets): a deep document is named as deep even when it is also too long.
    depth = _deepest(brackets[:2 * lim.max_elements + 2])
    if depth > lim.max_depth:
        raise _fail(where, f"nests {depth} levels deep; the limit is {lim.max_depth}", limit=True)
    if elements > lim.max_elements:
        raise _fail(where, f"holds more than {lim.max_elements:,} values; the limit is {lim.max_elements:,}",
                    limit=True)


def parse_json(data: bytes | str, where: str, limits: TextLimits = DEFAULT) -> Any:
    """Parse a JSON document under ``limits``; :class:`InputError` with one problem line otherwise."""
    if len(data) > limits.max_bytes:
        raise _fail(where, f"is larger than the limit for this file ({_size(limits.max_bytes)})", limit=True)
    text = decode_text(data, where)
    _check_shape(text, where, limits, _JSON_STRING)

    def integer(token: str) -> int:
        digits = len(token.lstrip("-"))
        if digits > limits.max_int_digits:
            raise _Refused(f"has an integer of {digits} digits; the limit is {limits.max_int_digits}")
        return int(token)

    def number(token: str) -> float:
        value = float(token)
        if not math.isfinite(value) and not limits.allow_nonfinite:
            raise _Refused(f"has a number too large for a 64-bit float ({token[:40]})")
        return value

    def constant(token: str) -> float:
        if not limits.allow_nonfinite:
            raise _Refused(f"has the token {token}, which is not JSON (write null for a missing value)")
        return float(token)

    try:
        return json.loads(text, parse_int=integer, parse_float=number, parse_constant=constant,
                          object_pairs_hook=unique_object)
    except _Refused as exc:
        raise _fail(where, str(exc)) from None
    except RecursionError:  # the scan above makes this unreachable below the cap; kept as a last guard
        raise _fail(where, "nests too deeply", limit=True) from None
    except json.JSONDecodeError as exc:
        raise _fail(where, f"is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:  # e.g. an integer past Python's digit limit that slipped the parse_int guard
        raise _fail(where, f"is not valid JSON ({exc})") from None


class _Refused(ValueError):
    """Raised inside the JSON hooks; turned into a problem line by :func:`parse_json`."""


class DuplicateKeyError(_Refused):
    """A JSON object names one key twice (``key``: the key); ``str()`` is the problem's wording."""

    def __init__(self, key: str) -> None:
        super().__init__(f"has the key {key[:80]!r} twice in one object")
        self.key = key


def unique_object(items: list[tuple[str, Any]]) -> dict:
    """``json.loads``' ``object_pairs_hook`` that refuses a key given twice (the parser keeps the last silently)."""
    out: dict = {}
    for key, value in items:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def load_json(path: str | os.PathLike, *, where: str | None = None, limits: TextLimits = DEFAULT) -> Any:
    """Read and parse a JSON file under ``limits`` (see the module docstring)."""
    w = _where(where, path)
    return parse_json(read_bytes(path, max_bytes=limits.max_bytes, where=w), w, limits)


# -- YAML -------------------------------------------------------------------------------------------
def parse_yaml(data: bytes | str, where: str, limits: TextLimits = CONFIG) -> Any:
    """Parse YAML with the safe loader after walking its event stream: aliases are refused (a few
    hundred bytes of nested aliases expand to gigabytes once anything turns the value into text), and
    nesting depth and node count are capped before a value is built."""
    import yaml

    if len(data) > limits.max_bytes:
        raise _fail(where, f"is larger than the limit for this file ({_size(limits.max_bytes)})", limit=True)
    text = decode_text(data, where)
    depth = nodes = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise _fail(where, f"uses the YAML alias *{event.anchor} (line {event.start_mark.line + 1}); "
                                   "aliases are not allowed: write the value out")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > limits.max_depth:
                    raise _fail(where, f"nests more than {limits.max_depth} levels deep", limit=True)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            if isinstance(event, (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                nodes += 1
                if nodes > limits.max_elements:
                    raise _fail(where, f"holds more than {limits.max_elements:,} values", limit=True)
                if isinstance(event, yaml.ScalarEvent) and event.tag is None and event.implicit[0]:
                    _check_yaml_scalar(event.value, where, limits)
        value = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except InputError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise _fail(where, f"is not valid YAML ({problem}{at})") from None
    except RecursionError:
        raise _fail(where, "nests too deeply", limit=True) from None
    except ValueError as exc:
        raise _fail(where, f"is not valid YAML ({exc})") from None
    return value


_YAML_INT = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")
_YAML_FLOAT_SPECIAL = re.compile(r"^[-+]?\.(inf|Inf|INF|nan|NaN|NAN)$")


def _check_yaml_scalar(value: str, where: str, limits: TextLimits) -> None:
    if _YAML_INT.match(value) and len(value.lstrip("+-").replace("_", "")) > limits.max_int_digits:
        raise _fail(where, f"has an integer of {len(value)} digits; the limit is {limits.max_int_digits}")
    if not limits.allow_nonfinite and _YAML_FLOAT_SPECIAL.match(value):
        raise _fail(where, f"has the non-finite number {value}; give a finite number")


def _unique_key_loader():
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        """The safe loader, refusing a key given twice in one mapping (PyYAML keeps the last silently)."""

        def construct_mapping(self, node, deep=False):
            seen: set = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class says why
                    duplicate = False
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {str(key)[:80]!r} is given twice in one mapping", key_node.start_mark)
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


class _LazyLoader:
    """Builds the loader class on first use, so importing this module does not import PyYAML."""

    _cls = None

    def __call__(self, stream):
        if _LazyLoader._cls is None:
            _LazyLoader._cls = _unique_key_loader()
        return _LazyLoader._cls(stream)


_UniqueKeyLoader = _LazyLoader()


def load_yaml(path: str | os.PathLike, *, where: str | None = None, limits: TextLimits = CONFIG) -> Any:
    """Read and parse a YAML file under ``limits`` (see :func:`parse_yaml`)."""
    w = _where(where, path)
    return parse_yaml(read_bytes(path, max_bytes=limits.max_bytes, where=w), w, limits)


# -- TOML -------------------------------------------------------------------------------------------
_TOML_STRING = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'', re.DOTALL)
_TOML_LONG_INT = re.compile(r"(?<![\w.\"'])[-+]?[0-9][0-9_]{%d,}(?![\w.])")


def parse_toml(data: bytes | str, where: str, limits: TextLimits = CONFIG) -> dict:
    """Parse TOML (tomllib: no code, no aliases) after capping size, nesting and integer digits."""
    if len(data) > limits.max_bytes:
        raise _fail(where, f"is larger than the limit for this file ({_size(limits.max_bytes)})", limit=True)
    text = decode_text(data, where)
    _check_shape(text, where, limits, _TOML_STRING)
    bare = _TOML_STRING.sub('""', text)
    long_int = re.compile(_TOML_LONG_INT.pattern % limits.max_int_digits).search(bare)
    if long_int:
        raise _fail(where, f"has an integer of more than {limits.max_int_digits} digits")

    def number(token: str) -> float:
        value = float(token)
        if not math.isfinite(value) and not limits.allow_nonfinite:
            raise _Refused(f"has a non-finite number ({token[:40]})")
        return value

    try:
        return tomllib.loads(text, parse_float=number)
    except _Refused as exc:
        raise _fail(where, str(exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise _fail(where, f"is not valid TOML ({exc})") from None
    except RecursionError:
        raise _fail(where, "nests too deeply", limit=True) from None
    except ValueError as exc:
        raise _fail(where, f"is not valid TOML ({exc})") from None


def load_toml(path: str | os.PathLike, *, where: str | None = None, limits: TextLimits = CONFIG) -> dict:
    """Read and parse a TOML file under ``limits``."""
    w = _where(where, path)
    return parse_toml(read_bytes(path, max_bytes=limits.max_bytes, where=w), w, limits)


def load_config(path: str | os.PathLike, *, where: str | None = None, limits: TextLimits = CONFIG) -> Any:
    """A configuration file by its suffix: ``.yaml``/``.yml``, ``.toml`` or ``.json``."""
    suffix = Path(path).suffix.lower()
    if suffix in (".yaml", ".yml"):
        return load_yaml(path, where=where, limits=limits)
    if suffix == ".toml":
        return load_toml(path, where=where, limits=limits)
    if suffix == ".json":
        return load_json(path, where=where, limits=limits)
    raise _fail(_where(where, path), "is not a .yaml, .yml, .toml or .json file")


# -- npz --------------------------------------------------------------------------------------------
def load_npz(path: str | os.PathLike, *, where: str | None = None, max_bytes: int = 1024 * MiB,
             max_members: int = 100_000) -> dict[str, Any]:
    """The arrays of an ``.npz`` file, bounded: a regular file; a zip whose members are ``.npy`` files,
    stored or deflated, each name once; no pickled objects; each member's declared array size checked
    against its zip entry and the running total against ``max_bytes`` *before* it is inflated (a 1 MB
    zip of zeros that would inflate to gigabytes is refused after reading its headers)."""
    import zipfile

    import numpy as np

    w = _where(where, path)
    try:
        st = os.stat(path)  # follows a link to a regular file; the caller decides whether links are allowed
    except FileNotFoundError:
        raise _fail(w, "no such file") from None
    except OSError as exc:
        raise _fail(w, f"cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _fail(w, "is not a regular file")
    arrays: dict[str, Any] = {}
    total = 0
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            if len(infos) > max_members:
                raise _fail(w, f"holds {len(infos):,} arrays; the limit is {max_members:,}", limit=True)
            for info in infos:
                name = info.filename
                if not name.endswith(".npy") or info.is_dir():
                    raise _fail(w, f"member {name[:80]!r} is not an .npy array")
                key = name[:-4]
                if key in arrays:
                    raise _fail(w, f"holds the array {key[:80]!r} twice")
                if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    raise _fail(w, f"array {key[:80]!r} uses an unsupported zip compression")
                if total + info.file_size > max_bytes:
                    raise _fail(w, f"would inflate to more than {_size(max_bytes)}", limit=True)
                with zf.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh, max_header_size=10_000)
                    elif version == (2, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh, max_header_size=10_000)
                    else:
                        raise _fail(w, f"array {key[:80]!r} has an unsupported .npy version {version}")
                    if dtype.hasobject:
                        raise _fail(w, f"array {key[:80]!r} holds Python objects (a pickle); only numbers and "
                                       "fixed-width strings are read")
                    n = 1
                    for dim in shape:
                        n *= int(dim)
                    nbytes = n * dtype.itemsize
                    if nbytes > info.file_size or total + nbytes > max_bytes:
                        raise _fail(w, f"array {key[:80]!r} declares {_size(nbytes)}, more than its entry "
                                       f"holds or the limit of {_size(max_bytes)}", limit=True)
                    raw = np.empty(nbytes, np.uint8)  # one writable buffer, filled in place
                    got = fh.readinto(memoryview(raw)) if nbytes else 0
                    if got != nbytes or fh.read(1):
                        raise _fail(w, f"array {key[:80]!r} is truncated or has trailing bytes")
                    arrays[key] = raw.view(dtype).reshape(shape, order="F" if fortran else "C")
                    total += nbytes
    except InputError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as exc:
        raise _fail(w, f"is not a readable .npz file ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})") from None
    return arrays


def npz_shape(path: str | os.PathLike, key: str, *, max_members: int = 100_000) -> tuple[int, ...] | None:
    """The shape the ``.npy`` header of array ``key`` of an ``.npz`` file declares, reading only that header
    (bounded as :func:`load_npz` reads it: a regular file, at most ``max_members`` members, a 10,000-byte
    header); None when the file or the array cannot be read (:func:`load_npz` then says why, on its own line).
    For a pass over many files that must not inflate their data (grouping a folder's maps by size)."""
    import zipfile

    import numpy as np

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            info = next((i for i in infos if i.filename == f"{key}.npy"), None)
            if len(infos) > max_members or info is None or \
                    info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                return None
            with zf.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
                if version not in read:
                    return None
                shape = read[version](fh, max_header_size=10_000)[0]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError):
        return None
    return tuple(int(d) for d in shape)


def with_limits(base: TextLimits = DEFAULT, **changes) -> TextLimits:
    """``base`` with some fields changed (e.g. ``allow_nonfinite=True`` for ``metrics.json``)."""
    return replace(base, **changes)
