"""COCO run-length encoding (pycocotools' layout), decoded in pure Python: one decoder for the CheXlocalize reader
(extract/datasets/chexlocalize.py) and xbench-convert's masks (schemas/convert_masks.py)."""
from __future__ import annotations

import numpy as np


def rle_counts(counts: str) -> list[int]:
    """The runs of pycocotools' compressed RLE string (6 bits a character from '0', 0x20 = more follows, 0x10 =
    negative in the last character; from the third run on, each is a difference to the run two before).
    Raises ValueError for a character outside the alphabet or a string ending inside a number."""
    runs: list[int] = []
    p, n = 0, len(counts)
    while p < n:
        x = k = 0
        more = True
        while more:
            if p >= n:
                raise ValueError("RLE counts string ends inside a number")
            c = ord(counts[p]) - 48
            if not 0 <= c < 64:
                raise ValueError(f"RLE counts has a character outside the COCO alphabet: {counts[p]!r}")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if k > 13:  # 65 bits: no run of an image is that long
                raise ValueError("RLE counts hold a run longer than any image")
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(runs) > 2:
            x += runs[-2]
        runs.append(x)
    return runs


def rle_mask(runs: list[int], size: tuple[int, int]) -> np.ndarray:
    """The (h, w) bool mask of RLE ``runs`` (checked to sum to h·w): column-major, starting with a run of 0s."""
    h, w = size
    flat = np.repeat(np.arange(len(runs)) % 2 == 1, np.asarray(runs, dtype=np.int64))
    return flat.reshape(w, h).T
