"""CheXlocalize (Saporta et al. 2022): COCO-RLE segmentations of 10 tasks on CheXpert val/test.

Layout under ``--root`` (the Stanford AIMI download)::

    CheXpert/val_labels.csv                  Path,Sex,Age,Frontal/Lateral,AP/PA,No Finding,...
    CheXpert/val/<patient>/<study>/<view>.jpg
    CheXpert/test_labels.csv, CheXpert/test/...
    CheXlocalize/gt_segmentations_val.json   {cxr_id: {"<Pathology>": {"size": [h, w], "counts": "..."}}}
    CheXlocalize/gt_segmentations_test.json

Splits ``val`` (234 CXRs, default) and ``test`` (668). One case per CSV row; cxr_id is the last
three parts of ``Path`` joined by ``_`` without the extension (``patient64541_study1_view1_frontal``).

Labels come from the CSV's 13 CheXpert task columns: 1.0 -> 1, 0.0 -> 0, and -1.0 (uncertain) or
an empty cell -> -1 (not scored; the val/test labels are radiologist labels and should have
neither). Regions: the 10 segmented tasks (``grounding_classes``) from the segmentation JSON, a
non-empty mask being the region; an all-zero mask is no region. A non-empty mask forces the label
to 1 (the radiologist drew it). Pneumonia, Pleural other and Fracture are recognition-only.

The COCO RLE ``counts`` string is validated before pycocotools decodes it (pycocotools itself
accepts garbage and returns a wrong mask): run lengths must be non-negative and sum to h*w.

Skipped with a problem: a segmentation for a cxr_id not in the CSV, an unknown pathology key,
a malformed RLE, masks of one CXR with different sizes, a bad label value, no JPG.
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath

import numpy as np

from xbench.extract.datasets._io import (MAX_IMAGE_PIXELS, CSVFile, CaseProblems, attributes_option, check_options, find_first,
                                         load_raster, native_age, read_json)
from xbench.extract.datasets.base import CaseRecord, DatasetReader, Mask, ReaderError, ReaderOptionError
from xbench.schemas.rle import rle_counts as coco_counts  # the one COCO RLE decoder
from xbench.schemas.vocabulary import UnknownLabelError, canonical, classes_for, grounding_classes_for, native_labels

LAYOUT = """  CheXpert/<split>_labels.csv, CheXpert/<split>/<patient>/<study>/<view>.jpg
  CheXlocalize/gt_segmentations_<split>.json"""
_LABEL_VALUES = {"1": 1, "1.0": 1, "0": 0, "0.0": 0, "-1": -1, "-1.0": -1, "": -1}
#: the labels CSV's columns kept as case attributes (with attributes=true), where the file has them
NATIVE_COLUMNS = ("Sex", "Age", "AP/PA", "Frontal/Lateral")
#: field -> column of CheXpert's demographics file (``demographics=PATH``; the Stanford AIMI release is a
#: spreadsheet: save its sheet as CSV)
DEMOGRAPHIC_COLUMNS = {"sex": "GENDER", "age": "AGE_AT_CXR", "race": "PRIMARY_RACE", "ethnicity": "ETHNICITY"}


def _sex(text: str) -> str:
    t = text.strip().upper()
    return {"MALE": "M", "M": "M", "FEMALE": "F", "F": "F", "": "", "UNKNOWN": ""}.get(t, "O")


def _view(ap_pa: str, frontal_lateral: str) -> str:
    if ap_pa.strip():
        return ap_pa.strip().upper()[:64]
    return "LATERAL" if frontal_lateral.strip().upper() == "LATERAL" else ""


def rle_area(rle: dict) -> tuple[tuple[int, int], int]:
    """Validate a COCO RLE dict {"size": [h, w], "counts": str}; return ((h, w), foreground area).

    Raises ValueError when size is not two positive ints, counts is not a string, a run is
    negative, or the runs do not cover exactly h*w pixels.
    """
    if not isinstance(rle, dict) or "size" not in rle or "counts" not in rle:
        raise ValueError("segmentation is not a {size, counts} RLE object")
    size = rle["size"]
    if not (isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size)):
        raise ValueError(f"RLE size {size!r} is not [height, width]")
    if not isinstance(rle["counts"], str):
        raise ValueError("RLE counts is not a compressed string")
    runs = coco_counts(rle["counts"])
    if any(r < 0 for r in runs):
        raise ValueError("RLE has a negative run length")
    h, w = size
    if h * w > MAX_IMAGE_PIXELS:  # pycocotools would allocate h * w bytes before anything else
        raise ValueError(f"RLE size {w}x{h} exceeds {MAX_IMAGE_PIXELS:,} pixels")
    if sum(runs) != h * w:
        raise ValueError(f"RLE runs cover {sum(runs)} pixels, not {h}x{w}={h * w}")
    return (h, w), sum(runs[1::2])


class _RLEMask:
    """Picklable loader of one validated COCO RLE: (H, W) bool."""

    def __init__(self, rle: dict) -> None:
        self.rle = {"size": list(rle["size"]), "counts": rle["counts"]}

    def __call__(self) -> np.ndarray:
        import warnings

        from pycocotools import mask as coco_mask

        rle = {"size": self.rle["size"], "counts": self.rle["counts"].encode("ascii")}
        with warnings.catch_warnings():
            # pycocotools 2.0.x calls np.array(copy=False) internally; harmless under numpy 2.
            warnings.simplefilter("ignore", DeprecationWarning)
            return coco_mask.decode(rle).astype(bool)


#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"chexlocalize": "CheXlocalizeReader"}


class CheXlocalizeReader(DatasetReader):
    """Reads CheXpert labels (13 tasks) and CheXlocalize GT segmentations (10 tasks)."""

    key = "chexlocalize"
    classes = classes_for("chexlocalize")
    grounding_classes = grounding_classes_for("chexlocalize")
    splits = ("test", "val")  # the first is the default: the evaluation split (the paper reports test)
    _native_columns: tuple[str, ...] = ()  # the labels CSV's NATIVE_COLUMNS, known once records() has read it

    def __init__(self, root, split=None, **options) -> None:
        super().__init__(root, split, **options)
        check_options(self.key, options, {
            "attributes": "false (default) or true: keep the labels CSV's Sex, Age and view (Frontal/Lateral, AP/PA)",
            "demographics": "PATH: a CSV of CheXpert's demographics (PATIENT and any of GENDER, AGE_AT_CXR, "
                            "PRIMARY_RACE, ETHNICITY); implies attributes=true"})
        demographics = self.options.pop("demographics", None)
        attributes_option(self.key, self.options)
        if demographics is not None:
            if not str(demographics).strip():
                raise ReaderOptionError(f"{self.key}: option demographics needs the path of a CSV file")
            self.options["attributes"] = True
            self.options["demographics"] = str(demographics)
        self._native: dict[str, tuple[str, str, str, str]] = {}

    def given_roots(self) -> list[Path]:
        return [self.root, Path(self.options["demographics"])] if self.options.get("demographics") else [self.root]

    def _find(self, *names: str) -> Path:
        path = find_first(p for n in names for p in (self.root / n, self.root / Path(n).name))
        if path is None:
            raise ReaderError(f"CheXlocalize file not found: expected {self.root / names[0]}\n"
                              f"expected layout under --root:\n{LAYOUT}")
        return path

    def records(self) -> list[CaseRecord]:
        self.problems.clear()  # records() may be called again; report each problem once
        csv_path = self._find(f"CheXpert/{self.split}_labels.csv")
        seg_path = self._find(f"CheXlocalize/gt_segmentations_{self.split}.json")
        image_dir = self.root / "CheXpert" / self.split
        if not image_dir.is_dir():
            image_dir = self.root / self.split
        bad = CaseProblems(self.problems)
        cases = self._read_csv(csv_path, image_dir, bad)
        segs = read_json(seg_path, dict, "an object keyed by cxr_id", self.source_roots())
        for cxr_id, tasks in segs.items():
            where = f"{seg_path.name}:{cxr_id}"
            if cxr_id not in cases:
                bad.add(where, f"segmentation for {cxr_id!r}, which is not in {csv_path.name}", cxr_id)
                continue
            try:
                self._add_regions(cases[cxr_id], tasks)
            except ValueError as e:
                bad.add(where, str(e), cxr_id)
        out = []
        for cxr_id, record in cases.items():
            if cxr_id in bad:
                continue
            if not Path(record.image_ref).is_file():
                bad.add(record.source, f"no image {record.image_ref}", cxr_id)
                continue
            out.append(record)
        return out

    def _read_csv(self, csv_path: Path, image_dir: Path, bad: CaseProblems) -> dict[str, CaseRecord]:
        cases: dict[str, CaseRecord] = {}
        reader = CSVFile(csv_path, self.source_roots())
        fields = [h.strip() for h in reader.header()]
        path_col = next((c for c in ("Path", "Study") if c in fields), None)
        columns = {}
        for cls in self.classes:
            col = next((n for n in native_labels(self.key, cls) if n in fields), None)
            if col is None:
                raise ReaderError(f"{csv_path}: no column for {cls!r} "
                                  f"(expected one of {native_labels(self.key, cls)})")
            columns[cls] = col
        if path_col is None:
            raise ReaderError(f"{csv_path}: no 'Path' column")
        for row in reader.dicts(fields):
            where = f"{csv_path.name}:row {reader.line_num}"
            parts = PurePosixPath((row[path_col] or "").strip().replace("\\", "/")).parts
            if len(parts) < 3:
                bad.add(where, f"Path {row[path_col]!r} is not <patient>/<study>/<view>.jpg", None)
                continue
            patient, study, view = parts[-3], parts[-2], parts[-1]
            cxr_id = f"{patient}_{study}_{PurePosixPath(view).stem}"
            if cxr_id in cases:
                bad.add(where, f"{cxr_id} is listed more than once", cxr_id)
                continue
            labels = {}
            for cls, col in columns.items():
                value = (row[col] or "").strip()
                if value not in _LABEL_VALUES:
                    bad.add(where, f"column {col!r} has value {value!r}; expected 1.0, 0.0, -1.0 or empty", cxr_id)
                    break
                labels[cls] = _LABEL_VALUES[value]
            cases[cxr_id] = CaseRecord(cxr_id, image_dir / patient / study / view, labels, {}, None, where)
            self._native[cxr_id] = (patient, *((row.get(c) or "").strip() for c in NATIVE_COLUMNS))
        self._native_columns = tuple(c for c in NATIVE_COLUMNS if c in fields)
        return cases

    def case_attributes(self, records) -> dict | None:
        """With ``attributes=true`` (or ``demographics=PATH``): the case attributes the files carry, for
        ``records`` in order; None without the option.

        From the labels CSV, where it has the column: ``sex`` (Sex: Male -> "M", Female -> "F", Unknown or empty
        -> missing, another value "O"), ``age`` (Age, years; outside 0..130 missing), ``view`` (AP/PA upper-cased;
        empty there and Frontal/Lateral "Lateral" -> "LATERAL"). From ``demographics`` (CheXpert's demographics,
        one row per patient, matched on PATIENT = the patient folder, e.g. ``patient64541``): ``race``
        (PRIMARY_RACE) and ``ethnicity`` (ETHNICITY) as the file writes them, and ``sex`` (GENDER) and ``age``
        (AGE_AT_CXR) only where the labels CSV has no Sex / Age column. A case whose patient the file does not
        list gets missing values; nothing is guessed."""
        if not self.options.get("attributes"):
            return None
        from xbench.schemas.attributes import category, number

        native = [self._native.get(r.case_id, ("", "", "", "", "")) for r in records]
        cols = self._native_columns
        out = {}
        if "Sex" in cols:
            out["sex"] = category([_sex(n[1]) for n in native], f"{self.split}_labels.csv: Sex")
        if "Age" in cols:
            out["age"] = number([native_age(n[2]) for n in native], f"{self.split}_labels.csv: Age")
        if "AP/PA" in cols or "Frontal/Lateral" in cols:
            out["view"] = category([_view(n[3], n[4]) for n in native], f"{self.split}_labels.csv: AP/PA, Frontal/Lateral")
        if self.options.get("demographics"):
            out.update(self._demographics([n[0] for n in native], skip=set(out)))
        return out

    def _demographics(self, patients: list[str], skip: set[str]) -> dict:
        """The fields of the user's demographics CSV for ``patients`` (one per case, in order)."""
        from xbench.schemas.attributes import category, number

        path = Path(self.options["demographics"])
        if not path.is_file():
            raise ReaderError(f"{self.key}: demographics file {path} not found (a CSV with a PATIENT column)")
        reader = CSVFile(path, ())
        header = [h.strip() for h in reader.header()]
        if "PATIENT" not in header:
            raise ReaderError(f"{path}: header lacks 'PATIENT' (expected PATIENT and any of "
                              f"{', '.join(DEMOGRAPHIC_COLUMNS)})")
        wanted = {f: c for f, c in DEMOGRAPHIC_COLUMNS.items() if c in header and f not in skip}
        rows: dict[str, dict] = {}
        for row in reader.dicts(header):
            key = (row.get("PATIENT") or "").strip()
            if key in rows:
                raise ReaderError(f"{path}:row {reader.line_num}: patient {key!r} is listed more than once")
            rows[key] = row
        got = [rows.get(p, {}) for p in patients]
        out = {}
        for field, col in wanted.items():
            values = [(g.get(col) or "").strip() for g in got]
            where = f"{path.name}: {col}"
            if field == "age":
                out[field] = number([native_age(v) for v in values], where)
            elif field == "sex":
                out[field] = category([_sex(v) for v in values], where)
            else:
                out[field] = category([v[:64] for v in values], where)
        return out

    def _add_regions(self, record: CaseRecord, tasks) -> None:
        if not isinstance(tasks, dict):
            raise ValueError("entry is not an object of pathology -> RLE")
        sizes = set()
        regions = {}
        for name, rle in tasks.items():
            if name == "img_size":  # present in the polygon JSONs; tolerated here
                continue
            try:
                cls = canonical(self.key, name)
            except UnknownLabelError:
                raise ValueError(f"unknown pathology key {name!r}") from None
            if cls not in self.grounding_classes:
                raise ValueError(f"pathology {name!r} is not one of the segmented tasks")
            size, area = rle_area(rle)
            sizes.add(size)
            if area > 0:
                regions[cls] = [Mask(load=_RLEMask(rle))]
        if len(sizes) > 1:
            raise ValueError(f"masks of one CXR have different sizes {sorted(sizes)}")
        record.regions = regions
        for cls in regions:
            record.labels[cls] = 1
        record.orig_size = sizes.pop() if sizes else None

    def load_image(self, record: CaseRecord) -> np.ndarray:
        return load_raster(Path(record.image_ref))
