"""The driver: :func:`run_suite` checks, plans and runs the steps under the run folder's lock, keeping the run
record, and reads the leaderboard from the scores."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from xbench.suite.checks import check_inputs, make_reader, submission_problems, unset_lines, unset_variables
from xbench.suite.fingerprint import DigestCache, _atomic_write, _hash, listing_digest, tree_digest
from xbench.suite.parse import DatasetEntry, Suite, SuiteError
from xbench.suite.plan import _output_digest, evaluate, evaluate_one, plan_steps, select_steps
from xbench.suite.steps import EXECUTORS, Context

RUN_RECORD = "xbench-run.json"
WORK_DIR = ".xbench-suite"

# ------------------------------------------------------------------------------------- run record
def _read_record(path: Path) -> dict:
    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import load_json

    try:  # the run folder is the user's: read bounded, a FIFO or a bomb is no record
        record = load_json(path)
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError, InputError):
        return {}


def _software() -> dict:
    from xbench.extract.runner import software_versions

    return software_versions()



@dataclass
class RunResult:
    run_dir: Path
    steps: list[dict]
    leaderboard: list[dict]
    dry_run: bool
    problems: list[str] = field(default_factory=list)
    datasets: dict[str, dict] = field(default_factory=dict)  # dry run: what each dataset's reader listed

    @property
    def report(self) -> Path:
        return self.run_dir / "report" / "index.html"


def _roots(suite: Suite, cache: DigestCache | None = None) -> dict[str, str | dict | None]:
    """Each dataset's raw input: the listing digest of its root (None: no such folder), with the other files and
    folders its reader options name (:meth:`DatasetReader.given_roots`: an images folder, a CSV elsewhere) in a
    mapping beside it; a dataset without any keeps the plain digest, so its fingerprint is as it was."""
    out: dict[str, str | dict | None] = {}
    for d in suite.datasets:
        root = listing_digest(d.root) if d.root else None
        other = _other_sources(d, cache) if root is not None else {}
        out[d.key] = {"root": root, **other} if other else root
    return out


def _other_sources(d: DatasetEntry, cache: DigestCache | None) -> dict[str, str | None]:
    """What the reader reads besides its root, by path: a folder by its listing (names, sizes, times: an images
    folder may hold hundreds of GB), a file by its content, so one edited in place is a new input. Empty when
    the reader cannot be built (the dry run and the step itself say why)."""
    from xbench.schemas.errors import InputError

    try:
        given = make_reader(d).given_roots()
    except (SuiteError, InputError):
        return {}
    root = Path(d.root).resolve()
    return {str(p): (tree_digest(p, cache) if Path(p).is_file() else listing_digest(p))
            for p in given if Path(p).resolve() != root}



def leaderboard(run_dir: Path, keys: Sequence[str]) -> list[dict]:
    """Models ranked by overall pointing game (then Dice), from their metrics.json; undefined last. A model whose
    weights are random is shown as "KEY (untrained)", as the report names it."""
    from xbench.score.outputs.leaderboard import UNTRAINED_SUFFIX, is_untrained
    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import load_json, with_limits

    rows = []
    for k in keys:
        try:  # bounded: a file in the user's run folder
            metrics = load_json(run_dir / "scores" / k / "metrics.json", limits=with_limits(max_bytes=64 * 2**20))
            overall = metrics["overall"]
            cis = metrics.get("ci95") or {}  # the scorer's overall 95 % intervals, beside "overall"
        except (OSError, ValueError, KeyError, TypeError, AttributeError, InputError):
            continue
        keys = ("pointing_game", "dice_best", "iou_best", "dice_fixed", "auroc")
        shown = k + (UNTRAINED_SUFFIX if is_untrained(metrics) else "")  # the board says what the report says
        rows.append({"model": shown, **{m: overall.get(m) for m in keys},
                     "ci95": {m: cis.get(m) for m in keys if isinstance(cis, dict) and cis.get(m)}})

    def rank(r):
        return tuple((v is None, -(v or 0.0)) for v in (r["pointing_game"], r["dice_best"]))

    return sorted(rows, key=rank)


def run_suite(suite: Suite, *, out: str | os.PathLike | None = None, limit: int | None = None, dry_run: bool = False,
              only: Sequence[str] = (), progress: bool = True, say: Callable[[str], None] | None = None,
              before_steps: Callable[[], None] | None = None) -> RunResult:
    """Run (or resume, or plan with ``dry_run``) a suite; returns the steps' states and the leaderboard.

    Raises :class:`SuiteError` for bad input (nothing of the failing step is recorded as done).
    ``before_steps``: called once the checks have passed, just before the first step runs (``xbench run``
    ends its ``--max-memory``/``--timeout`` watch there: the steps run under their own limits).
    """
    say = say or (lambda msg: None)
    if limit is not None and limit < 1:
        raise SuiteError("--limit must be at least 1")
    run_dir = Path(out) if out is not None else suite.out
    if limit:
        run_dir = run_dir / f"limit-{limit}"
    steps = plan_steps(suite, limit)
    chosen = select_steps(steps, only)
    record_path = run_dir / RUN_RECORD
    record = _read_record(record_path)
    cache = DigestCache(run_dir / WORK_DIR / "digests.json")
    roots = _roots(suite, cache)
    # a dry run checks every model; a run, the models whose extraction it is asked to run
    checked = suite.models if dry_run else [m for m in suite.models
                                            if f"extract/{m.key}" in chosen or m.submission is not None]
    unset = unset_variables(suite, checked, check_out=out is None)
    named_unset = {w for ws in unset.values() for w in ws}
    absent = [d.key for d in suite.datasets if d.root is not None and roots[d.key] is None]
    missing = [f"datasets.{d.key}.root: {d.root}: no such folder (see data_cards/{d.key}.md)"
               for d in suite.datasets if d.key in absent and f"datasets.{d.key}.root" not in named_unset]
    if dry_run:
        states = evaluate(steps, record, run_dir, cache, roots)
        problems, found = check_inputs(suite, limit, skip=absent, unset=unset)
        problems = unset_lines(unset, suite.source) + missing + problems
        rows = [{"step": s.id, "status": states[s.id].status, "reason": states[s.id].reason,
                 "selected": s.id in chosen} for s in steps]
        return RunResult(run_dir, rows, leaderboard(run_dir, [m.key for m in suite.models]), True, problems, found)
    # a precomputed submission that is not a finished store, for the score steps this run runs
    missing += submission_problems(suite, unset, keys=[m.key for m in suite.models if f"score/{m.key}" in chosen])
    if unset or missing:
        raise SuiteError(unset_lines(unset, suite.source) + missing)
    if before_steps is not None:  # before the outputs' digests: hashing a large earlier run is not a check
        before_steps()
    states = evaluate(steps, record, run_dir, cache, roots)
    blocked = [f"--only: {s.id} needs {', '.join(d for d in s.deps if states.get(d) and states[d].status != 'skip' and d not in chosen)} "
               "first (run without --only, or select those steps too)"
               for s in steps if s.id in chosen and any(states[d].status != "skip" and d not in chosen for d in s.deps)]
    if blocked:
        raise SuiteError(blocked)

    foreign = _foreign_folder(run_dir)
    if foreign:
        raise SuiteError([foreign])
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(run_dir)  # released on return, on error, and by the kernel on any death
    try:
        _write_suite_copy(suite, run_dir)
        record.setdefault("steps", {})
        record.update(suite=_suite_record(suite), limit=limit, software=_software(),
                      plan=[{"step": s.id, **asdict(s)} for s in steps])
        ctx = Context(suite, run_dir, limit, progress, say)
        rows = []
        for s in steps:
            if s.id not in chosen:
                rows.append({"step": s.id, "status": "not selected", "reason": "--only"})
                continue
            st = evaluate_one(s, steps, record, run_dir, cache, roots)
            if st.status == "skip":
                say(f"{s.id}: up to date")
                rows.append({"step": s.id, "status": "skip", "reason": st.reason})
                continue
            say(f"{s.id}: {'resuming' if st.status == 'resume' else 'running'} ({st.reason})")
            record["steps"][s.id] = {"status": "started", "fingerprint": st.fingerprint, "started_at": _now()}
            _atomic_write(record_path, json.dumps(record, indent=1, default=str))
            t0 = time.perf_counter()
            EXECUTORS[s.kind](s, ctx, st.status == "resume")
            seconds = time.perf_counter() - t0
            record["steps"][s.id] = {"status": "done", "fingerprint": st.fingerprint,
                                     "output_digest": _output_digest(s, run_dir, cache),
                                     "seconds": round(seconds, 3), "finished_at": _now()}
            cache.save()
            _atomic_write(record_path, json.dumps(record, indent=1, default=str))
            rows.append({"step": s.id, "status": "ran" if st.status == "run" else "resumed", "reason": st.reason,
                         "seconds": round(seconds, 3)})
        cache.save()
        _atomic_write(record_path, json.dumps(record, indent=1, default=str))
    finally:
        if lock is not None:
            lock.close()
    return RunResult(run_dir, rows, leaderboard(run_dir, [m.key for m in suite.models]), False)


def _foreign_folder(run_dir: Path) -> str | None:
    """Why the run may not write into ``run_dir`` (None when it may): a run replaces data/, submissions/,
    scores/, report/ and suite.yaml in its folder, so the folder must be new, empty or one a run wrote (its
    run record or its work folder proves it); a folder of the user's is refused, nothing in it touched
    (docs/contract.md, "Output safety")."""
    if not run_dir.exists() and not run_dir.is_symlink():
        return None
    if not run_dir.is_dir():
        return f"--out {run_dir}: exists and is not a folder; choose a new folder"
    entries = os.listdir(run_dir)
    if not entries or RUN_RECORD in entries or WORK_DIR in entries:
        return None
    shown = ", ".join(sorted(entries)[:5]) + (", ..." if len(entries) > 5 else "")
    return (f"--out {run_dir}: is a folder with files no xbench run wrote ({shown}; no {RUN_RECORD}), and a run "
            "replaces data/, submissions/, scores/, report/ and suite.yaml in its folder; choose a new or empty "
            "folder")


def _lock(run_dir: Path):
    """An exclusive lock on the run folder, so that two runs never write the same outputs at once.

    flock, not a pid file: the kernel drops it when the process dies, however it dies. Returns the open
    lock file (close it to release), or None where flock does not exist (Windows)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    path = run_dir / WORK_DIR / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise SuiteError(f"{run_dir}: another `xbench run` is writing here; wait for it or choose another --out") from None
    return f



def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _suite_record(suite: Suite) -> dict:
    return {"name": suite.name, "source": suite.source, "sha256": _hash(suite.raw), "raw": suite.raw,
            "resolved": {"datasets": [asdict(d) for d in suite.datasets], "models": [asdict(m) for m in suite.models],
                         "score": suite.score, "report": suite.report, "seed": suite.seed, "title": suite.title}}


def _write_suite_copy(suite: Suite, run_dir: Path) -> None:
    src = Path(suite.source)
    if src.is_file():  # the user's file, copied: read again through the bounded layer, as parsing read it
        from xbench.schemas.inputs import CONFIG, decode_text, read_bytes

        _atomic_write(run_dir / "suite.yaml", decode_text(read_bytes(src, max_bytes=CONFIG.max_bytes), str(src)))
    else:
        import yaml

        _atomic_write(run_dir / "suite.yaml", yaml.safe_dump(suite.raw, sort_keys=False))
