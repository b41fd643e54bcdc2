"""ChestX-Det10 (Liu, Lian, Yu 2020): xyxy boxes of 10 findings on 1024x1024 PNGs.

Layout under ``--root`` (the GitHub repository's JSONs next to the unzipped image archives)::

    train.json, test.json      [{"file_name": "36204.png", "syms": ["Nodule"], "boxes": [[x1,y1,x2,y2]]}, ...]
    train_data/<file_name>     (from train_data.zip)
    test_data/<file_name>      (from test_data.zip)

Images are found by file name anywhere below the root, preferring ``<split>_data/``. Splits:
``test`` (542 images, default) and ``train`` (3,001). ``syms[i]`` names ``boxes[i]``; an item with
``"syms": []`` is a no-finding image (all classes 0). Every class is labelled: 1 if boxed, else 0.
Case id = the file name without its extension.

Skipped with a problem: a malformed item (lengths of syms and boxes differ, a box that is not four
numbers), an unknown sym, a box outside the 1024x1024 image, a file name listed twice, no PNG.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from xbench.extract.datasets._io import CaseProblems, check_box, check_options, index_files, load_raster, read_json, require_file
from xbench.extract.datasets.base import Box, CaseRecord, DatasetReader
from xbench.schemas.vocabulary import UnknownLabelError, canonical, classes_for

LAYOUT = """  train.json, test.json
  train_data/<file_name>.png, test_data/<file_name>.png   (the unzipped image archives)"""
SIZE = (1024, 1024)


#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"chestx_det10": "ChestXDet10Reader"}


class ChestXDet10Reader(DatasetReader):
    """Reads ``<split>.json`` and the PNGs; every class is labelled 0/1 on every image."""

    key = "chestx_det10"
    classes = classes_for("chestx_det10")
    splits = ("test", "train")

    def __init__(self, root, split=None, **options) -> None:
        super().__init__(root, split, **options)
        check_options(self.key, options, {})

    def records(self) -> list[CaseRecord]:
        self.problems.clear()  # records() may be called again; report each problem once
        json_path = require_file(self.root / f"{self.split}.json", f"ChestX-Det10 {self.split} annotations", LAYOUT)
        items = read_json(json_path, list, "a JSON list of {file_name, syms, boxes} items", self.source_roots())
        # The split's own folder first, so a name present in both archives resolves to this split.
        index = index_files([self.root / f"{self.split}_data"], (".png",))
        for stem, p in index_files([self.root], (".png",)).items():
            index.setdefault(stem, p)

        bad = CaseProblems(self.problems)
        parsed: dict[str, CaseRecord] = {}
        for i, item in enumerate(items):
            where = f"{json_path.name}:item {i}"
            name = item.get("file_name") if isinstance(item, dict) else None
            if not isinstance(name, str) or not name.strip():
                bad.add(where, "item has no file_name", None)
                continue
            case_id = Path(name.strip()).stem
            if case_id in parsed or case_id in bad:
                bad.add(where, f"file_name {name!r} is listed more than once", case_id)
                continue
            try:
                regions = self._regions(item)
            except ValueError as e:
                bad.add(where, str(e), case_id)
                continue
            if case_id not in index:
                bad.add(where, f"no image {name} under {self.root}", case_id)
                continue
            labels = {c: int(c in regions) for c in self.classes}
            parsed[case_id] = CaseRecord(case_id, index[case_id], labels, regions, SIZE, where)
        return [r for cid, r in parsed.items() if cid not in bad]

    def _regions(self, item: dict) -> dict[str, list[Box]]:
        syms, boxes = item.get("syms"), item.get("boxes")
        if not isinstance(syms, list) or not isinstance(boxes, list):
            raise ValueError("syms and boxes must both be lists")
        if len(syms) != len(boxes):
            raise ValueError(f"{len(syms)} syms but {len(boxes)} boxes")
        regions: dict[str, list[Box]] = {}
        for sym, b in zip(syms, boxes):
            try:
                cls = canonical(self.key, sym)
            except (UnknownLabelError, TypeError):
                raise ValueError(f"unknown sym {sym!r}") from None
            if not (isinstance(b, list) and len(b) == 4 and all(isinstance(v, (int, float)) for v in b)):
                raise ValueError(f"box {b!r} is not [x1, y1, x2, y2]")
            regions.setdefault(cls, []).append(check_box(Box(*map(float, b)), *SIZE))
        return regions

    def load_image(self, record: CaseRecord) -> np.ndarray:
        return load_raster(Path(record.image_ref))
