"""The options of ``xbench-score``, written once (``xbench.schemas.options``): the command's click options, the
keys of a suite's ``score:`` section (``suite=True``) and the argv that gives a scoring run its values all come
from :class:`ScoreOptions`. Light: click and the option machinery only."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas.options import (MAX_CASES, Choice, Flag, Float, Int, Text, declared, opt, problems,
                                    resamples, seed_opt, suite_paths)
from xbench.schemas.options import _shown as shown

from xbench.score.metrics.params import POINTING_TOLERANCE, MetricParam

FORMATS = ("xbench", "grand-challenge", "codabench")


def metric_groups() -> tuple[str, ...]:
    """The opt-in metric groups ``--metrics`` takes: the metric registry's (``xbench.score.metrics.registry.OPT_IN``),
    read when a value is checked, so ``--help`` imports no registry (numpy, the installed plug-ins)."""
    from xbench.score.metrics.registry import OPT_IN

    return tuple(OPT_IN)


def param_opt(param: MetricParam, *, metavar: str | None = None):
    """The ``ScoreOptions`` field of a metric's parameter (:class:`~xbench.score.metrics.params.MetricParam`):
    flag, default, range and help all read off the declaration; suites and platforms can set it. Name the
    field as the parameter: :func:`xbench.score.entry.metric_params_of` hands it on by that name."""
    check = Int(param.low if math.isfinite(param.low) else None, param.high if math.isfinite(param.high) else None) \
        if param.kind is int else Float(param.low if math.isfinite(param.low) else None,
                                        param.high if math.isfinite(param.high) else None)
    return opt(param.default, check=check, metavar=metavar, suite=True, help=param.help)


@dataclass
class ScoreOptions:
    """What one ``xbench-score`` run takes besides its SUBMISSION stores (the fields are its options), and what
    the library's :func:`xbench.score.run` takes. The ``suite`` ones are the keys of a suite's ``score:`` section;
    the others a suite sets itself (:data:`xbench.suite.steps.SCORE_SET_BY_SUITE`)."""

    gt_path: str = opt(check=Text(click.Path(path_type=str)), flag="--gt", required=True,
                       help="Ground-truth store (gt.zarr, gt.zarr.zip, or an https:// or s3:// URL of a .zarr); only read.")
    out_dir: Path | None = opt(Path("results"), check=Text(click.Path(path_type=Path)), flag="--out",
                        help="Output folder. With several submissions each goes into OUT/<submission name>/.")
    # (the library's run() writes nothing when out_dir is None: xbench human scores its readers in memory)
    bootstrap: int = resamples(suite=True,
                         help="Bootstrap resamples for the 95% intervals (0 turns them off).")
    seed: int = seed_opt(help="Bootstrap seed.")
    thresholds_from: Path | None = opt(None, check=Text(click.Path(path_type=Path)), suite=True,
                                       help="Use the best thresholds (tau_dice, tau_iou) of an earlier metrics.json, "
                                            "e.g. from a validation split, instead of searching them on this one.")
    datasets: tuple = opt(default_factory=tuple, check=Text(), multiple=True, metavar="KEY[,KEY...]",
                          help="Score only these dataset keys (repeat or comma-separate). Default: all in the ground truth.")
    formats: tuple = opt(default_factory=tuple, check=Choice(FORMATS), flag="--format", multiple=True, suite=True,
                         help="Extra output layouts: grand-challenge adds 'aggregates' to metrics.json; codabench writes "
                              "a flat scores.json. Repeatable.")
    images_path: Path | None = opt(None, check=Text(click.Path(path_type=Path)), flag="--images",
                                   help="images.zarr: with several submissions, the report gets map-over-image overlays.")
    allow_missing: bool = opt(False, check=Flag(), suite=True,
                              help="Score the cases the submission holds when it lacks some of the ground truth's (e.g. "
                                   "a smoke run of xbench-extract --limit 4); metrics.json, the tables and the summary "
                                   "then say 'partial: N of M cases'. Without it a missing case is refused.")
    pointing_tolerance: float = param_opt(POINTING_TOLERANCE, metavar="PX")
    faithfulness: str | None = opt(None, check=Text(click.Path(path_type=str)), metavar="ROUND2_SUBMISSION", suite=True,
                                   help="Faithfulness: the scores-only submission of the round-2 images (xbench perturb); "
                                        "needs --key. Adds the faithfulness section (deletion/insertion/ROAD).")
    key: str | None = opt(None, check=Text(click.Path(path_type=str)), metavar="KEY", suite=True,
                          help="The private key xbench perturb wrote beside the round-2 images (with --faithfulness).")
    human_dir: Path | None = opt(None, check=Text(click.Path(path_type=Path)), flag="--human", metavar="HUMAN_DIR", suite=True,
                                 help="The output folder of `xbench human`: metrics.json, the tables and the report add "
                                      "the human ceiling and the model's % of human beside each grounding value.")
    metric_groups: tuple = opt(default_factory=tuple, check=Choice(metric_groups), flag="--metrics", multiple=True,
                               metavar="GROUP", suite=True,
                               help="Add an opt-in group of metrics (repeatable): complexity = Gini sparseness and "
                                    "entropy of each normalised map (docs/how-to/score.md). Default outputs never change.")
    by: str | None = opt(None, check=Text(), metavar="FIELD[,FIELD]", suite=True,
                         help="Subgroups: every metric per group of these case attributes of the ground truth (e.g. "
                              "sex, or sex,view for their cross product), the largest gap between groups with its "
                              "interval and p-value, and the worst group (docs/how-to/score.md, 'Subgroups').")
    age_bands: str = opt("40,60,80", check=Text(), metavar="AGE[,AGE...]", suite=True,
                         help="With --by age: the ages (years) where the bands are cut (<40, 40-59, 60-79, >=80).")
    min_group: int = opt(20, check=Int(1, MAX_CASES), metavar="N", suite=True,
                         help="With --by: groups with fewer cases are reported but not ranked (no gap, no worst group).")
    quiet: bool = opt(False, check=Flag(), short="-q", help="Print nothing but errors.")
    overwrite: bool = opt(False, check=Flag(),
                          help="Replace the results an earlier xbench-score run wrote in --out (only the files it "
                               "wrote; anything else there is kept). Without it such a folder is refused.")


def section_problems(values: dict, where: str, resolve: Callable[[str], str] | None = None) -> list[str]:
    """The problems of a mapping of :class:`ScoreOptions`' ``suite`` fields (a suite's ``score:`` section, a
    platform's configuration), one line each, ``where`` before each key: each value by its field's rule; a
    repeatable option's (``formats``, ``metric_groups``) a list whose every item is checked (one word alone
    is a list of one; made a tuple in place); ``resolve`` makes a relative path (``thresholds_from``, ``human_dir``
    ...) absolute in place (a suite's: relative to the suite file). Unknown keys are the caller's to name."""
    lines = problems(ScoreOptions, values, where)
    paths = suite_paths(ScoreOptions)
    for f, o in declared(ScoreOptions):
        if not o.suite or f.name not in values:
            continue
        value = values[f.name]
        if o.multiple:
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, (list, tuple)):
                lines.append(f"{where}.{f.name}: must be a list, got {shown(value)}")
                continue
            lines += [f"{where}.{f.name}: {p}, got {shown(v)}" for v in items for p in [o.check.problem(v)] if p]
            values[f.name] = tuple(items)
        elif resolve is not None and f.name in paths and isinstance(value, str) and "://" not in value:
            values[f.name] = resolve(value)
    return lines


@dataclass
class ReportOptions:
    """What one ``xbench report`` run takes besides its RESULT_DIRS (the fields are its options; the ``suite``
    ones are the keys of a suite's ``report:`` section, whose title defaults to the suite's own)."""

    out_dir: Path = opt(check=Text(click.Path(path_type=Path)), flag="--out", required=True,
                        help="Folder to write the report into: built beside it and swapped in whole; files you put "
                             "there are kept. Must not hold or lie inside an input.")
    images: Path | None = opt(None, check=Text(click.Path(path_type=Path)),
                              help="images.zarr for the overlay figures (default: the path recorded by xbench-score).")
    gt: Path | None = opt(None, check=Text(click.Path(path_type=Path)),
                          help="gt.zarr for the ground-truth outlines in the overlays (default: as recorded).")
    submissions: tuple = opt(default_factory=tuple, check=Text(), flag="--submission", multiple=True,
                             metavar="NAME=PATH",
                             help="Submission store of a model (NAME: model name or result directory name); "
                                  "repeatable.")
    bootstrap: int = resamples(suite=True,
                         help="Bootstrap resamples for intervals above class level and for the paired gaps (0: none).")
    seed: int = seed_opt(help="Seed of the bootstrap resamples.")
    size_bins: str = opt("fixed", check=Choice(("fixed", "tercile")), suite=True,
                         help="Lesion-size bins: fixed fractions of the image (<1%, 1-5%, >=5%) or terciles.")
    sanity: tuple = opt(default_factory=tuple, check=Text(click.Path(path_type=Path)), multiple=True,
                        help="An `xbench sanity` output folder: the report says whether that model's maps depend on "
                             "its weights; repeatable.")
    overlays: bool = opt(True, check=Flag(), flag="--overlays/--no-overlays", suite=True,
                         help="Draw the map-over-image figures (--no-overlays skips them).")
    title: str | None = opt("XBench report", check=Text(), suite=True, suite_default=None, help="Page title.")
    quiet: bool = opt(False, check=Flag(), short="-q", help="No progress bar and no summary line.")
    as_json: bool = opt(False, check=Flag(), flag="--json", help="Print the report manifest (report.json) to stdout.")
