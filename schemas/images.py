"""images.zarr: the public images — case ids and preprocessed images, no labels.

Layout (contract §images.zarr)::

    /                  attrs: xbench = {kind: "images", schema: 1, ...}
    /<dataset>/        attrs: classes = [...] (canonical finding names, column order)
        case_id    (N,)       string
        image      (N, S, S)  uint8  (whole image stretched to S x S, brighter = denser)
        orig_size  (N, 2)     int32  (height, width)

:class:`ImagesWriter` writes one dataset group block by block and resumes after a crash;
preparing a dataset again replaces only its own group.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import zarr

from . import _blocks
from .errors import InvalidStoreError, Problem
from .store import (
    MAX_CASES,
    MAX_IMAGE_SIDE,
    check_array,
    consolidate,
    ensure_root,
    describe_missing,
    get_array,
    missing_chunks,
    open_for_validation,
    open_store_group,
    read_strings,
    stored_problems,
)


@dataclass
class ImagesDataset:
    name: str
    classes: tuple[str, ...]
    case_id: np.ndarray
    image: zarr.Array
    orig_size: np.ndarray
    attrs: dict = field(default_factory=dict)


@dataclass
class ImagesStore:
    path: Path
    attrs: dict
    datasets: dict[str, ImagesDataset]


class ImagesWriter:
    """Writes one dataset group of an images store, block by block, resumably.

    Creating a writer for a dataset whose group is unfinished and was started with the same
    case ids, classes, sizes and attributes resumes it (``blocks_todo`` lists what is left); anything else
    replaces the group. Other dataset groups of the store are never touched.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        dataset: str,
        *,
        case_ids: Sequence[str],
        classes: Sequence[str],
        image_size: int = 512,
        cases_per_block: int = 32,
        attrs: Mapping | None = None,
    ) -> None:
        self.path = Path(path)
        self.dataset = dataset
        case_ids = np.asarray(case_ids, dtype=str)
        if len(set(case_ids.tolist())) != len(case_ids) or len(case_ids) == 0:
            raise InvalidStoreError(Problem(f"images {dataset}", "case_ids must be non-empty and unique"))
        if not 1 <= image_size <= MAX_IMAGE_SIDE:
            raise InvalidStoreError(Problem(f"images {dataset}", f"image_size must be in 1..{MAX_IMAGE_SIDE}"))
        self.n = len(case_ids)
        self.cases_per_block = cases_per_block
        spec = _blocks.spec_digest(
            {"case_ids": _blocks.strings_digest(case_ids), "classes": list(classes), "size": image_size,
             "cpb": cases_per_block, "attrs": dict(attrs or {})}
        )
        root = ensure_root(self.path, "images")
        if dataset in root:
            existing = root[dataset]
            if _blocks.is_incomplete(existing) and existing.attrs.get(_blocks.SPEC_ATTR) == spec:
                self._group = existing
                return
            shutil.rmtree(self.path / dataset)
        g = root.create_group(dataset, attributes={"classes": list(classes), **dict(attrs or {}), _blocks.SPEC_ATTR: spec})
        ids = g.create_array("case_id", shape=(self.n,), dtype=str, chunks=(self.n,), dimension_names=("case",))
        ids[:] = case_ids
        _blocks.create_row_array(g, "image", shape=(self.n, image_size, image_size), cases_per_block=cases_per_block, dtype="uint8", fill_value=0, dims=("case", "y", "x"))
        _blocks.create_row_array(g, "orig_size", shape=(self.n, 2), cases_per_block=cases_per_block, dtype="int32", fill_value=0, dims=("case", "hw"))
        _blocks.create_ledger(g, self.n, cases_per_block)
        self._group = g

    @property
    def n_blocks(self) -> int:
        return _blocks.n_blocks(self.n, self.cases_per_block)

    def blocks_todo(self) -> list[int]:
        return _blocks.blocks_todo(self._group)

    def block_rows(self, block: int) -> tuple[int, int]:
        return _blocks.block_rows(self.n, self.cases_per_block, block)

    def write_block(self, block: int, images: np.ndarray, orig_size: np.ndarray) -> None:
        start, stop = self.block_rows(block)
        img = _blocks.writable(self._group, "image")
        images = np.asarray(images)
        orig_size = np.asarray(orig_size)
        if images.shape != (stop - start, *img.shape[1:]) or images.dtype != np.uint8:
            raise InvalidStoreError(Problem(f"images {self.dataset}", f"block {block} needs uint8 images of shape {(stop - start, *img.shape[1:])}, got {images.dtype} {images.shape}"))
        if orig_size.shape != (stop - start, 2) or (orig_size <= 0).any():
            raise InvalidStoreError(Problem(f"images {self.dataset}", f"block {block} needs positive orig_size of shape {(stop - start, 2)}"))
        img[start:stop] = images
        _blocks.writable(self._group, "orig_size")[start:stop] = orig_size.astype(np.int32)
        _blocks.mark_done(self._group, block)

    def finish(self, attrs: Mapping | None = None) -> None:
        """Check every block is written, record ``attrs`` (e.g. cases found bad late), consolidate."""
        left = self.blocks_todo()
        if left:
            raise InvalidStoreError(Problem(f"{self.path}/{self.dataset}", f"{len(left)} block(s) not written yet (first: block {left[0]}); run again to resume"))
        if attrs:
            self._group.attrs.update(dict(attrs))
        _blocks.drop_ledger(self._group)
        consolidate(self.path)


def read_images(path: str | os.PathLike) -> ImagesStore:
    """Open an images store read-only. Unfinished dataset groups are refused."""
    group = open_store_group(path)
    datasets = {}
    for name, g in sorted(group.groups()):
        if _blocks.is_incomplete(g):
            raise InvalidStoreError(Problem(f"{path}/{name}", "is unfinished; run xbench-prepare again to resume it"))
        datasets[name] = ImagesDataset(
            name=name,
            classes=tuple(g.attrs.get("classes", ())),
            case_id=read_strings(g["case_id"]),
            image=g["image"],
            orig_size=np.asarray(g["orig_size"][...]),
            attrs=dict(g.attrs),
        )
    return ImagesStore(path=Path(path), attrs=dict(group.attrs.get("xbench", {})), datasets=datasets)


def validate_images(path: str | os.PathLike) -> list[Problem]:
    """Every way the images store at ``path`` breaks the contract (metadata only, plus chunk presence)."""
    where = str(path)
    group, groups, problems = open_for_validation(path, "images")
    for name, g in groups.items():
        w = f"{where}/{name}"
        if _blocks.is_incomplete(g):
            problems.append(Problem(w, "is unfinished (a block ledger is still present); run xbench-prepare again to resume"))
            continue
        classes = g.attrs.get("classes")
        if not (isinstance(classes, list) and all(isinstance(x, str) for x in classes)):
            problems.append(Problem(w, "attribute 'classes' must be a list of class names"))
        arrays = {k: get_array(g, k, w, problems) for k in ("case_id", "image", "orig_size")}
        if any(a is None for a in arrays.values()):
            continue
        ok = check_array(arrays["case_id"], f"{w}/case_id", shape=(None,), dtypes=("string",), problems=problems)
        n = arrays["case_id"].shape[0] if arrays["case_id"].ndim == 1 else None
        if n is not None and n > MAX_CASES:
            problems.append(Problem(f"{w}/case_id", f"declares {n} cases; the limit is {MAX_CASES}"))
            continue
        ok &= check_array(arrays["image"], f"{w}/image", shape=(n, None, None), dtypes=("uint8",), problems=problems)
        ok &= check_array(arrays["orig_size"], f"{w}/orig_size", shape=(n, 2), dtypes=("int32",), problems=problems)
        img = arrays["image"]
        if ok and (img.shape[1] != img.shape[2] or not 1 <= img.shape[1] <= MAX_IMAGE_SIDE):
            problems.append(Problem(f"{w}/image", f"images must be square S x S with S <= {MAX_IMAGE_SIDE}; got {img.shape[1:]}"))
            ok = False
        if not ok:
            continue
        for k, arr in arrays.items():
            gone = missing_chunks(arr)
            if gone:
                problems.append(Problem(f"{w}/{k}", describe_missing(arr, gone)))
            problems += stored_problems(arr, f"{w}/{k}")
    return problems
