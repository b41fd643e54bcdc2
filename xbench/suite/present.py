"""What ``xbench run`` shows: the ranked board, the dry run's plan, and the click command itself."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import click

from xbench.run_options import RunOptions
from xbench.schemas import options as _options
from xbench.schemas._cli import RESUME_HINT, UserError, apply_budget, budget_options, command
from xbench.schemas.options import click_options
from xbench.suite.driver import RunResult, run_suite
from xbench.suite.parse import Suite, SuiteError, load_suite


def format_leaderboard(rows: Sequence[dict]) -> str:
    """The ranked board printed by ``xbench run`` and ``xbench demo``: the one terminal board
    (score/report/terminal.py's ``board_text``, as ``xbench-score`` and ``xbench report`` print it)."""
    from xbench.score.report.terminal import board_text

    return board_text([(r["model"], r, r.get("ci95") or {}) for r in rows])



# ---------------------------------------------------------------------------------------- command
def _print_plan(result: RunResult, suite: Suite) -> None:
    click.echo(f"suite {suite.name}: {len(suite.datasets)} dataset(s), {len(suite.models)} model run(s) -> {result.run_dir}")
    for key, s in result.datasets.items():
        click.echo(f"  {key} ({s['split']}): {s['cases']} case(s) listed, {s['problems']} reader problem(s)")
    width = max(len(r["step"]) for r in result.steps)
    for r in result.steps:
        mark = "" if r["selected"] else "  (not selected)"
        click.echo(f"  {r['step']:<{width}}  {r['status']:<6}  {r['reason']}{mark}")


def _end_budget(watch) -> None:
    """The checks passed: stop the --max-memory/--timeout watch and give the steps the default limits."""
    from xbench.schemas import budget

    watch.stop()
    budget.set_limits(budget.Limits())


@command("run", on_interrupt=RESUME_HINT)
@click.argument("suite_file", metavar="SUITE.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click_options(RunOptions)
@budget_options
def run(suite_file, max_memory, timeout, **params):
    """Run a whole benchmark from one suite file: prepare -> extract -> score -> report.

    Steps already done with the same inputs and options (by content hash) are skipped; an
    interrupted run resumes. The suite, the resolved plan and the software versions are recorded in
    OUT/xbench-run.json; the ranked leaderboard is printed at the end.

    \b
    Examples:
      xbench run suites/demo.yaml
      xbench run suites/paper.yaml --dry-run
      xbench run suites/paper.yaml --limit 5
      xbench run suites/paper.yaml --only extract/carzero --only score/carzero

    --max-memory and --timeout bound the checks: reading the suite and the model configs it names, and
    (with --dry-run) every dataset's annotation files. Once the checks pass, the steps run under their
    own limits (an extraction loads models of several GiB and a full preparation takes hours).
    """
    o = _options.parse(RunOptions, params)
    out, limit, dry_run, only, quiet, as_json = o.out, o.limit, o.dry_run, o.only, o.quiet, o.as_json
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    watch = apply_budget("xbench run", max_memory, timeout)
    say = (lambda msg: None) if quiet or as_json else (lambda msg: click.echo(msg, err=True))
    try:
        suite = load_suite(suite_file)
        result = run_suite(suite, out=out, limit=limit, dry_run=dry_run, only=only, progress=not (quiet or as_json),
                           say=say, before_steps=lambda: _end_budget(watch))
    except SuiteError as e:  # invalid input: exit 2, one line per problem (the CLI layer prints them)
        raise UserError(e.problems) from None
    if as_json:
        click.echo(json.dumps({"run_dir": str(result.run_dir), "dry_run": dry_run, "steps": result.steps,
                               "leaderboard": result.leaderboard, "problems": result.problems,
                               "datasets": result.datasets}, default=str))
    elif dry_run:
        _print_plan(result, suite)
    if dry_run:
        if result.problems and as_json:  # the JSON above already lists them
            click.get_current_context().exit(2)
        if result.problems:
            raise UserError(result.problems)
        return
    if not as_json:
        if result.leaderboard:
            click.echo(format_leaderboard(result.leaderboard))
        if result.report.exists():
            click.echo(f"report: {result.report.resolve()}")
