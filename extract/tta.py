"""Test-time augmentation at extraction (``xbench-extract --augment SPEC``; docs/how-to/augmentations.md).

With augmentations ``a_1 .. a_K`` every case is run ``V = K + 1`` times: view 0 is the image as it is, view
k its augmentation by ``a_k``, applied to the pixels the adapter starts from (the stored S x S image, or the
original when the model's loader reads originals) before the model's own preprocessing. What is written:

* scores: the mean over the V views of what the adapter returns (logits averaged as logits, probabilities
  as probabilities);
* maps: each view's map warped back to the original frame (``AugmentSpec.invert_map``), then at each cell
  the mean over the views that kept that cell's point in view (``AugmentSpec.coverage``; view 0 always
  does, so no cell is left without a value and the fill of areas moved out of view never enters the mean).

Seeding (noise): view k of case c of dataset d draws with the seed made of the first 8 bytes (little
endian) of BLAKE2b-64 over ``"xbench-augment\\x1f{seed}\\x1f{d}\\x1f{c}\\x1f{k}\\x1f{spec}"`` (UTF-8), where
``seed`` is ``--augment-seed`` (default 0): a case gets the same noise whatever the batch size, the worker
count, the ranks, the block a resumed run starts at, or the other cases extracted with it.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from xbench.schemas.augment import AugmentSpec, parse_specs
from xbench.schemas.errors import InputError

#: how the views are combined, in words (the provenance records it)
COMBINE = ("scores: mean over the original and augmented views; maps: each view warped back to the original "
           "frame, then the mean over the views that keep the point in view")


def case_seed(seed: int, dataset: str, case_id: str, view: int, spec: str) -> int:
    """The noise seed of one view of one case (module doc): a function of these five values only."""
    text = f"xbench-augment\x1f{int(seed)}\x1f{dataset}\x1f{case_id}\x1f{int(view)}\x1f{spec}"
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class TTA:
    """The augmentations of one run and its seed."""

    specs: tuple[AugmentSpec, ...]
    seed: int = 0

    @classmethod
    def from_options(cls, texts: Sequence[str] | str | None, seed: int = 0) -> "TTA | None":
        """None without augmentations (the run is then exactly the plain one)."""
        specs = parse_specs(texts)
        return cls(tuple(specs), int(seed)) if specs else None

    @property
    def views(self) -> int:
        return len(self.specs) + 1

    def view_images(self, image: np.ndarray, dataset: str, case_id: str) -> list[np.ndarray]:
        """[the image, its augmentation by each spec], uint8 (H, W) each."""
        image = np.asarray(image)
        out = [image]
        for k, spec in enumerate(self.specs, start=1):
            out.append(spec.apply_image(image, seed=case_seed(self.seed, dataset, case_id, k, str(spec))))
        return out

    def combine(self, scores: np.ndarray, maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Scores (V, n, ...) and maps (V, n, ..., h, w), view-major -> their combination (module doc), float32."""
        scores = np.asarray(scores, dtype=np.float64)
        maps = np.asarray(maps, dtype=np.float64)
        if scores.shape[0] != self.views or maps.shape[0] != self.views:
            raise ValueError(f"expected {self.views} views, got {scores.shape[0]} scores and {maps.shape[0]} maps")
        h, w = maps.shape[-2:]
        total = maps[0].copy()
        count = np.ones((h, w))
        for k, spec in enumerate(self.specs, start=1):
            cover = spec.coverage((h, w))
            total += np.where(cover, spec.invert_map(maps[k]).astype(np.float64), 0.0)
            count += cover
        return scores.mean(axis=0).astype(np.float32), (total / count).astype(np.float32)

    def provenance(self) -> dict[str, Any]:
        return {"specs": [str(s) for s in self.specs], "seed": self.seed, "views": self.views, "combine": COMBINE,
                "seeding": "blake2b-64(xbench-augment, seed, dataset, case id, view, spec)"}


class CombinedBlock:
    """A block computed on V views (rows view-major); ``result()`` gives the combination (on the writer thread)."""

    def __init__(self, pending, tta: TTA, n: int) -> None:
        self.pending, self.tta, self.n = pending, tta, n

    @property
    def input_event(self):
        return self.pending.input_event

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        scores, maps = self.pending.result()
        v, n = self.tta.views, self.n
        return self.tta.combine(scores.reshape(v, n, *scores.shape[1:]), maps.reshape(v, n, *maps.shape[1:]))


def check_resume(out: str | os.PathLike, augment: dict | None, overwrite: bool) -> str | None:
    """The problem with resuming ``out`` when it was begun with other augmentations (its blocks would mix
    two definitions), or None. The store's spec digest leaves provenance out, hence this check."""
    from xbench.schemas.store import open_store_group

    if overwrite or not os.path.exists(out):
        return None
    try:
        meta = open_store_group(out, mode="r").attrs.get("xbench", {})
    except Exception:  # noqa: BLE001 - not a readable store: the writer's own checks say what is wrong
        return None
    if not isinstance(meta, dict) or meta.get("kind") != "submission":
        return None
    before = meta.get("augment")
    if (before or None) == (augment or None):
        return None
    was = ", ".join(before.get("specs", [])) if isinstance(before, dict) else "none"
    now = ", ".join(augment["specs"]) if augment else "none"
    return (f"{out}: was begun with augmentations [{was}], this run asks for [{now}]; resume with the same "
            "--augment, or pass --overwrite")


def resolve(cli: Sequence[str] | None, config: dict, seed: int) -> TTA | None:
    """The run's augmentations: ``--augment`` when given, else the model config's ``augment:``."""
    texts = cli if cli else config.get("augment")
    try:
        return TTA.from_options(texts, seed)
    except InputError as e:
        where = "--augment" if cli else "model config augment"
        raise InputError([f"{where}: {p}" for p in (e.problems or [str(e)])]) from None
