"""Row scopes: the sets of rows the scorer computes metrics on, each declared once.

A row scope says which rows of a dataset its metrics are computed on, and everything the pipeline does
differently for them: how its rows are gathered and counted (its row source), what a bootstrap resample
draws (its resample unit: the cases of a dataset for class rows; the *images* for phrase rows, because one
image carries several phrases), the keys its entries report, its estimator (the replicates), its paired
comparison rows and its tables. Scoring (:mod:`xbench.score.scoring`), paired comparisons
(:func:`xbench.score.resampling.bootstrap.paired_bootstrap`) and the report's tables loop over :func:`row_scopes`, and a
metric names the scopes it is computed on (``Metric.scopes``, checked against :func:`scope_names`), so a new
row scope (perturbed copies of the images, text probes) is one :func:`declare_scope` call plus its code.

Built-in scopes:

``"class"`` (the primary scope)
    the positive (and labelled) pairs of each finding class; metrics.json's top level ("overall",
    "datasets"); resamples cases. Its ``score`` (:func:`xbench.score.scoring.count_classes`) is the counting
    pass alone: it also takes the aligned case rows and class columns, the progress bar and the pointing
    tolerance, and returns no section, because the class metrics (thresholds searched or transferred, the
    pairs table) are computed by the orchestration once every scope's regions are checked.
``"phrase"``
    the phrase rows of each category (:mod:`xbench.score.sections.phrases`); metrics.json "phrases"; resamples images.

Behaviour is given as callables or as lazy ``"package.module:attr"`` references imported on first use (the
shared plug-in registry's convention): this module sits at the bottom of ``score/`` (it imports nothing of
it), so every layer can read the declarations, and the modules that implement a scope never import the
modules that loop over it.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from xbench.schemas.schema_versions import minor as schema_minor  # the one versions table

__all__ = ["RowScope", "ROW_SCOPES", "declare_scope", "declared_scopes", "row_scope", "row_scopes", "scope_names"]

#: a behaviour of a scope: a callable, or "package.module:attr" imported on first use
Ref = Callable | str | None


@dataclass(frozen=True)
class RowScope:
    """One row scope (see the module docstring).

    name: the ``Metric.scopes`` value; title: for people; unit: what one bootstrap draw takes ("cases",
    "images"); kinds: the metric kinds computed on its rows; section: its metrics.json key (None: the top
    level, the primary scope); minor: the metrics.json schema minor that added the section.

    Behaviour (callables or lazy references; None where the scope has none):

    * ``keys()``: the metric keys an entry of the scope reports, in order;
    * ``score(sub, gt, names, *, bootstrap, seed, where, region_problems, timings, cases)``: its metrics.json
      section ({} when no dataset has rows of the scope) and {dataset: counts}; the primary scope's also takes
      ``aligned``, ``progress`` and ``metric_params`` and returns the section {} (see above);
    * ``ground_truth_problems(a, b)``: one line per shared dataset whose two counts differ in ground truth;
    * ``paired_rows(a, b, *, bootstrap, seed, level, per_group, cache, names)``: rows of
      :data:`xbench.score.resampling.bootstrap.PAIRED_COLUMNS` comparing two submissions' counts of the scope, on the
      resamples of its own intervals (its estimator: :func:`xbench.score.resampling.bootstrap.phrase_replicates` draws
      images); a non-primary scope's rows name its ``section`` as their ``dataset`` ("phrases",
      "phrases/<dataset>") so the report tells them apart;
    * ``table_rows(results)``, ``markdown(rows)``, ``csv(rows)``, ``table(results)``: the report's table of
      the scope (rows per model and dataset; leaderboard.md; ``<section>.csv``; index.html), for a scope the
      report shows apart from the primary tables;
    * ``measures()``: {key: :class:`xbench.score.metrics.registry.Measure`} of the values the scope reports
      outside the metric registry (the gaze measures): their titles, whether they print x100, and their
      direction, for every table and comparison (:func:`xbench.score.metrics.registry.shown_as`);
    * ``save_counts(prefix, counts)``, ``counts_problems(z, prefix, where)``, ``load_counts(z, prefix, name)``:
      one dataset's counts in ``pair_counts.npz`` (:mod:`xbench.score.kernels.counts`), so that ``xbench compare``
      and ``xbench report`` compare the scope from result folders. ``save_counts`` returns the arrays, each
      key starting with ``prefix`` (``"<dataset>.<section>"``; the file lists the datasets under
      :attr:`counts_key`); ``counts_problems`` says, one line each, what makes the arrays of a file from
      outside unusable (``z``: {key: array}; every array the scope indexes with is checked here, before
      ``load_counts`` builds the counts from them). A scope without them is not saved (its comparisons
      then need the scoring run's own counts).

    A *track* is the same kind without rows of its own (``score`` None): its section of metrics.json is made
    by one of two hooks, and it shows itself through the others (each None where the track has none):

    * ``run_section(run, *, bootstrap, seed, metric_params, timings)``: the section from the opened run
      (:class:`xbench.score.scoring._Run`: sub, gt, scored, aligned, partial, thresholds); {} when the ground
      truth holds nothing for it (text probes, perturbed copies);
    * ``prepare(values, gt, names, submissions)``: the track's own inputs, read and checked before anything is
      scored (``values``: the xbench-score option values by name; ``options`` names those it reads); None when
      not asked for; then ``add(result, context, *, bootstrap, seed)`` adds the section to a ScoreResult;
    * ``write_tables(metrics, folder, label)``: its files beside metrics.json (only when its section is there);
    * ``page(results)``: (Markdown lines for leaderboard.md, an HTML fragment for index.html), ([], "") when no
      result has the section; ``page_at``: "results" (before the figures) or "end" (before the definitions);
    * ``terminal(metrics)``: lines xbench-score prints under a run's overall values;
    * ``compare(a, b)``: lines ``xbench compare`` prints under its table for two results (report Results) that
      both hold the section ([] when there is nothing to say); ``--json`` gives them under ``"sections"``.

    ``minor`` is raised in metrics.json's header whenever the section is present. Scoring, the CLI, the
    outputs and the report loop over the declared scopes; a new track is one :func:`declare_scope` call and
    its module (CONTRIBUTING.md, "A section").
    """

    name: str
    title: str
    unit: str
    kinds: tuple[str, ...] = ("grounding",)
    section: str | None = None
    minor: int = 0
    keys: Ref = None
    score: Ref = None
    ground_truth_problems: Ref = None
    paired_rows: Ref = None
    table_rows: Ref = None
    markdown: Ref = None
    csv: Ref = None
    table: Ref = None
    measures: Ref = None
    save_counts: Ref = None
    counts_problems: Ref = None
    load_counts: Ref = None
    # -- a track: a section of metrics.json computed from the run or from the command's own inputs
    run_section: Ref = None
    prepare: Ref = None
    add: Ref = None
    write_tables: Ref = None
    page: Ref = None
    page_at: str = "results"
    compare: Ref = None
    terminal: Ref = None
    options: tuple[str, ...] = ()
    doc: str = field(default="", compare=False)

    @property
    def rows(self) -> bool:
        """True for a scope of rows counted beside the class rows (``score``); False for a track."""
        return self.score is not None

    @property
    def counts_key(self) -> str:
        """The ``pair_counts.npz`` key listing the datasets whose counts of this scope the file holds."""
        return f"{self.name}_datasets"

    @property
    def saved(self) -> bool:
        """True when the scope's counts are written to (and read back from) ``pair_counts.npz``."""
        return None not in (self.save_counts, self.counts_problems, self.load_counts)

    def fn(self, what: str) -> Callable | None:
        """The behaviour ``what`` as a callable (a lazy reference imported now), or None."""
        ref = getattr(self, what)
        if ref is None or callable(ref):
            return ref
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)


#: Every declared scope by name, in declaration order (the order scoring, comparisons and tables use).
ROW_SCOPES: dict[str, RowScope] = {}


def declare_scope(scope: RowScope) -> RowScope:
    """Add ``scope`` (a name already declared is refused: two definitions of one scope)."""
    if scope.name in ROW_SCOPES:
        raise ValueError(f"row scope {scope.name!r} is already declared")
    if scope.section is not None and ("." in scope.section or scope.section == "extra"):
        # pair_counts.npz keys its arrays "<dataset>.<section>.<...>" beside the class rows' "<dataset>.extra.<...>"
        raise ValueError(f"row scope {scope.name!r}: a section holds no '.' and is not 'extra'")
    ROW_SCOPES[scope.name] = scope
    return scope


@contextmanager
def declared_scopes(*scopes: RowScope) -> Iterator[tuple[RowScope, ...]]:
    """Declare ``scopes`` for the duration of a ``with`` block (tests, throw-away plug-ins)."""
    for s in scopes:
        declare_scope(s)
    try:
        yield scopes
    finally:
        for s in scopes:
            ROW_SCOPES.pop(s.name, None)


def scope_names() -> tuple[str, ...]:
    return tuple(ROW_SCOPES)


def row_scope(name: str) -> RowScope:
    return ROW_SCOPES[name]


def row_scopes(*, primary: bool = True) -> list[RowScope]:
    """The declared scopes in order; ``primary=False`` leaves out the primary (class) scope."""
    return [s for s in ROW_SCOPES.values() if primary or s.section is not None]


declare_scope(RowScope(
    "class", "finding classes", unit="cases", kinds=("grounding", "recognition", "dataset"),
    keys="xbench.score.metrics.registry:class_keys",
    score="xbench.score.scoring:count_classes",
    ground_truth_problems="xbench.score.resampling.bootstrap:ground_truth_problems",
    paired_rows="xbench.score.resampling.bootstrap:paired_class_rows",
    doc="positive and labelled pairs of each finding class"))

declare_scope(RowScope(
    "phrase", "phrase rows", unit="images", section="phrases", minor=schema_minor("metrics", "phrases"),
    keys="xbench.score.metrics.registry:phrase_keys",
    score="xbench.score.scoring:score_phrases",
    ground_truth_problems="xbench.score.sections.phrases:phrase_ground_truth_problems",
    paired_rows="xbench.score.resampling.bootstrap:paired_phrase_rows",
    table_rows="xbench.score.sections.phrases:phrase_rows",
    markdown="xbench.score.sections.phrases:phrase_markdown",
    csv="xbench.score.sections.phrases:phrase_csv",
    table="xbench.score.outputs.tables:phrase_table",
    save_counts="xbench.score.kernels.counts:phrase_arrays",
    counts_problems="xbench.score.kernels.counts:phrase_arrays_problems",
    load_counts="xbench.score.kernels.counts:phrase_from_arrays",
    doc="the phrase rows (free-text queries) of each category; one image carries several phrases"))

declare_scope(RowScope(
    "gaze", "gaze rows", unit="cases", kinds=("gaze",), section="gaze", minor=schema_minor("metrics", "gaze"),
    keys="xbench.score.sections.gaze:gaze_keys",
    score="xbench.score.sections.gaze:score_gaze",
    ground_truth_problems="xbench.score.sections.gaze:ground_truth_problems",
    paired_rows="xbench.score.sections.gaze:paired_rows",
    table_rows="xbench.score.sections.gaze:gaze_rows",
    markdown="xbench.score.sections.gaze:gaze_markdown",
    csv="xbench.score.sections.gaze:gaze_csv",
    table="xbench.score.sections.gaze:gaze_table",
    measures="xbench.score.sections.gaze:measures",
    save_counts="xbench.score.sections.gaze:save_counts",
    counts_problems="xbench.score.sections.gaze:counts_problems",
    load_counts="xbench.score.sections.gaze:load_counts",
    write_tables="xbench.score.sections.gaze:write_gaze_tables",
    terminal="xbench.score.sections.gaze:terminal_lines",
    doc="the saliency measures of the models' maps against radiologists' gaze (issue 37; only with gaze in the "
        "ground truth)"))

# -- tracks: sections without rows of their own (declaration order = their order in metrics.json, in the
# outputs and on the page)
declare_scope(RowScope(
    "text_probes", "text probes", unit="images", kinds=(), section="text_probes", minor=schema_minor("metrics", "text_probes"),
    run_section="xbench.score.sections.probes:run_section",
    write_tables="xbench.score.sections.probe_table:section_tables",
    page="xbench.score.sections.probe_table:page", page_at="end",
    doc="paraphrases, negations and decoys of the phrase rows (only with probes in the ground truth)"))

declare_scope(RowScope(
    "robustness", "robustness", unit="cases", kinds=(), section="robustness", minor=schema_minor("metrics", "robustness"),
    run_section="xbench.score.scoring:robustness_section",
    write_tables="xbench.score.sections.robustness_table:section_tables",
    page="xbench.score.sections.robustness_table:page",
    doc="the same metrics on perturbed copies of the images (only with copies in the ground truth)"))

declare_scope(RowScope(
    "human", "human ceilings", unit="cases", kinds=(), section="human", minor=schema_minor("metrics", "human"), options=("human_dir",),
    prepare="xbench.score.sections.human.section:prepare", add="xbench.score.sections.human.section:add",
    write_tables="xbench.score.sections.human.tables:section_tables", terminal="xbench.score.sections.human.tables:human_lines",
    page="xbench.score.sections.human.page:report_sections",
    doc="a second radiologist scored like a model, and the model's % of human (xbench-score --human)"))

declare_scope(RowScope(
    "subgroups", "subgroups", unit="cases", kinds=(), section="subgroups", minor=schema_minor("metrics", "subgroups"),
    options=("by", "age_bands", "min_group"),
    prepare="xbench.score.sections.subgroups:prepare", add="xbench.score.sections.subgroups:add",
    write_tables="xbench.score.sections.subgroups:write_subgroup_tables",
    save_counts="xbench.score.sections.subgroups:save_counts",
    counts_problems="xbench.score.sections.subgroups:counts_problems",
    load_counts="xbench.score.sections.subgroups:load_counts",
    paired_rows="xbench.score.sections.subgroups:paired_rows",
    compare="xbench.score.sections.subgroups:compare_lines",
    page="xbench.score.sections.subgroups:page",
    doc="every metric per group of case attributes, and the gap between groups (xbench-score --by)"))

declare_scope(RowScope(
    "faithfulness", "faithfulness", unit="cases", kinds=(), section="faithfulness", minor=schema_minor("metrics", "faithfulness"),
    options=("faithfulness", "key"),
    prepare="xbench.score.sections.faithfulness:prepare", add="xbench.score.sections.faithfulness:add",
    write_tables="xbench.score.sections.faithfulness:write_tables",
    page="xbench.score.sections.faithfulness:page",
    doc="deletion, insertion and ROAD from a round-2 submission (xbench-score --faithfulness --key)"))


def scored_units(sub, gt, names, cases=None) -> dict[str, int]:
    """{dataset: its scored cases} for the datasets ``names`` (the submission's cases of the ground truth; with
    ``cases`` {dataset: bool per ground-truth case}, those present): the units each dataset takes in the run's one
    resampling stream, from which a scope positions its draws
    (:func:`xbench.score.resampling.engine.prior_units`, docs/contract.md "Resampling")."""
    import numpy as np

    from xbench.schemas import align

    out = {}
    for name in names:
        if name not in sub.datasets or name not in gt.datasets:
            out[name] = 0
            continue
        rows = np.asarray(align(sub.datasets[name], gt.datasets[name], allow_missing=True)[0])
        present = (cases or {}).get(name)
        if present is not None:
            rows = np.where(np.asarray(present, bool), rows, -1)
        out[name] = int(np.count_nonzero(rows >= 0))
    return out
