"""Scoring on a challenge platform: the entry points the grand-challenge container and a Codabench scoring
program run (:func:`grand_challenge_main`, :func:`codabench_main`), the store found in the platform's input
folder, the platform's configuration of the scoring, and the one reason a participant reads when it fails.
The ``xbench package`` commands that write those containers' and programs' bundles: :mod:`xbench.package`
(which re-exports these names, the ones the platforms' scripts import)."""
from __future__ import annotations

from xbench.schemas.errors import InputError, escape_text

import contextlib
import io
import os
import sys
from pathlib import Path



__all__ = ["PlatformError", "codabench_main", "find_store", "for_teams", "grand_challenge_main", "platform_options",
           "round2_pair", "score_for_platform"]

GC_GROUND_TRUTH = ("/opt/ml/input/data/ground_truth", "/opt/xbench")
STORE_SUFFIXES = (".zarr", ".zarr.zip", ".zip")


class PlatformError(InputError):
    """A reason to fail that the participant should read (the last stderr line)."""


def _is_store(path: Path) -> bool:
    name = path.name
    if name.startswith("."):
        return False
    return (path.is_dir() and name.endswith(".zarr")) or (path.is_file() and name.endswith((".zarr.zip", ".zip")))


def find_store(folder: str | os.PathLike, what: str) -> Path:
    """The one store (``*.zarr`` folder, ``*.zarr.zip``/``*.zip`` file) in ``folder``, or the folder itself when
    it is a Zarr store (holds ``zarr.json``). Raises :class:`PlatformError` for none or several."""
    folder = Path(folder)
    if not folder.is_dir():
        if folder.is_file() and folder.name.endswith(STORE_SUFFIXES[1:]):
            return folder
        raise PlatformError(f"no {what}: {folder} does not exist")
    if (folder / "zarr.json").is_file():
        return folder
    found = sorted(p for p in folder.iterdir() if _is_store(p))
    if len(found) != 1:
        listed = ", ".join(p.name for p in found[:5]) or _what_is_there(folder)
        raise PlatformError(f"expected exactly one {what} (a .zarr folder or .zarr.zip file) in {folder}; "
                            f"found {len(found)}: {listed}")
    return found[0]


def _what_is_there(folder: Path, shown: int = 5) -> str:
    """What an upload holds when no store is in it: the first entries by name, each said for what it is (a folder
    of .npz files or an HDF5 file: a model's outputs not yet converted), and how many there are in all."""
    import itertools

    from xbench.schemas._cli import _unconverted_source

    entries = sorted(itertools.islice(folder.iterdir(), 10_000))
    if not entries:
        return "the folder is empty (was the upload a zip of nothing?)"
    if (folder / "meta.json").is_file() and _unconverted_source(folder):
        return ("it holds meta.json and per-case .npz files: model outputs not converted; run xbench-convert on the "
                "folder (--out submission.zarr) and upload submission.zarr, zipped")
    said = []
    for p in entries[:shown]:
        name = escape_text(p.name) + ("/" if p.is_dir() else "")
        source = None if p.is_symlink() else _unconverted_source(p)
        said.append(f"{name} ({source}: run xbench-convert first)" if source else name)
    more = f" and {len(entries) - shown} more" if len(entries) > shown else ""
    return f"nothing usable among {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}: {', '.join(said)}{more}"


def _reason(code: int, captured: str) -> str:
    """The participant-facing summary of a failed ``xbench-score`` run, from what it printed."""
    lines = [ln for ln in captured.splitlines() if ln.strip()]
    if code == 2:  # problem lines read "xbench-score: error: ..."; the summary line has no "error:"
        tag = "xbench-score: error: "
        problems = [ln[len(tag):] for ln in lines if ln.startswith(tag)]
        if problems:
            more = f" (and {len(problems) - 1} more problem(s) above)" if len(problems) > 1 else ""
            return f"invalid submission: {problems[0]}{more}"
    return lines[-1] if lines else f"scoring failed (exit {code})"


#: A platform's configuration of the scoring: a JSON object of ``xbench-score``'s options, the keys a suite's
#: ``score:`` section takes (:class:`~xbench.score.options.ScoreOptions`), e.g. ``{"by": "sex",
#: "metric_groups": ["complexity"], "pointing_tolerance": 10}``; the platform's own (the formats, a phase's
#: faithfulness round) are not among them.
SCORE_OPTIONS_ENV = "XBENCH_SCORE_OPTIONS"
_PLATFORM_OWN = ("formats", "faithfulness", "key")


def platform_options(bootstrap: int, options: dict | None = None) -> dict:
    """The :class:`~xbench.score.options.ScoreOptions` values a platform scores with: ``options`` (else the JSON
    object in ``$XBENCH_SCORE_OPTIONS``) over ``bootstrap``, ``$XBENCH_BOOTSTRAP`` over both. Raises
    :class:`PlatformError` naming every problem (an unknown key, a value its option refuses)."""
    from xbench.schemas import options as _options
    from xbench.schemas.inputs import CONFIG, parse_json
    from xbench.score.options import ScoreOptions, section_problems

    where = "options"
    if options is None and os.environ.get(SCORE_OPTIONS_ENV):
        where = SCORE_OPTIONS_ENV
        try:
            options = parse_json(os.environ[SCORE_OPTIONS_ENV], SCORE_OPTIONS_ENV, CONFIG)
        except InputError as exc:
            raise PlatformError("; ".join(str(p) for p in exc.problems) or str(exc)) from None
    if options is not None and not isinstance(options, dict):
        raise PlatformError(f"{where}: must be an object of xbench-score's options, got {type(options).__name__}")
    values = {"bootstrap": int(bootstrap), **dict(options or {})}
    if os.environ.get("XBENCH_BOOTSTRAP"):
        text = os.environ["XBENCH_BOOTSTRAP"].strip()
        if not text.isdigit():
            raise PlatformError(f"XBENCH_BOOTSTRAP {escape_text(repr(text))}: must be an integer >= 0")
        values["bootstrap"] = int(text)
    known = [f.name for f, o in _options.declared(ScoreOptions) if o.suite and f.name not in _PLATFORM_OWN]
    given = {k: v for k, v in values.items() if k in known}
    problems = _options.unknown_keys(values, known, where)
    problems += section_problems(given, where, lambda path: os.path.abspath(os.path.expanduser(path)))
    if problems:
        raise PlatformError("; ".join(escape_text(p) for p in problems))
    return given  # lists made tuples, paths made absolute


def score_for_platform(submission: Path, gt: Path, out: Path, fmt: str, *, bootstrap: int = 1000,
                       faithfulness: Path | None = None, options: dict | None = None) -> int:
    """Score as ``xbench-score`` does (:func:`xbench.score.cli.run_options`, the library's one entry point with
    the command's messages and exit status); on failure print the reason as the last stderr line.
    ``options``: the platform's configuration (:func:`platform_options`: else ``$XBENCH_SCORE_OPTIONS``;
    ``$XBENCH_BOOTSTRAP`` overrides ``bootstrap``, the resamples of the 95 % intervals). ``faithfulness``: the
    phase's folder of round-1 stores and keys; ``submission`` is then a round-2 (scores-only) submission, scored
    beside the round-1 store whose key it matches (:func:`round2_pair`)."""
    from xbench.score.cli import run_options
    from xbench.score.options import ScoreOptions

    try:
        values = platform_options(bootstrap, options)
    except PlatformError as exc:
        return _fail(str(exc))
    err = io.StringIO()
    if faithfulness is not None:
        try:
            round1, key = round2_pair(submission, faithfulness)
        except PlatformError as exc:
            return _fail(str(exc))
        values.update(faithfulness=str(submission), key=str(key))
        submission = round1
    run = ScoreOptions(**values, gt_path=str(gt), out_dir=Path(out), formats=(fmt,), quiet=True)
    with contextlib.redirect_stderr(err):
        code = run_options(run, [str(submission)])
    log = for_teams(err.getvalue())
    sys.stderr.write(log)
    if code:
        sys.stderr.write(_reason(code, log).rstrip("\n") + "\n")
    return code


#: what a platform's log says instead of the scorer's --allow-missing advice: a team uploads a store and passes no
#: flag, so the advice it can act on is the check it can run itself before the next upload
TEAM_COVERAGE = ("nothing was written; the submission must hold every case, class and phrase row of this phase's "
                 "images store: check it with `xbench-validate submission.zarr --images images.zarr` before you submit")


def for_teams(log: str) -> str:
    """The scorer's log as a team sees it on a platform: a line advising ``--allow-missing`` (an organiser's flag)
    ends with :data:`TEAM_COVERAGE` instead; every other line is the scorer's own, so a problem reads exactly as
    ``xbench-validate --images`` printed it on the team's machine."""
    lines = []
    for line in log.splitlines(keepends=True):
        if "--allow-missing" in line:
            head = line.split("nothing was written", 1)[0] if "nothing was written" in line else ""
            line = head + TEAM_COVERAGE + "\n"
        lines.append(line)
    return "".join(lines)


def round2_pair(round2: Path, folder: Path) -> tuple[Path, Path]:
    """The round-1 store and key that an uploaded round-2 submission answers: ``folder`` holds one sub-folder per
    team, each with its phase-1 store and the ``*.key.npz`` that ``xbench perturb`` wrote from it; the key whose
    round-2 ids are exactly the upload's (ids are 96 random bits, so no two rounds share one) is the team's."""
    from xbench.schemas import read_submission, validate_submission
    from xbench.schemas.faithfulness import read_key

    problems = validate_submission(round2, scores_only=True)
    if problems:
        raise PlatformError(f"invalid submission: {problems[0]}")
    sub = read_submission(round2)
    uploaded = {(name, str(c)) for name, ds in sub.datasets.items() for c in ds.case_id.tolist()}
    try:
        teams = sorted(p for p in Path(folder).iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        raise PlatformError(f"the phase's folder of round-1 stores and keys {escape_text(str(folder))} cannot be read "
                            f"({escape_text(exc.strerror or type(exc).__name__)})") from None
    for team in teams:
        try:
            keys = sorted(team.glob("*.key.npz"))
            stores = sorted(p for p in team.iterdir() if _is_store(p))
        except OSError:  # one unreadable team folder must not stop the others' scoring
            continue
        if len(keys) != 1 or len(stores) != 1:
            continue
        try:
            key = read_key(keys[0])
        except Exception:  # noqa: BLE001 - one broken team folder must not stop the others' scoring
            continue
        if set(zip(key.dataset.tolist(), key.round2_id.tolist())) == uploaded:
            return stores[0], keys[0]
    raise PlatformError("invalid submission: its ids match no round-2 store of this phase (upload the scores of the "
                        "round2.zarr you were given, every image of it, made with xbench-extract --scores-only)")


def _fail(message: str) -> int:
    sys.stderr.write(message.rstrip("\n").replace("\n", " ") + "\n")
    return 2


def _gc_ground_truth() -> Path:
    if os.environ.get("XBENCH_GT"):
        return Path(os.environ["XBENCH_GT"])
    for place in GC_GROUND_TRUTH:
        try:
            return find_store(place, "ground truth")
        except PlatformError:
            continue
    raise PlatformError("no ground truth: set XBENCH_GT, mount it at /opt/ml/input/data/ground_truth "
                        "or bake it into the image at /opt/xbench/gt.zarr.zip")


def grand_challenge_main(input_dir: str | None = None, output_dir: str | None = None) -> int:
    """The grand-challenge evaluation entry point (``platforms/grand-challenge/evaluate.py``)."""
    input_dir = input_dir or os.environ.get("XBENCH_INPUT", "/input")
    output_dir = output_dir or os.environ.get("XBENCH_OUTPUT", "/output")
    try:
        submission = find_store(input_dir, "submission")
        gt = _gc_ground_truth()
    except PlatformError as exc:
        return _fail(str(exc))
    faith = os.environ.get("XBENCH_FAITHFULNESS")  # a phase-2 (faithfulness) evaluation: the round-1 stores and keys
    if faith and not Path(faith).is_dir():
        return _fail(f"XBENCH_FAITHFULNESS {escape_text(faith)}: {'is not a folder' if os.path.lexists(faith) else 'does not exist'} "
                     "(it names the phase's folder of round-1 stores and keys, one sub-folder per team)")
    return score_for_platform(submission, gt, Path(output_dir), "grand-challenge",
                              faithfulness=Path(faith) if faith else None)


def codabench_main(input_dir: str, output_dir: str, *, program: str | None = None, bootstrap: int = 1000) -> int:
    """The Codabench scoring program: submission in INPUT/res, ground truth in INPUT/ref or PROGRAM."""
    try:
        submission = find_store(Path(input_dir) / "res", "submission")
        try:
            gt = find_store(Path(input_dir) / "ref", "ground truth")
        except PlatformError:
            if program is None:
                raise
            gt = find_store(Path(program), "ground truth")
    except PlatformError as exc:
        return _fail(str(exc))
    faith = Path(input_dir) / "ref" / "faithfulness"  # phase 2: the reference data holds the round-1 stores and keys
    return score_for_platform(submission, gt, Path(output_dir), "codabench", bootstrap=bootstrap,
                              faithfulness=faith if faith.is_dir() else None)
