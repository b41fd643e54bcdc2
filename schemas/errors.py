"""Problems and errors shared by every store kind.

Validation never stops at the first problem: it collects :class:`Problem` objects, each naming
where (store, dataset group, array) and what is wrong, so a person can fix them all in one go.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a store. ``str(problem)`` is the one line shown to users."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class XBenchError(Exception):
    """Base class of the errors XBench raises on purpose (with a message meant for people)."""


class InvalidStoreError(XBenchError):
    """A store (or a write to it) breaks the contract; ``problems`` lists every problem found."""

    def __init__(self, problems: Iterable[Problem] | Problem | str) -> None:
        if isinstance(problems, (Problem, str)):
            problems = [problems]
        self.problems = [p if isinstance(p, Problem) else Problem("", p) for p in problems]
        super().__init__("\n".join(str(p) for p in self.problems))


class StoreNotFoundError(XBenchError, FileNotFoundError):
    """The path names no store (or not a store of the expected kind)."""
