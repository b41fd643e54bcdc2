"""One registry for every plug-in kind: datasets, models, map methods, metrics (and augmentations).

A :class:`Registry` maps names (and aliases) to entries of one kind. An entry is the object itself or
a lazy ``"package.module:attr"`` string imported on first use, so listing a registry imports nothing
heavy (no torch, no pydicom). Three ways to fill one:

* ``register(name, entry)`` / the ``@registry.decorator(name)`` form, from code;
* :meth:`Registry.discover`: one entry per public module of a package, found by listing the package
  (so adding a built-in plug-in is adding its file; no central dict to edit);
* Python entry points of installed distributions (the group given as ``entry_point_group``, e.g.
  ``xbench.models``), read once, lazily, the first time the registry is asked for a name. A name an
  entry point shares with a built-in entry is ignored (built-ins win).

On first use each entry is checked against the kind's ``check`` (a base class the entry must be an
instance or a subclass of, or any predicate): a plug-in of the wrong kind is refused with a
:class:`PluginError` naming it, instead of failing later inside a run. An unknown name raises
:class:`~xbench.schemas.errors.UnknownNameError` with the close matches ("did you mean").

Light on purpose: standard library only (no numpy, zarr or torch at import), so every layer may use it.

>>> colours = Registry("colour", check=int)
>>> colours.register("red", 1, aliases=("rouge",))
>>> colours.get("rouge")
1
>>> colours.get("red ")
Traceback (most recent call last):
...
xbench.schemas.errors.UnknownNameError: unknown colour 'red '. Did you mean: red? Available: red, rouge
"""
from __future__ import annotations

import ast
import difflib
import importlib
import pkgutil
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

from xbench.schemas.errors import InputError, UnknownNameError

__all__ = ["ENTRY_POINT_GROUPS", "PluginError", "Registry", "UnknownNameError", "declared_entries", "import_target"]

T = TypeVar("T")

#: The entry point group of each plug-in kind (``[project.entry-points."<group>"]`` in a plug-in's
#: pyproject.toml; docs/explanation/architecture.md, "Adding a plug-in").
ENTRY_POINT_GROUPS = {
    "dataset": "xbench.datasets",
    "model": "xbench.models",
    "method": "xbench.methods",
    "metric": "xbench.metrics",
    "augmentation": "xbench.augmentations",
}


class PluginError(InputError):
    """A registered entry that cannot be used: its target does not import, or it is not of its kind.

    An input error (exit 2): the cause is a plug-in's declaration (an installed package, a config's
    ``module:attr``), not XBench's own code."""


def import_target(target: str, what: str = "entry") -> Any:
    """The object named by ``"package.module:attr"`` (``attr`` may be dotted); :class:`PluginError` when
    it does not import."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"{what} {target!r}: expected 'package.module:attribute'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        missing = exc.name or ""
        if missing and not (module_name == missing or module_name.startswith(missing + ".")):
            raise  # the module exists but a dependency of it is missing: the CLI names the extra to install
        raise PluginError(f"{what} {target!r} cannot be imported: {exc}") from None
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise PluginError(f"{what} {target!r} cannot be imported: {exc}") from None
    return obj


def declared_entries(source: Path, variable: str) -> dict[str, str]:
    """``{name: attribute}`` from a module's top-level ``<variable> = {...}`` literal, read from its source
    without importing it (listing plug-ins must not import torch or pydicom); {} when it has none.
    A declaration that is not a literal ``{str: str}`` dict is a :class:`PluginError`."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), str(source))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == variable for t in targets) and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                value = None
            if not (isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
                raise PluginError(f"{source}: {variable} must be a literal dict of names to attribute names")
            return value
    return {}


def _describe(check: type | Callable[[Any], bool] | None, as_class: bool) -> str:
    if isinstance(check, type):
        return f"{'a subclass' if as_class else 'an instance'} of {check.__module__}.{check.__qualname__}"
    return getattr(check, "__doc__", None) or "of the registry's kind"


class Registry(Generic[T]):
    """Maps names (and aliases) to entries of one kind (see the module docstring).

    ``check``: a class every entry must be an instance of (``as_class=False``, the default) or a
    subclass of (``as_class=True``), or a predicate returning True for a valid entry (its docstring
    says what it wants, in the error message). ``entry_point_group``: where installed plug-ins of this
    kind are declared. ``hint``: appended to the unknown-name message (e.g. the command that lists).
    """

    def __init__(self, kind: str, *, check: type | Callable[[Any], bool] | None = None, as_class: bool = False,
                 entry_point_group: str | None = None, hint: str = "") -> None:
        self.kind = kind
        self.check = check
        self.as_class = as_class
        self.entry_point_group = entry_point_group
        self.hint = hint
        self._entries: dict[str, T | str] = {}
        self._checked: set[str] = set()
        self._entry_points_loaded = entry_point_group is None

    # -- filling ------------------------------------------------------------------------------------
    def register(self, name: str, entry: T | str, *, aliases: tuple[str, ...] = ()) -> None:
        """Add ``entry`` under ``name`` and ``aliases``; an object is checked now, a target string on first use.
        Registering the same entry twice is harmless; another entry under a taken name is a ValueError."""
        if not isinstance(entry, str):
            self._validate(name, entry)
        for key in (name, *aliases):
            old = self._entries.get(key)
            if old is not None and old != entry:
                raise ValueError(f"{self.kind} {key!r} is already registered to {old!r}; refusing {entry!r}")
            self._entries[key] = entry
            if not isinstance(entry, str):
                self._checked.add(key)

    def decorator(self, name: str, *, aliases: tuple[str, ...] = ()) -> Callable[[T], T]:
        """``@registry.decorator("name")`` above a class or function registers it."""
        def wrap(obj: T) -> T:
            self.register(name, obj, aliases=aliases)
            return obj

        return wrap

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that add a throw-away plug-in clean up with it)."""
        self._entries.pop(name, None)
        self._checked.discard(name)

    def discover(self, package: str, path: Iterable[str], *, attr: str | None = None,
                 declared: str | None = None) -> list[str]:
        """Register lazy entries for the public modules (no leading underscore) of ``package``, found by
        listing ``path`` (the package's ``__path__``); no module is imported.

        ``attr="METHOD"``: one entry per module, named as the module, target ``module:METHOD``.
        ``declared="REGISTER"``: each module that assigns ``REGISTER = {"name": "attribute", ...}`` (a
        literal dict at the top level, read with :func:`ast.literal_eval`) registers those names;
        modules without it are skipped. Returns the names registered, in listing order."""
        found = []
        for info in sorted(pkgutil.iter_modules(list(path)), key=lambda i: i.name):
            if info.name.startswith("_"):
                continue
            module = f"{package}.{info.name}"
            if attr is not None:
                self.register(info.name, f"{module}:{attr}")
                found.append(info.name)
            if declared is not None and not info.ispkg:
                origin = Path(getattr(info.module_finder, "path", "")) / f"{info.name}.py"
                for name, target in declared_entries(origin, declared).items():
                    self.register(name, f"{module}:{target}")
                    found.append(name)
        return found

    def load_entry_points(self, *, reload: bool = False) -> None:
        """Register the installed plug-ins of :attr:`entry_point_group` (once; ``reload`` reads them again,
        e.g. after a test put a distribution on ``sys.path``). Built-in names win over plug-ins."""
        if self.entry_point_group is None or (self._entry_points_loaded and not reload):
            return
        self._entry_points_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.entry_point_group):
            if ep.name not in self._entries:
                self._entries[ep.name] = ep.value

    # -- reading ------------------------------------------------------------------------------------
    def get(self, name: str) -> T:
        """The entry of ``name``, imported and checked on first use; UnknownNameError for another name."""
        self.load_entry_points()
        try:
            entry = self._entries[name]
        except (KeyError, TypeError):
            raise UnknownNameError(self._unknown_message(name)) from None
        if isinstance(entry, str):
            entry = import_target(entry, f"{self.kind} {name!r}")
        if name not in self._checked:
            self._validate(name, entry)
            self._entries[name] = entry
            self._checked.add(name)
        return entry  # type: ignore[return-value]

    def names(self) -> list[str]:
        """Every registered name and alias, sorted (installed plug-ins included)."""
        self.load_entry_points()
        return sorted(self._entries)

    def target(self, name: str) -> T | str:
        """The entry as registered (a ``module:attr`` string until first use), without importing it."""
        self.load_entry_points()
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        self.load_entry_points()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def unknown_message(self, name: object) -> str:
        """``unknown <kind> 'x'. Did you mean: ...? Available: ... <hint>`` (one line; also for problem lists)."""
        tail = f" {self.hint}" if self.hint else ""
        return self._unknown_message(name) + tail

    def _unknown_message(self, name: object) -> str:
        close = difflib.get_close_matches(str(name), list(self._entries), n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        return f"unknown {self.kind} {name!r}.{hint} Available: {', '.join(self.names())}"

    def _validate(self, name: str, entry: Any) -> None:
        check = self.check
        if check is None:
            return
        if isinstance(check, type):
            ok = isinstance(entry, type) and issubclass(entry, check) if self.as_class else isinstance(entry, check)
        else:
            ok = bool(check(entry))
        if not ok:
            raise PluginError(f"{self.kind} {name!r} is {type(entry).__name__} {entry!r:.80}; it must be "
                              f"{_describe(check, self.as_class)}")
