"""Every section of metrics.json as a plug-in: one module per section in this package, found by listing it.

Each public module here (a name without a leading underscore) defines ``PLUGIN``, an instance of a
:class:`~xbench.score.sections.kinds.RowScope` or :class:`~xbench.score.sections.kinds.Track` subclass whose hooks
call the section's code through real imports (the kinds and their hooks' signatures:
:mod:`xbench.score.sections.kinds`). Modules are found by listing the package, as the map methods are
(``extract/saliency``), so a new section is one file here plus its code and its test (CONTRIBUTING.md, "A section");
nothing else is edited. Scoring, the outputs, ``xbench report`` and ``xbench compare`` loop over :func:`sections` (in
``order``), :func:`row_scopes` or :func:`tracks`; the layers below them are handed what they loop over, or read
what this module installs into the metric registry when the plug-ins are first loaded (each row scope's metric
kinds, every section's measures: :func:`xbench.score.metrics.registry.set_scopes`).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from xbench.schemas.registry import Registry
from xbench.score.metrics import registry as R
from xbench.score.sections.kinds import RowScope, Section, Track

__all__ = ["SECTIONS", "declared", "row_scope", "row_scopes", "scope_names", "section_of", "sections", "tracks"]


def _listed() -> Registry[Section]:
    found: Registry[Section] = Registry("section", check=Section)
    found.discover(__name__, __path__, attr="PLUGIN")  # every public module here is a section
    return found


#: the section plug-ins by module name (a throw-away one by its own name, :func:`declared`)
SECTIONS: Registry[Section] = _listed()
_ORDERED: list[Section] | None = None


def _load() -> list[Section]:
    """Every plug-in, imported, checked and put in ``order`` (then name); the metric registry told the row
    scopes' metric kinds and the sections' measures."""
    found = sorted((SECTIONS.get(n) for n in SECTIONS.names()), key=lambda s: (s.order, s.name))
    problems, seen = [], set()
    for s in found:
        kind = "row scope" if isinstance(s, RowScope) else "track" if isinstance(s, Track) else None
        if kind is None:
            problems.append(f"section {s.name!r} is neither a RowScope nor a Track")
        if s.name in seen:
            problems.append(f"section {s.name!r} is declared twice")
        seen.add(s.name)
        if s.section is not None and ("." in s.section or s.section == "extra"):
            # pair_counts.npz keys its arrays "<dataset>.<section>.<...>" beside the class rows' "<dataset>.extra.<...>"
            problems.append(f"section {s.name!r}: a section holds no '.' and is not 'extra'")
    primary = [s for s in found if s.section is None]
    if len(primary) != 1 or not isinstance(primary[0], RowScope) or found[0] is not primary[0]:
        problems.append("exactly one row scope (the class rows, first) has no metrics.json section")
    if problems:
        raise ValueError("; ".join(problems))
    R.set_scopes({s.name: s.kinds for s in found if isinstance(s, RowScope)},
                 {k: m for s in found for k, m in s.measures().items()})
    return found


def sections(*, primary: bool = True) -> list[Section]:
    """Every section in order (the class rows first); ``primary=False`` leaves the class rows out."""
    global _ORDERED
    if _ORDERED is None:
        _ORDERED = _load()
    return [s for s in _ORDERED if primary or s.section is not None]


def row_scopes(*, primary: bool = True) -> list[RowScope]:
    """The sections with rows of their own, in order (``primary=False``: without the class rows)."""
    return [s for s in sections(primary=primary) if isinstance(s, RowScope)]


def tracks() -> list[Track]:
    """The sections without rows of their own, in order."""
    return [s for s in sections() if isinstance(s, Track)]


def scope_names() -> tuple[str, ...]:
    return tuple(s.name for s in row_scopes())


def section_of(name: str) -> Section:
    """The section named ``name`` (KeyError for another)."""
    for s in sections():
        if s.name == name:
            return s
    raise KeyError(name)


def row_scope(name: str) -> RowScope:
    s = section_of(name)
    if not isinstance(s, RowScope):
        raise KeyError(name)
    return s


@contextmanager
def declared(*plugins: Section) -> Iterator[tuple[Section, ...]]:
    """Add ``plugins`` (instances) for the duration of a ``with`` block (tests, throw-away sections): each is
    checked with the others, as a module of this package would be."""
    global _ORDERED
    added = []
    try:
        for p in plugins:
            if p.name in SECTIONS:
                raise ValueError(f"section {p.name!r} is already declared")
            SECTIONS.register(p.name, p)
            added.append(p.name)
        _ORDERED = None
        sections()
        yield plugins
    finally:
        for name in added:
            SECTIONS.unregister(name)
        _ORDERED = None
        sections()


def reload() -> None:
    """List the package again (a test that added a module to it, or took one away) and load what it holds."""
    global SECTIONS, _ORDERED
    SECTIONS = _listed()
    _ORDERED = None
    sections()
