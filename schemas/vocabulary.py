"""The canonical finding vocabulary and each dataset's native-to-canonical label mapping.

Everything is read from ``findings.toml`` next to this module, the single machine-readable
source that the readers, the extractors (prompt text) and the data cards all use. It lives in
``xbench.schemas`` because both sides import it: the readers (``xbench.extract.datasets``) and the models
(``xbench.extract.models``), which never import the readers.

>>> canonical("chestxray14", "Infiltrate")
'Infiltration'
>>> classes_for("siim_acr")
('Pneumothorax',)
>>> prompts("Pleural effusion").negative[0]
'No pleural effusion'
"""
from __future__ import annotations

from xbench.schemas.errors import InputError

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Mapping

__all__ = [
    "Finding",
    "Prompts",
    "UnknownLabelError",
    "VocabularyError",
    "canonical",
    "classes_for",
    "dataset_keys",
    "finding",
    "findings",
    "grounding_classes_for",
    "is_ignored",
    "is_no_finding",
    "native_labels",
    "prompts",
]


class VocabularyError(InputError, ValueError):
    """findings.toml is inconsistent (a class without a definition, a dangling mapping, ...)."""


class UnknownLabelError(InputError, KeyError):
    """A native label (or dataset, or canonical name) that the vocabulary does not know."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Prompts:
    """Zero-shot prompt texts for one finding: ``positive[i]`` pairs with ``negative[i]``."""

    positive: tuple[str, ...]
    negative: tuple[str, ...]


@dataclass(frozen=True)
class Finding:
    """One canonical finding: its name, a one-sentence definition, prompts and optional parent."""

    name: str
    definition: str
    prompts: Prompts
    parent: str | None = None


@dataclass(frozen=True)
class _DatasetVocab:
    classes: tuple[str, ...]
    grounding: tuple[str, ...]
    labels: Mapping[str, str]
    ignore: frozenset[str]
    no_finding: frozenset[str]


@dataclass(frozen=True)
class _Vocabulary:
    findings: Mapping[str, Finding]
    datasets: Mapping[str, _DatasetVocab]


def _parse(doc: dict) -> _Vocabulary:
    """Build and cross-check the vocabulary from the parsed TOML document."""
    problems: list[str] = []
    found: dict[str, Finding] = {}
    for name, spec in doc.get("findings", {}).items():
        pos, neg = tuple(spec.get("positive", ())), tuple(spec.get("negative", ()))
        if not pos or len(pos) != len(neg):
            problems.append(f"finding {name!r}: needs >= 1 positive prompt and as many negative prompts")
        if not spec.get("definition"):
            problems.append(f"finding {name!r}: no definition")
        found[name] = Finding(name, spec.get("definition", ""), Prompts(pos, neg), spec.get("parent"))
    for f in found.values():
        if f.parent is not None and f.parent not in found:
            problems.append(f"finding {f.name!r}: parent {f.parent!r} is not a finding")

    datasets: dict[str, _DatasetVocab] = {}
    for key, spec in doc.get("datasets", {}).items():
        classes = tuple(spec.get("classes", ()))
        labels = dict(spec.get("labels", {}))
        grounding = tuple(spec.get("grounding", classes))
        for c in classes:
            if c not in found:
                problems.append(f"dataset {key!r}: class {c!r} is not defined under [findings]")
        if len(set(classes)) != len(classes):
            problems.append(f"dataset {key!r}: repeated class in {list(classes)}")
        for native, canon in labels.items():
            if canon not in classes:
                problems.append(f"dataset {key!r}: native {native!r} maps to {canon!r}, not one of its classes")
        for c in set(classes) - set(labels.values()):
            problems.append(f"dataset {key!r}: class {c!r} has no native label mapping to it")
        for c in grounding:
            if c not in classes:
                problems.append(f"dataset {key!r}: grounding class {c!r} is not one of its classes")
        datasets[key] = _DatasetVocab(
            classes,
            grounding,
            MappingProxyType(labels),
            frozenset(spec.get("ignore", ())),
            frozenset(spec.get("no_finding", ())),
        )
    if problems:
        raise VocabularyError("findings.toml is inconsistent:\n" + "\n".join(problems))
    return _Vocabulary(MappingProxyType(found), MappingProxyType(datasets))


@functools.cache
def _vocab() -> _Vocabulary:
    text = resources.files(__package__).joinpath("findings.toml").read_text(encoding="utf-8")
    return _parse(tomllib.loads(text))


def _dataset(dataset: str) -> _DatasetVocab:
    try:
        return _vocab().datasets[dataset]
    except KeyError:
        known = ", ".join(sorted(_vocab().datasets))
        raise UnknownLabelError(f"unknown dataset {dataset!r}; the vocabulary knows {known}") from None


def dataset_keys() -> tuple[str, ...]:
    """Dataset keys that have a mapping, in file order."""
    return tuple(_vocab().datasets)


def findings() -> tuple[Finding, ...]:
    """Every canonical finding, sorted by name."""
    return tuple(sorted(_vocab().findings.values(), key=lambda f: f.name.lower()))


def finding(name: str) -> Finding:
    """The canonical finding called ``name`` (exact spelling)."""
    try:
        return _vocab().findings[name]
    except KeyError:
        raise UnknownLabelError(f"unknown finding {name!r}; known: {', '.join(f.name for f in findings())}") from None


def prompts(name: str) -> Prompts:
    """Positive and negative prompt texts of a canonical finding."""
    return finding(name).prompts


def classes_for(dataset: str) -> tuple[str, ...]:
    """Canonical class names of ``dataset`` in store column order."""
    return _dataset(dataset).classes


def grounding_classes_for(dataset: str) -> tuple[str, ...]:
    """The subset of :func:`classes_for` that can carry regions (all of them unless stated)."""
    return _dataset(dataset).grounding


def canonical(dataset: str, native_label: str) -> str:
    """Map a native label of ``dataset`` (exact, case-sensitive spelling) to its canonical name.

    Raises :class:`UnknownLabelError` for a label the mapping does not list (including the
    ignored and no-finding labels, which are not findings; test them with :func:`is_ignored`
    and :func:`is_no_finding` first).
    """
    ds = _dataset(dataset)
    try:
        return ds.labels[native_label]
    except KeyError:
        known = ", ".join(repr(k) for k in ds.labels)
        raise UnknownLabelError(f"unknown {dataset} label {native_label!r}; known labels: {known}") from None


def native_labels(dataset: str, canonical_name: str) -> tuple[str, ...]:
    """Every native spelling of ``dataset`` that maps to ``canonical_name`` (may be empty)."""
    return tuple(n for n, c in _dataset(dataset).labels.items() if c == canonical_name)


def is_ignored(dataset: str, native_label: str) -> bool:
    """True for native labels deliberately dropped (e.g. COVID-rural lung outlines)."""
    return native_label in _dataset(dataset).ignore


def is_no_finding(dataset: str, native_label: str) -> bool:
    """True for native labels that mean "no finding" (e.g. VinDr 'No finding')."""
    return native_label in _dataset(dataset).no_finding
