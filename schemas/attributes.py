"""Case attributes in gt.zarr: who the patient is and how the image was taken (gt minor 6; issue 38).

Per dataset group, optionally, a subgroup ``attributes/`` (private: gt.zarr only, never images.zarr) with one
(N,) array per field, aligned with the group's ``case_id``, and the group attribute ``fields`` = {field:
{"kind": "category" | "number", "source": "<the native field it came from>"}}. Category fields are strings,
"" = missing; number fields float32, NaN = missing. Nothing is guessed: a value the native file lacks is
missing. Canonical codings (docs/contract.md, "Case attributes"): ``sex`` "F" | "M" (other native values "O");
``age`` in years; ``view`` the native view position upper-cased ("PA", "AP", "LL", ...); ``site``/``source``
dataset-defined strings.

Written by :func:`xbench.schemas.write_ground_truth` (``attributes=``), checked before writing (:func:`check`)
and by the validator (:func:`validate`: names, kinds, shapes, dtypes, sizes, values), read by the scorer's
``--by`` (:func:`read_attributes`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from xbench.schemas.errors import Problem

#: the gt minor version that adds case attributes
GT_MINOR = 6
GROUP = "attributes"
FIELD_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
KINDS = ("category", "number")
MAX_FIELDS = 32
MAX_TEXT = 64
MAX_CATEGORIES = 1000
#: an age outside [0, 130] years is a forged or broken value, refused (never clipped)
AGE_RANGE = (0.0, 130.0)
#: the fields whose names carry a meaning, and the kind that meaning needs: a file cannot declare ``age`` a category
#: (and so skip the age range) or ``sex`` a number; a field not named here takes the kind its file declares
NAMED_KINDS = {"age": "number", "sex": "category", "view": "category", "site": "category", "source": "category",
               "race": "category", "ethnicity": "category"}
#: the canonical sex codes ("" = missing; docs/contract.md "Case attributes")
SEX_CODES = frozenset({"", "F", "M", "O"})


@dataclass
class Attribute:
    """One field: its values (N,) (str, "" missing; or float, NaN missing), its kind and its native source."""

    values: np.ndarray
    kind: str
    source: str = ""


def category(values, source: str = "") -> Attribute:
    return Attribute(np.asarray(["" if v is None else str(v) for v in values], dtype=str), "category", source)


def number(values, source: str = "") -> Attribute:
    return Attribute(np.asarray([np.nan if v is None else float(v) for v in values], np.float32), "number", source)


def _value_problems(name: str, a: np.ndarray, kind: str, n: int, where: str) -> list[Problem]:
    w = f"{where}/{GROUP}/{name}"
    if a.shape != (n,):
        return [Problem(w, f"has shape {a.shape}, expected ({n},) (one value per case)")]
    if kind == "number":
        if a.dtype != np.float32:
            return [Problem(w, f"has dtype {a.dtype}, expected float32 (NaN = missing)")]
        ok = a[~np.isnan(a)]
        if not np.isfinite(ok).all():
            return [Problem(w, "holds infinite values")]
        if name == "age" and len(ok) and (ok.min() < AGE_RANGE[0] or ok.max() > AGE_RANGE[1]):
            return [Problem(w, f"ages must lie in {AGE_RANGE[0]:g}..{AGE_RANGE[1]:g} years; found "
                               f"{float(ok.min()):g}..{float(ok.max()):g}")]
        return []
    if a.dtype.kind not in "UOT":
        return [Problem(w, f"has dtype {a.dtype}, expected strings (\"\" = missing)")]
    vals = [str(v) for v in a]
    long = [v for v in vals if len(v) > MAX_TEXT or any(ord(ch) < 32 for ch in v)]
    if long:
        return [Problem(w, f"{len(long)} value(s) longer than {MAX_TEXT} characters or holding control characters")]
    if name == "sex" and not set(vals) <= SEX_CODES:
        odd = sorted(set(vals) - SEX_CODES)
        return [Problem(w, f"sex is coded F, M or O (\"\" = missing); found {len(odd):,} other value(s), e.g. {odd[0]!r}")]
    if name == "view" and any(v != v.upper() for v in vals):
        return [Problem(w, "views are upper-cased view positions (PA, AP, LL, ...); found lower-case letters")]
    k = len(set(vals) - {""})
    if k > MAX_CATEGORIES:
        return [Problem(w, f"holds {k:,} distinct values; a category field may hold at most {MAX_CATEGORIES:,}")]
    return []


def kind_problem(name: str, kind: str, where: str) -> list[Problem]:
    """The field's name decides its rules (:data:`NAMED_KINDS`), not the kind a file declares: one line, or none."""
    want = NAMED_KINDS.get(name)
    if want is None or kind == want:
        return []
    what = "ages in years, NaN = missing" if want == "number" else 'codes, "" = missing'
    return [Problem(f"{where}/{GROUP}/{name}", f"a field named {name!r} holds {what}: its kind must be {want}, "
                                               f"not {kind}")]


def check(attributes: Mapping[str, Attribute], n_cases: int, where: str) -> list[Problem]:
    """Every problem of ``attributes`` for a group of ``n_cases`` cases, one line each."""
    p: list[Problem] = []
    if len(attributes) > MAX_FIELDS:
        return [Problem(f"{where}/{GROUP}", f"holds {len(attributes)} fields; the limit is {MAX_FIELDS}")]
    for name, att in attributes.items():
        if not FIELD_NAME.fullmatch(str(name)):
            p.append(Problem(f"{where}/{GROUP}", f"field name {str(name)[:40]!r} is not [a-z][a-z0-9_]{{0,31}}"))
            continue
        if att.kind not in KINDS:
            p.append(Problem(f"{where}/{GROUP}/{name}", f"kind {att.kind!r} is not category or number"))
            continue
        if kind_problem(name, att.kind, where):
            p += kind_problem(name, att.kind, where)
            continue
        p += _value_problems(name, np.asarray(att.values), att.kind, n_cases, where)
    return p


def write_arrays(g, attributes: Mapping[str, Attribute]) -> None:
    """Write checked ``attributes`` under the dataset group ``g`` (the caller raises the store's minor)."""
    sub = g.create_group(GROUP)
    sub.attrs["fields"] = {k: {"kind": a.kind, "source": a.source} for k, a in attributes.items()}
    for name, att in attributes.items():
        v = np.asarray(att.values)
        if att.kind == "number":
            sub.create_array(name, data=v.astype(np.float32), chunks=(max(len(v), 1),), dimension_names=("case",))
        else:
            arr = sub.create_array(name, shape=v.shape, dtype=str, chunks=(max(len(v), 1),), dimension_names=("case",))
            arr[:] = v


def _fields(sub, where: str, p: list[Problem]) -> dict | None:
    fields = sub.attrs.get("fields")
    if not isinstance(fields, dict) or len(fields) > MAX_FIELDS or not all(
            isinstance(v, dict) and v.get("kind") in KINDS for v in fields.values()):
        p.append(Problem(f"{where}/{GROUP}", f"attribute 'fields' must map at most {MAX_FIELDS} field names to "
                                             "{\"kind\": \"category\" | \"number\", \"source\": ...}"))
        return None
    return fields


def validate(g, where: str, minor: int, n_cases: int) -> list[Problem]:
    """The ``attributes/`` subgroup of a gt dataset group from outside; none is fine."""
    import zarr

    from xbench.schemas.store import read_problems

    if GROUP not in g:
        return []
    sub = g[GROUP]
    if not isinstance(sub, zarr.Group):
        return [Problem(f"{where}/{GROUP}", "must be a group of (N,) arrays, one per field")]
    if minor < GT_MINOR:
        return [Problem(f"{where}/{GROUP}", f"case attributes need schema_minor >= {GT_MINOR}; the store declares {minor}")]
    p: list[Problem] = []
    fields = _fields(sub, where, p)
    if fields is None:
        return p
    arrays = set(sub.array_keys())
    for extra in sorted(arrays - set(fields))[:5]:
        p.append(Problem(f"{where}/{GROUP}/{extra}", "is not listed in the group's 'fields'"))
    for name, info in fields.items():
        if not FIELD_NAME.fullmatch(str(name)):
            p.append(Problem(f"{where}/{GROUP}", f"field name {str(name)[:40]!r} is not [a-z][a-z0-9_]{{0,31}}"))
            continue
        if name not in arrays:
            p.append(Problem(f"{where}/{GROUP}/{name}", "is listed in 'fields' but missing"))
            continue
        if kind_problem(name, info["kind"], where):
            p += kind_problem(name, info["kind"], where)
            continue
        arr = sub[name]
        if tuple(arr.shape) != (n_cases,):  # from metadata, before anything is read
            p.append(Problem(f"{where}/{GROUP}/{name}", f"has shape {tuple(arr.shape)}, expected ({n_cases},)"))
            continue
        unsafe = read_problems(arr, f"{where}/{GROUP}/{name}", whole=True)  # codecs, chunks, bombs: metadata
        if unsafe:
            p += unsafe
            continue
        is_text = "str" in str(arr.dtype).lower() or str(arr.dtype).startswith(("<U", "|S", "object"))
        if info["kind"] == "category" and not is_text:
            p.append(Problem(f"{where}/{GROUP}/{name}", f"has dtype {arr.dtype}, expected strings"))
            continue
        try:
            values = _read(arr, info["kind"])
        except Exception as exc:  # noqa: BLE001 - a corrupt chunk: its own line
            p.append(Problem(f"{where}/{GROUP}/{name}", f"unreadable ({type(exc).__name__})"))
            continue
        p += _value_problems(name, values, info["kind"], n_cases, where)
    return p


def _read(arr, kind: str) -> np.ndarray:
    if kind == "category":
        from xbench.schemas.store import read_strings

        return np.asarray(read_strings(arr), dtype=str)
    return np.asarray(arr[...])


def read_attributes(g) -> dict[str, Attribute]:
    """The attributes of a (validated) gt dataset group: {field: Attribute}; {} without any."""
    if GROUP not in g:
        return {}
    sub = g[GROUP]
    out = {}
    for name, info in dict(sub.attrs.get("fields", {})).items():
        v = _read(sub[name], info["kind"])
        out[name] = Attribute(v if info["kind"] == "category" else v.astype(np.float32), info["kind"],
                              str(info.get("source", "")))
    return out


def age_band_labels(edges: tuple[float, ...]) -> list[str]:
    """Labels of the bands cut at ``edges`` (sorted): "<40", "40-59", ..., ">=80" (ages in whole years)."""
    labels = [f"<{edges[0]:g}"]
    labels += [f"{a:g}-{b - 1:g}" for a, b in zip(edges[:-1], edges[1:])]
    return labels + [f">={edges[-1]:g}"]


def banded(values: np.ndarray, edges: tuple[float, ...]) -> np.ndarray:
    """Ages as band labels (:func:`age_band_labels`): a band [a, b) holds a <= age < b; NaN gives "" (missing)."""
    labels = np.asarray(age_band_labels(edges), dtype=object)
    v = np.asarray(values, dtype=np.float64)
    out = labels[np.searchsorted(np.asarray(edges, np.float64), np.nan_to_num(v, nan=0.0), side="right")]
    return np.where(np.isnan(v), "", out).astype(str)
