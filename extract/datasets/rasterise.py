"""Native regions (boxes, polygons, masks) -> boolean masks on the evaluation grid.

The contract: a grid cell (i, j) of an [H, W] grid is in the region when its centre, mapped to
native continuous pixel coordinates,

    cx = (j + 0.5) * W_orig / W,        cy = (i + 0.5) * H_orig / H,

falls inside the native region, decided exactly (:mod:`xbench.schemas.grid`: a centre exactly on a pixel
edge or on a box edge is never moved by float rounding; 13.5 * (296/36) in floats is 110.99999999999999). Rasterisation goes lesion by lesion so that no lesion is lost
to downsampling: a lesion is one box, one polygon, or one 8-connected component of a mask (pixels
touching at a corner are one lesion). Each lesion sets the cells whose centres fall inside it; a
lesion that no cell centre falls inside (smaller than a cell, slipping between centres) sets the
single cell holding its own area centroid instead. The region is the union over the finding's
lesions. (Contract version 1.0 applied the centroid rule once per region, to the union's centroid,
which dropped a small box whenever a sibling box kept the region non-empty; ground-truth groups
rasterised by this rule carry the attribute ``rasterisation = "per-lesion"``, see
:data:`RASTERISATION`.)

Inside-rules, one per shape type (native coordinates: x right, y down, pixel (r, c) covers
[c, c+1) x [r, r+1), see :mod:`.base`):

* :class:`Box` ``(x0, y0, x1, y1)``: half-open, ``x0 <= cx < x1`` and ``y0 <= cy < y1``. Boxes
  are first clipped to the image ``[0, W_orig] x [0, H_orig]`` (:func:`clip_box`); a box with no
  area left is empty. (:func:`region_centroid` gives the exact area centroid of a whole region,
  overlapping boxes counted once.)
* :class:`Polygon`: the native pixel mask that CheXlocalize itself builds,
  ``PIL.ImageDraw.polygon(points, outline=1, fill=1)`` on a W_orig x H_orig image with the points
  passed unchanged, sampled like a mask. PIL treats a vertex (x, y) as the pixel with index
  (x, y), boundary included, so a polygon covers slightly more than its continuous area; we keep
  that rule so that CheXlocalize's polygons and its released RLE masks sample the same pixels.
  A polygon needs at least 2 points (PIL draws 2 points as a line).
* :class:`Mask` (H_orig, W_orig): the cell is in when ``mask[floor(cy), floor(cx)]`` is set.

Area centroids: a clipped box's is its centre; a pixel lesion's (a polygon's pixels, a mask
component) is ``mean(c + 0.5), mean(r + 0.5)`` over its pixels. The centroid cell is
``(floor(cy_c * H / H_orig), floor(cx_c * W / W_orig))``, clipped to the grid, in exact rationals.

All functions are pure; nothing here reads files.
"""
from __future__ import annotations

from xbench.schemas.errors import InputError

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from xbench.extract.datasets.base import Box, Mask, Polygon, Shape
from xbench.schemas import grid as exact

__all__ = [
    "RASTERISATION",
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


#: The rule this module implements, recorded as the ``rasterisation`` attribute of each gt.zarr dataset
#: group it writes (gt.zarr minor version 1; a group without the attribute used the per-region rule).
RASTERISATION = "per-lesion"


class ShapeError(InputError, ValueError):
    """A shape that cannot be rasterised: non-finite coordinates, a mask of the wrong size, ..."""


@dataclass(frozen=True)
class RegionRaster:
    """A region on the evaluation grid.

    ``mask`` is (H, W) bool, never empty; ``fallback`` counts the lesions that no cell centre fell
    inside, each of which set only its centroid cell (0 when every lesion was hit by a centre).
    """

    mask: np.ndarray
    fallback: int


def cell_centres(n_cells: int, n_native: int) -> np.ndarray:
    """Centres of ``n_cells`` grid cells along one axis, in native continuous coordinates.

    Returns (n_cells,) float64: ``(2k + 1) * n_native / (2 n_cells)`` rounded once, all in [0, n_native).
    Which pixel or box holds a centre is decided exactly (:mod:`xbench.schemas.grid`), never from these floats.
    """
    return exact.centres(n_cells, n_native)


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


def _exact_pixels_centroid(m: np.ndarray) -> tuple[Fraction, Fraction]:
    """:func:`_pixels_centroid` as exact rationals (its cell is then decided exactly)."""
    rows, cols = np.nonzero(m)
    n = len(rows)
    return Fraction(2 * int(cols.sum()) + n, 2 * n), Fraction(2 * int(rows.sum()) + n, 2 * n)


def region_centroid(shapes: Sequence[Shape], orig_size: tuple[int, int]) -> tuple[float, float] | None:
    """Area centroid (cx, cy) of the native region in continuous coordinates; None when empty."""
    size = _check_size(orig_size)
    boxes, pixels = _prepared(shapes, size)
    if pixels is None:
        return _boxes_centroid(boxes) if boxes else None
    for b in boxes:
        pixels |= _box_pixels(b, size)
    return _pixels_centroid(pixels) if pixels.any() else None


def _centroid_cell(cx: float | Fraction, cy: float | Fraction, size: tuple[int, int], grid: tuple[int, int]) -> tuple[int, int]:
    """The grid cell holding the native point (cx, cy), clipped to the grid."""
    (h0, w0), (gh, gw) = size, grid
    # in rationals (a float or a Fraction is exact here): floor(cy * gh / h0) must not round across a cell edge
    i = min(max(math.floor(Fraction(cy) * gh / h0), 0), gh - 1)
    j = min(max(math.floor(Fraction(cx) * gw / w0), 0), gw - 1)
    return i, j


#: 8-connectivity: pixels touching at a corner belong to one lesion (a thin diagonal stroke stays one).
_CONNECTIVITY = np.ones((3, 3), dtype=bool)
#: lesions one native mask may hold (issue 44): a dataset's mask holds a handful; a file of millions of
#: one-pixel dots is refused after labelling, before any work per lesion (xbench-convert's masks: the same cap)
MAX_MASK_LESIONS = 100_000


def _pixel_lesions(m: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, list[tuple[Fraction, Fraction]]]:
    """Sample a native pixel mask at the grid's cell centres, lesion by lesion.

    ``rows``/``cols`` are the native pixel indices of the cell centres. Returns the sampled (H, W) mask
    and the area centroids (cx, cy) of the 8-connected components that no cell centre falls inside.
    """
    from scipy import ndimage  # only when a pixel shape is rasterised

    sampled = m[np.ix_(rows, cols)]
    labels, n = ndimage.label(m, structure=_CONNECTIVITY)
    if n > MAX_MASK_LESIONS:
        raise ShapeError(f"mask holds {n:,} separate lesions (8-connected regions); at most {MAX_MASK_LESIONS:,}")
    if n == 0:
        return sampled, []
    hit = np.zeros(n + 1, dtype=bool)
    hit[labels[np.ix_(rows, cols)].ravel()] = True
    missed = np.flatnonzero(~hit[1:]) + 1
    if not len(missed):
        return sampled, []
    rr, cc = np.nonzero(m)
    lab = labels[rr, cc]
    # integer sums, so that each centroid (mean of the pixels' centres) is an exact rational
    count = np.bincount(lab, minlength=n + 1)
    sum_c = np.bincount(lab, weights=cc, minlength=n + 1)  # float64 sums of integers below 2**53: exact
    sum_r = np.bincount(lab, weights=rr, minlength=n + 1)
    return sampled, [(Fraction(2 * int(sum_c[k]) + int(count[k]), 2 * int(count[k])),
                      Fraction(2 * int(sum_r[k]) + int(count[k]), 2 * int(count[k]))) for k in missed]


def rasterise_region(
    shapes: Sequence[Shape], orig_size: tuple[int, int], grid: tuple[int, int] = (224, 224)
) -> RegionRaster | None:
    """Rasterise the union of ``shapes`` (native coordinates) onto an [H, W] grid, lesion by lesion.

    Each lesion (a box, a polygon, an 8-connected component of a mask) sets the cells whose centres
    fall inside it, or, when none does, the one cell holding its own area centroid; the region is
    the union over the lesions, so no lesion is lost at any grid.

    Parameters
    ----------
    shapes : boxes, polygons and masks in the native pixel coordinates of an image of size
        ``orig_size`` = (H_orig, W_orig).
    grid : (H, W) of the evaluation grid.

    Returns
    -------
    :class:`RegionRaster` with a non-empty (H, W) bool mask and the number of lesions placed by the
    centroid rule, or None when the native region is empty (every box wholly outside the image, an
    all-zero mask): the caller decides what an empty region means. Raises :class:`ShapeError` for
    malformed shapes.
    """
    size = _check_size(orig_size, grid)
    (h0, w0), (gh, gw) = size, (int(grid[0]), int(grid[1]))
    # the native pixel holding each centre, in integers: a centre exactly on a pixel edge is the next pixel's
    rows, cols = exact.centre_pixels(gh, h0), exact.centre_pixels(gw, w0)
    out = np.zeros((gh, gw), dtype=bool)
    centroids: list[tuple[Fraction, Fraction]] = []
    for s in shapes:
        if isinstance(s, Box):
            b = clip_box(s, size)
            if b is None:
                continue
            (r0, r1), (c0, c1) = exact.centre_ranges(b.y0, b.y1, h0, gh), exact.centre_ranges(b.x0, b.x1, w0, gw)
            if r1 > r0 and c1 > c0:  # the centres with y0 <= cy < y1 and x0 <= cx < x1, decided exactly
                out[r0:r1, c0:c1] = True
            else:  # a box's area centroid is its centre
                centroids.append(((Fraction(b.x0) + Fraction(b.x1)) / 2, (Fraction(b.y0) + Fraction(b.y1)) / 2))
            continue
        if isinstance(s, Polygon):
            m = _polygon_mask(s, size)
            sampled = m[np.ix_(rows, cols)]
            missed = [] if sampled.any() or not m.any() else [_exact_pixels_centroid(m)]
        elif isinstance(s, Mask):
            sampled, missed = _pixel_lesions(load_mask(s, size), rows, cols)
        else:
            raise ShapeError(f"unknown shape type {type(s).__name__}")
        out |= sampled
        centroids += missed
    for ccx, ccy in centroids:
        out[_centroid_cell(ccx, ccy, size, (gh, gw))] = True
    if not out.any():
        return None
    return RegionRaster(out, len(centroids))
