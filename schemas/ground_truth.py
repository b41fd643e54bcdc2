"""gt.zarr: the private ground truth — labels and radiologist regions on the evaluation grid.

Layout (contract §gt.zarr)::

    /                       attrs: xbench = {kind: "ground-truth", schema: 1, ...}
    /<dataset>/             attrs: classes = [...], grid = [H, W], plus reader provenance
        case_id       (N,)       string
        labels        (N, C)     int8  (1 present, 0 absent, -1 not annotated)
        region_index  (K, 2)     int32 (case row, class column), one row per pair with a region
        region_mask   (K, H, W)  bool  (row 0 = top of the image)
        orig_size     (N, 2)     int32 (height, width)
      optional, root xbench.schema_minor >= 2, all or none (phrase rows, schemas/queries.py):
        query_id (Q,) str, query_case (Q,) int64, query_category (Q,) str,
        query_mask (Q, H, W) bool (the union of the phrase's boxes; never empty)
      optional, root xbench.schema_minor >= 3, all or none (the robustness track's perturbed copies,
      schemas/perturbations.py): perturb_id, perturb_case, perturb_group, perturb_spec, perturb_seed (P,);
      with phrase rows also perturb_query_id, perturb_query_of, perturb_query_copy (R,) (the copies' phrase rows)

A dataset group is written whole by :func:`write_ground_truth` into a temporary folder and moved
into place, so a reader never sees half a ground truth and preparing one dataset again replaces
only its own group. Scoring only ever opens ground truth read-only.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import zarr

from xbench.schemas.errors import InvalidStoreError, Problem
from xbench.schemas.paths import store_path
from xbench.schemas.remote import RemoteReadError
from xbench.schemas.store import (
    MAX_CASES,
    atomic_replace_dir,
    MAX_CLASSES,
    check_array,
    check_strings,
    consolidate,
    ensure_root,
    describe_missing,
    get_array,
    iter_row_blocks,
    missing_chunks,
    open_for_validation,
    open_store_group,
    read_rows,
    read_strings,
    store_sha256,
    stored_problems,
)
from xbench.schemas.budget import is_int
from xbench.schemas.probes import PROBE_MINOR, TextProbes, check_probes, read_probes, validate_probe_arrays, write_probe_arrays
from xbench.schemas.queries import GT_ARRAYS, QUERY_CHUNK, Queries, declare_minor, read_queries, require, root_minor, validate_query_arrays, write_query_arrays

REGION_CHUNK = 256


@dataclass
class GroundTruthDataset:
    name: str
    classes: tuple[str, ...]
    grid: tuple[int, int]
    case_id: np.ndarray
    labels: np.ndarray
    region_index: np.ndarray
    region_mask: zarr.Array
    orig_size: np.ndarray
    attrs: dict = field(default_factory=dict)
    queries: Queries | None = None  # phrase rows (no text: it is public in images.zarr)
    query_mask: zarr.Array | None = None  # (Q, H, W) bool
    query_probes: "TextProbes | None" = None  # which phrase rows are text probes (gt minor 4, schemas/probes.py)
    perturbations: object = None  # schemas/perturbations.Perturbations: the perturbed copies (gt minor 3)


@dataclass
class GroundTruth:
    path: Path
    attrs: dict
    datasets: dict[str, GroundTruthDataset]

    @property
    def sha256(self) -> str:
        return store_sha256(self.path)


def write_ground_truth(
    path: str | os.PathLike,
    dataset: str,
    *,
    case_ids: Sequence[str],
    classes: Sequence[str],
    labels: np.ndarray,
    region_index: np.ndarray,
    region_mask: np.ndarray,
    orig_size: np.ndarray,
    grid: tuple[int, int] = (224, 224),
    attrs: Mapping | None = None,
    queries: Queries | None = None,
    query_mask: np.ndarray | None = None,
    query_probes: "TextProbes | None" = None,
    perturbations=None,
    gaze=None,
    attributes=None,
) -> None:
    """Write (or replace) one dataset group of a ground-truth store, atomically.

    The arrays are checked against the contract before anything is written; a violation raises
    :class:`InvalidStoreError` listing every problem. ``queries`` and ``query_mask`` (Q, H, W): the
    dataset's phrase rows and their regions (both or neither); ``query_probes``: which of them are text
    probes (schemas/probes.py; gt minor 4); ``gaze``: readings, fixations and gaze maps (schemas/gaze.py; gt
    minor 5); ``attributes``: {field: Attribute}, the cases' demographic and acquisition fields
    (schemas/attributes.py; gt minor 6).
    """
    path = Path(path)
    case_ids = np.asarray(case_ids, dtype=str)
    labels = np.asarray(labels)
    region_index = np.asarray(region_index).reshape(-1, 2)
    region_mask = np.asarray(region_mask)
    orig_size = np.asarray(orig_size)
    h, w = grid
    problems = _check_gt_arrays(dataset, case_ids, list(classes), labels, region_index, region_mask, orig_size, (h, w))
    if (queries is None) != (query_mask is None):
        problems.append(Problem(f"ground truth {dataset}", "phrase rows need both queries and query_mask"))
    elif queries is not None:
        query_mask = np.asarray(query_mask, dtype=bool)
        problems += _check_query_masks(dataset, queries, query_mask, len(case_ids), list(classes), (h, w))
    if query_probes is not None:
        problems += (check_probes(queries.id, queries.case, queries.category, query_probes, f"ground truth {dataset}")
                     if queries is not None else [Problem(f"ground truth {dataset}", "text probes need phrase rows")])
    problems += _optional_problems(dataset, case_ids, classes, (h, w), queries, query_probes, perturbations, gaze,
                                   attributes)
    if problems:
        raise InvalidStoreError(problems)
    root = ensure_root(path, "ground-truth")
    if queries is not None:  # before the group appears, as for the originals of an images store
        declare_minor(root, "ground-truth")
    if query_probes is not None:
        root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": max(PROBE_MINOR, root_minor(root))}
    from xbench.schemas import attributes as AT, gaze as GZ, perturbations as PT

    if perturbations is not None:
        root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": max(PT.GT_MINOR, root_minor(root))}
    if gaze is not None:
        root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": max(GZ.GT_MINOR, root_minor(root))}
    if attributes:
        root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": max(AT.GT_MINOR, root_minor(root))}
    # Built beside the store, not inside it, so a crash never leaves a stray group in it.
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{dataset}.", dir=path.parent))
    try:
        g = zarr.open_group(zarr.storage.LocalStore(tmp), mode="w", zarr_format=3)
        g.attrs.update({"classes": list(classes), "grid": [h, w], **dict(attrs or {})})
        n, k = len(case_ids), len(region_index)
        ids = g.create_array("case_id", shape=(n,), dtype=str, chunks=(max(n, 1),), dimension_names=("case",))
        ids[:] = case_ids
        cfg = {"write_empty_chunks": True}
        g.create_array("labels", data=labels.astype(np.int8), chunks=(max(n, 1), labels.shape[1]), dimension_names=("case", "class"), config=cfg)
        g.create_array("orig_size", data=orig_size.astype(np.int32), chunks=(max(n, 1), 2), dimension_names=("case", "hw"), config=cfg)
        g.create_array("region_index", data=region_index.astype(np.int32), chunks=(max(k, 1), 2), dimension_names=("region", "pair"), config=cfg)
        masks = g.create_array(
            "region_mask", shape=(k, h, w), dtype="bool", chunks=(REGION_CHUNK, h, w), fill_value=False,
            dimension_names=("region", "y", "x"), config=cfg,
        )
        if k:
            masks[:] = region_mask.astype(bool)
        if queries is not None:
            write_query_arrays(g, queries, with_text=False)
            qm = g.create_array("query_mask", shape=(len(queries), h, w), dtype="bool", chunks=(QUERY_CHUNK, h, w),
                                fill_value=False, dimension_names=("query", "y", "x"), config=cfg)
            qm[:] = query_mask
        if query_probes is not None:
            write_probe_arrays(g, query_probes)
        if perturbations is not None:
            PT.write_arrays(g, perturbations)
        if gaze is not None:
            GZ.write_arrays(g, gaze)
        if attributes:
            AT.write_arrays(g, attributes)
        atomic_replace_dir(tmp, path / dataset)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    consolidate(path)


def _optional_problems(dataset, case_ids, classes, grid, queries, query_probes, perturbations, gaze,
                       attributes) -> list[Problem]:
    """The problems of a ground-truth group's optional parts: perturbed copies (schemas/perturbations.py), gaze
    (schemas/gaze.py) and case attributes (schemas/attributes.py)."""
    problems: list[Problem] = []
    where = f"ground truth {dataset}"
    if perturbations is not None:  # the robustness track's copies
        from xbench.schemas import perturbations as PT

        problems += PT.check(perturbations, case_ids, where)
        if perturbations.query_id is not None:  # the copies' phrase rows: originals of their clean case, each once
            original = None if queries is None else (np.ones(len(queries), bool) if query_probes is None
                                                     else ~query_probes.is_probe)
            problems += PT.check_queries(perturbations, queries, original, where, len(case_ids))
    if gaze is not None:  # where radiologists looked
        from xbench.schemas import gaze as GZ

        problems += GZ.check(gaze, len(case_ids), len(classes), grid, where)
    if attributes:  # who the patients are
        from xbench.schemas import attributes as AT

        problems += AT.check(attributes, len(case_ids), where)
    return problems


def _check_gt_arrays(dataset, case_ids, classes, labels, region_index, region_mask, orig_size, grid) -> list[Problem]:
    where = f"ground truth {dataset}"
    p: list[Problem] = []
    n, c = len(case_ids), len(classes)
    if len(set(case_ids.tolist())) != n:
        p.append(Problem(where, "case_ids repeat"))
    if len(set(classes)) != c or c == 0:
        p.append(Problem(where, "classes must be a non-empty list of unique names"))
    if labels.shape != (n, c):
        p.append(Problem(where, f"labels has shape {labels.shape}; expected {(n, c)}"))
    elif not np.isin(labels, (-1, 0, 1)).all():
        p.append(Problem(where, "labels hold values other than -1, 0, 1"))
    if orig_size.shape != (n, 2) or (orig_size <= 0).any():
        p.append(Problem(where, f"orig_size must be (N, 2) positive (height, width); got shape {orig_size.shape}"))
    k = len(region_index)
    if region_mask.shape != (k, *grid):
        p.append(Problem(where, f"region_mask has shape {region_mask.shape}; expected {(k, *grid)}"))
    if k and not p:
        p += _check_regions(where, region_index, labels, lambda: region_mask)
    return p


def _check_query_masks(dataset, queries, query_mask, n, classes, grid) -> list[Problem]:
    where = f"ground truth {dataset}"
    try:
        require(queries, n, classes, where)
    except InvalidStoreError as exc:
        return exc.problems
    if query_mask.shape != (len(queries), *grid):
        return [Problem(where, f"query_mask has shape {query_mask.shape}; expected {(len(queries), *grid)}")]
    empty = ~query_mask.reshape(len(queries), -1).any(axis=1)
    if empty.any():
        return [Problem(where, f"query_mask row {int(np.argmax(empty))} is empty; every phrase needs a region")]
    return []


def _check_regions(where, region_index, labels, masks_reader) -> list[Problem]:
    p = []
    n, c = labels.shape
    ri = region_index.astype(np.int64)
    if (ri[:, 0] < 0).any() or (ri[:, 0] >= n).any() or (ri[:, 1] < 0).any() or (ri[:, 1] >= c).any():
        return [Problem(where, "region_index points outside the case rows or class columns")]
    if len(np.unique(ri[:, 0] * c + ri[:, 1])) != len(ri):
        p.append(Problem(where, "region_index repeats a (case, class) pair; several shapes of one finding are one region"))
    not_positive = labels[ri[:, 0], ri[:, 1]] != 1
    if not_positive.any():
        i = int(np.argmax(not_positive))
        p.append(Problem(where, f"{int(not_positive.sum())} region(s) belong to pairs not labelled 1, e.g. region {i}"))
    return p


def read_ground_truth(path: str | os.PathLike) -> GroundTruth:
    """Open a ground-truth store read-only (validate it first with :func:`validate_ground_truth`)."""
    group = open_store_group(path)
    datasets = {}
    for name, g in sorted(group.groups()):
        datasets[name] = GroundTruthDataset(
            name=name,
            classes=tuple(g.attrs["classes"]),
            grid=tuple(g.attrs["grid"]),
            case_id=read_strings(g["case_id"]),
            labels=np.asarray(g["labels"][...]),
            region_index=np.asarray(g["region_index"][...]).reshape(-1, 2),
            region_mask=g["region_mask"],
            orig_size=np.asarray(g["orig_size"][...]),
            attrs=dict(g.attrs),
            queries=read_queries(g, with_text=False),
            query_mask=g["query_mask"] if "query_mask" in g else None,
            query_probes=read_probes(g),
            perturbations=_perturbations(g),
        )
    return GroundTruth(path=store_path(path), attrs=dict(group.attrs.get("xbench", {})), datasets=datasets)


def validate_ground_truth(path: str | os.PathLike, *, scan_masks: bool = True) -> list[Problem]:
    """Every way the ground truth at ``path`` breaks the contract (metadata first, then data).

    ``scan_masks=False`` skips only the scan of region_mask chunks (decodable, no empty region), for a
    caller that reads every mask chunk anyway and reports the same problems with
    :func:`empty_region_problem` and :func:`xbench.schemas.store.read_rows` (the scorer), so the
    masks are decoded once.
    """
    where = str(path)
    group, groups, problems = open_for_validation(path, "ground-truth")
    for name, g in groups.items():
        problems += _validate_gt_dataset(g, f"{where}/{name}", scan_masks=scan_masks)
        problems += _validate_gt_queries(g, f"{where}/{name}", root_minor(group), scan_masks=scan_masks)
        problems += _validate_perturbations(g, f"{where}/{name}", root_minor(group))
        problems += _validate_gaze(g, f"{where}/{name}", root_minor(group))
        problems += _validate_attributes(g, f"{where}/{name}", root_minor(group))
    return problems


def _validate_attributes(g: zarr.Group, where: str, minor: int) -> list[Problem]:
    """The case attributes of a group (schemas/attributes.py), once its case ids are declared."""
    from xbench.schemas.attributes import validate

    n = g["case_id"].shape[0] if "case_id" in g and isinstance(g["case_id"], zarr.Array) else None
    return [] if n is None else validate(g, where, minor, n)


def _validate_gaze(g: zarr.Group, where: str, minor: int) -> list[Problem]:
    """The gaze arrays of a group (schemas/gaze.py), once the group's own attributes are usable."""
    from xbench.schemas.gaze import validate

    classes, grid = g.attrs.get("classes"), g.attrs.get("grid")
    n = g["case_id"].shape[0] if "case_id" in g and isinstance(g["case_id"], zarr.Array) else None
    if not (isinstance(classes, list) and isinstance(grid, list) and len(grid) == 2 and n is not None):
        return []  # the group's own checks report these
    return validate(g, where, minor, n, len(classes), grid)


def _perturbations(g: zarr.Group):
    from xbench.schemas.perturbations import read

    return read(g)


def _validate_perturbations(g: zarr.Group, where: str, minor: int) -> list[Problem]:
    """The perturbation table of a group (schemas/perturbations.py), once the group's case ids are readable."""
    from xbench.schemas.perturbations import ARRAYS, ATTR, validate

    if not any(a in g for a in ARRAYS) and ATTR not in g.attrs:
        return []
    try:
        ids = read_strings(g["case_id"])
    except Exception:  # the group's own checks report it
        return []
    return validate(g, where, minor, ids)


def _validate_gt_queries(g: zarr.Group, where: str, minor: int, *, scan_masks: bool) -> list[Problem]:
    """The phrase rows of a ground-truth group: ids, cases, categories, and one non-empty mask per row."""
    p: list[Problem] = []
    classes, grid = g.attrs.get("classes"), g.attrs.get("grid")
    n = g["case_id"].shape[0] if "case_id" in g and isinstance(g["case_id"], zarr.Array) else None
    if not (isinstance(classes, list) and isinstance(grid, list) and len(grid) == 2 and n is not None):
        return p  # the group's own checks report these
    q = validate_query_arrays(g, where, "ground-truth", GT_ARRAYS, n, classes, minor, p)
    p += validate_probe_arrays(g, where, minor, q)
    if q is None:
        return p
    masks = g["query_mask"]
    if not check_array(masks, f"{where}/query_mask", shape=(len(q), *grid), dtypes=("bool",), problems=p):
        return p
    gone = missing_chunks(masks)
    if gone:
        return p + [Problem(f"{where}/query_mask", describe_missing(masks, gone))]
    p += stored_problems(masks, f"{where}/query_mask", trusted=True)
    if scan_masks and not p:
        for start, stop in iter_row_blocks(masks):
            block = read_rows(masks, start, stop, f"{where}/query_mask", p)
            empty = None if block is None else ~block.reshape(block.shape[0], -1).any(axis=1)
            if empty is not None and empty.any():
                p.append(empty_query_problem(where, start + int(np.argmax(empty))))
                break
    return p


def empty_query_problem(where: str, row: int) -> Problem:
    """The problem for phrase row ``row`` of the dataset at ``where`` covering no grid cell."""
    return Problem(f"{where}/query_mask", f"phrase region {row} is empty; every phrase must cover at least one grid cell")


def empty_region_problem(where: str, region: int) -> Problem:
    """The problem for region row ``region`` of the dataset at ``where`` covering no grid cell."""
    return Problem(f"{where}/region_mask", f"region {region} is empty; every listed region must cover at least one grid cell")


def _validate_gt_dataset(g: zarr.Group, where: str, *, scan_masks: bool = True) -> list[Problem]:
    p: list[Problem] = []
    classes = g.attrs.get("classes")
    if not (isinstance(classes, list) and classes and all(isinstance(x, str) for x in classes)) or len(set(classes)) != len(classes):
        p.append(Problem(where, "attribute 'classes' must be a non-empty list of unique class names"))
        classes = None
    elif len(classes) > MAX_CLASSES:
        p.append(Problem(where, f"attribute 'classes' lists {len(classes)} names; the limit is {MAX_CLASSES}"))
        classes = None
    else:
        check_strings(np.asarray(classes, dtype=str), where, "class name", p)
    grid = g.attrs.get("grid")
    if not (isinstance(grid, list) and len(grid) == 2 and all(is_int(x) and 1 <= x <= 4096 for x in grid)):
        p.append(Problem(where, "attribute 'grid' must be [H, W] with 1 <= H, W <= 4096"))
        grid = None
    arrays = {name: get_array(g, name, where, p) for name in ("case_id", "labels", "region_index", "region_mask", "orig_size")}
    if any(a is None for a in arrays.values()) or classes is None or grid is None:
        return p
    ok = check_array(arrays["case_id"], f"{where}/case_id", shape=(None,), dtypes=("string",), problems=p, whole=True)
    n = arrays["case_id"].shape[0] if arrays["case_id"].ndim == 1 else None
    if n is not None and n > MAX_CASES:
        p.append(Problem(f"{where}/case_id", f"declares {n} cases; the limit is {MAX_CASES}"))
        return p
    ok &= check_array(arrays["labels"], f"{where}/labels", shape=(n, len(classes)), dtypes=("int8",), problems=p, whole=True)
    ok &= check_array(arrays["orig_size"], f"{where}/orig_size", shape=(n, 2), dtypes=("int32",), problems=p, whole=True)
    ok &= check_array(arrays["region_index"], f"{where}/region_index", shape=(None, 2), dtypes=("int32",), problems=p, whole=True)
    k = arrays["region_index"].shape[0] if arrays["region_index"].ndim == 2 else None
    ok &= check_array(arrays["region_mask"], f"{where}/region_mask", shape=(k, *grid), dtypes=("bool",), problems=p)
    if not ok:
        return p
    for name, arr in arrays.items():
        gone = missing_chunks(arr)
        if gone:
            p.append(Problem(f"{where}/{name}", describe_missing(arr, gone)))
            ok = False
        unsafe = stored_problems(arr, f"{where}/{name}", trusted=True)
        p += unsafe
        ok &= not unsafe
    if not ok:
        return p
    try:
        ids = read_strings(arrays["case_id"])
        labels = np.asarray(arrays["labels"][...])
        orig = np.asarray(arrays["orig_size"][...])
        index = np.asarray(arrays["region_index"][...])
    except RemoteReadError:  # the server failed or broke a limit: its own line, not a corrupt array
        raise
    except Exception as exc:
        p.append(Problem(where, f"unreadable array ({type(exc).__name__}: {exc})"))
        return p
    if len(np.unique(ids)) != len(ids):
        p.append(Problem(f"{where}/case_id", "case ids repeat"))
    check_strings(ids, f"{where}/case_id", "case id", p)
    if not np.isin(labels, (-1, 0, 1)).all():
        p.append(Problem(f"{where}/labels", "values other than -1, 0, 1"))
    if (orig <= 0).any():
        p.append(Problem(f"{where}/orig_size", "sizes must be positive"))
    if len(index):
        p += _check_regions(where, index, labels, None)
        if scan_masks:
            p += region_mask_problems(arrays["region_mask"], where)
    return p


def region_mask_problems(masks: zarr.Array, where: str) -> list[Problem]:
    """Unreadable mask chunks and the first empty region, reading one stored chunk at a time."""
    p: list[Problem] = []
    for start, stop in iter_row_blocks(masks):
        block = read_rows(masks, start, stop, f"{where}/region_mask", p)
        if block is not None:
            empty = ~block.reshape(block.shape[0], -1).any(axis=1)
            if empty.any():
                p.append(empty_region_problem(where, start + int(np.argmax(empty))))
                break
    return p
