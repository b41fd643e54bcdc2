"""``xbench run SUITE.yaml``: a whole benchmark from one file, prepare -> extract -> score -> report.

A suite names the datasets (key, root, split, reader options, grid), the models (a registered name or
a model config, with saliency methods), the extraction, scoring and report options, and the output
folder. ``xbench run`` turns it into a plan of steps::

    prepare/<dataset>   OUT/data/images.zarr/<dataset> + OUT/data/gt.zarr/<dataset>
    extract/<model>     OUT/submissions/<model>.zarr      (all the suite's datasets)
    score/<model>       OUT/scores/<model>/               (metrics.json, pairs.parquet, tables)
    report              OUT/report/                       (leaderboard, figures, index.html)

and runs each step through the same Python functions the single-step commands call.

Skipping and resuming. Each step has a *fingerprint*: the sha256 of its options and of the content
digests of its inputs (the outputs of the steps it reads; for a raw dataset root, the list of its files
with their sizes and modification times, since hashing hundreds of GB of images on every run is not
affordable). A step is skipped only when the run record ``OUT/xbench-run.json`` says it finished with
the same fingerprint *and* the content digest of its output today equals the one recorded then: a
store edited, truncated or replaced by hand runs again, whatever files are present. A step recorded
as started with the same fingerprint is resumed (prepare and extract resume block by block on their
own); any other step starts from an empty output. Content digests are sha256 over every file's bytes,
cached by (size, mtime) in ``OUT/.xbench-suite/digests.json`` as git's index does, so a second run
reads no unchanged file again. Augmentation and perturbation specs are fingerprinted in their canonical text
(:func:`canonical_specs`): two spellings of one spec are one fingerprint.

One run at a time per output folder: a run holds an exclusive ``flock`` on ``OUT/.xbench-suite/lock``
(dropped by the kernel however the process ends), and a second one is refused with one line.

Recorded in the output: ``OUT/suite.yaml`` (the suite as given), ``OUT/xbench-run.json`` (the resolved
plan with each step's options, fingerprint, output digest, status and time, and every software
version). ``--limit N`` keeps the first N cases of each dataset and writes under ``OUT/limit-N`` so that
a smoke test never replaces a full run's results.

Checks before any step (docs/suites.md). The suite and the model config files it names are read by the
bounded input layer (``xbench.schemas.inputs``: size, depth, node count, no YAML aliases, no key twice).
``--dry-run`` lists every problem at once: each unset environment variable a path names (once, with where
it is used; such a path is not looked for), each missing root, each dataset whose annotation files do not
parse, each model whose config does not load or whose weight files are missing; the models are checked
whatever the state of the roots. ``--max-memory``/``--timeout`` bound these checks; the steps then run
under their own bounds (:func:`run_suite`'s ``before_steps``).
"""
from __future__ import annotations

from xbench.schemas.errors import InputError

import copy
import fnmatch
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import click

from xbench.extract.options import ExtractOptions, PrepareOptions
from xbench.schemas import options as _options
from xbench.score.options import ReportOptions, ScoreOptions
from xbench.run_options import RunOptions
from xbench.schemas._cli import RESUME_HINT, UserError, apply_budget, budget_options, command
from xbench.schemas.options import CONFIG_SUFFIXES, Grid, click_options
from xbench.schemas.store import file_sha256

__all__ = ["Suite", "SuiteError", "Step", "load_suite", "parse_suite", "plan_steps", "run_suite", "run",
           "tree_digest", "DigestCache", "extract_argv"]

RUN_RECORD = "xbench-run.json"
WORK_DIR = ".xbench-suite"
STEP_KINDS = ("prepare", "extract", "score", "report")

#: defaults of each option block; a suite may set any of these keys, and nothing else (the prepare, extract and
#: score and report keys, their defaults and their rules are the commands' own: xbench/extract/options.py,
#: score/options.py)
PREPARE_DEFAULTS = _options.suite_defaults(PrepareOptions)
EXTRACT_DEFAULTS = _options.suite_defaults(ExtractOptions)
SCORE_DEFAULTS = _options.suite_defaults(ScoreOptions)
REPORT_DEFAULTS = _options.suite_defaults(ReportOptions)
TOP_KEYS = {"name", "title", "out", "seed", "prepare", "datasets", "models", "extract", "score", "report"}
DATASET_KEYS = {"root", "split", "options"} | set(PREPARE_DEFAULTS)
MODEL_KEYS = {"name", "model", "options", "methods", "extract"}
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
        if not isinstance(spec, Mapping) or not isinstance(spec.get("model"), str):
            problems.append(f"{where}: needs `model:` (a registered name, a model config file or module:attr)")
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
        problems += _options.problems(ExtractOptions, m.extract, f"models.{m.key}.extract")
    return out


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
    _check_int(seed, "seed", problems, low=0)
    problems += _options.problems(ScoreOptions, score, "score")
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


# ----------------------------------------------------------------------------------------- digests
class DigestCache:
    """sha256 of files, remembered by (path, size, mtime_ns): unchanged files are not read again."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.entries: dict[str, list] = {}
        if path is not None and path.is_file():
            try:
                self.entries = json.loads(path.read_text())
            except ValueError:
                self.entries = {}  # a damaged cache only costs re-reading

    def file(self, path: Path) -> str:
        st = path.stat()
        key = str(path.resolve())
        hit = self.entries.get(key)
        if hit and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
            return hit[2]
        digest = file_sha256(path)
        self.entries[key] = [st.st_size, st.st_mtime_ns, digest]
        return digest

    def save(self) -> None:
        if self.path is not None:
            _atomic_write(self.path, json.dumps(self.entries))


def _walk(root: Path):
    """Files under ``root`` in a fixed order (sorted relative paths), following no symlinked dirs."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for n in filenames:
            files.append(Path(dirpath) / n)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def tree_digest(path: str | os.PathLike, cache: DigestCache | None = None) -> str | None:
    """Content digest of a file or folder: sha256 over (relative path, sha256 of bytes) of every file.

    None when ``path`` does not exist. Empty folders do not count (zarr never needs them).
    """
    p = Path(path)
    if not p.exists():
        return None
    cache = cache or DigestCache()
    if p.is_file():
        return cache.file(p)
    h = hashlib.sha256()
    for f in _walk(p):
        h.update(f"{f.relative_to(p).as_posix()}\0{cache.file(f)}\n".encode())
    return h.hexdigest()


def listing_digest(root: str | os.PathLike) -> str | None:
    """Digest of a raw dataset folder from its file list with sizes and mtimes (no bytes read)."""
    p = Path(root)
    if not p.is_dir():
        return None
    h = hashlib.sha256()
    for f in _walk(p):
        st = f.stat()
        h.update(f"{f.relative_to(p).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str, separators=(",", ":")).encode()).hexdigest()


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -------------------------------------------------------------------------------------------- plan
@dataclass
class Step:
    kind: str                 # prepare | extract | score | report
    key: str                  # dataset or model key ("" for the report)
    deps: list[str]           # ids of the steps whose outputs this one reads
    options: dict             # what shapes the output (hashed into the fingerprint)
    outputs: list[str]        # paths under the run folder, relative

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.key}" if self.key else self.kind


def canonical_specs(kind: str, value):
    """A suite's ``augment`` (kind "augment") or ``perturb`` (kind "perturb") as the list of canonical spec texts,
    so two spellings of one spec (``rotate``, ``rotate:degrees=10``) are one fingerprint and one command line;
    the value itself when it does not parse (the suite's checks refuse it before any step runs)."""
    try:
        if kind == "augment":
            from xbench.schemas.augment import canonical, parse_specs

            return canonical(parse_specs(value))
        from xbench.schemas.perturbations import parse_templates

        return [t.text for t in parse_templates([value] if isinstance(value, str) else list(value))]
    except Exception:  # noqa: BLE001 - reported by the suite's own checks, with the key's path
        return value


def _extract_fingerprinted(m: "ModelEntry") -> dict:
    """The extraction options that shape a model's submission: specs canonical, a later option only when set (an
    empty ``augment`` is no augmentation), so a suite without them keeps its fingerprints."""
    out = {}
    for k, v in m.extract.items():
        if k in EXTRACT_NOT_IN_OUTPUT:
            continue
        if k == "augment" and v is not None:
            v = canonical_specs("augment", v) or None
        if k in EXTRACT_FINGERPRINT_WHEN_SET and v == EXTRACT_DEFAULTS[k]:
            continue
        out[k] = v
    return out


def plan_steps(suite: Suite, limit: int | None = None) -> list[Step]:
    """The steps of a suite in the order they run (each after the steps it depends on)."""
    steps: list[Step] = []
    ds_keys = [d.key for d in suite.datasets]
    for d in suite.datasets:
        opts = {"dataset": d.key, "split": d.split, "options": d.options, "limit": limit,
                **{k: (list(_grid(v)) if k == "grid" else canonical_specs("perturb", v) if k == "perturb" else v)
                   for k, v in d.prepare.items()
                   if k != "workers" and (d.prepare.get("perturb") or not k.startswith("perturb"))}}  # old fingerprints stay
        steps.append(Step("prepare", d.key, [], opts, [f"data/images.zarr/{d.key}", f"data/gt.zarr/{d.key}"]))
    for m in suite.models:
        overrides = m.options
        if isinstance(overrides, dict) and overrides.get("augment") is not None:  # a model config's augment: too
            overrides = {**overrides, "augment": canonical_specs("augment", overrides["augment"])}
        opts = {"model": m.model, "overrides": overrides, "datasets": ds_keys, **_extract_fingerprinted(m)}
        steps.append(Step("extract", m.key, [f"prepare/{k}" for k in ds_keys], opts, [f"submissions/{m.key}.zarr"]))
        steps.append(Step("score", m.key, [f"extract/{m.key}", *(f"prepare/{k}" for k in ds_keys)],
                          {"bootstrap": suite.score["bootstrap"], "seed": suite.seed, "datasets": ds_keys},
                          [f"scores/{m.key}"]))
    steps.append(Step("report", "", [f"score/{m.key}" for m in suite.models] + [f"extract/{m.key}" for m in suite.models],
                      {**suite.report, "title": suite.title, "seed": suite.seed, "models": [m.key for m in suite.models]},
                      ["report"]))
    return steps


def select_steps(steps: Sequence[Step], only: Sequence[str]) -> set[str]:
    """Ids matched by ``--only`` patterns: a step id, a kind (``extract``) or a glob (``score/clip*``)."""
    if not only:
        return {s.id for s in steps}
    chosen, problems = set(), []
    for pattern in only:
        hit = {s.id for s in steps if s.id == pattern or s.kind == pattern or fnmatch.fnmatchcase(s.id, pattern)}
        if not hit:
            problems.append(f"--only {pattern}: matches no step; steps: {', '.join(s.id for s in steps)}")
        chosen |= hit
    if problems:
        raise SuiteError(problems)
    return chosen


# ------------------------------------------------------------------------------------------ state
def _read_record(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        return {}


def _software() -> dict:
    from xbench.extract.runner import software_versions

    return software_versions()


@dataclass
class StepState:
    status: str          # skip | resume | run | wait (an input will change first)
    reason: str
    fingerprint: str | None = None


def _input_digests(step: Step, done: Mapping[str, dict]) -> dict | None:
    """What a step reads, as the content digests of the outputs of its dependencies; None while one
    of them is not finished."""
    out = {}
    for dep in step.deps:
        rec = done.get(dep)
        if rec is None:
            return None
        digests = rec["output_digest"]
        if dep.startswith("prepare/") and step.kind == "extract":
            digests = {"images": digests["images"]}  # extraction never reads the ground truth
        out[dep] = digests
    return out


def model_config(model: str, overrides: Mapping) -> dict:
    """The resolved model config as the extraction will see it. A config file is first read through the
    bounded reader (:func:`xbench.schemas.inputs.load_config`: size, depth, aliases, duplicate keys), so a
    hostile file is refused in one line before anything else parses it. Raises InputError subclasses."""
    from xbench.extract.models import load_config
    from xbench.schemas import inputs

    if Path(model).suffix in CONFIG_SUFFIXES and Path(model).is_file():
        data = inputs.load_config(model, where=str(model), limits=inputs.CONFIG)
        if not isinstance(data, Mapping):
            raise SuiteError(f"{model}: a model config must be a mapping of keys, got {type(data).__name__}")
    return load_config(model, **copy.deepcopy(dict(overrides)))


def model_digest(model: str, overrides: Mapping, cache: DigestCache) -> dict:
    """The model declaration as the extraction sees it: the resolved config (a config file's contents, not
    its name) and the content digest of every local file or folder it names (weights, text encoders)."""
    try:
        config = model_config(model, overrides)
    except InputError as e:  # reported by the dry run's checks, or by the extraction itself
        return {"error": str(e)}
    files = {key: tree_digest(path, cache) for key, path in config_paths(config).items() if path.exists()}
    if isinstance(config, Mapping) and config.get("augment") is not None:  # one spec, one fingerprint (plan_steps)
        config = {**config, "augment": canonical_specs("augment", config["augment"])}
    return {"config": config, "files": files}


def config_paths(config: Mapping) -> dict[str, Path]:
    """The local files and folders a model config names (values of the config keys that may name local files,
    ``xbench.extract.models.checks.PATH_KEYS``, that look like paths; a registered architecture, a pretrained
    tag or an ``hf-hub:`` id is not one). A dry run checks that they exist."""
    from xbench.extract.models.checks import PATH_KEYS

    out = {}
    for key in PATH_KEYS:
        value = config.get(key)
        if isinstance(value, str) and not value.startswith("hf-hub:") and ("/" in value or "\\" in value):
            out[key] = Path(os.path.expanduser(os.path.expandvars(value.removeprefix("local-dir:"))))
    return out


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


def _output_digest(step: Step, run_dir: Path, cache: DigestCache) -> dict | str | None:
    if step.kind == "prepare":
        images, gt = (tree_digest(run_dir / o, cache) for o in step.outputs)
        return None if images is None or gt is None else {"images": images, "gt": gt}
    return tree_digest(run_dir / step.outputs[0], cache)


def evaluate(steps: Sequence[Step], record: Mapping, run_dir: Path, cache: DigestCache,
             roots: Mapping[str, str | None]) -> dict[str, StepState]:
    """For each step: skip (done, inputs and output unchanged), resume, run, or wait for an input."""
    recorded = record.get("steps", {})
    done: dict[str, dict] = {}
    states: dict[str, StepState] = {}
    for s in steps:
        if s.kind == "prepare":
            inputs = {"root": roots.get(s.key)}
        else:
            inputs = _input_digests(s, done)
            if inputs is not None and s.kind == "extract":
                inputs["model"] = model_digest(s.options["model"], s.options["overrides"], cache)
        if inputs is None:
            pending = [d for d in s.deps if d not in done]
            more = f" and {len(pending) - 1} more" if len(pending) > 1 else ""
            states[s.id] = StepState("wait", f"after {pending[0]}{more}")
            continue
        fp = _hash({"kind": s.kind, "key": s.key, "options": s.options, "inputs": inputs})
        rec = recorded.get(s.id) or {}
        same = rec.get("fingerprint") == fp
        if same and rec.get("status") == "done":
            now = _output_digest(s, run_dir, cache)
            if now is not None and now == rec.get("output_digest"):
                states[s.id] = StepState("skip", "done; inputs, options and output unchanged", fp)
                done[s.id] = rec
                continue
            why = "output missing" if now is None else "output changed since it was written"
            states[s.id] = StepState("run", why, fp)
        elif same and rec.get("status") == "started":
            states[s.id] = StepState("resume", "interrupted; resuming", fp)
        elif rec:
            states[s.id] = StepState("run", "inputs or options changed", fp)
        else:
            states[s.id] = StepState("run", "first run", fp)
    return states


# -------------------------------------------------------------------------------------- execution
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
    splits = tuple(getattr(cls, "splits", ()))
    if entry.split is not None and splits and entry.split not in splits:
        raise SuiteError(f"datasets.{entry.key}.split: unknown split {entry.split!r}; choose one of {', '.join(splits)}")
    try:
        reader = cls(entry.root, entry.split, **entry.options)
    except ReaderOptionError as e:  # an unknown option or a bad option value: said in the suite's terms
        raise SuiteError(f"datasets.{entry.key}.options: {e}") from None
    except InputError as e:
        raise SuiteError(f"datasets.{entry.key}: {e}") from None
    return _Limited(reader, limit) if limit else reader


@dataclass
class Context:
    suite: Suite
    run_dir: Path
    limit: int | None
    progress: bool
    say: Callable[[str], None]


def _run_prepare(step: Step, ctx: Context, resume: bool) -> None:
    from xbench.extract.datasets.prepare import WORK_DIR as PREP_WORK, PrepareError, prepare_dataset

    entry = next(d for d in ctx.suite.datasets if d.key == step.key)
    data = ctx.run_dir / "data"
    if not resume:
        for p in [data / o.split("/", 1)[1] for o in step.outputs] + [data / PREP_WORK / step.key]:
            shutil.rmtree(p, ignore_errors=True)
    reader = make_reader(entry, ctx.limit)
    p = entry.prepare
    try:
        prepare_dataset(reader, data, **{**p, "grid": _grid(p["grid"])}, progress=ctx.progress)  # keys: PrepareOptions
    except PrepareError as e:
        raise SuiteError([f"prepare/{step.key}: {e}", *(f"  {x}" for x in e.problems)]) from None


def extract_argv(opts: Mapping[str, Any], images: Path, out: Path) -> list[str]:
    """``xbench-extract`` arguments for one extraction step (used to launch several ranks): the step's options
    written as the command's flags (xbench/extract/options.py), quiet."""
    values = {k: v for k, v in opts.items() if k not in ("images", "out", "nproc_per_node")}
    return _options.to_argv(ExtractOptions, {**values, "images": str(images), "out": str(out), "quiet": True})


def _n_ranks(extract: Mapping) -> int:
    nproc = extract["nproc_per_node"]
    if nproc != "auto":
        return int(nproc)
    device = str(extract.get("device") or "cuda")
    import torch

    return torch.cuda.device_count() if device == "cuda" and torch.cuda.is_available() else 1


def _run_extract(step: Step, ctx: Context, resume: bool) -> None:
    import torch

    from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError
    from xbench.schemas.registry import UnknownNameError
    from xbench.extract.runner import ExtractError, run_extraction
    from xbench.schemas import InvalidStoreError

    entry = next(m for m in ctx.suite.models if m.key == step.key)
    ext = entry.extract
    images, out = ctx.run_dir / "data" / "images.zarr", ctx.run_dir / step.outputs[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    if not resume:
        shutil.rmtree(out, ignore_errors=True)
    nproc = _n_ranks(ext)
    if nproc > 1 and "WORLD_SIZE" not in os.environ:
        from xbench.extract.distributed import relaunch

        ctx.say(f"  {nproc} ranks through torchrun")
        code = relaunch(nproc, extract_argv({**step.options, "workers": ext["workers"]}, images, out))
        if code:
            raise RuntimeError(f"extract/{step.key}: the ranks exited with status {code}")
        return
    if ext["threads"]:  # a cap: never more threads than torch would use anyway
        torch.set_num_threads(max(1, min(torch.get_num_threads(), int(ext["threads"]))))
    torch.manual_seed(ctx.suite.seed)
    # the section's keys are ExtractOptions fields (the runner ignores the launch ones: nproc_per_node, threads)
    opts = ExtractOptions(model=entry.model, images=images, out=out, overrides=copy.deepcopy(entry.options),
                          datasets=[d.key for d in ctx.suite.datasets], overwrite=not resume, quiet=True, **ext)
    try:
        run_extraction(opts)
    except (ExtractError, ModelConfigError, WeightsNotFoundError, UnknownNameError, InvalidStoreError) as e:
        lines = [str(p) for p in getattr(e, "problems", None) or []] or str(e).splitlines()
        raise SuiteError([f"extract/{step.key}: {line}" for line in lines]) from None


def _run_score(step: Step, ctx: Context, resume: bool) -> None:
    from xbench.schemas import InvalidStoreError
    from xbench.score.outputs import write_outputs
    from xbench.score.scoring import score_submission

    data = ctx.run_dir / "data"
    sub = ctx.run_dir / f"submissions/{step.key}.zarr"
    out = ctx.run_dir / step.outputs[0]
    shutil.rmtree(out, ignore_errors=True)  # scoring is one call: nothing to resume, no stale file may stay
    try:
        res = score_submission(sub, data / "gt.zarr", bootstrap=step.options["bootstrap"], seed=step.options["seed"],
                               datasets=step.options["datasets"])
    except InvalidStoreError as e:
        raise SuiteError([f"score/{step.key}: {p}" for p in e.problems]) from None
    res.metrics["xbench"].setdefault("inputs", {})["images"] = str((data / "images.zarr").resolve())
    write_outputs(res, out, label=step.key)


def _run_report(step: Step, ctx: Context, resume: bool) -> None:
    from xbench.score.report import build_report

    keys = step.options["models"]
    data = ctx.run_dir / "data"
    build_report(ctx.run_dir / "report", [ctx.run_dir / "scores" / k for k in keys], images=data / "images.zarr",
                 gt=data / "gt.zarr", submissions={k: ctx.run_dir / f"submissions/{k}.zarr" for k in keys},
                 n_boot=step.options["bootstrap"], seed=step.options["seed"], size_bins=step.options["size_bins"],
                 overlays=bool(step.options["overlays"]), progress=False, title=step.options["title"])


#: one executor per step kind
EXECUTORS: dict[str, Callable[[Step, Context, bool], None]] = {
    "prepare": _run_prepare, "extract": _run_extract, "score": _run_score, "report": _run_report,
}


# ---------------------------------------------------------------------------------------- dry run
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
    for m in suite.models:
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


# ------------------------------------------------------------------------------------------ driver
@dataclass
class RunResult:
    run_dir: Path
    steps: list[dict]
    leaderboard: list[dict]
    dry_run: bool
    problems: list[str] = field(default_factory=list)
    datasets: dict[str, dict] = field(default_factory=dict)  # dry run: what each dataset's reader listed

    @property
    def report(self) -> Path:
        return self.run_dir / "report" / "index.html"


def _roots(suite: Suite) -> dict[str, str | None]:
    return {d.key: listing_digest(d.root) if d.root else None for d in suite.datasets}


def leaderboard(run_dir: Path, keys: Sequence[str]) -> list[dict]:
    """Models ranked by overall pointing game (then Dice), from their metrics.json; undefined last."""
    rows = []
    for k in keys:
        try:
            metrics = json.loads((run_dir / "scores" / k / "metrics.json").read_text())
            overall = metrics["overall"]
            cis = metrics.get("ci95") or {}  # the scorer's overall 95 % intervals, beside "overall"
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        keys = ("pointing_game", "dice_best", "iou_best", "dice_fixed", "auroc")
        rows.append({"model": k, **{m: overall.get(m) for m in keys},
                     "ci95": {m: cis.get(m) for m in keys if isinstance(cis, dict) and cis.get(m)}})

    def rank(r):
        return tuple((v is None, -(v or 0.0)) for v in (r["pointing_game"], r["dice_best"]))

    return sorted(rows, key=rank)


def format_leaderboard(rows: Sequence[dict]) -> str:
    """The ranked board printed by ``xbench run`` and ``xbench demo``: the one terminal board
    (score/report/terminal.py's ``board_text``, as ``xbench-score`` and ``xbench report`` print it)."""
    from xbench.score.report.terminal import board_text

    return board_text([(r["model"], r, r.get("ci95") or {}) for r in rows])


def run_suite(suite: Suite, *, out: str | os.PathLike | None = None, limit: int | None = None, dry_run: bool = False,
              only: Sequence[str] = (), progress: bool = True, say: Callable[[str], None] | None = None,
              before_steps: Callable[[], None] | None = None) -> RunResult:
    """Run (or resume, or plan with ``dry_run``) a suite; returns the steps' states and the leaderboard.

    Raises :class:`SuiteError` for bad input (nothing of the failing step is recorded as done).
    ``before_steps``: called once the checks have passed, just before the first step runs (``xbench run``
    ends its ``--max-memory``/``--timeout`` watch there: the steps run under their own limits).
    """
    say = say or (lambda msg: None)
    if limit is not None and limit < 1:
        raise SuiteError("--limit must be at least 1")
    run_dir = Path(out) if out is not None else suite.out
    if limit:
        run_dir = run_dir / f"limit-{limit}"
    steps = plan_steps(suite, limit)
    chosen = select_steps(steps, only)
    record_path = run_dir / RUN_RECORD
    record = _read_record(record_path)
    cache = DigestCache(run_dir / WORK_DIR / "digests.json")
    roots = _roots(suite)
    # a dry run checks every model; a run, the models whose extraction it is asked to run
    checked = suite.models if dry_run else [m for m in suite.models if f"extract/{m.key}" in chosen]
    unset = unset_variables(suite, checked, check_out=out is None)
    named_unset = {w for ws in unset.values() for w in ws}
    absent = [d.key for d in suite.datasets if d.root is not None and roots[d.key] is None]
    missing = [f"datasets.{d.key}.root: {d.root}: no such folder (see data_cards/{d.key}.md)"
               for d in suite.datasets if d.key in absent and f"datasets.{d.key}.root" not in named_unset]
    if dry_run:
        states = evaluate(steps, record, run_dir, cache, roots)
        problems, found = check_inputs(suite, limit, skip=absent, unset=unset)
        problems = unset_lines(unset, suite.source) + missing + problems
        rows = [{"step": s.id, "status": states[s.id].status, "reason": states[s.id].reason,
                 "selected": s.id in chosen} for s in steps]
        return RunResult(run_dir, rows, leaderboard(run_dir, [m.key for m in suite.models]), True, problems, found)
    if unset or missing:
        raise SuiteError(unset_lines(unset, suite.source) + missing)
    if before_steps is not None:  # before the outputs' digests: hashing a large earlier run is not a check
        before_steps()
    states = evaluate(steps, record, run_dir, cache, roots)
    blocked = [f"--only: {s.id} needs {', '.join(d for d in s.deps if states.get(d) and states[d].status != 'skip' and d not in chosen)} "
               "first (run without --only, or select those steps too)"
               for s in steps if s.id in chosen and any(states[d].status != "skip" and d not in chosen for d in s.deps)]
    if blocked:
        raise SuiteError(blocked)

    run_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(run_dir)  # released on return, on error, and by the kernel on any death
    try:
        _write_suite_copy(suite, run_dir)
        record.setdefault("steps", {})
        record.update(suite=_suite_record(suite), limit=limit, software=_software(),
                      plan=[{"step": s.id, **asdict(s)} for s in steps])
        ctx = Context(suite, run_dir, limit, progress, say)
        rows = []
        for s in steps:
            if s.id not in chosen:
                rows.append({"step": s.id, "status": "not selected", "reason": "--only"})
                continue
            st = evaluate_one(s, steps, record, run_dir, cache, roots)
            if st.status == "skip":
                say(f"{s.id}: up to date")
                rows.append({"step": s.id, "status": "skip", "reason": st.reason})
                continue
            say(f"{s.id}: {'resuming' if st.status == 'resume' else 'running'} ({st.reason})")
            record["steps"][s.id] = {"status": "started", "fingerprint": st.fingerprint, "started_at": _now()}
            _atomic_write(record_path, json.dumps(record, indent=1, default=str))
            t0 = time.perf_counter()
            EXECUTORS[s.kind](s, ctx, st.status == "resume")
            seconds = time.perf_counter() - t0
            record["steps"][s.id] = {"status": "done", "fingerprint": st.fingerprint,
                                     "output_digest": _output_digest(s, run_dir, cache),
                                     "seconds": round(seconds, 3), "finished_at": _now()}
            cache.save()
            _atomic_write(record_path, json.dumps(record, indent=1, default=str))
            rows.append({"step": s.id, "status": "ran" if st.status == "run" else "resumed", "reason": st.reason,
                         "seconds": round(seconds, 3)})
        cache.save()
        _atomic_write(record_path, json.dumps(record, indent=1, default=str))
    finally:
        if lock is not None:
            lock.close()
    return RunResult(run_dir, rows, leaderboard(run_dir, [m.key for m in suite.models]), False)


def _lock(run_dir: Path):
    """An exclusive lock on the run folder, so that two runs never write the same outputs at once.

    flock, not a pid file: the kernel drops it when the process dies, however it dies. Returns the open
    lock file (close it to release), or None where flock does not exist (Windows)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    path = run_dir / WORK_DIR / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise SuiteError(f"{run_dir}: another `xbench run` is writing here; wait for it or choose another --out") from None
    return f


def evaluate_one(step: Step, steps: Sequence[Step], record: Mapping, run_dir: Path, cache: DigestCache,
                 roots: Mapping) -> StepState:
    """The state of one step now (its inputs may have just been written by earlier steps)."""
    upto = list(steps[: steps.index(step) + 1])
    return evaluate(upto, record, run_dir, cache, roots)[step.id]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _suite_record(suite: Suite) -> dict:
    return {"name": suite.name, "source": suite.source, "sha256": _hash(suite.raw), "raw": suite.raw,
            "resolved": {"datasets": [asdict(d) for d in suite.datasets], "models": [asdict(m) for m in suite.models],
                         "score": suite.score, "report": suite.report, "seed": suite.seed, "title": suite.title}}


def _write_suite_copy(suite: Suite, run_dir: Path) -> None:
    src = Path(suite.source)
    if src.is_file():
        _atomic_write(run_dir / "suite.yaml", src.read_text(encoding="utf-8"))
    else:
        import yaml

        _atomic_write(run_dir / "suite.yaml", yaml.safe_dump(suite.raw, sort_keys=False))


# ---------------------------------------------------------------------------------------- command
def _print_plan(result: RunResult, suite: Suite) -> None:
    click.echo(f"suite {suite.name}: {len(suite.datasets)} dataset(s), {len(suite.models)} model run(s) -> {result.run_dir}")
    for key, s in result.datasets.items():
        click.echo(f"  {key} ({s['split']}): {s['cases']} case(s) listed, {s['problems']} reader problem(s)")
    width = max(len(r["step"]) for r in result.steps)
    for r in result.steps:
        mark = "" if r["selected"] else "  (not selected)"
        click.echo(f"  {r['step']:<{width}}  {r['status']:<6}  {r['reason']}{mark}")


def _end_budget(watch) -> None:
    """The checks passed: stop the --max-memory/--timeout watch and give the steps the default limits."""
    from xbench.schemas import budget

    watch.stop()
    budget.set_limits(budget.Limits())


@command("run", on_interrupt=RESUME_HINT)
@click.argument("suite_file", metavar="SUITE.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click_options(RunOptions)
@budget_options
def run(suite_file, max_memory, timeout, **params):
    """Run a whole benchmark from one suite file: prepare -> extract -> score -> report.

    Steps already done with the same inputs and options (by content hash) are skipped; an
    interrupted run resumes. The suite, the resolved plan and the software versions are recorded in
    OUT/xbench-run.json; the ranked leaderboard is printed at the end.

    \b
    Examples:
      xbench run suites/demo.yaml
      xbench run suites/paper.yaml --dry-run
      xbench run suites/paper.yaml --limit 5
      xbench run suites/paper.yaml --only extract/carzero --only score/carzero

    --max-memory and --timeout bound the checks: reading the suite and the model configs it names, and
    (with --dry-run) every dataset's annotation files. Once the checks pass, the steps run under their
    own limits (an extraction loads models of several GiB and a full preparation takes hours).
    """
    o = _options.parse(RunOptions, params)
    out, limit, dry_run, only, quiet, as_json = o.out, o.limit, o.dry_run, o.only, o.quiet, o.as_json
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    watch = apply_budget("xbench run", max_memory, timeout)
    say = (lambda msg: None) if quiet or as_json else (lambda msg: click.echo(msg, err=True))
    try:
        suite = load_suite(suite_file)
        result = run_suite(suite, out=out, limit=limit, dry_run=dry_run, only=only, progress=not (quiet or as_json),
                           say=say, before_steps=lambda: _end_budget(watch))
    except SuiteError as e:  # invalid input: exit 2, one line per problem (the CLI layer prints them)
        raise UserError(e.problems) from None
    if as_json:
        click.echo(json.dumps({"run_dir": str(result.run_dir), "dry_run": dry_run, "steps": result.steps,
                               "leaderboard": result.leaderboard, "problems": result.problems,
                               "datasets": result.datasets}, default=str))
    elif dry_run:
        _print_plan(result, suite)
    if dry_run:
        if result.problems and as_json:  # the JSON above already lists them
            click.get_current_context().exit(2)
        if result.problems:
            raise UserError(result.problems)
        return
    if not as_json:
        if result.leaderboard:
            click.echo(format_leaderboard(result.leaderboard))
        if result.report.exists():
            click.echo(f"report: {result.report.resolve()}")
