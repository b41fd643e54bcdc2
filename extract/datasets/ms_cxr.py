"""MS-CXR (Boecking et al., ECCV 2022; PhysioNet ``ms-cxr``): radiologist phrases with boxes on MIMIC-CXR.

Layout under ``--root`` (the PhysioNet ms-cxr folder next to, or holding, MIMIC-CXR-JPG)::

    MS_CXR_Local_Alignment_v1.1.0.csv   (or ..._v1.0.0.csv, which has no ``split`` column)
    files/pXX/pXXXXXXXX/sXXXXXXXX/<dicom_id>.jpg   (MIMIC-CXR-JPG; ``--option images=DIR`` elsewhere)

CSV columns: ``dicom_id, category_name, label_text, path, x, y, w, h, image_width, image_height``
(+ ``split`` in v1.1.0: train / val / test). One row per box; the rows sharing (dicom_id,
category_name, label_text) are one phrase, its region the union of their boxes (xywh in original
pixels). Each image is one case (id = dicom_id); each phrase is one phrase row (contract §Phrase rows).
Class labels: 1 for every category that has a phrase on the image, -1 (not annotated) for the others,
since MS-CXR annotates only the phrases it picked; the class region is the union of that category's
phrase boxes. So class-level grounding works and recognition metrics are null.

Splits: ``test`` (default), ``val``, ``train`` (v1.1.0's ``split`` column) and ``all`` (every row; the
only split of v1.0.0). The image is ``<images>/<path>`` (the CSV's ``path``, relative to the
MIMIC-CXR-JPG root); the study folder cannot be derived from the dicom_id alone, so a missing file
skips the case with a problem.

Skipped with a problem: a row with a missing or non-numeric field, an unknown category, a box outside
the image, rows of one image disagreeing on its size or path, a missing image file.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from xbench.extract.datasets._io import CSVFile, CaseProblems, check_box, check_options, load_raster, parse_float
from xbench.extract.datasets.base import Box, CaseRecord, DatasetReader, Phrase, ReaderError
from xbench.schemas.vocabulary import UnknownLabelError, canonical, classes_for

LAYOUT = """  MS_CXR_Local_Alignment_v1.1.0.csv (or _v1.0.0.csv)
  files/pXX/pXXXXXXXX/sXXXXXXXX/<dicom_id>.jpg   (MIMIC-CXR-JPG; or --option images=DIR)"""
CSV_NAMES = ("MS_CXR_Local_Alignment_v1.1.0.csv", "MS_CXR_Local_Alignment_v1.0.0.csv")
#: MS-CXR's category_name values (their canonical classes: extract/datasets/findings.toml)
CATEGORIES = ("Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Lung Opacity", "Pleural Effusion",
              "Pneumonia", "Pneumothorax")
COLUMNS = ("dicom_id", "category_name", "label_text", "path", "x", "y", "w", "h", "image_width", "image_height")


#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"ms_cxr": "MSCXRReader"}


class MSCXRReader(DatasetReader):
    """Reads the MS-CXR local-alignment CSV and the MIMIC-CXR-JPG images it points at."""

    key = "ms_cxr"
    classes = classes_for("ms_cxr")
    splits = ("test", "val", "train", "all")

    def __init__(self, root, split=None, **options) -> None:
        super().__init__(root, split, **options)
        check_options(self.key, options, {"images": "MIMIC-CXR-JPG root holding files/ (default: --root)",
                                          "csv": "the local-alignment CSV (default: the newest under --root)"})
        self.images = Path(options.get("images") or self.root)

    def given_roots(self) -> list[Path]:
        given = [self.root, self.images]
        return given + [Path(self.options["csv"])] if self.options.get("csv") else given

    def _csv(self) -> Path:
        if self.options.get("csv"):
            p = Path(self.options["csv"])
            if not p.exists() or p.is_dir():
                raise ReaderError(f"no MS-CXR CSV at {p}")
            return p
        for name in CSV_NAMES:
            if (self.root / name).exists() and not (self.root / name).is_dir():  # a FIFO: refused when read
                return self.root / name
        raise ReaderError(f"no MS-CXR CSV ({' or '.join(CSV_NAMES)}) under {self.root}; expected layout:\n{LAYOUT}")

    def records(self) -> list[CaseRecord]:
        self.problems.clear()
        path = self._csv()
        reader = CSVFile(path, self.source_roots())
        header = [h.strip() for h in reader.header()]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise ReaderError(f"{path.name}: missing column(s) {', '.join(missing)}")
        has_split = "split" in header
        if not has_split and self.split != "all":
            raise ReaderError(f"{path.name} has no split column (MS-CXR v1.0.0); use --split all")
        rows = [(reader.line_num, row) for row in reader.dicts(header)]
        bad = CaseProblems(self.problems)
        cases: dict[str, dict] = {}
        for i, row in rows:  # i: the row's line in the file
            where = f"{path.name}:{i}"
            if has_split and self.split != "all" and (row.get("split") or "").strip() != self.split:
                continue
            cid = (row.get("dicom_id") or "").strip()
            if not cid:
                bad.add(where, "empty dicom_id", None)
                continue
            try:
                cat = canonical(self.key, (row["category_name"] or "").strip())
            except (UnknownLabelError, KeyError):
                bad.add(where, f"unknown category_name {row['category_name']!r} (MS-CXR has {', '.join(CATEGORIES)})", cid)
                continue
            text = " ".join((row.get("label_text") or "").split())
            try:
                x, y, w, h = (parse_float(row[k]) for k in ("x", "y", "w", "h"))
                size = (int(parse_float(row["image_height"])), int(parse_float(row["image_width"])))
                box = check_box(Box(x, y, x + w, y + h), *size)
            except (ValueError, TypeError) as exc:
                bad.add(where, str(exc), cid)
                continue
            if not text:
                bad.add(where, "empty label_text", cid)
                continue
            c = cases.setdefault(cid, {"size": size, "path": (row.get("path") or "").strip(), "phrases": {}, "where": where})
            if c["size"] != size or c["path"] != (row.get("path") or "").strip():
                bad.add(where, "rows of this image disagree on its size or path", cid)
                continue
            c["phrases"].setdefault((cat, text), []).append(box)
        out = []
        for cid, c in cases.items():
            if cid in bad:
                continue
            image = self.images / c["path"]
            if not c["path"] or not image.is_file():
                bad.add(c["where"], f"no image {c['path'] or cid} under {self.images}", cid)
                continue
            phrases = [Phrase(text, cat, tuple(boxes)) for (cat, text), boxes in c["phrases"].items()]
            regions: dict[str, list] = {}
            for ph in phrases:
                regions.setdefault(ph.category, []).extend(ph.shapes)
            labels = {k: (1 if k in regions else -1) for k in self.classes}
            out.append(CaseRecord(cid, image, labels, regions, c["size"], c["where"], phrases=phrases))
        return out

    def load_image(self, record: CaseRecord) -> np.ndarray:
        return load_raster(Path(record.image_ref))
