"""Reading earlier score outputs (one directory per submission) for the report.

A score output directory holds ``metrics.json`` (the contract layout), and usually
``pairs.parquet`` (one row per case and class) and ``pair_counts.npz`` (per-pair threshold counts).
Only ``metrics.json`` is required: tables need nothing else; figures and comparisons that need the
per-pair files are skipped, with the reason recorded, when those files are absent.

Every file here comes from outside (a results folder anyone may hand over), so each is read through
the bounded readers of :mod:`xbench.schemas.inputs` and checked for the shapes and types the report
relies on before any of it is used: a bad file is one problem line (exit 2), never a traceback, and
never more memory than a quarter of the budget (``--max-memory``) per file.
"""
from __future__ import annotations

import hashlib
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xbench.schemas.errors import InputError

__all__ = [
    "Result",
    "ReportInputError",
    "load_result",
    "load_results",
    "metric_groups",
    "metrics_problems",
    "read_metrics",
    "read_pairs",
    "read_pair_counts",
    "read_phrase_counts",
    "unique_labels",
]


#: submission methods of xbench-convert's boxes and points (schemas/convert_boxes.py): labelled on the leaderboard
MARK_METHODS = ("boxes", "points", "masks")
#: the largest metrics.json read (a VinDr-scale file with every class and interval is well under 1 MiB)
METRICS_MAX_BYTES = 64 * 2**20
#: the pairs.parquet columns the report uses (figures, overlays, case order); the others are not read
PAIR_COLUMNS = ("dataset", "case_id", "class", "has_region", "region_pixels", "hit", "dice_best")


class ReportInputError(InputError, ValueError):
    """A score output cannot be used; ``problems`` lists one message per problem."""


@dataclass
class Result:
    """One scored submission.

    name: display name (the model, made unique); path: the score output directory;
    metrics: the parsed metrics.json; pairs: pandas DataFrame or None; counts: {dataset:
    xbench.score.kernels.counts.DatasetCounts} from pair_counts.npz, or None; case_ids: dataset -> (N,) case ids
    (from pair_counts.npz, else from pairs.parquet in first-seen order), used to pair cases; scope_counts:
    {row scope: {dataset: counts}} of every other declared row scope that pair_counts.npz holds rows of
    (:mod:`xbench.score.sections.plugins`), as ``ScoreResult.scope_counts``.
    """

    name: str
    path: Path
    metrics: dict
    pairs: object = None
    counts: dict | None = None
    case_ids: dict = field(default_factory=dict)
    scope_counts: dict = field(default_factory=dict)

    @property
    def phrase_counts(self) -> dict:
        """{dataset: xbench.score.kernels.counts.PhraseCounts} from pair_counts.npz ({} when it holds no phrase rows)."""
        return self.scope_counts.get("phrase", {})

    @property
    def datasets(self) -> list[str]:
        return list(self.metrics.get("datasets", {}))

    @property
    def gt_sha256(self) -> str | None:
        return self.metrics.get("xbench", {}).get("gt_sha256")

    @property
    def submission_attrs(self) -> dict:
        sub = self.metrics.get("xbench", {}).get("submission", {})
        return sub if isinstance(sub, dict) else {}

    def inputs(self) -> dict:
        """Input paths recorded by the scorer (``xbench.inputs``), or {}."""
        x = self.metrics.get("xbench", {})
        found = dict(x.get("inputs", {}) or {})
        for key in ("submission_path", "gt_path", "images_path"):
            if key in x and key.split("_")[0] not in found:
                found[key.split("_")[0]] = x[key]
        return found

    def grid(self, dataset: str) -> tuple[int, int]:
        """The ground-truth grid (H, W) of a dataset; 224 x 224 when metrics.json does not say."""
        g = self.metrics["datasets"][dataset].get("grid")
        return (int(g[0]), int(g[1])) if g else (224, 224)

    def partial(self, dataset: str | None = None) -> dict | None:
        """{"cases": N, "of": M} when the result scored only N of the ground truth's M cases (of ``dataset``;
        without one: summed over the datasets that say so), else None. metrics.json may carry it per dataset
        (``datasets.<d>.partial``) or at the top level (``partial``: {dataset: {...}})."""
        return partial_of(self.metrics, dataset)


def _file_cap() -> int:
    """What one input file may cost in memory: a quarter of the budget (--max-memory), at most 1 GiB."""
    from xbench.schemas import budget

    return min(2**30, budget.limits().max_memory // 4)


# -- metrics.json ------------------------------------------------------------------------------------------------
def _is_num(v) -> bool:
    return v is None or (isinstance(v, numbers.Real) and not isinstance(v, bool))


def _values_problems(d, where: str, problems: list, *, skip=("ci95",)) -> None:
    """A {metric: number or null} dict: every registered metric key must hold a number or null (other keys, a
    newer scorer's notes, are left alone; nested dicts under ``skip`` are checked by the caller)."""
    if not isinstance(d, dict):
        problems.append(f"{where} must be an object of metric values")
        return
    keys = _metric_keys()
    for k, v in d.items():
        if k not in skip and k in keys and not _is_num(v):
            problems.append(f"{where}.{k} must be a number or null, not {type(v).__name__}")


def _ci_problems(ci, where: str, problems: list) -> None:
    if ci is None:
        return
    if not isinstance(ci, dict):
        problems.append(f"{where} must be an object of [low, high] intervals")
        return
    for k, v in ci.items():
        if v is not None and not (isinstance(v, list) and len(v) == 2 and all(_is_num(x) for x in v)):
            problems.append(f"{where}.{k} must be [low, high] (numbers) or null")


def _entries_problems(entries: dict, where: str, problems: list) -> None:
    """Per-class (or per-category) entries: each an object of metric values with an optional interval."""
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            problems.append(f"{where}.{name} must be an object")
            continue
        _values_problems(entry, f"{where}.{name}", problems)
        _ci_problems(entry.get("ci95"), f"{where}.{name}.ci95", problems)


def _metric_keys() -> frozenset:
    """The keys checked as metric values: every registered metric and every opt-in group's (a result scored
    with ``xbench-score --metrics GROUP`` holds them; the report then shows them, :func:`metric_groups`)."""
    from xbench.score.metrics import registry as R

    return frozenset(R.REGISTRY) | frozenset(R.opt_in_keys())


def metric_groups(results) -> tuple[str, ...]:
    """The opt-in metric groups (``xbench.score.metrics.registry.OPT_IN``) whose metrics some result's metrics.json
    holds (in its ``overall`` or a row scope's): registered while the report or a comparison runs, so the
    metrics a result was scored with are listed, and results without them keep every output unchanged."""
    from xbench.score.metrics import registry as R
    from xbench.score.sections.plugins import sections as all_sections

    keys: set[str] = set()
    for r in results:
        sections = [r.metrics] + [r.metrics.get(s.section) for s in all_sections(primary=False)]
        for sec in sections:
            overall = sec.get("overall") if isinstance(sec, dict) else None
            if isinstance(overall, dict):
                keys.update(k for k in overall if isinstance(k, str))
    return R.opt_in_groups_of(keys)


def _obj(parent: dict, key: str, where: str, problems: list, *, required: bool = False):
    v = parent.get(key)
    if v is None:
        if required:
            problems.append(f"{where}: no '{key}' object")
        return {}
    if not isinstance(v, dict):
        problems.append(f"{where}.{key} must be an object, not {type(v).__name__}")
        return {}
    return v


def partial_of(metrics: dict, dataset: str | None = None) -> dict | None:
    """See :meth:`Result.partial`."""
    per = {}
    for d, ds in (metrics.get("datasets") or {}).items():
        p = ds.get("partial") if isinstance(ds, dict) else None
        if p is None:
            p = (metrics.get("partial") or {}).get(d) if isinstance(metrics.get("partial"), dict) else None
        if isinstance(p, dict) and isinstance(p.get("cases"), int) and isinstance(p.get("of"), int):
            per[d] = {"cases": int(p["cases"]), "of": int(p["of"])}
    if dataset is not None:
        return per.get(dataset)
    if not per:
        return None
    return {"cases": sum(p["cases"] for p in per.values()), "of": sum(p["of"] for p in per.values())}


def _partial_problems(p, where: str, problems: list) -> None:
    if p is None:
        return
    if not (isinstance(p, dict) and all(isinstance(p.get(k), int) and not isinstance(p.get(k), bool) and p[k] >= 0
                                        for k in ("cases", "of")) and p["cases"] <= p["of"]):
        problems.append(f"{where} must be {{\"cases\": N, \"of\": M}} with 0 <= N <= M")


def metrics_problems(m, where: str) -> list[str]:
    """What makes a parsed metrics.json unusable for the report: one line per problem (empty when fine).

    Checks the parts the report reads (types and shapes, not the values' meaning): ``datasets`` (each with
    ``summary``/``ci95``/``classes``/``grid``), ``overall``, ``ci95``, ``xbench`` (schema, gt_sha256,
    submission, inputs, bootstrap), ``phrases`` and ``partial``, and the sections of the newer surfaces when present
    (``faithfulness``, ``text_probes``, ``human``, ``robustness``: :data:`SECTIONS`, the parts their tables read,
    bounded in size). Unknown keys are allowed (a newer scorer).
    """
    problems: list[str] = []
    if not isinstance(m, dict) or not isinstance(m.get("datasets"), dict):
        return [f"{where}: no 'datasets' object (not an XBench metrics.json)"]
    x = _obj(m, "xbench", where, problems)
    if x.get("schema") not in (None, 1):
        return [f"{where}: schema {x['schema']!r} is not supported (expected 1)"]
    for key in ("gt_sha256", "thresholds", "version"):
        if x.get(key) is not None and not isinstance(x[key], str):
            problems.append(f"{where}: xbench.{key} must be a string")
    sub = _obj(x, "submission", f"{where}: xbench", problems)
    for key in ("model", "method"):
        if sub.get(key) is not None and not isinstance(sub[key], str):
            problems.append(f"{where}: xbench.submission.{key} must be a string")
    inputs = _obj(x, "inputs", f"{where}: xbench", problems)
    for k, v in inputs.items():
        if v is not None and not isinstance(v, str):
            problems.append(f"{where}: xbench.inputs.{k} must be a path (a string)")
    for key in ("submission_path", "gt_path", "images_path"):
        if x.get(key) is not None and not isinstance(x[key], str):
            problems.append(f"{where}: xbench.{key} must be a path (a string)")
    boot = _obj(x, "bootstrap", f"{where}: xbench", problems)
    n = boot.get("n_resamples")
    if n is not None and not (isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 10**9):
        problems.append(f"{where}: xbench.bootstrap.n_resamples must be a count")
    _values_problems(_obj(m, "overall", where, problems), f"{where}: overall", problems)
    _ci_problems(m.get("ci95"), f"{where}: ci95", problems)
    _ci_problems(_obj(m, "overall", where, []).get("ci95"), f"{where}: overall.ci95", problems)
    top_partial = m.get("partial")
    if top_partial is not None and not isinstance(top_partial, dict):
        problems.append(f"{where}: partial must be an object {{dataset: {{\"cases\": N, \"of\": M}}}}")
        top_partial = {}
    for d, p in (top_partial or {}).items():
        _partial_problems(p, f"{where}: partial.{d}", problems)
    for d, ds in m["datasets"].items():
        w = f"{where}: datasets.{d}"
        if not isinstance(ds, dict):
            problems.append(f"{w} must be an object")
            continue
        summary = _obj(ds, "summary", w, problems)
        _values_problems(summary, f"{w}.summary", problems)
        _ci_problems(ds.get("ci95"), f"{w}.ci95", problems)
        _ci_problems(summary.get("ci95"), f"{w}.summary.ci95", problems)
        grid = ds.get("grid")
        if grid is not None and not (isinstance(grid, list) and len(grid) == 2
                                     and all(isinstance(g, int) and not isinstance(g, bool) and 1 <= g <= 65_536
                                             for g in grid)):
            problems.append(f"{w}.grid must be [H, W] (two positive integers)")
        _partial_problems(ds.get("partial"), f"{w}.partial", problems)
        _entries_problems(_obj(ds, "classes", w, problems), f"{w}.classes", problems)
    ph = _obj(m, "phrases", where, problems)
    if ph:
        _values_problems(_obj(ph, "overall", f"{where}: phrases", problems), f"{where}: phrases.overall", problems)
        for d, entry in _obj(ph, "datasets", f"{where}: phrases", problems).items():
            w = f"{where}: phrases.datasets.{d}"
            if not isinstance(entry, dict):
                problems.append(f"{w} must be an object")
                continue
            _values_problems(_obj(entry, "summary", w, problems), f"{w}.summary", problems)
            _ci_problems(entry.get("ci95"), f"{w}.ci95", problems)
            _entries_problems(_obj(entry, "categories", w, problems), f"{w}.categories", problems)
    _sections_problems(m, where, problems)
    return problems[:20]  # a file wrong everywhere: the first twenty say enough


# -- the sections of the newer surfaces (faithfulness, text probes, human ceiling, robustness) -------------------
#: at most this many datasets in one section, and class, category, SPEC or reader entries in all (the largest
#: real ones hold a few dozen of each): a file over it is refused before a table is built from it
SECTION_MAX_DATASETS = 1_000
SECTION_MAX_ENTRIES = 100_000


def _label(name) -> str:
    """A key from the file as it appears in a problem line: at most 60 characters."""
    text = str(name)
    return text if len(text) <= 60 else text[:57] + "..."


def _finite(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _count_ok(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 10**12


class _Section:
    """One section's checker: the problems found and the entries counted against SECTION_MAX_ENTRIES."""

    def __init__(self, where: str, name: str, problems: list) -> None:
        self.w, self.problems, self.entries = f"{where}: {name}", problems, 0

    def add(self, text: str) -> None:
        self.problems.append(text)

    def obj(self, v, where: str, *, required: bool = True, limit: int | None = None) -> dict | None:
        """``v`` when it is an object (of at most ``limit`` keys), else None after a problem (none when absent
        and not required)."""
        if v is None and not required:
            return None
        if not isinstance(v, dict):
            self.add(f"{where} must be an object, not {'nothing' if v is None else type(v).__name__}")
            return None
        if limit is not None and len(v) > limit:
            self.add(f"{where} holds {len(v):,} entries; at most {limit:,} are read")
            return None
        return v

    def entries_of(self, v, where: str, *, required: bool = False) -> dict:
        """A {name: entry} object whose entries count against the section's total."""
        d = self.obj(v, where, required=required, limit=SECTION_MAX_ENTRIES)
        if d is None:
            return {}
        self.entries += len(d)
        if self.entries > SECTION_MAX_ENTRIES:
            self.add(f"{self.w} holds more than {SECTION_MAX_ENTRIES:,} entries; not a section XBench writes")
            raise _TooMany
        return d

    def datasets(self, sec: dict) -> dict:
        return self.obj(sec.get("datasets"), f"{self.w}.datasets", limit=SECTION_MAX_DATASETS) or {}

    def value(self, v, where: str) -> None:
        if v is not None and not _finite(v):
            self.add(f"{where} must be a number or null, not {type(v).__name__}")

    def values(self, d: dict, keys, where: str) -> None:
        for k in keys:
            self.value(d.get(k), f"{where}.{k}")

    def interval(self, v, where: str) -> None:
        if v is not None and not (isinstance(v, list) and len(v) == 2 and all(_finite(x) for x in v)):
            self.add(f"{where} must be [low, high] (two numbers) or null")

    def intervals(self, ci, keys, where: str) -> None:
        ci = self.obj(ci, where, required=False)
        for k in keys if ci else ():
            self.interval(ci.get(k), f"{where}.{k}")

    def count(self, v, where: str, *, required: bool = True) -> None:
        if (v is not None or required) and not _count_ok(v):
            self.add(f"{where} must be a count (an integer >= 0)")


class _TooMany(Exception):
    pass


def _faithfulness_problems(sec, where: str, problems: list) -> None:
    """What faithfulness_html / table_rows read: curves (known names), steps, grid, and per dataset and class
    n_pairs, the curves' values (numbers or null) and their intervals."""
    from xbench.score.sections.faithfulness import KEYS as CURVES

    s = _Section(where, "faithfulness", problems)
    if s.obj(sec, s.w) is None:
        return
    curves = sec.get("curves")
    if not (isinstance(curves, list) and 0 < len(curves) <= len(CURVES)
            and all(isinstance(c, str) and c in CURVES for c in curves) and len(set(curves)) == len(curves)):
        s.add(f"{s.w}.curves must be a list of distinct curve names ({', '.join(CURVES)})")
        return
    for key, high in (("steps", 10**6), ("grid", 65_536)):
        v = sec.get(key)
        if not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= high):
            s.add(f"{s.w}.{key} must be an integer in [1, {high}]")
    keys = [k for c in curves for k, _ in CURVES[c]]
    for d, e in s.datasets(sec).items():
        w = f"{s.w}.datasets.{_label(d)}"
        if s.obj(e, w) is None:
            continue
        s.count(e.get("n_pairs"), f"{w}.n_pairs")
        summary = s.obj(e.get("summary"), f"{w}.summary")
        if summary is not None:
            s.values(summary, keys, f"{w}.summary")
        s.intervals(e.get("ci95"), keys, f"{w}.ci95")
        for c, v in s.entries_of(e.get("classes"), f"{w}.classes", required=True).items():
            wc = f"{w}.classes.{_label(c)}"
            if s.obj(v, wc) is None:
                continue
            s.count(v.get("n_pairs"), f"{wc}.n_pairs")
            s.values(v, keys, wc)
            s.intervals(v.get("ci95"), keys, f"{wc}.ci95")


def _text_probes_problems(sec, where: str, problems: list) -> None:
    """What probe_rows reads: per dataset n_probes, unsupported, kinds and categories; per kind n_probes, the
    columns' values and intervals."""
    from xbench.score.sections.probes import COLUMNS

    keys = [k for k, _ in COLUMNS]
    s = _Section(where, "text_probes", problems)
    if s.obj(sec, s.w) is None:
        return

    def kinds(v, w: str) -> None:
        for kind, e in s.entries_of(v, w).items():
            wk = f"{w}.{_label(kind)}"
            if s.obj(e, wk) is not None:
                s.count(e.get("n_probes"), f"{wk}.n_probes")
                s.values(e, keys, wk)
                s.intervals(e.get("ci95"), keys, f"{wk}.ci95")

    for d, e in s.datasets(sec).items():
        w = f"{s.w}.datasets.{_label(d)}"
        if s.obj(e, w) is None:
            continue
        if e.get("unsupported") not in (None, True, False):
            s.add(f"{w}.unsupported must be true or false")
        s.count(e.get("n_probes"), f"{w}.n_probes", required=bool(e.get("unsupported")))
        kinds(e.get("kinds"), f"{w}.kinds")
        for c, v in s.entries_of(e.get("categories"), f"{w}.categories").items():
            wc = f"{w}.categories.{_label(c)}"
            if s.obj(v, wc) is not None:
                s.count(v.get("n_probes"), f"{wc}.n_probes", required=False)
                kinds(v.get("kinds"), f"{wc}.kinds")


def _human_problems(sec, where: str, problems: list) -> None:
    """What human_rows and human_lines read: per dataset the readers, and per summary or class and key the
    model, human, percentages, interval and paired gap."""
    keys = _metric_keys()  # the section's keys are metric keys (not score.human's list: it imports this module)
    s = _Section(where, "human", problems)
    if s.obj(sec, s.w) is None:
        return

    def block(b: dict, w: str) -> None:
        for k in [k for k in b if k in keys]:
            v = s.obj(b.get(k), f"{w}.{k}", required=False)
            if v is None:
                continue
            s.values(v, ("model", "human", "percent_of_human", "percentage_decrease"), f"{w}.{k}")
            s.interval(v.get("ci95"), f"{w}.{k}.ci95")
            paired = s.obj(v.get("paired"), f"{w}.{k}.paired", required=False)
            if paired is not None:
                s.values(paired, ("model", "gap", "p_value"), f"{w}.{k}.paired")
                s.interval(paired.get("gap_ci95"), f"{w}.{k}.paired.gap_ci95")

    for d, e in s.datasets(sec).items():
        w = f"{s.w}.datasets.{_label(d)}"
        if s.obj(e, w) is None:
            continue
        readers = e.get("readers")
        if readers is not None and not (isinstance(readers, list) and len(readers) <= 10_000
                                        and all(isinstance(r, str) for r in readers)):
            s.add(f"{w}.readers must be a list of at most 10,000 reader names")
        summary = s.obj(e.get("summary"), f"{w}.summary", required=False)
        if summary is not None:
            block(summary, f"{w}.summary")
        for c, v in s.entries_of(e.get("classes"), f"{w}.classes").items():
            if s.obj(v, f"{w}.classes.{_label(c)}") is not None:
                block(v, f"{w}.classes.{_label(c)}")


def _robustness_problems(sec, where: str, problems: list) -> None:
    """What robustness_table reads: per dataset available (and the reason when not), and per SPEC n_copies and
    the summaries and intervals of its columns (metrics, stability, phrase rows)."""
    from xbench.score.sections.robustness import STABILITY_KEYS  # (not robustness_table: it imports the tables, a circle)

    metric_keys = sorted(_metric_keys())
    parts = {"metrics": metric_keys, "stability": STABILITY_KEYS, "phrases": metric_keys}
    s = _Section(where, "robustness", problems)
    if s.obj(sec, s.w) is None:
        return
    for d, e in s.datasets(sec).items():
        w = f"{s.w}.datasets.{_label(d)}"
        if s.obj(e, w) is None:
            continue
        available = e.get("available")
        if available not in (True, False):
            s.add(f"{w}.available must be true or false")
            continue
        if not available:
            if not isinstance(e.get("reason"), str):
                s.add(f"{w}.reason must say why (a string)")
            continue
        for spec, v in s.entries_of(e.get("specs"), f"{w}.specs", required=True).items():
            ws = f"{w}.specs.{_label(spec)}"
            if s.obj(v, ws) is None:
                continue
            s.count(v.get("n_copies"), f"{ws}.n_copies", required=False)
            for part, keys in parts.items():
                p = s.obj(v.get(part), f"{ws}.{part}", required=part != "phrases")
                if p is not None:
                    summary = s.obj(p.get("summary"), f"{ws}.{part}.summary")
                    if summary is not None:
                        s.values(summary, keys, f"{ws}.{part}.summary")
                    s.intervals(p.get("ci95"), keys, f"{ws}.{part}.ci95")


#: the sections checked by :func:`metrics_problems` when present, by their checkers
SECTIONS = {"faithfulness": _faithfulness_problems, "text_probes": _text_probes_problems, "human": _human_problems,
            "robustness": _robustness_problems}


def _sections_problems(m: dict, where: str, problems: list) -> None:
    for name, check in SECTIONS.items():
        if name in m:
            try:
                check(m[name], where, problems)
            except _TooMany:
                pass


def read_metrics(path: Path) -> dict:
    """A metrics.json, bounded (:func:`xbench.schemas.inputs.load_json`) and checked (:func:`metrics_problems`)."""
    from xbench.schemas.inputs import DEFAULT, load_json, with_limits

    try:
        metrics = load_json(path, limits=with_limits(DEFAULT, max_bytes=METRICS_MAX_BYTES))
    except InputError as err:
        raise ReportInputError(err.problems) from None
    problems = metrics_problems(metrics, str(path))
    if problems:
        raise ReportInputError(problems)
    return metrics


# -- pairs.parquet -----------------------------------------------------------------------------------------------
def _arrow_kind(t) -> str:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    return str(t)


#: what each column read may be (hit: a bool with nulls, or a number from an older writer)
_PAIR_KINDS = {"dataset": ("string",), "case_id": ("string",), "class": ("string",), "has_region": ("bool",),
               "region_pixels": ("int",), "hit": ("bool", "int", "float"), "dice_best": ("float",)}


def read_pairs(path: Path):
    """pairs.parquet's columns the report uses (:data:`PAIR_COLUMNS`) as a DataFrame, bounded.

    The footer is checked before any column is read: the file's size, the row and row-group counts and the
    declared uncompressed size of the columns read against a quarter of the memory budget, and each column's
    type. The file's pandas metadata (JSON written by the scorer) is not trusted: the frame is built from the
    Arrow types alone.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = str(path)
    cap = _file_cap()
    try:
        size = os.stat(path).st_size
        if size > cap:
            raise ReportInputError([f"{where}: is {size / 2**20:.0f} MiB; the limit for this file is "
                                    f"{cap / 2**20:.0f} MiB (a quarter of --max-memory)"])
        with open(path, "rb") as fh:
            pf = pq.ParquetFile(fh)
            meta = pf.metadata
            if meta.num_row_groups > 100_000 or meta.num_columns > 10_000:
                raise ReportInputError([f"{where}: declares {meta.num_row_groups} row groups and {meta.num_columns} "
                                        "columns; not a pairs.parquet the scorer writes"])
            schema = pf.schema_arrow
            problems = []
            for col, kinds in _PAIR_KINDS.items():
                i = schema.get_field_index(col)
                if i < 0:
                    problems.append(f"{where}: no column '{col}'")
                elif _arrow_kind(schema.field(i).type) not in kinds:
                    problems.append(f"{where}: column '{col}' is {schema.field(i).type}, expected "
                                    f"{' or '.join(kinds)}")
            if problems:
                raise ReportInputError(problems)
            wanted = {schema.get_field_index(c) for c in PAIR_COLUMNS}
            declared = 0
            for g in range(meta.num_row_groups):
                rg = meta.row_group(g)
                declared += sum(max(0, rg.column(j).total_uncompressed_size) for j in range(rg.num_columns)
                                if j in wanted)
            rows = meta.num_rows
            if declared > cap or rows * 64 > cap or rows < 0:
                raise ReportInputError([f"{where}: declares {rows:,} rows ({declared / 2**20:.0f} MiB of the columns "
                                        f"read); the limit is {cap / 2**20:.0f} MiB (a quarter of --max-memory)"])
            table = pf.read(columns=list(PAIR_COLUMNS))
    except ReportInputError:
        raise
    except (OSError, pa.ArrowException, ValueError, IndexError) as err:
        text = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise ReportInputError([f"{where}: not a readable pairs.parquet ({text})"]) from None
    import pandas as pd

    table = table.replace_schema_metadata(None)  # no pandas metadata: types from the Arrow schema only
    return table.to_pandas(types_mapper={pa.bool_(): pd.BooleanDtype()}.get)


# -- pair_counts.npz ---------------------------------------------------------------------------------------------
def read_pair_counts(path: Path) -> dict:
    """Read pair_counts.npz (the scorer's layout, see xbench.score.kernels.counts) into {dataset: DatasetCounts}."""
    return read_counts(path)[0]


def read_phrase_counts(path: Path) -> dict:
    """The phrase counts of pair_counts.npz ({dataset: PhraseCounts}; {} in a file without phrase rows)."""
    return read_counts(path)[1].get("phrase", {})


def read_counts(path: Path) -> tuple[dict, dict]:
    """(class counts, {row scope: {dataset: counts}}) of one pair_counts.npz, read once, bounded and checked
    (:func:`xbench.score.sections.pair_counts.read_counts_file`)."""
    from xbench.score.sections.pair_counts import read_counts_file

    try:
        return read_counts_file(path, max_bytes=_file_cap())
    except InputError as err:
        raise ReportInputError(err.problems) from None


# -- loading -----------------------------------------------------------------------------------------------------
def load_result(path: str | os.PathLike, *, name: str | None = None) -> Result:
    """Load one score output directory. Raises ReportInputError (one message per problem)."""
    path = Path(path)
    mpath = path / "metrics.json"
    if not path.is_dir():
        raise ReportInputError([f"{path}: not a directory (expected a score output with metrics.json)"])
    if not mpath.exists():
        raise ReportInputError([f"{path}: no metrics.json (is this a score output directory?)"])
    metrics = read_metrics(mpath)
    ppath = path / "pairs.parquet"
    pairs = read_pairs(ppath) if ppath.exists() else None
    counts, case_ids, scope_counts = None, {}, {}
    cpath = path / "pair_counts.npz"
    if cpath.exists():
        counts, scope_counts = read_counts(cpath)
        scope_counts = {k: v for k, v in scope_counts.items() if v}
        case_ids = {d: np.asarray(dc.case_id, dtype=str) for d, dc in counts.items()}
    if pairs is not None:
        for d, sub in pairs.groupby("dataset", sort=False, observed=True):
            case_ids.setdefault(str(d), np.asarray(sub["case_id"].drop_duplicates(), dtype=str))
    if name is None:
        attrs = metrics.get("xbench", {}).get("submission", {}) or {}
        name = str(attrs.get("model") or path.name)
        if attrs.get("method") in MARK_METHODS:  # converted boxes/points, not maps: the leaderboard says so
            name = f"{name} ({attrs['method']})"
        from xbench.score.outputs.leaderboard import UNTRAINED_SUFFIX, is_untrained

        if is_untrained(metrics):  # random weights: every table and board says so, not only the page's tag
            name += UNTRAINED_SUFFIX
    return Result(name=name, path=path, metrics=metrics, pairs=pairs, counts=counts, case_ids=case_ids,
                  scope_counts=scope_counts)


def _path_tag(path: Path) -> str:
    """A short, stable tag of a result folder: its resolved path hashed (the same folder, the same tag)."""
    return hashlib.sha256(str(Path(path).resolve()).encode("utf-8", "surrogatepass")).hexdigest()[:6]


def unique_labels(results: list[Result]) -> None:
    """Make the display names unique, in place, and stable (the same inputs give the same labels).

    A name shared by several results gets, in turn, the submission method, then the result folder's name,
    then a tag of the folder's resolved path; a label is never handed out twice, whatever the names look like
    (two folders named alike in different places, or a model literally named like another's label).
    """
    def dupes():
        seen: dict[str, int] = {}
        for r in results:
            seen[r.name] = seen.get(r.name, 0) + 1
        return {n for n, k in seen.items() if k > 1}

    steps = (lambda r: f"{r.name} ({r.submission_attrs.get('method')})" if r.submission_attrs.get("method") else r.name,
             lambda r: f"{r.name} [{r.path.name}]",
             lambda r: f"{r.name} [{_path_tag(r.path)}]")
    for step in steps:
        shared = dupes()
        if not shared:
            return
        for r in results:
            if r.name in shared:
                r.name = step(r)
    k = 1
    while dupes():  # the same folder given twice: number the later copies
        shared = dupes()
        seen: set[str] = set()
        for r in results:
            if r.name in shared:
                if r.name in seen:
                    k += 1
                    r.name = f"{r.name} #{k}"
                seen.add(r.name)


def ground_truth_problems(results: list[Result]) -> list[str]:
    """Why ``results`` cannot be ranked in one table: they were scored against different ground truths (their
    ``gt_sha256``, as ``xbench compare`` compares them; a result that recorded none is not counted). One line
    per ground truth, naming its results."""
    by_gt: dict[str, list[str]] = {}
    for r in results:
        if r.gt_sha256:
            by_gt.setdefault(str(r.gt_sha256), []).append(str(r.path))
    if len(by_gt) < 2:
        return []
    return [("the results were scored against different ground truths, and one report ranks the results of one "
             "ground truth; make one report per ground truth, or score every submission on one gt.zarr "
             "(xbench-score with the same --gt) and report those")] + \
        [f"gt_sha256 {sha[:12]}: {', '.join(paths)}" for sha, paths in sorted(by_gt.items())]


def load_results(paths) -> list[Result]:
    """Load several score outputs; display names are made unique (:func:`unique_labels`)."""
    results: list[Result] = []
    problems: list[str] = []
    for p in paths:
        try:
            results.append(load_result(p))
        except ReportInputError as err:
            problems.extend(err.problems)
    if problems:
        raise ReportInputError(problems)
    if not results:
        raise ReportInputError(["no score outputs given"])
    unique_labels(results)
    return results
