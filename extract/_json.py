"""Reading one JSON document from a file the user supplied (a dataset's annotations, a model's side files),
with the project's one-line errors. One helper for the dataset readers and the model adapters alike (it lives
in the extract package, not in either, so that models never import the readers)."""
from __future__ import annotations

import json
from pathlib import Path

__all__ = ["read_json"]


def read_json(path: str | Path, *, kind: type = dict, expected: str = "a JSON object", what: str = "",
              error: type[Exception] = ValueError):
    """The JSON document in ``path``, which must be a ``kind`` (``dict``, ``list``).

    Every failure is one ``error`` line naming the file (prefixed with ``what``, e.g. ``"descriptions"``):
    a missing file, bytes that are not UTF-8, text that is not JSON (with the line of the first mistake), or a
    document of another shape (saying ``expected``). Callers pass their own error class (``ReaderError``...).
    """
    path = Path(path)
    head = f"{what}: {path}" if what else str(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{head}: file not found") from None
    except IsADirectoryError:
        raise error(f"{head}: a folder, not a JSON file") from None
    except UnicodeDecodeError as exc:
        raise error(f"{head}: not valid JSON (not UTF-8 text at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise error(f"{head}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(doc, kind):
        raise error(f"{head}: expected {expected}")
    return doc
