"""Scoring on challenge platforms: the grand-challenge evaluation container and the Codabench scoring program.

Both score one submitted store against a private ground truth with ``xbench-score`` and follow the platform's
folder conventions:

- **grand-challenge** (``platforms/grand-challenge/``): the container reads the submission from ``/input``
  (a ``*.zarr`` folder, a ``*.zarr.zip`` or ``*.zip`` file), the ground truth from ``$XBENCH_GT``, else the
  platform's ground-truth folder ``/opt/ml/input/data/ground_truth``, else the copy baked into the image at
  ``/opt/xbench/gt.zarr.zip``, and writes ``/output/metrics.json`` (with ``aggregates`` for the leaderboard).
- **Codabench**: ``xbench package codabench --gt gt.zarr --gt-in-program --out scoring_program.zip`` writes a
  scoring program:
  ``metadata.yaml`` (the command Codabench runs), ``score.py`` (calls :func:`codabench_main`) and the ground
  truth as ``gt.zarr.zip``. Codabench runs ``score.py INPUT OUTPUT``: the submission is in ``INPUT/res``, a
  ground truth in ``INPUT/ref`` (reference data) wins over the packaged one, and ``OUTPUT/scores.json`` is the
  leaderboard file. The competition's Docker image needs xbench-cxr installed (the scorer alone, no
  torch); ``make container`` builds one (``platforms/grand-challenge/Dockerfile``, target ``codabench``).
- **Codabench competition**: ``xbench package codabench-competition --gt-validation val.zarr --gt-test
  test.zarr --docker-image IMAGE --out competition.zip`` writes a whole competition bundle in Codabench's
  version-2 format (:func:`competition_spec`, checked by :func:`check_competition`): ``competition.yaml``
  with a validation and a test phase, each a task with its own reference data, one leaderboard whose
  columns come from the metric registry (each metric with its 95 % interval bounds), the scoring
  program, pages, a logo, and the Docker image the scoring runs in.

On failure both exit non-zero and the last line on stderr is the reason, which is what the platforms show a
participant. Submissions are only ever read: a zip is opened as a store, never extracted.

Where each part lives: the platforms' entry points in :mod:`xbench.platform_scoring`, the bundle writers in
:mod:`xbench.platform_bundles`, the ``xbench package`` commands here; the public names of both are importable
from here too (the platforms' scripts and the bundled ``score.py`` import ``xbench.package``).
"""
from __future__ import annotations

from xbench.schemas.errors import InputError, escape_text

import datetime as _dt
import json
import os
from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas._cli import CONTEXT, Command, UserError
from xbench.schemas.options import MAX_SECONDS, Flag, Int, Text, click_options, opt, parse, resamples

from xbench.platform_bundles import (CODABENCH_METADATA, CODABENCH_SCORE, COMPETITION_HEADER, COMPETITION_SCORE,
                                     MAX_STORE_BYTES, MAX_WHEEL_BYTES, MAX_WHEEL_METADATA_BYTES, TEAM_CHECK,
                                     _parse_when, check_competition, check_wheel, competition_columns,
                                     competition_spec, load_wheel, replace_problem, to_yaml, write_codabench_bundle,
                                     write_competition_bundle, zip_store)
from xbench.platform_scoring import (GC_GROUND_TRUTH, SCORE_OPTIONS_ENV, STORE_SUFFIXES, PlatformError,
                                     codabench_main, find_store, for_teams, grand_challenge_main, platform_options,
                                     round2_pair, score_for_platform)

__all__ = ["CODABENCH_METADATA", "CODABENCH_SCORE", "COMPETITION_HEADER", "COMPETITION_SCORE", "GC_GROUND_TRUTH",
           "MAX_STORE_BYTES", "MAX_WHEEL_BYTES", "MAX_WHEEL_METADATA_BYTES", "SCORE_OPTIONS_ENV", "STORE_SUFFIXES",
           "TEAM_CHECK", "PlatformError", "check_competition", "check_wheel", "codabench_main", "competition_columns",
           "competition_spec", "find_store", "for_teams", "grand_challenge_main", "load_wheel", "package",
           "platform_options", "replace_problem", "round2_pair", "score_for_platform", "to_yaml",
           "write_codabench_bundle", "write_competition_bundle", "zip_store"]


@click.group("package", context_settings=dict(CONTEXT))
@click.option("--debug", is_flag=True, expose_value=False, help="Show the traceback of an unexpected error.")
def package() -> None:
    """Bundles for scoring on challenge platforms."""


@dataclass(kw_only=True)
class CodabenchOptions:
    """What ``xbench package codabench`` takes (the fields are its options)."""

    gt_path: Path = opt(check=Text(click.Path(path_type=Path)), flag='--gt', required=True,
                        help='Ground-truth store (gt.zarr or gt.zarr.zip) to package with the scoring program.')
    out_path: Path = opt(Path('scoring_program.zip'), check=Text(click.Path(path_type=Path)), flag='--out',
                         help='The scoring program zip to write.')
    gt_in_program: bool = opt(False, check=Flag(),
                              help='Accept that the scoring program holds the private ground truth (required: '
                                   'see above).')
    quiet: bool = opt(False, check=Flag(), short='-q', help='Print nothing but errors.')
    as_json: bool = opt(False, check=Flag(), flag='--json', help='Print the result as JSON on stdout.')


@package.command("codabench", cls=Command, short_help="a Codabench scoring program holding the ground truth")
@click_options(CodabenchOptions)
def codabench(**params) -> None:
    """Write a Codabench scoring program: metadata.yaml, score.py and the ground truth.

    The ground truth sits inside the scoring program, and a competition may share its scoring program with
    the participants (Codabench's make_programs_available): the command refuses unless --gt-in-program
    acknowledges it. `xbench package codabench-competition` keeps each phase's ground truth in its
    reference data instead, which participants never see.

    \b
    Example:
      xbench package codabench --gt data/gt.zarr --gt-in-program --out scoring_program.zip
    """
    o = parse(CodabenchOptions, params)
    gt_path, out_path, gt_in_program, quiet, as_json = o.gt_path, o.out_path, o.gt_in_program, o.quiet, o.as_json
    from xbench.schemas import validate_ground_truth

    problems = [str(p) for p in validate_ground_truth(gt_path)]
    if not gt_in_program:
        problems.append(f"--gt {gt_path}: the scoring program would hold the private ground truth, and a "
                        "competition may share its scoring program with participants (make_programs_available); "
                        "use `xbench package codabench-competition`, which keeps it in the reference data, or pass "
                        "--gt-in-program to accept it")
    gt_real, out_real = Path(os.path.realpath(gt_path)), Path(os.path.realpath(out_path))
    if out_real == gt_real or gt_real in out_real.parents:
        problems.append(f"--out {out_path}: is or lies inside the ground truth ({gt_path}); nothing may be written there")
    problems += filter(None, [replace_problem(out_path, "metadata.yaml", CODABENCH_METADATA)])
    if problems:
        raise UserError(problems, f"invalid input ({len(problems)} problem(s) above); nothing was written")
    write_codabench_bundle(gt_path, out_path)
    click.echo(f"WARNING: {out_path} holds the private ground truth ({gt_path.name} as gt.zarr.zip): never make "
               "this scoring program available to participants (Codabench: make_programs_available: false)",
               err=True)
    if as_json:
        click.echo(json.dumps({"ok": True, "scoring_program": str(out_path)}))
    elif not quiet:
        click.echo(f"scoring program -> {out_path}")


def _check_gt(option: str, path: Path, out_real: Path) -> list[str]:
    from xbench.schemas import validate_ground_truth

    problems = [f"{option}: {p}" for p in validate_ground_truth(path)]
    real = Path(os.path.realpath(path))
    if out_real == real or real in out_real.parents:
        problems.append(f"--out: is or lies inside the ground truth {option} ({path}); nothing may be written there")
    return problems


def _datasets(gt: Path) -> list[str]:
    from xbench.schemas import read_ground_truth

    return sorted(read_ground_truth(gt).datasets)


@dataclass(kw_only=True)
class CompetitionOptions:
    """What ``xbench package codabench-competition`` takes (the fields are its options)."""

    gt_val: Path = opt(check=Text(click.Path(path_type=Path)), flag='--gt-validation', required=True,
                       help='Ground truth of the validation phase (gt.zarr or gt.zarr.zip).')
    gt_test: Path = opt(check=Text(click.Path(path_type=Path)), required=True,
                        help='Ground truth of the test phase (a different one; it decides the final ranking).')
    docker_image: str = opt(check=Text(), required=True,
                            help='The image Codabench scores in: one with xbench-cxr installed, pushed to a '
                                 'registry Codabench can pull from (see docs/how-to/platforms.md).')
    out_path: Path = opt(Path('competition.zip'), check=Text(click.Path(path_type=Path)), flag='--out',
                         help='The competition bundle to write.')
    title: str = opt('XBench: recognition and grounding of chest X-ray findings', check=Text(),
                     help="The competition's title.")
    validation_start: str | None = opt(None, check=Text(), metavar='DATE',
                                       help="Start of the validation phase, UTC (YYYY-MM-DD or 'YYYY-MM-DD "
                                            "HH:MM:SS'). [default: today]")
    test_start: str | None = opt(None, check=Text(), metavar='DATE',
                                 help='Start of the test phase (and end of the validation phase). [default: 60 '
                                      'days after the validation start]')
    test_end: str | None = opt(None, check=Text(), metavar='DATE',
                               help='End of the test phase. [default: open-ended]')
    max_per_day: int = opt(5, check=Int(1, 1000), help='Submissions per day and team.')
    max_test_submissions: int = opt(10, check=Int(1, 100_000), help='Submissions per team in the whole test phase.')
    time_limit: int = opt(1800, check=Int(60, MAX_SECONDS), help='Seconds a scoring run may take.')
    bootstrap: int = resamples(help='Bootstrap resamples of the 95 % intervals (0: no interval columns are filled).')
    wheel: Path | None = opt(None, check=Text(click.Path(path_type=Path)), metavar='FILE',
                             help="The scorer's wheel (dist/xbench_cxr-VERSION-py3-none-any.whl, from `make "
                                  "dist`), shipped to participants as the phases' starting kit so they can "
                                  'validate before submitting (xbench-cxr is not on PyPI yet). [default: none; '
                                  'the overview page then points to the source]')
    images_val: str | None = opt(None, check=Text(), flag='--images-validation', metavar='WHERE',
                                 help="Where teams get the validation phase's public images store (a URL or a "
                                      'sentence), named on the Data page. [default: the page says the organisers '
                                      'publish it]')
    images_test: str | None = opt(None, check=Text(), metavar='WHERE',
                                  help="Where teams get the test phase's public images store (another split).")
    quiet: bool = opt(False, check=Flag(), short='-q', help='Print nothing but errors.')
    as_json: bool = opt(False, check=Flag(), flag='--json', help='Print the result as JSON on stdout.')


@package.command("codabench-competition", cls=Command,
                 short_help="a whole Codabench competition: both phases, the leaderboard, the pages")
@click_options(CompetitionOptions)
def codabench_competition(**params) -> None:
    """Write a whole Codabench competition: a validation and a test phase, each with its own reference data,
    the leaderboard (every metric with its 95 % interval), the scoring program, pages and a logo.

    Upload the zip at Codabench's Benchmarks > Management > Upload; the walk-through is in docs/how-to/platforms.md.

    \b
    Example:
      xbench package codabench-competition --gt-validation data/gt.zarr --gt-test gt_test.zarr \\
          --docker-image docker.io/myteam/xbench-codabench:0.1.0 --validation-start 2027-01-04 \\
          --test-start 2027-03-01 --out competition.zip
    """
    o = parse(CompetitionOptions, params)
    (gt_val, gt_test, docker_image, out_path, title, validation_start, test_start, test_end, max_per_day,
         max_test_submissions, time_limit, bootstrap, wheel, quiet, as_json) = (
        o.gt_val, o.gt_test, o.docker_image, o.out_path, o.title, o.validation_start, o.test_start, o.test_end,
        o.max_per_day, o.max_test_submissions, o.time_limit, o.bootstrap, o.wheel, o.quiet, o.as_json)
    out_real = Path(os.path.realpath(out_path))
    problems = _check_gt("--gt-validation", gt_val, out_real) + _check_gt("--gt-test", gt_test, out_real)
    if not problems and Path(os.path.realpath(gt_val)) == Path(os.path.realpath(gt_test)):
        problems.append("--gt-test: is the validation ground truth; the test phase needs its own")
    problems += filter(None, [replace_problem(out_path, "competition.yaml", COMPETITION_HEADER)])
    if not title.strip():
        problems.append("--title: must not be empty")
    elif any("\ud800" <= c <= "\udfff" for c in title):
        problems.append(f"--title {escape_text(title)}: holds bytes that are not UTF-8 (a lone surrogate); "
                        "competition.yaml and the pages are UTF-8")
    if not docker_image.strip() or any(c.isspace() for c in docker_image):
        problems.append(f"--docker-image {docker_image!r}: expected an image name such as docker.io/team/xbench:0.1.0")
    if wheel is not None:
        problems += check_wheel(wheel)
    try:
        today = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
        v_start = _parse_when(validation_start, "--validation-start") if validation_start else today
        if test_start:
            t_start = _parse_when(test_start, "--test-start")
        elif v_start > _dt.datetime.max - _dt.timedelta(days=60):
            raise PlatformError(f"--validation-start {validation_start!r}: the test phase would start 60 days "
                                "later, past the year 9999; give an earlier date or --test-start")
        else:
            t_start = v_start + _dt.timedelta(days=60)
        t_end = _parse_when(test_end, "--test-end") if test_end else None
    except PlatformError as exc:
        problems.append(str(exc))
    else:
        if t_start <= v_start:
            problems.append("--test-start: must be after --validation-start (the validation phase ends when the "
                            "test phase starts)")
        if t_end is not None and t_end <= t_start:
            problems.append("--test-end: must be after --test-start")
    if problems:
        raise UserError(problems, f"invalid input ({len(problems)} problem(s) above); nothing was written")
    datasets = sorted(set(_datasets(gt_val)) | set(_datasets(gt_test)))
    spec = competition_spec(title=title, docker_image=docker_image, validation_start=v_start, test_start=t_start,
                            test_end=t_end, datasets=datasets, max_per_day=max_per_day,
                            max_test=max_test_submissions, time_limit=time_limit)
    images = (o.images_val, o.images_test)
    for option, where in (("--images-validation", images[0]), ("--images-test", images[1])):
        if where is not None and (not where.strip() or any("\ud800" <= c <= "\udfff" or c in "\r\n" for c in where)):
            problems.append(f"{option} {escape_text(where)}: expected a URL or one line of text")
    if problems:
        raise UserError(problems, f"invalid input ({len(problems)} problem(s) above); nothing was written")
    try:  # the stores and the wheel are read (bounded) while the bundle is built
        write_competition_bundle(gt_val, gt_test, out_path, spec, bootstrap=bootstrap, wheel=wheel, images=images)
    except InputError as exc:
        raise UserError([str(p) for p in exc.problems], "nothing was written") from None
    n_cols = len(spec["leaderboards"][0]["columns"])
    if as_json:
        click.echo(json.dumps({"ok": True, "competition": str(out_path), "columns": n_cols, "datasets": datasets}))
    elif not quiet:
        click.echo(f"competition bundle -> {escape_text(str(out_path))} (2 phases, {n_cols} leaderboard columns)")
        if wheel is None:
            click.echo("note: no --wheel: participants get no validator with the competition (xbench-cxr is not on "
                       "PyPI yet); `make dist` builds the wheel to pass", err=True)
        if None in images:
            click.echo("note: no --images-validation/--images-test: the Data page cannot say where teams get each "
                       "phase's images store (they need it to check coverage before submitting)", err=True)
