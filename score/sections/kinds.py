"""The two kinds of section plug-in, their hooks' signatures in code: a :class:`RowScope` and a :class:`Track`.

A *section* is a part of metrics.json beside the class rows. Every one is a plug-in module of
:mod:`xbench.score.sections.plugins` defining ``PLUGIN``, an instance of one of the two classes here (a subclass that
overrides the hooks it has, each a method calling the section's code through a real import):

* a :class:`RowScope` has rows of its own, counted beside the finding classes' (the phrase rows, the gaze rows; the
  class rows themselves are the primary scope, ``section`` None): what a bootstrap resample draws (``unit``), the
  metric kinds its rows take (``kinds``; a metric names its scopes, ``Metric.scopes``), the keys an entry reports,
  its row source and estimator (``score``), its paired comparisons and its tables;
* a :class:`Track` has none: it makes its section from the opened run (:meth:`Track.run_section`, handed a
  :class:`RunView`: text probes, robustness) or from the command's own inputs (:meth:`Track.prepare` then
  :meth:`Track.add`, reading the option names in ``options``: human ceilings, subgroups, faithfulness).

Both may write their tables beside metrics.json, print terminal lines, give the report a page fragment, compare two
results and keep their counts in ``pair_counts.npz``; a hook a plug-in does not override does nothing (returns
nothing). Scoring, the outputs, ``xbench report`` and ``xbench compare`` loop over the plug-ins
(:func:`xbench.score.sections.plugins.sections`), so a new section is one module (CONTRIBUTING.md, "A section").
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["RowScope", "RunView", "Section", "Track"]


@dataclass(frozen=True)
class RunView:
    """What a track sees of one scoring run (:meth:`Track.run_section`): the opened stores and what is scored.

    gt, sub: the ground truth and the submission (``xbench.schemas`` readers); scored: the dataset names scored;
    aligned: {dataset: (case_rows, class_cols)}, ``case_rows`` the submission's row of each ground-truth case (-1:
    the submission lacks it); partial: {dataset: (cases present, cases of the ground truth)} of the datasets scored
    on part of their cases; thresholds: the transferred thresholds, or None (searched); class_metrics: the class
    rows' metrics from counts, as the run computes them (``counts, *, bootstrap, seed, thresholds, ...`` ->
    (metrics, per_pair); :func:`xbench.score.scoring.metrics_from_counts`)."""

    gt: Any
    sub: Any
    scored: tuple[str, ...]
    aligned: Mapping[str, tuple]
    partial: Mapping[str, tuple[int, int]]
    thresholds: Mapping | None
    class_metrics: Callable[..., tuple[dict, dict]]

    def cases(self) -> dict[str, Any]:
        """{dataset: bool per ground-truth case} of the datasets scored in part (the cases present)."""
        return {d: self.aligned[d][0] >= 0 for d in self.partial}


class Section:
    """What every section declares and the hooks both kinds share (each does nothing unless overridden).

    name: its name (``Metric.scopes`` names a row scope by it); title: for people; unit: what one bootstrap draw
    takes ("cases", "images"); section: its metrics.json key (None: the top level, the primary scope only); minor:
    the metrics.json schema minor that added it (raised in the header whenever the section is present); order: its
    place among the sections (metrics.json, the outputs, the page), smallest first; saves_counts: True when
    :meth:`save_counts`, :meth:`counts_problems` and :meth:`load_counts` keep its counts in ``pair_counts.npz``."""

    name: ClassVar[str]
    title: ClassVar[str]
    unit: ClassVar[str] = "cases"
    kinds: ClassVar[tuple[str, ...]] = ()
    section: ClassVar[str | None]
    minor: ClassVar[int] = 0
    order: ClassVar[int] = 1000
    saves_counts: ClassVar[bool] = False
    page_at: ClassVar[str] = "results"
    doc: ClassVar[str] = ""

    @property
    def counts_key(self) -> str:
        """The ``pair_counts.npz`` key listing the datasets whose counts of this section the file holds."""
        return f"{self.name}_datasets"

    def ground_truth_problems(self, a: Mapping, b: Mapping) -> list[str]:
        """One line per shared dataset whose two counts (of two results) differ in ground truth."""
        return []

    def paired_rows(self, a: Mapping, b: Mapping, *, bootstrap: int, seed: int, level: float, per_group: bool,
                    cache: dict | None, names: tuple[str, str]) -> list[dict]:
        """Rows of :data:`xbench.score.resampling.bootstrap.PAIRED_COLUMNS` comparing two results' counts, on the
        resamples of the section's own intervals; a non-primary section's rows name its ``section`` as their
        ``dataset`` so the report tells them apart."""
        return []

    def save_counts(self, prefix: str, counts: Any) -> dict[str, Any]:
        """One dataset's counts as ``pair_counts.npz`` arrays, each key starting with ``prefix`` + "." (``prefix``:
        ``"<dataset>.<section>"``)."""
        raise NotImplementedError(f"section {self.name!r} keeps no counts")

    def counts_problems(self, z: Mapping[str, Any], prefix: str, where: str) -> list[str]:
        """One line per problem that makes the arrays of a file from outside unusable (``z``: {key: array});
        every array :meth:`load_counts` indexes with is checked here first."""
        raise NotImplementedError(f"section {self.name!r} keeps no counts")

    def load_counts(self, z: Mapping[str, Any], prefix: str, name: str) -> Any:
        """One dataset's counts from the arrays :meth:`counts_problems` passed."""
        raise NotImplementedError(f"section {self.name!r} keeps no counts")

    def measures(self) -> dict:
        """{key: :class:`xbench.score.metrics.registry.Measure`} of the values the section reports outside the
        metric registry (their titles, whether they print x100, their direction)."""
        return {}

    def write_tables(self, metrics: dict, folder: Path, label: str) -> list[Path]:
        """Its files beside metrics.json (called only when ``metrics`` holds the section); the paths written."""
        return []

    def terminal(self, metrics: dict) -> list[str]:
        """Lines xbench-score prints under a run's overall values (only when ``metrics`` holds the section)."""
        return []

    def page(self, results) -> tuple[list[str], str]:
        """(Markdown lines for leaderboard.md, an HTML fragment for index.html), ([], "") when no result has the
        section; ``page_at``: "results" (before the figures) or "end" (before the definitions)."""
        return [], ""

    def compare(self, a, b) -> list[str]:
        """Lines ``xbench compare`` prints under its table for two results that both hold the section."""
        return []


class RowScope(Section):
    """A section with rows of its own (see the module docstring); ``kinds``: the metric kinds its rows take."""

    kinds: ClassVar[tuple[str, ...]] = ("grounding",)

    def keys(self) -> tuple[str, ...]:
        """The metric keys an entry of the scope reports, in order."""
        raise NotImplementedError

    def score(self, sub, gt, names, *, bootstrap: int, seed: int, where: str, region_problems: list, timings: dict,
              cases: Mapping) -> tuple[dict, dict]:
        """(its metrics.json section, {} when no dataset has rows of the scope; {dataset: counts}). ``cases``:
        {dataset: bool per ground-truth case} of the datasets scored in part. The primary scope's also takes
        ``aligned``, ``progress`` and ``metric_params`` and returns the section {} (the class metrics are computed
        by the orchestration once every scope's regions are checked)."""
        raise NotImplementedError

    def table_rows(self, results) -> list[dict]:
        """Rows per model and dataset of the report's table of the scope ([]: no table)."""
        return []

    def markdown(self, rows: list[dict]) -> str:
        """leaderboard.md's table of :meth:`table_rows`."""
        return ""

    def csv(self, rows: list[dict]) -> str:
        """``<section>.csv`` of :meth:`table_rows`."""
        return ""

    def table(self, results):
        """index.html's table of the scope (an :class:`xbench.score.table.Table`), or None."""
        return None


class Track(Section):
    """A section without rows of its own (see the module docstring); ``options``: the xbench-score option names
    :meth:`prepare` reads."""

    options: ClassVar[tuple[str, ...]] = ()

    def run_section(self, run: RunView, *, bootstrap: int, seed: int, metric_params: Mapping, timings: dict) -> dict:
        """The section from the opened run; {} when the ground truth holds nothing for it."""
        return {}

    def prepare(self, values: Mapping[str, Any], gt, names, submissions) -> Any:
        """The track's own inputs, read and checked before anything is scored (``values``: the xbench-score
        option values by name); None when not asked for (then :meth:`add` is not called)."""
        return None

    def add(self, result, context, *, bootstrap: int, seed: int):
        """``result`` (a ScoreResult) with the section added from :meth:`prepare`'s ``context``."""
        return result
