"""Parsing a suite: the YAML mapping checked key by key into a :class:`Suite`, every problem listed at once."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from xbench.extract.options import ExtractOptions, PrepareOptions
from xbench.schemas import options as _options
from xbench.schemas.errors import InputError
from xbench.schemas.options import CONFIG_SUFFIXES, Grid
from xbench.score.options import ReportOptions, ScoreOptions, section_problems

#: defaults of each option block; a suite may set any of these keys, and nothing else (the prepare, extract and
#: score and report keys, their defaults and their rules are the commands' own: xbench/extract/options.py,
#: score/options.py)
PREPARE_DEFAULTS = _options.suite_defaults(PrepareOptions)
EXTRACT_DEFAULTS = _options.suite_defaults(ExtractOptions)
SCORE_DEFAULTS = _options.suite_defaults(ScoreOptions)
REPORT_DEFAULTS = _options.suite_defaults(ReportOptions)
#: the score: section's keys that name a file or folder: fingerprinted by what they name (xbench.suite.plan)
SCORE_PATHS = _options.suite_paths(ScoreOptions)
TOP_KEYS = {"name", "title", "out", "seed", "prepare", "datasets", "models", "extract", "score", "report"}
DATASET_KEYS = {"root", "split", "options"} | set(PREPARE_DEFAULTS)
MODEL_KEYS = {"name", "model", "options", "methods", "extract", "submission"}
#: extraction options that do not change a single byte of the submission (so not in its fingerprint)
EXTRACT_NOT_IN_OUTPUT = ("workers", "nproc_per_node", "threads")
#: extraction options added later: in the fingerprint only when set, so a suite without them keeps its fingerprints
EXTRACT_FINGERPRINT_WHEN_SET = ("augment", "augment_seed")


class SuiteError(InputError):
    """Bad suite or bad input: every problem on its own line (the command exits with status 2)."""


# ------------------------------------------------------------------------------------------- the suite
@dataclass
class DatasetEntry:
    key: str
    root: str | None
    split: str | None
    options: dict
    prepare: dict  # PREPARE_DEFAULTS merged with the suite's prepare block and this dataset's keys


@dataclass
class ModelEntry:
    key: str          # unique: name, or name-method when a model lists several methods
    model: str        # registered name, config file (absolute) or module:attr
    options: dict     # config overrides (method included)
    extract: dict     # EXTRACT_DEFAULTS merged with the suite's extract block and this model's
    #: a precomputed submission (a converted submission.zarr, absolute): scored as it is, no extraction step
    submission: str | None = None


@dataclass
class Suite:
    name: str
    title: str
    out: Path
    seed: int
    datasets: list[DatasetEntry]
    models: list[ModelEntry]
    score: dict
    report: dict
    source: str = ""      # the suite file (or "<dict>")
    raw: dict = field(default_factory=dict)


def _expand(value: str, base: Path) -> str:
    """``~`` and ``$VARS`` expanded; a relative path is relative to the suite file's folder."""
    text = os.path.expanduser(os.path.expandvars(str(value)))
    p = Path(text)
    return str(p if p.is_absolute() else (base / p).resolve())


def _block(data: Mapping, name: str, defaults: Mapping, problems: list[str], where: str) -> dict:
    """``defaults`` updated with the mapping ``data[name]``; unknown keys are problems."""
    given = data.get(name) or {}
    if not isinstance(given, Mapping):
        problems.append(f"{where}{name}: must be a mapping of options, got {type(given).__name__}")
        return dict(defaults)
    problems += _options.unknown_keys(given, defaults, f"{where}{name}")
    return {**defaults, **{k: v for k, v in given.items() if k in defaults}}


def _check_int(value, what: str, problems: list[str], low: int = 1, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        problems.append(f"{what}: must be an integer >= {low}, got {value!r}")


def _parse_datasets(data: Mapping, prepare: dict, base: Path, problems: list[str]) -> list[DatasetEntry]:
    from xbench.extract.datasets import DATASETS

    given = data.get("datasets")
    if not isinstance(given, Mapping) or not given:
        problems.append("datasets: must be a non-empty mapping of dataset key -> {root, split, options, ...}")
        return []
    out = []
    for key, spec in given.items():
        where = f"datasets.{key}"
        spec = {} if spec is None else spec
        if key not in DATASETS:
            problems.append(f"{where}: unknown dataset; choose from {', '.join(DATASETS.names())}")
            continue
        if not isinstance(spec, Mapping):
            problems.append(f"{where}: must be a mapping (root, split, options, grid, ...), got {type(spec).__name__}")
            continue
        problems += _options.unknown_keys(spec, sorted(DATASET_KEYS), where)
        options = spec.get("options") or {}
        if not isinstance(options, Mapping):
            problems.append(f"{where}.options: must be a mapping of reader options")
            options = {}
        root = spec.get("root")
        if root is None and key != "phantom":
            problems.append(f"{where}.root: required (the folder holding the files as downloaded; see data_cards/{key}.md)")
        split = spec.get("split")
        if split is not None and not isinstance(split, str):
            problems.append(f"{where}.split: must be a string, got {split!r}")
        prep = {**prepare, **{k: spec[k] for k in PREPARE_DEFAULTS if k in spec}}
        out.append(DatasetEntry(str(key), _expand(root, base) if root is not None else None, split, dict(options), prep))
    for d in out:
        _check_prepare(d.prepare, f"datasets.{d.key}", problems)
    return out


def _grid(value) -> tuple[int, int] | None:
    return Grid().parse(value)


def _check_prepare(prep: dict, where: str, problems: list[str]) -> None:
    problems += _options.problems(PrepareOptions, prep, where)
    if prep.get("perturb"):  # the robustness track's SPECs, checked before anything runs
        from xbench.extract.datasets.perturb import perturb_problems

        problems += [f"{where}.perturb: {p}" for p in perturb_problems(prep["perturb"], prep.get("perturb_copies", 1))]


def _parse_models(data: Mapping, extract: dict, base: Path, problems: list[str]) -> list[ModelEntry]:
    given = data.get("models")
    if not isinstance(given, list) or not given:
        problems.append("models: must be a non-empty list (a registered name, or {name, model, options, methods, extract})")
        return []
    out: list[ModelEntry] = []
    for i, spec in enumerate(given):
        where = f"models[{i}]"
        if isinstance(spec, str):
            spec = {"model": spec}
        if isinstance(spec, Mapping) and "submission" in spec:
            entry = _precomputed(spec, base, where, problems)
            if entry is not None:
                out.append(entry)
            continue
        if not isinstance(spec, Mapping) or not isinstance(spec.get("model"), str):
            problems.append(f"{where}: needs `model:` (a registered name, a model config file or module:attr) "
                            "or `submission:` (a converted submission.zarr)")
            continue
        problems += _options.unknown_keys(spec, sorted(MODEL_KEYS), where)
        model, is_file = spec["model"], Path(spec["model"]).suffix in CONFIG_SUFFIXES
        if is_file:
            model = _expand(model, base)
        name = str(spec.get("name") or (Path(model).stem if is_file else model))
        options = spec.get("options") or {}
        if not isinstance(options, Mapping):
            problems.append(f"{where}.options: must be a mapping of model config keys")
            options = {}
        methods = spec.get("methods")
        if methods is None:
            methods = [None]
        elif isinstance(methods, str):
            methods = [methods]
        if not isinstance(methods, list) or not methods or not all(isinstance(m, str) or m is None for m in methods):
            problems.append(f"{where}.methods: must be a non-empty list of method names")
            continue
        ext = _block(spec, "extract", extract, problems, f"{where}.")
        for m in methods:
            key = name if len(methods) == 1 else f"{name}-{m}"
            opts = copy.deepcopy(dict(options))
            if m is not None:
                opts["method"] = m
            out.append(ModelEntry(key, model, opts, ext))
    seen: set[str] = set()
    for m in out:
        if m.key in seen:
            problems.append(f"models: two entries are named {m.key!r}; give one a different `name:`")
        seen.add(m.key)
        if "/" in m.key or m.key.startswith("."):
            problems.append(f"models: name {m.key!r} cannot be a folder name; give it a plain `name:`")
        if m.submission is None:
            problems += _options.problems(ExtractOptions, m.extract, f"models.{m.key}.extract")
    return out


def _precomputed(spec: Mapping, base: Path, where: str, problems: list[str]) -> ModelEntry | None:
    """A model entry ``{submission: PATH, name: NAME}``: a submission made outside the suite (a researcher's own
    maps through xbench-convert), scored and reported beside the models the suite extracts. Nothing about an
    extraction applies to it (`model`, `options`, `methods`, `extract` are refused beside it)."""
    path = spec.get("submission")
    if not isinstance(path, str) or not path.strip():
        problems.append(f"{where}.submission: must be the path of a submission store (submission.zarr or .zarr.zip)")
        return None
    clash = sorted(k for k in ("model", "options", "methods", "extract") if k in spec)
    if clash:
        problems.append(f"{where}: `submission:` is scored as it is; {', '.join(clash)} apply to a model the suite "
                        "extracts (give one or the other)")
        return None
    problems += _options.unknown_keys(spec, sorted(MODEL_KEYS), where)
    full = _expand(path, base)
    stem = Path(full).name
    for suffix in (".zarr.zip", ".zarr"):
        if stem.endswith(suffix) and len(stem) > len(suffix):
            stem = stem[:-len(suffix)]
            break
    return ModelEntry(str(spec.get("name") or stem), "", {}, {}, submission=full)


def parse_suite(data: Any, base_dir: str | os.PathLike = ".", *, source: str = "<dict>") -> Suite:
    """A :class:`Suite` from the parsed YAML mapping; raises :class:`SuiteError` listing every problem.

    Relative paths (dataset roots, model config files) are relative to ``base_dir`` (the suite
    file's folder); ``out`` is relative to the working directory.
    """
    if not isinstance(data, Mapping):
        raise SuiteError(f"{source}: a suite must be a mapping of keys, got {type(data).__name__}")
    base = Path(base_dir).resolve()
    problems: list[str] = []
    unknown = sorted(set(map(str, data)) - TOP_KEYS)
    if unknown:
        problems.append(f"unknown top-level key(s) {', '.join(unknown)}; known: {', '.join(sorted(TOP_KEYS))}")
    prepare = _block(data, "prepare", PREPARE_DEFAULTS, problems, "")
    extract = _block(data, "extract", EXTRACT_DEFAULTS, problems, "")
    score = _block(data, "score", SCORE_DEFAULTS, problems, "")
    report = _block(data, "report", REPORT_DEFAULTS, problems, "")
    datasets = _parse_datasets(data, prepare, base, problems)
    models = _parse_models(data, extract, base, problems)
    seed = data.get("seed", 0)
    seed_problem = _options.Int(0, _options.MAX_SEED).problem(seed)  # the scorer's and report's --seed rule
    if seed_problem:
        problems.append(f"seed: {seed_problem}, got {_options._shown(seed)}")
    problems += section_problems(score, "score", lambda path: _expand(path, base))
    problems += _options.problems(ReportOptions, report, "report")
    name = str(data.get("name") or Path(source).stem)
    out = data.get("out")
    if out is not None and not isinstance(out, str):
        problems.append(f"out: must be a folder path, got {out!r}")
    if problems:
        raise SuiteError([f"{source}: {p}" for p in problems])
    out_path = Path(os.path.expanduser(os.path.expandvars(out))) if out else Path(f"{name}-out")
    return Suite(name=name, title=str(data.get("title") or report["title"] or f"XBench: {name}"), out=out_path,
                 seed=int(seed), datasets=datasets, models=models, score=score, report=report, source=source,
                 raw=copy.deepcopy(dict(data)))


def read_suite_file(path: str | os.PathLike) -> dict:
    """The suite file parsed as YAML through the bounded reader (:func:`xbench.schemas.inputs.load_yaml`: a
    regular file of at most 4 MiB, strict UTF-8, no aliases, no key given twice, nesting and node count
    capped before a value is built); one line on failure."""
    from xbench.schemas import inputs

    try:
        return inputs.load_yaml(path, where=str(path), limits=inputs.CONFIG)
    except InputError as e:
        raise SuiteError(e.problems) from None


def load_suite(path: str | os.PathLike) -> Suite:
    p = Path(path)
    return parse_suite(read_suite_file(p), p.parent, source=str(p))
