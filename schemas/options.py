"""Command options declared once, as data: a dataclass whose fields carry their type, default, constraint and help.

From one declaration (fields made with :func:`opt`) three things are derived, so they cannot drift apart:

- the click options of the command (:func:`click_options`, a decorator; :func:`from_params` turns the parsed
  values back into the dataclass's values);
- the checks of a suite's option section (:func:`suite_defaults`, :func:`unknown_keys`, :func:`problems`:
  unknown keys with close matches, wrong types, constraints; one line each);
- the argv that passes values on to the command (:func:`to_argv`), e.g. when ``xbench run`` launches ranks.

A constraint (:class:`Int`, :class:`Float`, :class:`Choice`, :class:`Text`, :class:`Flag`, :class:`Grid`) gives
both the click type and the suite's check, so ``--workers -1`` and ``workers: -1`` are refused by the same rule.

This module imports nothing but click, so every command's ``--help`` stays instant.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import click

#: file suffixes of a configuration file (model configs, suites); read by ``xbench.schemas.inputs.load_config``
CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".json")

_UNSET: Any = object()

# ------------------------------------------------------------------------------------------ shared bounds
# Every numeric option has a finite upper bound (tests/test_cli_options.py walks them): a value its consumers
# cannot hold (an int64 array, a JSON reader of the command's own output) is refused when parsed, exit 2, one
# line, instead of an OverflowError mid-run or an output the next command refuses. The bounds several options
# and readers share are declared here, once; the readers of the outputs import them (docs/contract.md, "Options").

#: the seeds of the resamples and of re-initialised weights (--seed of score, report, compare, human, perturb,
#: sanity): 32 bits, as CheXlocalize's legacy RandomState (the human ceiling's own bootstrap) takes, and
#: sanity's per-layer torch seed (seed x 1,000,003 + layer) stays within 64 bits
MAX_SEED = 2**32 - 1
#: the seeds of data (xbench-prepare --seed, the perturbed copies' seed, --augment-seed): any non-negative int64
#: (default_rng, an int64 array, the perturbations' reader)
MAX_DATA_SEED = 2**63 - 1
#: bootstrap resamples (--bootstrap): the readers of metrics.json, report.json and the counts accept up to this
MAX_RESAMPLES = 1_000_000
#: cases of a store (schemas/store.py reads it from here): --limit, --n-cases, --min-group
MAX_CASES = 10_000_000
#: seconds of one command's run (--timeout, a competition's time limit): 30 days
MAX_SECONDS = 30 * 86_400
#: steps of a deletion/insertion curve (xbench perturb --steps, xbench-extract --faithfulness-steps; the
#: faithfulness key's reader accepts the same)
MAX_CURVE_STEPS = 10_000
#: cases of a phantom dataset (xbench-prepare phantom --n-cases, xbench demo --n-cases; extract/datasets/phantom.py)
MAX_PHANTOM_CASES = 1_000_000


# ------------------------------------------------------------------------------------------ constraints
def _or_list(items: Iterable[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _bounds(low, high) -> str:
    if low is not None and high is not None:
        return f" between {low} and {high}"
    return f" >= {low}" if low is not None else (f" <= {high}" if high is not None else "")


@dataclass(frozen=True)
class Int:
    """An integer, optionally bounded (both ends included)."""

    low: int | None = None
    high: int | None = None

    def click_type(self) -> click.ParamType:
        return click.INT if self.low is None and self.high is None else click.IntRange(self.low, self.high)

    def problem(self, value) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and \
            (self.low is None or value >= self.low) and (self.high is None or value <= self.high)
        return None if ok else f"must be an integer{_bounds(self.low, self.high)}"

    def argv(self, value) -> str:
        return str(value)


@dataclass(frozen=True)
class Float:
    """A number (an integer is one too), optionally bounded (both ends included)."""

    low: float | None = None
    high: float | None = None

    def click_type(self) -> click.ParamType:
        return _FiniteFloat(self.low, self.high)

    def problem(self, value) -> str | None:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and \
            (self.low is None or value >= self.low) and (self.high is None or value <= self.high)
        return None if ok else f"must be a number{_bounds(self.low, self.high)}"

    def argv(self, value) -> str:
        return str(value)


class _FiniteFloat(click.FloatRange):
    """click's FloatRange without nan and inf (click takes "nan" for a float, and nan passes every range test)."""

    def convert(self, value, param, ctx):
        number = click.types.FloatParamType.convert(self, value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


@dataclass(frozen=True)
class Choice:
    """One of a few words: a tuple, or a function returning them, called when a value is first checked (a
    list kept elsewhere, e.g. a registry, whose import would slow every ``--help``; give the option a
    ``metavar``, as click would otherwise list the words in the help)."""

    source: tuple[str, ...] | Callable[[], Iterable[str]]

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self.source()) if callable(self.source) else tuple(self.source)

    def click_type(self) -> click.ParamType:
        return _LazyChoice(self.source) if callable(self.source) else click.Choice(list(self.source))

    def problem(self, value) -> str | None:
        choices = self.choices
        return None if isinstance(value, str) and value in choices else f"must be {_or_list(choices)}"

    def argv(self, value) -> str:
        return str(value)


class _LazyChoice(click.Choice):
    """click's Choice over words listed by a function, called on first use (a value to check, a completion),
    never while ``--help`` is printed under an explicit metavar."""

    def __init__(self, source: Callable[[], Iterable[str]], case_sensitive: bool = True) -> None:
        self._source, self.case_sensitive = source, case_sensitive  # no super().__init__: it would list them

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self._source())


@dataclass(frozen=True)
class Text:
    """Any string; ``click_type`` replaces click's plain string (e.g. a ``click.Path``)."""

    type: Any = None

    def click_type(self) -> click.ParamType:
        return self.type if self.type is not None else click.STRING

    def problem(self, value) -> str | None:
        return None if isinstance(value, str) else "must be a string"

    def argv(self, value) -> str:
        return str(value)


@dataclass(frozen=True)
class Flag:
    """On or off: a click flag (given or not), ``true``/``false`` in a suite."""

    def click_type(self) -> None:
        return None

    def problem(self, value) -> str | None:
        return None if isinstance(value, bool) else "must be true or false"

    def argv(self, value) -> str:  # never called: a flag is its name alone
        raise TypeError("a flag has no value")


class _GridType(click.ParamType):
    """``H`` or ``HxW`` on the command line, an integer or ``[H, W]`` from a suite; (H, W) either way."""

    name = "H[xW]"

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def convert(self, value, param, ctx):
        if isinstance(value, (list, tuple)):
            parts = list(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            parts = [value]
        else:
            try:
                parts = [int(p) for p in str(value).lower().replace(",", "x").split("x")]
            except ValueError:
                self.fail(f"{value!r} is not a grid size; give H or HxW, e.g. 224 or 224x224", param, ctx)
        if len(parts) == 1:
            parts = parts * 2
        if len(parts) != 2 or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts) \
                or min(parts) < self.low or max(parts) > self.high:
            self.fail(f"{value!r}: the grid needs 1 or 2 sizes between {self.low} and {self.high}", param, ctx)
        return tuple(parts)


@dataclass(frozen=True)
class Grid:
    """A 2-D size: ``H`` (square) or ``H x W``, each side bounded."""

    low: int = 1
    high: int = 4096

    def click_type(self) -> click.ParamType:
        return _GridType(self.low, self.high)

    def parse(self, value) -> tuple[int, int] | None:
        """(H, W) from a suite value (an integer or [H, W]); None when it is not one."""
        if isinstance(value, int) and not isinstance(value, bool):
            value = (value, value)
        if isinstance(value, (list, tuple)) and len(value) == 2 and \
                all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return int(value[0]), int(value[1])
        return None

    def problem(self, value) -> str | None:
        grid = self.parse(value)
        ok = grid is not None and min(grid) >= self.low and max(grid) <= self.high
        return None if ok else f"must be an integer or [H, W] between {self.low} and {self.high}"

    def argv(self, value) -> str:
        h, w = self.parse(value) or (value, value)
        return f"{h}x{w}"


# ----------------------------------------------------------------------------------------- the field
@dataclass(frozen=True)
class Opt:
    """What one field says about itself (kept in the dataclass field's metadata under ``"opt"``)."""

    check: Any                       # a constraint above
    help: str | None = None
    flag: str | None = None          # default: --name-with-dashes
    short: str | None = None         # e.g. -q
    aliases: tuple = ()              # older names of the flag, still accepted (e.g. --n-boot for --bootstrap)
    metavar: str | None = None
    cli: bool = True                 # a click option of the command
    suite: bool = False              # a key of the suite's section for the command
    suite_default: Any = _UNSET      # where the suite's default differs from the command's
    suite_also: tuple = ()           # literal values a suite may give besides the constraint's (e.g. "auto")
    multiple: bool = False
    required: bool = False           # the command refuses to run without it (click says so)
    from_cli: Callable[[Any], Any] | None = None   # click's value -> the field's value
    to_cli: Callable[[Any], list[str]] | None = None  # the field's value -> the option's values on the command line


#: The one flag for the number of bootstrap resamples, declared once (:func:`resamples`) and used by every command
#: that draws resamples (xbench-score, xbench report, xbench compare, xbench human, xbench package); the older
#: ``--n-boot`` of report and compare is still accepted (docs/contract.md, "Resampling").
RESAMPLES_FLAG = "--bootstrap"


def resamples(default: int = 1000, *, help: str, suite: bool = False) -> Any:
    """The resample-count field of a command's declaration: ``--bootstrap B`` (0 <= B <= MAX_RESAMPLES; 0 turns
    the draws off)."""
    return opt(default, check=Int(0, MAX_RESAMPLES), flag=RESAMPLES_FLAG, aliases=("--n-boot",), metavar="B", suite=suite,
               help=help)


def seed_opt(default: int | None = 0, *, help: str, **kwargs) -> Any:
    """A seed field: ``--seed N`` (0 <= N <= MAX_SEED)."""
    return opt(default, check=Int(0, MAX_SEED), help=help, **kwargs)


def opt(default: Any = _UNSET, *, default_factory: Callable | None = None, **kwargs) -> Any:
    """A dataclass field declared as a command option (see :class:`Opt` for the keywords)."""
    meta = {"opt": Opt(**kwargs)}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    if default is _UNSET:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def declared(cls) -> list[tuple[dataclasses.Field, Opt]]:
    """The option fields of a dataclass, in declaration order."""
    return [(f, f.metadata["opt"]) for f in dataclasses.fields(cls) if "opt" in f.metadata]


def default_of(f: dataclasses.Field) -> Any:
    """The command's default of a field (None for a required one: the command then says it is missing)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def flag_of(f: dataclasses.Field, o: Opt) -> str:
    return o.flag or "--" + f.name.replace("_", "-")


# ------------------------------------------------------------------------------------------- click
def click_option(f: dataclasses.Field, o: Opt) -> Callable:
    """The click option of one field: its flag, type from the constraint, default, help."""
    default = default_of(f)
    decls = [flag_of(f, o), *o.aliases, *([o.short] if o.short else []), f.name]
    kwargs: dict[str, Any] = {"help": o.help}
    if isinstance(o.check, Flag):
        kwargs["is_flag"] = True
        if default:  # on unless turned off: a "--name/--no-name" pair
            kwargs["default"] = True
        if "/" in decls[0]:  # a pair says which side is the default
            kwargs["show_default"] = True
    elif o.multiple:
        kwargs.update(multiple=True, type=o.check.click_type())
    elif o.required:
        kwargs.update(type=o.check.click_type())
    else:
        kwargs.update(type=o.check.click_type(), default=default, show_default=default is not None)
    if o.metavar:
        kwargs["metavar"] = o.metavar
    if o.required:
        kwargs["required"] = True
    return click.option(*decls, **kwargs)


def click_options(cls, *, exclude: Iterable[str] = ()) -> Callable:
    """A decorator adding the click options of every command-line field of ``cls``, in declaration order."""
    chosen = [click_option(f, o) for f, o in declared(cls) if o.cli and f.name not in set(exclude)]

    def decorate(command):
        for option in reversed(chosen):  # click lists options in the order the decorators are written
            command = option(command)
        # the declarations a command's options come from (tests/test_cli_options.py checks every subcommand's)
        command.__xbench_options__ = (*getattr(command, "__xbench_options__", ()), cls)
        return command

    return decorate


def from_params(cls, params: Mapping[str, Any]) -> dict[str, Any]:
    """The field values of ``cls`` from click's parsed parameters (each field's ``from_cli`` applied)."""
    out = {}
    for f, o in declared(cls):
        if o.cli and f.name in params:
            value = params[f.name]
            out[f.name] = o.from_cli(value) if o.from_cli is not None else value
    return out


def parse(cls, params: Mapping[str, Any]):
    """The options object of ``cls`` from click's parsed parameters (``cls(**from_params(cls, params))``)."""
    return cls(**from_params(cls, params))


def declaration_of(command) -> tuple:
    """The dataclasses a click command's options were declared by (empty for a command declaring none)."""
    callback = getattr(command, "callback", command)
    return tuple(getattr(callback, "__xbench_options__", ()))


def to_argv(cls, values: Mapping[str, Any]) -> list[str]:
    """Command-line arguments that give the command ``values`` (a mapping of field names; fields absent, None
    or off are left out, so the command's defaults apply), in declaration order."""
    argv: list[str] = []
    for f, o in declared(cls):
        if not o.cli or f.name not in values or values[f.name] is None:
            continue
        value, name = values[f.name], flag_of(f, o)
        if isinstance(o.check, Flag):
            on, _, off = name.partition("/")  # "--name/--no-name" names both sides
            argv += [on] if value else ([off] if off else [])
        elif o.to_cli is not None:
            argv += [a for item in o.to_cli(value) for a in (name, item)]
        elif o.multiple:
            argv += [a for item in value for a in (name, o.check.argv(item))]
        else:
            argv += [name, o.check.argv(value)]
    return argv


# ------------------------------------------------------------------------------------------- suites
def suite_defaults(cls) -> dict[str, Any]:
    """{key: default} of the fields a suite's section may set, in declaration order."""
    return {f.name: (o.suite_default if o.suite_default is not _UNSET else default_of(f))
            for f, o in declared(cls) if o.suite}


def suite_paths(cls) -> tuple[str, ...]:
    """The keys of a suite's section that name a file or folder (a ``suite`` field checked as a ``click.Path``,
    e.g. ``thresholds_from``, ``human_dir``): made absolute relative to the suite file, and fingerprinted by the
    content they name, not by their name (xbench.suite.plan)."""
    return tuple(f.name for f, o in declared(cls)
                 if o.suite and isinstance(getattr(o.check, "type", None), click.Path))


def unknown_keys(given: Iterable, known: Iterable[str], where: str) -> list[str]:
    """One line naming the keys of ``given`` not in ``known`` (each with its close match), or none."""
    known = list(known)
    unknown = sorted(set(map(str, given)) - set(known))
    if not unknown:
        return []
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1)
        named.append(f"{key} (did you mean {close[0]}?)" if close else key)
    return [f"{where}: unknown key(s) {', '.join(named)}; known: {', '.join(known)}"]


def _shown(value, limit: int = 80) -> str:
    """A value as the suite gave it, cut short: a suite is input from outside and may hold anything."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def problems(cls, values: Mapping[str, Any], where: str, *, suite: bool = True) -> list[str]:
    """One line per value of ``values`` that its field's constraint refuses (None passes where the default is
    None). ``where`` prefixes each line: ``models.clip.extract`` gives ``models.clip.extract.batch_size: ...``;
    with ``suite=False`` lines name the command's flags instead (``--batch-size: ...``)."""
    lines = []
    for f, o in declared(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        default = o.suite_default if suite and o.suite_default is not _UNSET else default_of(f)
        if value is None and default is None:
            continue
        if suite and any(value == v and type(value) is type(v) for v in o.suite_also):
            continue
        # a repeatable option's values are checked by its constraint when it checks lists as a whole (whole_list)
        problem = o.check.problem(value) if not o.multiple or getattr(o.check, "whole_list", False) else None
        if problem:
            also = "".join(f" or {v}" for v in o.suite_also) if suite else ""
            name = f"{where}.{f.name}" if suite else flag_of(f, o)
            lines.append(f"{name}: {problem}{also}, got {_shown(value)}")
    return lines
