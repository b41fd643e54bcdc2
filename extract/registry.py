"""A small, lazy, typed registry used for datasets, models and saliency methods.

Entries are either objects or ``"module.path:Attribute"`` strings imported on first use, so that
listing the registry never imports torch or a model's heavy dependencies.
"""
from __future__ import annotations

import difflib
import importlib
from typing import Callable, Generic, Iterator, TypeVar

from ..schemas.errors import UnknownNameError  # noqa: F401 - raised here, defined with the other input errors

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names (and aliases) to entries of one kind.

    >>> r = Registry("colour")
    >>> r.register("red", 1)
    >>> r.get("red")
    1
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}

    def register(self, name: str, entry: T | str, *, aliases: tuple[str, ...] = ()) -> None:
        for key in (name, *aliases):
            old = self._entries.get(key)
            if old is not None and old != entry:
                raise ValueError(f"{self.kind} {key!r} is already registered to {old!r}; refusing {entry!r}")
            self._entries[key] = entry

    def decorator(self, name: str, *, aliases: tuple[str, ...] = ()) -> Callable[[T], T]:
        def wrap(obj: T) -> T:
            self.register(name, obj, aliases=aliases)
            return obj

        return wrap

    def get(self, name: str) -> T:
        try:
            entry = self._entries[name]
        except KeyError:
            raise UnknownNameError(self._unknown_message(name)) from None
        if isinstance(entry, str):
            module_name, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(module_name), attr)
            self._entries[name] = entry
        return entry  # type: ignore[return-value]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, self._entries, n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        return f"unknown {self.kind} {name!r}.{hint} Available: {', '.join(self.names())}"
