"""Side files of a model folder (``config.json``, ``open_clip_config.json``, tokenizer settings) through the
bounded readers of :mod:`xbench.schemas.inputs`: a regular file, size, depth and element caps, duplicate keys
and non-finite numbers refused, one problem line (exit 2) instead of a Python error."""
from __future__ import annotations

import os
from typing import Any

from xbench.schemas.errors import InputError
from xbench.extract.models.errors import ModelConfigError

MiB = 2**20


def _limits():
    from xbench.schemas.inputs import DEFAULT, with_limits

    # a model's config.json is a few KiB; a tokenizer.json (vocabulary and merges) a few MiB
    return with_limits(DEFAULT, max_bytes=64 * MiB, max_depth=32, max_elements=5_000_000)


def read_model_json(path: str | os.PathLike, what: str, *, kind: type = dict, expected: str | None = None) -> Any:
    """The JSON document in ``path`` (``kind``: dict or list), bounded; :class:`ModelConfigError` naming
    ``what`` and the file otherwise (``expected`` words the wrong-shape line)."""
    from xbench.schemas.inputs import load_json

    try:
        doc = load_json(path, limits=_limits())
    except InputError as exc:
        raise ModelConfigError([f"{what}: {p}" for p in exc.problems]) from None
    if not isinstance(doc, kind):
        raise ModelConfigError(f"{what}: {path}: expected {expected or ('a JSON object' if kind is dict else 'a JSON array')}")
    return doc


def check_model_json(path: str | os.PathLike, what: str) -> None:
    """Read ``path`` once through the bounded reader before a library (transformers) parses it itself."""
    if os.path.exists(path):
        read_model_json(path, what)
