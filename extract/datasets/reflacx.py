"""REFLACX (Bigolin Lanfredi et al., Sci Data 2022; PhysioNet ``reflacx-xray-localization`` 1.0.0): radiologists'
fixations while dictating reports on MIMIC-CXR images, with the ellipses and labels each drew afterwards.

Layout under ``--root`` (the PhysioNet folder; images from a MIMIC-CXR-JPG tree, ``--option images=DIR``)::

    main_data/metadata_phase_1.csv, metadata_phase_2.csv, metadata_phase_3.csv
    main_data/<id>/fixations.csv                  (one reading; absent when its eye tracking was discarded)
    main_data/<id>/anomaly_location_ellipses.csv
    files/pXX/pXXXXXXXX/sXXXXXXXX/<dicom_id>.jpg  (MIMIC-CXR-JPG, under --option images, default --root)

A metadata row is one **reading** (``id``: one radiologist reading one image): ``id, split,
eye_tracking_data_discarded, image, dicom_id, subject_id, image_size_x, image_size_y`` and one column per
label of its phase (phase 1 and phases 2-3 label different findings): the certainty the radiologist chose,
0 (not chosen) to 5 (1 Unlikely, 2 Less likely, 3 Possibly, 4 Suspicious for/Probably, 5 Consistent with),
or True/False for ``Support devices``; ``Quality issue`` and ``Other`` are read and dropped. A reading's
label is present when its certainty reaches ``--option certainty=K`` (default 3, "Possibly or higher", as
the authors count agreement), absent below, not given (-1) for the findings its phase does not label.

``fixations.csv``: one fixation a row, ``x_position, y_position`` in the image's pixels,
``timestamp_start_fixation, timestamp_end_fixation`` in seconds (duration = end - start, > 0) and
``angular_resolution_x/y_pixels_per_degree`` (image pixels per degree of visual angle at that fixation's zoom).
``anomaly_location_ellipses.csv``: one ellipse a row, ``xmin, ymin, xmax, ymax`` (its bounding box, image
pixels), ``certainty`` (1-5) and one True/False column per label it localises.

Cases are images (id = dicom_id): phases 1 and 2 had all five radiologists read each of their images, phase 3
one radiologist each image. A case's label is present when any of its readings labels it present, absent when
a reading labels it and none present, else -1; its region for a class is the union of the ellipses (at the
certainty option) of the readings that labelled it present. Each reading becomes one gaze reading (its
fixations, its labels, its own ellipses as its regions; schemas/gaze.py), named by its reading id since the
release does not say which radiologist read what (in phases 1-2 an image's readings are five different
radiologists). A discarded reading (``eye_tracking_data_discarded``) keeps its labels and ellipses in the
case's ground truth but gives no gaze reading. Sigma (``--option sigma=PX`` overrides): one degree of visual
angle, the median over the reading's fixations of the mean of its two angular resolutions.

Splits: ``all`` (default) and ``train``, ``validate``, ``test`` (the metadata's ``split``, MIMIC-CXR's
official split). ``--option phases=1,2`` keeps only those phases.

Skipped with a problem (the whole case): a malformed metadata row, an unreadable reading file, a non-finite or
absurd number, a non-positive duration, an ellipse box empty or far outside the image, readings of one image
disagreeing on its size or path, a missing image.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from xbench.extract.datasets._gaze_io import (NativeReading, check_dicom_id, check_ellipse_box, ellipse_shape,
                                              gaze_arrays, image_size, mimic_jpg_path)
from xbench.extract.datasets._io import (AnnotationFileError, CSVFile, CaseProblems, check_options, load_raster,
                                         parse_float)
from xbench.extract.datasets.base import CaseRecord, DatasetReader, ReaderError, ReaderOptionError
from xbench.schemas.vocabulary import classes_for, is_ignored, native_labels

LAYOUT = """  main_data/metadata_phase_{1,2,3}.csv
  main_data/<id>/fixations.csv, main_data/<id>/anomaly_location_ellipses.csv
  files/pXX/pXXXXXXXX/sXXXXXXXX/<dicom_id>.jpg   (MIMIC-CXR-JPG; or --option images=DIR)"""
PHASES = (1, 2, 3)
META_COLUMNS = ("id", "split", "eye_tracking_data_discarded", "image", "dicom_id", "subject_id", "image_size_x",
                "image_size_y")
FIXATION_COLUMNS = ("timestamp_start_fixation", "timestamp_end_fixation", "x_position", "y_position",
                    "angular_resolution_x_pixels_per_degree", "angular_resolution_y_pixels_per_degree")
ELLIPSE_COLUMNS = ("xmin", "ymin", "xmax", "ymax", "certainty")
#: labels given as True/False rather than a certainty
BOOLEAN_LABELS = ("Support devices", "Quality issue")
#: a reading id as the release writes it: P<phase><trial, 2+ digits>R<6 digits> (create_main_table.py:83-85)
READING_ID = re.compile(r"P[1-3][0-9]{2,4}R[0-9]{6}")
DEFAULT_CERTAINTY = 3
#: a reading holds a few hundred fixations; more than this in one file is refused
MAX_FIXATIONS = 100_000
MAX_ELLIPSES = 1_000
#: an angular resolution above this many image pixels per degree is not a reading room's
MAX_PIXELS_PER_DEGREE = 2_000.0
SIGMA_RULE = ("one degree of visual angle: per reading, the median over its fixations of the mean of "
              "angular_resolution_x/y_pixels_per_degree (image pixels per degree at that fixation's zoom)")

#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"reflacx": "REFLACXReader"}


def _truth(text: str | None, where: str) -> bool:
    t = (text or "").strip()
    if t in ("True", "true", "1", "1.0"):
        return True
    if t in ("False", "false", "0", "0.0", ""):
        return False
    raise ValueError(f"{where} {text!r} is not True or False")


def _certainty(text: str | None, where: str) -> int:
    """A certainty as written (0-5; empty is 0)."""
    t = (text or "").strip()
    if not t:
        return 0
    v = float(t)
    if not (math.isfinite(v) and v == int(v) and 0 <= v <= 5):
        raise ValueError(f"{where} {text!r} is not a certainty 0..5")
    return int(v)


class REFLACXReader(DatasetReader):
    """Reads REFLACX's metadata, fixations and ellipses, and the MIMIC-CXR-JPG images they name."""

    key = "reflacx"
    classes = classes_for("reflacx")
    splits = ("all", "train", "validate", "test")

    def __init__(self, root, split=None, **options) -> None:
        super().__init__(root, split, **options)
        check_options(self.key, options, {
            "images": "MIMIC-CXR-JPG root holding files/ (default: --root)",
            "certainty": f"the lowest certainty (1-5) that counts a label present and keeps an ellipse "
                         f"(default {DEFAULT_CERTAINTY}, Possibly)",
            "phases": "the phases read, e.g. 1,2 (default 1,2,3)",
            "sigma": "the gaze maps' sigma in original pixels (default: one degree of visual angle)"})
        self.images = Path(options.get("images") or self.root)
        try:
            self.certainty = int(options.get("certainty", DEFAULT_CERTAINTY))
            self.phases = tuple(sorted({int(p) for p in str(options.get("phases", "1,2,3")).split(",")}))
            self.sigma = None if options.get("sigma") in (None, "") else float(options["sigma"])
        except (TypeError, ValueError):
            raise ReaderOptionError(f"reflacx: options certainty and phases must be whole numbers, sigma a number of "
                                    f"pixels; got {options!r}") from None
        from xbench.schemas.gaze import stored_positive

        if not (1 <= self.certainty <= 5 and set(self.phases) <= set(PHASES) and self.phases
                and (self.sigma is None or stored_positive(self.sigma, 10_000))):
            raise ReaderOptionError("reflacx: certainty must lie in 1..5, phases among 1,2,3 and sigma in (0, 10000] "
                                    "pixels (a normal float32, as stored); got "
                                    f"certainty={self.certainty}, phases={self.phases}, sigma={self.sigma}")
        self._labels = {n: c for c in self.classes for n in native_labels(self.key, c)}
        self._readings: dict[str, list[NativeReading]] = {}
        #: every reading of each kept case, discarded eye tracking included (labels and ellipses): the readers'
        #: ceiling (extract/human_reflacx.py)
        self.all_readings: dict[str, list[NativeReading]] = {}

    def given_roots(self) -> list[Path]:
        return [self.root, self.images]

    def _meta_files(self) -> list[tuple[int, Path]]:
        out = []
        for phase in self.phases:
            p = self.root / "main_data" / f"metadata_phase_{phase}.csv"
            if p.exists() and not p.is_dir():
                out.append((phase, p))
        if not out:
            raise ReaderError(f"no REFLACX metadata (main_data/metadata_phase_N.csv) under {self.root}; expected "
                              f"layout:\n{LAYOUT}")
        return out

    def records(self) -> list[CaseRecord]:
        from xbench.schemas.gaze import MAX_READINGS_PER_CASE

        self.problems.clear()
        self._readings, self.all_readings = {}, {}
        bad = CaseProblems(self.problems)
        cases: dict[str, dict] = {}
        for phase, path in self._meta_files():
            reader = CSVFile(path, self.source_roots())
            header = [h.strip() for h in reader.header()]
            missing = [c for c in META_COLUMNS if c not in header]
            if missing:
                raise ReaderError(f"{path}: missing column(s) {', '.join(missing)}")
            label_cols = [c for c in header if c in self._labels]
            unknown = [c for c in header if c not in META_COLUMNS and c not in self._labels and not is_ignored(self.key, c)]
            if unknown:  # a finding we do not know would silently vanish from the ground truth
                raise ReaderError(f"{path}: unknown label column(s) {', '.join(repr(c) for c in unknown)}; REFLACX's "
                                  f"are {', '.join(sorted(self._labels))}")
            for row in reader.dicts(header):
                where = f"{path.name}:{reader.line_num}"
                self._reading(phase, row, where, label_cols, cases, bad)
        out = []
        for cid, c in cases.items():
            if cid in bad:
                self._readings.pop(cid, None)
                continue
            image = self.images / c["path"]
            if not image.is_file():
                bad.add(c["where"], f"no image {c['path']} under {self.images}", cid)
                self._readings.pop(cid, None)
                continue
            if len(c["all"]) > MAX_READINGS_PER_CASE:  # before any gaze map is built for them (issue 44)
                bad.add(c["where"], f"{len(c['all']):,} readings of one image; at most {MAX_READINGS_PER_CASE}", cid)
                self._readings.pop(cid, None)
                continue
            labels = {k: -1 for k in self.classes}
            regions: dict[str, list] = {}
            for nr in c["all"]:
                for k, v in nr.labels.items():
                    labels[k] = max(labels[k], v)
                    if v == 1 and nr.regions.get(k):
                        regions.setdefault(k, []).extend(nr.regions[k])
            self.all_readings[cid] = c["all"]
            out.append(CaseRecord(cid, image, labels, regions, c["size"], c["where"]))
        return out

    def _reading(self, phase: int, row: dict, where: str, label_cols, cases: dict, bad: CaseProblems) -> None:
        rid = (row.get("id") or "").strip()
        try:
            cid = check_dicom_id(row.get("dicom_id") or "")
        except ValueError as exc:
            bad.add(where, str(exc), None)
            return
        if (row.get("split") or "").strip() != self.split and self.split != "all":
            return
        try:
            if not READING_ID.fullmatch(rid) or rid[1] != str(phase):
                raise ValueError(f"reading id {rid!r} is not P{phase}<trial>R<6 digits>")
            rel = mimic_jpg_path(row.get("image") or "", cid)
            size = image_size(row.get("image_size_x") or "", row.get("image_size_y") or "")
            discarded = _truth(row.get("eye_tracking_data_discarded"), "eye_tracking_data_discarded")
            labels = {}
            for col in label_cols:
                cls = self._labels[col]
                v = int(_truth(row[col], col)) if col in BOOLEAN_LABELS else int(_certainty(row[col], col) >= self.certainty)
                labels[cls] = max(labels.get(cls, 0), v)
        except ValueError as exc:
            bad.add(where, str(exc), cid)
            return
        c = cases.setdefault(cid, {"size": size, "path": rel, "where": where, "all": []})
        if c["size"] != size or c["path"] != rel:
            bad.add(where, "readings of this image disagree on its size or path", cid)
            return
        folder = self.root / "main_data" / rid
        try:
            regions = self._ellipses(folder / "anomaly_location_ellipses.csv", size, labels)
            nr = NativeReading(rid, np.zeros((0, 3)), labels, 0.0, regions)
            c["all"].append(nr)
            if not discarded:
                nr.fixations, sigma = self._fixations(folder / "fixations.csv")
                nr.sigma = self.sigma if self.sigma is not None else sigma
                self._readings.setdefault(cid, []).append(nr)
        except (ValueError, AnnotationFileError) as exc:
            bad.add(where, f"reading {rid}: {exc}", cid)

    def _fixations(self, path: Path) -> tuple[np.ndarray, float]:
        from xbench.schemas.gaze import stored_positive

        if not path.is_file():
            raise ValueError(f"no {path.name} in main_data/{path.parent.name} (and the reading is not discarded)")
        reader = CSVFile(path, self.source_roots(), max_rows=MAX_FIXATIONS)
        header = [h.strip() for h in reader.header()]
        missing = [c for c in FIXATION_COLUMNS if c not in header]
        if missing:
            raise ValueError(f"{path.name}: missing column(s) {', '.join(missing)}")
        fix, ppd = [], []
        for row in reader.dicts(header):
            at = f"{path.name}:{reader.line_num}"
            try:
                t0, t1, x, y, rx, ry = (parse_float(row[c] or "") for c in FIXATION_COLUMNS)
            except ValueError as exc:
                raise ValueError(f"{at}: {exc}") from None
            # checked as stored: the duration and the sigma (from rx, ry) are float32 in gt.zarr
            if not stored_positive(t1 - t0):
                raise ValueError(f"{at}: the fixation ends at {t1} s, not after its start {t0} s by a duration "
                                 "float32 holds")
            if not (stored_positive(rx, MAX_PIXELS_PER_DEGREE) and stored_positive(ry, MAX_PIXELS_PER_DEGREE)):
                raise ValueError(f"{at}: angular resolution ({rx}, {ry}) pixels per degree outside (0, "
                                 f"{MAX_PIXELS_PER_DEGREE:g}] (as float32)")
            if abs(x) > 1e6 or abs(y) > 1e6:
                raise ValueError(f"{at}: position ({x}, {y}) is not on any screen")
            fix.append((x, y, t1 - t0))
            ppd.append((rx + ry) / 2)
        if not fix:
            raise ValueError(f"{path.name}: no fixation")
        return np.asarray(fix, np.float64), float(np.median(ppd))

    def _ellipses(self, path: Path, size, labels: dict[str, int]) -> dict[str, list]:
        if not path.is_file():
            return {}
        reader = CSVFile(path, self.source_roots(), max_rows=MAX_ELLIPSES)
        header = [h.strip() for h in reader.header()]
        missing = [c for c in ELLIPSE_COLUMNS if c not in header]
        if missing:
            raise ValueError(f"{path.name}: missing column(s) {', '.join(missing)}")
        cols = [c for c in header if c in self._labels]
        out: dict[str, list] = {}
        for row in reader.dicts(header):
            at = f"{path.name}:{reader.line_num}"
            try:
                box = check_ellipse_box(tuple(parse_float(row[c] or "") for c in ELLIPSE_COLUMNS[:4]), size)
                cert = _certainty(row["certainty"], "certainty")
                marked = [self._labels[c] for c in cols if _truth(row[c], c)]
            except ValueError as exc:
                raise ValueError(f"{at}: {exc}") from None
            if cert < self.certainty:
                continue
            for cls in marked:
                if labels.get(cls) == 1:  # a region only where the reading calls the finding present
                    out.setdefault(cls, []).append(ellipse_shape(box, size))
        return out

    def gaze_readings(self, records, grid):
        """The gaze of ``records`` (the prepared cases, in their gt order) on ``grid`` (schemas/gaze.py)."""
        return gaze_arrays(records, self._readings, self.classes, grid,
                           f"{self.sigma:g} original pixels (--option sigma)" if self.sigma else SIGMA_RULE)

    def describe(self) -> dict:
        return {"split": self.split, "certainty": self.certainty, "phases": list(self.phases),
                **({"sigma": self.sigma} if self.sigma else {})}

    def load_image(self, record: CaseRecord) -> np.ndarray:
        return load_raster(Path(record.image_ref))
