"""``pair_counts.npz``: the class rows' counts and those of every section that keeps its counts, written by the
scorer and read back by ``xbench compare``, ``xbench report`` and ``xbench human``.

The file's layout is :mod:`xbench.score.kernels.counts`' (the class rows, one dataset at a time, and the phrase
rows' arrays); this module loops over the section plug-ins (:mod:`xbench.score.sections.plugins`) for the rest, so
it sits in the sections' layer, above the counts it writes.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from xbench.score.kernels.counts import THRESHOLDS, DatasetCounts, PhraseCounts, dataset_from, dataset_problems, put_dataset
from xbench.score.sections.plugins import sections

__all__ = ["load_phrase_counts", "load_scope_counts", "read_counts_file", "save_pair_counts"]


def save_pair_counts(path: str | os.PathLike, counts: dict[str, DatasetCounts],
                     phrases: Mapping[str, PhraseCounts] | None = None, *,
                     scopes: Mapping[str, Mapping] | None = None) -> None:
    """Write ``counts`` (the class rows) and the counts of every other row scope to an ``.npz`` file at
    ``path`` (uncompressed: it is written on every run).

    ``scopes``: {row scope name: {dataset: counts}} (``ScoreResult.scope_counts``); ``phrases`` is short for
    ``scopes={"phrase": phrases}``. Each declared scope that saves its counts (:attr:`Section.saves_counts
    <xbench.score.sections.kinds.Section.saves_counts>`) and has some is written after the class rows, in declaration
    order: ``<scope>_datasets`` then each dataset's arrays from the scope's ``save_counts`` (a file without
    such rows keeps the layout it always had)."""
    arrays: dict[str, np.ndarray] = {"datasets": np.array(list(counts), dtype=str), "thresholds": THRESHOLDS}
    for name, dc in counts.items():
        put_dataset(arrays, name, dc)
    given = {**({"phrase": phrases} if phrases else {}), **(scopes or {})}
    for scope in sections(primary=False):
        found = given.get(scope.name)
        if not found or not scope.saves_counts:
            continue
        arrays[scope.counts_key] = np.array(list(found), dtype=str)
        save = scope.save_counts
        for name, value in found.items():
            prefix = f"{name}.{scope.section}"
            for key, arr in save(prefix, value).items():
                if not key.startswith(prefix + "."):
                    raise RuntimeError(f"row scope {scope.name!r} saved {key!r} outside {prefix}.*")  # its bug
                arrays[key] = arr
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def _saved_scopes() -> list:
    return [s for s in sections(primary=False) if s.saves_counts]


def read_counts_file(path: str | os.PathLike, *, max_bytes: int = 1024 * 2**20
                     ) -> tuple[dict[str, DatasetCounts], dict[str, dict]]:
    """(class counts, {row scope: {dataset: counts}}) of a ``pair_counts.npz`` from outside, read once and
    checked.

    Read through :func:`xbench.schemas.inputs.load_npz` (regular file, no pickle, each member's declared size
    checked against ``max_bytes`` before it is inflated), then every dataset's arrays against the layout above
    (:func:`dataset_problems`; a row scope's by its ``counts_problems``). The second item holds every declared
    scope that saves its counts ({} for a scope the file has no rows of). Raises
    :class:`~xbench.schemas.errors.InputError`, one line per problem.
    """
    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import load_npz

    where = str(path)
    z = load_npz(path, where=where, max_bytes=max_bytes)
    names = z.get("datasets")
    if names is None or names.dtype.kind != "U" or names.ndim != 1:
        raise InputError([f"{where}: no 'datasets' list of names (not a pair_counts.npz)"])
    names = [str(n) for n in names]
    scopes = _saved_scopes()
    scope_names: dict[str, list[str]] = {}
    for scope in scopes:
        listed = z.get(scope.counts_key)
        if listed is not None and (listed.dtype.kind != "U" or listed.ndim != 1):
            raise InputError([f"{where}: '{scope.counts_key}' must be a list of names"])
        scope_names[scope.name] = [str(n) for n in listed] if listed is not None else []
    problems = []
    for group in (names, *scope_names.values()):
        if len(set(group)) != len(group) or any(not n for n in group):
            problems.append(f"{where}: dataset names must be unique and non-empty")
    if problems:
        raise InputError(problems)
    for name in names:
        problems += dataset_problems(z, name, where)
    for scope in scopes:
        check = scope.counts_problems
        for name in scope_names[scope.name]:
            problems += check(z, f"{name}.{scope.section}", where)
    if problems:
        raise InputError(problems[:20])
    counts = {name: dataset_from(z, name, name) for name in names}
    return counts, {scope.name: _scope_from(z, scope, scope_names[scope.name]) for scope in scopes}


def _scope_from(z, scope, names) -> dict:
    load = scope.load_counts
    return {name: load(z, f"{name}.{scope.section}", name) for name in names}


def load_scope_counts(path: str | os.PathLike) -> dict[str, dict]:
    """{row scope: {dataset: counts}} of a ``pair_counts.npz`` written by :func:`save_pair_counts`: every
    declared scope that saves its counts, {} for one the file has no rows of (a file written before the
    scope's counts were saved, or of a ground truth without such rows). A file from outside goes through
    :func:`read_counts_file` instead."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no pair_counts.npz here; run `xbench-score` with --out first.")
    with np.load(path, allow_pickle=False) as z:  # only the members named are read
        return {scope.name: _scope_from(z, scope, [str(n) for n in z[scope.counts_key]] if scope.counts_key in z
                                        else []) for scope in _saved_scopes()}


def load_phrase_counts(path: str | os.PathLike) -> dict[str, PhraseCounts]:
    """The phrase counts of a ``pair_counts.npz`` ({dataset: PhraseCounts}); {} for a file without phrase
    rows (one written before they were saved, or of a ground truth without any)."""
    return load_scope_counts(path)["phrase"]
