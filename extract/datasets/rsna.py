"""RSNA Pneumonia Detection Challenge (Kaggle 2018), stage 2 train: boxes on 1024x1024 DICOMs.

Layout under ``--root`` (the Kaggle download, unzipped)::

    stage_2_train_labels.csv          patientId,x,y,width,height,Target
    stage_2_train_images/<patientId>.dcm

One case per patientId (26,684; 6,012 positive with 9,555 boxes). Class ``Pneumonia``: 1 when
the patient's rows have Target=1 (one row per box, x,y top-left + width,height in pixels of the
1024x1024 image), 0 when the single row has Target=0 and empty box columns (both "Normal" and
"No Lung Opacity / Not Normal" in stage_2_detailed_class_info.csv, which is not needed).

Skipped with a problem: a Target other than 0/1, Target=1 without a box, Target=0 with a box,
a patient mixing Target 0 and 1, a box outside the image, no DICOM for the patientId.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from xbench.extract.datasets._io import ATTRIBUTES_OPTION, attributes_option, CSVFile, CaseProblems, check_box, check_options, index_files, parse_float, require_file
from xbench.extract.datasets.base import Box, CaseRecord, ReaderError
from xbench.extract.datasets.dicom import DicomReader, read_dicom
from xbench.schemas.vocabulary import canonical, classes_for

LAYOUT = """  stage_2_train_labels.csv          (patientId,x,y,width,height,Target)
  stage_2_train_images/<patientId>.dcm"""
SIZE = (1024, 1024)
_COLUMNS = ("patientId", "x", "y", "width", "height", "Target")


#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"rsna_pneumonia": "RSNAPneumoniaReader"}


class RSNAPneumoniaReader(DicomReader):
    """Reads ``stage_2_train_labels.csv`` and its DICOMs; the only labelled split is ``train``."""

    key = "rsna_pneumonia"
    classes = classes_for("rsna_pneumonia")
    splits = ("train",)

    def __init__(self, root, split=None, **options) -> None:
        super().__init__(root, split, **options)
        check_options(self.key, options, {"attributes": ATTRIBUTES_OPTION})
        attributes_option(self.key, self.options)

    def records(self) -> list[CaseRecord]:
        self.problems.clear()  # records() may be called again; report each problem once
        csv_path = require_file(self.root / "stage_2_train_labels.csv", "RSNA labels file", LAYOUT)
        images = index_files([self.root / "stage_2_train_images"], (".dcm",))
        if not images:
            raise ReaderError(f"no DICOM files under {self.root / 'stage_2_train_images'}\nexpected layout:\n{LAYOUT}")
        cls = canonical(self.key, "Lung Opacity")
        bad = CaseProblems(self.problems)
        targets: dict[str, set[int]] = {}
        boxes: dict[str, list[Box]] = {}
        first_row: dict[str, str] = {}
        reader = CSVFile(csv_path, self.source_roots())
        header = reader.header()
        missing = [c for c in _COLUMNS if c not in header]
        if missing:
            raise ReaderError(f"{csv_path}: missing column(s) {', '.join(missing)}; expected header {','.join(_COLUMNS)}")
        for row in reader.dicts(header):
            where = f"{csv_path.name}:row {reader.line_num}"
            pid = (row["patientId"] or "").strip()
            if not pid:
                bad.add(where, "empty patientId", None)
                continue
            first_row.setdefault(pid, where)
            targets.setdefault(pid, set())
            boxes.setdefault(pid, [])
            try:
                target, box = _parse_row(row)
            except ValueError as e:
                bad.add(where, str(e), pid)
                continue
            targets[pid].add(target)
            if box is not None:
                boxes[pid].append(box)

        out: list[CaseRecord] = []
        for pid, where in first_row.items():
            if pid in bad:
                continue
            if targets[pid] == {0, 1}:
                bad.add(where, "patient has both Target=0 and Target=1 rows", pid)
                continue
            if pid not in images:
                bad.add(where, f"no image stage_2_train_images/{pid}.dcm", pid)
                continue
            positive = targets[pid] == {1}
            record = CaseRecord(
                case_id=pid,
                image_ref=images[pid],
                labels={cls: int(positive)},
                regions={cls: list(boxes[pid])} if positive else {},
                orig_size=SIZE,
                source=where,
            )
            out.append(record)
        return out

    def load_image(self, record: CaseRecord) -> np.ndarray:
        return read_dicom(Path(record.image_ref))


def _parse_row(row: dict) -> tuple[int, Box | None]:
    """(Target, box or None) of one labels row; ValueError says what is wrong."""
    raw_target = (row["Target"] or "").strip()
    if raw_target not in ("0", "1"):
        raise ValueError(f"Target must be 0 or 1, got {raw_target!r}")
    target = int(raw_target)
    fields = [(row[k] or "").strip() for k in ("x", "y", "width", "height")]
    if not any(fields):
        if target == 1:
            raise ValueError("Target=1 but the box columns are empty")
        return target, None
    if target == 0:
        raise ValueError(f"Target=0 but a box is given ({','.join(fields)})")
    try:
        x, y, w, h = (parse_float(v) for v in fields)
    except ValueError:
        raise ValueError(f"box columns are not all numbers: {','.join(fields)}") from None
    return target, check_box(Box(x, y, x + w, y + h), *SIZE)
