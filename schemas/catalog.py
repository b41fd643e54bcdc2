"""The dataset catalog: every dataset key of the contract and what it is called, from ``datasets.toml``.

One source for the keys (``xbench.schemas.DATASET_KEYS``), the tables' column titles and order
(``xbench.score.outputs.tables.DATASET_TITLES``), the data cards' index and the docs' key lists (checked by
tests/schemas/test_catalog.py). Pure Python (tomllib): importing it loads neither zarr nor numpy.

>>> keys()[:2]
('rsna_pneumonia', 'siim_acr')
>>> entry("chestx_det10").title
'CheXDet-10'
>>> paper_keys()[-1]
'vindr_cxr'
"""
from __future__ import annotations

from xbench.schemas.errors import InputError

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources

__all__ = ["CatalogError", "Dataset", "card_path", "entry", "keys", "paper_keys", "table_order", "titles"]

_FIELDS = ("name", "title", "annotation", "access", "paper")


class CatalogError(InputError, ValueError):
    """datasets.toml is inconsistent (a missing field, a key missing from table_order, ...)."""


@dataclass(frozen=True)
class Dataset:
    """One catalog entry (see datasets.toml for the meaning of each field)."""

    key: str
    name: str
    title: str
    annotation: str
    access: str
    paper: bool


def parse(doc: dict) -> tuple[tuple[Dataset, ...], tuple[str, ...]]:
    """(entries in file order, table order) from the parsed TOML document; every problem in one error."""
    problems, entries = [], []
    for key, spec in doc.get("datasets", {}).items():
        missing = [f for f in _FIELDS if f not in spec]
        unknown = sorted(set(spec) - set(_FIELDS))
        if missing:
            problems.append(f"dataset {key!r}: missing {', '.join(missing)}")
        if unknown:
            problems.append(f"dataset {key!r}: unknown field(s) {', '.join(unknown)}")
        if not (key.isidentifier() and key == key.lower()):
            problems.append(f"dataset {key!r}: a key is a lower-case identifier")
        if not missing and not isinstance(spec["paper"], bool):
            problems.append(f"dataset {key!r}: paper must be true or false")
        if not missing and not unknown:
            entries.append(Dataset(key, **{f: spec[f] for f in _FIELDS}))
    order = tuple(doc.get("table_order", ()))
    known = list(doc.get("datasets", {}))
    if sorted(order) != sorted(known):
        problems.append(f"table_order must list every dataset key once: it has {list(order)}, the keys are {known}")
    if problems:
        raise CatalogError("datasets.toml is inconsistent:\n" + "\n".join(problems))
    return tuple(entries), order


@functools.cache
def _catalog() -> tuple[dict[str, Dataset], tuple[str, ...]]:
    text = resources.files(__package__).joinpath("datasets.toml").read_text(encoding="utf-8")
    entries, order = parse(tomllib.loads(text))
    return {d.key: d for d in entries}, order


def keys() -> tuple[str, ...]:
    """Every dataset key, in the contract's order (the file's)."""
    return tuple(_catalog()[0])


def paper_keys() -> tuple[str, ...]:
    """The paper's seven evaluation sets, in the contract's order."""
    return tuple(k for k, d in _catalog()[0].items() if d.paper)


def entry(key: str) -> Dataset:
    """The catalog entry of ``key``; ``KeyError`` naming the known keys for another."""
    try:
        return _catalog()[0][key]
    except KeyError:
        raise KeyError(f"unknown dataset key {key!r}; expected one of {', '.join(keys())}") from None


def table_order() -> tuple[str, ...]:
    """Every key in the paper's Table 1 column order."""
    return _catalog()[1]


def titles() -> dict[str, str]:
    """{key: table column title}, in :func:`table_order`."""
    return {k: _catalog()[0][k].title for k in table_order()}


def card_path(key: str) -> str:
    """The data card of ``key``, relative to the repository root."""
    return f"data_cards/{entry(key).key}.md"
