"""Mask outputs -> submission.zarr: models that answer with segmentation masks on the same leaderboard.

Two sources are read (docs/how-to/convert.md, "Masks", has a worked example of each; the rule is in
docs/contract.md, "Converting masks"):

* **COCO results with segmentations** (what instance-segmentation models and pycocotools write): a JSON
  list of ``{"image_id", "category_id" | "query_id", "segmentation", "score"}`` (``bbox`` may be present
  and is ignored). ``segmentation`` is an RLE ``{"size": [h, w], "counts": "<compressed string>" |
  [run, run, ...]}`` at the image's original size (column-major runs starting with zeros, pycocotools'
  encoding), or polygons ``[[x1, y1, x2, y2, ...], ...]`` in original pixels. Ids and categories resolve as
  for boxes (:mod:`.convert_boxes`). Every result of the file is a mask or none is.
* **A folder of PNG masks**::

      DIR/masks.json                       {"model": "...", "unsupported": [...], "scores": {...},
                                            "phrase_scores": {...}, "phrases_unsupported": "..."}
      DIR/<dataset>/<case_id>/<finding>.png
      DIR/<dataset>/phrases/<query_id>.png

  One channel: 1-bit (binary), 8-bit (value / 255) or 16-bit (value / 65535) grey, any size up to
  :data:`MAX_MASK_SIDE` per side, taken to cover the whole image (as images.zarr stretches it).

The rule (pure functions :func:`mask_to_grid`, :func:`instance_map`): a mask becomes a ``grid`` map by the
ground truth's own rasterisation, lesion by lesion: a cell takes the mask's value at the pixel holding the
cell's centre; a lesion (an 8-connected component of the mask's non-zero pixels; one polygon) that no cell
centre falls on sets the cell holding its area centroid to its highest value instead, so no lesion is lost.
A binary mask at the original size therefore becomes exactly the region gt.zarr would hold for it.
Instances of one case and finding combine by their maximum (each instance's map scaled by its score): the
map never exceeds 1 and a confident instance is never diluted by a doubtful one overlapping it. Scores: COCO,
the highest instance score; PNG, ``scores`` of masks.json when given, else the mask's highest value (a
binary mask: 1 when it marks anything, else 0). A finding without a mask has the constant map 0.

Untrusted input, bounded: JSON through :func:`xbench.schemas.inputs.load_json` (:data:`BOXES_JSON` caps),
at most :data:`MAX_MARKS` instances in all and :data:`MAX_MARKS_PER_ITEM` per case and finding, an RLE whose
runs do not sum to h·w of the image (past it, or short of it) refused, a PNG's header checked (format, mode,
size) before any pixel is decoded, links and non-regular files in the folder refused.
"""
from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import numpy as np

from xbench.schemas import grid as exact
from xbench.schemas.convert import MAX_FOLDER_ENTRIES, PHRASES_FOLDER, PartialBlock, Problems, _entry_problem, phrase_fields
from xbench.schemas.convert_boxes import (BOXES_JSON, MAX_MARKS_PER_ITEM, _case_lookup, _coco_images, _id_text, coco_finding,
                            _MarkCount, _number, _pick_dataset, _query_lookup, _resolve_name, read_mapping)
from xbench.schemas.errors import InputError, InputLimitError, InvalidStoreError, Problem
from xbench.schemas.inputs import MiB, load_json
from xbench.schemas.rle import rle_counts, rle_mask
from xbench.schemas.store import file_sha256
from xbench.schemas.submission import DatasetSpec

#: the folder's description file (its presence makes a folder a masks source)
MASKS_META = "masks.json"
MASKS_META_KEYS = ("model", "unsupported", "scores", "phrase_scores", "phrases_unsupported")
#: a PNG mask: its file size, its side and its pixel count are capped before it is decoded
MAX_PNG_BYTES = 64 * MiB
MAX_MASK_SIDE = 16384
MAX_MASK_PIXELS = 1 << 26
#: the decoded bytes of one mask (pixels x bytes a pixel: 1 for 1- and 8-bit, 2 for 16-bit, 4 for 32-bit), so a
#: 16-bit mask at the pixel cap is refused from its header rather than decoded into 128 MB and worked on
MAX_MASK_DECODED_BYTES = 1 << 26
#: 8-connected lesions one mask may hold: a real mask holds a handful; 4 M one-pixel dots (a 28 KB PNG) would
#: cost seconds and hundreds of MB of per-lesion arrays, so they are refused after labelling, in one line
MAX_MASK_LESIONS = 100_000
#: PNG modes read, and the value that means 1 in each (Pillow opens 16-bit grey as "I;16" or "I")
PNG_MODES = {"1": 1.0, "L": 255.0, "I;16": 65535.0, "I;16B": 65535.0, "I;16L": 65535.0, "I": 65535.0}
_CONNECTIVITY = np.ones((3, 3), dtype=bool)
#: bytes a pixel of each mode decodes to (Pillow: mode "1" as one bool byte a pixel)
_DECODED_BYTES = {"1": 1, "L": 1, "I;16": 2, "I;16B": 2, "I;16L": 2, "I": 4}


# -- the rule -------------------------------------------------------------------------------------------
def centre_pixels(n_cells: int, n_pixels: int) -> np.ndarray:
    """The pixel index holding each cell centre along one axis: ``floor((k + 0.5) * n_pixels / n_cells)`` in
    integers (the ground truth's cell centres, extract/datasets/rasterise.py, in the mask's own pixels)."""
    return exact.centre_pixels(n_cells, n_pixels)


def _cell(pixel_sum: int, count: int, n_pixels: int, n_cells: int) -> int:
    """The cell holding the mean of ``count`` pixels' centres along one axis (index sum ``pixel_sum``), exactly:
    floor((pixel_sum / count + 1/2) * n_cells / n_pixels) in rationals."""
    return min(max(math.floor(Fraction(2 * pixel_sum + count, 2 * count) * n_cells / n_pixels), 0), n_cells - 1)


class LesionLimitError(InputLimitError):
    """A mask holding more lesions than :data:`MAX_MASK_LESIONS` (its caller names the file)."""


def mask_to_grid(values: np.ndarray, grid: tuple[int, int], *, lesions: list[np.ndarray] | None = None,
                 scale: float = 1.0) -> np.ndarray:
    """A (h, w) mask with values in [0, ``scale``] -> its (grid_h, grid_w) float64 map of values / ``scale`` (the rule
    in the module docstring). ``values`` may be the decoded integers of a PNG (``scale`` its full value): only the
    pixels the rule picks are turned into floats, so an 8192 x 8192 mask costs its decoded bytes, not 8 a pixel.

    ``lesions``: boolean (h, w) masks to treat as the lesions instead of the 8-connected components of the
    non-zero pixels (one polygon is one lesion, as in the ground truth). More than :data:`MAX_MASK_LESIONS`
    components raise :class:`LesionLimitError` before any per-lesion work; the rest is vectorised (one pass)."""
    values = np.asarray(values)
    h, w = values.shape
    gh, gw = int(grid[0]), int(grid[1])
    rows, cols = centre_pixels(gh, h), centre_pixels(gw, w)
    out = values[np.ix_(rows, cols)].astype(np.float64) / scale  # max(v) / s == max(v / s): division is monotone
    if lesions is None:
        return _missed_lesions(values, out, rows, cols, scale)
    for m in lesions:
        if m[np.ix_(rows, cols)].any() or not m.any():
            continue
        rr, cc = np.nonzero(m)
        i, j = _cell(int(rr.sum()), len(rr), h, gh), _cell(int(cc.sum()), len(cc), w, gw)
        out[i, j] = max(out[i, j], float(values[rr, cc].max()) / scale)
    return out


def _missed_lesions(values: np.ndarray, out: np.ndarray, rows: np.ndarray, cols: np.ndarray, scale: float) -> np.ndarray:
    """``out`` with each 8-connected lesion that no cell centre falls on set at the cell of its area centroid to
    its highest value (the rule), in a few vectorised passes over the mask, bands of rows at a time."""
    from scipy import ndimage

    h, w = values.shape
    gh, gw = out.shape
    labels, n = ndimage.label(values > 0, structure=_CONNECTIVITY)
    if n > MAX_MASK_LESIONS:
        raise LesionLimitError(f"holds {n:,} separate lesions (8-connected regions); a mask may hold at most "
                               f"{MAX_MASK_LESIONS:,}")
    if n == 0:
        return out
    hit = np.zeros(n + 1, dtype=bool)
    hit[labels[np.ix_(rows, cols)].ravel()] = True
    hit[0] = True
    if hit.all():
        return out
    count, sum_r, sum_c, top = (np.zeros(n + 1) for _ in range(4))
    band = max(1, (1 << 20) // max(w, 1))  # ~1 M pixels a pass: temporaries bounded whatever the mask holds
    for r0 in range(0, h, band):
        lab = labels[r0:r0 + band]
        rr, cc = np.nonzero(lab)
        k = lab[rr, cc]
        count += np.bincount(k, minlength=n + 1)
        sum_r += np.bincount(k, weights=rr + r0, minlength=n + 1)
        sum_c += np.bincount(k, weights=cc, minlength=n + 1)
        np.maximum.at(top, k, values[r0 + rr, cc].astype(np.float64))
    missed = np.flatnonzero(~hit)
    # the centroid's cell, as _cell computes it for one lesion, in integers: floor((sum/count + 1/2)·cells/pixels)
    # = ((2·sum + count)·cells) // (2·count·pixels); the float64 sums of integer indices are exact (< 2**53)
    n_px = count[missed].astype(np.int64)
    i = np.clip(((2 * sum_r[missed].astype(np.int64) + n_px) * gh) // (2 * n_px * h), 0, gh - 1)
    j = np.clip(((2 * sum_c[missed].astype(np.int64) + n_px) * gw) // (2 * n_px * w), 0, gw - 1)
    np.maximum.at(out, (i, j), top[missed] / scale)
    return out


def polygon_mask(points: list[float], size: tuple[int, int]) -> np.ndarray:
    """The pixels of one polygon [x1, y1, x2, y2, ...] on an (h, w) image: the ground truth's polygon rule
    (``PIL.ImageDraw.polygon(outline=1, fill=1)`` with the points unchanged, as CheXlocalize draws them)."""
    from PIL import Image, ImageDraw

    h, w = size
    img = Image.new("L", (w, h), 0)
    ImageDraw.Draw(img).polygon([(float(points[i]), float(points[i + 1])) for i in range(0, len(points), 2)],
                                outline=1, fill=1)
    return np.asarray(img, dtype=bool)


@dataclass(frozen=True)
class Instance:
    """One COCO instance: ``rle`` runs or ``polygons`` (original pixels) of an image of ``size``, and its score."""

    size: tuple[int, int]
    score: float
    rle: str | tuple[int, ...] | None = None
    polygons: tuple[tuple[float, ...], ...] = ()

    def grid_map(self, grid: tuple[int, int]) -> np.ndarray:
        """This instance's map on the grid, in {0, 1} (before its score scales it)."""
        if self.rle is not None:
            runs = rle_counts(self.rle) if isinstance(self.rle, str) else list(self.rle)
            return mask_to_grid(rle_mask(runs, self.size), grid)
        masks = [polygon_mask(list(p), self.size) for p in self.polygons]
        union = np.logical_or.reduce(masks) if masks else np.zeros(self.size, bool)
        return mask_to_grid(union, grid, lesions=masks)


def instance_map(instances: list[Instance], grid: tuple[int, int]) -> np.ndarray:
    """The map of one case and finding: the maximum over its instances of score × instance mask."""
    out = np.zeros(grid, dtype=np.float64)
    for inst in instances:
        np.maximum(out, inst.score * inst.grid_map(grid), out=out)
    return out


# -- COCO results with segmentations ----------------------------------------------------------------------
def has_segmentations(results: list) -> bool:
    """Whether a COCO results list gives masks (any result with a ``segmentation``)."""
    return any(isinstance(r, dict) and "segmentation" in r for r in results)


def segmentation_problem(seg: Any, size: tuple[int, int]) -> tuple[str | None, Instance | None]:
    """(why ``seg`` cannot be used, None) or (None, the instance without its score)."""
    h, w = size
    if isinstance(seg, dict):
        extra = sorted(set(seg) - {"size", "counts"})
        if extra or "size" not in seg or "counts" not in seg:
            return "an RLE segmentation is {\"size\": [h, w], \"counts\": ...}", None
        got = seg["size"]
        if not (isinstance(got, list) and len(got) == 2 and all(_number(v) is not None for v in got)):
            return "RLE size must be [h, w]", None
        if [int(v) for v in got] != [h, w] or any(float(v) != int(v) for v in got):
            return f"RLE size {got} is not the image's original size [{h}, {w}] (height, width)", None
        counts = seg["counts"]
        if isinstance(counts, str):
            try:
                runs = rle_counts(counts)
            except ValueError as exc:
                return str(exc), None
            rle: str | tuple[int, ...] = counts
        elif isinstance(counts, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in counts):
            runs, rle = counts, tuple(counts)
        else:
            return "RLE counts must be a compressed string or a list of integers", None
        if any(r < 0 for r in runs):
            return "RLE counts hold a negative run", None
        total = sum(runs)
        if total != h * w:
            side = "past" if total > h * w else "short of"
            return f"RLE runs sum to {total:,} pixels, {side} the image's {h}x{w} = {h * w:,}", None
        return None, Instance((h, w), 0.0, rle=rle)
    if isinstance(seg, list) and seg:
        polys = []
        for k, p in enumerate(seg):
            if not isinstance(p, list) or len(p) < 6 or len(p) % 2:
                return f"polygon {k} must be a list [x1, y1, x2, y2, ...] of at least 3 points", None
            v = [_number(x) for x in p]
            if any(x is None or not math.isfinite(x) for x in v):
                return f"polygon {k} holds a value that is not a finite number", None
            xs, ys = v[0::2], v[1::2]
            if max(xs) < 0 or max(ys) < 0 or min(xs) >= w or min(ys) >= h:
                return f"polygon {k} lies wholly outside the {w}x{h} image (width x height)", None
            polys.append(tuple(v))
        return None, Instance((h, w), 0.0, polygons=tuple(polys))
    return "segmentation must be an RLE object or a non-empty list of polygons", None


@dataclass
class ParsedMasks:
    """A masks source read and checked: dataset -> case -> finding -> instances (COCO) or PNG path, and scores."""

    model: str
    fmt: str
    items: dict[str, dict[str, dict[str, list]]]
    phrases: dict[str, dict[str, list]]
    unsupported: dict[str, list[str]]
    scores: dict[str, dict[str, dict[str, float]]]
    phrase_scores: dict[str, dict[str, float]]
    phrases_unsupported: str | None = None


def read_coco_masks(src: Path, results: list, images, *, dataset: str | None, mapping: dict,
                    coco_images: Path | None) -> ParsedMasks:
    """COCO results whose every result has a segmentation (the module docstring), against the images store."""
    problems = Problems()
    name = _pick_dataset(images, dataset, src)
    ds = images.datasets[name]
    classes, cases, queries = tuple(ds.classes), _case_lookup(ds.case_id), _query_lookup(ds)
    id_to_case, cat_names = _coco_images(coco_images, cases) if coco_images else (None, {})
    cat_map = dict(mapping["categories"])
    items: dict[str, dict[str, list]] = {}
    phrases: dict[str, list] = {}
    used: set[str] = set()
    unknown: dict[str, int] = {}
    count = _MarkCount(src)
    for k, r in enumerate(results):
        results[k] = None
        where = f"{src}: result {k}"
        target = _coco_target(r, where, problems, name, ds, classes, cases, queries, id_to_case, cat_names, cat_map,
                              unknown, used, items, phrases)
        if target is None:
            continue
        key, case = target
        score = _number(r["score"])
        if score is None or not math.isfinite(score) or not 0.0 <= score <= 1.0:
            problems.add(where, f"score must be a probability in [0, 1], got {r['score']!r}")
            continue
        why, inst = segmentation_problem(r["segmentation"], tuple(int(v) for v in ds.orig_size[cases[case]]))
        if why:
            problems.add(where, why)
            continue
        if len(key) >= MAX_MARKS_PER_ITEM:
            problems.add(where, f"is one more than the {MAX_MARKS_PER_ITEM:,} masks one case and finding (or phrase "
                                "row) may have")
            continue
        count.add(1)
        key.append(Instance(inst.size, score, inst.rle, inst.polygons))
    for cat, n in sorted(unknown.items()):
        shown = f"{cat} ({cat_names[cat]})" if cat in cat_names else cat
        problems.add(str(src), f"category {shown} ({n} result(s)) maps to no finding of {name}; name it in the "
                               "mapping file's categories (\"\" to drop it)")
    problems.raise_if_any()
    named = {f for f in cat_map.values() if f} | {f for c in cat_names.values() if (f := _resolve_name(c, cat_map, classes))}
    unsupported = [c for c in classes if c not in named | used]
    if len(unsupported) == len(classes):
        raise InvalidStoreError(Problem(str(src), f"names none of the findings of {name}; give a mapping file"))
    return ParsedMasks(mapping["model"] or src.stem, "coco-segmentation", {name: items}, {name: phrases} if phrases else {},
                       {name: unsupported}, {}, {})


def _coco_target(r, where, problems, name, ds, classes, cases, queries, id_to_case, cat_names, cat_map, unknown,
                 used, items, phrases):
    """(the list one result's instance joins, its case) or None (the problem added, or the category dropped)."""
    if not isinstance(r, dict):
        problems.add(where, "is not an object")
        return None
    kind = "query_id" if "query_id" in r else "category_id"
    missing = [key for key in ("image_id", kind, "segmentation", "score") if key not in r]
    if missing:
        problems.add(where, f"lacks {', '.join(missing)} (a file gives masks for every result or for none)")
        return None
    if "query_id" in r and "category_id" in r:
        problems.add(where, "has both category_id and query_id; a result is of a finding or of a phrase row")
        return None
    image_id = _id_text(r["image_id"])
    case = None if image_id is None else (id_to_case.get(image_id) if id_to_case is not None else image_id)
    if case is None or case not in cases:
        problems.add(where, f"image_id {r['image_id']!r} is not a case of the images store's {name}")
        return None
    if kind == "query_id":
        qid = _id_text(r["query_id"])
        row = queries.get(qid) if qid is not None else None
        if row is None or int(ds.queries.case[row]) != cases[case]:
            problems.add(where, f"query_id {r['query_id']!r} is not a phrase row of image_id {image_id} in {name}")
            return None
        return phrases.setdefault(qid, []), case
    finding = coco_finding(r, where, problems, name, classes, cat_map, cat_names, unknown)
    if finding is None:
        return None
    used.add(finding)
    return items.setdefault(case, {}).setdefault(finding, []), case


# -- a folder of PNG masks --------------------------------------------------------------------------------
def is_masks_folder(src: Path) -> bool:
    """Whether ``src`` is a folder of PNG masks (it holds masks.json)."""
    return Path(src).is_dir() and os.path.lexists(Path(src) / MASKS_META)


def png_header_problem(path: Path) -> str | None:
    """Why the file at ``path`` is not a usable mask, from its size and header alone (no pixel decoded), or None."""
    why = _entry_problem(path)
    if why:
        return why
    size = os.lstat(path).st_size
    if size > MAX_PNG_BYTES:
        return f"is {size / MiB:.0f} MiB; a mask may be at most {MAX_PNG_BYTES // MiB} MiB"
    import warnings

    from PIL import Image, UnidentifiedImageError

    too_big = f"claims more pixels than a mask may have (at most {MAX_MASK_SIDE} a side and {MAX_MASK_PIXELS:,} pixels)"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path, formats=["PNG"]) as im:
                mode, (w, h) = im.mode, im.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return too_big  # Pillow's own guard, from the header alone
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return "is not a PNG image"
    if mode not in PNG_MODES:
        return f"is a PNG of mode {mode}; a mask is one grey channel of 1, 8 or 16 bits"
    if not (1 <= w <= MAX_MASK_SIDE and 1 <= h <= MAX_MASK_SIDE) or w * h > MAX_MASK_PIXELS:
        return f"is {w}x{h} pixels; a mask may be at most {MAX_MASK_SIDE} a side and {MAX_MASK_PIXELS:,} pixels"
    per_pixel = _DECODED_BYTES.get(mode, 4)
    if w * h * per_pixel > MAX_MASK_DECODED_BYTES:
        return (f"is {w}x{h} pixels of {per_pixel} byte(s) each once decoded ({w * h * per_pixel / MiB:.0f} MiB); a mask "
                f"may decode to at most {MAX_MASK_DECODED_BYTES // MiB} MiB (e.g. {MAX_MASK_DECODED_BYTES // 2:,} pixels "
                "of 16 bits)")
    return None


def read_png_mask(path: Path) -> tuple[np.ndarray, float]:
    """The mask's (h, w) decoded values and the value that means 1 (:data:`PNG_MODES`; its header already
    checked): values / scale lie in [0, 1]. Kept as decoded (1, 2 or 4 bytes a pixel, never 8): :func:`mask_to_grid`
    turns only the pixels it uses into floats. Raises InvalidStoreError when the pixels cannot be decoded or a
    value lies outside 0..scale."""
    from PIL import Image

    try:
        with Image.open(path, formats=["PNG"]) as im:
            im.load()
            mode = im.mode
            values = np.asarray(im)
    except (OSError, SyntaxError, ValueError) as exc:
        raise InvalidStoreError(Problem(str(path), f"cannot be decoded ({exc})")) from None
    one = PNG_MODES[mode]
    if values.size and (float(values.min()) < 0 or float(values.max()) > one):
        raise InvalidStoreError(Problem(str(path), f"holds values outside 0..{one:g}"))
    return values, one


def _scandir(folder: Path, problems: Problems, what: str) -> list[os.DirEntry] | None:
    try:
        st = os.lstat(folder)
    except OSError:
        problems.add(str(folder), "cannot be read")
        return None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        problems.add(str(folder), f"must be a folder (not a link) of {what}")
        return None
    entries = []
    with os.scandir(folder) as it:
        for k, e in enumerate(it):
            if k >= MAX_FOLDER_ENTRIES:
                problems.add(str(folder), f"holds more than {MAX_FOLDER_ENTRIES:,} entries")
                return None
            entries.append(e)
    return sorted(entries, key=lambda e: e.name)


def _read_masks_meta(src: Path, problems: Problems) -> dict:
    """masks.json, bounded and type-checked; its problems join the folder's (every problem in one run), and a
    part with a problem reads as absent."""
    path = src / MASKS_META
    why = _entry_problem(path)
    if why:
        raise InvalidStoreError(Problem(str(path), why))
    meta = load_json(path, limits=BOXES_JSON)
    if not isinstance(meta, dict):
        raise InvalidStoreError(Problem(str(path), 'must be an object {"model", "scores", ...}'))
    n = len(problems)
    unknown = sorted(set(meta) - set(MASKS_META_KEYS))
    if unknown:
        problems.add(str(path), f"unknown key(s) {', '.join(unknown)} (expected {', '.join(MASKS_META_KEYS)})")
    if not isinstance(meta.get("model", ""), str):
        problems.add(f"{path}: model", "must be a string")
    un = meta.get("unsupported", [])
    if not (isinstance(un, list) and all(isinstance(u, str) for u in un)):
        problems.add(f"{path}: unsupported", "must be a list of finding names")
    if meta.get("phrases_unsupported") is not None and not isinstance(meta["phrases_unsupported"], str):
        problems.add(f"{path}: phrases_unsupported", "must be a string (the reason)")
    for key, depth in (("scores", 3), ("phrase_scores", 2)):
        _check_scores(meta.get(key, {}), depth, f"{path}: {key}", problems)
    return meta if len(problems) == n else {}


def _check_scores(value, depth: int, where: str, problems: Problems) -> None:
    """``value`` is nested objects ``depth`` deep ending in probabilities."""
    if depth == 0:
        v = _number(value)
        if v is None or not math.isfinite(v) or not 0.0 <= v <= 1.0:
            problems.add(where, f"must be a probability in [0, 1], got {value!r}")
        return
    if not isinstance(value, dict):
        problems.add(where, "must be an object")
        return
    for k, v in value.items():
        _check_scores(v, depth - 1, f"{where}.{k}", problems)


def read_masks_folder(src: Path, images, *, mapping: dict) -> ParsedMasks:
    """A folder of PNG masks (the module docstring), headers checked, against the images store."""
    problems = Problems()
    meta = _read_masks_meta(src, problems)
    items: dict[str, dict[str, dict[str, list]]] = {}
    phrases: dict[str, dict[str, list]] = {}
    unsupported: dict[str, list[str]] = {}
    count = _MarkCount(src)
    for entry in _scandir(src, problems, "dataset folders") or []:
        if entry.name == MASKS_META or not entry.is_dir(follow_symlinks=False) and not entry.is_symlink():
            continue
        name, folder = entry.name, src / entry.name
        if name not in images.datasets:
            problems.add(str(folder), f"is not a dataset of the images store ({', '.join(sorted(images.datasets))})")
            continue
        ds = images.datasets[name]
        classes, cases = tuple(ds.classes), _case_lookup(ds.case_id)
        got = items.setdefault(name, {})
        for case_entry in _scandir(folder, problems, "case folders") or []:
            path = folder / case_entry.name
            if case_entry.name == PHRASES_FOLDER:
                phrases[name] = _read_phrase_pngs(path, ds, problems, count)
                continue
            if case_entry.name not in cases:
                problems.add(str(path), f"is not a case of the images store's {name}")
                continue
            for f in _scandir(path, problems, "PNG masks, one per finding") or []:
                _add_png(path / f.name, f.name, got.setdefault(case_entry.name, {}), classes, mapping, name,
                         problems, count)
        resolved = [_resolve_name(u, mapping["categories"], classes) for u in meta.get("unsupported", [])]
        unsupported[name] = [c for c in classes if c in resolved]
    if not items and not problems:
        problems.add(str(src), f"holds no dataset folder of the images store ({', '.join(sorted(images.datasets))})")
    problems.raise_if_any()
    scores = {d: {c: {_resolve_name(k, mapping["categories"], tuple(images.datasets[d].classes)) or k: float(v)
                      for k, v in per.items()} for c, per in cs.items()}
              for d, cs in meta.get("scores", {}).items()}
    phrase_scores = {d: {q: float(v) for q, v in qs.items()} for d, qs in meta.get("phrase_scores", {}).items()}
    _check_named(scores, phrase_scores, images, src, problems)
    problems.raise_if_any()
    return ParsedMasks(meta.get("model") or mapping["model"] or src.name, "png-masks", items, phrases, unsupported,
                       scores, phrase_scores, meta.get("phrases_unsupported"))


def _add_png(path: Path, file: str, per_finding: dict, classes, mapping, name, problems: Problems, count) -> None:
    if not file.lower().endswith(".png"):
        return  # not read (a README, a .DS_Store)
    finding = _resolve_name(file[:-4], mapping["categories"], classes)
    if finding is None or (finding and finding not in classes):
        problems.add(str(path), f"names no finding of {name} ({', '.join(classes)}); map it in the mapping file")
        return
    why = png_header_problem(path)
    if why:
        problems.add(str(path), why)
        return
    if finding:
        count.add(1)
        per_finding.setdefault(finding, []).append(path)


def _read_phrase_pngs(folder: Path, ds, problems: Problems, count) -> dict[str, list]:
    rows = _query_lookup(ds)
    out: dict[str, list] = {}
    for f in _scandir(folder, problems, "PNG masks, one per phrase row") or []:
        path = folder / f.name
        if not f.name.lower().endswith(".png"):
            continue
        qid = f.name[:-4]
        if qid not in rows:
            problems.add(str(path), "is not a phrase row (query_id) of the images store")
            continue
        why = png_header_problem(path)
        if why:
            problems.add(str(path), why)
            continue
        count.add(1)
        out[qid] = [path]
    return out


def _check_named(scores, phrase_scores, images, src: Path, problems: Problems) -> None:
    """Every dataset, case, finding and phrase row masks.json scores is one of the images store."""
    where = src / MASKS_META
    for d, cs in scores.items():
        if d not in images.datasets:
            problems.add(f"{where}: scores.{d}", "is not a dataset of the images store")
            continue
        ds = images.datasets[d]
        cases = _case_lookup(ds.case_id)
        for c, per in cs.items():
            if c not in cases:
                problems.add(f"{where}: scores.{d}.{c}", "is not a case of the images store")
            for f in per:
                if f not in ds.classes:
                    problems.add(f"{where}: scores.{d}.{c}.{f}", f"is not a finding of {d}")
    for d, qs in phrase_scores.items():
        rows = _query_lookup(images.datasets[d]) if d in images.datasets else {}
        for q in qs:
            if q not in rows:
                problems.add(f"{where}: phrase_scores.{d}.{q}", "is not a phrase row of the images store")


#: cells per side of a converted mask without --grid or --gt (gt.zarr's default grid)
DEFAULT_MASK_GRID = 224


def _grids(names: list[str], grid: int | None, gt) -> dict[str, tuple[int, int]]:
    """Each dataset's map shape: --grid, else the ground truth's grid, else DEFAULT_MASK_GRID square."""
    if grid is not None:
        return {n: (grid, grid) for n in names}
    if gt is None:
        return {n: (DEFAULT_MASK_GRID, DEFAULT_MASK_GRID) for n in names}
    from xbench.schemas.ground_truth import GroundTruth, read_ground_truth

    truth = gt if isinstance(gt, GroundTruth) else read_ground_truth(gt)
    return {n: tuple(int(v) for v in truth.datasets[n].grid) if n in truth.datasets
            else (DEFAULT_MASK_GRID, DEFAULT_MASK_GRID) for n in names}


# -- writing --------------------------------------------------------------------------------------------
def _item_map(entries: list, grid: tuple[int, int]) -> tuple[np.ndarray, float]:
    """(map, derived score) of one case and finding: COCO instances, or one PNG path."""
    if entries and isinstance(entries[0], Instance):
        try:
            return instance_map(entries, grid), max(i.score for i in entries)
        except LesionLimitError as exc:
            raise InvalidStoreError(Problem(f"an RLE segmentation of a {entries[0].size[1]}x{entries[0].size[0]} image",
                                            str(exc))) from None
    values, one = read_png_mask(entries[0])
    try:
        return mask_to_grid(values, grid, scale=one), float(values.max()) / one if values.size else 0.0
    except LesionLimitError as exc:
        raise InvalidStoreError(Problem(str(entries[0]), str(exc))) from None


def convert_masks(src: str | Path, out: str | Path, *, images: str | Path, results: list | None = None,
                  mapping: str | Path | None = None, coco_images: str | Path | None = None,
                  dataset: str | None = None, grid: int | None = None, cases_per_block: int = 64,
                  map_dtype: str = "float32", progress: Callable[[int], None] | None = None,
                  total: Callable[[int], None] | None = None, gt=None, require_phrases: bool = False,
                  phrases_reason: str | None = None) -> Path:
    """Convert COCO results with segmentations (``results``, the parsed list, or read from ``src``) or a folder
    of PNG masks into a submission store (method "masks").

    ``grid``: cells per side of the maps; by default each dataset's ground-truth grid when ``gt`` is given
    (the scorer then compares the mask itself, with no resize), else :data:`DEFAULT_MASK_GRID`."""
    from xbench.schemas.convert import Converted, _refuse_out_in_inputs, _write
    from xbench.schemas.images import read_images

    src = Path(src)
    _refuse_out_in_inputs(out, src, gt)
    if grid is not None and not 1 <= grid <= 1024:
        raise InvalidStoreError(Problem("--grid", f"must be 1..1024 cells per side, got {grid}"))
    store = read_images(images)
    maps = read_mapping(Path(mapping) if mapping else None)
    if src.is_dir():
        if coco_images or dataset:
            raise InvalidStoreError(Problem(str(src), "--coco-images and --dataset are for COCO results; a folder of "
                                                      "PNG masks names its datasets by its folders"))
        parsed = read_masks_folder(src, store, mapping=maps)
    else:
        if results is None:
            results = load_json(src, limits=BOXES_JSON)
        parsed = read_coco_masks(src, results, store, dataset=dataset, mapping=maps,
                                 coco_images=Path(coco_images) if coco_images else None)
    del results
    grids = _grids(sorted(parsed.items), grid, gt)
    specs = {}
    for name in sorted(parsed.items):
        ds = store.datasets[name]
        fields = {}
        if ds.queries is not None:
            given = name in parsed.phrases
            fields = phrase_fields(f"{src}: {name}", [str(q) for q in ds.queries.id] if given else [],
                                   parsed.phrases_unsupported, require=require_phrases, default_reason=phrases_reason)
        specs[name] = DatasetSpec(case_ids=[str(c) for c in ds.case_id], classes=tuple(ds.classes), map_shape=grids[name],
                                  score_kind="probability", unsupported=tuple(parsed.unsupported.get(name, ())),
                                  **fields)
    if total:
        total(sum(len(s.case_ids) for s in specs.values()))

    def fill(get_entries, get_score, shape: tuple) -> tuple:
        g = shape[-2:]
        scores, out_maps, problems = np.zeros(shape[:-2], np.float32), np.zeros(shape, np.float32), []
        for idx in np.ndindex(*shape[:-2]):
            entries = get_entries(idx)
            given = get_score(idx)
            if entries:
                try:
                    m, derived = _item_map(entries, g)
                except InputError as exc:
                    problems += exc.problems
                    continue
                out_maps[idx] = m
                scores[idx] = derived if given is None else given
            elif given is not None:
                scores[idx] = given
        if problems:
            raise PartialBlock(problems, (scores, out_maps))
        return scores, out_maps

    def blocks(name: str, start: int, stop: int):
        spec, per_case, given = specs[name], parsed.items[name], parsed.scores.get(name, {})
        ids, cls = spec.case_ids[start:stop], spec.classes
        return fill(lambda ij: per_case.get(ids[ij[0]], {}).get(cls[ij[1]]),
                    lambda ij: given.get(ids[ij[0]], {}).get(cls[ij[1]]),
                    (stop - start, len(cls), *grids[name]))

    def phrase_blocks(name: str, start: int, stop: int):
        spec, per_q, given = specs[name], parsed.phrases.get(name, {}), parsed.phrase_scores.get(name, {})
        ids = spec.query_ids[start:stop]
        return fill(lambda i: per_q.get(ids[i[0]]), lambda i: given.get(ids[i[0]]), (stop - start, *grids[name]))

    provenance = {"source": {"format": parsed.fmt, "file": src.name,
                             **({} if src.is_dir() else {"sha256": file_sha256(src)})},
                  "mapping": {"file": Path(mapping).name, "sha256": file_sha256(Path(mapping))} if mapping else None,
                  "images": Path(images).name,
                  "map_rule": {"grids": {k: list(v) for k, v in grids.items()}, "rule": "docs/contract.md, Converting masks"}}
    converted = Converted(parsed.model, "masks", provenance, specs, blocks, phrase_blocks, str(src))
    return _write(out, converted, cases_per_block, map_dtype, progress, gt)


def convert_json(src: str | Path, out: str | Path, **kw) -> Path:
    """A .json SOURCE, parsed once: COCO results with segmentations are masks (:func:`convert_masks`), anything
    else boxes and points (:func:`xbench.schemas.convert_boxes.convert_marks`)."""
    from xbench.schemas.convert import _refuse_out_in_inputs
    from xbench.schemas.convert_boxes import convert_marks

    _refuse_out_in_inputs(out, Path(src), kw.get("gt"))
    data = load_json(Path(src), limits=BOXES_JSON)
    if isinstance(data, list) and has_segmentations(data):
        return convert_masks(src, out, results=data, **kw)
    return convert_marks(src, out, data=data, **kw)
