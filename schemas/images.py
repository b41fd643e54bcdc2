"""images.zarr: the public images — case ids and preprocessed images, no labels.

Layout (contract §images.zarr)::

    /                  attrs: xbench = {kind: "images", schema: 1, ...}
    /<dataset>/        attrs: classes = [...] (canonical finding names, column order)
        case_id    (N,)       string
        image      (N, S, S)  uint8  (whole image stretched to S x S, brighter = denser)
        orig_size  (N, 2)     int32  (height, width)
      optional, schema_minor >= 1 (root attribute xbench.schema_minor), both or neither:
        orig_offset (N,)      int64  (start of case i in orig_pixels)
        orig_pixels (P,)      uint8  (every case at its original resolution, row-major, one after
                                      the other: case i is orig_pixels[orig_offset[i]:][:h*w])
      optional, schema_minor >= 2, all or none (phrase rows, schemas/queries.py):
        query_id (Q,) str, query_case (Q,) int64, query_text (Q,) str, query_category (Q,) str

The originals are one flat buffer with offsets because Zarr v3 has no ragged arrays (its
variable-length bytes type has no v3 specification). The buffer is written in case order, so
offsets rise by exactly h*w from case to case and P is the sum of h*w; validation checks that
against ``orig_size`` instead of trusting either.

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

from xbench.schemas import _blocks, _zarr
from xbench.schemas.errors import InvalidStoreError, Problem
from xbench.schemas.paths import store_path, work_dir
from xbench.schemas.queries import IMAGES_ARRAYS, Queries, declare_minor, read_queries, require, validate_query_arrays, write_query_arrays
from xbench.schemas.store import (
    MAX_CASES,
    MAX_IMAGE_SIDE,
    MAX_ORIGINAL_SIDE,
    SCHEMA_MINOR,
    check_array,
    consolidate,
    ensure_root,
    describe_missing,
    get_array,
    iter_row_blocks,
    read_rows,
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
    orig_offset: np.ndarray | None = None
    orig_pixels: zarr.Array | None = None
    queries: Queries | None = None  # phrase rows (free-text queries), with their text

    @property
    def has_originals(self) -> bool:
        return self.orig_pixels is not None

    def original(self, row: int) -> np.ndarray:
        """Case ``row`` at its original resolution, (h, w) uint8; only when the store keeps originals."""
        if self.orig_pixels is None or self.orig_offset is None:
            raise InvalidStoreError(Problem(self.name, "this images store keeps no original-resolution images"))
        h, w = (int(v) for v in self.orig_size[row])
        start = int(self.orig_offset[row])
        if not (0 <= start and start + h * w <= self.orig_pixels.shape[0]):
            raise InvalidStoreError(Problem(f"{self.name}/orig_offset", f"case {row} points outside orig_pixels"))
        return np.asarray(self.orig_pixels[start:start + h * w]).reshape(h, w)


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
        keep_original: bool = False,
        queries: Queries | None = None,
    ) -> None:
        self.path = Path(path)
        self.dataset = dataset
        case_ids = np.asarray(case_ids, dtype=str)
        if len(set(case_ids.tolist())) != len(case_ids) or len(case_ids) == 0:
            raise InvalidStoreError(Problem(f"images {dataset}", "case_ids must be non-empty and unique"))
        if not 1 <= image_size <= MAX_IMAGE_SIDE:
            raise InvalidStoreError(Problem(f"images {dataset}", f"image_size must be in 1..{MAX_IMAGE_SIDE}"))
        self.n = len(case_ids)
        if queries is not None:
            if queries.text is None:
                raise InvalidStoreError(Problem(f"images {dataset}", "phrase rows of an images store need their text"))
            require(queries, self.n, list(classes), f"images {dataset}")
        self.cases_per_block = cases_per_block
        spec = _blocks.spec_digest(
            {"case_ids": _blocks.strings_digest(case_ids), "classes": list(classes), "size": image_size,
             "cpb": cases_per_block, "attrs": dict(attrs or {}), "originals": bool(keep_original),
             **({"queries": _blocks.spec_digest({k: _blocks.strings_digest(getattr(queries, k))
                                                 for k in ("id", "case", "category", "text")})} if queries is not None else {})}
        )
        self.keep_original = bool(keep_original)
        root = ensure_root(self.path, "images")
        if dataset in root:
            existing = root[dataset]
            if _blocks.is_incomplete(existing) and existing.attrs.get(_blocks.SPEC_ATTR) == spec:
                self._group = existing
                return
            shutil.rmtree(self.path / dataset)
        keep = self.keep_original

        def build(folder):
            g = zarr.open_group(zarr.storage.LocalStore(folder), mode="w", zarr_format=3,
                                attributes={"classes": list(classes), **dict(attrs or {}), _blocks.SPEC_ATTR: spec})
            ids = g.create_array("case_id", shape=(self.n,), dtype=str, chunks=(self.n,), dimension_names=("case",))
            ids[:] = case_ids
            _blocks.create_row_array(g, "image", shape=(self.n, image_size, image_size), cases_per_block=cases_per_block, dtype="uint8", fill_value=0, dims=("case", "y", "x"))
            _blocks.create_row_array(g, "orig_size", shape=(self.n, 2), cases_per_block=cases_per_block, dtype="int32", fill_value=0, dims=("case", "hw"))
            if keep:
                _blocks.create_row_array(g, "orig_offset", shape=(self.n,), cases_per_block=cases_per_block, dtype="int64", fill_value=-1, dims=("case",))
                g.create_array("orig_pixels", shape=(0,), chunks=(ORIGINAL_CHUNK,), dtype="uint8", fill_value=0,
                               dimension_names=("pixel",), config={"write_empty_chunks": True})
            if queries is not None:
                write_query_arrays(g, queries, with_text=True)
            _blocks.create_ledger(g, self.n, cases_per_block)

        if queries is not None:  # likewise for phrase rows
            declare_minor(root, "images")
        if keep:  # before the group appears: a store holding originals always declares the minor version
            root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": max(SCHEMA_MINOR, _minor(root))}
        # Built beside the store (a hidden folder inside it would read as a stray group) and renamed in whole:
        # a kill leaves either no group or one with its ledger, which the same command resumes.
        staging = self.path.parent / f"{self.path.name}.{dataset}"
        built = work_dir(staging)
        try:
            build(built)
            os.rename(built, self.path / dataset)
        finally:
            if built.exists():
                shutil.rmtree(built, ignore_errors=True)
        self._group = open_store_group(self.path, mode="r+")[dataset]

    @property
    def n_blocks(self) -> int:
        return _blocks.n_blocks(self.n, self.cases_per_block)

    def blocks_todo(self) -> list[int]:
        return _blocks.blocks_todo(self._group)

    def block_rows(self, block: int) -> tuple[int, int]:
        return _blocks.block_rows(self.n, self.cases_per_block, block)

    def write_block(self, block: int, images: np.ndarray, orig_size: np.ndarray,
                    originals: Sequence[np.ndarray] | None = None) -> None:
        """Write rows of ``block``: ``images`` (n, S, S) uint8, ``orig_size`` (n, 2) and, when the
        writer keeps originals, ``originals`` (n (h, w) uint8 arrays of those sizes). Blocks with
        originals must be written in order (the flat buffer is filled front to back)."""
        start, stop = self.block_rows(block)
        img = _blocks.writable(self._group, "image")
        images = np.asarray(images)
        orig_size = np.asarray(orig_size)
        if images.shape != (stop - start, *img.shape[1:]) or images.dtype != np.uint8:
            raise InvalidStoreError(Problem(f"images {self.dataset}", f"block {block} needs uint8 images of shape {(stop - start, *img.shape[1:])}, got {images.dtype} {images.shape}"))
        if orig_size.shape != (stop - start, 2) or (orig_size <= 0).any():
            raise InvalidStoreError(Problem(f"images {self.dataset}", f"block {block} needs positive orig_size of shape {(stop - start, 2)}"))
        if self.keep_original:
            self._write_originals(block, start, originals, orig_size)
        elif originals is not None:
            raise InvalidStoreError(Problem(f"images {self.dataset}", "originals given but the writer was created without keep_original"))
        img[start:stop] = images
        _blocks.writable(self._group, "orig_size")[start:stop] = orig_size.astype(np.int32)
        _blocks.mark_done(self._group, block)

    def _write_originals(self, block: int, start: int, originals, orig_size: np.ndarray) -> None:
        todo = self.blocks_todo()
        if not todo or block != todo[0]:
            raise InvalidStoreError(Problem(f"images {self.dataset}", f"block {block} written out of order; with originals the next block is {todo[0] if todo else None}"))
        if originals is None or len(originals) != len(orig_size):
            raise InvalidStoreError(Problem(f"images {self.dataset}", f"block {block} needs one original image per case"))
        for k, (im, hw) in enumerate(zip(originals, orig_size)):
            im = np.asarray(im)
            if im.dtype != np.uint8 or im.shape != tuple(int(v) for v in hw) or max(im.shape) > MAX_ORIGINAL_SIDE:
                raise InvalidStoreError(Problem(f"images {self.dataset}", f"original of row {start + k} must be uint8 of shape {tuple(int(v) for v in hw)} (sides <= {MAX_ORIGINAL_SIDE}); got {im.dtype} {im.shape}"))
        sizes = np.array([int(h) * int(w) for h, w in orig_size], dtype=np.int64)
        first = self._end_of(start)
        offsets = first + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        end = int(first + sizes.sum())
        pixels = _blocks.writable(self._group, "orig_pixels")
        if pixels.shape[0] < end:
            pixels.resize((end,))
            pixels = _blocks.writable(self._group, "orig_pixels")
        pixels[first:end] = np.concatenate([np.asarray(o).reshape(-1) for o in originals])
        _blocks.writable(self._group, "orig_offset")[start:start + len(sizes)] = offsets

    def _end_of(self, row: int) -> int:
        """Where the originals of ``row`` start: just after those of ``row - 1`` (already written)."""
        if row == 0:
            return 0
        prev = int(self._group["orig_offset"][row - 1])
        h, w = (int(v) for v in self._group["orig_size"][row - 1])
        return prev + h * w

    def finish(self, attrs: Mapping | None = None) -> None:
        """Check every block is written, record ``attrs`` (e.g. cases found bad late), consolidate."""
        left = self.blocks_todo()
        if left:
            raise InvalidStoreError(Problem(f"{self.path}/{self.dataset}", f"{len(left)} block(s) not written yet (first: block {left[0]}); run again to resume"))
        # a writer killed during a chunk write left zarr's temporary file beside the chunk; writing the block
        # again did not replace it, and it would stay in the store as one more key. Every block is written
        # now, so no writer of this group is left to own one.
        _zarr.remove_partial_writes(self.path / self.dataset)
        if attrs:
            self._group.attrs.update(dict(attrs))
        if self.keep_original:
            # a run killed after growing the buffer but before its ledger entry leaves a tail
            # that the resumed run did not reuse; cut it off
            _blocks.writable(self._group, "orig_pixels").resize((self._end_of(self.n),))
        _blocks.drop_ledger(self._group)
        consolidate(self.path)


ORIGINAL_CHUNK = 1 << 22  # 4 MiB chunks of the flat originals buffer: a case read decodes little beyond itself


def _minor(group: zarr.Group) -> int:
    meta = group.attrs.get("xbench")
    v = meta.get("schema_minor", 0) if isinstance(meta, dict) else 0
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


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
            orig_offset=np.asarray(g["orig_offset"][...]) if "orig_pixels" in g and "orig_offset" in g else None,
            orig_pixels=g["orig_pixels"] if "orig_pixels" in g and "orig_offset" in g else None,
            queries=read_queries(g, with_text=True),
        )
    return ImagesStore(path=store_path(path), attrs=dict(group.attrs.get("xbench", {})), datasets=datasets)


def validate_images(path: str | os.PathLike) -> list[Problem]:
    """Every way the images store at ``path`` breaks the contract (metadata only, plus chunk presence;
    with originals also ``orig_size`` and ``orig_offset``, never the pixels)."""
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
        validate_query_arrays(g, w, "images", IMAGES_ARRAYS, n, classes if isinstance(classes, list) else (),
                              _minor(group), problems)
        originals = _originals_arrays(g, w, n, _minor(group), problems)
        if "perturbed_copies" in g.attrs:  # the robustness track (schemas/perturbations.py): a count, minor 3
            from xbench.schemas.perturbations import images_attr_problems

            problems += images_attr_problems(g.attrs["perturbed_copies"], n, _minor(group), w)
        for k, arr in {**arrays, **(originals or {})}.items():
            gone = missing_chunks(arr)
            if gone:
                problems.append(Problem(f"{w}/{k}", describe_missing(arr, gone)))
                originals = None
            problems += stored_problems(arr, f"{w}/{k}")
        if originals:
            problems.extend(_check_original_offsets(arrays["orig_size"], originals, w))
    return problems


def _originals_arrays(g: zarr.Group, w: str, n: int, minor: int, problems: list[Problem]) -> dict | None:
    """The optional originals arrays from metadata: both or neither, right shapes and dtypes."""
    present = [k for k in ("orig_offset", "orig_pixels") if k in g]
    if not present:
        return None
    if minor < 1:
        problems.append(Problem(w, f"has {', '.join(present)} but the root attribute xbench.schema_minor is {minor}; originals need schema_minor >= 1"))
        return None
    if len(present) == 1:
        missing = ({"orig_offset", "orig_pixels"} - set(present)).pop()
        problems.append(Problem(f"{w}/{missing}", f"array is missing ({present[0]} is present; the originals need both)"))
        return None
    arrays = {k: get_array(g, k, w, problems) for k in present}
    if any(a is None for a in arrays.values()):
        return None
    ok = check_array(arrays["orig_offset"], f"{w}/orig_offset", shape=(n,), dtypes=("int64",), problems=problems)
    ok &= check_array(arrays["orig_pixels"], f"{w}/orig_pixels", shape=(None,), dtypes=("uint8",), problems=problems)
    limit = n * MAX_ORIGINAL_SIDE * MAX_ORIGINAL_SIDE
    if ok and arrays["orig_pixels"].shape[0] > limit:
        problems.append(Problem(f"{w}/orig_pixels", f"declares {arrays['orig_pixels'].shape[0]} pixels, more than {n} images of {MAX_ORIGINAL_SIDE}x{MAX_ORIGINAL_SIDE} hold"))
        ok = False
    return arrays if ok else None


def _check_original_offsets(orig_size: zarr.Array, originals: dict, w: str) -> list[Problem]:
    """Sizes within bounds, offsets starting at 0 and rising by exactly h*w, ending at the buffer's end.

    Reads orig_size and orig_offset (16 bytes per case) one row chunk at a time, never the pixels.
    """
    problems: list[Problem] = []
    offsets, total = originals["orig_offset"], int(originals["orig_pixels"].shape[0])
    expected, bad_size, bad_offset = 0, [], []
    for start, stop in iter_row_blocks(offsets):
        hw = read_rows(orig_size, start, stop, f"{w}/orig_size", problems)
        off = read_rows(offsets, start, stop, f"{w}/orig_offset", problems)
        if hw is None or off is None:
            return problems
        hw = hw.astype(np.int64)
        bad = ((hw < 1) | (hw > MAX_ORIGINAL_SIDE)).any(axis=1)
        bad_size += (np.flatnonzero(bad) + start).tolist()
        run = expected + np.concatenate([[0], np.cumsum(hw[:, 0] * hw[:, 1])]).astype(np.int64)
        bad_offset += (np.flatnonzero(off != run[:-1]) + start).tolist()
        expected = int(run[-1])
    if bad_size:
        problems.append(Problem(f"{w}/orig_size", f"{len(bad_size)} case(s) with a side outside 1..{MAX_ORIGINAL_SIDE} (first: row {bad_size[0]}); the originals cannot be located"))
    elif bad_offset:
        problems.append(Problem(f"{w}/orig_offset", f"{len(bad_offset)} offset(s) do not follow from orig_size (first: row {bad_offset[0]}); case i must start where case i-1 ends, the first at 0"))
    elif expected != total:
        problems.append(Problem(f"{w}/orig_pixels", f"holds {total} pixels but orig_size adds up to {expected}"))
    return problems
