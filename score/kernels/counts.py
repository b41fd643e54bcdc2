"""Per-dataset count arrays: everything the metrics, bootstraps and reports need, with no map in sight.

:class:`DatasetCounts` is what :func:`xbench.score.scoring.score_submission` produces per dataset and what
``pair_counts.npz`` stores, so a report or a paired bootstrap of two submissions never re-reads a map.
All rows follow the ground truth's case order and class columns.

``pair_counts.npz`` layout (``np.load(path)``; keys are ``"<dataset>.<field>"``, classes are referred to
by column index because class names may contain ``/``)::

    datasets                (D,) str          dataset keys, in order
    thresholds              (T,) float64      tau_k = k / 100
    <d>.classes             (C,) str          class names (ground-truth column order)
    <d>.supported           (C,) bool         False for classes the submission lists as unsupported
    <d>.case_id             (N,) str          ground-truth case ids
    <d>.labels              (N, C) int8       1 / 0 / -1 (not annotated)
    <d>.prob                (N, C) float64    p per case and class (NaN for unsupported classes)
    <d>.pair_case           (P,) int64        case row of each positive pair (sorted by class, then row)
    <d>.pair_class          (P,) int64        class column of each positive pair
    <d>.region_pixels       (P,) int32        |R|
    <d>.hit                 (P,) bool         pointing-game hit
    <d>.b                   (P, T) uint16     |B_tau_k|      (int32 when the grid has 65,536 cells or more)
    <d>.br                  (P, T) uint16     |B_tau_k ∩ R|  (likewise; see count_dtype)
    <d>.grid                (2,) int64        evaluation grid (H, W)
    <d>.extra.<name>        (P,) any          optional extra per-pair columns (DatasetCounts.extra), in the
                                              pair order; absent in files written before they existed

Every other section (:mod:`xbench.score.sections.plugins`) that saves its counts follows, in declaration order,
only for the datasets that have rows of it: ``<scope>_datasets`` lists them and each one's arrays are
``<d>.<section>.<...>``, written by the scope's ``save_counts``, checked by its ``counts_problems`` and read
back by its ``load_counts``. A file without ``<scope>_datasets`` (one written before the scope's counts were
saved) has none of its rows.

Phrase rows (:class:`PhraseCounts`, metrics.json "phrases"), only for datasets whose ground truth has
them and whose submission scored them; a file without ``phrase_datasets`` (every file written before
phrase counts were saved) has none::

    phrase_datasets         (D',) str         dataset keys with phrase counts, in order
    <d>.phrases.<field>     as above          the phrase rows' DatasetCounts: categories as classes, phrase
                                              rows as cases (case_id = query ids), one pair per row; its
                                              extra.cnr holds each row's signed CNR (NaN = undefined)
    <d>.phrases.image       (P,) int64        image row (dataset case) of each pair: resampling is by image
    <d>.phrases.n_images    () int64          images of the dataset (the resampled units)
    <d>.phrases.prior       (k,) int64        scored case counts of the datasets sorted before d: where its
                                              draws start in the one stream (absent: the stream's start)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xbench.score.kernels.maps import THRESHOLDS
from xbench.score.kernels.pair_stats import CNR_COLUMN

__all__ = ["DatasetCounts", "PhraseCounts", "count_dtype", "dataset_from", "dataset_problems", "load_pair_counts",
           "phrase_arrays", "phrase_arrays_problems", "phrase_from_arrays", "put_dataset"]

_FIELDS = ("classes", "supported", "case_id", "labels", "prob", "pair_case", "pair_class", "region_pixels",
           "hit", "b", "br", "grid")


def count_dtype(grid: tuple[int, int]) -> np.dtype:
    """The smallest integer type that holds a count of grid cells: uint16 up to 65,535 cells, else int32.

    The counts are the scorer's largest per-pair arrays (2 x 101 per positive pair): uint16 halves them
    (404 B per pair) on every grid up to 255 x 256, the 224 x 224 grid included.
    """
    return np.dtype(np.uint16) if int(grid[0]) * int(grid[1]) <= np.iinfo(np.uint16).max else np.dtype(np.int32)


@dataclass(frozen=True)
class DatasetCounts:
    """Counts of one dataset (see the module docstring for shapes and dtypes)."""

    name: str
    classes: tuple[str, ...]
    supported: np.ndarray
    case_id: np.ndarray
    labels: np.ndarray
    prob: np.ndarray
    pair_case: np.ndarray
    pair_class: np.ndarray
    region_pixels: np.ndarray
    hit: np.ndarray
    b: np.ndarray
    br: np.ndarray
    grid: tuple[int, int] = (224, 224)
    #: Extra per-pair columns {name: (P,) array} in the pair order, filled by the counting pass for metrics
    #: that need more than b / br / |R| / hit (read through :class:`xbench.score.metrics.registry.PairView`).
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def n_cases(self) -> int:
        return int(self.case_id.shape[0])

    def class_pairs(self, c: int) -> np.ndarray:
        """Indices into the pair arrays of class column ``c``."""
        return np.flatnonzero(self.pair_class == c)

    def same_ground_truth(self, other: "DatasetCounts") -> bool:
        """True when both were scored against the same cases, classes, labels and regions."""
        return (self.classes == other.classes and np.array_equal(self.case_id, other.case_id)
                and np.array_equal(self.labels, other.labels)
                and np.array_equal(self.pair_case, other.pair_case)
                and np.array_equal(self.pair_class, other.pair_class)
                and np.array_equal(self.region_pixels, other.region_pixels))


@dataclass(frozen=True)
class PhraseCounts:
    """Counts of the phrase rows of one dataset (metrics.json "phrases").

    ``counts``: a :class:`DatasetCounts` whose "cases" are the phrase rows (``case_id`` = query ids) and
    whose classes are the categories; its pair arrays run by category, then phrase row, and its
    ``extra[CNR_COLUMN]`` holds each pair's signed CNR. ``image`` (P,): the dataset case row (image) of each
    pair; ``n_images``: the dataset's images, the units a bootstrap resamples.
    """

    counts: DatasetCounts
    image: np.ndarray
    n_images: int
    #: the scored case counts of the datasets sorted before this one: where its draws start in the one stream
    prior: tuple = ()

    @property
    def name(self) -> str:
        return self.counts.name

    @property
    def cnr(self) -> np.ndarray:
        """Signed CNR of each pair (NaN where undefined), in pair order."""
        return self.counts.extra[CNR_COLUMN]

    def same_ground_truth(self, other: "PhraseCounts") -> bool:
        """True when both were scored against the same phrase rows, categories, images and regions."""
        return (self.counts.same_ground_truth(other.counts) and self.n_images == other.n_images
                and np.array_equal(self.image, other.image))


def put_dataset(arrays: dict, prefix: str, dc: DatasetCounts) -> None:
    for f in _FIELDS:
        value = getattr(dc, f)
        arrays[f"{prefix}.{f}"] = np.array(value, dtype=str) if f == "classes" else np.asarray(value)
    for key, value in (dc.extra or {}).items():
        arrays[f"{prefix}.extra.{key}"] = np.asarray(value)


def dataset_from(z, prefix: str, name: str) -> DatasetCounts:
    kw = {f: z[f"{prefix}.{f}"] for f in _FIELDS}
    kw["classes"] = tuple(str(c) for c in kw["classes"])
    kw["grid"] = tuple(int(x) for x in kw["grid"])
    start = f"{prefix}.extra."
    # dataset keys never contain ".", so the prefix names this dataset's (or its phrases') extra columns only
    keys = z.files if hasattr(z, "files") else list(z)  # an np.load file or a dict of arrays
    kw["extra"] = {k[len(start):]: z[k] for k in keys if k.startswith(start)}
    return DatasetCounts(name=name, **kw)


def phrase_arrays(prefix: str, pc: PhraseCounts) -> dict[str, np.ndarray]:
    """The phrase scope's ``save_counts``: one dataset's phrase counts as ``pair_counts.npz`` arrays."""
    arrays: dict[str, np.ndarray] = {}
    put_dataset(arrays, prefix, pc.counts)
    arrays[f"{prefix}.image"] = np.asarray(pc.image, dtype=np.int64)
    arrays[f"{prefix}.n_images"] = np.asarray(int(pc.n_images), dtype=np.int64)
    arrays[f"{prefix}.prior"] = np.asarray(pc.prior, dtype=np.int64).reshape(-1)
    return arrays


def phrase_from_arrays(z: Mapping[str, np.ndarray], prefix: str, name: str) -> PhraseCounts:
    """The phrase scope's ``load_counts``: the inverse of :func:`phrase_arrays`."""
    return PhraseCounts(counts=dataset_from(z, prefix, name), image=np.asarray(z[f"{prefix}.image"], np.int64),
                        n_images=int(z[f"{prefix}.n_images"]),
                        prior=tuple(int(x) for x in z.get(f"{prefix}.prior", ())))  # absent: an older file


def phrase_arrays_problems(z: Mapping[str, np.ndarray], prefix: str, where: str) -> list[str]:
    """The phrase scope's ``counts_problems``: the counts' layout (:func:`dataset_problems`), then the image
    of each pair (the unit a resample draws) within the dataset's images."""
    problems = dataset_problems(z, prefix, where)
    image, n_images = z.get(f"{prefix}.image"), z.get(f"{prefix}.n_images")
    if image is None or n_images is None or image.dtype.kind not in "iu" or n_images.dtype.kind not in "iu" \
            or n_images.shape != () or image.shape != z.get(f"{prefix}.pair_case", np.zeros(0)).shape:
        problems.append(f"{where}: {prefix}.image / .n_images missing or of the wrong type or shape")
    elif image.size and (image.min() < 0 or image.max() >= int(n_images)):
        problems.append(f"{where}: {prefix}.image refers to an image that does not exist")
    prior = z.get(f"{prefix}.prior")  # absent in files written before it: the stream's start
    if prior is not None and (prior.dtype.kind not in "iu" or prior.ndim != 1 or prior.size > 10_000 or (
            prior.size and not (int(prior.min()) >= 0 and int(prior.max()) < 2**31))):
        problems.append(f"{where}: {prefix}.prior must list at most 10,000 case counts, each 0 to 2^31 - 1")
    return problems


def _kind_ok(arr: np.ndarray, kinds: str) -> bool:
    return arr.dtype.kind in kinds


#: field -> (dtype kinds allowed, dimensions: "C" classes, "N" cases, "P" pairs, "T" thresholds, 2 a length)
_LAYOUT = {"classes": ("U", ("C",)), "supported": ("b", ("C",)), "case_id": ("U", ("N",)),
           "labels": ("iu", ("N", "C")), "prob": ("f", ("N", "C")), "pair_case": ("iu", ("P",)),
           "pair_class": ("iu", ("P",)), "region_pixels": ("iu", ("P",)), "hit": ("b", ("P",)),
           "b": ("iu", ("P", "T")), "br": ("iu", ("P", "T")), "grid": ("iu", (2,))}


def dataset_problems(z: Mapping[str, np.ndarray], prefix: str, where: str) -> list[str]:
    """What makes one dataset's arrays (``<prefix>.<field>``) unusable: missing fields, dtypes, shapes that
    disagree, indices out of range, counts beyond the grid. The kernels index with these values, so they are
    checked before any of them runs."""
    w = f"{where}: {prefix}"
    missing = [f for f in _FIELDS if f"{prefix}.{f}" not in z]
    if missing:
        return [f"{w} lacks the array(s) {', '.join(missing)}"]
    problems = []
    for f, (kinds, _) in _LAYOUT.items():
        if not _kind_ok(z[f"{prefix}.{f}"], kinds):
            problems.append(f"{w}.{f} has dtype {z[f'{prefix}.{f}'].dtype}; expected {kinds!r} kind")
    if problems:
        return problems
    dims = {"C": z[f"{prefix}.classes"].shape[:1], "N": z[f"{prefix}.case_id"].shape[:1],
            "P": z[f"{prefix}.pair_case"].shape[:1], "T": (len(THRESHOLDS),)}
    for f, (_, shape) in _LAYOUT.items():
        want = tuple(d if isinstance(d, int) else (dims[d][0] if dims[d] else -1) for d in shape)
        got = z[f"{prefix}.{f}"].shape
        if got != want:
            problems.append(f"{w}.{f} has shape {got}; expected {want}")
    if problems:
        return problems
    N, C = dims["N"][0], dims["C"][0]
    grid = z[f"{prefix}.grid"]
    if not all(1 <= int(g) <= 65_536 for g in grid):
        return [f"{w}.grid must be two positive sizes, got {grid.tolist()}"]
    cells = int(grid[0]) * int(grid[1])
    pc, pk = z[f"{prefix}.pair_case"], z[f"{prefix}.pair_class"]
    if pc.size and (pc.min() < 0 or pc.max() >= N or pk.min() < 0 or pk.max() >= C):
        problems.append(f"{w}: a pair refers to a case or class that does not exist")
    rp, b, br = z[f"{prefix}.region_pixels"], z[f"{prefix}.b"], z[f"{prefix}.br"]
    if rp.size and (rp.min() < 0 or rp.max() > cells or b.min() < 0 or b.max() > cells or br.min() < 0
                    or np.any(br > b) or np.any(br > rp[:, None])):
        problems.append(f"{w}: pixel counts outside 0..{cells} (the grid) or inconsistent (|B ∩ R| > |B| or |R|)")
    labels = z[f"{prefix}.labels"]
    if labels.size and (labels.min() < -1 or labels.max() > 1):
        problems.append(f"{w}.labels holds values other than 1, 0 and -1")
    if len(set(z[f"{prefix}.classes"].tolist())) != C:
        problems.append(f"{w}.classes repeats a name")
    start = f"{prefix}.extra."
    for k in z:
        if k.startswith(start):
            v = z[k]
            if v.dtype.kind not in "biuf" or v.shape != dims["P"]:
                problems.append(f"{w}.extra.{k[len(start):]} must be numeric with one value per pair")
    return problems


def load_pair_counts(path: str | os.PathLike) -> dict[str, DatasetCounts]:
    """Read a ``pair_counts.npz`` written by :func:`xbench.score.sections.pair_counts.save_pair_counts`; returns {dataset: DatasetCounts}."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no pair_counts.npz here; run `xbench-score` with --out first.")
    with np.load(path, allow_pickle=False) as z:
        return {name: dataset_from(z, name, name) for name in (str(n) for n in z["datasets"])}
