"""Score a submission against a ground truth: validate, count, compute metrics and intervals.

:func:`score_submission` is the whole job behind ``xbench-score``. It

1. validates both stores (:func:`xbench.schemas.validate_ground_truth`, :func:`validate_submission`) and
   raises :class:`xbench.schemas.InvalidStoreError` listing every problem;
2. matches cases and classes by id and by name (:func:`xbench.schemas.align`);
3. streams the regions chunk by chunk (and the positive maps in bounded batches) through the one-pass
   kernel :func:`xbench.score.kernels.maps.grounding_counts`, so memory holds at most one batch of maps and
   one chunk of masks, never all resized maps;
4. computes every metric of the contract from the counts (:func:`metrics_from_counts`) and, optionally,
   percentile bootstrap intervals (:mod:`xbench.score.resampling.bootstrap`).

The result carries the metrics dict (``metrics.json`` layout), a per-pair DataFrame and the per-pair
count arrays; :func:`xbench.score.outputs.folder.write_outputs` writes them.

This module is the orchestration only; the stages are modules of their own, each importing only those
below it: :mod:`~xbench.score.counting` (the counting pass, for every row source),
:mod:`~xbench.score.metrics.estimates` (point estimates), :mod:`~xbench.score.resampling.bootstrap` (intervals),
:mod:`~xbench.score.sections.phrases` (the phrase-row source and view) and :mod:`~xbench.score.outputs.folder` (the pairs
table and every file written). Every row scope (a section plug-in, :mod:`~xbench.score.sections.plugins`) is counted by
its own ``score``, in order: the class rows first (their metrics are then computed here, once every scope's regions
are checked), then the phrase rows and the others; then each track makes its section from a :class:`RunView` of the
run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from xbench.score.metrics import registry as R
from xbench.score.kernels._allocator import release_freed_memory
from xbench.schemas.schema_versions import minor
from xbench.score.resampling.bootstrap import bootstrap_replicates, overall_replicates, percentile_intervals
from xbench.score.counting import Progress, count_dataset, region_mask_problems  # noqa: F401
from xbench.score.counting import _take_rows_inplace, gather_maps as _gather_maps  # noqa: F401  (benchmarks, tests)
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.errors import ThresholdsError
from xbench.score.metrics.estimates import NO_POSITIVE_REGION, UNSUPPORTED_REASON, Thresholds, Undefined, undefined_notes  # noqa: F401
from xbench.score.metrics.estimates import class_grounding_point, class_taus, point_metrics  # noqa: F401
from xbench.score.outputs.folder import PAIR_COLUMNS, pair_table_columns, pairs_table, write_pairs_parquet  # noqa: F401
from xbench.score.sections.kinds import RunView
from xbench.score.sections.plugins import row_scopes, sections as all_sections, tracks
from xbench.score.warm import start_background_warm

if TYPE_CHECKING:  # pandas is imported where a table is built: scoring itself never needs it (0.3-0.5 s)
    import pandas as pd

__all__ = [
    "ScoreResult",
    "score_submission",
    "count_dataset",
    "region_mask_problems",
    "metrics_from_counts",
    "pairs_table",
    "pair_table_columns",
    "write_pairs_parquet",
    "thresholds_from_metrics",
    "check_inputs",
    "Undefined",
    "undefined_notes",
]

#: metrics.json minor version that adds the "phrases" section (contract §Versions; the phrase row scope's)
PHRASES_METRICS_MINOR = minor("metrics", "phrases")
#: metrics.json minor version that adds "partial" (a run on the cases a submission holds; contract §Versions)
PARTIAL_METRICS_MINOR = minor("metrics", "partial")
#: metrics.json minor version that adds "robustness" (perturbed copies in the ground truth; score/sections/robustness.py)
ROBUSTNESS_METRICS_MINOR = minor("metrics", "robustness")


@dataclass
class ScoreResult:
    """What :func:`score_submission` returns.

    ``metrics``: the ``metrics.json`` dict; ``counts``: {dataset: DatasetCounts}; ``per_pair``: each
    class's per-pair Dice/IoU at the fixed and chosen thresholds ({dataset: {class column: arrays}});
    ``timings``: seconds per stage; ``scope_counts``: {row scope: {dataset: counts}} of every other row scope
    (:mod:`xbench.score.sections.plugins`) whose rows were scored (saved beside ``counts`` for paired comparisons);
    :attr:`phrase_counts` the phrase scope's. :attr:`pairs` builds the pairs table.
    """

    metrics: dict
    counts: dict[str, DatasetCounts]
    per_pair: dict = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    scope_counts: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # undefined metrics, one counted line each (undefined_notes)

    @property
    def phrase_counts(self) -> dict:
        """{dataset: PhraseCounts} of the datasets whose phrase rows were scored."""
        return self.scope_counts.get("phrase", {})

    @property
    def pairs(self) -> pd.DataFrame:
        """One row per labelled (case, class) pair of the supported classes (:func:`pairs_table`), built on
        each access: the scorer itself streams it to ``pairs.parquet`` (:func:`write_pairs_parquet`)."""
        return pairs_table(self.counts, self.per_pair)


def metrics_from_counts(counts: Mapping[str, DatasetCounts], *, bootstrap: int = 1000, seed: int = 0,
                        thresholds: Thresholds | None = None, level: float = 0.95,
                        timings: dict[str, float] | None = None,
                        undefined: list | None = None,
                        clusters: Mapping[str, np.ndarray] | None = None) -> tuple[dict, dict]:
    """Metrics (``metrics.json`` "overall" and "datasets" parts) from per-dataset counts.

    Every metric of :data:`xbench.score.metrics.registry.REGISTRY` is computed: per class, the dataset summary
    (mean over the classes where it is defined) and the overall mean over datasets.

    Parameters
    ----------
    counts : {dataset: DatasetCounts}
    bootstrap : int
        Resamples per dataset (0 disables intervals; ``ci95`` values are then absent).
    seed : int
        Seeds one ``numpy.random.default_rng(seed)`` consumed in sorted dataset order.
    thresholds : {dataset: {class: (tau_dice, tau_iou)}}, optional
        Use these (grid) thresholds instead of searching (e.g. from a validation split); a class's entry
        is a tuple in :func:`xbench.score.metrics.registry.tau_keys` order or a {tau key: tau} mapping.
    undefined : list, optional
        Gets one :class:`Undefined` per class and reason a metric is undefined (reported as null); no
        Python warning is issued either way (:func:`undefined_notes` words them for people).
    clusters : {dataset: (n_cases,) int}, optional
        Resample these datasets' cases in clusters (all cases of a drawn cluster together;
        :func:`xbench.score.resampling.engine.cluster_weights`): the robustness track's copies of one clean case.

    Returns
    -------
    (metrics, per_pair): ``metrics`` = {"overall": ..., "datasets": ...} and ``per_pair`` =
    {dataset: {class column: per-pair arrays}} for :func:`pairs_table`.
    """
    timings = timings if timings is not None else {}
    # first, so that unusable thresholds fail before any work
    taus = {name: class_taus(counts[name], thresholds) for name in sorted(counts)}
    with ThreadPoolExecutor(1) as pool:
        # the resamples need no point estimate: they run (on their own threads) while the point metrics are
        # computed here, and fill the cores that one dataset's bootstrap leaves idle at the end
        t_boot = time.perf_counter()
        reps = (pool.submit(bootstrap_replicates, counts, bootstrap=bootstrap, seed=seed,
                            taus=taus if thresholds is not None else None, clusters=clusters)
                if bootstrap > 0 and counts else None)
        metrics, per_pair_all = point_metrics(counts, taus, timings, undefined)
        if reps is not None:
            _add_intervals(metrics, reps.result(), level)
            reps = None  # the future held the replicates
            release_freed_memory()
            timings["bootstrap"] = timings.get("bootstrap", 0.0) + time.perf_counter() - t_boot
    return metrics, per_pair_all


def _add_intervals(metrics: dict, reps: Mapping, level: float) -> None:
    """Add the ``ci95`` entries of the bootstrap replicates ``reps`` (the one resampling path,
    :mod:`xbench.score.resampling.bootstrap`, shared with the report and paired comparisons) to ``metrics``."""
    datasets = metrics["datasets"]
    for name, rep in reps.items():
        ds_classes = datasets[name]["classes"]
        for cname, stats in rep.classes.items():
            ds_classes[cname]["ci95"] = percentile_intervals(stats, level)
        # after "classes" in metrics.json, as before
        datasets[name]["ci95"] = percentile_intervals(rep.summary, level)
    metrics["ci95"] = percentile_intervals(overall_replicates(reps), level)


def _shown(path) -> str:
    """An input as recorded in metrics.json: a local path made absolute, a URL as given."""
    from xbench.schemas.paths import is_remote

    return str(path) if is_remote(path) else str(Path(path).resolve())


def thresholds_from_metrics(source: str | os.PathLike | Mapping) -> dict[str, dict[str, tuple[float, float]]]:
    """{dataset: {class: (tau_dice, tau_iou)}} from an earlier ``metrics.json`` (a path or its dict).

    A path is read through the bounded JSON reader (:func:`xbench.schemas.inputs.load_json`: size, depth,
    duplicate keys, numbers); anything that is not an XBench metrics.json raises :class:`ThresholdsError`
    (an :class:`~xbench.schemas.errors.InputError`: one line, exit 2)."""
    if isinstance(source, Mapping):
        data, where = source, "the transferred thresholds"
    else:
        from xbench.schemas.errors import InputError
        from xbench.schemas.inputs import load_json

        where = str(source)
        if not os.path.lexists(source):
            raise ThresholdsError(f"{source}: no such metrics.json (for --thresholds-from)")
        try:
            data = load_json(source, where=f"{source} (--thresholds-from)")
        except InputError as exc:
            raise ThresholdsError(exc.problems) from None
    try:
        found = {d: {c: (e.get("tau_dice"), e.get("tau_iou")) for c, e in ds["classes"].items()}
                 for d, ds in data["datasets"].items()}
    except (KeyError, TypeError, AttributeError):
        found = None
    if found is None or not all(isinstance(t, (int, float, type(None))) and not isinstance(t, bool)
                                for cls in found.values() for pair in cls.values() for t in pair):
        raise ThresholdsError(f"{where}: thresholds must come from an xbench metrics.json: it needs "
                              "datasets.<dataset>.classes.<class>.tau_dice / tau_iou (numbers)") from None
    return found


# ------------------------------------------------------------------------------------------ top level
def _dataset_names(gt, datasets: Sequence[str] | None) -> list[str]:
    """The dataset keys to score: ``datasets`` (in order, once each) or every one of the ground truth;
    :class:`~xbench.schemas.errors.UnknownNameError` for a key the ground truth lacks, with close matches."""
    import difflib

    from xbench.schemas.errors import UnknownNameError

    names = sorted(gt.datasets) if datasets is None else list(dict.fromkeys(datasets))
    unknown = [d for d in names if d not in gt.datasets]
    if unknown:
        close = sorted({m for d in unknown for m in difflib.get_close_matches(d, list(gt.datasets), n=2)})
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownNameError(f"dataset(s) {', '.join(unknown)} not in the ground truth; it has "
                               f"{', '.join(sorted(gt.datasets)) or 'none'}{hint}")
    return names


def check_inputs(submissions: Sequence[str | os.PathLike], gt, *, datasets: Sequence[str] | None = None,
                 allow_missing: bool = False):
    """Validate the ground truth and every submission against it, before anything is scored; the opened
    ground truth (:class:`xbench.schemas.GroundTruth`), to pass on to :func:`score_submission` with
    ``validate=False``.

    Raises :class:`~xbench.schemas.errors.InvalidStoreError` listing every problem (the ground truth's, when
    it has any, as its own validator lists them; else every submission's),
    :class:`~xbench.score.errors.MissingCasesError` when the only way the submissions fall short of the
    contract includes missing cases (its ``coverage`` says how many are present: ``allow_missing`` scores
    them), :class:`~xbench.schemas.errors.UnknownNameError` for an unknown dataset key. The region masks are
    checked while scoring decodes them (once), not here.
    """
    from xbench.schemas import GroundTruth, InvalidStoreError, read_ground_truth, validate_ground_truth, validate_submission
    from xbench.schemas.submission import MissingCases

    from xbench.score.errors import MissingCasesError

    opened = gt if isinstance(gt, GroundTruth) else None
    gt_path = opened.path if opened is not None else gt
    if validate_ground_truth(gt_path, scan_masks=False):
        # only when something is wrong: the whole validation, so the problems listed are validate's
        raise InvalidStoreError(validate_ground_truth(gt_path))
    opened = opened if opened is not None else read_ground_truth(gt_path)
    names = _dataset_names(opened, datasets)
    total = sum(len(opened.datasets[d].case_id) for d in names)
    problems: list = []
    coverage: dict[str, tuple[int, int]] = {}
    for sub in submissions:
        found = validate_submission(sub, opened, datasets=names, allow_missing=allow_missing)
        missing = [p for p in found if isinstance(p, MissingCases)]
        if missing:
            coverage[str(sub)] = (total - sum(p.of - p.present for p in missing), total)
        problems += found
    if problems:
        # as if the ground truth had been validated whole first: its problems, else the submissions'
        gt_problems = validate_ground_truth(gt_path)
        if gt_problems:
            raise InvalidStoreError(gt_problems)
        raise MissingCasesError(problems, coverage) if coverage else InvalidStoreError(problems)
    return opened


def _partial_note(cases: int, of: int, not_scored: Sequence[str]) -> str:
    """The top-level note of a partial run's metrics.json (also the terminal's line)."""
    text = f"partial: {cases} of {of} cases"
    if not_scored:
        text += f"; not scored (no case in the submission): {', '.join(not_scored)}"
    return text + ("; every number is over the cases present only, not comparable with a full run's")


def _with_partial(metrics: dict, partial: Mapping[str, tuple[int, int]], cases: int, of: int,
                  not_scored: Sequence[str]) -> dict:
    """``metrics`` with the partial-run keys (contract §metrics.json, minor 3): per partially scored dataset
    ``"partial": {"cases", "of"}`` after its ``n_cases`` (also in its phrase entry), and the top-level
    ``"partial"`` note; added only to a partial run, so a full run's metrics.json is unchanged."""
    def insert(entry: dict, key: str, after: str, value) -> dict:
        out: dict = {}
        for k, v in entry.items():
            out[k] = v
            if k == after:
                out[key] = value
        if key not in out:
            out[key] = value
        return out

    datasets = {d: insert(e, "partial", "n_cases", {"cases": partial[d][0], "of": partial[d][1]}) if d in partial else e
                for d, e in metrics["datasets"].items()}
    out = {"partial": {"cases": int(cases), "of": int(of), **({"not_scored": list(not_scored)} if not_scored else {}),
                       "note": _partial_note(cases, of, not_scored)}}
    for k, v in metrics.items():
        out[k] = datasets if k == "datasets" else v
    for scope in row_scopes(primary=False):  # each scope's dataset entries (phrases: after n_images)
        entries = out.get(scope.section, {}).get("datasets", {})
        for d in list(entries):
            if d in partial:
                after = next((k for k in ("n_images", "n_phrases", "n_cases") if k in entries[d]), None)
                entries[d] = insert(entries[d], "partial", after, {"cases": partial[d][0], "of": partial[d][1]})
    return out


def score_submission(submission_path: str | os.PathLike, gt_path, *, bootstrap: int = 1000,
                     seed: int = 0, thresholds: Thresholds | str | os.PathLike | None = None,
                     datasets: Sequence[str] | None = None, progress: Progress | None = None,
                     validate: bool = True, on_total: Callable[[int], None] | None = None,
                     metric_params: Mapping | None = None,
                     allow_missing: bool = False) -> ScoreResult:
    """Score one submission store against a ground-truth store.

    Parameters
    ----------
    submission_path, gt_path : path
        ``.zarr`` directories or ``.zarr.zip`` files; both are only read. ``gt_path`` may also be the
        ground truth already opened (:func:`check_inputs` returns it), so it is not read twice.
    bootstrap : int
        Resamples for the 95 % intervals (0: none).
    seed : int
        Bootstrap seed.
    thresholds : mapping or path, optional
        Transferred best thresholds (see :func:`thresholds_from_metrics`).
    datasets : sequence of str, optional
        Score only these dataset keys of the ground truth.
    progress, on_total : callables, optional
        ``on_total(n_pairs)`` once, then ``progress(n)`` as positive pairs are done (for a progress bar).
    validate : bool
        Validate both stores first (:func:`check_inputs`; default). Turn off only for stores that
        :func:`check_inputs` has just passed, with the same ``datasets`` and ``allow_missing``.
    metric_params : mapping, optional
        {parameter: value} of the metrics' declared parameters (:attr:`~xbench.score.metrics.registry.Metric.params`),
        e.g. ``{"pointing_tolerance": 15.0}``, the tolerant pointing game's distance in original pixels;
        a parameter not given takes the default its metric declares.
    allow_missing : bool
        Score the cases the submission holds when it lacks some of the ground truth's (a smoke run): every
        metric and interval is then computed on those cases alone, exactly as against a ground truth of only
        them, a dataset with none of its cases is not scored, and metrics.json says so ("partial"). Without
        it a missing case is a problem (:class:`~xbench.score.errors.MissingCasesError`).

    The result never issues a Python warning: classes whose metrics are undefined (null in metrics.json)
    are listed in ``ScoreResult.notes``, one counted line per dataset and reason (:func:`undefined_notes`),
    after one counted line per dataset whose submission holds cases the ground truth lacks (not scored).

    Raises
    ------
    xbench.schemas.InvalidStoreError
        Listing every problem of the ground truth or the submission (``MissingCasesError`` among them).
    xbench.schemas.errors.UnknownNameError
        For unknown dataset keys.
    xbench.score.errors.ThresholdsError
        For unusable transferred thresholds.
    """
    start_background_warm()  # a first run compiles the ranking kernel on another core meanwhile
    metric_params = R.metric_params(metric_params)  # every declared default filled in, every value checked
    timings: dict[str, float] = {}
    run = _open_inputs(submission_path, gt_path, datasets=datasets, validate=validate, allow_missing=allow_missing,
                       thresholds=thresholds, timings=timings)
    if on_total is not None:
        on_total(int(sum(_pairs_present(run.gt.datasets[d], run.aligned[d][0]) for d in run.scored)))
    counts, sections, scope_counts = _count(run, bootstrap=bootstrap, seed=seed, progress=progress,
                                            timings=timings, metric_params=metric_params)
    undefined: list[Undefined] = []
    metrics, per_pair = metrics_from_counts(counts, bootstrap=bootstrap, seed=seed, thresholds=run.thresholds,
                                            timings=timings, undefined=undefined)
    metrics.update(sections)  # only the scopes with rows: metrics.json of a store without phrase rows is unchanged
    made = {}
    view = RunView(run.gt, run.sub, tuple(run.scored), run.aligned, run.partial, run.thresholds, metrics_from_counts)
    for track in tracks():  # the tracks made from the run, each only when the ground truth has it ({} otherwise)
        part = track.run_section(view, bootstrap=bootstrap, seed=seed, metric_params=metric_params, timings=timings)
        if part:
            metrics[track.section] = made[track.section] = part
    release_freed_memory()
    t0 = time.perf_counter()
    gt_sha256 = run.gt.sha256
    timings["hash_gt"] = time.perf_counter() - t0
    header = _header(run, submission_path, gt_sha256, bootstrap=bootstrap, seed=seed, sections=sections,
                     metric_params=metric_params)
    for scope in all_sections(primary=False):  # each track present raises the minor that added it
        if scope.section in made:
            header["schema_minor"] = max(scope.minor, int(header.get("schema_minor", 0)))
    if run.partial or run.not_scored:  # only then: a full run's metrics.json is unchanged
        metrics = _with_partial(metrics, run.partial, sum(run.n_in.values()), sum(run.n_of.values()), run.not_scored)
    return ScoreResult(metrics={"xbench": header, **metrics}, counts=counts, per_pair=per_pair, timings=timings,
                       scope_counts=scope_counts, notes=[*run.notes, *undefined_notes(undefined)])


class _Run(NamedTuple):
    """The opened inputs of one scoring run and what is scored of them."""

    gt: object  # xbench.schemas.GroundTruth
    sub: object  # xbench.schemas.Submission
    aligned: dict  # {dataset: (case_rows, class_cols)}
    scored: list[str]
    not_scored: list[str]
    partial: dict  # {dataset: (cases present, cases of the ground truth)} of the datasets scored in part
    n_in: dict
    n_of: dict
    thresholds: Thresholds | None
    notes: tuple = ()  # submission cases outside the ground truth, not scored: one counted line per dataset


def _open_inputs(submission_path, gt_path, *, datasets, validate: bool, allow_missing: bool, thresholds,
                 timings: dict) -> _Run:
    """Validate (unless told not to) and open both stores, align every dataset, and check transferred
    thresholds before any map is read."""
    from xbench.schemas import GroundTruth, InvalidStoreError, Problem, align, read_ground_truth, read_submission

    t0 = time.perf_counter()
    if validate:
        gt = check_inputs([submission_path], gt_path, datasets=datasets, allow_missing=allow_missing)
        timings["validate"] = time.perf_counter() - t0
    else:
        gt = gt_path if isinstance(gt_path, GroundTruth) else read_ground_truth(gt_path)
    t0 = time.perf_counter()
    names = _dataset_names(gt, datasets)
    sub = read_submission(submission_path)
    aligned = {}
    not_scored: list[str] = []
    for name in names:
        if name in sub.datasets:
            aligned[name] = align(sub.datasets[name], gt.datasets[name], allow_missing=allow_missing)
        if name not in aligned or not (aligned[name][0] >= 0).any():
            if not allow_missing:
                raise InvalidStoreError([Problem(f"{submission_path}/{name}", "dataset of the ground truth is missing")])
            not_scored.append(name)
    scored = [d for d in names if d not in not_scored]
    if not scored:
        raise InvalidStoreError([Problem(str(submission_path), "holds no case of the ground truth"
                                         + (f" in {', '.join(names)}" if datasets is not None else "")
                                         + "; nothing to score")])
    n_of = {d: len(gt.datasets[d].case_id) for d in names}
    n_in = {d: int(np.count_nonzero(aligned[d][0] >= 0)) if d in aligned else 0 for d in names}
    partial = {d: (n_in[d], n_of[d]) for d in scored if n_in[d] < n_of[d]}
    if thresholds is not None and not isinstance(thresholds, Mapping):
        thresholds = thresholds_from_metrics(thresholds)
    if thresholds is not None:  # unusable thresholds fail here, before any map is read
        for name in scored:
            class_taus(_classes_with_pairs(sub.datasets[name], gt.datasets[name], aligned[name][0]), thresholds)
    timings["open"] = time.perf_counter() - t0
    return _Run(gt, sub, aligned, scored, not_scored, partial, n_in, n_of, thresholds,
                tuple(_extra_case_notes(sub, gt, names)))


def _extra_case_notes(sub, gt, names) -> list[str]:
    """One counted line per dataset scored whose submission holds cases the ground truth lacks (they are not
    scored: a submission of the whole set scored on part of it, or cases of another split among its own)."""
    notes = []
    for name in names:
        if name not in sub.datasets:
            continue
        ids = np.asarray(sub.datasets[name].case_id, dtype=str)
        extra = ids[~np.isin(ids, np.asarray(gt.datasets[name].case_id, dtype=str))]
        if extra.size:
            notes.append(f"{name}: {extra.size} of the submission's {ids.size} cases are not in the ground truth and "
                         f"were not scored (e.g. {str(min(extra.tolist()))!r})")
    return notes


def _count(run: _Run, *, bootstrap: int, seed: int, progress, timings: dict, metric_params: Mapping):
    """The counting pass over every scored dataset, for each declared row scope in order (the classes first,
    :mod:`xbench.score.sections.plugins.classes`; then every other scope, each by its ``score``); every
    region problem of the ground truth raised together, before any class metric: (class counts, {metrics.json
    section: section} of the other scopes with rows, {scope: counts} of the other scopes)."""
    from xbench.schemas import InvalidStoreError

    gt, gt_path = run.gt, run.gt.path
    counts: dict[str, DatasetCounts] = {}
    region_problems: list = []
    sections: dict = {}
    scope_counts: dict = {}
    for scope in row_scopes():  # the scopes of rows (the tracks come after the counts)
        # the primary (class) scope counts on the aligned case rows and class columns, with the progress bar
        primary = {"aligned": run.aligned, "progress": progress, "metric_params": metric_params} \
            if scope.section is None else {}
        section, found = scope.score(run.sub, gt, run.scored, bootstrap=bootstrap, seed=seed, where=str(gt_path),
                                     region_problems=region_problems, timings=timings,
                                     cases={d: run.aligned[d][0] >= 0 for d in run.partial}, **primary)
        if scope.section is None:
            counts = found
            continue
        if section:
            sections[scope.section] = section
        scope_counts[scope.name] = found
    if region_problems:
        from xbench.schemas import validate_ground_truth

        # nothing has been written yet; list every problem of the ground truth, as its validator does
        raise InvalidStoreError(validate_ground_truth(gt_path) or region_problems)
    return counts, sections, scope_counts


def _header(run: _Run, submission_path, gt_sha256: str, *, bootstrap: int, seed: int, sections: Mapping,
            metric_params: Mapping) -> dict:
    """metrics.json's "xbench" entry: what was scored, how, and with which inputs."""
    from xbench.schemas.version import __version__

    header = {"schema": 1, "schema_minor": max(m.minor for m in R.metrics()), "version": __version__,
              "gt_sha256": gt_sha256, "submission": dict(run.sub.attrs),
              "bootstrap": {"n_resamples": int(bootstrap), "seed": int(seed), "method": "percentile",
                            "level": 0.95, "resampling": "cases within each dataset"},
              "thresholds": ("transferred" if run.thresholds is not None
                             else "searched per class (0.00..1.00, step 0.01)"),
              "datasets": run.scored,
              "pointing_tolerance_px": float(metric_params["pointing_tolerance"]),
              "inputs": {"submission": _shown(submission_path), "gt": _shown(run.gt.path)}}
    for scope in row_scopes(primary=False):  # a scope's section raises the minor that added it, when present
        if scope.section in sections:
            header["schema_minor"] = max(scope.minor, int(header.get("schema_minor", 0)))
    if run.partial or run.not_scored:
        header["schema_minor"] = max(PARTIAL_METRICS_MINOR, int(header.get("schema_minor", 0)))
    return header


def _classes_with_pairs(sub_ds, gt_ds, case_rows: np.ndarray):
    """What :func:`~xbench.score.metrics.estimates.class_taus` reads of a dataset's counts (name, classes, supported, pair_class), from the
    stores before counting: the supported classes' regions of the cases present."""
    from types import SimpleNamespace

    unsupported = set(getattr(sub_ds, "unsupported", ()))
    supported = np.array([c not in unsupported for c in gt_ds.classes], dtype=bool)
    ri = np.asarray(gt_ds.region_index, dtype=np.int64).reshape(-1, 2)
    kept = ri[(case_rows[ri[:, 0]] >= 0) & supported[ri[:, 1]]] if ri.size else ri
    return SimpleNamespace(name=gt_ds.name, classes=tuple(gt_ds.classes), supported=supported, pair_class=kept[:, 1])


def _pairs_present(gt_ds, case_rows: np.ndarray) -> int:
    """Positive pairs with a region among the cases present (the progress bar's total)."""
    ri = np.asarray(gt_ds.region_index, dtype=np.int64).reshape(-1, 2)
    return int(np.count_nonzero(case_rows[ri[:, 0]] >= 0)) if ri.size else 0
