"""Helpers shared by the readers of eye-tracking datasets (reflacx.py, egd_cxr.py): a MIMIC-CXR-JPG path from
a MIMIC-CXR path as the gaze files write it, an axis-aligned ellipse as a lazy native mask, and the readings
turned into gt.zarr's gaze arrays (schemas/gaze.py).

Nothing here knows a dataset's files; the readers do.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from xbench.extract.datasets.base import Mask

#: the tail of a MIMIC-CXR (DICOM or JPG) path: files/pNN/pNNNNNNNN/sNNNNNNNN/<dicom_id>.<dcm|jpg>
_MIMIC_TAIL = re.compile(r"(?:^|/)(files/p\d{2}/p\d{8}/s\d{8}/)([0-9A-Za-z][0-9A-Za-z-]{0,127})\.(dcm|jpg)$")
#: the largest side of an image we accept from a metadata file (MIMIC-CXR's largest are ~4,300 px)
MAX_SIDE = 20_000


def mimic_jpg_path(text: str, dicom_id: str) -> str:
    """The MIMIC-CXR-JPG relative path (``files/pNN/pNNNNNNNN/sNNNNNNNN/<dicom_id>.jpg``) of a MIMIC-CXR path
    as a gaze file writes it (any prefix, ``.dcm`` or ``.jpg``); ValueError unless its tail has that exact
    form and names ``dicom_id`` (so no ``..``, no absolute path, no other image)."""
    m = _MIMIC_TAIL.search((text or "").strip().replace("\\", "/"))
    if not m:
        raise ValueError(f"image path {text!r} does not end in files/pNN/pNNNNNNNN/sNNNNNNNN/<dicom_id>.dcm")
    if m.group(2) != dicom_id:
        raise ValueError(f"image path {text!r} names {m.group(2)!r}, not the row's dicom_id {dicom_id!r}")
    return f"{m.group(1)}{dicom_id}.jpg"


def check_dicom_id(text: str) -> str:
    """A MIMIC-CXR dicom_id as written (hex groups and dashes): ValueError for anything else (a path, ``..``)."""
    t = (text or "").strip()
    if not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z-]{0,127}", t):
        raise ValueError(f"dicom_id {text!r} is not a MIMIC-CXR dicom_id (letters, digits and dashes)")
    return t


def image_size(width: str, height: str) -> tuple[int, int]:
    """(height, width) from the metadata's text; ValueError unless both are whole numbers in 1..MAX_SIDE."""
    out = []
    for name, text in (("image_size_y", height), ("image_size_x", width)):
        v = float((text or "").strip())
        if not (math.isfinite(v) and v == int(v) and 1 <= v <= MAX_SIDE):
            raise ValueError(f"{name} {text!r} is not a whole number of pixels in 1..{MAX_SIDE}")
        out.append(int(v))
    return out[0], out[1]


def ellipse_mask(box: tuple[float, float, float, float], orig_size: tuple[int, int]) -> np.ndarray:
    """The (H, W) bool mask of the axis-aligned ellipse inscribed in ``box`` = (xmin, ymin, xmax, ymax) in
    native continuous coordinates: pixel (r, c) is inside when its centre (c + 0.5, r + 0.5) satisfies
    ((u - cx) / a)^2 + ((v - cy) / b)^2 <= 1 (cx, cy the box's centre, a, b its half sides). Only the
    box's pixels are evaluated."""
    x0, y0, x1, y1 = (float(v) for v in box)
    h, w = int(orig_size[0]), int(orig_size[1])
    out = np.zeros((h, w), bool)
    c0, c1 = max(int(math.floor(x0)), 0), min(int(math.ceil(x1)), w)
    r0, r1 = max(int(math.floor(y0)), 0), min(int(math.ceil(y1)), h)
    if c1 <= c0 or r1 <= r0:
        return out
    cx, cy, a, b = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    u = (np.arange(c0, c1) + 0.5 - cx) / a
    v = (np.arange(r0, r1) + 0.5 - cy) / b
    out[r0:r1, c0:c1] = v[:, None] ** 2 + u[None, :] ** 2 <= 1.0
    return out


def ellipse_shape(box: tuple[float, float, float, float], orig_size: tuple[int, int]) -> Mask:
    """A lazy :class:`Mask` of :func:`ellipse_mask` (the pipeline rasterises it like any mask)."""
    return Mask(functools.partial(ellipse_mask, tuple(box), tuple(orig_size)))


def check_ellipse_box(box: tuple[float, float, float, float], orig_size: tuple[int, int]) -> tuple:
    """``box`` unchanged when finite, non-empty and within one image size of the image (a reader may drag an
    ellipse past the border, so a box partly outside is kept and clipped by its mask); ValueError otherwise."""
    x0, y0, x1, y1 = box
    h, w = orig_size
    if not all(math.isfinite(v) for v in box):
        raise ValueError(f"ellipse box {box} has a non-finite coordinate")
    if not (x1 > x0 and y1 > y0):
        raise ValueError(f"ellipse box {box} is empty or inverted (need xmax > xmin and ymax > ymin)")
    if x0 < -w or y0 < -h or x1 > 2 * w or y1 > 2 * h or x1 <= 0 or y1 <= 0 or x0 >= w or y0 >= h:
        raise ValueError(f"ellipse box {box} lies outside the {w}x{h} image")
    return box


@dataclass
class NativeReading:
    """One reading as a gaze reader parsed it: the reader's name, its fixations (k, 3) (x, y in original pixels,
    seconds), its labels {class: -1/0/1}, its regions {class: [shapes]} and the sigma in original pixels."""

    reader: str
    fixations: np.ndarray
    labels: dict[str, int]
    sigma: float
    regions: dict[str, list] = field(default_factory=dict)


def gaze_arrays(records, readings: dict[str, list[NativeReading]], classes: Sequence[str], grid, sigma_rule: str):
    """gt.zarr's gaze arrays (:class:`xbench.schemas.gaze.Gaze`) of the prepared ``records`` (their gt order)
    from ``readings`` (case id -> its readings, in order): labels in ``classes`` order, regions rasterised on
    ``grid`` lesion by lesion as gt.zarr's regions are (:func:`rasterise_region`)."""
    from xbench.extract.datasets.rasterise import rasterise_region
    from xbench.schemas.gaze import Gaze, Reading

    out, sizes = [], []
    for row, rec in enumerate(records):
        size = tuple(int(v) for v in rec.orig_size)
        sizes.append(size)
        for nr in readings.get(rec.case_id, ()):
            regions = {}
            for j, c in enumerate(classes):
                if nr.labels.get(c) == 1 and nr.regions.get(c):
                    raster = rasterise_region(nr.regions[c], size, grid)
                    if raster is not None:
                        regions[j] = raster.mask
            labels = np.array([nr.labels.get(c, -1) for c in classes], np.int8)
            out.append(Reading(row, nr.reader, nr.fixations, labels, nr.sigma, regions))
    gaze = Gaze.from_readings(out, np.asarray(sizes, np.int32).reshape(-1, 2), grid, len(classes))
    gaze.sigma_rule = sigma_rule
    return gaze
