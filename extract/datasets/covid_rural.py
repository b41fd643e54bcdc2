"""COVID-19-AR "COVID Rural" opacity outlines (Tang, Sun & Li 2020): LabelMe polygons on 221 JPGs.

Layout under ``--root`` (a clone of haimingt/opacity_segmentation_covid_chest_X_ray, or just its
``covid_rural_annot`` folder)::

    covid_rural_annot/jpgs/<PATIENT_ID>_<MM-DD-YYYY>-XR.jpg
    covid_rural_annot/jpgs/jsons/<same stem>.json        (LabelMe 4.5.6)

One case per JSON (split ``all``); case id = the JSON stem. Class ``COVID-19``: the region is the
union of every opacity polygon (``consolidation``, ``groud_glass_opacity`` [sic] and the correct
spelling); the lung outlines ``right_lung``/``left_lung`` are read and dropped. An image with only
lung outlines is a negative (label 0). Points are float (x, y) pixels of the original JPG, whose
size is the JSON's imageHeight/imageWidth. When the JPG is missing, the image embedded in the
JSON (``imageData``, base64) is used instead.

Skipped with a problem: invalid JSON, no image size, an unknown label (the message lists the known
ones), a shape that is not a polygon/rectangle, a polygon with fewer than 3 points or a point
outside the image, no image at all.
"""
from __future__ import annotations

import base64
import binascii
from pathlib import Path

import numpy as np

from xbench.extract.datasets._io import (MAX_IMAGE_PIXELS, AnnotationFileError, CaseProblems, ImageReadError, check_box, check_options,
                  check_points, decode_raster, index_files, load_annotation_json, load_raster)
from xbench.extract.datasets.base import Box, CaseRecord, DatasetReader, Polygon, ReaderError
from xbench.schemas.vocabulary import UnknownLabelError, canonical, classes_for, is_ignored

LAYOUT = """  covid_rural_annot/jpgs/<stem>.jpg
  covid_rural_annot/jpgs/jsons/<stem>.json   (LabelMe polygons)"""


#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"covid_rural": "CovidRuralReader"}


class CovidRuralReader(DatasetReader):
    """Reads the LabelMe JSONs of the COVID-rural opacity annotations and their JPGs."""

    key = "covid_rural"
    classes = classes_for("covid_rural")
    splits = ("all",)

    def __init__(self, root, split=None, **options) -> None:
        super().__init__(root, split, **options)
        check_options(self.key, options, {})

    def _json_dir(self) -> Path:
        for d in (self.root / "covid_rural_annot" / "jpgs" / "jsons", self.root / "jpgs" / "jsons"):
            if d.is_dir():
                return d
        raise ReaderError(f"COVID-rural annotations not found: expected {self.root / 'covid_rural_annot/jpgs/jsons'}\n"
                          f"expected layout under --root:\n{LAYOUT}")

    def records(self) -> list[CaseRecord]:
        self.problems.clear()  # records() may be called again; report each problem once
        json_dir = self._json_dir()
        files = sorted(json_dir.glob("*.json"))
        if not files:
            raise ReaderError(f"no LabelMe .json files in {json_dir}\nexpected layout:\n{LAYOUT}")
        images = index_files([json_dir.parent], (".jpg", ".jpeg", ".png"))
        (cls,) = self.classes
        bad = CaseProblems(self.problems)
        out = []
        for path in files:
            case_id = path.stem
            where = f"{json_dir.name}/{path.name}"
            try:
                doc = load_annotation_json(path, self.source_roots(), where=where)
            except AnnotationFileError as e:  # not JSON, too deep, a key twice, not a regular file ...
                bad.add(where, "; ".join(getattr(p, "message", str(p)) for p in e.problems), case_id)
                continue
            try:
                h, w = _size(doc)
            except ValueError as e:
                bad.add(where, f"not a LabelMe file with imageHeight/imageWidth ({e})", case_id)
                continue
            shapes = doc.get("shapes")
            if not isinstance(shapes, list):
                bad.add(where, "no 'shapes' list", case_id)
                continue
            opacity = []
            for i, shape in enumerate(shapes):
                try:
                    s = self._shape(shape, h, w)
                except ValueError as e:
                    bad.add(f"{where}:shape {i}", str(e), case_id)
                    continue
                if s is not None:
                    opacity.append(s)
            if case_id in bad:
                continue
            if case_id in images:
                ref: object = images[case_id]
            elif isinstance(doc.get("imageData"), str) and doc["imageData"]:
                ref = ("labelme", path, tuple(str(r) for r in self.source_roots()))
            else:
                bad.add(where, f"no image {case_id}.jpg in {json_dir.parent} and no embedded imageData", case_id)
                continue
            regions = {cls: opacity} if opacity else {}
            out.append(CaseRecord(case_id, ref, {cls: int(bool(opacity))}, regions, (h, w), where))
        return out

    def _shape(self, shape, h: int, w: int):
        """The opacity shape (Polygon or Box), None for a lung outline; ValueError if bad."""
        if not isinstance(shape, dict):
            raise ValueError("shape is not an object")
        label = str(shape.get("label", "")).strip()
        if is_ignored(self.key, label):
            return None
        try:
            canonical(self.key, label)
        except UnknownLabelError as e:
            raise ValueError(str(e)) from None
        kind = shape.get("shape_type") or "polygon"
        points = shape.get("points")
        if kind == "polygon":
            return Polygon(check_points(points, h, w))
        if kind == "rectangle":
            if not (isinstance(points, list) and len(points) == 2):
                raise ValueError("rectangle needs 2 points")
            (xa, ya), (xb, yb) = check_points(points + [points[0]], h, w)[:2]
            return check_box(Box(min(xa, xb), min(ya, yb), max(xa, xb), max(ya, yb)), h, w)
        raise ValueError(f"shape_type {kind!r} of {label!r} is not supported (polygon or rectangle)")

    def load_image(self, record: CaseRecord) -> np.ndarray:
        ref = record.image_ref
        if isinstance(ref, tuple) and ref[0] == "labelme":
            return _embedded_image(Path(ref[1]), ref[2] if len(ref) > 2 else ())
        return load_raster(Path(ref))


def _size(doc) -> tuple[int, int]:
    """(imageHeight, imageWidth) of a LabelMe document: positive integers, at most MAX_IMAGE_PIXELS together."""
    if not isinstance(doc, dict):
        raise ValueError("the document is not a JSON object")
    h, w = doc.get("imageHeight"), doc.get("imageWidth")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (h, w)):
        raise ValueError(f"imageHeight/imageWidth must be integers, got {h!r:.40}, {w!r:.40}")
    if h <= 0 or w <= 0 or h * w > MAX_IMAGE_PIXELS:
        raise ValueError(f"image size {w}x{h} is not positive or exceeds {MAX_IMAGE_PIXELS:,} pixels")
    return h, w


def _embedded_image(json_path: Path, roots=()) -> np.ndarray:
    """Decode LabelMe's base64 ``imageData`` to (H, W) uint8: the JSON read by the bounded reader, the
    base64 checked strictly, the image's pixel count checked before it is decoded."""
    doc = load_annotation_json(json_path, roots)
    data = doc.get("imageData") if isinstance(doc, dict) else None
    if not isinstance(data, str) or not data:
        raise ImageReadError(f"{json_path}: no embedded imageData")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ImageReadError(f"{json_path}: the embedded imageData is not base64 ({e})") from None
    return decode_raster(raw, f"{json_path} (embedded imageData)")
