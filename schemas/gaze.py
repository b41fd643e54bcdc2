"""Where radiologists looked, in gt.zarr: readings, fixations and gaze-density maps (gt minor 5; issue 37).

Layout (per dataset group, all or none; docs/contract.md "gt.zarr", docs/how-to/gaze.md): ``gaze_case`` (R,) int32 the
case row of each reading; ``gaze_reader`` (R,) string (:data:`xbench.schemas.paths.READER_NAME`);
``gaze_offset`` (R+1,) int64 (reading r's fixations are rows offset[r]:offset[r+1]); ``fixations`` (F, 3)
float32 (x, y in the case's original pixels, duration in seconds > 0; a fixation outside the image is kept
and falls on no map); ``gaze_sigma`` (R,) float32 (the Gaussian's sigma in original pixels); ``gaze_map``
(R, H, W) float32 (the density on the grid, :func:`density_map`); ``gaze_labels`` (R, C) int8 (the reading's
own labels: 1 present, 0 absent, -1 not given); optionally ``gaze_region_index`` (Q, 2) int32 (reading row,
class column) with ``gaze_region_mask`` (Q, H, W) bool (the region that reader drew for that class).

The scorer reads these arrays by name (score/sections/gaze.py); this module writes them (:func:`write_arrays`,
called by :func:`xbench.schemas.write_ground_truth` with ``gaze=``) and checks them (:func:`check` before
writing, :func:`validate` for a store from outside: shapes and dtypes from metadata first, sizes bounded, then
values), one problem a line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from xbench.schemas import grid as exact_grid
from xbench.schemas.errors import Problem
from xbench.schemas.schema_versions import minor

#: the gt minor version that adds the gaze arrays
GT_MINOR = minor("ground-truth", "gaze")
ARRAYS = ("gaze_case", "gaze_reader", "gaze_offset", "fixations", "gaze_sigma", "gaze_map", "gaze_labels")
REGION_ARRAYS = ("gaze_region_index", "gaze_region_mask")
#: bounds on a store from outside: readings per dataset, fixations per reading and in all (a REFLACX reading
#: holds a few hundred fixations; EGD-CXR's ~1,000 images hold ~1.3 million gaze samples in all)
MAX_READINGS = 1_000_000
MAX_FIXATIONS_PER_READING = 100_000
MAX_FIXATIONS = 50_000_000
#: readings of one case: the readers' leave-one-out ceiling compares each reading with the others' mean map, work
#: that grows with the square of this (REFLACX's phases 1-2 read an image five times; issue 44)
MAX_READINGS_PER_CASE = 64
#: the sigma used when a dataset publishes no viewing geometry: 3 % of the image's larger side, about one
#: degree of visual angle for a radiograph read at a distance where it spans ~33 degrees (docs/how-to/gaze.md)
DEFAULT_SIGMA_FRACTION = 0.03
DEFAULT_SIGMA_RULE = "3% of the image's larger side (no published viewing geometry)"
#: the version of the group attribute ``gaze`` ({"sigma_rule": text, "version": 1})
ATTRS_VERSION = 1


#: the smallest positive float32 that is a normal number: a sigma or a duration is stored as float32, so it is
#: checked as float32 (1e-300 passes a float64 "> 0" check and is stored as 0; issue 44)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def stored_positive(value: float, high: float = math.inf) -> bool:
    """Whether ``value`` is still a positive, finite, normal number in (0, ``high``] once stored as float32 (what
    the gaze arrays hold): the check made in the dtype the value is stored and used in."""
    v = float(value)
    if not (math.isfinite(v) and FLOAT32_TINY <= v and v <= high):
        return False
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.float32(v)))


def default_sigma(orig_size: Sequence[int]) -> float:
    """:data:`DEFAULT_SIGMA_FRACTION` of the image's larger side, in original pixels."""
    return DEFAULT_SIGMA_FRACTION * float(max(int(orig_size[0]), int(orig_size[1])))


def density_map(fixations: np.ndarray, orig_size: Sequence[int], grid: Sequence[int], sigma: float) -> np.ndarray:
    """The (H, W) float64 fixation-density map of one reading: the sum over fixations inside the image
    (0 <= x < w, 0 <= y < h) of duration * exp(-((u - x)^2 + (v - y)^2) / (2 sigma^2)), evaluated at the grid
    cells' centres mapped to original pixels (u = (j + 0.5) w / W, v = (i + 0.5) h / H), divided by its sum
    (all zeros when no fixation lies inside the image). Separable: O(F (H + W)) memory, never O(F H W)."""
    fix = np.asarray(fixations, dtype=np.float64).reshape(-1, 3)
    h, w = (int(v) for v in orig_size)
    gh, gw = (int(v) for v in grid)
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be a positive number of pixels, got {sigma!r}")
    inside = (fix[:, 0] >= 0) & (fix[:, 0] < w) & (fix[:, 1] >= 0) & (fix[:, 1] < h)
    fix = fix[inside]
    out = np.zeros((gh, gw), np.float64)
    if not len(fix):
        return out
    v, u = exact_grid.centres(gh, h), exact_grid.centres(gw, w)  # (2k+1) n / (2N), rounded once
    gy = np.exp(-((v[:, None] - fix[None, :, 1]) ** 2) / (2 * sigma * sigma))  # (H, F)
    gx = np.exp(-((u[:, None] - fix[None, :, 0]) ** 2) / (2 * sigma * sigma))  # (W, F)
    for s in range(0, len(fix), 4096):  # bounded temporaries for a long reading
        out += (gy[:, s:s + 4096] * fix[s:s + 4096, 2]) @ gx[:, s:s + 4096].T
    total = out.sum()
    return out / total if total > 0 else out


@dataclass
class Reading:
    """One reading of one case by one reader: fixations (k, 3) (x, y, seconds), its labels (C,) int8, the
    regions it drew {class column: (H, W) bool}, and the sigma in original pixels."""

    case: int
    reader: str
    fixations: np.ndarray
    labels: np.ndarray
    sigma: float
    regions: dict[int, np.ndarray] = field(default_factory=dict)


@dataclass
class Gaze:
    """The gaze arrays of one dataset group (module docstring)."""

    case: np.ndarray
    reader: np.ndarray
    offset: np.ndarray
    fixations: np.ndarray
    sigma: np.ndarray
    gaze_map: np.ndarray
    labels: np.ndarray
    region_index: np.ndarray | None = None
    region_mask: np.ndarray | None = None
    #: how gaze_sigma was chosen, in words (the group attribute ``gaze = {"sigma_rule": ..., "version": 1}``)
    sigma_rule: str = ""

    @classmethod
    def from_readings(cls, readings: Sequence[Reading], orig_size: np.ndarray, grid: Sequence[int],
                      n_classes: int) -> "Gaze":
        """The arrays of ``readings`` (cases indexing ``orig_size``), maps built by :func:`density_map`."""
        gh, gw = (int(v) for v in grid)
        fixes = [np.asarray(r.fixations, np.float32).reshape(-1, 3) for r in readings]
        offset = np.concatenate([[0], np.cumsum([len(f) for f in fixes])]).astype(np.int64)
        maps = np.zeros((len(readings), gh, gw), np.float32)
        for k, r in enumerate(readings):
            maps[k] = density_map(fixes[k], orig_size[r.case], grid, float(np.float32(r.sigma)))  # as stored
        pairs = [(k, c) for k, r in enumerate(readings) for c in sorted(r.regions)]
        return cls(
            case=np.asarray([r.case for r in readings], np.int32),
            reader=np.asarray([r.reader for r in readings], dtype=str),
            offset=offset,
            fixations=np.concatenate(fixes) if fixes else np.zeros((0, 3), np.float32),
            sigma=np.asarray([r.sigma for r in readings], np.float32),
            gaze_map=maps,
            labels=np.asarray([r.labels for r in readings], np.int8).reshape(len(readings), n_classes),
            region_index=np.asarray(pairs, np.int32).reshape(-1, 2),
            region_mask=np.asarray([readings[k].regions[c] for k, c in pairs], bool).reshape(-1, gh, gw),
        )

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"gaze_case": self.case, "gaze_reader": self.reader, "gaze_offset": self.offset,
               "fixations": self.fixations, "gaze_sigma": self.sigma, "gaze_map": self.gaze_map,
               "gaze_labels": self.labels}
        if self.region_index is not None and len(self.region_index):
            out.update(gaze_region_index=self.region_index, gaze_region_mask=self.region_mask)
        return out


_DTYPES = {"gaze_case": "int32", "gaze_offset": "int64", "fixations": "float32", "gaze_sigma": "float32",
           "gaze_map": "float32", "gaze_labels": "int8", "gaze_region_index": "int32", "gaze_region_mask": "bool"}


def _shapes(r: int, f: int, n_classes: int, grid: Sequence[int], q: int | None) -> dict[str, tuple]:
    out = {"gaze_case": (r,), "gaze_reader": (r,), "gaze_offset": (r + 1,), "fixations": (f, 3),
           "gaze_sigma": (r,), "gaze_map": (r, *grid), "gaze_labels": (r, n_classes)}
    if q is not None:
        out.update(gaze_region_index=(q, 2), gaze_region_mask=(q, *grid))
    return out


def _shape_problems(shapes: dict, dtypes: dict, n_classes: int, grid, where: str) -> list[Problem]:
    """Metadata alone: every array present (regions: both or neither), its shape and dtype, sizes bounded."""
    p: list[Problem] = []
    missing = [a for a in ARRAYS if a not in shapes]
    if missing:
        return [Problem(where, f"gaze arrays are all or none; missing {', '.join(missing)}")]
    regions = [a for a in REGION_ARRAYS if a in shapes]
    if len(regions) == 1:
        p.append(Problem(where, f"{REGION_ARRAYS[0]} and {REGION_ARRAYS[1]} come together; only {regions[0]} is here"))
    r = shapes["gaze_case"][0] if len(shapes["gaze_case"]) == 1 else -1
    f = shapes["fixations"][0] if len(shapes["fixations"]) == 2 else -1
    q = shapes["gaze_region_index"][0] if len(regions) == 2 and len(shapes["gaze_region_index"]) == 2 else None
    if r > MAX_READINGS:
        p.append(Problem(f"{where}/gaze_case", f"declares {r:,} readings; the limit is {MAX_READINGS:,}"))
    if f > MAX_FIXATIONS:
        p.append(Problem(f"{where}/fixations", f"declares {f:,} fixations; the limit is {MAX_FIXATIONS:,}"))
    for name, want in _shapes(r, f, n_classes, grid, q).items():
        if name in shapes and tuple(shapes[name]) != tuple(want):
            p.append(Problem(f"{where}/{name}", f"has shape {tuple(shapes[name])}, expected {tuple(want)}"))
    for name, dt in dtypes.items():
        want = _DTYPES.get(name)
        ok = (dt in ("str", "string") or dt.startswith("<U") or dt == "object") if name == "gaze_reader" else dt == want
        if not ok:
            p.append(Problem(f"{where}/{name}", f"has dtype {dt}, expected {want or 'string'}"))
    return p


def _value_problems(a: dict, n_cases: int, where: str) -> list[Problem]:
    """The values, once shapes and dtypes hold."""
    from xbench.schemas.paths import is_reader_name

    p: list[Problem] = []
    case, offset, fix = a["gaze_case"], a["gaze_offset"].astype(np.int64), a["fixations"]
    if len(case) and (case.min() < 0 or case.max() >= n_cases):
        p.append(Problem(f"{where}/gaze_case", f"case rows must lie in 0..{n_cases - 1}"))
    elif len(case):
        per_case = np.bincount(case.astype(np.int64), minlength=n_cases)
        if per_case.max() > MAX_READINGS_PER_CASE:
            p.append(Problem(f"{where}/gaze_case", f"case row {int(per_case.argmax())} has {int(per_case.max()):,} "
                                                   f"readings; at most {MAX_READINGS_PER_CASE} a case (each is compared "
                                                   "with the others)"))
    if offset[0] != 0 or (np.diff(offset) < 0).any() or offset[-1] != len(fix):
        p.append(Problem(f"{where}/gaze_offset", f"must start at 0, never decrease and end at {len(fix)} (the fixations)"))
    elif len(offset) > 1 and np.diff(offset).max() > MAX_FIXATIONS_PER_READING:
        p.append(Problem(f"{where}/gaze_offset", f"a reading holds more than {MAX_FIXATIONS_PER_READING:,} fixations"))
    bad = [str(x) for x in a["gaze_reader"] if not is_reader_name(str(x))]
    if bad:
        p.append(Problem(f"{where}/gaze_reader", f"{len(bad)} reader name(s) are not [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}, "
                                                 f"e.g. {bad[0]!r}"))
    if not np.isfinite(fix).all():
        p.append(Problem(f"{where}/fixations", "holds non-finite values (NaN, inf)"))
    elif len(fix) and (fix[:, 2] < FLOAT32_TINY).any():
        p.append(Problem(f"{where}/fixations", f"durations (column 3) must be positive seconds (at least "
                                               f"{FLOAT32_TINY:.3g}, float32's smallest normal number)"))
    sigma = a["gaze_sigma"]
    if not (np.isfinite(sigma).all() and (sigma >= FLOAT32_TINY).all()):
        p.append(Problem(f"{where}/gaze_sigma", f"must be positive finite pixels (at least {FLOAT32_TINY:.3g}, "
                                                "float32's smallest normal number)"))
    gm = a["gaze_map"]
    if not np.isfinite(gm).all() or (gm < 0).any():
        p.append(Problem(f"{where}/gaze_map", "must hold finite non-negative densities"))
    if not np.isin(a["gaze_labels"], (-1, 0, 1)).all():
        p.append(Problem(f"{where}/gaze_labels", "values other than -1, 0, 1"))
    if "gaze_region_index" in a:
        idx = a["gaze_region_index"].astype(np.int64)
        r, c = a["gaze_labels"].shape
        if len(idx) and (idx.min() < 0 or idx[:, 0].max() >= r or idx[:, 1].max() >= c):
            p.append(Problem(f"{where}/gaze_region_index", f"(reading, class) must lie in 0..{r - 1} x 0..{c - 1}"))
        elif len(np.unique(idx, axis=0)) != len(idx):
            p.append(Problem(f"{where}/gaze_region_index", "a (reading, class) pair repeats"))
    return p


def check(gaze: Gaze, n_cases: int, n_classes: int, grid: Sequence[int], where: str) -> list[Problem]:
    """Every problem of ``gaze`` for a group of ``n_cases`` cases, ``n_classes`` classes on ``grid``."""
    arrays = {k: np.asarray(v) for k, v in gaze.arrays().items()}
    shapes = {k: v.shape for k, v in arrays.items()}
    dtypes = {k: ("str" if k == "gaze_reader" else str(v.dtype)) for k, v in arrays.items()}
    p = _shape_problems(shapes, dtypes, n_classes, grid, where)
    return p or _value_problems(arrays, n_cases, where)


def write_arrays(g, gaze: Gaze) -> None:
    """Write ``gaze`` (checked) into the zarr group ``g``; the caller raises the store's minor to GT_MINOR."""
    dims = {"gaze_case": ("reading",), "gaze_reader": ("reading",), "gaze_offset": ("reading_edge",),
            "fixations": ("fixation", "xyd"), "gaze_sigma": ("reading",), "gaze_map": ("reading", "y", "x"),
            "gaze_labels": ("reading", "class"), "gaze_region_index": ("gaze_region", "pair"),
            "gaze_region_mask": ("gaze_region", "y", "x")}
    g.attrs["gaze"] = {"sigma_rule": str(gaze.sigma_rule or DEFAULT_SIGMA_RULE), "version": ATTRS_VERSION}
    for name, a in gaze.arrays().items():
        a = np.asarray(a)
        if name == "gaze_reader":
            arr = g.create_array(name, shape=a.shape, dtype=str, chunks=(max(len(a), 1),), dimension_names=dims[name])
            arr[:] = a
            continue
        # maps and masks: 32 readings a chunk (6.4 MB of float32 maps at 224 x 224), so the scorer's reading of one
        # reading's map decodes little beyond it (score/sections/gaze.py ChunkRows)
        chunks = (max(min(a.shape[0], 32 if a.ndim == 3 else 1 << 20), 1), *a.shape[1:])
        g.create_array(name, data=a.astype(_DTYPES[name]), chunks=chunks, dimension_names=dims[name],
                       config={"write_empty_chunks": True})


def validate(g, where: str, minor: int, n_cases: int, n_classes: int, grid: Sequence[int]) -> list[Problem]:
    """The gaze arrays of a ground-truth group from outside: none is fine; metadata first (shapes, dtypes,
    bounds), then values (read whole only once their declared sizes are within the bounds)."""
    present = [a for a in (*ARRAYS, *REGION_ARRAYS) if a in g]
    if not present:
        return []
    if minor < GT_MINOR:
        return [Problem(where, f"holds gaze arrays but the store declares schema_minor {minor}; they need "
                               f">= {GT_MINOR}")]
    import zarr

    shapes, dtypes = {}, {}
    for a in present:
        arr = g[a]
        if not isinstance(arr, zarr.Array):
            return [Problem(f"{where}/{a}", "must be an array")]
        shapes[a], dtypes[a] = tuple(arr.shape), str(arr.dtype)
    dtypes = {k: ("str" if k == "gaze_reader" and ("str" in v.lower() or v.startswith("<U")) else v)
              for k, v in dtypes.items()}
    p = _shape_problems(shapes, dtypes, n_classes, grid, where) + _attr_problems(g.attrs.get("gaze"), where)
    if p:
        return p
    p = _storage_problems(g, present, where)
    if p:
        return p
    try:
        values = {a: np.asarray(g[a][...]) for a in present if a not in ("gaze_map", "gaze_region_mask")}
        values["gaze_map"] = np.zeros((0, *grid), np.float32)  # checked a chunk at a time below
        p = _value_problems(values, n_cases, where)
        arr = g["gaze_map"]
        step = int(arr.metadata.chunk_grid.chunk_shape[0])
        for start in range(0, arr.shape[0], step):
            block = np.asarray(arr[start:start + step])
            if not np.isfinite(block).all() or (block < 0).any():
                return p + [Problem(f"{where}/gaze_map", "must hold finite non-negative densities")]
    except Exception as exc:  # noqa: BLE001 - a corrupt chunk: its own line
        return [Problem(where, f"unreadable gaze array ({type(exc).__name__}: {exc})")]
    return p


def _storage_problems(g, present: Sequence[str], where: str) -> list[Problem]:
    """From metadata and the store's listing, before a chunk is decoded, as for every other array of a store
    (:func:`xbench.schemas.store.read_problems`): the arrays read whole within a quarter of the memory budget, and
    none declaring more than ``max_ratio`` times its stored bytes (a 4 GB ``gaze_map`` stored in 1 MB is refused
    here, not by the memory watchdog)."""
    from xbench.schemas.store import read_problems

    p: list[Problem] = []
    for a in present:
        p += read_problems(g[a], f"{where}/{a}", whole=a not in ("gaze_map", "gaze_region_mask"))
    return p


def _attr_problems(attr, where: str) -> list[Problem]:
    """The group attribute ``gaze`` (absent in stores written before it existed: fine), else
    {"sigma_rule": text of at most 1,000 characters, "version": 1}."""
    if attr is None:
        return []
    if (not isinstance(attr, dict) or set(attr) != {"sigma_rule", "version"} or not isinstance(attr["sigma_rule"], str)
            or len(attr["sigma_rule"]) > 1000 or attr["version"] != ATTRS_VERSION or isinstance(attr["version"], bool)):
        return [Problem(f"{where}.attrs['gaze']", f'must be {{"sigma_rule": <text, at most 1,000 characters>, '
                                                  f'"version": {ATTRS_VERSION}}}')]
    return []
