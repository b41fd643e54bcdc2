"""Safe file names from data, and where an output folder may (not) go.

Names that come from data (dataset keys, class names, case ids, model names, submission stems) end up
as file or folder names in reports. Taken raw, ``../x`` escapes the output folder, ``a/b`` makes a
folder, a 300-character name fails with ENAMETOOLONG half-way through a report, and ``A`` and ``a``
are the same file on macOS and Windows. :func:`safe_name` maps any string to a name that is

- made of ``[A-Za-z0-9._-]`` only, never starting with ``.`` or ``-`` (no hidden files, no options),
  never a Windows device name (``CON``, ``nul.txt`` ...),
- at most ``max_len`` characters (ASCII, so also bytes),
- unchanged when it already was all of that, and otherwise the cleaned text plus ``~`` and 10 hex
  digits of the original's SHA-256: two different originals that clean alike still get different names.

:class:`NameTable` hands out names within one folder, unique even on a case-insensitive file system,
and keeps the mapping (``{original: file name}``) that the outputs record.

:func:`output_problems` checks an output folder against the inputs of a run before anything is written.
"""
from __future__ import annotations

from xbench.schemas.errors import InputError

import hashlib
import os
import re
import signal
import sys
import threading
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["MARKER", "MAX_NAME", "READER_NAME", "NameTable", "PublishedDir", "STOP", "UnsafeOutputError", "carry_over",
           "check_output", "check_stop", "clean_leftovers", "is_reader_name", "is_remote", "output_problems",
           "remove_staged", "replace_contents", "safe_name", "store_path", "swap_in", "terminate_as_interrupt",
           "work_dir", "write_marker", "written_before", "written_by"]

MAX_NAME = 80  # well under every file system's 255-byte limit, with room for a suffix such as ".png"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_WINDOWS_DEVICES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
_HASH_LEN = 10
#: A reader's name in a human folder (``readers/<name>/``): ASCII letters and digits, then also ``_ . -``,
#: 1 to 64 characters. The one definition ``xbench human`` writes by and ``xbench-score --human`` reads by.
READER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def is_reader_name(name: object) -> bool:
    """Whether ``name`` is a reader's name (:data:`READER_NAME`, the whole string: no trailing newline)."""
    return isinstance(name, str) and READER_NAME.fullmatch(name) is not None


def _digest(original: str) -> str:
    return hashlib.sha256(original.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]


def _is_clean(name: str, max_len: int) -> bool:
    return (0 < len(name) <= max_len and not _UNSAFE.search(name) and name[0] not in ".-"
            and name.split(".")[0].lower() not in _WINDOWS_DEVICES)


def safe_name(original: str, *, max_len: int = MAX_NAME) -> str:
    """A file-name-safe, length-bounded stand-in for ``original`` (see the module docstring)."""
    original = str(original)
    if max_len < _HASH_LEN + 2:
        raise ValueError(f"max_len must be at least {_HASH_LEN + 2}, got {max_len}")
    if _is_clean(original, max_len):
        return original
    cleaned = _UNSAFE.sub("-", original).lstrip(".-")
    cleaned = cleaned[: max_len - _HASH_LEN - 1].rstrip(".-")  # a trailing dot is dropped by Windows
    return f"{cleaned}~{_digest(original)}" if cleaned else f"x~{_digest(original)}"


class NameTable:
    """Unique safe names for one folder; ``mapping`` is {original: name} in the order asked.

    >>> t = NameTable()
    >>> t.name("clip"), t.name("CLIP"), t.name("clip")
    ('clip', 'CLIP~2', 'clip')
    """

    def __init__(self, *, max_len: int = MAX_NAME, reserved: tuple[str, ...] = ()) -> None:
        self.max_len = max_len
        self.mapping: dict[str, str] = {}
        self._taken = {r.casefold() for r in reserved}

    def name(self, original: str) -> str:
        original = str(original)
        if original in self.mapping:
            return self.mapping[original]
        base = safe_name(original, max_len=self.max_len)
        name, k = base, 1
        while name.casefold() in self._taken:  # only when two originals differ by letter case alone
            k += 1
            name = f"{base[: self.max_len - len(str(k)) - 1]}~{k}"
        self._taken.add(name.casefold())
        self.mapping[original] = name
        return name


def is_remote(path: str | os.PathLike) -> bool:
    """True for a URL (``https://…``, ``s3://…``): nothing on this machine to protect or to check."""
    return "://" in str(path)


def store_path(text: str | os.PathLike) -> str | Path:
    """A store argument as given: a URL stays a string (``Path`` would fold ``https://`` into ``https:/``)."""
    return str(text) if is_remote(text) else Path(text)


def _real(path: str | os.PathLike) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(path))))


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


class UnsafeOutputError(InputError, ValueError):
    """An output folder that may not be written; ``problems`` holds one line per reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems, "; ".join(problems))


def check_output(out: str | os.PathLike, inputs: Mapping[str, str | os.PathLike | None]) -> None:
    """Raise :class:`UnsafeOutputError` when :func:`output_problems` finds any."""
    problems = output_problems(out, inputs)
    if problems:
        raise UnsafeOutputError(problems)


def output_problems(out: str | os.PathLike, inputs: Mapping[str, str | os.PathLike | None], *,
                    may_hold: tuple[str, ...] = (), command: str | None = None, overwrite: bool = False) -> list[str]:
    """Why ``out`` may not be written, one line per problem (empty when it may).

    ``command`` (e.g. "xbench-score"): a command that refuses to replace earlier results unless asked. A folder
    holding an earlier run's outputs is then refused without ``overwrite``; with it, only a folder that this
    very command wrote (its marker names ``command``) is replaced, the files it did not write carried over
    (:class:`PublishedDir`); a folder another command wrote is refused either way.

    ``inputs``: {what (e.g. "the ground truth"): path}. The output folder is replaced as a whole, so it may
    be neither equal to an input, nor inside one (it would write into it), nor hold one (it would
    remove it), except the inputs named in ``may_hold``, which the caller carries into the new folder
    (:class:`PublishedDir` ``keep``; the report beside the score folders it reads). Symbolic links are
    followed. Also refused: a folder whose nearest existing parent is not writable (said now, instead of
    an ``[Errno 13]`` after the scoring).
    """
    problems = []
    target = _real(out)
    held = set()  # top-level entries of ``out`` that hold an input it may hold: they are no stranger's files
    for what, path in inputs.items():
        if path is None or is_remote(path):
            continue
        src = _real(path)
        if target == src:
            problems.append(f"--out {out}: is {what} ({path}); choose a new folder")
        elif src in target.parents:
            problems.append(f"--out {out}: is inside {what} ({path}); nothing may be written into an input")
        elif target in src.parents and what in may_hold:
            held.add(src.relative_to(target).parts[0])
        elif target in src.parents:
            problems.append(f"--out {out}: holds {what} ({path}), and the output folder is replaced as a whole; "
                            "choose a folder that holds no input")
    cwd = _real(os.getcwd())
    if target == cwd or target in cwd.parents:  # swapping it would pull the folder away from under the shell
        problems.append(f"--out {out}: is or holds the current folder; choose a new folder below it")
    elif target.exists() and not target.is_dir():
        problems.append(f"--out {out}: exists and is not a folder")
    elif target.is_dir() and not _is_ours(target, held):
        problems.append(f"--out {out}: is a folder with files XBench did not write, and the output folder is "
                        "replaced as a whole; choose a new or empty folder")
    elif command is not None and target.is_dir() and _holds_outputs(target, held):
        writer = written_by(target)
        if writer is not None and writer != command:
            problems.append(f"--out {out}: holds the outputs of {writer}, which {command} does not replace; "
                            "choose a new or empty folder")
        elif not overwrite:
            problems.append(f"--out {out}: holds the results of an earlier run; pass --overwrite to replace them "
                            "(only what that run wrote), or choose a new or empty folder")
    elif not _swappable(target) and not (target.is_dir() and os.access(target, os.W_OK | os.X_OK)):
        parent = _nearest_existing(target.parent)
        problems.append(f"--out {out}: cannot write into {parent} (permission denied); choose a writable folder")
    return problems


# -- all-or-nothing folders ------------------------------------------------------------------------------
#
# A folder is built under a hidden name beside its target (same file system, so the final move is one
# rename) and then swapped in: with Linux's renameat2(RENAME_EXCHANGE) the old and new folders trade places
# in one step, so a reader sees the old folder or the new one, never a mix. Elsewhere the old folder is
# renamed aside first; a run killed between the two renames leaves only the aside copy, and the next run
# puts it back (``clean_leftovers``). The hidden names carry the writer's process id, so the next run
# removes only what a dead process left and never the folder a live one is building.

_NEW, _OLD = "xbench-new", "xbench-old"
MARKER = "xbench-output.json"  # in every output folder XBench publishes: what wrote it, and the names map
_LEGACY = (".tmp-", ".partial-")  # what earlier versions left beside an output after a kill


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists but belongs to someone else, or cannot tell: leave its files alone
    return True


def _leftover(entry: str, name: str) -> tuple[str, int] | None:
    """("new" | "old" | "legacy", pid or 0) when ``entry`` is a hidden work folder of target ``name``."""
    for kind, tag in (("new", _NEW), ("old", _OLD)):
        prefix = f".{name}.{tag}-"
        if entry.startswith(prefix):
            pid = entry[len(prefix):].split("-", 1)[0]
            return (kind, int(pid)) if pid.isdigit() else None
    if any(entry.startswith(f".{name}{tag}") for tag in _LEGACY):
        return "legacy", 0
    return None


def clean_leftovers(target: str | os.PathLike) -> list[Path]:
    """Remove what killed runs left beside ``target``; put back a previous folder a kill left set aside.

    Returns the paths removed or restored. Only hidden folders named after ``target`` and written by a
    process that is no longer running are touched.
    """
    import shutil

    target = Path(os.path.abspath(target))  # "." and "out/" name their folder too
    parent = target.parent
    if not parent.is_dir():
        return []
    touched = []
    for entry in sorted(os.listdir(parent)):
        found = _leftover(entry, target.name)
        if found is None or (found[1] and _pid_alive(found[1])):
            continue
        path = parent / entry
        if found[0] == "old" and not os.path.lexists(target):
            os.rename(path, target)  # killed between the two renames of a swap: the previous output comes back
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        touched.append(path)
    return touched


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where that is not available."""
    import ctypes
    import errno

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


# -- every way out removes the work folders ------------------------------------------------------------
#
# Each hidden work folder this process creates (:func:`work_dir`, :class:`PublishedDir`) is recorded here, so
# that every way a run can stop removes it, for every command that stages an output:
# - an exception, Ctrl-C (SIGINT): the ``finally`` of whoever created the folder;
# - SIGTERM: :func:`terminate_as_interrupt` (every command runs inside it: schemas/_cli.py ``run_main``) turns
#   it into the same interrupt, and sets :data:`STOP`, which :func:`swap_in` checks before it publishes
#   (an interrupt Python swallowed inside a finaliser still publishes nothing);
# - the watchdog (--max-memory, --timeout), which leaves with os._exit from its thread: it calls
#   :func:`remove_staged` first (schemas/budget.py).

_STAGED: set[Path] = set()
STOP = threading.Event()  # set by a SIGTERM (or a conversion's SIGINT) while a command runs


def _new_work_folder(parent: Path, prefix: str) -> Path:
    """A new hidden folder ``parent/prefix<random>``, recorded in :data:`_STAGED` *before* it is created: an
    interrupt landing anywhere in here or in the caller before its ``try`` (a SIGTERM right after the folder
    appeared) still finds it in the record, and :func:`remove_staged` (run by every failing command,
    schemas/_cli.py) removes it. ``tempfile.mkdtemp`` records nothing until it has returned."""
    import secrets

    for _ in range(100):
        folder = parent / f"{prefix}{secrets.token_hex(4)}"
        _STAGED.add(folder)
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            _STAGED.discard(folder)
            continue
        except OSError:  # not created; an interrupt instead leaves the name recorded: the folder may exist
            _STAGED.discard(folder)
            raise
        return folder
    raise FileExistsError(f"no free work folder name in {parent}")


def remove_staged() -> list[Path]:
    """Remove every work folder this process created and has not published yet; the paths removed."""
    import shutil
    import time

    removed = []
    for folder in sorted(_STAGED):
        _STAGED.discard(folder)
        if not os.path.lexists(folder):  # published (renamed into place) or removed already
            continue
        for _ in range(5):  # a write in flight on another thread may recreate a file after the first pass
            shutil.rmtree(folder, ignore_errors=True)
            if not os.path.lexists(folder):
                break
            time.sleep(0.05)
        removed.append(folder)
    return removed


@contextmanager
def terminate_as_interrupt(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)):
    """While inside, ``signals`` (SIGTERM: a platform stopping the job, ``kill``) behave as Ctrl-C: a
    KeyboardInterrupt unwinds the command, whose work folders are removed on the way out, and :data:`STOP` is
    set, so nothing is published even when the interrupt lands where Python swallows it. Only in the main
    thread (elsewhere signal handlers cannot be set); a process forked inside (a worker) keeps the default."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:  # a forked worker inherited the handler: it stops as it always did
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        STOP.set()
        raise KeyboardInterrupt

    def unraisable(info, default=sys.unraisablehook):
        if not (STOP.is_set() and isinstance(info.exc_value, KeyboardInterrupt)):
            default(info)  # our own interrupt, dropped inside a finaliser, is not a traceback on stderr

    STOP.clear()
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        sys.unraisablehook = hook
        STOP.clear()


def check_stop() -> None:
    """Raise KeyboardInterrupt when a stop was asked for (see :func:`terminate_as_interrupt`)."""
    if STOP.is_set():
        raise KeyboardInterrupt


def work_dir(target: str | os.PathLike) -> Path:
    """A new hidden folder beside ``target`` to build it in (after cleaning what killed runs left there); every
    way the run stops removes it (:func:`remove_staged`)."""
    target = Path(os.path.abspath(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(target)
    return _new_work_folder(target.parent, f".{target.name}.{_NEW}-{os.getpid()}-")


def swap_in(built: str | os.PathLike, target: str | os.PathLike) -> None:
    """Put the finished folder ``built`` (from :func:`work_dir`) at ``target``, replacing what was there.

    ``built`` no longer exists afterwards. When ``target`` appears between the check and the move (another
    process published first), the move fails with FileExistsError or OSError rather than mixing the two.
    """
    import shutil

    built, target = Path(built), Path(os.path.abspath(target))
    check_stop()  # the last word before publishing: a stop asked for publishes nothing
    if not os.path.lexists(target):
        os.rename(built, target)  # refuses a non-empty folder that appeared meanwhile
        return
    if _exchange(built, target):
        shutil.rmtree(built)  # now holds the previous folder
        return
    aside = Path(f"{built.parent}/.{target.name}.{_OLD}-{os.getpid()}-{built.name.rsplit('-', 1)[-1]}")
    os.rename(target, aside)
    os.rename(built, target)
    shutil.rmtree(aside)


def replace_contents(built: str | os.PathLike, target: str | os.PathLike, *, stale: set[str], last: str = MARKER) -> None:
    """Move the entries of ``built`` into the existing folder ``target``, after removing its entries named in
    ``stale`` (what the previous run wrote).

    For a target that cannot be renamed (a mount point such as a container's /output): not one step, so
    ``last`` (the marker) goes in last and an interrupted run leaves a folder without it.
    """
    import shutil

    built, target = Path(built), Path(target)
    new = set(os.listdir(built))
    for entry in os.listdir(target):
        if entry in stale or entry in new:
            _remove(target / entry)
    for name in sorted(new, key=lambda n: (n == last, n)):
        shutil.move(str(built / name), str(target / name))
    shutil.rmtree(built, ignore_errors=True)


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def carry_over(old: Path, new: Path, *, stale: set[str]) -> list[str]:
    """Hard-link (or copy) into ``new`` the entries of ``old`` that are neither in ``stale`` (written by the
    previous run) nor rebuilt in ``new``: files a user put beside the outputs survive the swap."""
    import shutil

    kept = []
    for entry in sorted(os.listdir(old)):
        if entry in stale or os.path.lexists(new / entry) or _leftover(entry, old.name) is not None:
            continue
        src, dst = old / entry, new / entry
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(src), str(dst))
        kept.append(entry)
    return kept


def _link_or_copy(src: str, dst: str) -> None:
    import shutil

    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


#: The exact names the versions before the marker (xbench-output.json) wrote at the top of an output folder: the
#: scorer's files and tables (plus ``table_pointing_<dataset>.csv/.md`` for each dataset of its metrics.json), the
#: report's page, manifest and tables (its other files are listed in its report.json). Nothing is matched by a
#: prefix or a pattern: a file of the user's named ``table_of_my_patients.csv`` is not XBench's.
LEGACY_SCORE_FILES = frozenset({
    "metrics.json", "pairs.parquet", "pair_counts.npz", "scores.json",
    *(f"{stem}.{ext}" for stem in ("table1_grounding", "table1_grounding_fixed", "table_recognition")
      for ext in ("csv", "md"))})
LEGACY_REPORT_FILES = frozenset({"index.html", "report.json", "leaderboard.csv", "leaderboard.md", "per_class.md",
                                 "grounding_fixed.csv", "recognition.csv", "comparisons.csv"})
_LEGACY_MAX_BYTES = 64 * 2**20  # an old metrics.json or report.json: read bounded, like any file from outside


def _legacy_json(path: Path):
    """An old run's metrics.json or report.json (bounded), or None when it is not there or not readable."""
    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import DEFAULT, load_json, with_limits

    try:
        return load_json(path, limits=with_limits(DEFAULT, max_bytes=_LEGACY_MAX_BYTES, allow_nonfinite=True))
    except InputError:
        return None


def _legacy_score_files(folder: Path, entries: set[str]) -> set[str]:
    """The entries of ``folder`` an old scorer run wrote: the exact names, and the pointing table of each dataset
    its own metrics.json names."""
    names = set(LEGACY_SCORE_FILES)
    metrics = _legacy_json(folder / "metrics.json") if "metrics.json" in entries else None
    datasets = metrics.get("datasets") if isinstance(metrics, dict) else None
    if isinstance(datasets, dict):
        names |= {f"table_pointing_{d}.{ext}" for d in datasets for ext in ("csv", "md")}
    return entries & names


def _legacy_report_files(folder: Path, entries: set[str]) -> set[str]:
    """The entries of ``folder`` an old report wrote: its exact names, the top-level entries of the files its
    report.json lists, and the result folders of a multi-submission scoring run it names (``models``) that sit in
    ``folder`` and hold nothing but an old scorer's files."""
    found = entries & LEGACY_REPORT_FILES
    manifest = _legacy_json(folder / "report.json") if "report.json" in entries else None
    if not isinstance(manifest, dict):
        return found
    listed = manifest.get("files")
    if isinstance(listed, dict):
        found |= {Path(f).parts[0] for group in listed.values() if isinstance(group, list) for f in group
                  if isinstance(f, str) and Path(f).parts} & entries
    models = manifest.get("models")
    for m in models if isinstance(models, list) else ():
        p = Path(m["path"]) if isinstance(m, dict) and isinstance(m.get("path"), str) else None
        if p is None or p.name not in entries or p.parent.name != folder.name:
            continue
        sub = folder / p.name
        if sub.is_dir() and not sub.is_symlink():
            inside = set(os.listdir(sub))
            if inside and _legacy_score_files(sub, inside) == inside:
                found.add(p.name)
    return found


def written_before(folder: str | os.PathLike) -> set[str]:
    """The top-level entries of ``folder`` that an earlier XBench run provably wrote: those its marker lists; for
    a folder written before the marker existed, the exact names those versions wrote (:data:`LEGACY_SCORE_FILES`,
    :data:`LEGACY_REPORT_FILES`, the names their metrics.json and report.json imply). Anything else is the user's
    and is never removed (docs/contract.md, "Output safety")."""
    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import DEFAULT, load_json, with_limits

    # the folder is the user's: its marker and report.json are read like any file from outside (bounded, a FIFO
    # or a nesting bomb is no marker at all)
    folder = Path(folder)
    try:
        files = load_json(folder / MARKER, limits=with_limits(DEFAULT, max_bytes=64 * 2**20))["files"]
        if isinstance(files, list):
            return {f for f in files if isinstance(f, str)}
    except (InputError, KeyError, TypeError):
        pass
    if not folder.is_dir():
        return set()
    entries = set(os.listdir(folder))
    return _legacy_score_files(folder, entries) | _legacy_report_files(folder, entries)


def _holds_outputs(folder: Path, held: set[str] = frozenset()) -> bool:
    """Whether ``folder`` holds anything but our own hidden work folders and the ``held`` inputs."""
    return any(_leftover(e, folder.name) is None and not e.startswith(f".{folder.name}.") and e not in held
               for e in os.listdir(folder))


def written_by(folder: str | os.PathLike) -> str | None:
    """The command that wrote ``folder``, as its marker says; None without a readable marker (a folder of a
    version before the marker: its outputs are known by their file names, :func:`written_before`)."""
    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import DEFAULT, load_json, with_limits

    folder = Path(folder)
    try:
        by = load_json(folder / MARKER, limits=with_limits(DEFAULT, max_bytes=64 * 2**20))["written_by"]
        return by if isinstance(by, str) else None
    except (InputError, KeyError, TypeError):
        return None


def _is_ours(folder: Path, held: set[str] = frozenset()) -> bool:
    """Empty (but for our own work folders and the ``held`` inputs), or written by XBench (the marker, or an
    older run's main file)."""
    entries = [e for e in os.listdir(folder) if _leftover(e, folder.name) is None
               and not e.startswith(f".{folder.name}.") and e not in held]
    return not entries or any(n in entries for n in (MARKER, "metrics.json", "report.json"))


def _swappable(target: Path) -> bool:
    """Whether ``target`` can be replaced by a rename: its parent is writable and it is no mount point."""
    parent = _nearest_existing(target.parent)
    return os.access(parent, os.W_OK | os.X_OK) and not (target.exists() and os.path.ismount(target))


def write_marker(folder: str | os.PathLike, written_by: str, names: Mapping[str, Mapping[str, str]] | None = None) -> Path:
    """The marker that says XBench wrote ``folder``, with the names map {kind: {original: file name}}."""
    import json

    path = Path(folder) / MARKER
    files = sorted({*os.listdir(folder), MARKER})
    path.write_text(json.dumps({"written_by": written_by, "files": files,
                                "names": {k: dict(v) for k, v in (names or {}).items()}}, indent=1,
                               ensure_ascii=True) + "\n")
    return path


class PublishedDir:
    """``with PublishedDir(out) as tmp:`` build the output in ``tmp``; on a clean exit it replaces ``out``
    in one step (a mount point: entry by entry, the marker last). On an exception nothing changes.

    What the previous run wrote (:func:`written_before`) is replaced as a whole; anything else a user put in
    ``out``, and the entries holding a path in ``keep``, are carried over into the new folder (hard links, so
    no data is copied)."""

    def __init__(self, target: str | os.PathLike, *, keep: tuple[str | os.PathLike, ...] = ()) -> None:
        self.target = Path(os.path.abspath(target))
        self.in_place = not _swappable(self.target)
        self.tmp: Path | None = None
        # top-level entries holding a path that must survive (an input read from inside the target)
        root = _real(self.target)
        self.keep = {(_real(p).relative_to(root)).parts[0] for p in keep if root in _real(p).parents}

    def __enter__(self) -> Path:
        if self.in_place:  # build inside the target itself, the one place known to be writable
            clean_leftovers(self.target / self.target.name)
            self.tmp = _new_work_folder(self.target, f".{self.target.name}.{_NEW}-{os.getpid()}-")
        else:
            self.tmp = work_dir(self.target)
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        import shutil

        try:
            if exc_type is None:
                stale = (written_before(self.target) - self.keep) if self.target.is_dir() else set()
                if self.in_place:
                    check_stop()
                    replace_contents(self.tmp, self.target, stale=stale)
                else:
                    if self.target.is_dir():
                        carry_over(self.target, self.tmp, stale=stale)
                    swap_in(self.tmp, self.target)
        finally:
            if self.tmp is not None and self.tmp.exists():
                shutil.rmtree(self.tmp, ignore_errors=True)


def store_stem(path) -> str:
    """A store's name without .zarr / .zarr.zip / .zip (also for a URL, which stays a string)."""
    name = str(path).rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".zarr.zip", ".zarr", ".zip"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return name
