"""The one way to score submissions: :func:`run` takes a :class:`~xbench.score.options.ScoreOptions` (every
option of ``xbench-score``, a suite's ``score:`` section, a platform's configuration) and the submission stores,
and returns one :class:`Scored` per submission. ``xbench-score`` (score/cli.py), the suite runner
(xbench/suite/steps.py), ``xbench human`` (xbench/human.py) and the platform entry points (xbench/platform_scoring.py)
all call it; what they add is their own printing and error reporting."""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from xbench.score.errors import ScoreInputError
from xbench.score.options import ScoreOptions

__all__ = ["Scored", "ScoreRunError", "run"]

_NOTHING_WRITTEN = "invalid input (problems above); nothing was written"

#: what the report writes at the top of --out, which no submission's folder may be named
_REPORT_ENTRIES = ("index.html", "report.json", "leaderboard.md", "leaderboard.csv", "grounding_fixed.csv",
                   "recognition.csv", "comparisons.csv", "per_class.md", "per_class", "figures")


class ScoreRunError(ScoreInputError):
    """Inputs :func:`run` refuses before anything is scored or written: ``problems`` one line each, ``hint`` the
    line a command prints after them (how to fix it, or that nothing was written)."""

    def __init__(self, problems, hint: str | None = None) -> None:
        super().__init__(problems)
        self.hint = hint


@dataclass
class Scored:
    """One scored submission.

    ``result``: the :class:`~xbench.score.scoring.ScoreResult` (its ``metrics`` are metrics.json's content, each
    track asked for added); ``name``: the submission's unique stem (its result folder's name with several);
    ``label``: the row name of its tables (the model name, else the stem); ``folder``: where its files are
    (None when nothing was written); ``files``: their paths there; ``seconds``: scoring and writing time;
    ``report``: the folder of the report over the run's submissions (None when none was built)."""

    submission: str
    name: str
    label: str
    result: Any
    folder: Path | None = None
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    report: Path | None = None

    @property
    def summary(self) -> dict:
        """The command's summary of this submission (``xbench-score --json``)."""
        from xbench.score.outputs.tables import ci_of

        m = self.result.metrics
        out = {"submission": str(self.submission), "label": self.label,
               "out": None if self.folder is None else str(self.folder), "seconds": round(self.seconds, 3),
               "overall": m["overall"], "ci95": {k: ci_of(m, "overall", k) for k in m["overall"]},
               "datasets": {d: v["summary"] for d, v in m["datasets"].items()}, "notes": list(self.result.notes)}
        if partial_line(m):
            out["partial"] = m["partial"]
        return out


def run(options: ScoreOptions, submissions: Sequence[str | os.PathLike], *, labels: Sequence[str] | None = None,
        progress: Callable[[str], Any] | None = None, on_scored: Callable[[Scored], None] | None = None,
        say: Callable[[str], None] | None = None) -> list[Scored]:
    """Score submission stores against a ground truth, as ``xbench-score`` does.

    Every input is checked first (the stores, ``--out`` against every input, the transferred thresholds, each
    track's own inputs); nothing is scored or written before all pass. With several submissions and
    ``options.out_dir`` each result goes into its own sub-folder and a report over them is built beside
    them.

    Parameters
    ----------
    options : ScoreOptions
        The run's options, one field per option of ``xbench-score`` (``gt_path`` is required). With
        ``out_dir=None`` nothing is written: the results are only returned.
    submissions : sequence of path or str
        Submission stores (``.zarr`` folders, ``.zarr.zip`` files or URLs); only read.
    labels : sequence of str, optional
        The row name of each submission's tables (default: its model name, else its stem).
    progress : callable, optional
        ``progress(name)`` returns a bar (``update(n)``, ``set_total(n)``, ``close()``) for one submission;
        given, the report over several submissions shows its own on a terminal.
    on_scored : callable, optional
        Called with each :class:`Scored` once it is scored (and written), in order.
    say : callable, optional
        Receives the one line saying that the report over several submissions failed (the scores stand).

    Returns
    -------
    list of Scored
        One per submission, in the order given.

    Raises
    ------
    ScoreRunError
        An input refused before anything was scored (``problems``, ``hint``);
        :class:`~xbench.schemas.errors.InvalidStoreError` and the other
        :class:`~xbench.schemas.errors.InputError` for invalid stores.

    Examples
    --------
    >>> from xbench.score import ScoreOptions, run
    >>> opts = ScoreOptions(gt_path=str(tmp / "gt.zarr"), out_dir=None, bootstrap=0)
    >>> [scored] = run(opts, [tmp / "dog.zarr"])
    >>> scored.name, sorted(scored.result.metrics)[:3]
    ('dog', ['datasets', 'overall', 'xbench'])
    >>> 0.0 <= scored.result.metrics["overall"]["pointing_game"] <= 1.0
    True
    """
    from xbench.schemas.paths import store_path

    o = options
    submissions = [store_path(s) for s in submissions]  # a URL stays a string: Path would fold its "//"
    gt_path = store_path(o.gt_path)
    if not submissions:
        raise ScoreRunError("no submission to score")
    if labels is not None and len(labels) != len(submissions):
        raise ScoreRunError(f"{len(labels)} label(s) for {len(submissions)} submission(s)")
    if o.out_dir is not None:
        from xbench.schemas.paths import output_problems

        inputs = _input_paths(submissions, gt_path, o.thresholds_from, o.images_path, faithfulness=o.faithfulness,
                              key=o.key, human_dir=o.human_dir)
        problems = output_problems(o.out_dir, inputs, command="xbench-score", overwrite=o.overwrite)
        if problems:
            raise ScoreRunError(problems, _NOTHING_WRITTEN)
    thresholds = _load_thresholds(o.thresholds_from) if o.thresholds_from else None
    _check_kinds(submissions, gt_path, o.images_path)
    names = _split_datasets(o.datasets)
    gt = _checked_inputs(submissions, gt_path, names, o.allow_missing)
    # each track's own inputs (--human, --by, --faithfulness), read and checked before anything is scored
    tracks = _prepare_tracks({f.name: getattr(o, f.name) for f in fields(o)}, gt, names, submissions)
    score_kw = {"bootstrap": o.bootstrap, "seed": o.seed, "thresholds": thresholds, "datasets": names,
                "metric_params": metric_params_of(o), "allow_missing": o.allow_missing}
    job = _Job(o, score_kw, tracks, gt, progress, on_scored)
    stems = _unique_stems(list(submissions))
    labels = list(labels) if labels is not None else [None] * len(submissions)
    from xbench.score.metrics import registry as R

    with R.opt_in(*o.metric_groups):  # opt-in metrics are registered for this run only: without them, unchanged
        if o.out_dir is None:
            return [job.score(sub, stem, label) for sub, stem, label in zip(submissions, stems, labels)]
        return _score_into(job, submissions, stems, labels, gt_path, say)


def metric_params_of(options) -> dict[str, Any]:
    """The run's ``metric_params``: every field of ``options`` named as a parameter some registered metric declares
    (:func:`xbench.score.metrics.registry.metric_params`), by that name. A parameter with a flag is a
    ``ScoreOptions`` field of its name, nothing to wire here; one without keeps its declared default."""
    from xbench.score.metrics import registry as R

    declared = R.metric_params()
    return {f.name: getattr(options, f.name) for f in fields(options) if f.name in declared}


@dataclass
class _Job:
    """What scoring one submission needs besides the submission (shared by every submission of a run)."""

    options: ScoreOptions
    score_kw: dict
    tracks: dict
    gt: Any
    progress: Callable[[str], Any] | None
    on_scored: Callable[[Scored], None] | None

    def score(self, sub, stem: str, label: str | None, folder: Path | None = None,
              target: Path | None = None) -> Scored:
        """Score ``sub``, add the tracks asked for, and write its files into ``folder`` (inside the work folder;
        ``target`` is where they will be) when given."""
        from xbench.score.outputs.folder import prefetch_writers, write_into
        from xbench.score.scoring import score_submission
        from xbench.score.sections.plugins import tracks

        if folder is not None:
            prefetch_writers()  # pyarrow's Parquet writer loads while scoring runs, not after it
        t0 = time.perf_counter()
        bar = self.progress(stem) if self.progress is not None else None
        try:
            # validated moments ago by check_inputs (the same datasets and allow_missing): not again
            result = score_submission(sub, self.gt, **self.score_kw, validate=False,
                                      progress=bar.update if bar else None, on_total=bar.set_total if bar else None)
        finally:
            if bar is not None:
                bar.close()
        for track in tracks():  # the tracks asked for, in order; none: unchanged
            if track.name in self.tracks:
                result = track.add(result, self.tracks[track.name], bootstrap=self.score_kw["bootstrap"],
                                   seed=self.score_kw["seed"])
        if self.options.images_path is not None:  # recorded, as the report's default images store
            result.metrics["xbench"].setdefault("inputs", {})["images"] = str(Path(self.options.images_path).resolve())
        label = label or str(result.metrics["xbench"].get("submission", {}).get("model") or stem)
        files = [] if folder is None else write_into(result, folder, formats=("xbench", *self.options.formats),
                                                     label=label)
        scored = Scored(str(sub), stem, label, result, target,
                        [target / p.relative_to(folder) for p in files] if target is not None else [],
                        time.perf_counter() - t0)
        if self.on_scored is not None:
            self.on_scored(scored)
        return scored


def _score_into(job: _Job, submissions, stems, labels, gt_path, say) -> list[Scored]:
    """Score each submission into ``out_dir`` (its own sub-folder with several, and the report beside them),
    published as a whole at the end."""
    from xbench.schemas.paths import MARKER, NameTable, PublishedDir, write_marker

    o = job.options
    out_dir = Path(o.out_dir)
    # Submission stems become folder names: sanitised, unique, bounded (the map is in xbench-output.json).
    folders = NameTable(reserved=(*_REPORT_ENTRIES, MARKER))
    subdirs = [Path(".")] if len(submissions) == 1 else [Path(folders.name(s)) for s in stems]
    with PublishedDir(out_dir) as work:
        done = [job.score(sub, stem, label, work / d, out_dir / d)
                for sub, stem, label, d in zip(submissions, stems, labels, subdirs)]
        if len(submissions) > 1 and _report_or_nothing(work, [work / d for d in subdirs], gt_path, o.images_path,
                                                       dict(zip(stems, submissions)), o.bootstrap, o.seed,
                                                       job.progress is not None, say):
            for scored in done:
                scored.report = out_dir
        write_marker(work, "xbench-score", {"submissions": folders.mapping})
    return done


# ------------------------------------------------------------------------------------ the inputs, checked
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


def _input_paths(submissions, gt_path, thresholds_from, images_path=None, *, faithfulness=None, key=None,
                 human_dir=None) -> dict:
    """Every path the command reads: what ``--out`` must neither be, lie inside, nor hold (the one list; an
    input added to the command is added here)."""
    found = {"the ground truth": gt_path, "the --thresholds-from file": thresholds_from,
             "the --images store": images_path, "the --faithfulness submission": faithfulness,
             "the --key file": key, "the --human folder": human_dir}
    found.update({f"submission {s}": s for s in submissions})
    return found


def _split_datasets(values) -> list[str] | None:
    names = [v.strip() for item in values for v in item.split(",") if v.strip()]
    return names or None


def _thresholds_path(path: Path) -> Path:
    """--thresholds-from takes a metrics.json or the score folder holding one."""
    path = Path(path)
    if path.is_dir():
        if (path / "metrics.json").is_file():
            return path / "metrics.json"
        raise ScoreRunError(f"--thresholds-from {path}: a folder without metrics.json; pass the metrics.json of an "
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


def partial_line(metrics: dict) -> str | None:
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


def _is_url(path) -> bool:
    return "://" in str(path)  # remote stores are read as they are; their kind shows in validation


def _check_kinds(submissions, gt_path, images_path=None) -> None:
    """One line naming the mistake for a store of the wrong kind (images, swapped, zipped, unfinished)."""
    from xbench.schemas._cli import store_kind_problem

    problems = [] if _is_url(gt_path) else [store_kind_problem(gt_path, "ground-truth", "--gt",
                                                                swap_with="a submission")]
    problems += [store_kind_problem(s, "submission", "each SUBMISSION", swap_with="--gt")
                 for s in submissions if not _is_url(s)]
    problems = [p for p in problems if p]
    if problems:
        raise ScoreRunError(problems, "nothing was written")
    if images_path is not None:
        problem = store_kind_problem(images_path, "images", "--images")
        if problem:
            raise ScoreRunError(problem)


def _checked_inputs(submissions, gt_path, names, allow_missing: bool):
    """Every input validated once, before anything is written or scored (the library's check_inputs; an
    unknown dataset key is its UnknownNameError); the region masks are checked while scoring decodes them, and
    a problem there also stops the run before anything is written. The ground truth, opened."""
    from xbench.schemas import InvalidStoreError
    from xbench.schemas.submission import MissingCases
    from xbench.score.errors import MissingCasesError
    from xbench.score.scoring import check_inputs

    try:
        return check_inputs(submissions, gt_path, datasets=names, allow_missing=allow_missing)
    except MissingCasesError as exc:
        only = all(isinstance(p, MissingCases) for p in exc.problems)
        raise ScoreRunError(exc.problems, _missing_hint(exc.coverage, only)) from None
    except InvalidStoreError as exc:
        raise ScoreRunError(exc.problems, _NOTHING_WRITTEN) from None


def _prepare_tracks(values: dict, gt, names, submissions) -> dict:
    """{track name: its context} for every track asked for (:meth:`xbench.score.sections.kinds.Track.prepare`)."""
    from xbench.score.sections.plugins import tracks

    out = {}
    for track in tracks():
        context = track.prepare(values, gt, names, submissions)
        if context is not None:
            out[track.name] = context
    return out


# ------------------------------------------------------------------------------------ the report beside
def _report_or_nothing(work: Path, targets, gt_path, images_path, submissions, bootstrap, seed, show: bool,
                       say) -> bool:
    """The report over several results, built into ``work``; on failure its files are removed again, since
    the scores stand on their own and a half report must not be published beside them. Whether it was built."""
    import sys

    try:
        from xbench.score.report import build_report  # the report is optional; scoring stands on its own
    except ImportError:
        return False
    keep = set(p.name for p in work.iterdir())
    try:
        build_report(work, targets, gt=gt_path, images=images_path, submissions=submissions, bootstrap=bootstrap,
                     seed=seed, progress=show and sys.stderr.isatty())
    except Exception as exc:  # noqa: BLE001 - a report failure must not hide the scores
        import shutil

        for p in work.iterdir():
            if p.name not in keep:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        if say is not None:
            say(f"xbench-score: scores written, but the report failed: {_report_failure(exc)}")
        return False
    return True


def _report_failure(exc: BaseException) -> str:
    """One escaped line for a report that failed: an input problem as the report words it (the results cannot
    be compared ...), anything else as what it is, a bug ("unexpected TypeError: ... --debug"), never a bare
    internal message that reads as if the input were wrong. ``--debug`` (or XBENCH_DEBUG) adds the traceback."""
    import sys
    import traceback

    from xbench.schemas._cli import classify
    from xbench.schemas.errors import escape_text

    failure = classify(exc)
    if failure.code != 2 and ("--debug" in sys.argv or os.environ.get("XBENCH_DEBUG", "") not in ("", "0")):
        traceback.print_exception(exc)
    return escape_text("; ".join(failure.problems[:3]) if failure.code == 2 else failure.problems[0])
