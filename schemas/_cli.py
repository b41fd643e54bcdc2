"""The one CLI layer every XBench command goes through: exit codes, error lines, JSON errors, progress.

Exit codes (the same for every command, documented in docs/contract.md):

    0    done
    1    unexpected failure (a bug or an environment problem; one line, ``--debug`` shows the traceback)
    2    invalid input or usage (one line per problem, nothing half-written)
    130  interrupted (Ctrl-C or SIGTERM); resumable commands say "run the same command again to resume"

Commands are :class:`Command` objects (``@command(...)`` instead of ``@click.command(...)``): their
``main`` maps every exception to one of the codes above, both when run on their own (``xbench-score``)
and through the umbrella (``xbench score``, whose group calls :func:`run_main` too).

This module imports nothing but click (and ``errors`` and ``inputs``, standard library only) at import time,
so ``--help`` is instant everywhere and the scorer-only install (no torch) can use it; the store-kind checks
import the store code only when called.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, NoReturn, Sequence

import click
from click.utils import _detect_program_name

from xbench.schemas.errors import InputError, escape_text
from xbench.schemas.inputs import DEFAULT_TIMEOUT
from xbench.schemas.options import MAX_SECONDS, Float, Text, click_options, opt

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INVALID = 2
EXIT_INTERRUPTED = 130

RESUME_HINT = "interrupted; run the same command again to resume"
NOT_WRITTEN_HINT = "interrupted; nothing was written"
EXTRA_HINT = ("needs the extract extra: pip install '.[extract]' in a checkout of XBench "
              "(pip install 'xbench-cxr[extract]' once it is released on PyPI)")

#: Top-level modules that only the extract extra installs: an ImportError naming one of them is a missing extra.
EXTRA_MODULES = frozenset({"torch", "torchvision", "open_clip", "transformers", "timm", "pydicom", "pylibjpeg",
                           "pycocotools", "PIL", "yaml", "safetensors", "huggingface_hub", "tokenizers"})

#: Built-in errors that come from a path the user named (a missing file, a folder for a file ...).
_PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, FileExistsError)

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class UserError(click.ClickException):
    """Invalid input or usage: exit 2, one line per problem, then an optional summary line.

    ``problems`` is a message or a list of them (strings or :class:`~xbench.schemas.errors.Problem`);
    ``data``: extra keys for the JSON error (``xbench-validate`` adds ``"valid": false``).
    """

    exit_code = EXIT_INVALID

    def __init__(self, problems, summary: str | None = None, *, data: dict | None = None) -> None:
        items = [problems] if isinstance(problems, str) or not isinstance(problems, Iterable) else list(problems)
        self.problems = [str(p) for p in items] or ["invalid input"]
        self.summary = summary
        self.data = dict(data or {})
        super().__init__(self.problems[0])


class Interrupted(Exception):
    """Ctrl-C inside a command; ``hint`` is the line shown (exit 130)."""

    def __init__(self, hint: str) -> None:
        super().__init__(hint)
        self.hint = hint


class _Failure:
    """What a failed run prints: its exit code, the problem lines and an optional summary line."""

    def __init__(self, code: int, problems: list[str], summary: str | None = None, data: dict | None = None) -> None:
        self.code, self.problems, self.summary, self.data = code, problems, summary, data or {}


def is_input_error(exc: BaseException) -> bool:
    """Whether ``exc`` means "the input is wrong" (exit 2).

    Every deliberate input error derives from :class:`~xbench.schemas.errors.InputError`; besides those,
    a path the user named that is missing or of the wrong kind, and a ``MemoryError`` (under
    ``--max-memory`` an allocation the budget's checks let through: the input is too big).
    """
    return isinstance(exc, (InputError, MemoryError, *_PATH_ERRORS))


def _lines(exc: BaseException) -> list[str]:
    problems = getattr(exc, "problems", None)
    if problems:
        lines = [str(p) for p in problems]
        if isinstance(exc, InputError):  # a headline of its own, or the problems alone
            head = [exc.headline] if exc.headline and exc.headline not in lines else []
        else:
            head = str(exc).strip().splitlines()[:1]
            head = head if head and head[0] not in lines else []
        return head + lines
    if isinstance(exc, KeyError) and exc.args:  # str(KeyError) adds quotes around the message
        text = str(exc.args[0])
    elif isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = str(exc)
    return [line for line in text.strip().splitlines() if line.strip()] or [type(exc).__name__]


def classify(exc: BaseException) -> _Failure:
    """The exit code and lines for an exception raised by a command (never raises)."""
    if isinstance(exc, Interrupted):
        return _Failure(EXIT_INTERRUPTED, [exc.hint])
    if isinstance(exc, (KeyboardInterrupt, click.exceptions.Abort)):
        return _Failure(EXIT_INTERRUPTED, ["interrupted"])
    if isinstance(exc, UserError):
        return _Failure(EXIT_INVALID, exc.problems, exc.summary, exc.data)
    if isinstance(exc, click.UsageError):  # bad option, missing argument, BadParameter
        hint = None
        if exc.ctx is not None:
            hint = f"try '{exc.ctx.command_path} --help' for the options"
        return _Failure(EXIT_INVALID, [exc.format_message()], hint)
    if isinstance(exc, click.ClickException):
        return _Failure(exc.exit_code or EXIT_ERROR, [exc.format_message()])
    if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] in EXTRA_MODULES:
        return _Failure(EXIT_INVALID, [f"{EXTRA_HINT} ({exc.name} is not installed)"])
    if is_input_error(exc):
        return _Failure(EXIT_INVALID, _lines(exc))
    first = _lines(exc)[0]
    return _Failure(EXIT_ERROR, [f"unexpected {type(exc).__name__}: {first} (run again with --debug for the traceback)"])


def _flag(args: Sequence[str], name: str) -> bool:
    return any(a == name for a in args if isinstance(a, str))


def report_failure(prog: str, failure: _Failure, *, as_json: bool) -> None:
    """Print a failure: one line per problem on stderr ("PROG: error: ..."), the JSON shape on stdout."""
    if as_json:
        shape = {"ok": False, "exit_code": failure.code, "error": failure.summary or failure.problems[0],
                 "problems": failure.problems}
        click.echo(json.dumps({**shape, **failure.data}, indent=2))
    tag = "" if failure.code == EXIT_INTERRUPTED else "error: "
    for line in failure.problems:  # a problem is one line by construction; text from data stays inside it
        click.echo(f"{prog}: {tag}{escape_text(line)}", err=True)
    if failure.summary:
        click.echo(f"{prog}: {escape_text(failure.summary)}", err=True)


#: zarr's words for an entry of a store folder that is no Zarr node (a stray plain folder or file), which it warns
#: about on every listing; shown as one line of our own instead
_ZARR_STRAY = re.compile(r"Object at (.*) is not recognized as a component of a Zarr hierarchy\.?", re.DOTALL)


def _warning_line(message: object) -> str:
    text = str(message)
    stray = _ZARR_STRAY.fullmatch(text)
    if stray:
        text = (f"{stray.group(1)}: a file or folder in the store that is not part of it (no zarr.json), ignored; "
                "remove it")
    return escape_text(text)


class _WarningsAsLines:
    """While a command runs, a Python warning (from numpy, zarr, ... on any thread) prints as one escaped line
    ``PROG: warning: ...`` (each distinct line once) instead of its source file, line and excerpt, which read
    like a crash. The hook is the command's, not the library's: the previous one is restored after."""

    def __init__(self, prog: str) -> None:
        self.prog, self.seen, self.shown = prog, set(), None

    def show(self, message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ARG002 - the hook's signature
        text = _warning_line(message)
        if text not in self.seen:
            self.seen.add(text)
            click.echo(f"{self.prog}: warning: {text}", err=True)

    def __enter__(self):
        import warnings

        self.shown = warnings.showwarning
        warnings.showwarning = self.show
        return self

    def __exit__(self, *exc) -> None:
        import warnings

        if warnings.showwarning == self.show:
            warnings.showwarning = self.shown


#: whether the command runs as its own program (a console script: arguments from sys.argv) rather than called
#: from Python with arguments (tests, notebooks, a driver): the watchdog then counts only the memory the
#: command adds, and never ends a host process for memory it held before (see apply_budget)
_as_program = False


def run_main(invoke: Callable[[list[str]], object], args: Sequence[str] | None, prog: str) -> NoReturn:
    """Run ``invoke(args)`` (a click ``main`` in non-standalone mode) and exit with the contract's code."""
    global _as_program
    _as_program = args is None
    args = list(sys.argv[1:] if args is None else args)
    debug = _flag(args, "--debug") or os.environ.get("XBENCH_DEBUG", "") not in ("", "0")
    import signal

    from xbench.schemas.paths import remove_staged, terminate_as_interrupt

    try:
        with terminate_as_interrupt((signal.SIGTERM,)), _WarningsAsLines(prog):  # SIGTERM as Ctrl-C: work folders removed, exit 130
            rv = invoke(args)
    except click.exceptions.Exit as exc:  # --help, --version, ctx.exit(n)
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the contract: a code and one line per problem, never a traceback
        if isinstance(exc, click.exceptions.Abort) and isinstance(exc.__cause__, Interrupted):
            exc = exc.__cause__
        # the last net under every way out: a work folder whose creator's `finally` never ran (an interrupt that
        # landed between the folder appearing and the creator's `try`) goes too
        remove_staged()
        failure = classify(exc)
        if failure.code == EXIT_INTERRUPTED and not debug:
            # the interrupted work's pending coroutines (zarr's event loop) are abandoned on purpose; their
            # "never awaited" warnings at teardown would follow the one line the contract promises
            import warnings

            warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited", category=RuntimeWarning)
        if debug:
            traceback.print_exception(exc)
        report_failure(prog, failure, as_json=_flag(args, "--json"))
        sys.exit(failure.code)
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)


def exit_fast(run: Callable[[], object]) -> NoReturn:
    """Run a console entry point (``run`` ends in ``sys.exit``) and leave without the interpreter's teardown.

    A scorer process holds Numba, llvmlite, zarr's event loop and pyarrow; finalising their modules takes
    0.3-0.4 s on 2 cores after every output is already published (outputs are renamed into place before
    the command returns). Only for entry points run as programs (no ``argv`` given): a caller that imports
    ``main`` and passes arguments gets the ordinary ``SystemExit``. stdout and stderr are flushed first;
    ``XBENCH_DEBUG`` keeps the ordinary exit.
    """
    try:
        run()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if os.environ.get("XBENCH_DEBUG", "") not in ("", "0"):
        sys.exit(code)
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(code)


class Command(click.Command):
    """A click command whose ``main`` follows the exit-code contract.

    ``on_interrupt``: the line shown on Ctrl-C (RESUME_HINT for commands that resume).
    """

    def __init__(self, *args, on_interrupt: str = "interrupted", **kwargs) -> None:
        kwargs.setdefault("context_settings", dict(CONTEXT))
        super().__init__(*args, **kwargs)
        self.on_interrupt = on_interrupt
        self.params.append(click.Option(["--debug"], is_flag=True, expose_value=False,
                                        help="Show the traceback of an unexpected error."))

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted(self.on_interrupt) from None

    def run_program(self, argv: list[str] | None, prog_name: str) -> None:
        """A console entry point that has nothing left to do once its outputs are published: with ``argv``
        (a caller passing arguments) the ordinary ``main``, whose ``SystemExit`` the caller sees; run as a
        program (``argv`` None) it leaves through :func:`exit_fast`, without the interpreter's teardown."""
        if argv is not None:
            self.main(argv, prog_name=prog_name)
            return
        exit_fast(lambda: self.main(None, prog_name=prog_name))

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:  # a caller (tests, the umbrella) handles errors itself
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        prog = prog_name or _detect_program_name() or self.name or "xbench"
        run_main(lambda a: super(Command, self).main(a, prog, complete_var, standalone_mode=False, **extra),
                 args, prog)


def command(name: str | None = None, **kwargs) -> Callable[[Callable], Command]:
    """``@click.command`` for XBench commands (the :class:`Command` class, the shared context settings)."""
    return click.command(name, cls=Command, **kwargs)


# -- the budget for untrusted input (xbench-score, xbench-validate) --------------------------------
DEFAULT_MAX_MEMORY = "2GiB"


@dataclass
class BudgetOptions:
    """``--max-memory`` and ``--timeout``, shared by every command that reads untrusted stores."""

    max_memory: str = opt(DEFAULT_MAX_MEMORY, check=Text(), metavar="SIZE",
                          help="Resident memory budget, e.g. 1GiB or 512MiB: stores that declare more are refused "
                               "before decoding, and the run stops with exit 2 beyond it.")
    timeout: float = opt(DEFAULT_TIMEOUT, check=Float(0, MAX_SECONDS),
                         help="Stop with exit 2 after this many seconds (0: no limit).")


def budget_options(command):
    """The options of :class:`BudgetOptions` (no heavy import: the options exist before ``--help`` is parsed);
    the command receives them as ``max_memory`` and ``timeout``."""
    return click_options(BudgetOptions)(command)


def apply_budget(prog: str, max_memory: str, timeout: float):
    """Set the process's limits from the flags and start the watchdog, stopped when the command ends.

    Returns the watchdog: a command whose later work is bounded otherwise may end the watch sooner
    (``xbench run`` stops it once its checks pass and the steps, with their own limits, begin)."""
    from xbench.schemas import budget

    try:
        size = budget.parse_size(max_memory)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-memory") from None
    # Run as a program, --max-memory bounds the whole process, as documented; called from Python with
    # arguments, the process is someone else's (a test runner holding models, a notebook): the budget then
    # bounds what this command adds to it.
    baseline = 0 if _as_program else budget.resident_bytes()
    dog = budget.Watchdog(prog, budget.set_limits(max_memory=size, timeout=timeout), baseline=baseline)
    click.get_current_context().call_on_close(dog.stop)
    return dog


# -- output ---------------------------------------------------------------------------------------
class _Lines:
    """Progress for a log file or a pipe: a line at most every ``interval`` seconds, and one at the end."""

    def __init__(self, total: int | None, desc: str, unit: str, interval: float, stream, initial: int = 0) -> None:
        desc = escape_text(desc)  # a description may name a dataset group or a file from the input
        self.total, self.desc, self.unit, self.interval, self.stream = total, desc, unit, interval, stream
        self.n = initial
        self._last = time.monotonic()

    def _line(self) -> str:
        if self.total:
            return f"{self.desc}: {self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)"
        return f"{self.desc}: {self.n} {self.unit}"

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            print(self._line(), file=self.stream, flush=True)

    def set_total(self, total: int) -> None:
        self.total = total

    def close(self) -> None:
        if self.n:
            print(self._line(), file=self.stream, flush=True)
            self.n = 0  # closing twice prints once


class _Bar:
    """A tqdm bar on a terminal."""

    def __init__(self, total: int | None, desc: str, unit: str, stream, initial: int = 0) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=escape_text(desc), unit=unit, file=stream, leave=False, dynamic_ncols=True,
                         initial=initial)

    def update(self, n: int = 1) -> None:
        self._bar.update(n)

    def set_total(self, total: int) -> None:
        self._bar.total = total
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_total(self, total: int) -> None:
        pass

    def close(self) -> None:
        pass


def progress(total: int | None = None, *, desc: str, unit: str, enabled: bool = True, interval: float = 30.0,
             stream=None, initial: int = 0):
    """A progress reporter with ``update(n)``, ``set_total(n)`` and ``close()``.

    A bar when stderr is a terminal; otherwise (a log file, a pipe) a plain line every ``interval``
    seconds and one at the end, so a log never holds a bar stuck at 0; nothing when not ``enabled``.
    ``initial``: work already done (a resumed run).
    """
    stream = sys.stderr if stream is None else stream
    if not enabled:
        return _Silent()
    if getattr(stream, "isatty", lambda: False)():
        return _Bar(total, desc, unit, stream, initial)
    return _Lines(total, desc, unit, interval, stream, initial)


def warn(prog: str, message: str) -> None:
    """A warning line on stderr (shown even with --quiet: it says an option had no effect)."""
    click.echo(f"{prog}: warning: {escape_text(message)}", err=True)


# -- store kinds ----------------------------------------------------------------------------------
_KIND_FILES = {"images": "images.zarr", "ground-truth": "gt.zarr", "submission": "a submission.zarr"}


def _zip_folder(path: Path) -> str | None:
    """The one folder a zip holds when it was made by zipping the store folder instead of its contents."""
    from xbench.schemas import budget

    zf, problems = budget.open_zip(path, budget.limits())  # its entry count checked before zipfile lists it
    if zf is None:
        return None  # the store's own validation names the problem
    with zf:
        names = zf.namelist()
    if "zarr.json" in names:
        return None
    tops = {n.split("/", 1)[0] for n in names if "/" in n}
    if len(tops) == 1 and f"{next(iter(tops))}/zarr.json" in names:
        return next(iter(tops))
    return None


#: entries of a folder or zip looked at to recognise an unconverted model-output source (bounded on purpose)
_SOURCE_SCAN = 10_000


def _unconverted_source(path: Path) -> str | None:
    """What ``path`` is when it is a model's outputs in a layout xbench-convert reads, not yet converted: a
    folder of per-case .npz files (meta.json beside dataset folders), such a folder zipped, or an HDF5 file."""
    import itertools

    if path.is_file() and path.suffix.lower() in (".h5", ".hdf5"):
        return "an HDF5 file of model outputs"
    names: list[str] = []
    if path.is_dir():
        try:
            for entry in itertools.islice(path.iterdir(), _SOURCE_SCAN):
                names.append(entry.name)
                if entry.is_dir() and not entry.is_symlink():
                    names += [f"{entry.name}/{e.name}" for e in itertools.islice(entry.iterdir(), 50)]
        except OSError:
            return None
    elif path.is_file() and str(path).endswith(".zip"):
        from xbench.schemas.budget import limits, open_zip

        zf, _ = open_zip(path, limits())  # entry count checked first; a refused zip is named by the store checks
        if zf is None:
            return None
        with zf:
            names = [i.filename for i in itertools.islice(zf.infolist(), _SOURCE_SCAN)]
    if "zarr.json" in names:
        return None
    metas = [n for n in names if n.rsplit("/", 1)[-1] == "meta.json" and n.count("/") <= 1]
    if metas and any(n.endswith(".npz") for n in names):
        where = "a zip of a folder" if path.is_file() else "a folder"
        return f"{where} of per-case .npz files (meta.json beside the dataset folders)"
    return None


def store_kind(path: str | os.PathLike) -> tuple[str | None, dict]:
    """The ``xbench.kind`` root attribute of a store and its whole ``xbench`` dict; (None, {}) when unreadable
    or when the pre-flight inspection finds a problem (a hostile store is never parsed by Zarr here)."""
    from xbench.schemas import budget
    from xbench.schemas.paths import is_remote
    from xbench.schemas.store import open_store_group

    try:
        if not is_remote(path) and budget.inspect_store(path)[1]:  # the validators report these
            return None, {}
        meta = open_store_group(path).attrs.get("xbench", {})
    except Exception:  # noqa: BLE001 - an unreadable store has no kind; the validators say why
        return None, {}
    return (meta.get("kind"), meta) if isinstance(meta, dict) else (None, {})


def store_kind_problem(path: str | os.PathLike, expected: str, role: str, *, swap_with: str | None = None,
                       unfinished_ok: bool = False) -> str | None:
    """One line naming the real mistake when ``path`` is not a store of kind ``expected``; None when it is.

    ``role`` says where the path was given (``--images``, ``--gt``, ``the submission``); ``swap_with``
    names the option the store probably belongs to when two stores look swapped; ``unfinished_ok``
    accepts a submission whose extraction has not finished (the one a resumed extraction writes into).
    Kinds: images, ground-truth, submission (the root attribute ``xbench.kind``).
    """
    from xbench.schemas.paths import is_remote

    remote = is_remote(path)
    path = str(path) if remote else Path(path)  # a URL stays a string: Path would fold its "//"
    if not remote and not path.exists():
        return f"{path}: no such file or folder ({role})"
    if not remote and str(path).endswith(".zip") and path.is_file():
        inner = _zip_folder(path)
        if inner is not None:
            return (f"{path}: the zip holds the folder {inner}/ instead of the store's contents; zip the contents: "
                    f"(cd {inner} && zip -r0 ../{path.name} .)")
    kind, meta = store_kind(path)
    if kind == expected:
        if kind == "submission" and meta.get("complete") is False and not unfinished_ok:
            return (f"{path}: this submission was not finished (its extraction was interrupted); "
                    "run the same xbench-extract command again to complete it")
        return None
    if kind is None:
        if not remote and path.is_dir() and (path / "metrics.json").is_file():
            return f"{path}: this is a folder of scores (xbench-score output), not a store; {role} needs {_KIND_FILES[expected]}"
        source = None if remote or expected != "submission" else _unconverted_source(path)
        if source is not None:  # model outputs handed in as they are: the conversion step was skipped
            zipped = source.startswith("a zip")
            command = "unzip it, then xbench-convert FOLDER" if zipped else f"xbench-convert {shlex.quote(str(path))}"
            return (f"{path}: this is {source}, not a submission store; run xbench-convert first: {command} "
                    "--out submission.zarr (docs/how-to/convert.md), then hand in submission.zarr")
        return None  # not an XBench store at all: the validators list what is wrong
    what = {"images": "an images store", "ground-truth": "a ground-truth store", "submission": "a submission store"}[kind]
    fix = f"{role} needs {_KIND_FILES[expected]}"
    if swap_with:
        fix += f"; did you swap it with {swap_with}?"
    return f"{path}: this is {what} (xbench.kind={kind!r}); {fix}"


def require_kind(path, expected: str, role: str, *, swap_with: str | None = None, unfinished_ok: bool = False) -> None:
    """Raise :class:`UserError` with :func:`store_kind_problem`'s line when ``path`` is the wrong kind."""
    problem = store_kind_problem(path, expected, role, swap_with=swap_with, unfinished_ok=unfinished_ok)
    if problem:
        raise UserError(problem)
