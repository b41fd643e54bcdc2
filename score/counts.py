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

Phrase rows (:class:`PhraseCounts`, metrics.json "phrases"), only for datasets whose ground truth has
them and whose submission scored them; a file without ``phrase_datasets`` (every file written before
phrase counts were saved) has none::

    phrase_datasets         (D',) str         dataset keys with phrase counts, in order
    <d>.phrases.<field>     as above          the phrase rows' DatasetCounts: categories as classes, phrase
                                              rows as cases (case_id = query ids), one pair per row; its
                                              extra.cnr holds each row's signed CNR (NaN = undefined)
    <d>.phrases.image       (P,) int64        image row (dataset case) of each pair: resampling is by image
    <d>.phrases.n_images    () int64          images of the dataset (the resampled units)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .kernels import THRESHOLDS

__all__ = ["DatasetCounts", "PhraseCounts", "count_dtype", "save_pair_counts", "load_pair_counts",
           "load_phrase_counts"]

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
    #: that need more than b / br / |R| / hit (read through :class:`xbench.score.registry.PairView`).
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

    @property
    def name(self) -> str:
        return self.counts.name

    @property
    def cnr(self) -> np.ndarray:
        """Signed CNR of each pair (NaN where undefined), in pair order."""
        from .registry import CNR_COLUMN

        return self.counts.extra[CNR_COLUMN]

    def same_ground_truth(self, other: "PhraseCounts") -> bool:
        """True when both were scored against the same phrase rows, categories, images and regions."""
        return (self.counts.same_ground_truth(other.counts) and self.n_images == other.n_images
                and np.array_equal(self.image, other.image))


def _put(arrays: dict, prefix: str, dc: DatasetCounts) -> None:
    for f in _FIELDS:
        value = getattr(dc, f)
        arrays[f"{prefix}.{f}"] = np.array(value, dtype=str) if f == "classes" else np.asarray(value)
    for key, value in (dc.extra or {}).items():
        arrays[f"{prefix}.extra.{key}"] = np.asarray(value)


def _get(z, prefix: str, name: str) -> DatasetCounts:
    kw = {f: z[f"{prefix}.{f}"] for f in _FIELDS}
    kw["classes"] = tuple(str(c) for c in kw["classes"])
    kw["grid"] = tuple(int(x) for x in kw["grid"])
    start = f"{prefix}.extra."
    # dataset keys never contain ".", so the prefix names this dataset's (or its phrases') extra columns only
    kw["extra"] = {k[len(start):]: z[k] for k in z.files if k.startswith(start)}
    return DatasetCounts(name=name, **kw)


def save_pair_counts(path: str | os.PathLike, counts: dict[str, DatasetCounts],
                     phrases: Mapping[str, PhraseCounts] | None = None) -> None:
    """Write ``counts`` (and the phrase counts ``phrases``, when any) to an ``.npz`` file at ``path``
    (uncompressed: it is written on every run)."""
    arrays: dict[str, np.ndarray] = {"datasets": np.array(list(counts), dtype=str), "thresholds": THRESHOLDS}
    for name, dc in counts.items():
        _put(arrays, name, dc)
    if phrases:  # only then: a file without phrase rows keeps the layout it always had
        arrays["phrase_datasets"] = np.array(list(phrases), dtype=str)
        for name, pc in phrases.items():
            _put(arrays, f"{name}.phrases", pc.counts)
            arrays[f"{name}.phrases.image"] = np.asarray(pc.image, dtype=np.int64)
            arrays[f"{name}.phrases.n_images"] = np.asarray(int(pc.n_images), dtype=np.int64)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def load_pair_counts(path: str | os.PathLike) -> dict[str, DatasetCounts]:
    """Read a ``pair_counts.npz`` written by :func:`save_pair_counts`; returns {dataset: DatasetCounts}."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no pair_counts.npz here; run `xbench-score` with --out first.")
    with np.load(path, allow_pickle=False) as z:
        return {name: _get(z, name, name) for name in (str(n) for n in z["datasets"])}


def load_phrase_counts(path: str | os.PathLike) -> dict[str, PhraseCounts]:
    """The phrase counts of a ``pair_counts.npz`` ({dataset: PhraseCounts}); {} for a file without phrase
    rows (one written before they were saved, or of a ground truth without any)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no pair_counts.npz here; run `xbench-score` with --out first.")
    with np.load(path, allow_pickle=False) as z:
        if "phrase_datasets" not in z.files:
            return {}
        return {name: PhraseCounts(counts=_get(z, f"{name}.phrases", name),
                                   image=np.asarray(z[f"{name}.phrases.image"], np.int64),
                                   n_images=int(z[f"{name}.phrases.n_images"]))
                for name in (str(n) for n in z["phrase_datasets"])}
