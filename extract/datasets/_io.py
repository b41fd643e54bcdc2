"""Small helpers shared by the dataset readers: image files, file indexes, shape checks.

Nothing here knows a dataset's format; each reader module does.
"""
from __future__ import annotations

from ...schemas.errors import InputError

import math
import os
from pathlib import Path
from typing import Iterable

import numpy as np

from .._json import read_json as _read_json
from .base import Box, ReaderError

__all__ = [
    "ImageReadError",
    "CaseProblems",
    "check_box",
    "check_options",
    "check_points",
    "option_bool",
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


def require_file(path: Path, what: str, layout: str) -> Path:
    """Return ``path`` if it is a file, else raise ReaderError naming it and the expected layout."""
    if not path.is_file():
        raise ReaderError(f"{what} not found: expected {path}\nexpected layout under --root:\n{layout}")
    return path


def read_json(path: Path, kind: type, expected: str):
    """The JSON document in ``path``, which must be a ``kind`` (list, dict); else one ReaderError line
    (:func:`xbench.extract._json.read_json`), saying ``expected`` when it parses but has the wrong shape."""
    return _read_json(path, kind=kind, expected=expected, error=ReaderError)


def find_first(candidates: Iterable[Path]) -> Path | None:
    """The first existing file among ``candidates`` (in order), or None."""
    for p in candidates:
        if p.is_file():
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
    is dropped). 16-bit grayscale is scaled by 255/65535. Raises ImageReadError for a missing or
    undecodable file.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.load()
            if im.mode in ("I;16", "I;16B", "I;16L", "I"):
                arr = np.asarray(im, dtype=np.float64)
                return np.clip(np.rint(arr * (255.0 / 65535.0)), 0, 255).astype(np.uint8)
            if im.mode != "L":
                im = im.convert("L")
            return np.asarray(im, dtype=np.uint8).copy()
    except FileNotFoundError:
        raise ImageReadError(f"{path}: image file is missing") from None
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise ImageReadError(f"{path}: cannot decode image ({e})") from None


def check_options(reader: str, options: dict, allowed: dict[str, str]) -> None:
    """Refuse (:class:`ReaderOptionError`, one line) an option name the reader does not know, in the user's
    terms: ``unknown option 'sise' for phantom; did you mean 'size'? options: n_cases, seed, size``.
    ``allowed`` maps name -> help (shown when the reader has few options)."""
    import difflib

    from .base import ReaderOptionError

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
        from .base import ReadProblem

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
    from .base import ReaderOptionError

    raise ReaderOptionError(f"{reader}: option {name} must be true or false; got {value!r}")
