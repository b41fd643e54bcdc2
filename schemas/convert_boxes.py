"""Box and point outputs -> submission.zarr: detectors and text-output models on the same leaderboard.

Two sources are read (docs/how-to/convert.md has a worked example of each; the rule is in docs/contract.md,
"Converting boxes and points"):

* **COCO results** (what detectors write): a JSON list of ``{"image_id", "category_id", "bbox": [x, y,
  w, h], "score"}``, coordinates in original pixels. ``image_id`` is the case id itself, unless a COCO
  dataset JSON (``--coco-images``: its ``images`` list of ``{"id", "file_name"}``) is given: then the
  case id is the file name without its folders (as is, or without its extension). Category ids map to
  findings through the mapping file, or through the category names of ``--coco-images`` when they are
  the findings' names. All results are of one dataset (``--dataset``, or the images store's only one).
* **Marks JSON** (what text-output models emit)::

      {"model": "maira-2", "coordinates": "pixels" | "normalised",
       "unsupported": ["<finding>", ...],
       "datasets": {"<dataset>": {"<case_id>": {"<finding>": {
           "boxes": [[x, y, w, h], [x, y, w, h, score], ...],
           "points": [[x, y], [x, y, score], ...],
           "score": p}}}}}

  every key but ``datasets`` optional; ``normalised`` coordinates are fractions of the width (x) and
  height (y). A finding name maps through the mapping file, or is the finding's own name (any case).
  Phrase rows: ``"phrases": {"<dataset>": {"<query_id>": {"boxes", "points", "score"}}}`` or
  ``"phrases_unsupported": "<reason>"``; a COCO result with ``query_id`` in place of ``category_id`` is a
  box of that phrase row (its ``image_id`` must be the phrase's own image).

Both are untrusted input read through :func:`xbench.schemas.inputs.load_json` under :data:`BOXES_JSON`
(size, depth and value count capped before parsing), with at most :data:`MAX_MARKS` marks in all and
:data:`MAX_MARKS_PER_ITEM` per case and finding or phrase row.

The mapping file (``.json`` or ``.toml``): ``model = "name"`` and a table ``categories`` of COCO
category id or name, or free-text finding -> XBench finding (``""`` drops that category's marks).

The rule (pure functions :func:`mark_map` and :func:`finding_score`): every case of the images store's
dataset gets, per finding, a ``grid`` x ``grid`` map (default 64 x 64, row 0 = top) over its original
frame. A box is clipped to the image and adds its score to every cell whose centre lies inside it
(half-open, ``x <= cx < x + w``, as the ground truth is rasterised); a box no cell centre falls inside
adds it to the cell holding the clipped box's centre instead. A point adds its score to the one cell
holding it. Overlapping marks sum. A mark without a score counts 1. The finding's score (a probability)
is its explicit ``score``, else the highest score of its marks, else 0; a finding with no mark has a
constant 0 map. Findings no category maps to (COCO), or listed in ``unsupported`` (marks JSON), are
declared unsupported. Bad input is refused, one problem a line: an unknown category or finding, an
image id not in the images store, a non-finite or negative-sized box, a box wholly outside the image, a
point outside it, a score outside [0, 1].
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import numpy as np

from xbench.schemas import grid as exact
from xbench.schemas.convert import Problems, phrase_fields
from xbench.schemas.errors import InputLimitError, InvalidStoreError, Problem
from xbench.schemas.inputs import CONFIG, MiB, TextLimits, load_json, load_toml
from xbench.schemas.store import file_sha256
from xbench.schemas.submission import DatasetSpec

DEFAULT_GRID = 64
COORDINATES = ("pixels", "normalised")
#: marks (boxes and points) one source may hold in all, and per case and finding (or phrase row); with the
#: JSON caps below they keep a conversion within a few hundred MiB whatever the file holds (docs/how-to/convert.md)
MAX_MARKS = 1_000_000
MAX_MARKS_PER_ITEM = 10_000
#: a COCO results file or marks JSON: its size and JSON values are capped before it is parsed (a parsed
#: value costs up to ~100 bytes of Python objects: 4 million of them stay under 0.5 GiB)
BOXES_JSON = TextLimits(max_bytes=128 * MiB, max_depth=16, max_elements=4_000_000)


@dataclass(frozen=True, slots=True)
class Mark:
    """One box ``(x, y, w, h)`` or point ``(x, y)`` in original pixels, with its score."""

    coords: tuple[float, ...]
    score: float

    @property
    def is_box(self) -> bool:
        return len(self.coords) == 4


@dataclass
class Finding:
    """What the source says about one case and finding: its marks and an optional explicit score."""

    marks: list[Mark]
    score: float | None = None


# -- the rule -------------------------------------------------------------------------------------------
def _cell(v: float | Fraction, n_native: int, n_cells: int) -> int:
    """The cell holding native coordinate ``v``, clipped to the grid (a point on the far edge is in the last cell);
    floor(v * n_cells / n_native) in exact rationals, never rounded across a cell edge."""
    return min(max(math.floor(Fraction(v) * n_cells / n_native), 0), n_cells - 1)


def mark_map(marks: list[Mark], orig_size: tuple[int, int], grid: int = DEFAULT_GRID) -> np.ndarray:
    """The (grid, grid) float64 map of one case and finding (the rule in the module docstring).

    Marks must have been checked (:func:`mark_problem`): boxes lie at least partly inside the image. The
    cells a box covers are one run of rows by one run of columns (cell centres are sorted), found for all
    boxes at once and exactly (:mod:`xbench.schemas.grid`); each box then adds its score to that slice.
    """
    h0, w0 = (int(v) for v in orig_size)
    out = np.zeros((grid, grid), np.float64)
    boxes = []
    for m in marks:
        if m.is_box:
            boxes.append(m)
        else:
            out[_cell(m.coords[1], h0, grid), _cell(m.coords[0], w0, grid)] += m.score
    if not boxes:
        return out
    b = np.asarray([m.coords for m in boxes], np.float64)
    r0, r1 = _span_cells(b[:, 1], b[:, 3], h0, grid)
    c0, c1 = _span_cells(b[:, 0], b[:, 2], w0, grid)
    for k, m in enumerate(boxes):
        if r1[k] > r0[k] and c1[k] > c0[k]:
            out[r0[k]:r1[k], c0[k]:c1[k]] += m.score
        else:  # smaller than a cell, slipping between centres: never lost (the ground truth's per-lesion rule)
            fx, fy, fw, fh = (Fraction(v) for v in m.coords)
            y0, y1 = max(fy, 0), min(fy + fh, h0)  # exact rationals: the clipped centre's cell
            x0, x1 = max(fx, 0), min(fx + fw, w0)
            out[_cell((y0 + y1) / 2, h0, grid), _cell((x0 + x1) / 2, w0, grid)] += m.score
    return out


def _span_cells(start: np.ndarray, length: np.ndarray, n_native: int, n_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The cells k0 .. k1-1 whose centre c satisfies start <= c < start + length exactly, the span clipped to
    [0, n_native]. The far edge start + length is a float sum that can round across a centre: where it is not
    exact (TwoSum error e != 0) the one centre that may lie between the rounded sum and the true one is
    checked in rationals."""
    end = start + length
    back = end - start
    err = (start - (end - back)) + (length - back)  # start + length == end + err exactly
    k0, k1 = exact.centre_ranges(start, end, n_native, n_cells)
    for i in np.flatnonzero(err != 0):
        true_end = min(Fraction(float(start[i])) + Fraction(float(length[i])), Fraction(n_native))
        k1[i] = min(math.ceil(2 * n_cells * true_end / n_native) // 2, n_cells)  # the first centre >= the end
    return k0, k1


def finding_score(finding: Finding | None) -> float:
    """Explicit score, else the highest mark score, else 0."""
    if finding is None:
        return 0.0
    if finding.score is not None:
        return finding.score
    return max((m.score for m in finding.marks), default=0.0)


def mark_problem(coords: tuple[float, ...], score: float, orig_size: tuple[int, int]) -> str | None:
    """Why a mark (already in pixels) cannot be used, or None."""
    h0, w0 = (int(v) for v in orig_size)
    if not all(math.isfinite(v) for v in (*coords, score)):
        return "has a non-finite value"
    if not 0.0 <= score <= 1.0:
        return f"score {score:g} is outside [0, 1]"
    if len(coords) == 4:
        x, y, w, h = coords
        if w <= 0 or h <= 0:
            return f"box [{x:g}, {y:g}, {w:g}, {h:g}] has a width or height that is not positive"
        if x >= w0 or y >= h0 or x + w <= 0 or y + h <= 0:
            return f"box [{x:g}, {y:g}, {w:g}, {h:g}] lies wholly outside the {w0}x{h0} image (width x height)"
        return None
    x, y = coords
    if not (0 <= x <= w0 and 0 <= y <= h0):
        return f"point [{x:g}, {y:g}] lies outside the {w0}x{h0} image (width x height)"
    return None


# -- reading --------------------------------------------------------------------------------------------
_Problems = Problems


class _MarkCount:
    """Counts marks as they are read: past :data:`MAX_MARKS` the source is refused at once (one line)."""

    def __init__(self, src: Path) -> None:
        self.src, self.n = src, 0

    def add(self, n: int) -> None:
        self.n += n
        if self.n > MAX_MARKS:
            raise InputLimitError(Problem(str(self.src), f"holds more than {MAX_MARKS:,} marks (boxes and points); "
                                                         "the limit is stated in docs/how-to/convert.md (keep the top-scoring ones)"))


def _load_json(path: Path, what: str, limits: TextLimits = BOXES_JSON) -> Any:
    return load_json(path, limits=limits)


def read_mapping(path: Path | None) -> dict:
    """The mapping file: {"model": str | None, "categories": {str: str}} (empty when no file)."""
    if path is None:
        return {"model": None, "categories": {}}
    path = Path(path)
    if path.suffix.lower() == ".toml":
        data = load_toml(path, limits=CONFIG)
    else:
        data = _load_json(path, "mapping file", CONFIG)
    problems = _Problems()
    if not isinstance(data, dict):
        raise InvalidStoreError(Problem(str(path), "must be an object with a 'categories' table"))
    unknown = sorted(set(data) - {"model", "categories"})
    if unknown:
        problems.add(str(path), f"unknown key(s) {', '.join(unknown)} (expected model, categories)")
    cats = data.get("categories", {})
    if not isinstance(cats, dict):
        problems.add(f"{path}: categories", "must be a table of category or finding -> XBench finding")
        cats = {}
    for k, v in cats.items():
        if not isinstance(v, str):
            problems.add(f"{path}: categories.{k}", f"must be a finding name or \"\" (drop), got {v!r}")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        problems.add(f"{path}: model", "must be a string")
    problems.raise_if_any()
    return {"model": model, "categories": {str(k): v for k, v in cats.items()}}


def _resolve_name(name: str, mapping: dict[str, str], classes: tuple[str, ...]) -> str | None:
    """XBench finding for a category or free-text name: the mapping first, else the finding's own name (any
    case); "" = dropped (returned as ""); None = unknown."""
    if name in mapping:
        return mapping[name]
    lower = {c.lower(): c for c in classes}
    return lower.get(name.strip().lower())


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _numbers(v, sizes: tuple[int, ...]) -> tuple[float, ...] | None:
    if not isinstance(v, (list, tuple)) or len(v) not in sizes:
        return None
    out = tuple(_number(x) for x in v)
    return None if any(x is None for x in out) else out


@dataclass
class Parsed:
    """A source read and checked: per dataset, case id -> finding -> Finding, plus what the submission says."""

    model: str
    method: str
    findings: dict[str, dict[str, dict[str, Finding]]]
    unsupported: dict[str, list[str]]
    info: dict
    phrases: dict[str, dict[str, Finding]] = field(default_factory=dict)  # dataset -> query id -> marks
    phrases_unsupported: str | None = None  # the source's own reason (marks JSON)


def _case_lookup(case_ids) -> dict[str, int]:
    return {str(c): i for i, c in enumerate(case_ids)}


def _id_text(value) -> str | None:
    """An id from a source (COCO image_id, category_id): an integer or a string; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    return str(value)


def _query_lookup(ds) -> dict[str, int]:
    q = ds.queries
    return {} if q is None else {str(x): i for i, x in enumerate(q.id.tolist())}


def read_coco(src: Path, images, *, dataset: str | None, mapping: dict, coco_images: Path | None,
              results: list | None = None) -> Parsed:
    """Read a COCO results file against the images store ``images`` (an ImagesStore).

    A result with ``query_id`` in place of ``category_id`` is a box of that phrase row (docs/how-to/convert.md)."""
    problems = _Problems()
    if results is None:
        results = _load_json(src, "COCO results file")
    if not isinstance(results, list):
        raise InvalidStoreError(Problem(str(src), "a COCO results file is a JSON list of {image_id, category_id, "
                                                  "bbox, score}"))
    name = _pick_dataset(images, dataset, src)
    ds = images.datasets[name]
    classes = tuple(ds.classes)
    cases = _case_lookup(ds.case_id)
    queries = _query_lookup(ds)
    id_to_case, cat_names = _coco_images(coco_images, cases) if coco_images else (None, {})
    cat_map = dict(mapping["categories"])
    findings: dict[str, dict[str, Finding]] = {}
    phrases: dict[str, Finding] = {}
    used: set[str] = set()
    unknown_cats: dict[str, int] = {}
    count = _MarkCount(src)
    for k, r in enumerate(results):
        results[k] = None  # each result is dropped once read: the parsed list and the marks never both stay whole
        where = f"{src}: result {k}"
        if not isinstance(r, dict):
            problems.add(where, "is not an object")
            continue
        kind = "query_id" if "query_id" in r else "category_id"
        missing = [key for key in ("image_id", kind, "bbox", "score") if key not in r]
        if missing:
            problems.add(where, f"lacks {', '.join(missing)}")
            continue
        if "query_id" in r and "category_id" in r:
            problems.add(where, "has both category_id and query_id; a result is of a finding or of a phrase row")
            continue
        image_id = _id_text(r["image_id"])
        if image_id is None:
            problems.add(where, "image_id must be an integer or a string")
            continue
        case = id_to_case.get(image_id) if id_to_case is not None else image_id
        if case is None:
            problems.add(where, f"image_id {image_id} is not in --coco-images")
            continue
        if case not in cases:
            problems.add(where, f"image_id {image_id} (case {case!r}) is not in the images store's {name}")
            continue
        box, score = _numbers(r["bbox"], (4,)), _number(r["score"])
        if box is None or score is None:
            problems.add(where, "bbox must be [x, y, w, h] (numbers) and score a number")
            continue
        why = mark_problem(box, score, tuple(ds.orig_size[cases[case]]))
        if why:
            problems.add(where, why)
            continue
        target = _coco_target(r, kind, where, problems, name, ds, queries, cases, case, image_id, cat_map, cat_names,
                              classes, unknown_cats, used, phrases, findings)
        if target is None:
            continue
        if len(target.marks) >= MAX_MARKS_PER_ITEM:
            problems.add(where, f"is one more than the {MAX_MARKS_PER_ITEM:,} boxes one case and finding (or phrase "
                                "row) may have")
            continue
        count.add(1)
        target.marks.append(Mark(box, score))
    for cat, n in sorted(unknown_cats.items()):
        shown = f"{cat} ({cat_names[cat]})" if cat in cat_names else cat
        problems.add(str(src), f"category {shown} ({n} result(s)) maps to no finding of {name}; name it in the "
                               "mapping file's categories (\"\" to drop it)")
    problems.raise_if_any()
    # the findings a detector can name: every category the mapping (or --coco-images) sends somewhere
    named = {f for f in cat_map.values() if f} | {f for c in cat_names.values() if (f := _resolve_name(c, cat_map, classes))}
    named |= used
    unsupported = [c for c in classes if c not in named]
    if len(unsupported) == len(classes):
        raise InvalidStoreError(Problem(str(src), f"names none of the findings of {name}; give a mapping file"))
    info = {"format": "coco-results", "coco_images": Path(coco_images).name if coco_images else None}
    return Parsed(mapping["model"] or src.stem, "boxes", {name: findings}, {name: unsupported}, info,
                  {name: phrases} if phrases else {})


def coco_finding(r: dict, where: str, problems, name: str, classes, cat_map: dict, cat_names: dict,
                 unknown_cats: dict) -> str | None:
    """The finding a COCO result's ``category_id`` names (through the mapping, or --coco-images' category names), or
    None: a problem added, an unknown category counted in ``unknown_cats``, or a category the mapping drops."""
    cat = _id_text(r["category_id"])
    if cat is None:
        problems.add(where, "category_id must be an integer or a string")
        return None
    finding = _resolve_name(cat, cat_map, classes)
    if finding is None and cat in cat_names:
        finding = _resolve_name(cat_names[cat], cat_map, classes)
    if finding is None:
        unknown_cats[cat] = unknown_cats.get(cat, 0) + 1
        return None
    if finding == "":
        return None
    if finding not in classes:
        problems.add(where, f"category {cat} maps to {finding!r}, which is not a finding of {name} "
                            f"({', '.join(classes)})")
        return None
    return finding


def _coco_target(r: dict, kind: str, where: str, problems, name, ds, queries, cases, case, image_id, cat_map,
                 cat_names, classes, unknown_cats: dict, used: set, phrases: dict, findings: dict):
    """The Finding one COCO result's box joins (a phrase row's or a case's finding), or None: a problem added, an
    unknown category counted, or a category the mapping drops."""
    if kind == "query_id":
        qid = _id_text(r["query_id"])
        row = queries.get(qid) if qid is not None else None
        if row is None:
            problems.add(where, f"query_id {r['query_id']!r} is not a phrase row of the images store's {name}"
                                + ("" if queries else " (it has none)"))
            return None
        if int(ds.queries.case[row]) != cases[case]:
            problems.add(where, f"query_id {qid!r} is a phrase of case {str(ds.case_id[int(ds.queries.case[row])])!r}, "
                                f"not of image_id {image_id}")
            return None
        return phrases.setdefault(qid, Finding([]))
    finding = coco_finding(r, where, problems, name, classes, cat_map, cat_names, unknown_cats)
    if finding is None:
        return None
    used.add(finding)
    return findings.setdefault(case, {}).setdefault(finding, Finding([]))


def _pick_dataset(images, dataset: str | None, src: Path) -> str:
    if dataset is None:
        if len(images.datasets) != 1:
            raise InvalidStoreError(Problem(str(src), "COCO results are of one dataset; name it with --dataset "
                                                      f"(the images store has {', '.join(sorted(images.datasets))})"))
        return next(iter(images.datasets))
    if dataset not in images.datasets:
        raise InvalidStoreError(Problem("--dataset", f"{dataset!r} is not in the images store (it has "
                                                     f"{', '.join(sorted(images.datasets))})"))
    return dataset


def _coco_images(path: Path, cases: dict[str, int]) -> tuple[dict[str, str], dict[str, str]]:
    """image id -> case id (the file name, or its stem, that is a case id) and category id -> name."""
    data = _load_json(Path(path), "COCO images file")
    problems = _Problems()
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise InvalidStoreError(Problem(str(path), "a COCO dataset JSON has an 'images' list of {id, file_name}"))
    ids: dict[str, str] = {}
    for k, im in enumerate(data["images"]):
        image_id = _id_text(im.get("id")) if isinstance(im, dict) else None
        if image_id is None or not isinstance(im.get("file_name"), str):
            problems.add(f"{path}: images[{k}]", "needs id (an integer or a string) and file_name")
            continue
        base = im["file_name"].replace("\\", "/").rsplit("/", 1)[-1]
        stem = base.rsplit(".", 1)[0] if "." in base else base
        case = base if base in cases else stem if stem in cases else None
        if case is None:
            problems.add(f"{path}: images[{k}]", f"file_name {im['file_name']!r} names no case of the images store")
            continue
        ids[image_id] = case
    categories = data.get("categories", []) or []
    if not isinstance(categories, list):
        problems.add(f"{path}: categories", "must be a list of {id, name}")
        categories = []
    cats = {}
    for k, c in enumerate(categories):
        cid = _id_text(c.get("id")) if isinstance(c, dict) else None
        if cid is None or not isinstance(c.get("name"), str):
            problems.add(f"{path}: categories[{k}]", "needs id (an integer or a string) and name (a string)")
            continue
        cats[cid] = c["name"]
    problems.raise_if_any()
    return ids, cats


MARKS_KEYS = ("model", "coordinates", "unsupported", "datasets", "phrases", "phrases_unsupported")


def read_marks(src: Path, images, *, mapping: dict, data: Any = None) -> Parsed:
    """Read a marks JSON (the layout in the module docstring) against the images store."""
    if data is None:
        data = _load_json(src, "marks JSON")
    problems = _Problems()
    if not isinstance(data, dict) or not isinstance(data.get("datasets"), dict):
        raise InvalidStoreError(Problem(str(src), 'a marks JSON is an object {"datasets": {"<dataset>": {"<case_id>": '
                                                  '{"<finding>": {"boxes": [...], "points": [...], "score": p}}}}}'))
    unknown = sorted(set(data) - set(MARKS_KEYS))
    if unknown:
        problems.add(str(src), f"unknown key(s) {', '.join(unknown)} (expected {', '.join(MARKS_KEYS)})")
    coordinates = data.get("coordinates", "pixels")
    if coordinates not in COORDINATES:
        raise InvalidStoreError(Problem(f"{src}: coordinates", f"must be 'pixels' or 'normalised', got {coordinates!r}"))
    said_unsupported = data.get("unsupported", [])
    if not isinstance(said_unsupported, list) or not all(isinstance(u, str) for u in said_unsupported):
        problems.add(f"{src}: unsupported", "must be a list of finding names")
        said_unsupported = []
    reason = data.get("phrases_unsupported")
    if reason is not None and not isinstance(reason, str):
        problems.add(f"{src}: phrases_unsupported", "must be a string (the reason)")
        reason = None
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        problems.add(f"{src}: model", "must be a string")
        model = None
    count = _MarkCount(src)
    findings: dict[str, dict[str, dict[str, Finding]]] = {}
    unsupported: dict[str, list[str]] = {}
    n_boxes = n_points = 0
    for name, per_case in data["datasets"].items():
        if name not in images.datasets:
            problems.add(f"{src}: {name}", f"is not a dataset of the images store ({', '.join(sorted(images.datasets))})")
            continue
        if not isinstance(per_case, dict):
            problems.add(f"{src}: {name}", "must map case ids to findings")
            continue
        ds = images.datasets[name]
        classes, cases = tuple(ds.classes), _case_lookup(ds.case_id)
        found = findings.setdefault(name, {})
        for case, per_finding in per_case.items():
            where = f"{src}: {name}/{case}"
            if case not in cases:
                problems.add(where, f"case {case!r} is not in the images store's {name}")
                continue
            if not isinstance(per_finding, dict):
                problems.add(where, "must map finding names to {boxes, points, score}")
                continue
            size = tuple(int(v) for v in ds.orig_size[cases[case]])
            for label, entry in per_finding.items():
                f = _read_finding(entry, f"{where}/{label}", size, coordinates, problems, count)
                finding = _resolve_name(label, mapping["categories"], classes)
                if finding is None or (finding and finding not in classes):
                    problems.add(f"{where}/{label}", f"names no finding of {name} ({', '.join(classes)}); "
                                                     "map it in the mapping file's categories")
                    continue
                if f is None or finding == "":
                    continue
                n_boxes += sum(m.is_box for m in f.marks)
                n_points += sum(not m.is_box for m in f.marks)
                have = found.setdefault(case, {}).get(finding)
                if have is None:
                    found[case][finding] = f
                else:  # two labels mapped to one finding: their marks pool, the higher explicit score wins
                    have.marks += f.marks
                    have.score = f.score if have.score is None else max(have.score, f.score or 0.0)
        resolved = [_resolve_name(u, mapping["categories"], classes) for u in said_unsupported]
        unsupported[name] = [c for c in classes if c in resolved]
    phrases, n_marks = _read_marks_phrases(src, data, images, reason, coordinates, problems, count)
    n_boxes, n_points = n_boxes + n_marks[0], n_points + n_marks[1]
    for name in phrases:
        findings.setdefault(name, {})
        unsupported.setdefault(name, [])
    if not findings and not problems:
        problems.add(str(src), "names no dataset")
    problems.raise_if_any()
    info = {"format": "marks-json", "coordinates": coordinates, "boxes": n_boxes, "points": n_points}
    method = "points" if n_points and not n_boxes else "boxes"
    return Parsed(str(model or mapping["model"] or src.stem), method, findings, unsupported, info,
                  {k: v for k, v in phrases.items()}, reason)


def _read_marks_phrases(src: Path, data: dict, images, reason, coordinates: str, problems: _Problems,
                        count: _MarkCount) -> tuple[dict[str, dict[str, Finding]], tuple[int, int]]:
    """A marks JSON's ``phrases``: {dataset: {query id: Finding}} and the (boxes, points) they hold."""
    phrases: dict[str, dict[str, Finding]] = {}
    n_boxes = n_points = 0
    per_dataset = data.get("phrases", {})
    if not isinstance(per_dataset, dict):
        problems.add(f"{src}: phrases", 'must be an object {"<dataset>": {"<query_id>": {"boxes", "points", "score"}}}')
        per_dataset = {}
    if per_dataset and reason is not None:
        problems.add(str(src), "holds phrases and also declares phrases_unsupported; give one or the other")
    for name, per_query in per_dataset.items():
        where = f"{src}: phrases/{name}"
        if name not in images.datasets:
            problems.add(where, f"is not a dataset of the images store ({', '.join(sorted(images.datasets))})")
            continue
        if not isinstance(per_query, dict):
            problems.add(where, "must map query ids to {boxes, points, score}")
            continue
        ds = images.datasets[name]
        rows = _query_lookup(ds)
        if not rows:
            problems.add(where, f"the images store's {name} has no phrase rows")
            continue
        got = phrases.setdefault(name, {})
        for qid, entry in per_query.items():
            row = rows.get(qid)
            if row is None:
                problems.add(f"{where}/{qid}", f"is not a phrase row (query_id) of the images store's {name}")
                continue
            size = tuple(int(v) for v in ds.orig_size[int(ds.queries.case[row])])
            f = _read_finding(entry, f"{where}/{qid}", size, coordinates, problems, count)
            if f is not None:
                n_boxes += sum(m.is_box for m in f.marks)
                n_points += sum(not m.is_box for m in f.marks)
                got[qid] = f
    return phrases, (n_boxes, n_points)


def _read_finding(entry, where: str, size: tuple[int, int], coordinates: str, problems: _Problems,
                  count: _MarkCount) -> Finding | None:
    if not isinstance(entry, dict):
        problems.add(where, "must be an object {boxes, points, score}")
        return None
    extra = sorted(set(entry) - {"boxes", "points", "score"})
    if extra:
        problems.add(where, f"unknown key(s) {', '.join(extra)} (expected boxes, points, score)")
        return None
    h0, w0 = size
    marks, ok = [], True
    for kind, n in (("boxes", 4), ("points", 2)):
        items = entry.get(kind, [])
        if not isinstance(items, list):
            problems.add(f"{where}/{kind}", "must be a list")
            ok = False
            continue
        if len(items) > MAX_MARKS_PER_ITEM:
            problems.add(f"{where}/{kind}", f"holds {len(items):,} marks; the limit is {MAX_MARKS_PER_ITEM:,} per case "
                                            "and finding (or phrase row)")
            ok = False
            continue
        count.add(len(items))
        for k, item in enumerate(items):
            v = _numbers(item, (n, n + 1))
            if v is None:
                problems.add(f"{where}/{kind}[{k}]", f"must be {n} numbers and an optional score")
                ok = False
                continue
            coords, score = v[:n], (v[n] if len(v) > n else 1.0)
            if coordinates == "normalised":
                if not all(0.0 <= c <= 1.0 for c in coords):
                    problems.add(f"{where}/{kind}[{k}]", "normalised coordinates must lie in [0, 1]")
                    ok = False
                    continue
                coords = tuple(c * (w0 if i % 2 == 0 else h0) for i, c in enumerate(coords))
            why = mark_problem(coords, score, size)
            if why:
                problems.add(f"{where}/{kind}[{k}]", why)
                ok = False
                continue
            marks.append(Mark(coords, score))
        items.clear()  # read: the parsed list is not kept beside the marks
    score = entry.get("score")
    if score is not None:
        s = _number(score)
        if s is None or not math.isfinite(s) or not 0.0 <= s <= 1.0:
            problems.add(f"{where}/score", f"must be a probability in [0, 1], got {score!r}")
            return None
        score = s
    return Finding(marks, score) if ok else None


# -- writing --------------------------------------------------------------------------------------------
def is_marks_source(src: Path) -> bool:
    """Whether ``xbench-convert`` reads ``src`` as boxes or points (a .json file)."""
    return Path(src).suffix.lower() == ".json" and not Path(src).is_dir()


def convert_marks(src: str | Path, out: str | Path, *, images: str | Path, mapping: str | Path | None = None,
                  coco_images: str | Path | None = None, dataset: str | None = None, grid: int | None = None,
                  cases_per_block: int = 64, map_dtype: str = "float32",
                  progress: Callable[[int], None] | None = None, total: Callable[[int], None] | None = None,
                  gt=None, require_phrases: bool = False, phrases_reason: str | None = None, data: Any = None) -> Path:
    """Convert a COCO results file (a JSON list) or a marks JSON (an object) into a submission store.

    ``total`` is told the number of cases once the source is read (for a progress bar); ``data``: the source
    already parsed (:func:`xbench.schemas.convert_masks.convert_json` parses it once to tell masks from boxes);
    ``grid`` None is :data:`DEFAULT_GRID`.
    """
    from xbench.schemas.convert import _refuse_out_in_inputs
    from xbench.schemas.images import read_images

    src = Path(src)
    _refuse_out_in_inputs(out, src, gt)
    if data is None:
        data = _load_json(src, "boxes and points")
    grid = DEFAULT_GRID if grid is None else grid
    if not 1 <= grid <= 1024:
        raise InvalidStoreError(Problem("--grid", f"must be 1..1024 cells per side, got {grid}"))
    store = read_images(images)
    maps = read_mapping(Path(mapping) if mapping else None)
    if isinstance(data, list):
        parsed = read_coco(src, store, dataset=dataset, mapping=maps,
                           coco_images=Path(coco_images) if coco_images else None, results=data)
    else:
        if coco_images or dataset:
            raise InvalidStoreError(Problem(str(src), "--coco-images and --dataset are for COCO results (a JSON list); "
                                                      "a marks JSON names its datasets itself"))
        parsed = read_marks(src, store, mapping=maps, data=data)
    del data
    return write_parsed(parsed, store, src, out, mapping=mapping, images=images, grid=grid,
                        cases_per_block=cases_per_block, map_dtype=map_dtype, progress=progress, total=total, gt=gt,
                        require_phrases=require_phrases, phrases_reason=phrases_reason)


def write_parsed(parsed: Parsed, store, src: Path, out: str | Path, *, mapping, images, grid: int, cases_per_block: int,
                 map_dtype: str, progress, total, gt, require_phrases: bool, phrases_reason: str | None) -> Path:
    """Write a source read and checked (``parsed``, against the images store ``store``) as a submission by the
    rule (the module docstring): the one writer of marks, whatever source they were read from."""
    from xbench.schemas.convert import Converted, _write

    specs = {}
    for name in sorted(parsed.findings):
        ds = store.datasets[name]
        if ds.queries is not None:  # the dataset has phrase rows: write them all, or say why there are none
            given = name in parsed.phrases
            fields = phrase_fields(f"{src}: {name}", [str(q) for q in ds.queries.id] if given else [],
                                   parsed.phrases_unsupported, require=require_phrases, default_reason=phrases_reason)
        else:
            fields = {}
        specs[name] = DatasetSpec(case_ids=[str(c) for c in ds.case_id], classes=tuple(ds.classes),
                                  map_shape=(grid, grid), score_kind="probability",
                                  unsupported=tuple(parsed.unsupported.get(name, ())), **fields)
    if total:
        total(sum(len(s.case_ids) for s in specs.values()))

    def blocks(name: str, start: int, stop: int):
        ds, spec = store.datasets[name], specs[name]
        per_case = parsed.findings[name]
        scores = np.zeros((stop - start, len(spec.classes)), np.float32)
        out_maps = np.zeros((stop - start, len(spec.classes), grid, grid), np.float32)
        for i, case in enumerate(spec.case_ids[start:stop]):
            size = tuple(int(v) for v in ds.orig_size[start + i])
            for j, cls in enumerate(spec.classes):
                f = per_case.get(case, {}).get(cls)
                scores[i, j] = finding_score(f)
                if f is not None and f.marks:
                    out_maps[i, j] = mark_map(f.marks, size, grid)
        return scores, out_maps

    def phrase_blocks(name: str, start: int, stop: int):
        ds, spec = store.datasets[name], specs[name]
        given = parsed.phrases.get(name, {})
        scores = np.zeros(stop - start, np.float32)
        out_maps = np.zeros((stop - start, grid, grid), np.float32)
        for i, qid in enumerate(spec.query_ids[start:stop]):
            f = given.get(qid)
            scores[i] = finding_score(f)
            if f is not None and f.marks:
                size = tuple(int(v) for v in ds.orig_size[int(ds.queries.case[start + i])])
                out_maps[i] = mark_map(f.marks, size, grid)
        return scores, out_maps

    provenance = {"source": {**parsed.info, "file": src.name, "sha256": file_sha256(src)},
                  "mapping": {"file": Path(mapping).name, "sha256": file_sha256(Path(mapping))} if mapping else None,
                  "images": Path(images).name,
                  "map_rule": {"grid": [grid, grid], "rule": "docs/contract.md, Converting boxes and points"}}
    converted = Converted(parsed.model, parsed.method, provenance, specs, blocks, phrase_blocks, str(src))
    return _write(out, converted, cases_per_block, map_dtype, progress, gt)
