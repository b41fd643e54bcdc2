"""Text probes in a ground-truth store (gt minor 4): which phrase rows are probes, and of which phrase.

``xbench-prepare --text-probes`` adds, beside each phrase row, probe phrases (negated, sides swapped, words
shuffled; the rules: :mod:`xbench.extract.datasets.text_probes`) as ordinary phrase rows with their own ids.
The public images store cannot tell them apart; the private ground truth says which is which, in two
arrays aligned with its phrase rows::

    query_probe_of    (Q,) str   the id of the probe's original phrase row; "" for an original
    query_probe_kind  (Q,) str   one of KINDS for a probe; "" for an original

Both or neither; a store holding them declares ``xbench.schema_minor`` >= :data:`PROBE_MINOR`. A probe names
an original row (one whose kind is "") of the same image and category, and its region is that row's region.
The scorer leaves probe rows out of every phrase metric and reports them in metrics.json's ``text_probes``
section (:mod:`xbench.score.sections.probes`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import zarr

from xbench.schemas.errors import Problem
from xbench.schemas.schema_versions import minor

__all__ = ["KINDS", "PROBE_ARRAYS", "PROBE_MINOR", "TextProbes", "check_probes", "write_probe_arrays",
           "read_probes", "validate_probe_arrays"]

#: the probe kinds (contract §Text probes)
KINDS = ("negation", "laterality", "shuffle")
PROBE_ARRAYS = ("query_probe_of", "query_probe_kind")
#: the ground-truth minor version that adds the probe arrays
PROBE_MINOR = minor("ground-truth", "text_probes")


@dataclass(frozen=True)
class TextProbes:
    """Per phrase row: ``of`` the original's id ("" for an original), ``kind`` ("" for an original)."""

    of: np.ndarray
    kind: np.ndarray

    @property
    def is_probe(self) -> np.ndarray:
        return self.kind != ""


def check_probes(ids: np.ndarray, case: np.ndarray, category: np.ndarray, probes: TextProbes, where: str) -> list[Problem]:
    """Every way ``probes`` disagrees with the phrase rows it describes (one problem per rule broken)."""
    n = len(ids)
    of, kind = np.asarray(probes.of, dtype=str), np.asarray(probes.kind, dtype=str)
    if of.shape != (n,) or kind.shape != (n,):
        return [Problem(where, f"query_probe_of and query_probe_kind must have one entry per phrase row ({n})")]
    p: list[Problem] = []
    unknown = sorted(set(kind.tolist()) - {"", *KINDS})
    if unknown:
        p.append(Problem(f"{where}/query_probe_kind", f"unknown probe kind(s) {', '.join(map(repr, unknown[:5]))}; "
                                                      f"the kinds are {', '.join(KINDS)} (\"\" for an original phrase)"))
    mismatch = (of == "") != (kind == "")
    if mismatch.any():
        p.append(Problem(where, f"phrase row {int(np.argmax(mismatch))}: query_probe_of and query_probe_kind must be "
                                "both empty (an original phrase) or both set (a probe)"))
    original = kind == ""
    if not original.any():
        p.append(Problem(f"{where}/query_probe_kind", "every phrase row is a probe; probes need original phrases"))
    row_of = {q: r for r, q in enumerate(np.asarray(ids, dtype=str).tolist()) if original[r]}
    for r in np.flatnonzero(~original & ~mismatch).tolist():
        src = row_of.get(str(of[r]))
        if src is None:
            p.append(Problem(f"{where}/query_probe_of", f"phrase row {r} is a probe of {str(of[r])!r}, which is not an "
                                                        "original phrase row of this dataset"))
            break
        if case[src] != case[r] or category[src] != category[r]:
            p.append(Problem(f"{where}/query_probe_of", f"phrase row {r} is a probe of row {src} but names another "
                                                        "image or category"))
            break
    return p


def write_probe_arrays(g: zarr.Group, probes: TextProbes) -> None:
    for name, values in zip(PROBE_ARRAYS, (probes.of, probes.kind)):
        n = len(values)
        a = g.create_array(name, shape=(n,), dtype=str, chunks=(max(n, 1),), dimension_names=("query",))
        a[:] = np.asarray(values, dtype=str)


def read_probes(g: zarr.Group) -> TextProbes | None:
    from xbench.schemas.store import read_strings

    if PROBE_ARRAYS[0] not in g:
        return None
    return TextProbes(read_strings(g[PROBE_ARRAYS[0]]), read_strings(g[PROBE_ARRAYS[1]]))


def validate_probe_arrays(g: zarr.Group, where: str, minor: int, queries) -> list[Problem]:
    """The probe arrays of a ground-truth group against its phrase rows ``queries`` (None: the group has
    none, or they are broken and reported elsewhere)."""
    from xbench.schemas.store import check_array, check_strings, describe_missing, get_array, missing_chunks, read_strings

    have = [k for k in PROBE_ARRAYS if k in g]
    if not have:
        return []
    p: list[Problem] = []
    if minor < PROBE_MINOR:
        return [Problem(where, f"has text probes ({', '.join(have)}) but the root attribute xbench.schema_minor is "
                               f"{minor}; text probes need schema_minor >= {PROBE_MINOR}")]
    if len(have) != len(PROBE_ARRAYS):
        missing = [k for k in PROBE_ARRAYS if k not in have][0]
        return [Problem(f"{where}/{missing}", f"array is missing (text probes need {', '.join(PROBE_ARRAYS)})")]
    if "query_id" not in g:
        return [Problem(where, "has text probes but no phrase rows")]
    if queries is None:
        return []
    arrays = {k: get_array(g, k, where, p) for k in PROBE_ARRAYS}
    if any(a is None for a in arrays.values()):
        return p
    ok = all([check_array(arrays[k], f"{where}/{k}", shape=(len(queries),), dtypes=("string",), problems=p, whole=True)
              for k in PROBE_ARRAYS])
    if not ok:
        return p
    for k, a in arrays.items():
        gone = missing_chunks(a)
        if gone:
            return p + [Problem(f"{where}/{k}", describe_missing(a, gone))]
    try:
        of, kind = (read_strings(arrays[k]) for k in PROBE_ARRAYS)
    except Exception as exc:  # noqa: BLE001 - a corrupt chunk is a problem, not a traceback
        return p + [Problem(where, f"text probes unreadable ({type(exc).__name__}: {exc})")]
    check_strings(of, f"{where}/query_probe_of", "query id", p)
    return p + check_probes(queries.id, queries.case, queries.category, TextProbes(of, kind), where)
