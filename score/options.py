"""The options of ``xbench-score``, written once (``xbench.schemas.options``): the command's click options, the
keys of a suite's ``score:`` section (``suite=True``) and the argv that gives a scoring run its values all come
from :class:`ScoreOptions`. Light: click and the option machinery only."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas.options import Choice, Flag, Float, Int, Text, opt

FORMATS = ("xbench", "grand-challenge", "codabench")


@dataclass
class ScoreOptions:
    """What one ``xbench-score`` run takes besides its SUBMISSION stores (the fields are its options)."""

    gt_path: str = opt(check=Text(click.Path(path_type=str)), flag="--gt", required=True,
                       help="Ground-truth store (gt.zarr, gt.zarr.zip, or an https:// or s3:// URL of a .zarr); only read.")
    out_dir: Path = opt(Path("results"), check=Text(click.Path(path_type=Path)), flag="--out",
                        help="Output folder. With several submissions each goes into OUT/<submission name>/.")
    bootstrap: int = opt(1000, check=Int(0), suite=True,
                         help="Bootstrap resamples for the 95% intervals (0 turns them off).")
    seed: int = opt(0, check=Int(0), help="Bootstrap seed.")
    thresholds_from: Path | None = opt(None, check=Text(click.Path(path_type=Path)),
                                       help="Use the best thresholds (tau_dice, tau_iou) of an earlier metrics.json, "
                                            "e.g. from a validation split, instead of searching them on this one.")
    datasets: tuple = opt(default_factory=tuple, check=Text(), multiple=True, metavar="KEY[,KEY...]",
                          help="Score only these dataset keys (repeat or comma-separate). Default: all in the ground truth.")
    formats: tuple = opt(default_factory=tuple, check=Choice(FORMATS), flag="--format", multiple=True,
                         help="Extra output layouts: grand-challenge adds 'aggregates' to metrics.json; codabench writes "
                              "a flat scores.json. Repeatable.")
    images_path: Path | None = opt(None, check=Text(click.Path(path_type=Path)), flag="--images",
                                   help="images.zarr: with several submissions, the report gets map-over-image overlays.")
    allow_missing: bool = opt(False, check=Flag(),
                              help="Score the cases the submission holds when it lacks some of the ground truth's (e.g. "
                                   "a smoke run of xbench-extract --limit 4); metrics.json, the tables and the summary "
                                   "then say 'partial: N of M cases'. Without it a missing case is refused.")
    pointing_tolerance: float = opt(15.0, check=Float(0.0), metavar="PX",
                                    help="Tolerant pointing game: a hit when the first maximum lies within PX original "
                                         "pixels of the region (Zhang et al. 2018).")
    metric_groups: tuple = opt(default_factory=tuple, check=Choice(("complexity",)), flag="--metrics", multiple=True,
                               metavar="GROUP",
                               help="Add an opt-in group of metrics (repeatable): complexity = Gini sparseness and "
                                    "entropy of each normalised map (docs/score.md). Default outputs never change.")
    quiet: bool = opt(False, check=Flag(), short="-q", help="Print nothing but errors.")
