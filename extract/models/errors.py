"""Errors raised while building a model adapter; the CLI prints them as one line each."""
from __future__ import annotations

from xbench.schemas.errors import InputError


class ModelConfigError(InputError, ValueError):
    """A model config (file or keyword overrides) is invalid; the message names the key."""


class WeightsNotFoundError(InputError, FileNotFoundError):
    """Weights (or a tokenizer / text config) a model needs are not available offline.

    The message names what is missing (file path or hub id) and how to get it.
    """

    def __init__(self, what: str, needed: str, how: str) -> None:
        self.what, self.needed, self.how = what, needed, how
        InputError.__init__(self, f"{what}: {needed} not found. {how}")

    def __str__(self) -> str:
        return self.args[0]
