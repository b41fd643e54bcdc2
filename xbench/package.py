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
"""
from __future__ import annotations

from xbench.schemas.errors import InputError, escape_text

import contextlib
import datetime as _dt
import io
import json
import math
import os
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas._cli import CONTEXT, Command, UserError
from xbench.schemas.options import MAX_SECONDS, Flag, Int, Text, click_options, opt, parse, resamples

__all__ = ["check_competition", "codabench_main", "competition_columns", "competition_spec", "find_store",
           "grand_challenge_main", "package", "score_for_platform", "to_yaml", "write_codabench_bundle",
           "write_competition_bundle", "zip_store"]

GC_GROUND_TRUTH = ("/opt/ml/input/data/ground_truth", "/opt/xbench")
STORE_SUFFIXES = (".zarr", ".zarr.zip", ".zip")

CODABENCH_METADATA = """\
# Codabench scoring program written by `xbench package codabench`.
command: python3 $program/score.py $input $output
description: XBench recognition and grounding scores (metrics.json, scores.json)
"""

CODABENCH_SCORE = """\
\"\"\"Codabench entry: score INPUT/res against INPUT/ref or the packaged gt.zarr.zip; write OUTPUT/scores.json.\"\"\"
import os
import sys

from xbench.package import codabench_main

sys.exit(codabench_main(sys.argv[1], sys.argv[2], program=os.path.dirname(os.path.abspath(__file__))))
"""

#: A competition's scoring program: the same entry, with the bootstrap count the organiser chose (the
#: Codabench worker passes no environment to the container but PYTHONUNBUFFERED).
COMPETITION_SCORE = """\
\"\"\"Codabench entry: score INPUT/res against INPUT/ref (the phase's reference data); write OUTPUT/scores.json.\"\"\"
import os
import sys

from xbench.package import codabench_main

sys.exit(codabench_main(sys.argv[1], sys.argv[2], program=os.path.dirname(os.path.abspath(__file__)),
                        bootstrap={bootstrap}))
"""


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


#: the most a bundled ground-truth store may hold (its files together; the bundle is built in memory), and the
#: most the scorer's wheel and its METADATA may hold: read through the bounded input layer, refused beyond
MAX_STORE_BYTES = 256 * 2**20
MAX_WHEEL_BYTES = 64 * 2**20
MAX_WHEEL_METADATA_BYTES = 2**20


def zip_store(store: str | os.PathLike, zf: zipfile.ZipFile, arcname: str) -> None:
    """Add a ``.zarr`` folder to ``zf`` as the stored (uncompressed: chunks are compressed already) zip file
    ``arcname``, itself a ``.zarr.zip`` store. A ``.zarr.zip`` is added as it is. Either is read through the
    bounded input layer (regular files only, no links, at most :data:`MAX_STORE_BYTES` together): a file that
    is only copied is still a file from outside."""
    from xbench.schemas.inputs import read_bytes, read_tree

    store = Path(store)
    fixed = (1980, 1, 1, 0, 0, 0)
    if store.is_file():
        zf.writestr(zipfile.ZipInfo(arcname, fixed), read_bytes(store, max_bytes=MAX_STORE_BYTES), zipfile.ZIP_STORED)
        return
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as inner:
        for rel, data in read_tree(store, max_bytes=MAX_STORE_BYTES):
            inner.writestr(zipfile.ZipInfo(rel, fixed), data)
    zf.writestr(zipfile.ZipInfo(arcname, date_time=fixed), buf.getvalue(), zipfile.ZIP_STORED)


COMPETITION_HEADER = "# Codabench competition bundle written by `xbench package codabench-competition`.\n"


def replace_problem(out: Path, member: str, header: str) -> str | None:
    """Why the bundle ``out`` may not be written (None when it may): an existing ``--out`` is replaced only when
    it is a bundle XBench wrote, proven by its ``member`` beginning with XBench's ``header`` (read bounded: the
    zip's entry count before zipfile lists it, the member at most 1 MiB). A file of the user's, a folder, a link
    or a pipe there is refused, and nothing is deleted (docs/contract.md, "Output safety")."""
    import stat as _stat

    from xbench.schemas import budget

    refused = (f"--out {out}: exists and is not a bundle XBench wrote ({{what}}); it would be replaced: choose "
               "another path, or remove it yourself")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return None
    if not _stat.S_ISREG(st.st_mode):
        return refused.format(what="a link" if _stat.S_ISLNK(st.st_mode) else "not a regular file")
    zf, _ = budget.open_zip(out, budget.limits())  # the entry count checked before zipfile lists them
    if zf is None:
        return refused.format(what="not a zip file")
    try:
        with zf:
            info = zf.getinfo(member)
            head = zf.open(info).read(2**20) if info.file_size <= 2**20 else b""
    except (KeyError, zipfile.BadZipFile, OSError, ValueError, NotImplementedError):
        head = b""
    return None if head.startswith(header.encode()) else refused.format(what=f"no {member} of XBench's")


def write_codabench_bundle(gt: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the Codabench scoring program zip (metadata.yaml, score.py, gt.zarr.zip) atomically."""
    import tempfile

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            fixed = (1980, 1, 1, 0, 0, 0)  # byte-stable bundles for the same ground truth
            zf.writestr(zipfile.ZipInfo("metadata.yaml", fixed), CODABENCH_METADATA)
            zf.writestr(zipfile.ZipInfo("score.py", fixed), CODABENCH_SCORE)
            zip_store(gt, zf, "gt.zarr.zip")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


# -- Codabench competition bundle ----------------------------------------------------------------------------
#: The leaderboard's primary column: the README ranks submissions by overall pointing game.
PRIMARY_KEY = "pointing_game"
#: Interval columns shown by default (every other interval column is there, hidden: an organiser unhides it in
#: Codabench's editor); one leaderboard row stays readable.
SHOWN_INTERVALS = ("pointing_game", "auroc")
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def competition_columns(datasets: list[str]) -> list[dict]:
    """The leaderboard's columns, from the metric registry, for a ground truth holding ``datasets``.

    Every overall metric (``<key>``) with its 95 % interval bounds (``<key>_ci_low``/``_ci_high``: Codabench
    columns hold one number each, so the interval is two columns), then each dataset's paper and recognition
    metrics (``<dataset>_<key>``, hidden). The keys are the flat keys of ``scores.json``
    (:func:`xbench.score.outputs.folder.flat_scores`); column 0, the primary (ranking) column, is overall pointing
    game. Shown: the paper's five grounding metrics, the recognition metrics and the intervals of
    :data:`SHOWN_INTERVALS`; the rest are hidden, not left out.
    """
    from xbench.score.metrics import registry as R

    shown = {m.key for m in R.table_metrics("paper") + R.table_metrics("recognition")}
    keys = list(R.overall_keys())
    keys.sort(key=lambda k: k != PRIMARY_KEY)  # stable: the primary first, the registry's order after it
    columns: list[dict] = []

    def add(key: str, title: str, m, hidden: bool) -> None:
        columns.append({"title": title, "key": key, "index": len(columns),
                        "sorting": "desc" if m.higher_is_better else "asc",
                        "precision": 4, "hidden": hidden})

    for k in keys:
        m = R.metric(k)
        add(k, m.short, m, k not in shown)
        for bound, word in (("ci_low", "95% low"), ("ci_high", "95% high")):
            add(f"{k}_{bound}", f"{m.short} {word}", m, k not in SHOWN_INTERVALS)
    for d in datasets:
        for k in keys:
            if k in shown:
                add(f"{d}_{k}", f"{d} {R.metric(k).short}", R.metric(k), True)
    return columns


def competition_spec(*, title: str, docker_image: str, validation_start: _dt.datetime, test_start: _dt.datetime,
                     test_end: _dt.datetime | None, datasets: list[str], max_per_day: int, max_test: int,
                     time_limit: int) -> dict:
    """competition.yaml (Codabench's version-2 format) as a dict; file names are those
    :func:`write_competition_bundle` writes."""
    test_phase = {"index": 1, "name": "Test", "start": test_start,
                  "description": "Final ranking on the private test ground truth; the last submission counts.",
                  "max_submissions_per_day": max_per_day, "max_submissions": max_test,
                  "execution_time_limit": time_limit, "accepts_only_result_submissions": True, "tasks": [1]}
    if test_end is not None:
        test_phase["end"] = test_end
    return {
        "version": 2,
        "title": title,
        "description": "Zero-shot recognition and grounding of chest X-ray findings, scored by XBench.",
        "image": "logo.png",
        "terms": "pages/terms.md",
        "docker_image": docker_image,
        "registration_auto_approve": False,
        "make_programs_available": True,
        "enable_detailed_results": False,
        "pages": [{"title": "Overview", "file": "pages/overview.md"},
                  {"title": "Evaluation", "file": "pages/evaluation.md"},
                  {"title": "Data", "file": "pages/data.md"},
                  {"title": "Terms", "file": "pages/terms.md"}],
        "phases": [
            {"index": 0, "name": "Validation", "start": validation_start, "end": test_start,
             "description": "Check your submission and see your scores on the validation ground truth.",
             "max_submissions_per_day": max_per_day, "execution_time_limit": time_limit,
             "accepts_only_result_submissions": True, "tasks": [0]},
            test_phase,
        ],
        "tasks": [
            {"index": 0, "name": "Validation", "description": "Scored against the validation ground truth.",
             "scoring_program": "scoring_program.zip", "reference_data": "reference_data_validation.zip"},
            {"index": 1, "name": "Test", "description": "Scored against the private test ground truth.",
             "scoring_program": "scoring_program.zip", "reference_data": "reference_data_test.zip"},
        ],
        "leaderboards": [{"title": "Results", "key": "main", "submission_rule": "Force_Last",
                          "columns": competition_columns(datasets)}],
    }


def check_competition(spec: dict, files: set[str]) -> list[str]:
    """Problems of a competition.yaml dict against Codabench's documented version-2 format (the bundle's
    ``files`` are the names in the zip); [] when it conforms. Checked: the required keys of the competition,
    pages, phases, tasks and leaderboard columns; that every file named exists; task indexes unique and
    every phase's tasks defined; phases in order without overlap (only the last may be open-ended); column
    indexes and keys unique, sorting asc/desc, precision an integer, hidden a boolean."""
    problems: list[str] = []
    need = lambda where, d, keys: problems.extend(  # noqa: E731
        f"{where}: missing {k!r}" for k in keys if k not in d or d[k] in (None, ""))
    need("competition", spec, ("version", "title", "image", "terms", "pages", "phases", "tasks", "leaderboards"))
    if spec.get("version") != 2:
        problems.append("competition: version must be 2")
    for key in ("image", "terms"):
        if spec.get(key) and spec[key] not in files:
            problems.append(f"competition: {key} {spec[key]!r} is not in the bundle")
    for i, page in enumerate(spec.get("pages") or []):
        need(f"pages[{i}]", page, ("title", "file"))
        if page.get("file") and page["file"] not in files:
            problems.append(f"pages[{i}]: {page['file']!r} is not in the bundle")
    task_index = set()
    for i, task in enumerate(spec.get("tasks") or []):
        need(f"tasks[{i}]", task, ("index", "name", "scoring_program"))
        if task.get("index") in task_index:
            problems.append(f"tasks[{i}]: duplicate index {task.get('index')}")
        task_index.add(task.get("index"))
        for key in ("scoring_program", "reference_data", "input_data", "ingestion_program"):
            if task.get(key) and task[key] not in files:
                problems.append(f"tasks[{i}]: {key} {task[key]!r} is not in the bundle")
    phases = sorted(spec.get("phases") or [], key=lambda p: p.get("index", 0))
    for i, phase in enumerate(phases):
        need(f"phases[{i}]", phase, ("name", "start", "tasks"))
        for key in ("starting_kit", "public_data"):
            if phase.get(key) and phase[key] not in files:
                problems.append(f"phases[{i}]: {key} {phase[key]!r} is not in the bundle")
        missing = [t for t in phase.get("tasks") or [] if t not in task_index]
        if missing:
            problems.append(f"phases[{i}]: tasks {missing} are not defined")
        for key in ("start", "end"):
            if key in phase and not isinstance(phase[key], _dt.datetime):
                problems.append(f"phases[{i}]: {key} must be a date and time")
        if i + 1 < len(phases):
            nxt = phases[i + 1]
            if phase.get("end") is None:
                problems.append(f"phases[{i}]: needs an end, because a phase follows it")
            elif isinstance(nxt.get("start"), _dt.datetime) and nxt["start"] < phase["end"]:
                problems.append(f"phases[{i + 1}]: starts before phases[{i}] ends")
        if isinstance(phase.get("start"), _dt.datetime) and isinstance(phase.get("end"), _dt.datetime) \
                and phase["end"] <= phase["start"]:
            problems.append(f"phases[{i}]: ends before it starts")
    for i, board in enumerate(spec.get("leaderboards") or []):
        need(f"leaderboards[{i}]", board, ("title", "key", "columns"))
        cols = board.get("columns") or []
        if not cols:
            problems.append(f"leaderboards[{i}]: needs at least one column")
        for j, col in enumerate(cols):
            where = f"leaderboards[{i}].columns[{j}]"
            need(where, col, ("title", "key", "index"))
            if col.get("sorting", "desc") not in ("asc", "desc"):
                problems.append(f"{where}: sorting must be asc or desc")
            if not isinstance(col.get("precision", 2), int) or isinstance(col.get("precision", 2), bool):
                problems.append(f"{where}: precision must be an integer")
            if not isinstance(col.get("hidden", False), bool):
                problems.append(f"{where}: hidden must be true or false")
            if "computation" in col:
                problems.append(f"{where}: computed columns are not written by the scoring program")
        for what, plural in (("index", "indexes"), ("key", "keys")):
            seen = [c.get(what) for c in cols]
            if len(set(seen)) != len(seen):
                problems.append(f"leaderboards[{i}]: column {plural} must be unique")
    return problems


def _yaml_scalar(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, dict):
        return "{}"  # only ever empty here: to_yaml writes a non-empty one as a block
    if isinstance(v, list):
        return "[]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"a competition spec holds no non-finite number ({v})")
        mantissa, _, exponent = repr(v).partition("e")  # PyYAML reads 1e-05 as a string: it wants 1.0e-05
        return (mantissa if "." in mantissa else mantissa + ".0") + (f"e{exponent}" if exponent else "")
    if isinstance(v, _dt.datetime):
        return v.strftime(DATE_FORMAT)  # a YAML timestamp, the form Codabench's documentation shows
    return _yaml_string(str(v))


#: What a YAML stream may hold raw (YAML 1.1 and 1.2 "printable", PyYAML's reader check), less the
#: line breaks YAML folds inside a quoted scalar (U+0085, U+2028, U+2029) and the byte-order mark.
_YAML_RAW = re.compile("[\t\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")


def _yaml_string(text: str) -> str:
    """``text`` as a YAML double-quoted scalar: JSON's escapes (a JSON string is a YAML double-quoted
    scalar) and every other character a YAML stream may not carry raw as ``\\xXX``, ``\\uXXXX`` or
    ``\\UXXXXXXXX``, so any string PyYAML's safe loader reads back equal (U+007F, U+FFFE, U+2028 ...)."""
    quoted = json.dumps(text, ensure_ascii=False)
    if all(_YAML_RAW.match(c) for c in quoted):
        return quoted
    return "".join(c if _YAML_RAW.match(c) else
                   (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" if ord(c) < 0x10000
                    else f"\\U{ord(c):08x}") for c in quoted)


#: Words YAML 1.1 (PyYAML) reads as booleans or null: a key spelled so is quoted.
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def _yaml_key(k) -> str:
    k = str(k)
    plain = k[:1].isalpha() and all(c.isalnum() or c == "_" for c in k) and k.isascii()
    return k if plain and k.lower() not in _YAML_WORDS else _yaml_string(k)


def to_yaml(value, indent: int = 0) -> str:
    """Block-style YAML for the dicts, lists and scalars of a competition spec (PyYAML is the extract
    extra's; the scorer side writes the file itself). Strings are always quoted, keys when YAML could read
    them as anything but a string."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{_yaml_key(k)}:")
                lines.append(to_yaml(v, indent + 2).rstrip("\n"))
            else:
                lines.append(f"{pad}{_yaml_key(k)}: {_yaml_scalar(v)}")
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict) and v:
                body = to_yaml(v, indent + 2).splitlines()
                lines.append(f"{pad}- {body[0].lstrip()}")
                lines.extend(body[1:])
            else:
                lines.append(f"{pad}- {_yaml_scalar(v)}")
    else:
        lines.append(pad + _yaml_scalar(value))
    return "\n".join(lines) + "\n"


def _logo_png(size: int = 96) -> bytes:
    """A small grey-scale PNG (a bright disc on a dark ground, the pointing game's peak in a map), made with
    zlib: the bundle needs a logo file and the scorer side has no image library."""
    import struct
    import zlib

    rows = []
    for y in range(size):
        row = bytearray([0])  # filter type 0 per scanline
        for x in range(size):
            d2 = ((x - size * 0.58) ** 2 + (y - size * 0.42) ** 2) / (size * 0.18) ** 2
            row.append(int(30 + 210 * (2.718281828 ** (-d2))))
        rows.append(bytes(row))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + \
        chunk(b"IEND", b"")


#: the command a team runs before it submits: with --images it checks coverage, which the platform enforces
TEAM_CHECK = "xbench-validate submission.zarr --images images.zarr"

#: why --images: the words the overview page and the starting kit's README share
TEAM_CHECK_WHY = ("`images.zarr` is this phase's public images store (the *Data* page says where each phase's comes "
                  "from; make the submission from the same store). With `--images` the validator lists every "
                  "dataset, class, case and phrase row the platform would find missing, one a line, with a hint "
                  "for a misnamed class; it exits 2 until none is. Without `--images` it checks the format only "
                  "(\"contract only\"): a misnamed class or a missing case passes it and is refused after upload.")


def _install_lines(wheel_name: str | None) -> str:
    """How a participant installs the validator (from the wheel in the starting kit when the bundle ships
    one: xbench-cxr is not published on PyPI yet; else from the source repository) and checks a submission's
    coverage of the phase's images store."""
    if wheel_name:
        return f"""Install the validator (XBench's scorer side: no torch, no GPU) from the wheel in this
competition's starting kit (the *Files* / *Get Starting Kit* tab, `starting_kit.zip`), then check the submission
against this phase's images store:

```bash
unzip starting_kit.zip
pip install {wheel_name}
{TEAM_CHECK}
```

{TEAM_CHECK_WHY}"""
    return f"""Install the validator (XBench's scorer side: no torch, no GPU) from a clone of XBench's source
repository, as the organisers direct (it is not published on PyPI yet), then check the submission against this
phase's images store:

```bash
pip install .
{TEAM_CHECK}
```

{TEAM_CHECK_WHY}"""


#: what the Data page says of a phase's images store when the organiser named no place for it
IMAGES_UNNAMED = "published by the organisers; this bundle does not say where (ask them before you extract)"


def _pages(title: str, spec: dict, bootstrap: int, wheel_name: str | None = None,
           images: tuple[str | None, str | None] = (None, None)) -> dict[str, str]:
    """The competition's pages (Markdown), written from the metric registry and the phases. ``images``: where
    teams get the validation and the test phase's public images stores (None: :data:`IMAGES_UNNAMED`)."""
    from xbench.score.metrics import registry as R

    val, test = spec["phases"]
    metric_lines = "\n".join(f"- `{m.key}`: {m.title} ({'higher' if m.higher_is_better else 'lower'} is better)"
                             for m in R.metrics(scope="class") if m.key in R.overall_keys())
    when = lambda d: d.strftime(DATE_FORMAT) + " UTC"  # noqa: E731
    return {
        "pages/overview.md": f"""# {title}

Does a chest X-ray vision-language model look where the radiologist looked? Each submission gives, for every
case and finding class, a probability and a raw explanation map; it is scored on recognition (is the finding
present?) and on grounding (does the map fall on the radiologist's region?) with XBench.

Submit one `submission.zarr` (zip the store, or upload the `.zarr.zip` file): the format is XBench's
contract. Check it before you submit. {_install_lines(wheel_name)}

Phases: **Validation** from {when(val['start'])} to {when(val['end'])} (scores on the validation ground truth),
then **Test** from {when(test['start'])}{' to ' + when(test['end']) if 'end' in test else ''} (the final ranking;
your last submission counts).
""",
        "pages/evaluation.md": f"""# Evaluation

Every submission is scored by `xbench-score` against the phase's private ground truth, with {bootstrap}
bootstrap resamples of the cases for the 95 % intervals. The leaderboard ranks by overall **pointing game**;
ties are broken by the next columns, left to right. Each metric's column is followed by the bounds of its
95 % interval (`<metric>_ci_low`, `<metric>_ci_high`); more columns (every metric's interval, lesion-size
strata, per-dataset values) are kept but hidden. Overall values are means over the datasets.

{metric_lines}

A submission that is not valid (wrong cases or classes, non-finite maps, a broken store) fails with the
reason as the last line of the scoring log; nothing is scored.
""",
        "pages/data.md": f"""# Data

Each phase has its own public images store: validation and test are different splits (different cases), so a
submission is made from, and checked against, the images store of the phase it is uploaded to.

- **Validation** images store: {images[0] or IMAGES_UNNAMED}
- **Test** images store: {images[1] or IMAGES_UNNAMED}

Before uploading, check the submission against that store:

```bash
{TEAM_CHECK}
```

The ground truth of each phase (labels and regions) stays private and is the phase's reference data; its cases,
classes and phrase rows are those of the phase's images store.
""",
        "pages/terms.md": """# Terms

- One account per team; teams may not share submissions or predictions.
- The test images may not be labelled, segmented or inspected by hand for the submission.
- Every submission is scored automatically; the organisers may publish the leaderboard and the methods'
  descriptions.
- The organisers may update these terms; the version on this page at the end of the test phase applies.
""",
    }


def _parse_when(text: str, what: str) -> _dt.datetime:
    for fmt in (DATE_FORMAT, "%Y-%m-%d"):
        try:
            return _dt.datetime.strptime(text, fmt)
        except ValueError:
            continue
    raise PlatformError(f"{what} {text!r}: expected a date, YYYY-MM-DD or 'YYYY-MM-DD HH:MM:SS' (UTC)")


def _zip_bytes(members: dict[str, bytes | str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def _reference_zip(gt: str | os.PathLike) -> bytes:
    """A reference-data zip holding the ground truth as ``gt.zarr.zip`` (Codabench unzips it into
    ``$input/ref``, where :func:`codabench_main` finds the one store)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zip_store(gt, zf, "gt.zarr.zip")
    return buf.getvalue()


def check_wheel(path: Path) -> list[str]:
    """Problems of ``path`` as the scorer's wheel to ship to participants ([] when it is one): a
    ``xbench_cxr-<version>-*.whl`` zip of this very version, with its metadata, requiring no torch."""
    return load_wheel(path)[1]


def load_wheel(path: Path) -> tuple[bytes | None, list[str]]:
    """(the bytes of the wheel at ``path``, []) when it is the scorer's wheel (:func:`check_wheel`), else
    (None, its problems). Read once through the bounded input layer: at most :data:`MAX_WHEEL_BYTES`, a regular
    file, its METADATA inflated to :data:`MAX_WHEEL_METADATA_BYTES` at most; the bytes checked are the bytes
    shipped."""
    from importlib.metadata import version

    from xbench.schemas.inputs import read_bytes, read_zip_member

    mine = version("xbench-cxr")
    name = path.name
    if not path.is_file():
        return None, [f"--wheel {path}: no such file (`make dist` builds it into dist/)"]
    if not (name.startswith("xbench_cxr-") and name.endswith(".whl")):
        return None, [f"--wheel {path}: expected xbench-cxr's wheel, xbench_cxr-{mine}-py3-none-any.whl"]
    wheel_version = name.split("-")[1]
    if wheel_version != mine:
        return None, [f"--wheel {path}: is version {wheel_version}, this xbench is {mine} (the scoring image's "
                      "version); build it from the same source (`make dist`)"]
    where = f"--wheel {path}"
    try:
        data = read_bytes(path, max_bytes=MAX_WHEEL_BYTES, where=where)
        meta = read_zip_member(data, f"xbench_cxr-{mine}.dist-info/METADATA", max_bytes=MAX_WHEEL_METADATA_BYTES,
                               where=where).decode("utf-8", "replace")
    except InputError as exc:
        return None, [f"{p}; not the scorer's wheel" for p in exc.problems]
    torch = [line for line in meta.splitlines() if line.startswith("Requires-Dist: torch") and "extra ==" not in line]
    if torch:
        return None, [f"--wheel {path}: requires torch outside the extract extra ({torch[0]})"]
    return data, []


def _starting_kit(wheel: Path) -> bytes:
    data, problems = load_wheel(wheel)  # read again, bounded and checked: the file may have changed since
    if problems:
        raise InputError(problems)
    """starting_kit.zip: the scorer's wheel and a README saying how to install it and validate."""
    readme = f"""XBench starting kit

The validator and scorer (XBench's scorer side: no torch, no GPU), as the wheel this competition scores with.

    pip install {wheel.name}
    {TEAM_CHECK}

{TEAM_CHECK_WHY}

Upload the checked store (zip it, or the .zarr.zip file) to the competition.
"""
    return _zip_bytes({wheel.name: data, "README.txt": readme})


def write_competition_bundle(gt_validation: str | os.PathLike, gt_test: str | os.PathLike, out: str | os.PathLike,
                             spec: dict, *, bootstrap: int = 1000, wheel: Path | None = None,
                             images: tuple[str | None, str | None] = (None, None)) -> Path:
    """Write the competition zip for ``spec`` (:func:`competition_spec`) atomically; raises PlatformError
    listing what :func:`check_competition` finds wrong (nothing is written then). ``wheel``: the scorer's
    wheel, shipped to participants as every phase's starting kit (``starting_kit.zip``). ``images``: where teams
    get the validation and the test images stores (named on the pages)."""
    import tempfile

    if wheel is not None:
        spec = {**spec, "phases": [{**phase, "starting_kit": "starting_kit.zip"} for phase in spec["phases"]]}

    program = _zip_bytes({"metadata.yaml": CODABENCH_METADATA, "score.py": COMPETITION_SCORE.format(bootstrap=int(bootstrap))})
    members: dict[str, bytes | str] = {
        "competition.yaml": COMPETITION_HEADER + to_yaml(spec),
        "logo.png": _logo_png(),
        **_pages(spec["title"], spec, bootstrap, wheel.name if wheel is not None else None, images),
        "scoring_program.zip": program,
        "reference_data_validation.zip": _reference_zip(gt_validation),
        "reference_data_test.zip": _reference_zip(gt_test),
    }
    if wheel is not None:
        members["starting_kit.zip"] = _starting_kit(wheel)
    problems = check_competition(spec, set(members))
    if problems:
        raise PlatformError(problems, "the competition does not follow Codabench's format; nothing was written")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in members.items():
                kind = zipfile.ZIP_STORED if name.endswith(".zip") else zipfile.ZIP_DEFLATED
                zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data, kind)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


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
