"""``xbench-score``: score submissions against a ground truth and write metrics.json, tables and counts.

Exit status: 0 scored; 2 invalid submission or ground truth (every problem on stderr, one a line, nothing
written); 1 anything else (a one-line message).
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import click

from xbench.schemas.cli import apply_budget, budget_options

__all__ = ["main", "score_command"]

EXIT_INVALID = 2
EXIT_ERROR = 1


class _Invalid(Exception):
    def __init__(self, problems):
        self.problems = list(problems)


def _stem(path: Path) -> str:
    name = path.name.rstrip("/")
    for suffix in (".zarr.zip", ".zarr", ".zip"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return name


def _unique_stems(paths: list[Path]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for p in paths:
        s = _stem(p)
        seen[s] = seen.get(s, 0) + 1
        out.append(s if seen[s] == 1 else f"{s}-{seen[s]}")
    return out


def _split_datasets(values: tuple[str, ...]) -> list[str] | None:
    names = [v.strip() for item in values for v in item.split(",") if v.strip()]
    return names or None


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("submissions", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--gt", "gt_path", required=True, type=click.Path(path_type=Path),
              help="Ground-truth store (gt.zarr or gt.zarr.zip); only read.")
@click.option("--out", "out_dir", default=Path("report"), show_default=True, type=click.Path(path_type=Path),
              help="Output folder. With several submissions each goes into OUT/<submission name>/.")
@click.option("--bootstrap", default=1000, show_default=True, type=click.IntRange(min=0),
              help="Bootstrap resamples for the 95% intervals (0 turns them off).")
@click.option("--seed", default=0, show_default=True, type=int, help="Bootstrap seed.")
@click.option("--thresholds-from", "thresholds_from", type=click.Path(path_type=Path),
              help="Use the best thresholds (tau_dice, tau_iou) of an earlier metrics.json, e.g. from a "
                   "validation split, instead of searching them on this one.")
@click.option("--datasets", "datasets", multiple=True, metavar="KEY[,KEY...]",
              help="Score only these dataset keys (repeat or comma-separate). Default: all in the ground truth.")
@click.option("--format", "formats", multiple=True, type=click.Choice(["xbench", "grand-challenge", "codabench"]),
              help="Extra output layouts: grand-challenge adds 'aggregates' to metrics.json; codabench writes "
                   "a flat scores.json. Repeatable.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout (no progress bar).")
@budget_options
def score_command(submissions, gt_path, out_dir, bootstrap, seed, thresholds_from, datasets, formats, quiet,
                  as_json, max_memory, timeout):
    """Score SUBMISSION store(s) against the ground truth GT.

    \b
    Examples:
      xbench-score sub.zarr --gt gt.zarr --out results/
      xbench-score a.zarr b.zarr --gt gt.zarr --out results/ --bootstrap 2000
      xbench-score test.zarr --gt gt_test.zarr --thresholds-from results_val/metrics.json
      xbench-score sub.zarr --gt gt.zarr --out /output --format grand-challenge --quiet

    Writes metrics.json (the contract layout, with 95% bootstrap intervals and the chosen thresholds),
    pairs.parquet (one row per labelled case and class), pair_counts.npz (per-pair threshold counts, for
    reports and paired comparisons) and the paper's tables as CSV and Markdown.
    """
    from ._allocator import limit_malloc_arenas

    limit_malloc_arenas()  # first, before zarr, Numba or the reading threads start any thread
    apply_budget("xbench-score", max_memory, timeout)  # untrusted input: every read within --max-memory, --timeout
    from xbench.schemas import read_ground_truth, validate_ground_truth, validate_submission

    from .outputs import write_outputs
    from .scoring import score_submission, thresholds_from_metrics

    names = _split_datasets(datasets)
    # Validate everything before writing anything, so an invalid input leaves no partial output.
    # The region masks are checked while scoring decodes them (once); any problem there also stops the run
    # before anything is written. Whenever something is wrong, the whole ground truth is validated, so the
    # problems listed are the same as with a full validation up front.
    if validate_ground_truth(gt_path, scan_masks=False):
        raise _Invalid(validate_ground_truth(gt_path))
    gt = read_ground_truth(gt_path)
    if names:
        unknown = [d for d in names if d not in gt.datasets]
        if unknown:
            raise click.UsageError(f"--datasets: {', '.join(unknown)} not in the ground truth; it has "
                                   f"{', '.join(sorted(gt.datasets))}")
    problems = [p for s in submissions for p in validate_submission(s, gt, datasets=names)]
    if problems:
        raise _Invalid(validate_ground_truth(gt_path) or problems)
    thresholds = thresholds_from_metrics(thresholds_from) if thresholds_from else None

    show = not (quiet or as_json)
    stems = _unique_stems(list(submissions))
    targets = [out_dir] if len(submissions) == 1 else [out_dir / s for s in stems]
    summaries = []
    for sub, stem, target in zip(submissions, stems, targets):
        t0 = time.perf_counter()
        bar = None
        if show:
            from tqdm.auto import tqdm

            bar = tqdm(total=0, unit="pair", desc=stem, file=sys.stderr, leave=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = score_submission(
                    sub, gt, bootstrap=bootstrap, seed=seed, thresholds=thresholds, datasets=names,
                    validate=False, progress=bar.update if bar else None,
                    on_total=(lambda n: (setattr(bar, "total", n), bar.refresh())) if bar else None)
            finally:
                if bar:
                    bar.close()
        label = str(result.metrics["xbench"].get("submission", {}).get("model") or stem)
        files = write_outputs(result, target, formats=("xbench", *formats), label=label)
        elapsed = time.perf_counter() - t0
        messages = sorted({str(w.message) for w in caught if "Undefined" in type(w.message).__name__})
        if show:
            for m in messages:
                click.echo(f"note: {m}", err=True)
            ov = result.metrics["overall"]
            pretty = ", ".join(f"{k} {100 * v:.2f}" for k, v in ov.items() if v is not None)
            click.echo(f"{sub}: scored in {elapsed:.1f} s -> {target}/ ({len(files)} files)")
            click.echo(f"  overall (%): {pretty}")
        summaries.append({"submission": str(sub), "out": str(target), "seconds": round(elapsed, 3),
                          "overall": result.metrics["overall"],
                          "datasets": {d: v["summary"] for d, v in result.metrics["datasets"].items()},
                          "notes": messages})
    if len(submissions) > 1:
        try:
            from .report import build_report  # the report is optional; scoring stands on its own
        except ImportError:
            build_report = None
        if build_report is not None:
            try:
                build_report(out_dir, targets, gt=gt_path, submissions=dict(zip(stems, submissions)),
                             n_boot=bootstrap, seed=seed, progress=show)
                if show:
                    click.echo(f"report -> {out_dir}/")
            except Exception as exc:  # noqa: BLE001 - the scores are written; a report failure must not hide them
                click.echo(f"xbench-score: scores written, but the report failed: {str(exc).splitlines()[0]}", err=True)
    if as_json:
        click.echo(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point: maps every failure to its exit status without a traceback."""
    from xbench.schemas import InvalidStoreError

    try:
        score_command.main(args=argv, prog_name="xbench-score", standalone_mode=False)
    except (_Invalid, InvalidStoreError) as exc:
        for p in exc.problems:
            click.echo(str(p), err=True)
        click.echo(f"xbench-score: invalid input ({len(exc.problems)} problem(s) above); nothing was written.",
                   err=True)
        sys.exit(EXIT_INVALID)
    except MemoryError:  # the budget's checks let an allocation through that --max-memory cannot hold
        click.echo("xbench-score: invalid input: scoring it needs more memory than the budget (--max-memory); "
                   "nothing was written.", err=True)
        sys.exit(EXIT_INVALID)
    except click.exceptions.Exit as exc:  # --help
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("xbench-score: aborted", err=True)
        sys.exit(EXIT_ERROR)
    except click.ClickException as exc:
        click.echo(f"xbench-score: {exc.format_message()}", err=True)
        sys.exit(EXIT_ERROR)
    except Exception as exc:  # noqa: BLE001 - the contract: one line, no traceback
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        click.echo(f"xbench-score: error: {message}", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(0)


if __name__ == "__main__":  # pragma: no cover
    main()
