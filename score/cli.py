"""``xbench-score``: score submissions against a ground truth and write metrics.json, tables and counts.

Exit status (the contract's, through xbench.schemas._cli): 0 scored; 2 invalid input or usage (every
problem on stderr, one a line, nothing written); 1 anything else (one line); 130 interrupted.
"""

from __future__ import annotations

import json

import click

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, apply_budget, budget_options, command, progress
from xbench.schemas.errors import escape_text
from xbench.schemas.options import click_options, parse

from xbench.score.options import ScoreOptions
from xbench.score.outputs.leaderboard import TERMINAL_COLUMNS

# moved into the library's entry point (score/entry.py); still importable from here
from xbench.score.entry import _input_paths, _unique_stems, partial_line  # noqa: F401

__all__ = ["main", "run_options", "score_command"]


#: the ranked terminal table's columns: (metrics.json key, header); ranked by the first. The same columns and
#: cells as ``xbench report``'s leaderboard.txt and ``xbench run``'s board (score/report/terminal.py).
RANK_COLUMNS = TERMINAL_COLUMNS


def ranked_table(rows: list[tuple]) -> str:
    """Models ranked by overall pointing game: the one terminal board (score/report/terminal.py's
    ``board_text``). ``rows``: (name, the metrics.json "overall" dict[, {key: (low, high)}])."""
    from xbench.score.report.terminal import board_text

    return board_text(rows)


@command(on_interrupt=NOT_WRITTEN_HINT)
@click.argument("submissions", nargs=-1, required=True, type=click.Path(path_type=str))
@click_options(ScoreOptions)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout (no progress bar).")
@budget_options
def score_command(submissions, as_json, max_memory, timeout, **params):
    """Score SUBMISSION store(s) against the ground truth GT.

    \b
    Examples:
      xbench-score sub.zarr --gt gt.zarr --out results/
      xbench-score a.zarr b.zarr --gt gt.zarr --out results/ --bootstrap 2000
      xbench-score test.zarr --gt gt_test.zarr --thresholds-from results_val/metrics.json --out results_test/
      xbench-score sub.zarr --gt gt.zarr --out /output --format grand-challenge --quiet
      xbench-score smoke.zarr --gt gt.zarr --out results_smoke/ --allow-missing
      xbench-score sub.zarr --gt gt.zarr --faithfulness round2-sub.zarr --key round2.key.npz
      xbench-score sub.zarr --gt gt.zarr --out results/ --human human/
      xbench-score sub.zarr --gt gt.zarr --out results/ --metrics complexity
      xbench-score sub.zarr --gt gt.zarr --out results/ --by sex,view

    Writes metrics.json (the contract layout, with 95% bootstrap intervals and the chosen thresholds),
    pairs.parquet (one row per labelled case and class), pair_counts.npz (per-pair threshold counts, for
    reports and paired comparisons) and the paper's tables as CSV and Markdown.
    """
    return _command(parse(ScoreOptions, params), submissions, as_json=as_json, max_memory=max_memory,
                    timeout=timeout)


def _command(options: ScoreOptions, submissions, *, as_json: bool, max_memory, timeout) -> int:
    """The command on its options: the library's :func:`xbench.score.entry.run` with the command's printing
    (progress bars, each submission's lines, the ranked table, ``--json``) and its error lines."""
    from xbench.score.kernels._allocator import limit_malloc_arenas

    limit_malloc_arenas()  # first, before zarr, Numba or the reading threads start any thread
    apply_budget("xbench-score", max_memory, timeout)  # untrusted input: every read within --max-memory, --timeout
    from xbench.score.entry import ScoreRunError, run

    show = not (options.quiet or as_json)
    bars = (lambda name: progress(desc=name, unit="pair")) if show else None
    try:
        # a warning prints through the command layer's one hook (schemas/_cli.py: one escaped line, zarr's stray
        # entries named as such, each line once)
        done = run(options, submissions, progress=bars, on_scored=_lines_of if show else None,
                   say=lambda line: click.echo(line, err=True))
    except ScoreRunError as exc:
        raise UserError(exc.problems, exc.hint) from None
    summaries = [s.summary for s in done]
    if len(done) > 1 and show:
        labels = [s["label"] for s in summaries]  # a model name given twice: each row also names its folder
        labels = [f"{lab} [{s.name}]" if labels.count(lab) > 1 else lab for lab, s in zip(labels, done)]
        click.echo(ranked_table([(lab + (f" (partial: {s['partial']['cases']} of {s['partial']['of']} cases)"
                                         if s.get("partial") else ""), s["overall"], s["ci95"])
                                 for lab, s in zip(labels, summaries)]))
    if done[0].report is not None and show:
        click.echo(f"report -> {options.out_dir}/")
    if as_json:
        click.echo(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
    return 0


def _lines_of(scored) -> None:
    """What the command prints once a submission is scored: notes, where its files went, its overall values
    and each section's own lines."""
    from xbench.score.outputs.tables import ci_of
    from xbench.score.report.terminal import overall_lines
    from xbench.score.sections.plugins import sections

    metrics = scored.result.metrics
    for m in scored.result.notes:  # undefined metrics: one counted line per dataset and reason
        click.echo(f"note: {escape_text(m)}", err=True)
    click.echo(escape_text(f"{scored.submission}: scored in {scored.seconds:.1f} s -> {scored.folder}/ "
                           f"({len(scored.files)} files)"))
    partial = partial_line(metrics)
    if partial:
        click.echo(escape_text(f"  {partial}"))
    ov = metrics["overall"]
    click.echo("\n".join(overall_lines(ov, {k: ci_of(metrics, "overall", k) for k in ov})))
    for scope in sections(primary=False):  # each section's own lines (the human ceiling's, the gaze rows')
        if scope.section in metrics:
            for line in scope.terminal(metrics):
                click.echo(escape_text(f"  {line}"))


def run_options(options: ScoreOptions, submissions, *, max_memory: str | None = None,
                timeout: float | None = None) -> int:
    """``xbench-score`` on an options object instead of an argv (the platform entry points): the same checks,
    outputs, messages on stderr and exit status (returned), as :func:`main` with the same options would give.
    ``max_memory``, ``timeout``: the command's ``--max-memory``, ``--timeout`` (default: theirs)."""
    from xbench.schemas._cli import BudgetOptions, Interrupted, run_main

    budget = BudgetOptions()
    memory = budget.max_memory if max_memory is None else max_memory
    seconds = budget.timeout if timeout is None else timeout

    def invoke(_args):
        # the command's own context: what it starts (the budget's watchdog) is stopped when it closes
        with click.Context(score_command, info_name="xbench-score"):
            try:
                return _command(options, list(submissions), as_json=False, max_memory=memory, timeout=seconds)
            except KeyboardInterrupt:
                raise Interrupted(NOT_WRITTEN_HINT) from None

    try:
        run_main(invoke, [], "xbench-score")
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0  # pragma: no cover - run_main always exits


def main(argv: list[str] | None = None) -> None:
    """Console entry point: exits with the contract's status, never a traceback (see xbench.schemas._cli).
    Run as a program (``argv`` None) it skips the interpreter's teardown once the outputs are published."""
    score_command.run_program(argv, "xbench-score")


if __name__ == "__main__":  # pragma: no cover
    main()
