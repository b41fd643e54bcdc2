"""``xbench report DIR... --out OUT`` and ``xbench compare A_DIR B_DIR``: the report over earlier score
outputs, without rescoring.

Exit codes: 0 written; 2 unusable input (one problem per line on stderr, no traceback); 1 anything else.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, apply_budget, budget_options, command
from xbench.schemas.options import Flag, Text, click_options, opt, parse, resamples, seed_opt
from xbench.schemas.errors import escape_text
from xbench.schemas.options import from_params
from xbench.score.options import ReportOptions

from xbench.score.report._load import ReportInputError

__all__ = ["report", "compare", "main", "compare_main"]


def _parse_submissions(values) -> dict:
    out = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"expected NAME=PATH, got {v!r}", param_hint="--submission")
        out[name] = path
    return out


@command("report", on_interrupt=NOT_WRITTEN_HINT)
@click.argument("result_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click_options(ReportOptions)
@budget_options
def report(result_dirs, max_memory, timeout, **params):
    """Build the leaderboard, figures and HTML page from earlier xbench-score outputs.

    Each RESULT_DIR is one submission's score output (metrics.json, and pairs.parquet +
    pair_counts.npz for intervals, the size figure, overlays and the paired gaps).

    \b
    Example:
      xbench report scores/clip scores/dog scores/random --out report/
      xbench report scores/* --out report/ --images images.zarr --gt gt.zarr
    """
    from xbench.schemas.paths import PublishedDir, output_problems, write_marker

    from xbench.score.report import build_report

    apply_budget("xbench report", max_memory, timeout)  # result folders are files from outside
    o = ReportOptions(**from_params(ReportOptions, params))
    out_dir, images, gt, sanity, quiet, as_json = o.out_dir, o.images, o.gt, o.sanity, o.quiet, o.as_json
    subs = _parse_submissions(o.submissions)
    inputs = {f"the result folder {p}": p for p in result_dirs}
    inputs.update({"the images store": images, "the ground truth": gt})
    inputs.update({f"the sanity folder {p}": p for p in sanity})
    inputs.update({f"the submission {k}": v for k, v in subs.items()})
    # the report may go beside the score folders it reads (xbench-score's own layout): they are carried over
    held = tuple(f"the result folder {p}" for p in result_dirs)
    problems = output_problems(out_dir, inputs, may_hold=held)
    if problems:
        raise UserError(problems, "nothing was written")
    try:
        with PublishedDir(out_dir, keep=tuple(result_dirs)) as work:  # built beside, swapped in whole: never half a report
            build_report(work, result_dirs, images=images, gt=gt, submissions=subs, bootstrap=o.bootstrap,
                         seed=o.seed, size_bins=o.size_bins, overlays=o.overlays,
                         progress=not quiet and not as_json and sys.stderr.isatty(), title=o.title, sanity=sanity)
            write_marker(work, "xbench report")
        index = Path(out_dir) / "index.html"
    except ReportInputError as err:
        raise UserError(err.problems) from None
    if as_json:
        click.echo((Path(out_dir) / "report.json").read_text())
    elif not quiet:  # the ranked table with intervals, as the report wrote it (no second read of the inputs)
        click.echo((Path(out_dir) / "leaderboard.txt").read_text(encoding="utf-8").rstrip("\n"))
        click.echo(escape_text(f"report written: {index}"))


@dataclass(kw_only=True)
class CompareOptions:
    """What ``xbench compare A_DIR B_DIR`` takes besides the two folders (the fields are its options)."""

    bootstrap: int = resamples(help='Paired bootstrap resamples (0: point estimates only).')
    seed: int = seed_opt(help='Seed of the resamples.')
    per_class: bool = opt(False, check=Flag(), flag='--per-class/--no-per-class',
                          help='Also compare every class, not only dataset means and the overall mean.')
    out_csv: Path | None = opt(None, check=Text(click.Path(path_type=Path)), flag='--out',
                               help='Also write the comparison as CSV (fractions) to this file.')
    quiet: bool = opt(False, check=Flag(), short='-q', help='Print nothing (use with --out).')
    as_json: bool = opt(False, check=Flag(), flag='--json',
                        help='Print the rows as JSON instead of a Markdown table.')


@command("compare", on_interrupt=NOT_WRITTEN_HINT)
@click.argument("a_dir", type=click.Path(path_type=Path))
@click.argument("b_dir", type=click.Path(path_type=Path))
@click_options(CompareOptions)
@budget_options
def compare(a_dir, b_dir, max_memory, timeout, **params):
    """Paired bootstrap of A - B for every metric, on the same ground truth.

    Both directories are xbench-score outputs for the same gt.zarr. The same resampled cases are
    used for both submissions, so the 95% interval reflects how they differ case by case.
    p-values are never below 1/(B+1) for B resamples (printed "< 1/(B+1)" there) and are shown
    beside their Holm adjustment over every row printed (all metric x pair tests shown together
    form one family; a test shown in two rows, e.g. the overall mean of a single dataset, counts
    once). A difference is significant, marked with *, when its Holm-adjusted p is below 0.05;
    when B is too small for any to pass the adjustment, the output says so.

    \b
    Example:
      xbench compare scores/clip scores/random --bootstrap 2000
    """
    o = parse(CompareOptions, params)
    bootstrap, seed, per_class, out_csv, quiet, as_json = o.bootstrap, o.seed, o.per_class, o.out_csv, o.quiet, o.as_json
    from xbench.score.report._load import load_results

    apply_budget("xbench compare", max_memory, timeout)
    if (Path(b_dir) / "human.json").is_file():  # B is the output of `xbench human`: A against the human row
        from xbench.score.report.human_compare import compare_human

        return compare_human(a_dir, b_dir, bootstrap=bootstrap, seed=seed, per_class=per_class, out_csv=out_csv,
                             quiet=quiet, as_json=as_json)

    from xbench.score.metrics import registry as R

    from xbench.score.report._load import metric_groups

    try:
        a, b = load_results([a_dir, b_dir])
    except ReportInputError as err:
        raise UserError(err.problems) from None
    with R.opt_in(*metric_groups([a, b])):  # opt-in metrics the results were scored with are compared and shown
        _compare(a, b, a_dir, b_dir, bootstrap, seed, per_class, out_csv, quiet, as_json)


def _compare(a, b, a_dir, b_dir, bootstrap, seed, per_class, out_csv, quiet, as_json) -> None:
    """``xbench compare`` on two loaded results: the rows, the CSV and what is printed."""
    from xbench.score.report import comparison_csv
    from xbench.score.report.paired import ALPHA, HOLM_FAMILY, VERDICT, compare_results, family_size, floor_note, with_holm

    try:
        rows = with_holm(compare_results(a, b, bootstrap=bootstrap, seed=seed, per_class=per_class))
    except ReportInputError as err:
        raise UserError(err.problems) from None
    if out_csv is not None:  # the compared results are inputs: never written into
        from xbench.score.report._files import write_csv_outside

        write_csv_outside(out_csv, comparison_csv(rows, a.name, b.name), (a_dir, b_dir))
    sections = _section_lines(a, b)
    if as_json:
        bs = sorted({r.n_valid for r in rows if r.p_value is not None})
        click.echo(json.dumps({
            "a": a.name, "b": b.name, "n_boot": bootstrap, "seed": seed,
            "p_values": {"test": "two-sided paired bootstrap", "floor": "1/(B+1), B = n_valid resamples",
                         "resamples": bs, "adjustment": "holm", "family": HOLM_FAMILY,
                         "n_tests": family_size(rows), "n_rows": sum(r.p_value is not None for r in rows),
                         "alpha": ALPHA, "significant": VERDICT, "too_few_resamples": floor_note(rows)},
            "rows": [dict(r.__dict__, significant=r.significant, p_floor=r.p_floor, at_floor=r.at_floor)
                     for r in rows],
            **({"sections": sections} if sections else {})}, indent=1))
    elif not quiet:
        from xbench.score.report.terminal import comparison_text

        click.echo(comparison_text(rows, a.name, b.name))
        for name, lines in sections.items():
            click.echo("\n".join([f"{name}:", *(f"  {line}" for line in lines)]))


def _section_lines(a, b) -> dict[str, list[str]]:
    """{section: lines} of every declared section with a ``compare`` hook that both results hold."""
    from xbench.score.sections.plugins import sections

    out = {}
    for s in sections(primary=False):
        if s.section in a.metrics and s.section in b.metrics:
            lines = s.compare(a, b)
            if lines:
                out[s.section] = [escape_text(str(line)) for line in lines]
    return out


def main(argv=None):
    """Entry point for ``python -m xbench.score.report.cli`` (the report command alone)."""
    report.main(args=argv, prog_name="xbench report")


def compare_main(argv=None):
    compare.main(args=argv, prog_name="xbench compare")


if __name__ == "__main__":
    main()
