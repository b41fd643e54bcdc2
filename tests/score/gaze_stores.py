"""Tiny gt.zarr gaze arrays for the scorer's gaze tests, written directly with zarr in the layout of
docs/how-to/gaze.md (the readers' own writer is another module's; the scorer reads the arrays by name)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr


@dataclass
class GazeData:
    case: np.ndarray
    reader: list
    offset: np.ndarray
    fixations: np.ndarray
    sigma: np.ndarray
    gaze_map: np.ndarray
    labels: np.ndarray
    region_index: np.ndarray
    region_mask: np.ndarray


def density_map(fix: np.ndarray, orig, grid, sigma: float) -> np.ndarray:
    """A duration-weighted Gaussian density sampled at the grid cells' centres, summing to 1 (zeros when no
    fixation is inside the image)."""
    h, w = orig
    H, W = grid
    yy = (np.arange(H) + 0.5) * h / H
    xx = (np.arange(W) + 0.5) * w / W
    out = np.zeros(grid)
    for x, y, d in fix:
        if 0 <= x < w and 0 <= y < h:
            out += d * np.exp(-((yy[:, None] - y) ** 2 + (xx[None, :] - x) ** 2) / (2 * sigma ** 2))
    return out / out.sum() if out.sum() else out


def add_gaze(gt_path, dataset: str, *, n_cases: int, n_classes: int, grid, orig=(512, 512), seed=0,
             readings=None, with_regions=True) -> GazeData:
    """Write gaze arrays into ``gt_path/dataset``. ``readings``: [(case, reader, n_fixations)]; the default
    has a case read by three readers, one by two, one by one, a reading with no fixation inside the image
    and a reading that labels no class present."""
    rng = np.random.default_rng(seed)
    readings = readings or [(0, "r1", 6), (0, "r2", 4), (0, "r3", 5), (1, "r1", 1), (1, "r2", 7), (2, "r1", 8),
                            (3, "r2", 0), (4, "r3", 3), (5, "r1", 5)]
    case = np.array([c for c, _, _ in readings], np.int32)
    reader = [r for _, r, _ in readings]
    fixes, offset = [], [0]
    for k, (c, _, nf) in enumerate(readings):
        if nf == 0:  # only outside the image: kept, but on no map
            f = np.array([[-3.0, 10.0, 0.2], [orig[1], 5.0, 0.3]], np.float32)
        else:
            f = np.column_stack([rng.uniform(-10, orig[1] + 10, nf), rng.uniform(-10, orig[0] + 10, nf),
                                 rng.uniform(0.05, 0.6, nf)]).astype(np.float32)
            f[0, :2] = [orig[1] * 0.5, orig[0] * 0.4]  # at least one inside
            if k == 2:
                f[1, :2] = [0.0, orig[0] - 1e-3]  # on the border
        fixes.append(f)
        offset.append(offset[-1] + len(f))
    fixations = np.concatenate(fixes) if fixes else np.zeros((0, 3), np.float32)
    sigma = np.full(len(readings), 30.0, np.float32)
    maps = np.stack([density_map(f.astype(np.float64), orig, grid, 30.0) for f in fixes]).astype(np.float32)
    labels = rng.integers(0, 2, size=(len(readings), n_classes)).astype(np.int8)
    labels[0, 0] = 1
    labels[min(5, len(readings) - 1)] = 0  # labels nothing present: the image map over every class
    labels[rng.random(labels.shape) < 0.1] = -1
    labels[0, 0] = 1
    index = np.argwhere(labels == 1).astype(np.int32)[::2] if with_regions else np.zeros((0, 2), np.int32)
    masks = np.zeros((len(index), *grid), bool)
    for q in range(len(index)):
        y, x = rng.integers(0, grid[0] - 3), rng.integers(0, grid[1] - 3)
        masks[q, y:y + 4, x:x + 5] = True
    g = zarr.open_group(str(Path(gt_path) / dataset), mode="r+")
    arrays = {"gaze_case": case, "gaze_offset": np.asarray(offset, np.int64), "fixations": fixations,
              "gaze_sigma": sigma, "gaze_map": maps, "gaze_labels": labels}
    if with_regions:
        arrays.update(gaze_region_index=index, gaze_region_mask=masks)
    for name, a in arrays.items():
        g.create_array(name, data=a)
    ra = g.create_array("gaze_reader", shape=(len(reader),), dtype=str)
    ra[:] = reader
    g.attrs["gaze"] = {"sigma_rule": "30 original pixels (test fixture)", "version": 1}
    root = zarr.open_group(str(gt_path), mode="r+")  # a store holding gaze declares gt minor >= 5 (schemas/gaze.py)
    root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": max(5, root.attrs["xbench"].get("schema_minor", 0))}
    return GazeData(case, reader, np.asarray(offset), fixations, sigma, maps, labels, index, masks)
