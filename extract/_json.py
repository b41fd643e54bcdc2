"""Reading one JSON document from a file the user supplied (a dataset's annotations, a model's side files),
with the project's one-line errors. One helper for the dataset readers and the model adapters alike (it lives
in the extract package, not in either, so that models never import the readers).

The bytes go through :func:`xbench.schemas.inputs.load_json`, the one bounded JSON reader: a regular file
(no FIFO), at most 256 MiB, strict UTF-8, nesting, element count and integer digits capped, ``NaN`` tokens
and keys given twice refused.
"""
from __future__ import annotations

from pathlib import Path

from xbench.schemas.errors import InputError

__all__ = ["JSONFileError", "read_json"]

MAX_BYTES = 256 * 2**20


class JSONFileError(InputError, ValueError):
    """A JSON file that cannot be read (exit 2). Also a ValueError, as it was before the InputError base."""


def read_json(path: str | Path, *, kind: type = dict, expected: str = "a JSON object", what: str = "",
              error: type[Exception] = JSONFileError):
    """The JSON document in ``path``, which must be a ``kind`` (``dict``, ``list``).

    Every failure is one ``error`` line naming the file (prefixed with ``what``, e.g. ``"descriptions"``):
    a missing file, not a regular file, too large, bytes that are not UTF-8, text that is not JSON (with the
    line of the first mistake), too deep or too many values, a key given twice, a NaN token, or a document of
    another shape (saying ``expected``). Callers pass their own error class (``ReaderError``...).
    """
    from xbench.schemas import inputs

    path = Path(path)
    head = f"{what}: {path}" if what else str(path)
    try:
        doc = inputs.load_json(path, where=head, limits=inputs.with_limits(inputs.DEFAULT, max_bytes=MAX_BYTES))
    except InputError as exc:
        raise error(str(exc.problems[0]) if exc.problems else str(exc)) from None
    if not isinstance(doc, kind):
        raise error(f"{head}: expected {expected}")
    return doc
