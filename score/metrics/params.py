"""A metric's parameters, declared on the metric (:attr:`xbench.score.metrics.registry.Metric.params`), as an
augmentation declares its own (:class:`xbench.schemas.augment._base.Param`): name, type, default, range, help.

The default is written once, here in the declaration the metric carries; the scorer's ``--pointing-tolerance``
flag, the counting pass, the robustness track and metrics.json's ``pointing_tolerance_px`` read it from there.
A run's values travel as one mapping, ``metric_params`` ({parameter name: value}), resolved by :func:`resolve`
(declared defaults filled in, every value checked). Light (the standard library and the scorer's error
type), so :mod:`xbench.score.options` can read a default without importing the scorer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from xbench.score.errors import ScoreInputError

__all__ = ["MetricParam", "POINTING_TOLERANCE", "resolve"]


@dataclass(frozen=True)
class MetricParam:
    """One parameter of a metric: its name (the key of ``metric_params``), type (int or float), default and
    inclusive range, help (with the unit)."""

    name: str
    kind: type
    default: float | int
    low: float | int = -math.inf
    high: float | int = math.inf
    help: str = ""

    def check(self, value: Any) -> str | None:
        """The problem with ``value`` in words, or None."""
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.kind is int:
            number = number and isinstance(value, int)
        ok = number and math.isfinite(value) and self.low <= value <= self.high
        if ok:
            return None
        kind = "an integer" if self.kind is int else "a finite number"
        bound = f" >= {self.low:g}" if math.isinf(self.high) else f" in [{self.low:g}, {self.high:g}]"
        return f"{self.name} must be {kind}{bound}; got {value!r}"


#: The tolerant pointing game's distance, in original image pixels: Zhang et al. (2018), excitation backprop,
#: count a hit within 15 pixels of the region. Declared on the metric ``tolerant_pointing_game``.
POINTING_TOLERANCE = MetricParam(
    "pointing_tolerance", float, 15.0, 0.0, 100_000.0,  # past the diagonal of the largest original image
    help="Tolerant pointing game: a hit when the map's peak lies within PX original pixels of the region "
         "(Zhang et al. 2018).")


def resolve(declared: Iterable[MetricParam], given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """{name: value} of every declared parameter: ``given``'s value where it has one, else the declared default.
    Raises :class:`ScoreInputError` (a ValueError) naming every problem (one a line): a value out of its range, a name no metric declares."""
    declared = {p.name: p for p in declared}
    given = dict(given or {})
    problems = [f"unknown metric parameter {k!r}; known: {', '.join(sorted(declared)) or 'none'}"
                for k in sorted(set(given) - set(declared))]
    out = {}
    for name, p in declared.items():
        value = given.get(name, p.default)
        problem = p.check(value)
        if problem:
            problems.append(problem)
        out[name] = value if p.kind is not float or problem else float(value)
    if problems:
        raise ScoreInputError(problems)
    return out
