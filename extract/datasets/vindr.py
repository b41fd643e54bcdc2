"""VinDr-CXR (PhysioNet 1.0.0): xyxy boxes of 22 local findings on DICOMs of varying size.

Layout under ``--root`` (the PhysioNet download)::

    annotations/annotations_test.csv    image_id,[rad_id,]class_name,x_min,y_min,x_max,y_max
    annotations/annotations_train.csv   image_id,rad_id,class_name,x_min,y_min,x_max,y_max
    test/<image_id>.dicom
    train/<image_id>.dicom

Splits: ``test`` (3,000 images, consensus of 5 radiologists, default) and ``train`` (15,000, each
read by 3 of 17 radiologists R1..R17). Option ``reader`` (train): ``"union"`` (default; a class is
1 when any reader boxed it and its region is the union of all readers' boxes) or a rad_id such as
``"R8"`` (only the images that reader read, with that reader's boxes). On test every row is used.

One row per box; ``No finding`` rows have empty coordinates. Every one of the 22 classes is
labelled on every image: 1 with a box, else 0. Only columns image_id, class_name and the four
coordinates are required. Image sizes come from the DICOM headers (read without pixels), so boxes
are checked against them; ``check_sizes=False`` skips that (then the size comes from decoding).

Skipped with a problem: unknown class_name, a local class without coordinates, a bad or
outside-the-image box, no DICOM, an unreadable DICOM header.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from xbench.extract.datasets._io import (ATTRIBUTES_OPTION, CSVFile, CaseProblems, ImageReadError, attributes_option, check_box, check_options, index_files, option_bool, parse_float,
                  require_file)
from xbench.extract.datasets.base import Box, CaseRecord, ReaderError, ReaderOptionError
from xbench.extract.datasets.dicom import DicomReader, read_dicom, read_dicom_size
from xbench.schemas.paths import is_reader_name
from xbench.schemas.vocabulary import UnknownLabelError, canonical, classes_for, is_no_finding

LAYOUT = """  annotations/annotations_test.csv, annotations/annotations_train.csv
  test/<image_id>.dicom, train/<image_id>.dicom"""
_REQUIRED = ("image_id", "class_name", "x_min", "y_min", "x_max", "y_max")


#: A VinDr-CXR reader's rad_id: R and 1 to 7 ASCII digits (``str.isdigit`` also takes ``R²``, ``R١``), which
#: is also a reader's name (:data:`xbench.schemas.paths.READER_NAME`), the folder ``xbench human`` writes.
_RAD_ID = re.compile(r"R[0-9]{1,7}")


def is_rad_id(text: object) -> bool:
    return isinstance(text, str) and _RAD_ID.fullmatch(text) is not None and is_reader_name(text)


#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"vindr_cxr": "VinDrCXRReader"}


class VinDrCXRReader(DicomReader):
    """Reads ``annotations/annotations_<split>.csv`` and ``<split>/*.dicom``."""

    key = "vindr_cxr"
    classes = classes_for("vindr_cxr")
    splits = ("test", "train")

    def __init__(self, root, split=None, **options) -> None:
        super().__init__(root, split, **options)
        check_options(self.key, options, {
            "reader": "'union' (default) or one rad_id, e.g. 'R8' (train only)",
            "check_sizes": "read DICOM headers to check boxes against the image size (default True)",
            "voi": "'header' (default: DICOM window if present) or 'minmax'",
            "attributes": ATTRIBUTES_OPTION,
        })
        attributes_option(self.key, self.options)
        self.options["check_sizes"] = option_bool(self.key, "check_sizes", options.get("check_sizes", True))
        self.options.setdefault("reader", "union")
        self.options.setdefault("voi", "header")
        reader = options.get("reader", "union")
        if not isinstance(reader, str) or not (reader == "union" or is_rad_id(reader)):
            raise ReaderOptionError(f"vindr_cxr: reader must be 'union' or a rad_id like 'R8'; got {reader!r}")
        if options.get("voi", "header") not in ("header", "minmax"):
            raise ReaderOptionError(f"vindr_cxr: voi must be 'header' or 'minmax'; got {options['voi']!r}")
        if reader != "union" and self.split != "train":
            raise ReaderOptionError("vindr_cxr: a single reader can only be chosen on the train split (test is a consensus)")

    def records(self) -> list[CaseRecord]:
        self.problems.clear()  # records() may be called again; report each problem once
        csv_path = require_file(self.root / "annotations" / f"annotations_{self.split}.csv",
                                f"VinDr-CXR {self.split} annotations", LAYOUT)
        images = index_files([self.root / self.split], (".dicom", ".dcm"))
        if not images:
            raise ReaderError(f"no .dicom files under {self.root / self.split}\nexpected layout:\n{LAYOUT}")
        only = self.options.get("reader", "union")
        bad = CaseProblems(self.problems)
        regions: dict[str, dict[str, list[tuple[Box, str]]]] = {}
        first_row: dict[str, str] = {}
        reader = CSVFile(csv_path, self.source_roots())
        fields = [h.strip() for h in reader.header()]
        missing = [c for c in _REQUIRED if c not in fields]
        if missing:
            raise ReaderError(f"{csv_path}: missing column(s) {', '.join(missing)}; header is {','.join(fields)}")
        if only != "union" and "rad_id" not in fields:
            raise ReaderError(f"{csv_path}: reader={only!r} needs a rad_id column")
        for row in reader.dicts(fields):
            where = f"{csv_path.name}:row {reader.line_num}"
            image = (row["image_id"] or "").strip()
            if not image:
                bad.add(where, "empty image_id", None)
                continue
            if only != "union" and (row.get("rad_id") or "").strip() != only:
                continue
            first_row.setdefault(image, where)
            regions.setdefault(image, {})
            name = (row["class_name"] or "").strip()
            coords = [(row[k] or "").strip() for k in ("x_min", "y_min", "x_max", "y_max")]
            if is_no_finding(self.key, name):
                continue
            try:
                cls = canonical(self.key, name)
            except UnknownLabelError:
                bad.add(where, f"unknown class_name {name!r}", image)
                continue
            if not all(coords):
                bad.add(where, f"{name} row without coordinates", image)
                continue
            try:
                box = check_box(Box(*(parse_float(v) for v in coords)), None, None)
            except ValueError as e:
                bad.add(where, f"bad box {coords}: {e}", image)
                continue
            regions[image].setdefault(cls, []).append((box, where))

        out: list[CaseRecord] = []
        for image, where in first_row.items():
            if image in bad:
                continue
            if image not in images:
                bad.add(where, f"no image {self.split}/{image}.dicom", image)
                continue
            size = None
            if self.options["check_sizes"]:
                try:
                    size = read_dicom_size(images[image])
                except ImageReadError as e:
                    bad.add(where, str(e), image)
                    continue
            checked: dict[str, list[Box]] = {}
            for cls, boxes in regions[image].items():
                for box, box_row in boxes:
                    try:
                        checked.setdefault(cls, []).append(check_box(box, *(size or (None, None))))
                    except ValueError as e:
                        bad.add(box_row, str(e), image)
            if image in bad:
                continue
            labels = {c: int(c in checked) for c in self.classes}
            out.append(CaseRecord(image, images[image], labels, checked, size, where))
        return out

    def load_image(self, record: CaseRecord) -> np.ndarray:
        return read_dicom(Path(record.image_ref), voi=self.options.get("voi", "header"))
