"""The contract every dataset reader fulfils.

A reader turns one dataset, as downloaded, into :class:`CaseRecord` objects: labels and
regions in the dataset's *native* pixel coordinates, plus a way to load the image. Everything
after that (rasterising regions onto the evaluation grid, resizing images, writing the
stores) is shared code in :mod:`xbench.extract.datasets.prepare`, so each reader only knows
its own file formats.

Coordinates: continuous pixel coordinates of the original image, x to the right, y down,
pixel (row r, col c) covering [c, c+1) x [r, r+1). A box is (x0, y0, x1, y1) with x1 > x0.
"""
from __future__ import annotations

from xbench.schemas.errors import InputError

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence, Union

import numpy as np


@dataclass(frozen=True)
class Box:
    """Axis-aligned box in native continuous pixel coordinates (x0, y0) top-left, (x1, y1) bottom-right."""

    x0: float
    y0: float
    x1: float
    y1: float


@dataclass(frozen=True)
class Polygon:
    """Closed polygon, points as (x, y) in native continuous pixel coordinates."""

    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Mask:
    """A binary mask at native resolution, (height, width), row 0 = top.

    ``load`` is called lazily so that records stay small until the case is prepared.
    """

    load: Callable[[], np.ndarray]


Shape = Union[Box, Polygon, Mask]


@dataclass(frozen=True)
class Phrase:
    """A free-text query about the image (e.g. an MS-CXR sentence): its text, its category (a class of
    the dataset) and the shapes whose union is its region. It becomes one phrase row of the stores."""

    text: str
    category: str
    shapes: tuple


@dataclass
class CaseRecord:
    """One image of a dataset with its annotations, before any resizing.

    ``labels`` maps canonical class name -> 1 present, 0 absent, -1 not annotated; classes the
    reader does not mention are -1. ``regions`` maps canonical class name -> the shapes whose
    union is the radiologist's region (several boxes of one finding are one region).
    ``orig_size`` is (height, width) when known from the annotations, else None and taken from
    the decoded image. ``source`` names the file (and row) the record came from, for messages.
    """

    case_id: str
    image_ref: object
    labels: dict[str, int]
    regions: dict[str, list[Shape]] = field(default_factory=dict)
    orig_size: tuple[int, int] | None = None
    source: str = ""
    phrases: list[Phrase] = field(default_factory=list)  # phrase rows of this image, in order


@dataclass(frozen=True)
class ReadProblem:
    """A problem found while reading native files: which file (and row) and what is wrong.

    ``fatal`` problems stop the run; the others skip the case and are recorded in the store's
    attributes (``skipped``) and in the run summary.
    """

    source: str
    message: str
    case_id: str | None = None
    fatal: bool = False

    def __str__(self) -> str:
        where = f"{self.source}" + (f" [{self.case_id}]" if self.case_id else "")
        return f"{where}: {self.message}"


class DatasetReader(abc.ABC):
    """Reads one dataset from its root folder in its native layout.

    Subclasses set ``key`` (the dataset key of the contract), ``classes`` (canonical finding
    names in column order, the ones this dataset can label) and ``splits`` (the split names
    ``--split`` accepts; the first is the default).
    """

    key: str = ""
    classes: tuple[str, ...] = ()
    grounding_classes: tuple[str, ...] | None = None  # None: every class may carry regions
    splits: tuple[str, ...] = ("test",)

    def __init__(self, root: Path | str, split: str | None = None, **options) -> None:
        self.root = Path(root)
        self.split = split or self.splits[0]
        if self.split not in self.splits:
            raise ReaderOptionError(
                f"unknown split {self.split!r} for dataset {self.key!r}; choose one of {', '.join(self.splits)}"
            )
        self.options = options
        self.problems: list[ReadProblem] = []

    @abc.abstractmethod
    def records(self) -> Sequence[CaseRecord]:
        """Parse the annotation files; no pixels are decoded here.

        Problems that skip a case are appended to ``self.problems``; a fatal one is raised as
        :class:`ReaderError`.
        """

    @abc.abstractmethod
    def load_image(self, record: CaseRecord) -> np.ndarray:
        """Decode the image: (height, width) uint8, brighter = denser, at native resolution."""

    #: folders the organiser allowed links to lead to (``xbench-prepare --allow-links-to DIR``, :meth:`allow_links_to`)
    link_targets: tuple[Path, ...] = ()

    def given_roots(self) -> list[Path]:
        """The folders (and files) the user gave as this dataset's source (a reader with more than --root, such
        as an images folder option, lists them here)."""
        return [self.root]

    def source_roots(self) -> list[Path]:
        """Where every file read must lie once links are resolved: :meth:`given_roots` and the folders allowed
        by :meth:`allow_links_to` (a link in the root that leads anywhere else is refused)."""
        return [*self.given_roots(), *self.link_targets]

    def allow_links_to(self, folders) -> None:
        """Let links under the root lead into ``folders`` (each judged by its real path, so a folder given
        as a link counts as the folder it leads to)."""
        self.link_targets = tuple(Path(f) for f in folders)

    def describe(self) -> dict:
        """Reader options that change the ground truth, recorded in the store's attributes."""
        return {"split": self.split, **{k: v for k, v in self.options.items()}}

    # Optional hooks: a reader whose dataset carries more than labels and regions overrides them. The defaults
    # say "none here", so the preparation step calls them on every reader (no probing for their presence).
    def case_attributes(self, records: Sequence[CaseRecord]) -> dict | None:
        """The case attributes of ``records`` (the prepared cases, in their order) as ``{field: category(...)
        or number(...)}`` of :mod:`xbench.schemas.attributes`, written to gt.zarr's ``attributes/`` subgroup;
        None (the default: a reader that keeps none, or one asked for none) writes no subgroup."""
        return None

    def gaze_readings(self, records: Sequence[CaseRecord], grid: tuple[int, int]):
        """Where radiologists looked on ``records`` (the prepared cases, in their order, each with its
        decoded original size), as :mod:`xbench.schemas.gaze` readings on the evaluation ``grid``; None
        (the default: a dataset without eye tracking, or one asked for none) writes no gaze arrays."""
        return None


class ReaderError(InputError):
    """A problem that makes the dataset unreadable as a whole (missing annotation file, ...)."""


class ReaderOptionError(ReaderError, ValueError):
    """An unknown split, an unknown reader option or a bad option value (exit 2, one line). Also a
    ValueError, as these were before they shared the InputError base."""


def iter_problems(problems: Sequence[ReadProblem]) -> Iterator[str]:
    for p in problems:
        yield str(p)
