"""``xbench-score``: score submissions against a ground truth and write metrics.json, tables and counts.

Exit status (the contract's, through xbench.schemas._cli): 0 scored; 2 invalid input or usage (every
problem on stderr, one a line, nothing written); 1 anything else (one line); 130 interrupted.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import click

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, apply_budget, budget_options, command, progress, require_kind
from xbench.schemas.errors import escape_text
from xbench.schemas.options import click_options

from xbench.score.options import ScoreOptions
from xbench.score.outputs.leaderboard import TERMINAL_COLUMNS

__all__ = ["main", "score_command"]

_NOTHING_WRITTEN = "invalid input (problems above); nothing was written"


def _stem(path: Path | str) -> str:
    from xbench.schemas.paths import store_stem

    return store_stem(path)


def _unique_stems(paths: list[Path]) -> list[str]:
    """One name per submission, no two alike (they name the result folders and the report's rows): the stem,
    and for a stem given again the stem with the smallest -2, -3 ... that is neither another submission's stem
    nor a name handed out before (``a-2.zarr a.zarr a.zarr.zip`` -> a-2, a, a-3). The folders are these
    names through :class:`~xbench.schemas.paths.NameTable`, which keeps names that differ by letter case alone
    apart on every file system."""
    stems = [_stem(p) for p in paths]
    taken = set(stems)  # every stem as given keeps its own name, wherever it comes
    given: set[str] = set()
    out = []
    for s in stems:
        name, k = s, 1
        while name in given or (k > 1 and name in taken):
            k += 1
            name = f"{s}-{k}"
        given.add(name)
        out.append(name)
    return out


#: what the report writes at the top of --out, which no submission's folder may be named
_REPORT_ENTRIES = ("index.html", "report.json", "leaderboard.md", "leaderboard.csv", "grounding_fixed.csv",
                   "recognition.csv", "comparisons.csv", "per_class.md", "per_class", "figures")


def _input_paths(submissions, gt_path, thresholds_from, images_path=None, *, faithfulness=None, key=None,
                 human_dir=None) -> dict:
    """Every path the command reads: what ``--out`` must neither be, lie inside, nor hold (the one list; an
    input added to the command is added here)."""
    found = {"the ground truth": gt_path, "the --thresholds-from file": thresholds_from,
             "the --images store": images_path, "the --faithfulness submission": faithfulness,
             "the --key file": key, "the --human folder": human_dir}
    found.update({f"submission {s}": s for s in submissions})
    return found


def _split_datasets(values: tuple[str, ...]) -> list[str] | None:
    names = [v.strip() for item in values for v in item.split(",") if v.strip()]
    return names or None


#: the ranked terminal table's columns: (metrics.json key, header); ranked by the first. The same columns and
#: cells as ``xbench report``'s leaderboard.txt and ``xbench run``'s board (score/report/terminal.py).
RANK_COLUMNS = TERMINAL_COLUMNS


def ranked_table(rows: list[tuple]) -> str:
    """Models ranked by overall pointing game: the one terminal board (score/report/terminal.py's
    ``board_text``). ``rows``: (name, the metrics.json "overall" dict[, {key: (low, high)}])."""
    from xbench.score.report.terminal import board_text

    return board_text(rows)


def _thresholds_path(path: Path) -> Path:
    """--thresholds-from takes a metrics.json or the score folder holding one."""
    if path.is_dir():
        if (path / "metrics.json").is_file():
            return path / "metrics.json"
        raise UserError(f"--thresholds-from {path}: a folder without metrics.json; pass the metrics.json of an "
                        "earlier xbench-score run (e.g. results_val/metrics.json)")
    return path


def _load_thresholds(path: Path):
    from xbench.score.scoring import thresholds_from_metrics

    return thresholds_from_metrics(_thresholds_path(path))  # a ThresholdsError is an input error: exit 2


def _missing_hint(coverage: dict[str, tuple[int, int]], only_missing: bool = True) -> str:
    """The last line of a refusal for missing cases: how to score the cases present on purpose
    (``only_missing``: no other problem was found). When no submission holds a single case of the ground truth
    (its ids are another split's or dataset's), --allow-missing would have nothing to score: it is not offered."""
    if coverage and all(present == 0 for present, _ in coverage.values()):
        return (f"{_NOTHING_WRITTEN}; none of the case ids match, so --allow-missing would have nothing to score: "
                "score the submission against the ground truth of the images it was made from")
    if len(coverage) == 1:
        (present, of), = coverage.values()
        what = f"the {present} of {of} cases present"
    else:
        what = "the cases present (" + ", ".join(f"{_stem(s)}: {present} of {of}" for s, (present, of) in coverage.items()) + ")"
    if only_missing:
        return f"nothing was written; pass --allow-missing to score {what}"
    return f"{_NOTHING_WRITTEN}; once the others are fixed, --allow-missing scores {what}"


def _partial_line(metrics: dict) -> str | None:
    """"partial: N of M cases ..." for a partial run's metrics, else None."""
    part = metrics.get("partial")
    if not part:
        return None
    per = [f"{d} {e['partial']['cases']} of {e['partial']['of']}" for d, e in metrics.get("datasets", {}).items()
           if e.get("partial")]
    line = f"partial: {part['cases']} of {part['of']} cases"
    if per and len(metrics.get("datasets", {})) > 1:
        line += f" ({', '.join(per)})"
    if part.get("not_scored"):
        line += f"; not scored (no case present): {', '.join(part['not_scored'])}"
    return line


@contextmanager
def _warnings_as_lines(prog: str):
    """While scoring, a Python warning that reaches the top (none should: undefined metrics are counted notes)
    prints as one escaped line instead of a source excerpt that reads like a crash; the hook is this
    command's, not the library's, and is restored after."""
    shown = warnings.showwarning

    def one_line(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001 - the hook's signature
        click.echo(f"{prog}: warning: {escape_text(message)}", err=True)

    warnings.showwarning = one_line
    try:
        yield
    finally:
        warnings.showwarning = shown


def _is_url(path) -> bool:
    return "://" in str(path)  # remote stores are read as they are; their kind shows in validation


def _check_kinds(submissions, gt_path: Path) -> None:
    """One line naming the mistake for a store of the wrong kind (images, swapped, zipped, unfinished)."""
    from xbench.schemas._cli import store_kind_problem

    problems = [] if _is_url(gt_path) else [store_kind_problem(gt_path, "ground-truth", "--gt",
                                                                swap_with="a submission")]
    problems += [store_kind_problem(s, "submission", "each SUBMISSION", swap_with="--gt")
                 for s in submissions if not _is_url(s)]
    problems = [p for p in problems if p]
    if problems:
        raise UserError(problems, "nothing was written")


@command(on_interrupt=NOT_WRITTEN_HINT)
@click.argument("submissions", nargs=-1, required=True, type=click.Path(path_type=str))
@click_options(ScoreOptions)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout (no progress bar).")
@budget_options
def score_command(submissions, gt_path, out_dir, bootstrap, seed, thresholds_from, datasets, formats, images_path,
                  allow_missing, pointing_tolerance, faithfulness, key, human_dir, metric_groups, by, age_bands,
                  min_group, quiet, overwrite, as_json, max_memory, timeout):
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
    from xbench.score.kernels._allocator import limit_malloc_arenas

    limit_malloc_arenas()  # first, before zarr, Numba or the reading threads start any thread
    apply_budget("xbench-score", max_memory, timeout)  # untrusted input: every read within --max-memory, --timeout
    from xbench.schemas import InvalidStoreError
    from xbench.schemas.paths import MARKER, NameTable, PublishedDir, output_problems, store_path, write_marker

    from xbench.score.errors import MissingCasesError
    from xbench.score.scoring import check_inputs

    submissions = [store_path(s) for s in submissions]  # a URL stays a string: Path would fold its "//"
    gt_path = store_path(gt_path)
    inputs = _input_paths(submissions, gt_path, thresholds_from, images_path, faithfulness=faithfulness, key=key,
                          human_dir=human_dir)
    out_problems = output_problems(out_dir, inputs, command="xbench-score", overwrite=overwrite)
    if out_problems:
        raise UserError(out_problems, _NOTHING_WRITTEN)
    thresholds = _load_thresholds(thresholds_from) if thresholds_from else None
    _check_kinds(submissions, gt_path)
    if images_path is not None:
        require_kind(images_path, "images", "--images")
    names = _split_datasets(datasets)
    # Every input is validated once, before anything is written or scored (the library's check_inputs; an
    # unknown dataset key is its UnknownNameError); the region masks are checked while scoring decodes them,
    # and a problem there also stops the run before anything is written.
    try:
        gt = check_inputs(submissions, gt_path, datasets=names, allow_missing=allow_missing)
    except MissingCasesError as exc:
        from xbench.schemas.submission import MissingCases

        only = all(isinstance(p, MissingCases) for p in exc.problems)
        raise UserError(exc.problems, _missing_hint(exc.coverage, only)) from None
    except InvalidStoreError as exc:
        raise UserError(exc.problems, _NOTHING_WRITTEN) from None

    # each track's own inputs (--human, --by, --faithfulness), read and checked before anything is scored
    values = {"human_dir": human_dir, "by": by, "age_bands": age_bands, "min_group": min_group,
              "faithfulness": faithfulness, "key": key, "bootstrap": bootstrap, "seed": seed}
    tracks = _prepare_tracks(values, gt, names, submissions)
    show = not (quiet or as_json)
    stems = _unique_stems(list(submissions))
    # Submission stems become folder names: sanitised, unique, bounded (the map is in xbench-output.json).
    folders = NameTable(reserved=(*_REPORT_ENTRIES, MARKER))
    subdirs = [Path(".")] if len(submissions) == 1 else [Path(folders.name(s)) for s in stems]
    score_kw = {"bootstrap": bootstrap, "seed": seed, "thresholds": thresholds, "datasets": names,
                "metric_params": {"pointing_tolerance": pointing_tolerance}, "allow_missing": allow_missing}
    from xbench.score.metrics import registry as R

    # opt-in metrics are registered for this run only (R.opt_in), so a run without them is unchanged
    with R.opt_in(*metric_groups), PublishedDir(out_dir) as work, _warnings_as_lines("xbench-score"):
        summaries = [_score_one(sub, stem, gt, work / d, out_dir / d, score_kw, formats, show, tracks)
                     for sub, stem, d in zip(submissions, stems, subdirs)]
        reported = len(submissions) > 1 and _report_or_nothing(
            work, [work / d for d in subdirs], gt_path, images_path, dict(zip(stems, submissions)), bootstrap, seed,
            show)
        write_marker(work, "xbench-score", {"submissions": folders.mapping})
    if len(submissions) > 1 and show:
        labels = [s["label"] for s in summaries]  # a model name given twice: each row also names its folder
        labels = [f"{lab} [{stem}]" if labels.count(lab) > 1 else lab for lab, stem in zip(labels, stems)]
        click.echo(ranked_table([(lab + (f" (partial: {s['partial']['cases']} of {s['partial']['of']} cases)"
                                         if s.get("partial") else ""), s["overall"], s["ci95"])
                                 for lab, s in zip(labels, summaries)]))
    if reported and show:
        click.echo(f"report -> {out_dir}/")
    if as_json:
        click.echo(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
    return 0


def _prepare_tracks(values: dict, gt, names, submissions) -> dict:
    """{track name: its context} for every declared track asked for (:mod:`xbench.score.sections.rowscope`: ``prepare``)."""
    from xbench.score.sections.rowscope import row_scopes

    out = {}
    for scope in row_scopes(primary=False):
        if scope.prepare is not None:
            context = scope.fn("prepare")(values, gt, names, submissions)
            if context is not None:
                out[scope.name] = context
    return out


def _score_one(sub, stem, gt, folder: Path, target: Path, score_kw: dict, formats, show: bool,
               tracks: dict | None = None) -> dict:
    """Score one submission into ``folder`` (inside the work folder; ``target`` is where it will be); its summary."""
    from xbench.score.outputs.folder import prefetch_writers, write_into
    from xbench.score.scoring import score_submission
    from xbench.score.outputs.tables import ci_of

    prefetch_writers()  # pyarrow's Parquet writer loads while scoring runs, not after it
    t0 = time.perf_counter()
    bar = progress(desc=stem, unit="pair", enabled=show)
    try:
        # validated moments ago by check_inputs (the same datasets and allow_missing): not again
        result = score_submission(sub, gt, **score_kw, validate=False, progress=bar.update, on_total=bar.set_total)
    finally:
        bar.close()
    from xbench.score.sections.rowscope import row_scopes

    for scope in row_scopes(primary=False):  # the tracks asked for, in declaration order; none: metrics.json unchanged
        if scope.name in (tracks or {}):
            result = scope.fn("add")(result, tracks[scope.name], bootstrap=score_kw["bootstrap"], seed=score_kw["seed"])
    label = str(result.metrics["xbench"].get("submission", {}).get("model") or stem)
    files = write_into(result, folder, formats=("xbench", *formats), label=label)
    elapsed = time.perf_counter() - t0
    partial = _partial_line(result.metrics)
    if show:
        for m in result.notes:  # undefined metrics: one counted line per dataset and reason
            click.echo(f"note: {escape_text(m)}", err=True)
        click.echo(escape_text(f"{sub}: scored in {elapsed:.1f} s -> {target}/ ({len(files)} files)"))
        if partial:
            click.echo(escape_text(f"  {partial}"))
        from xbench.score.report.terminal import overall_lines

        ov = result.metrics["overall"]
        click.echo("\n".join(overall_lines(ov, {k: ci_of(result.metrics, "overall", k) for k in ov})))
        from xbench.score.sections.rowscope import row_scopes

        for scope in row_scopes(primary=False):  # each section's own lines (the human ceiling's)
            if scope.terminal is not None and scope.section in result.metrics:
                for line in scope.fn("terminal")(result.metrics):
                    click.echo(escape_text(f"  {line}"))
    summary = {"submission": str(sub), "label": label, "out": str(target), "seconds": round(elapsed, 3),
               "overall": result.metrics["overall"],
               "ci95": {k: ci_of(result.metrics, "overall", k) for k in result.metrics["overall"]},
               "datasets": {d: v["summary"] for d, v in result.metrics["datasets"].items()},
               "notes": list(result.notes)}
    if partial:
        summary["partial"] = result.metrics["partial"]
    return summary


def _report_or_nothing(work: Path, targets, gt_path, images_path, submissions, bootstrap, seed, show) -> bool:
    """The report over several results, built into ``work``; on failure its files are removed again, since
    the scores stand on their own and a half report must not be published beside them. Whether it was built."""
    try:
        from xbench.score.report import build_report  # the report is optional; scoring stands on its own
    except ImportError:
        return False
    keep = set(p.name for p in work.iterdir())
    try:
        build_report(work, targets, gt=gt_path, images=images_path, submissions=submissions, n_boot=bootstrap,
                     seed=seed, progress=show and sys.stderr.isatty())
    except Exception as exc:  # noqa: BLE001 - a report failure must not hide the scores
        import shutil

        for p in work.iterdir():
            if p.name not in keep:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        click.echo(f"xbench-score: scores written, but the report failed: {_report_failure(exc)}", err=True)
        return False
    return True


def _report_failure(exc: BaseException) -> str:
    """One escaped line for a report that failed: an input problem as the report words it (the results cannot
    be compared ...), anything else as what it is, a bug ("unexpected TypeError: ... --debug"), never a bare
    internal message that reads as if the input were wrong. ``--debug`` (or XBENCH_DEBUG) adds the traceback."""
    import os
    import traceback

    from xbench.schemas._cli import classify

    failure = classify(exc)
    if failure.code != 2 and ("--debug" in sys.argv or os.environ.get("XBENCH_DEBUG", "") not in ("", "0")):
        traceback.print_exception(exc)
    return escape_text("; ".join(failure.problems[:3]) if failure.code == 2 else failure.problems[0])


def main(argv: list[str] | None = None) -> None:
    """Console entry point: exits with the contract's status, never a traceback (see xbench.schemas._cli).
    Run as a program (``argv`` None) it skips the interpreter's teardown once the outputs are published."""
    score_command.run_program(argv, "xbench-score")


if __name__ == "__main__":  # pragma: no cover
    main()
