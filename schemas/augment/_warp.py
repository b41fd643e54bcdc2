"""Resampling under an affine map of normalised coordinates: the one geometry every geometric augmentation uses.

Normalised coordinates put the image in the unit square: the centre of pixel (row i, column j) of an H x W
array is ``(u, v) = ((j + 0.5) / W, (i + 0.5) / H)``, u to the right, v down, so the same normalised map
means the same thing on the S x S stored image, on the original-resolution image and on a map grid.

Sampling an array at a normalised point: the point's pixel position is ``x = u W - 0.5``, ``y = v H - 0.5``
(half-pixel centres); a point inside the unit square (borders included) is in view and read bilinearly
from its four neighbours, a position less than half a pixel beyond the outermost centres reading the
edge pixel (clamped); a point outside the unit square is out of view and gets the caller's fill.
Positions within 1e-6 pixel of a whole pixel are snapped to it, so that the maps that move pixel centres
onto pixel centres (a flip, a quarter turn of a square, a shift by whole pixels) copy values exactly
instead of mixing in 1e-16 of a neighbour.

numpy only; large images are resampled in bands of rows so working memory stays a few times the image.
"""
from __future__ import annotations

import numpy as np

#: output pixels resampled per band (bounds the float64 temporaries to a few tens of MB)
_BAND_PIXELS = 1 << 20
_SNAP = 1e-6
_IN_VIEW_TOLERANCE = 1e-9


def identity() -> np.ndarray:
    return np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


def compose(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The affine map ``p -> a(b(p))`` (2 x 3 each)."""
    a3 = np.vstack([a, [0.0, 0.0, 1.0]])
    b3 = np.vstack([b, [0.0, 0.0, 1.0]])
    return (a3 @ b3)[:2]


def invert(a: np.ndarray) -> np.ndarray:
    """The inverse of an invertible 2 x 3 affine map; exact for the signed-permutation linear parts
    (flips, quarter turns) whose entries are 0 and +-1."""
    lin, t = a[:, :2], a[:, 2]
    det = lin[0, 0] * lin[1, 1] - lin[0, 1] * lin[1, 0]
    inv = np.array([[lin[1, 1], -lin[0, 1]], [-lin[1, 0], lin[0, 0]]]) / det
    return np.hstack([inv, (-inv @ t)[:, None]])


def about_centre(linear: np.ndarray) -> np.ndarray:
    """The affine map applying ``linear`` (2 x 2) about the image centre (0.5, 0.5)."""
    c = np.array([0.5, 0.5])
    return np.hstack([linear, (c - linear @ c)[:, None]])


def _snap(x: np.ndarray) -> np.ndarray:
    r = np.rint(x)
    return np.where(np.abs(x - r) < _SNAP, r, x)


def _band_coordinates(source_of: np.ndarray, rows: np.ndarray, h: int, w: int):
    """Pixel positions (y, x) in the source of the output rows ``rows`` and whether each is in view."""
    v = ((rows + 0.5) / h)[:, None]
    u = ((np.arange(w) + 0.5) / w)[None, :]
    us = source_of[0, 0] * u + source_of[0, 1] * v + source_of[0, 2]
    vs = source_of[1, 0] * u + source_of[1, 1] * v + source_of[1, 2]
    lo, hi = -_IN_VIEW_TOLERANCE, 1.0 + _IN_VIEW_TOLERANCE
    inside = (us >= lo) & (us <= hi) & (vs >= lo) & (vs <= hi)
    x = np.clip(_snap(us * w - 0.5), 0.0, w - 1.0)
    y = np.clip(_snap(vs * h - 0.5), 0.0, h - 1.0)
    return y, x, inside


def in_view(source_of: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """(h, w) bool: which output pixels read a point inside the source (the rest get the fill)."""
    h, w = int(shape[0]), int(shape[1])
    return _band_coordinates(source_of, np.arange(h, dtype=np.float64), h, w)[2]


def resample(arrays: np.ndarray, source_of: np.ndarray, fill: np.ndarray | float, *,
             to_uint8: bool = False) -> np.ndarray:
    """Arrays (N, h, w) resampled onto their own grid: output pixel p reads ``arrays`` at ``source_of(p)``
    (normalised coordinates; module doc). ``fill``: a scalar, or one value per array (N,), for pixels whose
    point is out of view. Returns float64 (N, h, w), or with ``to_uint8`` the values rounded half to even and
    clipped to 0..255 band by band (a large original then needs no full-size float copy)."""
    arrays = np.asarray(arrays) if to_uint8 else np.asarray(arrays, dtype=np.float64)
    n, h, w = arrays.shape
    fill = np.broadcast_to(np.asarray(fill, dtype=np.float64), (n,))
    out = np.empty((n, h, w), dtype=np.uint8 if to_uint8 else np.float64)
    band = max(1, _BAND_PIXELS // max(1, w))
    for r0 in range(0, h, band):
        rows = np.arange(r0, min(h, r0 + band), dtype=np.float64)
        y, x, inside = _band_coordinates(source_of, rows, h, w)
        y0 = np.floor(y).astype(np.intp)
        x0 = np.floor(x).astype(np.intp)
        y1 = np.minimum(y0 + 1, h - 1)
        x1 = np.minimum(x0 + 1, w - 1)
        fy, fx = y - y0, x - x0
        for k in range(n):
            a = arrays[k]
            pick = lambda yy, xx: a[yy, xx].astype(np.float64)  # noqa: E731 - uint8 images read as float
            top = pick(y0, x0) * (1.0 - fx) + pick(y0, x1) * fx
            bottom = pick(y1, x0) * (1.0 - fx) + pick(y1, x1) * fx
            val = np.where(inside, top * (1.0 - fy) + bottom * fy, fill[k])  # a zero weight keeps a value exact
            out[k, int(r0):int(r0) + len(rows)] = np.clip(np.rint(val), 0, 255) if to_uint8 else val
    return out
