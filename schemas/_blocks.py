"""Block-wise, resumable, multi-process writing of a dataset group.

A dataset group being written holds a ledger array ``_blocks_done`` (one bool per block of
``cases_per_block`` rows, one chunk per block). A block's data chunks are written first and its
ledger entry last, so a writer killed at any moment leaves at worst a block that is written
again. Blocks are whole chunks of every row-chunked array, so processes writing different blocks
never touch the same stored object (zarr's LocalStore writes each object atomically: to a temporary
file, then renamed; a writer killed in between leaves that file, which ``ImagesWriter.finish`` removes).
``finish`` removes the ledger: a group that still has one is incomplete.

Creation itself (root attributes, arrays, ledger) happens in a hidden folder beside the store and is
moved into place by one rename (:func:`create_beside`), so a writer killed while creating leaves no
store at all, and the same command simply starts again.
"""
from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import zarr

LEDGER = "_blocks_done"
SPEC_ATTR = "_xbench_writer_spec"


def spec_digest(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


def strings_digest(values) -> str:
    digest = hashlib.sha256()
    for v in values:
        digest.update(str(v).encode() + b"\0")
    return digest.hexdigest()


def n_blocks(n_rows: int, cases_per_block: int) -> int:
    return max(1, math.ceil(n_rows / cases_per_block))


def block_rows(n_rows: int, cases_per_block: int, block: int) -> tuple[int, int]:
    nb = n_blocks(n_rows, cases_per_block)
    if not 0 <= block < nb:
        raise IndexError(f"block {block} is out of range; this dataset has blocks 0-{nb - 1}")
    start = block * cases_per_block
    return start, min(start + cases_per_block, n_rows)


def create_ledger(group: zarr.Group, n_rows: int, cases_per_block: int, name: str = LEDGER) -> None:
    group.create_array(
        name,
        shape=(n_blocks(n_rows, cases_per_block),),
        chunks=(1,),
        dtype="bool",
        fill_value=False,
        config={"write_empty_chunks": True},
    )


def blocks_todo(group: zarr.Group, name: str = LEDGER) -> list[int]:
    if name not in group:
        return []
    done = np.asarray(group[name][:])
    return [int(b) for b in np.flatnonzero(~done)]


def mark_done(group: zarr.Group, block: int, name: str = LEDGER) -> None:
    writable(group, name)[block] = True


def is_incomplete(group: zarr.Group) -> bool:
    return LEDGER in group


def drop_ledger(group: zarr.Group, name: str = LEDGER) -> None:
    if name in group:
        del group[name]


def create_beside(target, build) -> None:
    """Run ``build(folder)`` on a new hidden folder beside ``target``, then move it to ``target`` in one rename
    (replacing what is there). What a killed creation left beside ``target`` is removed first."""
    from xbench.schemas.paths import swap_in, work_dir

    folder = work_dir(target)
    try:
        build(folder)
        swap_in(folder, target)
    finally:
        if folder.exists():
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


def interrupted_creation(group: zarr.Group) -> bool:
    """True for what an earlier XBench killed while creating a store left: no root attribute ``xbench``, and
    nothing inside but unfinished dataset groups (each still with its ledger). Such a store holds no data."""
    if "xbench" in group.attrs:
        return False
    return all(isinstance(m, zarr.Group) and LEDGER in m for _, m in group.members())


def writable(group: zarr.Group, name: str) -> zarr.Array:
    """The array ``name`` opened so that chunks equal to the fill value are still stored.

    ``write_empty_chunks`` is a runtime setting, not stored metadata, so every writer that reopens
    an array must ask for it again; otherwise an all-zero image block would silently go missing.
    """
    return group[name].with_config({"write_empty_chunks": True})


def create_row_array(group: zarr.Group, name: str, *, shape, cases_per_block: int, dtype, fill_value, dims) -> zarr.Array:
    """An array chunked by whole blocks along axis 0 that stores every chunk, even all-fill ones."""
    chunks = (max(1, min(cases_per_block, shape[0]) if shape[0] else 1), *shape[1:])
    chunks = tuple(max(1, c) for c in chunks)
    return group.create_array(
        name,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        fill_value=fill_value,
        dimension_names=dims,
        config={"write_empty_chunks": True},
    )
