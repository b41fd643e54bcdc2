"""What ``xbench human``'s readers marked: one reader's :class:`Mark` of a case and class, and a dataset's
:class:`Reading` (every reader's marks, cases and ground truth). Apart from :mod:`xbench.extract.human`, which
reads CheXlocalize, VinDr-CXR and the phantom, so that each further source (:mod:`xbench.extract.human_reflacx`)
imports the two types without importing the module that dispatches to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Mark", "Reading"]


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
