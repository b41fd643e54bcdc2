"""The producing side of ``xbench human``: radiologists' own annotations read and made into submissions (the
command, which then scores each reader like any model, is the umbrella's :mod:`xbench.human`).

Two sources, each read in its published format (every file is untrusted input, read within bounds and never
outside ``--root``):

* **CheXlocalize** human benchmark (test split; three radiologists other than the ground truth's, one
  answer per CXR and pathology): ``CheXlocalize/hb_segmentations_test.json`` (``{cxr_id: {pathology: {"size":
  [h, w], "counts": COCO RLE}}}``, the ground truth's encoding; ``--source segmentations``, the default) or
  ``CheXlocalize/hb_annotations_test.json`` (``{cxr_id: {"img_size": [h, w], pathology: [[[x, y], ...], ...]}}``,
  polygons; ``--source annotations``), and ``CheXlocalize/hb_salient_pt_test.json`` (``{cxr_id: {pathology:
  [[x, y], ...]}}``, the most representative points) when present. One reader, ``hb``, against the ground
  truth ``--gt``.
* **VinDr-CXR** train split: ``annotations/annotations_train.csv`` (``image_id,rad_id,class_name,x_min,y_min,
  x_max,y_max``), each image boxed independently by three radiologists. Each reader R is scored on the images
  R read against the *other* readers of each image (``--rule union``: the union of their boxes, a class
  present when any of them boxed it; ``--rule majority``: the cells more than half of them boxed, a class
  present when more than half of them boxed it).

* **REFLACX** phases 1 and 2 (each image read by five radiologists): each reading's ellipses at certainty
  ``--certainty`` or above (default 3) against the *other* readings of the same image, combined by ``--rule``
  as VinDr-CXR's readers are (:mod:`xbench.extract.human_reflacx`). A reader is one reading (its id): the
  release does not say which radiologist read what.

* **Phantom** (built in, no download): ``--readers N`` simulated readers ``R1`` ... ``RN``
  (:func:`xbench.extract.datasets.phantom.draw_reading`, the reader model of docs/how-to/human.md), each against the
  ground truth ``--gt``; the phantom's seed, split and size are the images store's.

A reader's map, per case and class, on the ground truth's evaluation grid [H, W] (so the scorer's resize is
the identity): the reader's region rasterised exactly as the ground truth is (per lesion, docs/contract.md,
gt.zarr), with value 1 - 2**-10 on its cells, 0 elsewhere, and the value 1 on the cell of the first listed
salient point that lies in the region (a point outside it is left out). After the scorer's min-max
normalisation every threshold tau <= 0.99 sees exactly the region (tau = 0 the whole grid, as for any map); a
class the reader did not mark, or marked by points only, has the constant map 0. A reader's score is 1 when
they marked the class, else 0 (a probability). The ceiling's pointing game is not the map's maximum: it is the
reader's points' hit (``reading.npz``, CheXlocalize's hit-rate rule; see :func:`reading_rows`), and
CheXlocalize's own eval.py values are in human.json's ``chexlocalize`` block.

Output folder (written atomically)::

    human.json                              the ceiling per dataset and class, its intervals, the rule
    readers/<reader>/submission.zarr        the reader's submission
    readers/<reader>/reading.npz            the reader's pairs on the grid: regions, IoU, hits (the ceiling's)
    readers/<reader>/reading_native.npz     (CheXlocalize masks) the same at full resolution
    readers/<reader>/gt.zarr                (VinDr) the other readers as ground truth
    readers/<reader>/metrics.json, pair_counts.npz, ...   the reader scored by xbench-score

``xbench-score SUB --gt GT --human DIR`` adds the ceiling and the model's % of human to metrics.json.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xbench.schemas import grid as exact_grid
from xbench.schemas.errors import InputError, Problem
from xbench.schemas.pointing import peak_cell

from xbench.extract.datasets._io import CSVFile, check_box, parse_float, read_json
from xbench.extract.datasets.base import Box, Mask, Polygon
from xbench.extract.datasets.chexlocalize import _RLEMask, rle_area
from xbench.extract.datasets.rasterise import rasterise_region
from xbench.extract.datasets.vindr import is_rad_id
from xbench.extract.human_marks import Mark, Reading, reader_count_problems

__all__ = ["DATASETS", "RULES", "SOURCES", "Reading", "read_chexlocalize", "read_vindr", "read_phantom", "reader_map",
           "reading_rows", "write_submission", "write_truth", "read_readers", "DatasetReaders", "MASK_LEVEL"]

DATASETS = ("chexlocalize", "vindr_cxr", "reflacx", "phantom")
RULES = ("union", "majority")
SOURCES = ("segmentations", "annotations")
#: the datasets whose reading's pointing game is the points' hit (CheXlocalize's eval.py rule, kept for its human
#: benchmark); every other reader's is the peak of its own map by the scorer's rule (xbench.schemas.pointing):
#: VinDr's boxes and REFLACX's ellipses (no points: the region's middle), and the phantom's simulated readers
#: (their salient point's cell when it lies in their region, else the region's peak), so that a reader scored as
#: a model hits exactly where its reading does
POINT_READERS = ("chexlocalize",)
#: the value of a region's cells in a reader's map: >= 0.99 after normalisation (every tau <= 0.99 sees the
#: region), < 1 (the salient point's cell is the one maximum); exact in float16 and float32
MASK_LEVEL = 1.0 - 2.0 ** -10
#: problems listed one a line before the rest are counted
_MAX_LISTED = 20
#: points one CXR and pathology may list (the published files hold one to a few)
_MAX_POINTS = 1000


class _Problems(list):
    def add(self, where: str, message: str) -> None:
        self.append(Problem(where, message))

    def raise_if_any(self) -> None:
        if self:
            shown = list(self[:_MAX_LISTED])
            if len(self) > _MAX_LISTED:
                shown.append(Problem("", f"... and {len(self) - _MAX_LISTED} more problem(s) like these"))
            raise InputError(shown)


def _canonical(dataset: str, name: str) -> str | None:
    from xbench.schemas.vocabulary import UnknownLabelError, canonical

    try:
        return canonical(dataset, name)
    except UnknownLabelError:
        return None


def _point(value, size: tuple[int, int]) -> tuple[float, float] | None:
    """A salient point [x, y] inside a (h, w) image, else None."""
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                                 and math.isfinite(v) for v in value)):
        return None
    x, y = float(value[0]), float(value[1])
    h, w = size
    return (x, y) if 0 <= x < w and 0 <= y < h else None


def _polygon(value) -> Polygon | None:
    if not (isinstance(value, list) and 3 <= len(value) <= 1_000_000):
        return None
    pts = []
    for p in value:
        if not (isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                              and math.isfinite(v) for v in p)):
            return None
        pts.append((float(p[0]), float(p[1])))
    return Polygon(tuple(pts))


def read_chexlocalize(root: Path, sizes: dict[str, tuple[int, int]], classes: tuple[str, ...], *,
                      source: str = "segmentations") -> Reading:
    """The CheXlocalize human benchmark (reader ``hb``) for the cases of ``sizes`` (case id -> original (h, w),
    from the images store). A CXR of the files that the images store lacks is left out (counted in a note)."""
    key = "chexlocalize"
    roots = [root]
    name = "hb_segmentations_test.json" if source == "segmentations" else "hb_annotations_test.json"
    path = _find(root, name)
    data = read_json(path, dict, "an object keyed by cxr_id", roots)
    problems = _Problems()
    marks: dict[str, dict[str, Mark]] = {}
    absent = 0
    for cxr_id, tasks in data.items():
        where = f"{path.name}:{cxr_id}"
        if cxr_id not in sizes:
            absent += 1
            continue
        if not isinstance(tasks, dict):
            problems.add(where, "entry is not an object of pathology -> segmentation")
            continue
        size = sizes[cxr_id]
        if source == "annotations" and "img_size" in tasks:
            given = tasks["img_size"]
            if not (isinstance(given, list) and len(given) == 2 and [int(v) for v in given if isinstance(v, int)] == list(size)):
                problems.add(where, f"img_size {given!r} is not the image's [height, width] {list(size)}")
                continue
        case = marks.setdefault(cxr_id, {})
        for task, value in tasks.items():
            if task == "img_size":
                continue
            cls = _canonical(key, task)
            if cls is None or cls not in classes:
                problems.add(where, f"unknown pathology key {task!r}")
                continue
            if source == "segmentations":
                try:
                    rle_size, area = rle_area(value)
                except ValueError as e:
                    problems.add(f"{where}:{task}", str(e))
                    continue
                if tuple(rle_size) != tuple(size):
                    problems.add(f"{where}:{task}", f"RLE size {list(rle_size)} is not the image's [height, width] "
                                                    f"{list(size)}")
                    continue
                if area:
                    case.setdefault(cls, Mark()).shapes.append(Mask(load=_RLEMask(value)))
            else:
                if not isinstance(value, list):
                    problems.add(f"{where}:{task}", "is not a list of polygons")
                    continue
                for k, poly in enumerate(value):
                    shape = _polygon(poly)
                    if shape is None:
                        problems.add(f"{where}:{task}", f"polygon {k} is not a list of at least 3 [x, y] points")
                        break
                    case.setdefault(cls, Mark()).shapes.append(shape)
    points_path = _find(root, "hb_salient_pt_test.json", required=False)
    files = [path]
    if points_path is not None:
        files.append(points_path)
        points = read_json(points_path, dict, "an object keyed by cxr_id", roots)
        for cxr_id, tasks in points.items():
            where = f"{points_path.name}:{cxr_id}"
            if cxr_id not in sizes:
                continue
            if not isinstance(tasks, dict):
                problems.add(where, "entry is not an object of pathology -> points")
                continue
            for task, pts in tasks.items():
                if task == "img_size":  # the polygon files carry it; tolerated here too
                    continue
                cls = _canonical(key, task)
                if cls is None or cls not in classes:
                    problems.add(where, f"unknown pathology key {task!r}")
                    continue
                if not isinstance(pts, list) or len(pts) > _MAX_POINTS:
                    problems.add(f"{where}:{task}", f"is not a list of at most {_MAX_POINTS} [x, y] points")
                    continue
                for p in pts:
                    xy = _point(p, sizes[cxr_id])
                    if xy is None:
                        problems.add(f"{where}:{task}", f"point {p!r} is not [x, y] inside the "
                                                        f"{sizes[cxr_id][1]}x{sizes[cxr_id][0]} image")
                        break
                    marks.setdefault(cxr_id, {}).setdefault(cls, Mark()).points.append(xy)
    if data and absent == len(data):
        problems.add(str(path), "none of its CXRs is in the images store; prepare CheXlocalize's test split "
                                "(xbench prepare chexlocalize --split test)")
    problems.raise_if_any()
    notes = [f"{absent} CXR(s) of {path.name} are not in the images store: left out"] if absent else []
    # the benchmark read every test CXR: one the files do not mention was read and left unmarked
    return Reading({"hb": marks}, {"hb": sorted(sizes)}, None, files, notes)


def _find(root: Path, name: str, required: bool = True) -> Path | None:
    for p in (root / "CheXlocalize" / name, root / name):
        if p.exists():
            return p
    if required:
        raise InputError([Problem(str(root / "CheXlocalize" / name), "not found: the CheXlocalize human benchmark "
                                                                    "file (expected under --root)")])
    return None


def read_vindr(root: Path, sizes: dict[str, tuple[int, int]], classes: tuple[str, ...], *, split: str = "train",
               rule: str = "union") -> Reading:
    """VinDr-CXR's readers of ``split`` (train: three per image): each reader's boxes, and as each reader's
    ground truth the other readers' boxes of the same images (``rule`` decides how they combine)."""
    from xbench.schemas.vocabulary import is_no_finding

    key = "vindr_cxr"
    path = root / "annotations" / f"annotations_{split}.csv"
    if not path.is_file():
        raise InputError([Problem(str(path), f"not found: VinDr-CXR's {split} annotations (expected under --root)")])
    reader = CSVFile(path, [root])
    fields = [h.strip() for h in reader.header()]
    missing = [c for c in ("image_id", "rad_id", "class_name", "x_min", "y_min", "x_max", "y_max") if c not in fields]
    if missing:
        raise InputError([Problem(str(path), f"missing column(s) {', '.join(missing)}; the readers' ceiling needs rad_id")])
    problems = _Problems()
    boxes: dict[str, dict[str, dict[str, list[Box]]]] = {}  # image -> reader -> class -> boxes
    absent = set()
    for row in reader.dicts(fields):
        where = f"{path.name}:row {reader.line_num}"
        image = (row["image_id"] or "").strip()
        rad = (row["rad_id"] or "").strip()
        if not image or not rad:
            problems.add(where, "empty image_id or rad_id")
            continue
        if not is_rad_id(rad):  # R + ASCII digits, a reader's name xbench-score --human reads back
            problems.add(where, f"rad_id {rad!r} is not like R8")
            continue
        if image not in sizes:
            absent.add(image)
            continue
        per = boxes.setdefault(image, {}).setdefault(rad, {})
        name = (row["class_name"] or "").strip()
        if is_no_finding(key, name):
            continue
        cls = _canonical(key, name)
        if cls is None or cls not in classes:
            problems.add(where, f"unknown class_name {name!r}")
            continue
        coords = [(row[k] or "").strip() for k in ("x_min", "y_min", "x_max", "y_max")]
        try:
            h, w = sizes[image]
            box = check_box(Box(*(parse_float(v) for v in coords)), h, w)
        except ValueError as e:
            problems.add(where, f"bad box {coords}: {e}")
            continue
        per.setdefault(cls, []).append(box)
    problems.raise_if_any()
    counts = {image: len(per) for image, per in boxes.items() if len(per) >= 2}
    counts["*"] = len({r for image in counts for r in boxes[image]})
    too_many = reader_count_problems(counts, str(path))
    if too_many:
        raise InputError(too_many)
    marks: dict[str, dict[str, dict[str, Mark]]] = {}
    cases: dict[str, list[str]] = {}
    truth: dict[str, dict] = {}
    for image in sorted(boxes):
        readers = sorted(boxes[image])
        if len(readers) < 2:
            continue  # no other reader to be scored against
        for r in readers:
            cases.setdefault(r, []).append(image)
            marks.setdefault(r, {})[image] = {c: Mark(shapes=list(b)) for c, b in boxes[image][r].items()}
            others = [boxes[image][o] for o in readers if o != r]
            truth.setdefault(r, {})[image] = {c: [o.get(c, []) for o in others] for c in classes
                                             if any(c in o for o in others)}
    notes = [f"{len(absent)} image(s) of {path.name} are not in the images store: left out"] if absent else []
    if not cases:
        raise InputError([Problem(str(path), "no image of the images store was read by two or more readers")])
    return Reading(marks, cases, truth, [path], notes)


class _PhantomMarks(Mapping):
    """One simulated reader's marks, ``{case_id: {class: Mark}}``, drawn when a case is asked for (one case's
    masks in memory at a time, whatever the number of cases and the native size)."""

    def __init__(self, reader: int, seed: int, split: str, size: int, index: dict[str, int]):
        self._reader, self._seed, self._split, self._size, self._index = reader, seed, split, size, index

    def __getitem__(self, case_id: str) -> dict[str, Mark]:
        from xbench.extract.datasets.phantom import draw_reading

        got = draw_reading(self._seed, self._split, self._index[case_id], self._reader, self._size)
        return {c: Mark(shapes=[Mask(load=lambda m=r.mask: m)], points=[r.point])
                for c, r in got.items() if r.mask is not None}

    def __iter__(self):
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


def _int_attr(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_phantom(attrs: dict, case_ids: list[str], sizes: dict[str, tuple[int, int]], labels: dict[str, dict],
                 n_readers: int, where: str) -> tuple[Reading, dict]:
    """``n_readers`` simulated readers of the phantom cases ``case_ids`` (readers ``R1``, ``R2``, ...), from the
    phantom options the images store records (``attrs["reader"]``: seed, split, size). ``labels``: the ground
    truth's ``{case_id: {class: label}}``, which the options must reproduce (else the store was not made by
    these options and the readers would read other cases). Returns the reading and the options."""
    from xbench.extract.datasets.phantom import MAX_CASES, MAX_READERS, MAX_SIZE, PHANTOM_CLASSES, _SPLITS, draw_case

    opts = attrs.get("reader") if isinstance(attrs, dict) else None
    opts = opts if isinstance(opts, dict) else {}
    seed, size, split = _int_attr(opts.get("seed")), _int_attr(opts.get("size")), opts.get("split")
    if seed is None or seed < 0 or size is None or not 64 <= size <= MAX_SIZE or split not in _SPLITS:
        raise InputError([Problem(f"{where}/phantom", "does not record the phantom's options (reader: seed, split, "
                                                      "size); prepare it with xbench prepare phantom")])
    if not 1 <= n_readers <= MAX_READERS:
        raise InputError([Problem("--readers", f"must be 1 to {MAX_READERS}; got {n_readers}")])
    problems = _Problems()
    index = {}
    prefix = f"phantom-{split}-"
    for case in case_ids:
        tail = case[len(prefix):] if case.startswith(prefix) else ""
        if not (len(tail) == 6 and tail.isdigit() and int(tail) < MAX_CASES):
            problems.add(f"{where}/phantom", f"case id {case!r} is not a phantom {split} case id")
        elif sizes[case] != (size, size):
            problems.add(f"{where}/phantom:{case}", f"original size {list(sizes[case])} is not the phantom's {size}")
        else:
            index[case] = int(tail)
    problems.raise_if_any()
    for case, i in index.items():
        drawn = draw_case(seed, split, i).findings
        truth = {c: int(v) for c, v in labels.get(case, {}).items()}
        if truth != {c: int(c in drawn) for c in PHANTOM_CLASSES if c in truth}:
            problems.add(f"{where}/phantom:{case}", f"the ground truth's labels are not those the phantom options "
                                                    f"(seed {seed}, split {split}) draw: another store's ground truth?")
            if len(problems) >= _MAX_LISTED:
                break
    problems.raise_if_any()
    names = [f"R{r}" for r in range(1, n_readers + 1)]
    marks = {name: _PhantomMarks(r, seed, split, size, index) for r, name in enumerate(names, 1)}
    return Reading(marks, {name: list(case_ids) for name in names}, None, []), \
        {"seed": seed, "split": split, "size": size, "readers": n_readers}


def reader_map(mark: Mark | None, size: tuple[int, int], grid: tuple[int, int]) -> np.ndarray:
    """A reader's (H, W) float32 map of one case and class (the rule in the module docstring)."""
    out = np.zeros(grid, np.float32)
    if mark is None:
        return out
    region = _reader_region(mark, size, grid)
    if region is not None:
        out[region] = MASK_LEVEL
        # the map's peak: the first listed salient point whose cell lies in the region (a point outside it
        # would add its cell to every thresholded set); the ceiling's pointing game does not use the map
        for xy in mark.points:
            i, j = _point_cell(xy, size, grid)
            if region[i, j]:
                out[i, j] = 1.0
                break
    return out


def _reader_region(mark: Mark | None, size: tuple[int, int], grid: tuple[int, int]) -> np.ndarray | None:
    """The reader's region of one case and class on the grid (bool (H, W)), or None (no shape, or shapes that
    cover no cell)."""
    if mark is None or not mark.shapes:
        return None
    raster = rasterise_region(mark.shapes, size, grid)
    return None if raster is None else raster.mask


def _point_cell(xy: tuple[float, float], size: tuple[int, int], grid: tuple[int, int]) -> tuple[int, int]:
    """The grid cell (floor(y * H / h), floor(x * W / w)) of a point (x, y) of an (h, w) image."""
    x, y = xy
    h, w = size
    # exactly (xbench.schemas.grid): the float product y * H can round up onto the next cell's edge
    return int(exact_grid.point_cells(y, h, grid[0])), int(exact_grid.point_cells(x, w, grid[1]))


def reading_rows(cases: list[str], classes, marks: Mapping, sizes, grid, region_of: Callable, *,
                  points_rule: bool) -> dict[str, np.ndarray]:
    """The reader's own pairs as CheXlocalize's eval.py scores them (docs/contract.md, "Human ceilings"): one row
    per (case, class) where the ground truth or the reader has a region on the grid, with ``gt`` and ``seg``
    (which of the two has one), ``iou`` (|reader & truth| / |reader | truth| of the two binary regions) and
    ``hit`` (ground-truth rows only, else NaN). ``points_rule`` (CheXlocalize): a hit when any of the reader's
    salient points lies in a cell of the truth's region, a miss without a point (a region alone never hits); else
    (VinDr, REFLACX, phantom) the peak of the reader's map (:func:`reader_map`, as its submission holds it;
    :func:`xbench.schemas.pointing.peak_cell`, the scorer's pointing-game rule: the salient point's cell when it
    lies in the region, else the region's middle); unmarked: a miss."""
    rows = {"case_id": [], "cls": [], "gt": [], "seg": [], "iou": [], "hit": []}
    for case in cases:
        got = marks.get(case, {})
        for cls in classes:
            mark = got.get(cls)
            mine = _reader_region(mark, sizes[case], grid)
            truth = region_of(case, cls)
            if mine is None and truth is None:
                continue
            if mine is not None and truth is not None:
                inter, union = int((mine & truth).sum()), int((mine | truth).sum())
                iou = inter / union
            else:
                iou = 0.0
            hit = math.nan
            if truth is not None:
                if points_rule:
                    cells = [_point_cell(p, sizes[case], grid) for p in (mark.points if mark is not None else [])]
                    hit = float(any(truth[i, j] for i, j in cells))
                else:  # the peak of the very map the reader's submission holds: scored as a model, it hits alike
                    peak = None if mine is None else peak_cell(reader_map(mark, sizes[case], grid))
                    hit = float(peak is not None and truth[peak])
            for k, v in (("case_id", case), ("cls", cls), ("gt", truth is not None), ("seg", mine is not None),
                         ("iou", iou), ("hit", hit)):
                rows[k].append(v)
    return {"case_id": np.asarray(rows["case_id"], dtype=str), "cls": np.asarray(rows["cls"], dtype=str),
            "gt": np.asarray(rows["gt"], dtype=bool), "seg": np.asarray(rows["seg"], dtype=bool),
            "iou": np.asarray(rows["iou"], dtype=np.float64), "hit": np.asarray(rows["hit"], dtype=np.float64)}


def chexlocalize_native_rows(root: Path, marks: Mapping, sizes: dict[str, tuple[int, int]], classes,
                              files: list[Path]) -> dict[str, np.ndarray]:
    """The reader's rows (as :func:`reading_rows`) at the images' full resolution, as CheXlocalize's eval.py
    computes them: against the ground truth's own masks (``gt_segmentations_test.json`` under ``--root``, the
    file the ground truth store was prepared from), over the CXRs of that file the images store holds; a hit
    when any listed point (x, y) has ``gt[int(y), int(x)]``. ``files`` gets the file read."""
    key = "chexlocalize"
    path = _find(root, "gt_segmentations_test.json")
    files.append(path)
    data = read_json(path, dict, "an object keyed by cxr_id", [root])
    problems = _Problems()
    rows = {"case_id": [], "cls": [], "gt": [], "seg": [], "iou": [], "hit": []}
    for cxr in sorted(c for c in data if c in sizes):
        tasks = data[cxr]
        where = f"{path.name}:{cxr}"
        if not isinstance(tasks, dict):
            problems.add(where, "entry is not an object of pathology -> segmentation")
            continue
        got = marks.get(cxr, {})
        truths = {}
        for task, value in tasks.items():
            cls = _canonical(key, task)
            if cls is None or cls not in classes:
                problems.add(where, f"unknown pathology key {task!r}")
                continue
            try:
                rle_size, area = rle_area(value)
            except ValueError as e:
                problems.add(f"{where}:{task}", str(e))
                continue
            if tuple(rle_size) != tuple(sizes[cxr]):
                problems.add(f"{where}:{task}", f"RLE size {list(rle_size)} is not the image's [height, width] "
                                                f"{list(sizes[cxr])}")
                continue
            truths[cls] = _RLEMask(value) if area else None
        for cls in classes:
            mark = got.get(cls)
            shapes = [s for s in (mark.shapes if mark is not None else []) if isinstance(s, Mask)]
            mine = None
            for shape in shapes:
                m = np.asarray(shape.load(), bool)
                mine = m if mine is None else (mine | m)
            mine = mine if mine is not None and mine.any() else None
            truth = truths[cls]() if truths.get(cls) is not None else None
            if mine is None and truth is None:
                continue
            iou = float((mine & truth).sum() / (mine | truth).sum()) if mine is not None and truth is not None else 0.0
            hit = math.nan
            if truth is not None:
                hit = float(any(truth[int(y), int(x)] for x, y in (mark.points if mark is not None else [])))
            for k, v in (("case_id", cxr), ("cls", cls), ("gt", truth is not None), ("seg", mine is not None),
                         ("iou", iou), ("hit", hit)):
                rows[k].append(v)
    problems.raise_if_any()
    return {"case_id": np.asarray(rows["case_id"], dtype=str), "cls": np.asarray(rows["cls"], dtype=str),
            "gt": np.asarray(rows["gt"], dtype=bool), "seg": np.asarray(rows["seg"], dtype=bool),
            "iou": np.asarray(rows["iou"], dtype=np.float64), "hit": np.asarray(rows["hit"], dtype=np.float64),
            "cases": np.asarray(sorted(c for c in data if c in sizes), dtype=str)}


def truth_region(per_other: list[list], size, grid, rule: str) -> tuple[int, np.ndarray | None]:
    """(label, region mask or None) of one case and class from the other readers' shapes under ``rule``."""
    votes = [bool(s) for s in per_other]
    n = len(per_other)
    need = 1 if rule == "union" else n // 2 + 1
    label = int(sum(votes) >= need)
    if not label:
        return 0, None
    count = np.zeros(grid, np.int32)
    for shapes in per_other:
        if shapes:
            raster = rasterise_region(shapes, size, grid)
            if raster is not None:
                count += raster.mask
    region = count >= need
    return 1, (region if region.any() else None)


def write_truth(path: Path, dataset: str, cases: list[str], classes, truth: dict, sizes, grid, rule: str) -> None:
    from xbench.schemas.ground_truth import write_ground_truth

    labels = np.zeros((len(cases), len(classes)), np.int8)
    index, masks = [], []
    for i, case in enumerate(cases):
        for j, cls in enumerate(classes):
            if cls not in truth.get(case, {}):
                continue
            label, region = truth_region(truth[case][cls], sizes[case], grid, rule)
            labels[i, j] = label
            if region is not None:
                index.append((i, j))
                masks.append(region)
    write_ground_truth(path, dataset, case_ids=cases, classes=list(classes), labels=labels,
                       region_index=np.asarray(index, np.int32).reshape(-1, 2),
                       region_mask=np.asarray(masks, bool).reshape(-1, *grid),
                       orig_size=np.asarray([sizes[c] for c in cases], np.int32).reshape(-1, 2), grid=grid,
                       attrs={"rasterisation": "per-lesion", "human_rule": rule})


def write_submission(out: Path, dataset: str, reader: str, cases: list[str], classes, marks: dict, sizes, grid,
                      info: dict) -> None:
    from xbench.schemas.convert import Converted, _write
    from xbench.schemas.submission import DatasetSpec

    spec = DatasetSpec(case_ids=list(cases), classes=tuple(classes), map_shape=tuple(grid), score_kind="probability")

    def blocks(name: str, start: int, stop: int):
        scores = np.zeros((stop - start, len(classes)), np.float32)
        maps = np.zeros((stop - start, len(classes), *grid), np.float16)
        for i, case in enumerate(cases[start:stop]):
            got = marks.get(case, {})
            for j, cls in enumerate(classes):
                mark = got.get(cls)
                if mark is not None and (mark.shapes or mark.points):  # else: score 0, the constant map 0
                    scores[i, j] = 1.0
                    maps[i, j] = reader_map(mark, sizes[case], grid)
        return scores, maps

    converted = Converted(f"human:{reader}", "human", {"human": info, "reader": reader}, {dataset: spec}, blocks,
                          None, f"{dataset} reader {reader}")
    # blocks of at most ~32 MiB of maps (22 classes on 224 x 224 are 2 MiB a case in float16, which holds
    # MASK_LEVEL exactly); the stored chunks are mostly zeros and compress to little
    per_case = max(1, len(classes) * grid[0] * grid[1] * 2)
    # validated alone here; against the ground truth by the scoring that follows, restricted to this dataset
    # (a ground truth may hold other datasets, and cases the images store lacks)
    _write(out, converted, max(1, min(64, (32 << 20) // per_case)), "float16", None, None)


def truth_group(gt, dataset: str, who: str):
    """The ground truth's group of ``dataset``, which ``who`` are scored against (--gt is then required)."""
    from xbench.schemas.ground_truth import read_ground_truth

    if gt is None:
        raise InputError([Problem("--gt", f"{who} are scored against the ground truth: give --gt gt.zarr")])
    truth_store = read_ground_truth(gt)
    if dataset not in truth_store.datasets:
        raise InputError([Problem(str(gt), f"holds no {dataset} group")])
    return truth_store.datasets[dataset]


@dataclass
class DatasetReaders:
    """A dataset's readers read, with what scoring them needs (:func:`read_readers`)."""

    dataset: str
    reading: Reading
    sizes: dict[str, tuple[int, int]]
    classes: tuple[str, ...]
    grid: tuple[int, int]
    rule: str
    #: human.json's header: dataset, split, rule (in words), source, the files read (and the phantom's model)
    info: dict
    #: the ground truth's group when every reader is scored against ``--gt`` (``reading.truth`` is None)
    truth: object | None
    #: (CheXlocalize masks) the reader's rows at the images' full resolution, :func:`reading_rows`' columns
    native_rows: dict | None

    def truth_of(self, reader: str) -> Callable:
        """``(case, class) -> the region reader ``reader`` is scored against`` on the grid (None: no region)."""
        if self.reading.truth is None:  # one ground truth (--gt) for every reader: its regions by (case, class)
            tds, classes = self.truth, self.classes
            where = {(str(tds.case_id[i]), str(classes[c])): k
                     for k, (i, c) in enumerate(np.asarray(tds.region_index))}
            return lambda case, cls: (np.asarray(tds.region_mask[where[(case, cls)]], bool)
                                      if (case, cls) in where else None)

        def region(case, cls):
            per = self.reading.truth[reader].get(case, {})
            return truth_region(per[cls], self.sizes[case], self.grid, self.rule)[1] if cls in per else None
        return region


def read_readers(dataset: str, root: Path | None, images: Path, gt: Path | None, *, split: str | None = None,
                 rule: str = "union", source: str = "segmentations", readers: int = 3,
                 certainty: int = 3) -> DatasetReaders:
    """Read the readers of ``dataset`` (CheXlocalize's human benchmark, VinDr-CXR's radiologists, or the
    phantom's simulated readers) with the images store's case sizes and the ground truth's grid and classes."""
    from xbench.schemas.ground_truth import read_ground_truth
    from xbench.schemas.images import read_images
    from xbench.schemas.store import file_sha256

    tds = None
    store = read_images(images)
    if dataset not in store.datasets:
        raise InputError([Problem(str(images), f"holds no {dataset} group; prepare it with xbench-prepare {dataset}")])
    ds = store.datasets[dataset]
    sizes = {str(c): (int(s[0]), int(s[1])) for c, s in zip(ds.case_id, ds.orig_size)}
    classes = tuple(ds.classes)
    if dataset == "chexlocalize":
        tds = truth_group(gt, dataset, "CheXlocalize's readers")
        grid, classes = tuple(tds.grid), tuple(tds.classes)
        reading = read_chexlocalize(root, sizes, classes, source=source)
        rule_text = ("CheXlocalize human benchmark (one reader, 'hb'): its " + source +
                     " and salient points against the ground truth")
    elif dataset == "phantom":
        tds = truth_group(gt, dataset, "the phantom's readers")
        grid, classes = tuple(tds.grid), tuple(tds.classes)
        gt_labels = np.asarray(tds.labels)
        labels = {str(c): {cls: int(v) for cls, v in zip(classes, row)} for c, row in zip(tds.case_id, gt_labels)}
        reading, phantom = read_phantom(ds.attrs, [str(c) for c in ds.case_id], sizes, labels, readers, str(images))
        split = phantom["split"]
        rule_text = (f"{readers} simulated reader(s) of the phantom, each against the ground truth (the reader "
                     "model of docs/how-to/human.md), averaged over readers")
    else:  # readers against each other: --gt, when given, only sets the evaluation grid
        grid = (224, 224)
        if gt is not None:
            truth_store = read_ground_truth(gt)
            if dataset in truth_store.datasets:
                grid = tuple(truth_store.datasets[dataset].grid)
        if dataset == "reflacx":
            from xbench.extract.human_reflacx import read_reflacx

            reading = read_reflacx(root, sizes, classes, certainty=certainty)
            split = "phases 1-2"
            rule_text = (f"each reading against the other readings of the same image ({rule} of their ellipses at "
                         f"certainty >= {certainty}), averaged over readings")
        else:
            reading = read_vindr(root, sizes, classes, split=split or "train", rule=rule)
            rule_text = (f"each reader against the other readers of the same image ({rule} of their boxes), "
                         "averaged over readers")
    native = None
    if dataset == "chexlocalize" and source == "segmentations":  # CheXlocalize's own values at full resolution
        native = chexlocalize_native_rows(root, reading.marks["hb"], sizes, classes, reading.files)
    info = {"dataset": dataset, "split": split or ("test" if dataset == "chexlocalize" else "train"),
            "rule": rule_text,
            "source": {"chexlocalize": source, "vindr_cxr": "boxes", "reflacx": "ellipses"}.get(dataset, "simulated"),
            "files": {p.name: file_sha256(p) for p in reading.files}}
    if dataset == "phantom":  # what reproduces the readers: the phantom's options and the reader model
        from xbench.extract.datasets import phantom as ph

        info["phantom"] = {**phantom, "model": {"miss": dict(ph.READER_MISS), "false_mark": ph.READER_FALSE_MARK,
                                                "shift_sd": ph.READER_SHIFT_SD, "log_scale_sd": ph.READER_SCALE_SD,
                                                "scale_range": list(ph.READER_SCALE_RANGE)}}
    return DatasetReaders(dataset, reading, sizes, classes, grid, rule, info, tds if reading.truth is None else None,
                          native)
