"""Per-pair statistics: the columns of ``DatasetCounts.extra`` that the counting pass fills beside |B|, |B∩R|
and the hit, each declared once here (name, dtype, the rows it is defined on, and its kernel hook).

A statistic is computed only when a registered metric needs it: a metric declares the statistics it reads
(``Metric.needs``, :mod:`xbench.score.metrics.registry`), :func:`needed` collects those names over the registry, and
the counting pass (:func:`xbench.score.counting.count_dataset`) allocates and fills exactly those. A new
metric that needs a new per-pair statistic is therefore one :func:`declare` call (here, or beside the metric)
plus the metric with ``needs=(name,)``; :func:`column` and :func:`present` build its ``values`` and ``pairs``
functions (the registry refuses a metric built on them that does not declare the statistic it reads).

A hook is called once per chunk of pairs, on the counting pass's worker thread, with a :class:`Chunk`: the
chunk's raw maps and decoded regions, the resize plan, and what the counting kernel left per pair (energy
share, peak cell) and the run's metric parameters (``chunk.params``, the one resolved ``metric_params``
mapping: a statistic reads its metric's parameter there by name, as the tolerant hit reads
``pointing_tolerance``); it writes the chunk's values into ``out`` in place. It must be thread-safe (it runs on
distinct pairs concurrently) and release the GIL for long work (a ``nogil`` Numba kernel).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from xbench.score.kernels.cnr import _cnr_chunk
from xbench.score.kernels.maps import ResizePlan, _tolerant_hits

__all__ = ["Chunk", "PairStat", "PAIR_STATS", "declare", "declared", "column", "present", "reads_of", "needed",
           "CNR_COLUMN", "ENERGY_COLUMN", "TOLERANT_COLUMN"]

#: The per-pair columns of the energy-based and the tolerant pointing game (their metrics:
#: :mod:`xbench.score.metrics.localisation`, which names them from here).
ENERGY_COLUMN = "energy_share"
TOLERANT_COLUMN = "hit_tolerant"

#: The per-row column of the phrase counts holding the signed CNR of each phrase row, NaN where undefined
#: (:func:`xbench.score.kernels.cnr.cnr_of_pairs`).
CNR_COLUMN = "cnr"


class Chunk(NamedTuple):
    """What a hook sees of one chunk of P pairs of the counting pass."""

    maps: np.ndarray  # (P, h, w) float32 raw maps, C-contiguous
    masks: np.ndarray  # (n, H, W) bool: the decoded region chunk
    local: np.ndarray  # (P,) int64: each pair's row in ``masks``
    plan: ResizePlan  # (h, w) -> (H, W)
    energy: np.ndarray  # (P,) float64: share of the normalised map's mass inside the region
    argmax: np.ndarray  # (P,) int32: flat index of the peak cell of the resized map (-1: a constant map)
    cell: np.ndarray | None  # (P, 2) float64 original pixels per grid cell; None without ``orig_size``
    params: Mapping[str, Any]  # the run's metric parameters, every declared one ({name: value}, checked)


@dataclass(frozen=True)
class PairStat:
    """A per-pair statistic: the ``DatasetCounts.extra`` column ``name`` of dtype ``dtype``, filled by
    ``fill(chunk, out)``. ``scopes``: the row sets it is computed on ("class" rows, "phrase" rows).
    ``needs_orig_size``: computed only when the ground truth gives each case's original size (without it the
    column is absent and the metrics reading it are null)."""

    name: str
    dtype: type
    fill: Callable[[Chunk, np.ndarray], None]
    scopes: tuple[str, ...] = ("class", "phrase")
    needs_orig_size: bool = False
    doc: str = ""


#: Every declared statistic, by name, in declaration order (the order of the ``extra`` columns).
PAIR_STATS: dict[str, PairStat] = {}


def declare(stat: PairStat) -> PairStat:
    """Add ``stat`` (a name already declared is refused: two definitions of one column)."""
    if stat.name in PAIR_STATS:
        raise ValueError(f"per-pair statistic {stat.name!r} is already declared")
    PAIR_STATS[stat.name] = stat
    return stat


@contextmanager
def declared(*stats: PairStat) -> Iterator[tuple[PairStat, ...]]:
    """Declare ``stats`` for the duration of a ``with`` block (tests, throw-away plug-ins)."""
    for s in stats:
        declare(s)
    try:
        yield stats
    finally:
        for s in stats:
            PAIR_STATS.pop(s.name, None)


def column(name: str, dtype) -> Callable:
    """A metric's ``values`` function: the statistic ``name`` of each pair (zeros where the column is absent),
    marked as reading it (:func:`reads_of`; the metric declares it in ``needs``)."""
    def values(v) -> np.ndarray:
        col = v.extra.get(name)
        return np.zeros(v.n_pairs, dtype) if col is None else col

    values.__name__ = f"extra_{name}"
    values.pair_stats = (name,)
    return values


def present(name: str) -> Callable:
    """A metric's ``pairs`` function: the pairs whose statistic ``name`` was computed (none when absent)."""
    def pairs(v) -> np.ndarray:
        # counts saved before the column existed have none: the metric is then null, never wrong
        return np.full(v.n_pairs, name in v.extra, dtype=bool)

    pairs.__name__ = f"has_{name}"
    pairs.pair_stats = (name,)
    return pairs


def reads_of(fn) -> tuple[str, ...]:
    """The statistics a function built by :func:`column` / :func:`present` reads (() for any other)."""
    return tuple(getattr(fn, "pair_stats", ()))


def needed(metrics: Iterable, scope: str, *, orig_size: bool) -> list[PairStat]:
    """The declared statistics some metric of ``metrics`` (registered metrics, every scope) needs
    (``Metric.needs``), that are defined on ``scope`` rows and computable (``orig_size``: the ground truth gives
    original sizes), in declaration order."""
    names: set[str] = set()
    for m in metrics:
        names.update(m.needs)
    return [s for s in PAIR_STATS.values() if s.name in names and scope in s.scopes
            and (orig_size or not s.needs_orig_size)]


# -------------------------------------------------------------------------------------- the statistics
def _energy(chunk: Chunk, out: np.ndarray) -> None:
    out[:] = chunk.energy  # the counting kernel computes it anyway (one pass over the resized map)


def _tolerant(chunk: Chunk, out: np.ndarray) -> None:
    _tolerant_hits(chunk.masks, chunk.local, chunk.argmax, chunk.cell, float(chunk.params["pointing_tolerance"]), out)


def _cnr(chunk: Chunk, out: np.ndarray) -> None:
    p = chunk.plan
    _cnr_chunk(chunk.maps, chunk.masks, chunk.local, p.area, p.row_idx, p.row_w, p.col_idx, p.col_w, out)


# Energy is kept on phrase rows too, though no phrase metric reads it yet: pair_counts.npz has always
# carried it there.
declare(PairStat(ENERGY_COLUMN, np.float64, _energy, doc="share of the normalised map's mass inside the region"))
declare(PairStat(TOLERANT_COLUMN, np.bool_, _tolerant, needs_orig_size=True,
                 doc="is a region cell within the tolerance of the map's peak"))
declare(PairStat(CNR_COLUMN, np.float64, _cnr, scopes=("phrase",),
                 doc="signed contrast-to-noise ratio of the map against the region (NaN where undefined)"))
