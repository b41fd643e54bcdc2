"""EGD-CXR (Karargyris et al., Sci Data 2021; PhysioNet ``egd-cxr`` 1.0.0): one radiologist's eye gaze while
reading and dictating 1,083 MIMIC-CXR images.

Layout under ``--root`` (the PhysioNet folder; images from a MIMIC-CXR-JPG tree, ``--option images=DIR``)::

    master_sheet.csv        one row per image: dicom_id, path (files/pXX/pXXXXXXXX/sXXXXXXXX/<dicom_id>.dcm),
                            the study's CheXpert labels (<finding>__chx), ...
    fixations.csv           one row per fixation of every session: DICOM_ID, FPOGD (duration, s), FPOGV (valid),
                            FPOGID, X_ORIGINAL, Y_ORIGINAL (the fixation in the original image's pixels), ...
    files/pXX/pXXXXXXXX/sXXXXXXXX/<dicom_id>.jpg   (MIMIC-CXR-JPG, under --option images, default --root)

Each image of the master sheet is one case (id = dicom_id) and one gaze reading by the one radiologist
(reader ``R1``). Its labels are the master sheet's CheXpert columns: 1.0 present, 0.0 absent, -1.0 (uncertain)
and empty not given (-1); the study's labels, so they are also the reading's. ``bounding_boxes.csv`` outlines
anatomy, not findings, and is not read: EGD-CXR has no class regions.

Fixations: the rows of ``fixations.csv`` whose DICOM_ID is in the master sheet (the others are the
calibration images shown every 20 cases), in file order; a row with FPOGV 0 (not a valid fixation) or FPOGD 0
is dropped; consecutive rows of one image with the same FPOGID are one fixation (the last row, its full
duration). X/Y_ORIGINAL are kept as written: the release writes about -1 for a fixation off the image, which
then falls on no map. Sigma: EGD-CXR publishes no viewing distance, so the documented default
(schemas/gaze.py, 3% of the image's larger side; ``--option sigma=PX`` overrides).

Skipped with a problem (the whole case): a malformed row, a negative duration, a non-finite coordinate,
more fixations than one reading may hold, a missing image. Split: ``all`` (the release has none).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from xbench.extract.datasets._gaze_io import NativeReading, check_dicom_id, gaze_arrays, mimic_jpg_path
from xbench.extract.datasets._io import CSVFile, CaseProblems, check_options, load_raster, parse_float
from xbench.extract.datasets.base import CaseRecord, DatasetReader, ReaderError, ReaderOptionError
from xbench.schemas.vocabulary import classes_for, native_labels

LAYOUT = """  master_sheet.csv, fixations.csv
  files/pXX/pXXXXXXXX/sXXXXXXXX/<dicom_id>.jpg   (MIMIC-CXR-JPG; or --option images=DIR)"""
SHEET_COLUMNS = ("dicom_id", "path")
FIXATION_COLUMNS = ("DICOM_ID", "FPOGD", "X_ORIGINAL", "Y_ORIGINAL")
READER = "R1"
_CHX = {"1.0": 1, "1": 1, "0.0": 0, "0": 0, "-1.0": -1, "-1": -1, "": -1}

#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"egd_cxr": "EGDCXRReader"}


class EGDCXRReader(DatasetReader):
    """Reads EGD-CXR's master sheet and fixations, and the MIMIC-CXR-JPG images they name."""

    key = "egd_cxr"
    classes = classes_for("egd_cxr")
    splits = ("all",)

    def __init__(self, root, split=None, **options) -> None:
        super().__init__(root, split, **options)
        check_options(self.key, options, {
            "images": "MIMIC-CXR-JPG root holding files/ (default: --root)",
            "sigma": "the gaze maps' sigma in original pixels (default: 3% of the image's larger side)"})
        self.images = Path(options.get("images") or self.root)
        try:
            self.sigma = None if options.get("sigma") in (None, "") else float(options["sigma"])
        except (TypeError, ValueError):
            raise ReaderOptionError(f"egd_cxr: option sigma must be a number of pixels; got {options['sigma']!r}") from None
        from xbench.schemas.gaze import stored_positive

        if self.sigma is not None and not stored_positive(self.sigma, 10_000):
            raise ReaderOptionError(f"egd_cxr: sigma must lie in (0, 10000] pixels (a normal float32, as stored); "
                                    f"got {self.sigma}")
        self._labels = {n: c for c in self.classes for n in native_labels(self.key, c)}
        self._fixations: dict[str, np.ndarray] = {}
        self._record_labels: dict[str, dict] = {}

    def given_roots(self) -> list[Path]:
        return [self.root, self.images]

    def _file(self, name: str) -> Path:
        p = self.root / name
        if not p.exists():
            raise ReaderError(f"no EGD-CXR {name} under {self.root}; expected layout:\n{LAYOUT}")
        return p

    def records(self) -> list[CaseRecord]:
        from xbench.schemas.gaze import MAX_FIXATIONS_PER_READING, stored_positive

        self.problems.clear()
        bad = CaseProblems(self.problems)
        sheet = self._file("master_sheet.csv")
        reader = CSVFile(sheet, self.source_roots())
        header = [h.strip() for h in reader.header()]
        missing = [c for c in (*SHEET_COLUMNS, *self._labels) if c not in header]
        if missing:
            raise ReaderError(f"{sheet}: missing column(s) {', '.join(missing)}")
        cases: dict[str, dict] = {}
        for row in reader.dicts(header):
            where = f"{sheet.name}:{reader.line_num}"
            try:
                cid = check_dicom_id(row["dicom_id"] or "")
            except ValueError as exc:
                bad.add(where, str(exc), None)
                continue
            try:
                rel = mimic_jpg_path(row["path"] or "", cid)
                labels = {}
                for col, cls in self._labels.items():
                    v = (row[col] or "").strip()
                    if v not in _CHX:
                        raise ValueError(f"{col} {v!r} is not 1.0, 0.0, -1.0 or empty")
                    labels[cls] = max(labels.get(cls, -1), _CHX[v])
            except ValueError as exc:
                bad.add(where, str(exc), cid)
                continue
            if cid in cases:
                bad.add(where, "the image appears twice in the master sheet", cid)
                continue
            cases[cid] = {"path": rel, "labels": labels, "where": where, "fix": [], "last": None}
        fix_path = self._file("fixations.csv")
        reader = CSVFile(fix_path, self.source_roots())
        header = [h.strip() for h in reader.header()]
        missing = [c for c in FIXATION_COLUMNS if c not in header]
        if missing:
            raise ReaderError(f"{fix_path}: missing column(s) {', '.join(missing)}")
        for row in reader.dicts(header):
            cid = (row["DICOM_ID"] or "").strip()
            c = cases.get(cid)
            if c is None or cid in bad:
                continue  # a calibration image, or a case already skipped
            where = f"{fix_path.name}:{reader.line_num}"
            if (row.get("FPOGV") or "1").strip() in ("0", "0.0"):
                continue
            try:
                d, x, y = (parse_float(row[k] or "") for k in ("FPOGD", "X_ORIGINAL", "Y_ORIGINAL"))
                if d < 0:
                    raise ValueError(f"FPOGD {d} is a negative duration")
                if d != 0 and not stored_positive(d):  # stored as float32: 1e-300 would become 0, 1e300 inf
                    raise ValueError(f"FPOGD {d} is not a duration float32 holds (normal, finite)")
                if abs(x) > 1e6 or abs(y) > 1e6:
                    raise ValueError(f"fixation ({x}, {y}) lies on no image")
            except ValueError as exc:
                bad.add(where, str(exc), cid)
                continue
            if d == 0:
                continue
            fid = (row.get("FPOGID") or "").strip()
            if fid and c["last"] == fid and c["fix"]:
                c["fix"][-1] = (x, y, d)  # the same fixation again: its latest, full duration
            else:
                c["fix"].append((x, y, d))
            c["last"] = fid
            if len(c["fix"]) > MAX_FIXATIONS_PER_READING:
                bad.add(where, f"more than {MAX_FIXATIONS_PER_READING:,} fixations on one image", cid)
        out = []
        self._fixations, self._record_labels = {}, {}
        for cid, c in cases.items():
            if cid in bad:
                continue
            image = self.images / c["path"]
            if not image.is_file():
                bad.add(c["where"], f"no image {c['path']} under {self.images}", cid)
                continue
            self._fixations[cid] = np.asarray(c["fix"], np.float64).reshape(-1, 3)
            self._record_labels[cid] = c["labels"]
            out.append(CaseRecord(cid, image, dict(c["labels"]), {}, None, c["where"]))
        return out

    def gaze_readings(self, records, grid):
        """The gaze of ``records`` (the prepared cases, in their gt order, with their sizes) on ``grid``."""
        from xbench.schemas.gaze import DEFAULT_SIGMA_RULE, default_sigma

        readings = {}
        for rec in records:
            sigma = self.sigma if self.sigma is not None else default_sigma(rec.orig_size)
            readings[rec.case_id] = [NativeReading(READER, self._fixations[rec.case_id],
                                                   self._record_labels[rec.case_id], sigma)]
        rule = f"{self.sigma:g} original pixels (--option sigma)" if self.sigma else DEFAULT_SIGMA_RULE
        return gaze_arrays(records, readings, self.classes, grid, rule)

    def describe(self) -> dict:
        return {"split": self.split, **({"sigma": self.sigma} if self.sigma else {})}

    def load_image(self, record: CaseRecord) -> np.ndarray:
        return load_raster(Path(record.image_ref))
