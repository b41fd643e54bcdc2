"""What ``xbench human``'s readers marked: one reader's :class:`Mark` of a case and class, and a dataset's
:class:`Reading` (every reader's marks, cases and ground truth). Apart from :mod:`xbench.extract.human`, which
reads CheXlocalize, VinDr-CXR and the phantom, so that each further source (:mod:`xbench.extract.human_reflacx`)
imports the two types without importing the module that dispatches to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Mark", "Reading", "MAX_READERS", "MAX_READERS_PER_IMAGE", "reader_count_problems"]

#: readers one image may have when readers are scored against each other: each reader's truth is the other readers'
#: marks, so the work grows with its square (VinDr-CXR's train split has 3 an image, REFLACX's phases 1-2 five)
MAX_READERS_PER_IMAGE = 32
#: readers one dataset may have: each is written as a submission and scored on its own (REFLACX's phases 1-2 hold
#: a few hundred readings, VinDr-CXR 17 radiologists)
MAX_READERS = 1_000


@dataclass
class Mark:
    """What one reader marked for one case and class: shapes in native pixels and salient points (x, y)."""

    shapes: list = field(default_factory=list)
    points: list = field(default_factory=list)


@dataclass
class Reading:
    """Readers' marks of one dataset: ``marks[reader][case_id][class]``; ``cases[reader]``: the cases each
    reader read (a case a reader read but left unmarked is in it with no marks); ``truth[reader]``: for VinDr,
    the ground truth each reader is scored against, ``{case_id: {class: [per other reader: list of shapes]}}``
    (None: the store given by ``--gt``)."""

    marks: dict[str, dict[str, dict[str, Mark]]]
    cases: dict[str, list[str]]
    truth: dict[str, dict] | None
    files: list[Path]
    notes: list[str] = field(default_factory=list)


def reader_count_problems(readers_of: dict[str, int], source: str) -> list:
    """One line each for the bounds on readers (:data:`MAX_READERS_PER_IMAGE`, :data:`MAX_READERS`), from the
    counts alone (``readers_of``: image -> its readers; the total is the distinct readers, given as ``"*"``),
    before any reader's truth is built: 10,000 readers of one image would otherwise build 10^8 truths."""
    from xbench.schemas.errors import Problem

    total = readers_of.get("*", 0)
    crowded = sorted((n, image) for image, n in readers_of.items() if image != "*" and n > MAX_READERS_PER_IMAGE)
    out = []
    if crowded:
        n, image = crowded[-1]
        out.append(Problem(source, f"{len(crowded):,} image(s) have more than {MAX_READERS_PER_IMAGE} readers (the most: "
                                   f"{image} with {n:,}); readers are scored against each other, at most "
                                   f"{MAX_READERS_PER_IMAGE} an image"))
    if total > MAX_READERS:
        out.append(Problem(source, f"holds {total:,} readers; each is scored on its own, at most {MAX_READERS:,}"))
    return out
