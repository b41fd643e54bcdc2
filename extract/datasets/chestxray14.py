"""NIH ChestX-ray14 bounding boxes (Wang et al. 2017): 984 boxes of 8 findings on 880 PNGs.

Layout under ``--root`` (the NIH Box folder or the Kaggle copy)::

    BBox_List_2017.csv                 Image Index,Finding Label,Bbox [x,y,w,h],,,
    Data_Entry_2017_v2020.csv          (or Data_Entry_2017.csv; read only with negatives)
    images/<00000001_000>.png          (images_001..012.tar.gz extract here; the Kaggle
                                        images_0NN/images/ folders are found too)

The bbox header's odd spelling makes named columns useless, so rows are read by position:
image, label, x, y, w, h (trailing empty fields ignored). Box = x,y top-left + w,h in pixels of
the 1024x1024 PNG. 'Infiltrate' (bbox file) and 'Infiltration' (Data_Entry) are one class.

Labels (split ``bbox``). Without negatives: a class with a box is 1, every other class is -1
(the box annotator was not asked about it). ``negatives=True`` reads Data_Entry: on the bbox
images a class without a box becomes 0 when Data_Entry does not list it (it stays -1 when the NLP
labels list it without a box), and every Data_Entry 'No Finding' image is added with all classes
0. ``negatives=N`` (an int) adds N of those images instead, drawn with numpy's default_rng(0).

Skipped with a problem: a short row, non-numeric or outside-the-image box, unknown label, no PNG.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from xbench.extract.datasets._io import (CSVFile, CaseProblems, check_box, check_options, find_first, index_files, load_raster,
                                         native_age, option_bool, parse_float, require_file)
from xbench.extract.datasets.base import Box, CaseRecord, DatasetReader, ReaderError, ReaderOptionError
from xbench.schemas.vocabulary import UnknownLabelError, canonical, classes_for, is_no_finding

LAYOUT = """  BBox_List_2017.csv
  Data_Entry_2017_v2020.csv or Data_Entry_2017.csv   (only for negatives)
  images/<Image Index>.png                            (or images_0NN/images/)"""
SIZE = (1024, 1024)
DATA_ENTRY_NAMES = ("Data_Entry_2017_v2020.csv", "Data_Entry_2017.csv")


#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"chestxray14": "ChestXray14Reader"}


class ChestXray14Reader(DatasetReader):
    """Reads BBox_List_2017.csv (and Data_Entry with ``negatives``) and the PNGs."""

    key = "chestxray14"
    classes = classes_for("chestxray14")
    splits = ("bbox",)

    def __init__(self, root, split=None, **options) -> None:
        super().__init__(root, split, **options)
        check_options(self.key, options, {"negatives": "false (default), true (all Data_Entry 'No Finding' images) or a count N",
                                          "attributes": "false (default) or true: keep Data_Entry's sex, age and view position"})
        self.options["negatives"] = _parse_negatives(options.get("negatives", False))
        try:
            keep = option_bool(self.key, "attributes", options.get("attributes", False))
        except ValueError as exc:
            raise ReaderError(str(exc)) from None
        self.options.pop("attributes", None)
        if keep:  # only then: the stores (and resumable plans) of runs without it are unchanged
            self.options["attributes"] = True

    def records(self) -> list[CaseRecord]:
        self.problems.clear()  # records() may be called again; report each problem once
        bbox_path = require_file(self.root / "BBox_List_2017.csv", "NIH bbox file", LAYOUT)
        images = index_files([self.root], (".png",))
        if not images:
            raise ReaderError(f"no PNG images under {self.root}\nexpected layout:\n{LAYOUT}")
        bad = CaseProblems(self.problems)
        regions: dict[str, dict[str, list[Box]]] = {}
        first_row: dict[str, str] = {}
        reader = CSVFile(bbox_path, self.source_roots())
        reader.header()  # 'Image Index,Finding Label,Bbox [x,y,w,h],,,' : read by position
        for row in reader.rows():
            where = f"{bbox_path.name}:row {reader.line_num}"
            fields = [v.strip() for v in row]
            while fields and not fields[-1]:
                fields.pop()
            if not fields:
                continue
            image = Path(fields[0]).stem
            if len(fields) < 6 or not image:
                bad.add(where, f"expected 6 fields (image, label, x, y, w, h), got {len(fields)}", image or None)
                continue
            first_row.setdefault(image, where)
            try:
                cls = canonical(self.key, fields[1])
            except UnknownLabelError:
                bad.add(where, f"unknown finding label {fields[1]!r}", image)
                continue
            try:
                x, y, w, h = (parse_float(v) for v in fields[2:6])
                box = check_box(Box(x, y, x + w, y + h), *SIZE)
            except ValueError as e:
                bad.add(where, f"bad box {fields[2:6]}: {e}", image)
                continue
            regions.setdefault(image, {}).setdefault(cls, []).append(box)

        negatives = self.options["negatives"]
        entry = self._data_entry() if negatives is True or negatives > 0 else {}
        out: list[CaseRecord] = []
        for image, where in first_row.items():
            if image in bad:
                continue
            if image not in images:
                bad.add(where, f"no image {image}.png under {self.root}", image)
                continue
            listed = entry.get(image)
            labels = {}
            for c in self.classes:
                if c in regions[image]:
                    labels[c] = 1
                elif listed is not None and c not in listed[0]:
                    labels[c] = 0
                else:
                    labels[c] = -1
            out.append(CaseRecord(image, images[image], labels, regions[image], SIZE, where))
        if entry:
            out.extend(self._negatives(entry, set(first_row), images, negatives))
        return out

    def _data_entry(self) -> dict[str, tuple[set[str], str, bool]]:
        """Image -> (canonical classes NLP-listed, source row, is 'No Finding') from Data_Entry."""
        path = find_first(self.root / n for n in DATA_ENTRY_NAMES)
        if path is None:
            raise ReaderError(f"negatives need {' or '.join(str(self.root / n) for n in DATA_ENTRY_NAMES)}\n"
                              f"expected layout under --root:\n{LAYOUT}")
        out: dict[str, tuple[set[str], str, bool]] = {}
        reader = CSVFile(path, self.source_roots())
        header = [h.strip() for h in reader.header()]
        try:
            i_img, i_lab = header.index("Image Index"), header.index("Finding Labels")
        except ValueError:
            raise ReaderError(f"{path}: header lacks 'Image Index' / 'Finding Labels': {header[:4]}") from None
        for row in reader.rows():
            if len(row) <= max(i_img, i_lab):
                continue
            names = [n.strip() for n in row[i_lab].split("|") if n.strip()]
            listed = set()
            for n in names:
                try:
                    listed.add(canonical(self.key, n))
                except UnknownLabelError:
                    pass  # one of the 6 Data_Entry findings without boxes; not a class here
            no_finding = len(names) == 1 and is_no_finding(self.key, names[0])
            out[Path(row[i_img].strip()).stem] = (listed, f"{path.name}:row {reader.line_num}", no_finding)
        return out

    def case_attributes(self, records) -> dict | None:
        """With ``attributes=true``: each record's ``sex`` ("Patient Gender": M/F, another value "O"), ``age``
        ("Patient Age" in years; the original release's "058Y"/"006M"/"010D" forms read too; an age outside
        0..130, as a few rows of the release hold, is missing) and ``view`` ("View Position", upper-cased) from
        Data_Entry; an image Data_Entry does not list gets missing values. None without the option."""
        if not self.options.get("attributes"):
            return None
        from xbench.schemas.attributes import category, number

        rows = self._entry_fields(("Patient Gender", "Patient Age", "View Position"))
        got = [rows.get(r.case_id, ("", "", "")) for r in records]
        sex = [{"M": "M", "F": "F", "": ""}.get(g.strip().upper(), "O") for g, _, _ in got]
        return {"sex": category(sex, "Data_Entry: Patient Gender"),
                "age": number([native_age(a) for _, a, _ in got], "Data_Entry: Patient Age"),
                "view": category([v.strip().upper() for _, _, v in got], "Data_Entry: View Position")}

    def _entry_fields(self, names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
        """Image -> the Data_Entry values of the columns ``names`` (ReaderError when the file or a column lacks)."""
        path = find_first(self.root / n for n in DATA_ENTRY_NAMES)
        if path is None:
            raise ReaderError(f"attributes need {' or '.join(str(self.root / n) for n in DATA_ENTRY_NAMES)}\n"
                              f"expected layout under --root:\n{LAYOUT}")
        reader = CSVFile(path, self.source_roots())
        header = [h.strip() for h in reader.header()]
        missing = [n for n in ("Image Index", *names) if n not in header]
        if missing:
            raise ReaderError(f"{path}: header lacks {', '.join(map(repr, missing))}")
        idx = [header.index(n) for n in ("Image Index", *names)]
        out = {}
        for row in reader.rows():
            if len(row) > max(idx):
                out[Path(row[idx[0]].strip()).stem] = tuple(row[i] for i in idx[1:])
        return out

    def _negatives(self, entry, taken: set[str], images: dict[str, Path], count) -> list[CaseRecord]:
        """All-0 records for Data_Entry 'No Finding' images (not among the bbox images)."""
        chosen = [img for img, (_l, _w, nf) in entry.items() if nf and img not in taken]
        if count is not True and count < len(chosen):
            pick = np.random.default_rng(0).permutation(len(chosen))[:count]
            chosen = [chosen[i] for i in sorted(pick)]
        out = []
        bad = CaseProblems(self.problems)
        for img in chosen:
            where = entry[img][1]
            if img not in images:
                bad.add(where, f"no image {img}.png under {self.root} (a 'No Finding' negative)", img)
                continue
            out.append(CaseRecord(img, images[img], {c: 0 for c in self.classes}, {}, SIZE, where))
        return out

    def load_image(self, record: CaseRecord) -> np.ndarray:
        return load_raster(Path(record.image_ref))


def _parse_negatives(value) -> bool | int:
    """negatives option: bool, a count >= 0, or the CLI strings true/false/all/data_entry/N."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("true", "yes", "all", "data_entry"):
            return True
        if v in ("false", "no", "none"):
            return False
        if v.isdigit():
            return int(v)
    raise ReaderOptionError(f"chestxray14: negatives must be true, false or a count >= 0; got {value!r}")

