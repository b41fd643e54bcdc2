"""SIIM-ACR Pneumothorax Segmentation (Kaggle 2019), train: relative column-major RLE masks.

Layout under ``--root`` (the community mirror of the Kaggle data)::

    stage_2_train.csv                  ImageId,EncodedPixels       (12,047 images), or
    train-rle.csv                      ImageId, EncodedPixels      (stage 1, 10,675 images)
    dicom-images-train/<StudyUID>/<SeriesUID>/<ImageId>.dcm
    dicom-images-test/...              (stage-1 test images, labelled in stage_2_train.csv)

Any ``*.dcm`` under the root is found by its file stem (= ImageId = SOPInstanceUID). When both
CSVs exist, ``stage_2_train.csv`` (the superset) is read unless ``csv="train-rle.csv"``.

RLE (verified on all 3,576 real masks): pairs ``offset length`` where each offset counts from the
end of the previous run (the first from pixel 0), over a flat 1024*1024 array in column-major
order (fill flat, then ``reshape(1024, 1024).T``). ``-1`` (also written `` -1``) is a negative.
Several rows of one image are separate instances: the region is their union.

Skipped with a problem: a malformed RLE (non-integer, odd count, negative offset or length, a run
past the end of the image), an image mixing ``-1`` and masks, a row without ImageId, no DICOM.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from xbench.extract.datasets._io import ATTRIBUTES_OPTION, attributes_option, CSVFile, CaseProblems, check_options, index_files
from xbench.extract.datasets.base import CaseRecord, Mask, ReaderError, ReaderOptionError
from xbench.extract.datasets.dicom import DicomReader, read_dicom
from xbench.schemas.vocabulary import canonical, classes_for

LAYOUT = """  stage_2_train.csv  (ImageId,EncodedPixels)  or  train-rle.csv  (ImageId, EncodedPixels)
  dicom-images-train/<StudyUID>/<SeriesUID>/<ImageId>.dcm   (any *.dcm below the root is found)"""
SIZE = (1024, 1024)
CSV_NAMES = ("stage_2_train.csv", "train-rle.csv")


def parse_rle(text: str, n_pixels: int = SIZE[0] * SIZE[1]) -> np.ndarray | None:
    """Parse one EncodedPixels value into absolute runs (k, 2) int64 [start, end) in flat order.

    Returns None for a negative (``-1``, surrounding spaces ignored). Raises ValueError for an
    empty value, non-integers, an odd number of values, a negative offset or length, or a run
    that ends past ``n_pixels``.
    """
    tokens = text.split()
    if tokens == ["-1"]:
        return None
    if not tokens:
        raise ValueError("empty EncodedPixels (expected -1 or offset/length pairs)")
    try:
        values = np.array([int(t) for t in tokens], dtype=np.int64)
    except ValueError:
        raise ValueError(f"EncodedPixels has a non-integer value: {text.strip()[:60]!r}") from None
    if values.size % 2:
        raise ValueError(f"EncodedPixels has an odd number of values ({values.size})")
    offsets, lengths = values[0::2], values[1::2]
    if (offsets < 0).any() or (lengths < 0).any():
        raise ValueError("EncodedPixels has a negative offset or length")
    # Relative encoding: start_i = sum_{j<i}(offset_j + length_j) + offset_i.
    ends = np.cumsum(offsets + lengths)
    starts = ends - lengths
    if ends[-1] > n_pixels:
        raise ValueError(f"EncodedPixels runs past the end of the {SIZE[0]}x{SIZE[1]} image (to pixel {ends[-1]})")
    return np.stack([starts, ends], axis=1)


def decode_runs(runs: list[np.ndarray], size: tuple[int, int] = SIZE) -> np.ndarray:
    """Union of run lists as an (H, W) bool mask, column-major: fill flat, reshape (W, H), transpose."""
    h, w = size
    flat = np.zeros(h * w, dtype=bool)
    for r in runs:
        for start, end in r:
            flat[start:end] = True
    return flat.reshape(w, h).T


#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"siim_acr": "SIIMACRReader"}


class SIIMACRReader(DicomReader):
    """Reads the SIIM-ACR train RLE file and DICOMs. Option ``csv``: which RLE file to read."""

    key = "siim_acr"
    classes = classes_for("siim_acr")
    splits = ("train",)

    def __init__(self, root, split=None, **options) -> None:
        super().__init__(root, split, **options)
        check_options(self.key, options, {"csv": f"RLE file name, one of {', '.join(CSV_NAMES)} (default: first present)",
                                          "attributes": ATTRIBUTES_OPTION})
        attributes_option(self.key, self.options)
        if options.get("csv") not in (None, *CSV_NAMES):
            raise ReaderOptionError(f"siim_acr: csv must be one of {', '.join(CSV_NAMES)}; got {options['csv']!r}")

    def _csv_path(self) -> Path:
        names = (self.options["csv"],) if self.options.get("csv") else CSV_NAMES
        for name in names:
            if (self.root / name).exists() and not (self.root / name).is_dir():  # a FIFO: refused when read
                return self.root / name
        raise ReaderError(f"SIIM RLE file not found: expected {' or '.join(str(self.root / n) for n in names)}\n"
                          f"expected layout under --root:\n{LAYOUT}")

    def describe(self) -> dict:
        return {**super().describe(), "csv": self._csv_path().name}

    def records(self) -> list[CaseRecord]:
        self.problems.clear()  # records() may be called again; report each problem once
        csv_path = self._csv_path()
        images = index_files([self.root], (".dcm",))
        cls = canonical(self.key, "Pneumothorax")
        bad = CaseProblems(self.problems)
        runs: dict[str, list[np.ndarray]] = {}
        negative: dict[str, bool] = {}
        first_row: dict[str, str] = {}
        reader = CSVFile(csv_path, self.source_roots())
        header = [h.strip() for h in reader.header()]
        if header[:2] != ["ImageId", "EncodedPixels"]:
            raise ReaderError(f"{csv_path}: header {header!r}; expected 'ImageId,EncodedPixels' "
                              "(a space after the comma is accepted)")
        for row in reader.rows():
            where = f"{csv_path.name}:row {reader.line_num}"
            if not row or not "".join(row).strip():
                continue
            image_id = row[0].strip()
            if not image_id or len(row) < 2:
                bad.add(where, "row needs ImageId and EncodedPixels", image_id or None)
                continue
            first_row.setdefault(image_id, where)
            try:
                r = parse_rle(row[1])
            except ValueError as e:
                bad.add(where, str(e), image_id)
                continue
            if r is None:
                negative[image_id] = True
            else:
                runs.setdefault(image_id, []).append(r)

        out: list[CaseRecord] = []
        for image_id, where in first_row.items():
            if image_id in bad:
                continue
            is_pos = image_id in runs
            if is_pos and negative.get(image_id):
                bad.add(where, "image has both -1 and mask rows", image_id)
                continue
            if image_id not in images:
                bad.add(where, f"no DICOM named {image_id}.dcm under {self.root}", image_id)
                continue
            regions = {}
            if is_pos:
                regions[cls] = [Mask(load=_MaskLoader(runs[image_id]))]
            out.append(CaseRecord(image_id, images[image_id], {cls: int(is_pos)}, regions, SIZE, where))
        return out

    def load_image(self, record: CaseRecord) -> np.ndarray:
        return read_dicom(Path(record.image_ref))


class _MaskLoader:
    """Picklable callable (records travel to worker processes) that decodes the union of runs."""

    def __init__(self, runs: list[np.ndarray]) -> None:
        self.runs = runs

    def __call__(self) -> np.ndarray:
        return decode_runs(self.runs)
