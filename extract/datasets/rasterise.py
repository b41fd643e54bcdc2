"""Native regions (boxes, polygons, masks) -> boolean masks on the evaluation grid.

The contract: a grid cell (i, j) of an [H, W] grid is in the region when its centre, mapped to
native continuous pixel coordinates,

    cx = (j + 0.5) * W_orig / W,        cy = (i + 0.5) * H_orig / H,

falls inside the native region (the union of the region's shapes). If that leaves the region
empty (a lesion smaller than a grid cell, slipping between centres), the single cell holding the
centroid of the native region's area is set instead, so no lesion is lost to downsampling.

Inside-rules, one per shape type (native coordinates: x right, y down, pixel (r, c) covers
[c, c+1) x [r, r+1), see :mod:`.base`):

* :class:`Box` ``(x0, y0, x1, y1)``: half-open, ``x0 <= cx < x1`` and ``y0 <= cy < y1``. Boxes
  are first clipped to the image ``[0, W_orig] x [0, H_orig]`` (:func:`clip_box`); a box with no
  area left is empty. The area centroid of a union of boxes is exact (coordinate compression,
  overlaps counted once).
* :class:`Polygon`: the native pixel mask that CheXlocalize itself builds,
  ``PIL.ImageDraw.polygon(points, outline=1, fill=1)`` on a W_orig x H_orig image with the points
  passed unchanged, sampled like a mask. PIL treats a vertex (x, y) as the pixel with index
  (x, y), boundary included, so a polygon covers slightly more than its continuous area; we keep
  that rule so that CheXlocalize's polygons and its released RLE masks rasterise identically.
  A polygon needs at least 2 points (PIL draws 2 points as a line).
* :class:`Mask` (H_orig, W_orig): the cell is in when ``mask[floor(cy), floor(cx)]`` is set.

Pixel-based shapes (polygons, masks) have the area centroid ``mean(c + 0.5), mean(r + 0.5)`` over
their set pixels. A region that mixes boxes with pixel shapes (no reader produces one) is made a
pixel mask first, a box covering every pixel its area touches.

The centroid cell is ``(floor(cy_c * H / H_orig), floor(cx_c * W / W_orig))``, clipped to the grid.

All functions are pure; nothing here reads files.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .base import Box, Mask, Polygon, Shape

__all__ = [
    "RegionRaster",
    "ShapeError",
    "cell_centres",
    "clip_box",
    "native_mask",
    "region_centroid",
    "region_is_nonempty",
    "rasterise_region",
    "load_mask",
]


class ShapeError(ValueError):
    """A shape that cannot be rasterised: non-finite coordinates, a mask of the wrong size, ..."""


@dataclass(frozen=True)
class RegionRaster:
    """A region on the evaluation grid.

    ``mask`` is (H, W) bool, never empty; ``fallback`` is True when no cell centre fell inside
    the native region and only the centroid cell is set.
    """

    mask: np.ndarray
    fallback: bool


def cell_centres(n_cells: int, n_native: int) -> np.ndarray:
    """Centres of ``n_cells`` grid cells along one axis, in native continuous coordinates.

    Returns (n_cells,) float64: ``(k + 0.5) * n_native / n_cells``, all in [0, n_native).
    """
    return (np.arange(n_cells, dtype=np.float64) + 0.5) * (n_native / n_cells)


def _check_size(orig_size: tuple[int, int], grid: tuple[int, int] | None = None) -> tuple[int, int]:
    h, w = (int(v) for v in orig_size)
    if h <= 0 or w <= 0:
        raise ShapeError(f"image size must be positive, got {h}x{w} (height x width)")
    if grid is not None and (grid[0] <= 0 or grid[1] <= 0):
        raise ShapeError(f"grid must be positive, got {grid[0]}x{grid[1]}")
    return h, w


def clip_box(box: Box, orig_size: tuple[int, int]) -> Box | None:
    """Clip a box to the image ``[0, W] x [0, H]``; None when no area is left.

    Raises :class:`ShapeError` for non-finite coordinates or an inverted box (x1 < x0 or y1 < y0).
    A box of zero width or height is returned as None (it has no area).
    """
    h, w = _check_size(orig_size)
    coords = (box.x0, box.y0, box.x1, box.y1)
    if not all(math.isfinite(float(v)) for v in coords):
        raise ShapeError(f"box {coords} has a non-finite coordinate")
    if box.x1 < box.x0 or box.y1 < box.y0:
        raise ShapeError(f"box {coords} is inverted (x1 < x0 or y1 < y0)")
    x0, x1 = max(float(box.x0), 0.0), min(float(box.x1), float(w))
    y0, y1 = max(float(box.y0), 0.0), min(float(box.y1), float(h))
    if x1 <= x0 or y1 <= y0:
        return None
    return Box(x0, y0, x1, y1)


def load_mask(shape: Mask, orig_size: tuple[int, int]) -> np.ndarray:
    """Call ``shape.load()`` and check it is a 2-D array of the image's size; returns bool (H, W)."""
    m = np.asarray(shape.load())
    if m.ndim != 2 or tuple(m.shape) != tuple(orig_size):
        raise ShapeError(f"mask has shape {tuple(m.shape)}, expected the image size {tuple(orig_size)}")
    return m.astype(bool, copy=False)


def _polygon_mask(poly: Polygon, orig_size: tuple[int, int]) -> np.ndarray:
    from PIL import Image, ImageDraw

    h, w = orig_size
    pts = [(float(x), float(y)) for x, y in poly.points]
    if len(pts) < 2:
        raise ShapeError(f"polygon has {len(pts)} point(s); at least 2 are needed")
    if not all(math.isfinite(x) and math.isfinite(y) for x, y in pts):
        raise ShapeError("polygon has a non-finite coordinate")
    img = Image.new("L", (w, h), 0)
    ImageDraw.Draw(img).polygon(pts, outline=1, fill=1)
    return np.asarray(img, dtype=bool)


def _box_pixels(box: Box, orig_size: tuple[int, int]) -> np.ndarray:
    """Every pixel whose square the (clipped) box overlaps with positive area."""
    h, w = orig_size
    m = np.zeros((h, w), dtype=bool)
    c0, c1 = int(math.floor(box.x0)), int(math.ceil(box.x1))
    r0, r1 = int(math.floor(box.y0)), int(math.ceil(box.y1))
    m[r0:r1, c0:c1] = True
    return m


def _prepared(shapes: Sequence[Shape], orig_size: tuple[int, int]) -> tuple[list[Box], np.ndarray | None]:
    """Clip boxes (dropping empty ones) and OR all pixel shapes into one native mask (or None)."""
    boxes: list[Box] = []
    pixels: np.ndarray | None = None
    for s in shapes:
        if isinstance(s, Box):
            clipped = clip_box(s, orig_size)
            if clipped is not None:
                boxes.append(clipped)
            continue
        if isinstance(s, Polygon):
            m = _polygon_mask(s, orig_size)
        elif isinstance(s, Mask):
            m = load_mask(s, orig_size)
        else:
            raise ShapeError(f"unknown shape type {type(s).__name__}")
        pixels = m.copy() if pixels is None else (pixels | m)
    return boxes, pixels


def native_mask(shapes: Sequence[Shape], orig_size: tuple[int, int]) -> np.ndarray:
    """The union of ``shapes`` as a native (H_orig, W_orig) bool mask (boxes: touched pixels)."""
    size = _check_size(orig_size)
    boxes, pixels = _prepared(shapes, size)
    out = np.zeros(size, dtype=bool) if pixels is None else pixels
    for b in boxes:
        out |= _box_pixels(b, size)
    return out


def region_is_nonempty(shapes: Sequence[Shape], orig_size: tuple[int, int]) -> bool:
    """Whether the native region (union of ``shapes``, boxes clipped to the image) has any area.

    This, not the grid mask, decides whether a finding is present: labels come from the native
    annotations. Raises :class:`ShapeError` for malformed shapes.
    """
    size = _check_size(orig_size)
    boxes, pixels = _prepared(shapes, size)
    return bool(boxes) or (pixels is not None and bool(pixels.any()))


def _boxes_centroid(boxes: Sequence[Box]) -> tuple[float, float]:
    """Exact area centroid (cx, cy) of a union of boxes, overlaps counted once."""
    xs = np.unique(np.array([v for b in boxes for v in (b.x0, b.x1)], dtype=np.float64))
    ys = np.unique(np.array([v for b in boxes for v in (b.y0, b.y1)], dtype=np.float64))
    covered = np.zeros((len(ys) - 1, len(xs) - 1), dtype=bool)
    for b in boxes:
        i0, i1 = np.searchsorted(ys, [b.y0, b.y1])
        j0, j1 = np.searchsorted(xs, [b.x0, b.x1])
        covered[i0:i1, j0:j1] = True
    area = np.outer(np.diff(ys), np.diff(xs)) * covered
    total = area.sum()
    mx, my = (xs[:-1] + xs[1:]) / 2, (ys[:-1] + ys[1:]) / 2
    return float((area.sum(axis=0) * mx).sum() / total), float((area.sum(axis=1) * my).sum() / total)


def _pixels_centroid(m: np.ndarray) -> tuple[float, float]:
    rows, cols = np.nonzero(m)
    return float(cols.mean() + 0.5), float(rows.mean() + 0.5)


def region_centroid(shapes: Sequence[Shape], orig_size: tuple[int, int]) -> tuple[float, float] | None:
    """Area centroid (cx, cy) of the native region in continuous coordinates; None when empty."""
    size = _check_size(orig_size)
    boxes, pixels = _prepared(shapes, size)
    if pixels is None:
        return _boxes_centroid(boxes) if boxes else None
    for b in boxes:
        pixels |= _box_pixels(b, size)
    return _pixels_centroid(pixels) if pixels.any() else None


def rasterise_region(
    shapes: Sequence[Shape], orig_size: tuple[int, int], grid: tuple[int, int] = (224, 224)
) -> RegionRaster | None:
    """Rasterise the union of ``shapes`` (native coordinates) onto an [H, W] grid.

    Parameters
    ----------
    shapes : boxes, polygons and masks in the native pixel coordinates of an image of size
        ``orig_size`` = (H_orig, W_orig).
    grid : (H, W) of the evaluation grid.

    Returns
    -------
    :class:`RegionRaster` with a non-empty (H, W) bool mask, or None when the native region is
    empty (every box wholly outside the image, an all-zero mask): the caller decides what an
    empty region means. Raises :class:`ShapeError` for malformed shapes.
    """
    size = _check_size(orig_size, grid)
    (h0, w0), (gh, gw) = size, (int(grid[0]), int(grid[1]))
    boxes, pixels = _prepared(shapes, size)
    cx, cy = cell_centres(gw, w0), cell_centres(gh, h0)
    out = np.zeros((gh, gw), dtype=bool)
    for b in boxes:
        out |= np.outer((cy >= b.y0) & (cy < b.y1), (cx >= b.x0) & (cx < b.x1))
    if pixels is not None:
        # floor of a centre in [0, n) is a valid index; int conversion floors non-negatives
        out |= pixels[np.ix_(cy.astype(np.int64), cx.astype(np.int64))]
    if out.any():
        return RegionRaster(out, False)
    if pixels is None:
        if not boxes:
            return None
        ccx, ccy = _boxes_centroid(boxes)
    else:
        for b in boxes:
            pixels |= _box_pixels(b, size)
        if not pixels.any():
            return None
        ccx, ccy = _pixels_centroid(pixels)
    i = min(max(int(math.floor(ccy * gh / h0)), 0), gh - 1)
    j = min(max(int(math.floor(ccx * gw / w0)), 0), gw - 1)
    out[i, j] = True
    return RegionRaster(out, True)
