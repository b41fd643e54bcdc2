"""The checks before any step (and all of ``--dry-run``): unset environment variables, dataset readers, model
configs and the local files they name."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from xbench.schemas.errors import InputError
from xbench.suite.fingerprint import config_paths, model_config
from xbench.suite.parse import DatasetEntry, ModelEntry, Suite, SuiteError

# ------------------------------------------------------------------------------ environment variables
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def unset_names(text: object) -> list[str]:
    """The ``$NAME`` / ``${NAME}`` references in ``text`` that the environment does not set (or sets empty).

    ``os.path.expandvars`` leaves such a reference in place, so a root written ``$XBENCH_DATA/rsna`` would
    otherwise become the folder ``<suite folder>/$XBENCH_DATA/rsna``, and the message would blame the folder."""
    if not isinstance(text, str) or "$" not in text:
        return []
    names = [a or b for a, b in _VAR.findall(text)]
    return list(dict.fromkeys(n for n in names if not os.environ.get(n)))


def _unset_in(value: Any, where: str, acc: dict[str, list[str]]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _unset_in(v, f"{where}.{k}", acc)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _unset_in(v, f"{where}[{i}]", acc)
    else:
        for name in unset_names(value):
            if where not in acc.setdefault(name, []):
                acc[name].append(where)


def unset_variables(suite: Suite, models: Sequence[ModelEntry] | None = None, *,
                    check_out: bool = True) -> dict[str, list[str]]:
    """{variable: [where it is used]} for every unset environment variable the suite's paths name: dataset
    roots, ``out`` (unless ``--out`` replaces it), model config files and model options (``models``: those
    to check; default all)."""
    acc: dict[str, list[str]] = {}
    if check_out:
        _unset_in(str(suite.out), "out", acc)
    for d in suite.datasets:
        _unset_in(d.root, f"datasets.{d.key}.root", acc)
    for m in suite.models if models is None else models:
        if m.submission is not None:
            _unset_in(m.submission, f"models.{m.key}.submission", acc)
            continue
        _unset_in(m.model, f"models.{m.key}.model", acc)
        for k, v in m.options.items():
            _unset_in(v, f"models.{m.key}.{k}", acc)
    return acc


def unset_lines(unset: Mapping[str, Sequence[str]], source: str) -> list[str]:
    """One problem line per unset variable, naming where it is used (the first few)."""
    lines = []
    for name, wheres in unset.items():
        shown = ", ".join(wheres[:3]) + (f" and {len(wheres) - 3} more" if len(wheres) > 3 else "")
        lines.append(f"${name} is not set (used by {shown}); set it, e.g. export {name}=/path/to/folder, "
                     f"or write the paths out in {source}")
    return lines



# -------------------------------------------------------------------------------------- dataset readers
class _Limited:
    """A dataset reader showing only its first ``limit`` records (for ``--limit``)."""

    def __init__(self, reader, limit: int) -> None:
        self._reader, self._limit = reader, limit
        self.problems: list = []

    def __getattr__(self, name):
        return getattr(self._reader, name)

    def records(self):
        recs = list(self._reader.records())[: self._limit]
        ids = {r.case_id for r in recs}
        # problems of cases beyond the limit are not this run's business
        self.problems = [p for p in self._reader.problems if p.case_id is None or p.case_id in ids]
        return recs

    def describe(self) -> dict:
        return {**self._reader.describe(), "limit": self._limit}


def make_reader(entry: DatasetEntry, limit: int | None = None):
    """The dataset's reader as the suite declares it (wrapped by ``--limit``)."""
    from xbench.extract.datasets import DATASETS, ReaderOptionError

    cls = DATASETS.get(entry.key)
    if entry.root is not None and not Path(entry.root).is_dir():
        raise SuiteError(f"datasets.{entry.key}.root: {entry.root}: no such folder (see data_cards/{entry.key}.md)")
    if entry.split is not None and entry.split not in cls.splits:
        raise SuiteError(f"datasets.{entry.key}.split: unknown split {entry.split!r}; choose one of {', '.join(cls.splits)}")
    try:
        reader = cls(entry.root, entry.split, **entry.options)
    except ReaderOptionError as e:  # an unknown option or a bad option value: said in the suite's terms
        raise SuiteError(f"datasets.{entry.key}.options: {e}") from None
    except InputError as e:
        raise SuiteError(f"datasets.{entry.key}: {e}") from None
    return _Limited(reader, limit) if limit else reader



# ---------------------------------------------------------------------------------------- dry run
def submission_problems(suite: Suite, unset: Mapping[str, Sequence[str]] | None = None,
                        keys: Sequence[str] | None = None) -> list[str]:
    """One line per precomputed submission (``submission:``) that is not a finished submission store (missing, of
    another kind, a zipped folder, model outputs not converted yet), as xbench-score would name it; a path naming
    an unset variable is left to that line. ``keys``: the models to check (default all; a run checks those whose
    score step it runs)."""
    from xbench.schemas._cli import store_kind_problem

    named = {w for ws in (unset or {}).values() for w in ws}
    out = []
    for m in suite.models:
        where = f"models.{m.key}.submission"
        if m.submission is None or where in named or (keys is not None and m.key not in keys):
            continue
        problem = store_kind_problem(m.submission, "submission", where)
        if problem:
            out.append(f"{where}: {problem}")
    return out


def check_inputs(suite: Suite, limit: int | None = None, *, skip: Sequence[str] = (),
                 unset: dict[str, list[str]] | None = None) -> tuple[list[str], dict[str, dict]]:
    """What a dry run checks without writing anything: every dataset's native files parse (annotations
    only, no pixels), every model config loads and the local files it names exist.

    ``skip``: dataset keys not to read (a root that is missing or names an unset variable: already a
    problem). ``unset``: the {variable: [where]} of unset environment variables, to which the variables
    met inside model config files are added; a path naming one is not looked for (the variable is the
    problem). Every model is checked whatever the datasets' state, so one dry run lists every problem.

    Returns (problems, one line each; {dataset: {split, cases, problems}} for the datasets that parsed).
    """
    from xbench.extract.models import resolve_factory

    unset = {} if unset is None else unset
    problems: list[str] = []
    found: dict[str, dict] = {}
    for d in suite.datasets:
        if d.key in skip:
            continue
        try:
            reader = make_reader(d, limit)
            n = len(reader.records())
        except SuiteError as e:
            problems += [str(p) for p in e.problems]
            continue
        except InputError as e:  # ReaderError, or a file refused by the bounded readers
            problems += [f"datasets.{d.key}: {' '.join(str(p).split())}" for p in e.problems or [e]]
            continue
        problems += [f"datasets.{d.key}: {p}" for p in reader.problems if getattr(p, "fatal", False)]
        if n == 0:
            problems.append(f"datasets.{d.key}: no case found under {d.root}")
        found[d.key] = {"split": reader.split, "cases": n, "problems": len(reader.problems)}
    problems += submission_problems(suite, unset)
    for m in suite.models:
        if m.submission is not None:
            continue  # checked above: a store, not a model config
        if any(f"models.{m.key}.model" in w for w in unset.values()):
            continue  # the config file's path names an unset variable
        try:
            config = model_config(m.model, m.options)
            resolve_factory(str(config["adapter"]))
        except InputError as e:  # ModelConfigError, UnknownNameError, a config refused by the bounded reader
            problems += [f"models.{m.key}: {line}" for line in ([str(p) for p in e.problems] or [str(e)])]
            continue
        for key, path in config_paths(config).items():
            names = unset_names(config.get(key))
            if names:
                for name in names:
                    where = f"models.{m.key}.{key}"
                    if where not in unset.setdefault(name, []):
                        unset[name].append(where)
                continue
            if not path.exists():
                problems.append(f"models.{m.key}.{key}: {path}: not found")
    return problems, found
