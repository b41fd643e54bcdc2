"""Writing a submission.zarr (its layout: :mod:`xbench.schemas.submission`): what one dataset group will hold
(:class:`DatasetSpec`, with the layout's value sets ``SCORE_KINDS`` and ``MAP_DTYPES``), :class:`SubmissionWriter`
(creates or resumes a store and writes it block by block: resumable, several processes at once) and
:func:`replace_problem` (whether ``--overwrite`` may replace a path). Every name is importable from
:mod:`xbench.schemas.submission` too, which reads and validates what this writes."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import zarr

from xbench.schemas import _blocks
from xbench.schemas.errors import InvalidStoreError, Problem
from xbench.schemas.queries import QUERY_LEDGER, QUERY_MINOR, UNSUPPORTED_ATTR
from xbench.schemas.schema_versions import minor
from xbench.schemas.store import (
    DATASET_KEYS,
    MAX_MAP_SIDE,
    consolidate,
    open_store_group,
    read_strings,
    root_attrs,
)

__all__ = ["DatasetSpec", "SubmissionWriter", "replace_problem"]

SCORE_KINDS = ("logit", "probability")
SCORES_ONLY_MINOR = minor("submission", "scores_only")  # submission minor of a scores-only submission (contract § Faithfulness)
MAP_DTYPES = ("float16", "float32")


@dataclass(frozen=True)
class DatasetSpec:
    """What one dataset group of a submission will hold.

    ``case_ids`` in the order rows will be written; ``map_shape`` = (h, w) of every saliency map.
    """

    case_ids: Sequence[str]
    classes: Sequence[str]
    map_shape: tuple[int, int]
    score_kind: str = "logit"
    unsupported: Sequence[str] = ()
    query_ids: Sequence[str] = ()  # phrase rows to write (in images.zarr order), if any
    phrases_unsupported: str | None = None  # why the model writes no phrase rows (recorded even without query_ids)

    def check(self, name: str) -> None:
        problems = []
        where = f"dataset {name}"
        if name not in DATASET_KEYS:
            problems.append(Problem(where, f"unknown dataset key; expected one of {', '.join(DATASET_KEYS)}"))
        if self.score_kind not in SCORE_KINDS:
            problems.append(Problem(where, f"score_kind must be 'logit' or 'probability', got {self.score_kind!r}"))
        if len(set(self.case_ids)) != len(self.case_ids):
            problems.append(Problem(where, "case_ids repeat"))
        if len(self.case_ids) == 0:
            problems.append(Problem(where, "no case_ids"))
        if len(set(self.classes)) != len(self.classes) or not self.classes:
            problems.append(Problem(where, "classes must be a non-empty list of unique names"))
        if set(self.unsupported) - set(self.classes):
            problems.append(Problem(where, f"unsupported names classes that are not listed: {sorted(set(self.unsupported) - set(self.classes))}"))
        if len(set(self.query_ids)) != len(self.query_ids):
            problems.append(Problem(where, "query ids repeat"))
        h, w = self.map_shape
        if not (1 <= h <= MAX_MAP_SIDE and 1 <= w <= MAX_MAP_SIDE):
            problems.append(Problem(where, f"map_shape {self.map_shape} outside 1..{MAX_MAP_SIDE} per side"))
        if problems:
            raise InvalidStoreError(problems)


def replace_problem(path: str | os.PathLike) -> str | None:
    """Why ``--overwrite`` may not replace ``path`` (None when it may): only a submission store XBench wrote (its
    root attribute ``xbench.kind`` says so), the remains of a killed creation, or an empty folder is replaced;
    a folder of the user's, another kind of store or a file is never deleted (docs/contract.md, "Output safety")."""
    path = Path(path)
    refused = ("exists and is not a submission store XBench wrote ({what}); --overwrite replaces only one, and "
               "nothing was deleted: choose another path")
    if path.is_symlink() or not path.is_dir():
        return refused.format(what="a link" if path.is_symlink() else "a file")
    with os.scandir(path) as entries:
        if next(entries, None) is None:
            return None
    try:
        group = open_store_group(path, mode="r")
        kind = (group.attrs.get("xbench") or {}).get("kind")
        if kind == "submission" or _blocks.interrupted_creation(group):
            return None
    except Exception:  # noqa: BLE001 - whatever the folder holds, it is not a store this writer can prove it wrote
        kind = None
    return refused.format(what=f"xbench.kind={kind!r}" if isinstance(kind, str) else "a folder of other files")


class SubmissionWriter:
    """Creates or resumes a submission store and writes it block by block.

    >>> w = SubmissionWriter.create("sub.zarr", model="m", method="similarity", provenance={},
    ...     datasets={"phantom": DatasetSpec(ids, classes, (14, 14))})        # doctest: +SKIP
    >>> for b in w.blocks_todo("phantom"):                                   # doctest: +SKIP
    ...     start, stop = w.block_rows("phantom", b)
    ...     w.write_block("phantom", b, scores[start:stop], maps[start:stop])
    >>> w.finish()                                                           # doctest: +SKIP

    Several processes may call :meth:`write_block` on different blocks of one store at once (open
    the store in each with :meth:`open`). A writer killed at any moment is resumed by calling
    :meth:`create` again with the same arguments (or :meth:`open`): ``blocks_todo`` then lists
    what is left. :meth:`finish` refuses an incomplete store.
    """

    def __init__(self, path: Path, group: zarr.Group) -> None:
        self.path = path
        self._group = group

    # -- construction -------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        *,
        model: str,
        method: str,
        provenance: Mapping | None = None,
        datasets: Mapping[str, DatasetSpec],
        cases_per_block: int = 64,
        map_dtype: str = "float16",
        overwrite: bool = False,
        scores_only: bool = False,
    ) -> "SubmissionWriter":
        """Create the store, or resume it when the same specification is already there.

        A store at ``path`` written with a different specification is refused unless
        ``overwrite`` (then it is deleted first).
        """
        path = Path(path)
        if map_dtype not in MAP_DTYPES:
            raise InvalidStoreError(Problem("map_dtype", f"must be float16 or float32, got {map_dtype!r}"))
        if cases_per_block < 1:
            raise InvalidStoreError(Problem("cases_per_block", "must be at least 1"))
        for name, spec in datasets.items():
            spec.check(name)
        spec_hash = cls.spec_hash(model=model, method=method, datasets=datasets, cases_per_block=cases_per_block,
                                  map_dtype=map_dtype, scores_only=scores_only)
        if overwrite and (path.exists() or path.is_symlink()):
            not_ours = replace_problem(path)
            if not_ours:
                raise InvalidStoreError(Problem(str(path), not_ours))
        if path.exists() and not overwrite:
            existing = open_store_group(path, mode="r+")
            meta = existing.attrs.get("xbench", {})
            if meta.get("kind") == "submission" and meta.get(_blocks.SPEC_ATTR) == spec_hash:
                return cls(path, existing)
            if not _blocks.interrupted_creation(existing):  # an older version's killed creation is started again
                if not meta.get(_blocks.SPEC_ATTR):
                    raise InvalidStoreError(Problem(str(path), "exists but is not a store this writer started (or its creation was "
                                                    "interrupted); remove it, choose another path or pass --overwrite (overwrite=True from Python)"))
                raise InvalidStoreError(
                    Problem(str(path), "exists and was written with a different specification; choose another path or pass --overwrite (overwrite=True from Python)")
                )
        _blocks.create_beside(path, lambda folder: cls._create_skeleton(folder, model, method, provenance, datasets,
                                                                       cases_per_block, map_dtype, spec_hash, scores_only))
        return cls(path, open_store_group(path, mode="r+"))

    @staticmethod
    def spec_hash(*, model: str, method: str, datasets: Mapping[str, DatasetSpec], cases_per_block: int,
                  map_dtype: str, scores_only: bool = False) -> str:
        """The digest of a store's specification, recorded in its root attributes: :meth:`create` resumes a store
        only when it is the same, and ``xbench-extract`` compares it before loading the model (extract/noop.py)."""
        return _blocks.spec_digest(
            {
                "model": model,
                "method": method,
                "cases_per_block": cases_per_block,
                "map_dtype": map_dtype,
                **({"scores_only": True} if scores_only else {}),
                "datasets": {
                    name: {
                        "case_ids": _blocks.strings_digest(s.case_ids),
                        "classes": list(s.classes),
                        "map_shape": list(s.map_shape),
                        "score_kind": s.score_kind,
                        "unsupported": sorted(s.unsupported),
                        **({"queries": _blocks.strings_digest(s.query_ids), "phrases_unsupported": s.phrases_unsupported}
                           if len(s.query_ids) or s.phrases_unsupported else {}),
                    }
                    for name, s in sorted(datasets.items())
                },
            }
        )

    @staticmethod
    def _create_skeleton(path, model, method, provenance, datasets, cases_per_block, map_dtype, spec_hash,
                         scores_only=False) -> None:
        """The empty store: root attributes, per dataset the case ids, fill-valued arrays and the ledger."""
        root = zarr.open_group(zarr.storage.LocalStore(path), mode="w", zarr_format=3)
        meta = root_attrs("submission", model=model, method=method, **dict(provenance or {}))
        meta["xbench"][_blocks.SPEC_ATTR] = spec_hash
        meta["xbench"]["complete"] = False
        if scores_only:  # round 2 of faithfulness: the scores of perturbed images, no maps (and no phrase rows)
            meta["xbench"]["scores_only"] = True
            meta["xbench"]["schema_minor"] = max(SCORES_ONLY_MINOR, meta["xbench"].get("schema_minor", 0))
        for name, spec in datasets.items():
            n, c = len(spec.case_ids), len(spec.classes)
            h, w = spec.map_shape
            g = root.create_group(
                name,
                attributes={
                    "classes": list(spec.classes),
                    "score_kind": spec.score_kind,
                    "unsupported": list(spec.unsupported),
                },
            )
            ids = g.create_array("case_id", shape=(n,), dtype=str, chunks=(n,), dimension_names=("case",))
            ids[:] = np.asarray(spec.case_ids, dtype=str)
            _blocks.create_row_array(g, "scores", shape=(n, c), cases_per_block=cases_per_block, dtype="float32", fill_value=np.nan, dims=("case", "class"))
            if not scores_only:
                _blocks.create_row_array(
                    g, "saliency", shape=(n, c, h, w), cases_per_block=cases_per_block, dtype=map_dtype, fill_value=np.nan, dims=("case", "class", "y", "x")
                )
            _blocks.create_ledger(g, n, cases_per_block)
            if scores_only:
                continue
            if spec.phrases_unsupported:  # with or without the ids (a converted source may not know them)
                g.attrs[UNSUPPORTED_ATTR] = str(spec.phrases_unsupported)
            elif len(spec.query_ids):
                q = len(spec.query_ids)
                a = g.create_array("query_id", shape=(q,), dtype=str, chunks=(q,), dimension_names=("query",))
                a[:] = np.asarray(spec.query_ids, dtype=str)
                _blocks.create_row_array(g, "query_scores", shape=(q,), cases_per_block=cases_per_block, dtype="float32",
                                         fill_value=np.nan, dims=("query",))
                _blocks.create_row_array(g, "query_saliency", shape=(q, 1, h, w), cases_per_block=cases_per_block,
                                         dtype=map_dtype, fill_value=np.nan, dims=("query", "map", "y", "x"))
                _blocks.create_ledger(g, q, cases_per_block, name=QUERY_LEDGER)
                meta["xbench"]["schema_minor"] = max(QUERY_MINOR["submission"], meta["xbench"].get("schema_minor", 0))
        root.attrs.update(meta)

    @classmethod
    def open(cls, path: str | os.PathLike) -> "SubmissionWriter":
        """Open an existing store for writing more blocks (another process, or a resumed run)."""
        path = Path(path)
        group = open_store_group(path, mode="r+")
        if group.attrs.get("xbench", {}).get("kind") != "submission":
            raise InvalidStoreError(Problem(str(path), "is not a submission store"))
        return cls(path, group)

    # -- writing ------------------------------------------------------------------------
    def datasets(self) -> list[str]:
        return sorted(name for name, _ in self._group.groups())

    def _dataset(self, name: str) -> zarr.Group:
        try:
            return self._group[name]
        except KeyError:
            raise InvalidStoreError(Problem(str(self.path), f"has no dataset {name!r}; it has {self.datasets()}")) from None

    def n_blocks(self, dataset: str) -> int:
        g = self._dataset(dataset)
        return _blocks.n_blocks(g["case_id"].shape[0], g["scores"].chunks[0])

    def block_rows(self, dataset: str, block: int) -> tuple[int, int]:
        g = self._dataset(dataset)
        return _blocks.block_rows(g["case_id"].shape[0], g["scores"].chunks[0], block)

    def case_ids(self, dataset: str) -> np.ndarray:
        return read_strings(self._dataset(dataset)["case_id"])

    def blocks_todo(self, dataset: str) -> list[int]:
        return _blocks.blocks_todo(self._dataset(dataset))

    def write_block(self, dataset: str, block: int, scores: np.ndarray, saliency: np.ndarray | None) -> None:
        """Write rows ``block_rows(dataset, block)`` and then mark the block done (a scores-only store drops
        ``saliency``: the model computed its maps, the store has no place for them)."""
        g = self._dataset(dataset)
        start, stop = self.block_rows(dataset, block)
        n = stop - start
        scores = np.asarray(scores, dtype=np.float32)
        if scores.shape != (n, g["scores"].shape[1]):
            raise InvalidStoreError(Problem(f"{dataset}/scores", f"block {block} needs shape {(n, g['scores'].shape[1])}, got {scores.shape}"))
        if "saliency" not in g:
            if not np.isfinite(scores).all():
                raise InvalidStoreError(Problem(dataset, f"block {block} holds non-finite scores"))
            _blocks.writable(g, "scores")[start:stop] = scores
            _blocks.mark_done(g, block)
            return
        sal = _blocks.writable(g, "saliency")
        saliency = np.asarray(saliency)
        if saliency.shape != (n, *sal.shape[1:]):
            raise InvalidStoreError(Problem(f"{dataset}/saliency", f"block {block} needs shape {(n, *sal.shape[1:])}, got {saliency.shape}"))
        if not (np.isfinite(scores).all() and np.isfinite(saliency).all()):
            raise InvalidStoreError(Problem(dataset, f"block {block} holds non-finite scores or map values"))
        _blocks.writable(g, "scores")[start:stop] = scores
        sal[start:stop] = saliency.astype(sal.dtype)
        _blocks.mark_done(g, block)

    # -- phrase rows (one block = cases_per_block query rows, its own ledger) --------------------
    def query_ids(self, dataset: str) -> np.ndarray:
        g = self._dataset(dataset)
        return read_strings(g["query_id"]) if "query_id" in g else np.zeros(0, dtype=str)

    def query_blocks_todo(self, dataset: str) -> list[int]:
        return _blocks.blocks_todo(self._dataset(dataset), name=QUERY_LEDGER)

    def query_block_rows(self, dataset: str, block: int) -> tuple[int, int]:
        g = self._dataset(dataset)
        return _blocks.block_rows(g["query_id"].shape[0], g["query_scores"].chunks[0], block)

    def write_query_block(self, dataset: str, block: int, scores: np.ndarray, saliency: np.ndarray) -> None:
        """Write phrase rows ``query_block_rows(dataset, block)``: scores (n,), maps (n, h, w) or (n, 1, h, w)."""
        g = self._dataset(dataset)
        start, stop = self.query_block_rows(dataset, block)
        n = stop - start
        sal = _blocks.writable(g, "query_saliency")
        scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        saliency = np.asarray(saliency).reshape(saliency.shape[0], 1, *saliency.shape[-2:]) if np.ndim(saliency) >= 3 else np.asarray(saliency)
        if scores.shape != (n,) or saliency.shape != (n, *sal.shape[1:]):
            raise InvalidStoreError(Problem(f"{dataset}/query_saliency", f"query block {block} needs {n} scores and maps of shape "
                                                                         f"{(n, *sal.shape[1:])}, got {scores.shape} and {saliency.shape}"))
        if not (np.isfinite(scores).all() and np.isfinite(saliency).all()):
            raise InvalidStoreError(Problem(dataset, f"query block {block} holds non-finite scores or map values"))
        _blocks.writable(g, "query_scores")[start:stop] = scores
        sal[start:stop] = saliency.astype(sal.dtype)
        _blocks.mark_done(g, block, name=QUERY_LEDGER)

    def is_complete(self) -> bool:
        return all(not _blocks.is_incomplete(self._group[name]) and QUERY_LEDGER not in self._group[name]
                   for name in self.datasets())

    def finish(self) -> None:
        """Check every block is written, drop the ledgers and consolidate metadata."""
        left = {name: self.blocks_todo(name) for name in self.datasets()}
        left.update({f"{name}/query": self.query_blocks_todo(name) for name in self.datasets()})
        left = {k: v for k, v in left.items() if v}
        if left:
            raise InvalidStoreError(
                [Problem(f"{self.path}/{k}", f"{len(v)} block(s) not written yet (first: block {v[0]}); run the writer again to resume") for k, v in left.items()]
            )
        for name in self.datasets():
            _blocks.drop_ledger(self._group[name])
            _blocks.drop_ledger(self._group[name], name=QUERY_LEDGER)
        meta = dict(self._group.attrs["xbench"])
        meta["complete"] = True
        self._group.attrs["xbench"] = meta
        consolidate(self.path)
