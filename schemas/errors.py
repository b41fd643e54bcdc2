"""Problems and errors shared by every store kind.

Validation never stops at the first problem: it collects :class:`Problem` objects, each naming
where (store, dataset group, array) and what is wrong, so a person can fix them all in one go.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

# C0 and C1 control characters, DEL, and the Unicode line and paragraph separators: any of them in text
# that came from data (a case id, a group name, a JSON key) could end a line early or rewrite it on a
# terminal, and the platforms show participants the last stderr line.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_text(text: object) -> str:
    """``text`` as one printable line: control characters and newlines written as escapes (``\\n``, ``\\x1b``).

    Every line XBench prints or logs goes through this, so text from data can never forge a line."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a store. ``str(problem)`` is the one line shown to users."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class XBenchError(Exception):
    """Base class of the errors XBench raises on purpose (with a message meant for people)."""


class InputError(XBenchError):
    """The input is wrong (a file, a store, an option, a config): every command exits 2 on it.

    The one base class of every deliberate input error (the CLI layer classifies by ``isinstance``).
    ``problems``: one line each, kept as given (strings or :class:`Problem`; ``str()`` of each is the
    line); ``message``: an optional first line of its own (``str(error)``), by default the problems
    joined by newlines. Exit 1 is left for bugs.
    """

    def __init__(self, problems: Iterable[Problem | str] | Problem | str = (), message: str | None = None) -> None:
        if isinstance(problems, (Problem, str)):
            problems = [problems]
        self.problems = [p if isinstance(p, Problem) else str(p) for p in problems]
        self.headline = message  # a line of its own, printed before the problems (None: the problems alone)
        text = message if message is not None else "\n".join(str(p) for p in self.problems)
        super().__init__(text)


class InvalidStoreError(InputError):
    """A store (or a write to it) breaks the contract; ``problems`` lists every problem found (as
    :class:`Problem` objects, a plain message becoming one without a place)."""

    def __init__(self, problems: Iterable[Problem | str] | Problem | str, message: str | None = None) -> None:
        if isinstance(problems, (Problem, str)):
            problems = [problems]
        super().__init__([p if isinstance(p, Problem) else Problem("", str(p)) for p in problems], message)


class StoreNotFoundError(InputError, FileNotFoundError):
    """The path names no store (or not a store of the expected kind)."""


class UnknownNameError(InputError, KeyError):
    """A name (dataset, model, map method, metric ...) that no registry knows; the message lists close matches."""

    def __str__(self) -> str:  # KeyError quotes its argument; show the sentence as written
        return str(self.args[0]) if self.args else ""


class InputLimitError(InputError):
    """An input file exceeds a resource bound (size, depth, element count, pixels, time)."""
