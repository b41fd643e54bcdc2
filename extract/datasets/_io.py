"""Small helpers shared by the dataset readers: image files, file indexes, shape checks.

Nothing here knows a dataset's format; each reader module does.
"""
from __future__ import annotations

from xbench.schemas.errors import InputError, InputLimitError

import math
import os
from pathlib import Path
from typing import Iterable

import numpy as np

from xbench.extract._json import read_json as _read_json
from xbench.extract.datasets.base import Box, ReaderError

__all__ = [
    "ImageReadError",
    "CaseProblems",
    "check_box",
    "check_options",
    "check_points",
    "option_bool",
    "native_age",
    "attributes_option",
    "ATTRIBUTES_OPTION",
    "find_first",
    "index_files",
    "load_raster",
    "parse_float",
    "require_file",
]

# Annotations drawn on the image border are often a little outside it (a click on the last column
# gives x = width + 0.4). A coordinate up to this far outside is accepted as it is (the pipeline
# clips the shape to the image and counts it); anything further out means the annotation does
# not belong to this image (or is in another frame) and the case is skipped with a problem.
EDGE_TOLERANCE_PX = 1.0
EDGE_TOLERANCE_FRACTION = 0.01


def edge_tolerance(size: int) -> float:
    """How far (pixels) outside an image side of ``size`` pixels a coordinate may lie."""
    return max(EDGE_TOLERANCE_PX, EDGE_TOLERANCE_FRACTION * size)


class ImageReadError(InputError, ValueError):
    """An image that exists in the annotations but cannot be decoded.

    Raised by ``DatasetReader.load_image``; the pipeline reports it against the record's
    ``source`` and skips the case. The message names the file and what is wrong with it.
    """


# -- bounded reading of annotation files (contract §"Untrusted input") -----------------------------------
MiB = 2**20
#: the largest annotation file read (the biggest real one, VinDr-CXR's train CSV, is about 10 MiB)
MAX_ANNOTATION_BYTES = 256 * MiB
#: rows of one CSV file (NIH's Data_Entry has 112,120; VinDr's train annotations about 68,000)
MAX_CSV_ROWS = 5_000_000
#: characters of one CSV field (Python's csv default; a SIIM RLE of a 1024x1024 mask stays far below)
MAX_CSV_FIELD = 131_072
#: pixels of one decoded image, checked from the header before decoding (a CXR is at most ~4,300 x 4,300;
#: a PNG or DICOM that declares more is a decompression bomb or not a radiograph)
MAX_IMAGE_PIXELS = 40_000_000
#: bytes of one DICOM file (a 16-bit 4,300 x 4,300 uncompressed image is 37 MiB)
MAX_DICOM_BYTES = 512 * MiB


class AnnotationFileError(ReaderError, ValueError):
    """An annotation file that cannot be read as the format it should be (one line: file, row, what)."""


def is_inside(path: str | os.PathLike, roots) -> bool:
    """Whether ``path``, every link resolved, lies inside one of ``roots`` (links resolved too)."""
    real = os.path.realpath(path)
    for root in roots:
        base = os.path.realpath(root)
        if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
            return True
    return False


def check_inside(path: str | os.PathLike, roots, what: str = "file") -> None:
    """Refuse (:class:`ReaderError`) a file reached through a link that leads outside the folders given:
    nothing is read outside the given source."""
    if roots and not is_inside(path, roots):
        raise ReaderError(f"{path}: this {what} is a link to {os.path.realpath(path)}, outside the dataset root "
                          f"{', '.join(str(r) for r in roots)}; nothing is read outside the given folders "
                          "(give the real folder as the root, or allow its folder with --allow-links-to DIR)")


def read_annotation_bytes(path: Path, roots=(), *, max_bytes: int = MAX_ANNOTATION_BYTES) -> bytes:
    """The bytes of an annotation file: inside ``roots`` (links resolved), a regular file (a FIFO would block
    forever), at most ``max_bytes``; :class:`ReaderError` with one line otherwise."""
    from xbench.schemas import inputs

    check_inside(path, roots, "annotation file")
    try:
        return inputs.read_bytes(path, max_bytes=max_bytes, where=str(path))
    except InputError as exc:
        raise AnnotationFileError(exc.problems) from None


def read_annotation_text(path: Path, roots=(), *, max_bytes: int = MAX_ANNOTATION_BYTES) -> str:
    """An annotation file as strict UTF-8 text (a BOM dropped), bounded as :func:`read_annotation_bytes`."""
    from xbench.schemas import inputs

    data = read_annotation_bytes(path, roots, max_bytes=max_bytes)
    try:
        return inputs.decode_text(data, str(path))
    except InputError as exc:
        raise AnnotationFileError(exc.problems) from None


def load_annotation_json(path: Path, roots=(), *, where: str | None = None):
    """A JSON annotation file through :func:`xbench.schemas.inputs.load_json` (size, depth, element count,
    integer digits, NaN tokens and duplicate keys refused), inside ``roots``; :class:`AnnotationFileError`."""
    from xbench.schemas import inputs

    check_inside(path, roots, "annotation file")
    try:
        return inputs.load_json(path, where=where or str(path),
                                limits=inputs.with_limits(inputs.DEFAULT, max_bytes=MAX_ANNOTATION_BYTES))
    except InputError as exc:
        raise AnnotationFileError(exc.problems) from None


class CSVFile:
    """A CSV annotation file read within bounds: the file as :func:`read_annotation_text`, then rows whose
    syntax errors, over-long fields and excess rows are one :class:`AnnotationFileError` line naming the file
    and the row (``csv`` raises bare ``_csv.Error`` otherwise).

    ``rows()`` yields lists of fields, ``dicts()`` mappings by the header (as ``csv.DictReader``); ``line_num``
    is the line of the last row read (for messages).
    """

    def __init__(self, path: Path, roots=(), *, max_rows: int = MAX_CSV_ROWS) -> None:
        import csv
        import io

        self.path, self.max_rows = Path(path), max_rows
        self._text = io.StringIO(read_annotation_text(self.path, roots), newline="")
        self._reader = csv.reader(self._text)
        self.line_num = 0

    def _next(self):
        import csv

        previous = csv.field_size_limit(MAX_CSV_FIELD)
        try:
            row = next(self._reader)
        except csv.Error as exc:
            raise AnnotationFileError(f"{self.path}: row {self._reader.line_num}: not a valid CSV row ({exc})") from None
        finally:
            csv.field_size_limit(previous)
        self.line_num = self._reader.line_num
        return row

    def header(self) -> list[str]:
        try:
            return self._next()
        except StopIteration:
            return []

    def rows(self):
        n = 0
        while True:
            try:
                row = self._next()
            except StopIteration:
                return
            n += 1
            if n > self.max_rows:
                raise AnnotationFileError(f"{self.path}: more than {self.max_rows:,} rows; the limit for one file")
            yield row

    def dicts(self, fieldnames):
        """Rows as {column: value} (a missing cell is None, as csv.DictReader; extra cells are dropped)."""
        for row in self.rows():
            if not row:
                continue
            yield {k: (row[i] if i < len(row) else None) for i, k in enumerate(fieldnames)}


def require_file(path: Path, what: str, layout: str) -> Path:
    """Return ``path`` if it is a file, else raise ReaderError naming it and the expected layout."""
    if path.exists() and not path.is_file():  # a FIFO, socket, device or folder: not "missing"
        raise ReaderError(f"{path}: the {what} is not a regular file (a pipe, socket, device or folder); give a file")
    if not path.is_file():
        raise ReaderError(f"{what} not found: expected {path}\nexpected layout under --root:\n{layout}")
    return path


def read_json(path: Path, kind: type, expected: str, roots=()):
    """The JSON document in ``path``, which must be a ``kind`` (list, dict); else one ReaderError line
    (:func:`xbench.extract._json.read_json`, bounded by :mod:`xbench.schemas.inputs`), saying ``expected``
    when it parses but has the wrong shape. ``roots``: the folders it must lie inside (links resolved)."""
    check_inside(path, roots, "annotation file")
    return _read_json(path, kind=kind, expected=expected, error=AnnotationFileError)


def find_first(candidates: Iterable[Path]) -> Path | None:
    """The first existing file among ``candidates`` (in order), or None. Something else by that name (a FIFO,
    a folder) is returned as it is, so that the bounded reader refuses it in the user's terms."""
    for p in candidates:
        if p.exists() and not p.is_dir():
            return p
    return None


def index_files(folders: Iterable[Path], suffixes: tuple[str, ...]) -> dict[str, Path]:
    """Map file stem -> path for every file under ``folders`` (recursively) with one of ``suffixes``.

    Suffixes are compared case-insensitively (``.PNG`` and ``.png``). When a stem occurs twice
    the first one found (folders in the given order, then sorted paths) wins, so the result
    does not depend on directory listing order.
    """
    out: dict[str, Path] = {}
    wanted = tuple(s.lower() for s in suffixes)
    for folder in folders:
        if not folder.is_dir():
            continue
        found: list[str] = []
        for dirpath, _dirs, files in os.walk(folder):
            found.extend(os.path.join(dirpath, f) for f in files if f.lower().endswith(wanted))
        for f in sorted(found):
            p = Path(f)
            stem = p.name[: -len(next(s for s in wanted if p.name.lower().endswith(s)))]
            out.setdefault(stem, p)
    return out


def parse_float(text: str) -> float:
    """``float(text.strip())`` that rejects NaN/inf and empty strings with ValueError."""
    v = float(text.strip())
    if not math.isfinite(v):
        raise ValueError(f"not a finite number: {text!r}")
    return v


def check_box(box: Box, height: int | None, width: int | None) -> Box:
    """Validate a box against the image size and return it unchanged.

    Raises ValueError (with the box in the message) for a non-finite, empty or inverted box, or
    one that reaches further outside the image than :func:`edge_tolerance` allows.
    ``height``/``width`` None skips the bounds check (size unknown until the image is decoded).
    Boxes slightly outside are not clipped here: the pipeline clips them and counts them.
    """
    coords = (box.x0, box.y0, box.x1, box.y1)
    if not all(math.isfinite(v) for v in coords):
        raise ValueError(f"box {coords} has a non-finite coordinate")
    if not (box.x1 > box.x0 and box.y1 > box.y0):
        raise ValueError(f"box {coords} is empty or inverted (need x1 > x0 and y1 > y0)")
    if height is None or width is None:
        return box
    tx, ty = edge_tolerance(width), edge_tolerance(height)
    if box.x0 < -tx or box.y0 < -ty or box.x1 > width + tx or box.y1 > height + ty:
        raise ValueError(f"box {coords} lies outside the {width}x{height} image")
    return box


def check_points(points: list, height: int, width: int) -> tuple[tuple[float, float], ...]:
    """Validate polygon points [[x, y], ...] against the image size; return them as float tuples.

    Raises ValueError for fewer than 3 points, malformed or non-finite points, or a point further
    outside the image than :func:`edge_tolerance` allows.
    """
    if not isinstance(points, list) or len(points) < 3:
        raise ValueError(f"polygon needs at least 3 points, got {points!r:.80}")
    out = []
    tx, ty = edge_tolerance(width), edge_tolerance(height)
    for pt in points:
        if not (isinstance(pt, (list, tuple)) and len(pt) == 2):
            raise ValueError(f"polygon point {pt!r} is not [x, y]")
        try:
            x, y = float(pt[0]), float(pt[1])
        except (TypeError, ValueError):
            raise ValueError(f"polygon point {pt!r} is not numeric") from None
        if not (math.isfinite(x) and math.isfinite(y)):
            raise ValueError(f"polygon point {pt!r} is not finite")
        if x < -tx or y < -ty or x > width + tx or y > height + ty:
            raise ValueError(f"polygon point ({x}, {y}) lies outside the {width}x{height} image")
        out.append((x, y))
    return tuple(out)


def load_raster(path: Path) -> np.ndarray:
    """Decode a PNG/JPEG file to (H, W) uint8 grayscale, brighter = denser.

    Colour and alpha images are converted to luminance (Pillow's ITU-R 601 'L' conversion; alpha
    is dropped). 16-bit grayscale is scaled by 255/65535. Raises ImageReadError for a missing,
    undecodable, oversized file or one that is not a regular file, and for an image that declares
    more than :data:`MAX_IMAGE_PIXELS` pixels (checked from its header, before decoding).
    """
    from xbench.schemas import inputs

    try:
        data = inputs.read_bytes(path, max_bytes=MAX_ANNOTATION_BYTES, where=str(path))
    except InputError as exc:
        message = getattr(exc.problems[0], "message", str(exc.problems[0])) if exc.problems else str(exc)
        if message == "no such file":
            raise ImageReadError(f"{path}: image file is missing") from None
        raise ImageReadError(f"{path}: {message}") from None
    return decode_raster(data, str(path))


def decode_raster(data: bytes, where: str) -> np.ndarray:
    """PNG/JPEG bytes -> (H, W) uint8 as :func:`load_raster`; the pixel count is checked before decoding."""
    import io
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # our own cap below is the bound; Pillow's warning (past ~89 Mpx) would only be noise on stderr
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                check_pixels(im.size[1], im.size[0], 1, where)
                im.load()
                if im.mode in ("I;16", "I;16B", "I;16L", "I"):
                    arr = np.asarray(im, dtype=np.float64)
                    return np.clip(np.rint(arr * (255.0 / 65535.0)), 0, 255).astype(np.uint8)
                if im.mode != "L":
                    im = im.convert("L")
                return np.asarray(im, dtype=np.uint8).copy()
    except ImageReadError:
        raise
    except Image.DecompressionBombError:  # Pillow's own guard fired first (past ~179 Mpx)
        raise ImageTooLargeError(f"{where}: the image declares more pixels than Pillow decodes; the limit is "
                                 f"{MAX_IMAGE_PIXELS:,} pixels (a decompression bomb, or not a radiograph)") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:  # SyntaxError: Pillow's "not a PNG"
        raise ImageReadError(f"{where}: cannot decode image ({e})") from None


class ImageTooLargeError(ImageReadError, InputLimitError):
    """An image whose header declares more than MAX_IMAGE_PIXELS pixels: refused before decoding."""


def check_pixels(rows: int, cols: int, frames: int, where: str, limit: int | None = None) -> None:
    """Refuse (:class:`ImageTooLargeError`) an image declaring more pixels than ``limit`` (default
    :data:`MAX_IMAGE_PIXELS`) over all its frames, before anything is decoded (a decompression bomb)."""
    limit = MAX_IMAGE_PIXELS if limit is None else limit
    n = int(rows) * int(cols) * max(int(frames), 1)
    if n > limit or rows <= 0 or cols <= 0:
        raise ImageTooLargeError(f"{where}: the image declares {int(cols)} x {int(rows)}"
                                 + (f" x {int(frames)} frames or samples" if frames > 1 else "")
                                 + f" pixels; the limit is {limit:,} pixels (a decompression bomb, or not a radiograph)")


def check_options(reader: str, options: dict, allowed: dict[str, str]) -> None:
    """Refuse (:class:`ReaderOptionError`, one line) an option name the reader does not know, in the user's
    terms: ``unknown option 'sise' for phantom; did you mean 'size'? options: n_cases, seed, size``.
    ``allowed`` maps name -> help (shown when the reader has few options)."""
    import difflib

    from xbench.extract.datasets.base import ReaderOptionError

    unknown = sorted(map(str, set(options) - set(allowed)))
    if not unknown:
        return
    name = unknown[0]
    close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if not allowed:
        known = f"{reader} takes no options"
    else:
        sep = "; " if any(allowed.values()) else ", "
        known = "options: " + sep.join(f"{k} ({v})" if v else k for k, v in allowed.items())
    more = f" (and {len(unknown) - 1} more unknown: {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
    raise ReaderOptionError(f"unknown option {name!r} for {reader}{hint}{' ' if hint else '; '}{known}{more}")


class CaseProblems:
    """Collects per-row problems into a reader's ``problems`` list and remembers the bad cases.

    A case with any problem is skipped as a whole: a partly read case would carry a silently
    incomplete region or label.
    """

    def __init__(self, problems: list) -> None:
        self.problems = problems
        self.bad: set[str] = set()

    def add(self, source: str, message: str, case_id: str | None) -> None:
        from xbench.extract.datasets.base import ReadProblem

        self.problems.append(ReadProblem(source=source, message=message, case_id=case_id))
        if case_id is not None:
            self.bad.add(case_id)

    def __contains__(self, case_id: object) -> bool:
        return case_id in self.bad


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def option_bool(reader: str, name: str, value) -> bool:
    """A boolean reader option from Python (bool) or the CLI (``--option name=true``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    from xbench.extract.datasets.base import ReaderOptionError

    raise ReaderOptionError(f"{reader}: option {name} must be true or false; got {value!r}")


def native_age(text: str) -> float | None:
    """An age as the native files write it, in years: "58", "058Y", "006M" (months), "010W" (weeks), "010D" (days);
    None when empty, unreadable, or outside 0..130 (a few NIH Data_Entry rows hold ages over 400)."""
    t = str(text).strip().upper()
    if not t:
        return None
    unit = {"Y": 1.0, "M": 12.0, "W": 52.1775, "D": 365.25}.get(t[-1])
    number = t[:-1] if unit else t
    try:
        value = float(number) / (unit or 1.0)
    except ValueError:
        return None
    return value if 0.0 <= value <= 130.0 else None


ATTRIBUTES_OPTION = "false (default) or true: keep the cases' sex, age and view position from the native files"


def attributes_option(reader: str, options: dict) -> None:
    """The ``attributes`` reader option: kept in ``options`` (and so in the store's attributes) only when true,
    so the stores and resumable plans of runs without it are unchanged."""
    value = options.pop("attributes", False)
    if option_bool(reader, "attributes", value):
        options["attributes"] = True
