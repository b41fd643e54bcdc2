"""The gaze section's ground truth (:mod:`xbench.score.sections.gaze`): one dataset's gaze arrays of gt.zarr, checked
by the contract's validator (:func:`xbench.schemas.gaze.validate`) and read for scoring, the maps and region masks
one stored chunk at a time. Split out of gaze.py by role (issue 47 item 4): reading here, scoring there."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class GazeTruth:
    """One dataset's gaze arrays (gt.zarr layout, docs/how-to/gaze.md), checked; ``gaze_map`` and the region masks
    stay on disk (read one reading at a time)."""

    case: np.ndarray  # (R,) int64
    reader: np.ndarray  # (R,) str
    offset: np.ndarray  # (R+1,) int64
    fixations: np.ndarray  # (F, 3) float64
    gaze_map: object  # (R, H, W) array-like
    labels: np.ndarray  # (R, C) int8
    region_index: np.ndarray  # (Q, 2) int64
    region_mask: object  # (Q, H, W) bool array-like, or None


def read_gaze(gt, name: str, where: str = "") -> GazeTruth | None:
    """The gaze of dataset ``name`` of the opened ground truth ``gt``, or None when it has none. The arrays are
    checked by the contract's own validator (:func:`xbench.schemas.gaze.validate`: presence, shapes, dtypes,
    bounds, values), never re-declared here; raises :class:`~xbench.schemas.InvalidStoreError` with its lines."""
    from xbench.schemas import InvalidStoreError
    from xbench.schemas import gaze as GZ
    from xbench.schemas.queries import root_minor
    from xbench.schemas.store import open_store_group, read_strings

    root = open_store_group(gt.path)
    g = root[name]
    if not any(k in g for k in (*GZ.ARRAYS, *GZ.REGION_ARRAYS)):
        return None
    ds = gt.datasets[name]
    problems = GZ.validate(g, where or name, root_minor(root), len(ds.case_id), len(ds.classes), ds.grid)
    if problems:
        raise InvalidStoreError(problems)
    has_regions = GZ.REGION_ARRAYS[0] in g
    index = np.asarray(g["gaze_region_index"][...]).astype(np.int64) if has_regions else np.zeros((0, 2), np.int64)
    return GazeTruth(np.asarray(g["gaze_case"][...]).astype(np.int64), read_strings(g["gaze_reader"]),
                     np.asarray(g["gaze_offset"][...]).astype(np.int64),
                     np.asarray(g["fixations"][...], dtype=np.float64), ChunkRows(g["gaze_map"]),
                     np.asarray(g["gaze_labels"][...]).astype(np.int8), index.reshape(-1, 2),
                     ChunkRows(g["gaze_region_mask"]) if has_regions else None)


class ChunkRows:
    """Rows of a chunked (N, H, W) array read one stored chunk block at a time, the last few blocks kept: a reading's map costs one decode of its block, not one per row
    (a 256-row chunk decoded per reading made a 1,668-reading set take two minutes). Readings are visited case
    by case, which walks a few streams of the store's order (one per reader), so a few blocks suffice; each
    block is one stored chunk, bounded by the store budget's chunk size; ``max_bytes`` (64 MiB) or
    ``min_blocks`` blocks are kept, whichever is more."""

    def __init__(self, arr, max_bytes: int = 64 << 20, min_blocks: int = 4):
        from collections import OrderedDict

        self.arr = arr
        chunks = getattr(arr, "chunks", None)
        self.step = max(1, int(chunks[0])) if chunks else 1
        per_block = self.step * int(np.prod(arr.shape[1:], dtype=np.int64)) * np.dtype(arr.dtype).itemsize
        # a few blocks whatever their size (each at most the budget's chunk size, max_memory / 8), more when small
        self.keep = max(min_blocks, max_bytes // max(per_block, 1))
        self.blocks: OrderedDict = OrderedDict()

    @property
    def shape(self) -> tuple:
        return tuple(self.arr.shape)

    def __getitem__(self, i) -> np.ndarray:
        if not isinstance(i, (int, np.integer)):  # a slice or an Ellipsis: straight from the array
            return np.asarray(self.arr[i])
        b = int(i) // self.step
        block = self.blocks.get(b)
        if block is None:
            block = np.asarray(self.arr[b * self.step:(b + 1) * self.step])
            self.blocks[b] = block
            while len(self.blocks) > self.keep:
                self.blocks.popitem(last=False)
        else:
            self.blocks.move_to_end(b)
        return block[int(i) - b * self.step]


def _truth_map(truth: GazeTruth, r: int, where: str) -> np.ndarray:
    m = np.asarray(truth.gaze_map[r], dtype=np.float64)
    if not np.isfinite(m).all() or (m < 0).any():
        from xbench.schemas import InvalidStoreError, Problem

        raise InvalidStoreError([Problem(f"{where}/gaze_map", f"reading {r}: values must be finite and >= 0")])
    return m
