"""Phrase rows (free-text queries) of a dataset group, shared by the three store kinds.

A dataset group may carry free-text queries: one row per (image, phrase), e.g. MS-CXR's radiologist
sentences. The image is stored once however many phrases it has; each row names its image by
``query_case`` (a row of the group's ``case_id``) and its finding by ``query_category`` (one of the
group's ``classes``), so the scorer treats phrase rows as positive pairs whose "class" is the category.

Arrays per dataset group (all of a store kind's arrays or none; contract §Phrase rows)::

    images.zarr      query_id (Q,) str, query_case (Q,) int64, query_text (Q,) str, query_category (Q,) str
    gt.zarr          query_id (Q,) str, query_case (Q,) int64, query_category (Q,) str,
                     query_mask (Q, H, W) bool   (the union of the phrase's boxes on the grid)
    submission.zarr  query_id (Q,) str, query_scores (Q,) float32, query_saliency (Q, 1, h, w) float16|float32

A store holding them declares ``xbench.schema_minor`` >= :data:`QUERY_MINOR` of its kind (images 2,
ground truth 2, submission 1); stores without them are unchanged. Queries are listed in case order
(``query_case`` non-decreasing), so the queries of a block of cases are one contiguous run of rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import zarr

from xbench.schemas.errors import InvalidStoreError, Problem
from xbench.schemas.remote import RemoteReadError
from xbench.schemas.schema_versions import minor

#: the minor version (root attribute xbench.schema_minor) a store kind needs to hold phrase rows
QUERY_MINOR = {kind: minor(kind, "phrases") for kind in ("images", "ground-truth", "submission")}
IMAGES_ARRAYS = ("query_id", "query_case", "query_text", "query_category")
GT_ARRAYS = ("query_id", "query_case", "query_category", "query_mask")
SUBMISSION_ARRAYS = ("query_id", "query_scores", "query_saliency")
#: dataset attribute of a submission whose model cannot take free text: its reason
UNSUPPORTED_ATTR = "phrases_unsupported"
#: ledger of the phrase-row blocks of a submission being written (beside the case ledger, schemas/_blocks.py)
QUERY_LEDGER = "_query_blocks_done"
QUERY_CHUNK = 256  # query rows per chunk of the mask and map arrays


@dataclass(frozen=True)
class Queries:
    """Phrase rows of one dataset group; ``case`` indexes the group's case rows."""

    id: np.ndarray  # (Q,) str
    case: np.ndarray  # (Q,) int64
    category: np.ndarray  # (Q,) str
    text: np.ndarray | None = None  # (Q,) str (images store only)

    @classmethod
    def of(cls, ids: Sequence[str], case: Sequence[int], category: Sequence[str],
           text: Sequence[str] | None = None) -> "Queries":
        return cls(np.asarray(ids, dtype=str), np.asarray(case, dtype=np.int64).reshape(-1),
                   np.asarray(category, dtype=str), None if text is None else np.asarray(text, dtype=str))

    def __len__(self) -> int:
        return int(self.id.shape[0])

    def subset(self, keep: np.ndarray, new_case: np.ndarray) -> "Queries":
        """The rows ``keep`` (bool), their cases renumbered through ``new_case`` (old row -> new row)."""
        return Queries(self.id[keep], np.asarray(new_case, np.int64)[self.case[keep]], self.category[keep],
                       None if self.text is None else self.text[keep])


def check_queries(q: Queries, n_cases: int, classes: Sequence[str], where: str) -> list[Problem]:
    """Every way ``q`` breaks the rules that hold in every store kind (ids, cases, categories, text)."""
    p: list[Problem] = []
    n = len(q)
    if n == 0:
        return [Problem(where, "phrase rows are present but empty; leave the query arrays out instead")]
    if q.case.shape != (n,) or q.category.shape != (n,) or (q.text is not None and q.text.shape != (n,)):
        return [Problem(where, f"query arrays must all have {n} rows")]
    if len(np.unique(q.id)) != n:
        p.append(Problem(f"{where}/query_id", "query ids repeat"))
    if (q.id == "").any():
        p.append(Problem(f"{where}/query_id", "empty query id"))
    if n and ((q.case < 0).any() or (q.case >= n_cases).any()):
        p.append(Problem(f"{where}/query_case", f"points outside the {n_cases} case rows"))
    elif n > 1 and (np.diff(q.case) < 0).any():
        p.append(Problem(f"{where}/query_case", "must be non-decreasing (queries are listed in case order)"))
    unknown = sorted(set(q.category.tolist()) - set(classes))
    if unknown:
        p.append(Problem(f"{where}/query_category", f"names categories that are not in 'classes': {', '.join(unknown[:5])}"))
    if q.text is not None and (np.char.str_len(q.text) == 0).any():
        p.append(Problem(f"{where}/query_text", f"empty phrase in row {int(np.argmax(np.char.str_len(q.text) == 0))}"))
    return p


def write_query_arrays(g: zarr.Group, q: Queries, *, with_text: bool) -> None:
    """The id, case, category (and text) arrays of ``q`` in group ``g`` (written whole)."""
    n = len(q)
    for name, values in (("query_id", q.id), ("query_category", q.category)) + ((("query_text", q.text),) if with_text else ()):
        a = g.create_array(name, shape=(n,), dtype=str, chunks=(max(n, 1),), dimension_names=("query",))
        a[:] = values
    g.create_array("query_case", data=q.case.astype(np.int64), chunks=(max(n, 1),), dimension_names=("query",),
                   config={"write_empty_chunks": True})


def present(g: zarr.Group, names: Sequence[str]) -> list[str]:
    return [k for k in names if k in g]


def read_queries(g: zarr.Group, *, with_text: bool) -> Queries | None:
    """The phrase rows of group ``g`` (None when it has none)."""
    from xbench.schemas.store import read_strings

    if "query_id" not in g:
        return None
    return Queries(read_strings(g["query_id"]), np.asarray(g["query_case"][...], dtype=np.int64),
                   read_strings(g["query_category"]), read_strings(g["query_text"]) if with_text else None)


def root_minor(group: zarr.Group) -> int:
    meta = group.attrs.get("xbench")
    v = meta.get("schema_minor", 0) if isinstance(meta, dict) else 0
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def declare_minor(root: zarr.Group, kind: str) -> None:
    """Raise the root's ``schema_minor`` to what phrase rows need (never lowers it)."""
    root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": max(QUERY_MINOR[kind], root_minor(root))}


def validate_query_arrays(g: zarr.Group, where: str, kind: str, names: Sequence[str], n_cases: int | None,
                          classes, minor: int, problems: list[Problem]) -> Queries | None:
    """Metadata and content checks of the id/case/category(/text) arrays of a group; the phrase rows or None.

    ``names``: the arrays of this store kind (:data:`IMAGES_ARRAYS`, ...). Their absence is fine; some of
    them only, or a root minor version below :data:`QUERY_MINOR`, is a problem.
    """
    from xbench.schemas.store import check_array, check_strings, get_array, missing_chunks, describe_missing, read_strings

    have = present(g, names)
    if not have:
        return None
    if minor < QUERY_MINOR[kind]:
        problems.append(Problem(where, f"has phrase rows ({', '.join(have)}) but the root attribute xbench.schema_minor "
                                       f"is {minor}; phrase rows need schema_minor >= {QUERY_MINOR[kind]}"))
        return None
    if len(have) != len(names):
        missing = [k for k in names if k not in have]
        problems.append(Problem(f"{where}/{missing[0]}", f"array is missing ({', '.join(have)} present; phrase rows need {', '.join(names)})"))
        return None
    arrays = {k: get_array(g, k, where, problems) for k in names}
    if any(a is None for a in arrays.values()):
        return None
    ok = check_array(arrays["query_id"], f"{where}/query_id", shape=(None,), dtypes=("string",), problems=problems, whole=True)
    q = arrays["query_id"].shape[0] if arrays["query_id"].ndim == 1 else None
    strings = [k for k in ("query_category", "query_text") if k in arrays]
    for k in strings:
        ok &= check_array(arrays[k], f"{where}/{k}", shape=(q,), dtypes=("string",), problems=problems, whole=True)
    if "query_case" in arrays:
        ok &= check_array(arrays["query_case"], f"{where}/query_case", shape=(q,), dtypes=("int64",), problems=problems, whole=True)
    if not ok:
        return None
    for k in ("query_id", "query_case", *strings):
        if k in arrays:
            gone = missing_chunks(arrays[k])
            if gone:
                problems.append(Problem(f"{where}/{k}", describe_missing(arrays[k], gone)))
                ok = False
    if not ok:
        return None
    try:
        ids = read_strings(arrays["query_id"])
        cats = read_strings(arrays["query_category"]) if "query_category" in arrays else None
        text = read_strings(arrays["query_text"]) if "query_text" in arrays else None
        case = np.asarray(arrays["query_case"][...], dtype=np.int64) if "query_case" in arrays else None
    except RemoteReadError:  # the server failed or broke a limit: its own line, not a corrupt array
        raise
    except Exception as exc:  # noqa: BLE001 - a corrupt chunk is a problem, not a traceback
        problems.append(Problem(where, f"phrase rows unreadable ({type(exc).__name__}: {exc})"))
        return None
    check_strings(ids, f"{where}/query_id", "query id", problems)
    if text is not None:
        check_strings(text, f"{where}/query_text", "phrase", problems)
    if case is None:  # a submission: ids only
        if len(np.unique(ids)) != len(ids):
            problems.append(Problem(f"{where}/query_id", "query ids repeat"))
        return Queries(ids, np.zeros(len(ids), np.int64), np.zeros(len(ids), dtype=str))
    queries = Queries(ids, case, cats, text)
    more = check_queries(queries, n_cases if n_cases is not None else 0, classes or (), where)
    problems.extend(more)
    return None if more else queries


def require(q: Queries, n_cases: int, classes, where: str) -> None:
    """Raise :class:`InvalidStoreError` when ``q`` cannot be written (writer side)."""
    p = check_queries(q, n_cases, classes, where)
    if p:
        raise InvalidStoreError(p)
