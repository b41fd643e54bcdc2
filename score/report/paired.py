"""The report's paired comparisons and missing intervals: thin glue over :mod:`xbench.score.resampling.bootstrap`.

All resampling and every statistic come from the scorer's bootstrap engine, so for the same number of
resamples and seed the report's intervals and paired differences use exactly the resamples behind the
scorer's metrics.json intervals. This module only

- checks that two score outputs can be paired (same ground truth, datasets and cases),
- keeps each result's replicates in a caller's cache (a model meets two neighbours in the leaderboard),
- turns the engine's table of differences into :class:`ComparisonRow` objects, and
- fills in intervals a metrics.json lacks (scored with ``--bootstrap 0``) with the scorer's own code.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from xbench.score.resampling import bootstrap as BS

from xbench.score.resampling import engine as RS
from xbench.score.sections.paired import paired_bootstrap
from xbench.score.sections.plugins import sections

from xbench.score.report._load import ReportInputError, Result

__all__ = ["ComparisonRow", "result_taus", "missing_intervals", "compare_results", "holm", "with_holm", "p_floor",
           "HOLM_FAMILY", "ALPHA", "family_size", "floor_note", "VERDICT"]

holm = RS.holm  # the one implementation (xbench.score.resampling.engine), kept importable from here
ALPHA = RS.ALPHA

#: what the Holm adjustment treats as one family, said wherever adjusted p-values are shown
HOLM_FAMILY = "all metric × pair tests shown together, each distinct test once"
#: the one definition of "significant" / "real" / ``*`` (:func:`xbench.score.resampling.engine.significant`), in words
VERDICT = f"significant (a gap is called real) when its Holm-adjusted p is below {ALPHA:g}"


@dataclass(frozen=True)
class ComparisonRow:
    """One metric's paired difference A - B: point estimate, 95 % interval, and bootstrap support.

    scope: "overall" or a dataset key; cls: class name or None for the summary.
    p_value: two-sided bootstrap p (2 * min share of replicates <= 0 and >= 0, capped at 1), never below
    1/(B+1) with B = n_valid: B resamples cannot resolve a smaller p, so a p of 0 is reported at that floor
    (``at_floor``; printed "< 1/(B+1)"). p_holm: Holm's step-down adjustment over the family the caller shows
    together (:func:`with_holm`), None until adjusted.
    significant: ``p_holm < ALPHA`` (:func:`xbench.score.resampling.engine.significant`, the one definition; False until
    adjusted). n_valid: replicates where both values are defined. test: the identity of the resampled
    statistic (:func:`xbench.score.resampling.intervals.test_identity`): rows with the same one are one test, counted once
    in the Holm family (None: a test of its own).
    """

    scope: str
    cls: str | None
    metric: str
    a: float | None
    b: float | None
    diff: float | None
    ci_lo: float | None
    ci_hi: float | None
    p_value: float | None
    n_valid: int
    p_holm: float | None = None
    test: str | None = None

    @property
    def significant(self) -> bool:
        return RS.significant(self.p_holm)

    @property
    def p_floor(self) -> float | None:
        """1/(B+1): the smallest p-value B = ``n_valid`` resamples can report."""
        return p_floor(self.n_valid)

    @property
    def at_floor(self) -> bool:
        return self.p_value is not None and self.n_valid > 0 and self.p_value <= p_floor(self.n_valid)


def p_floor(bootstrap: int) -> float | None:
    """1/(B+1), the resolution of a bootstrap p-value from B resamples (None without resamples)."""
    return 1.0 / (bootstrap + 1) if bootstrap > 0 else None


def _floored(p: float | None, n_valid: int) -> float | None:
    """The engine's p, raised to 1/(B+1): with B resamples on one side of 0 the engine says 0, which no finite
    number of resamples can show."""
    if p is None or n_valid <= 0:
        return None
    return max(float(p), 1.0 / (n_valid + 1))


def with_holm(rows: list[ComparisonRow]) -> list[ComparisonRow]:
    """``rows`` with ``p_holm`` set: one family of every distinct test among the rows that have a p-value
    (:data:`HOLM_FAMILY`; :func:`xbench.score.resampling.engine.holm_family`)."""
    from dataclasses import replace

    adjusted, _ = RS.holm_family([r.p_value for r in rows], [r.test for r in rows])
    return [replace(r, p_holm=a) for r, a in zip(rows, adjusted)]


def family_size(rows) -> int:
    """m: the distinct tests among ``rows`` (rows with a p-value; one test counted once)."""
    return RS.holm_family([r.p_value for r in rows], [r.test for r in rows])[1]


def floor_note(rows, option: str = "--bootstrap") -> str | None:
    """The sentence that no row can be significant because B is too small for the Holm adjustment over the
    family (:func:`xbench.score.resampling.engine.holm_floor_note`, B the most resamples of any row); None otherwise."""
    bs = [r.n_valid for r in rows if r.p_value is not None]
    return RS.holm_floor_note(family_size(rows), max(bs), ALPHA, option) if bs else None


def result_taus(result: Result) -> dict | None:
    """{dataset: {class: (dice index, iou index)}} when the result was scored with transferred thresholds.

    The bootstrap must then keep those thresholds instead of re-choosing them (as the scorer did); None
    when the thresholds were searched per class.
    """
    if result.metrics.get("xbench", {}).get("thresholds") != "transferred":
        return None
    from xbench.score.metrics.grounding import threshold_index
    from xbench.score.scoring import thresholds_from_metrics

    return {d: {c: (threshold_index(td), threshold_index(ti)) for c, (td, ti) in cls.items()
                if td is not None and ti is not None}
            for d, cls in thresholds_from_metrics(result.metrics).items()}


def missing_intervals(result: Result, *, bootstrap: int, seed: int) -> dict:
    """Intervals for a result whose metrics.json has none, computed by the scorer from pair_counts.npz.

    Returns a dict in the metrics.json layout ({"ci95": ..., "datasets": {d: {"ci95": ..., "classes": {c:
    {"ci95": ...}}}}}), the same numbers ``xbench-score --bootstrap B --seed seed`` would have written.
    """
    from xbench.score.scoring import metrics_from_counts, thresholds_from_metrics

    thresholds = thresholds_from_metrics(result.metrics) if result_taus(result) is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # undefined classes were reported when the result was scored
        return metrics_from_counts(result.counts, bootstrap=bootstrap, seed=seed, thresholds=thresholds)[0]


def shown_once(rows: list[ComparisonRow]) -> tuple[list[ComparisonRow], dict[str, str]]:
    """The rows a table shows, and {scope: the one scope whose summary it repeats}. With a single dataset the
    overall rows equal its summary rows (same metric, values and interval), and a section's mean over datasets
    ("phrases") equals its one dataset's ("phrases/<dataset>"): the repeated block is left out (per-class rows
    stay) and the table heads the kept one "Overall (= DATASET, the only dataset)". Files meant for programs (CSV,
    JSON) keep every row."""
    scopes = {r.scope for r in rows}
    sections = {x for x in scopes if "/" not in x and any(y.startswith(x + "/") for y in scopes)}
    groups = {"overall": {x for x in scopes if "/" not in x and x != "overall" and x not in sections}}
    groups.update({x: {y for y in scopes if y.startswith(x + "/")} for x in sections})

    def key(r):
        return r.metric, r.a, r.b, r.diff, r.ci_lo, r.ci_hi

    repeats: dict[str, str] = {}
    for total, children in groups.items():
        if len(children) != 1 or total not in scopes:
            continue
        (only,) = children
        whole = {key(r) for r in rows if r.scope == total and r.cls is None}
        summary = [r for r in rows if r.scope == only and r.cls is None]
        if summary and all(key(r) in whole for r in summary):
            repeats[total] = only
    kept = [r for r in rows if not (r.cls is None and r.scope in repeats.values())]
    return kept, repeats


def scope_title(scope: str, repeats: dict[str, str]) -> str:
    """A comparison table's scope heading: "Overall", a dataset's title, or a section's scope as it is; with
    " (= X, the only dataset)" where :func:`shown_once` left out the repeated block X."""
    from xbench.score.table import DATASET_TITLES

    def title(x: str) -> str:
        return "Overall" if x == "overall" else DATASET_TITLES.get(x, x)

    return title(scope) + (f" (= {title(repeats[scope])}, the only dataset)" if scope in repeats else "")


def _pairing_problems(a: Result, b: Result) -> list[str]:
    problems = []
    if a.gt_sha256 and b.gt_sha256 and a.gt_sha256 != b.gt_sha256:
        problems.append(f"{a.path} and {b.path} were scored against different ground truths "
                        f"(gt_sha256 {a.gt_sha256[:12]} vs {b.gt_sha256[:12]})")
    if sorted(a.datasets) != sorted(b.datasets):
        problems.append(f"datasets differ: {sorted(a.datasets)} vs {sorted(b.datasets)}")
    for r in (a, b):
        if r.counts is None or any(d not in r.counts for d in r.datasets):
            problems.append(f"{r.path}: needs pair_counts.npz with every dataset for a paired comparison")
    if not problems:
        sa, sb = _scope_counts(a), _scope_counts(b)
        problems = [f"{a.path} vs {b.path}: {p}" for p in BS.ground_truth_problems(a.counts, b.counts)
                    + [q for s in sections(primary=False)
                       for q in s.ground_truth_problems(sa.get(s.name, {}), sb.get(s.name, {}))]]
    if any("needs pair_counts.npz" not in p for p in problems):
        problems.append(SAME_GT_FIX)  # every other refusal is a difference of ground truth: say how to pair them
    return problems


#: the fix when two results do not share their ground truth (their cases, labels, regions or whole store)
SAME_GT_FIX = ("a paired comparison needs both submissions scored on one ground truth: run xbench-score on each "
               "with the same --gt gt.zarr (into two --out folders), then compare those two folders")


def _scope_counts(r: Result) -> dict:
    """{row scope: {dataset: counts}} of a result's other row scopes (those pair_counts.npz holds rows of)."""
    return r.scope_counts


def _opt(x) -> float | None:
    return None if x is None or np.isnan(x) else float(x)


def _name(x) -> str | None:
    """A dataset or class cell of the engine's table; missing (None, or NaN in a pandas str column) -> None."""
    return x if isinstance(x, str) else None


def compare_results(a: Result, b: Result, *, bootstrap: int = 1000, seed: int = 0,
                    per_class: bool = True, cache: dict | None = None) -> list[ComparisonRow]:
    """Paired bootstrap of A - B for every metric both metrics.json files report, overall and per dataset
    (and class): :func:`xbench.score.sections.paired.paired_bootstrap` on the two results' pair counts; then, for
    every other declared row scope whose counts pair_counts.npz holds (:mod:`xbench.score.sections.plugins`), its
    rows, e.g. the phrase metrics of the datasets whose phrase rows both scored (``scope`` "phrases" for the
    mean over datasets, "phrases/<dataset>" per dataset; ``cls`` None for the summary, "all phrases", or a
    category), resampled by image as for their metrics.json phrase intervals.

    Both results must come from the same ground truth (same gt_sha256 when recorded, same datasets, cases,
    labels and regions). Point values are the engine's identity resample (equal to the metrics.json
    values); the interval uses the same ``bootstrap`` resamples for both, those of
    :func:`xbench.score.resampling.bootstrap.bootstrap_replicates`. ``bootstrap=0`` gives point estimates only.
    ``cache`` (a dict kept by the caller) reuses a result's replicates across comparisons.
    p-values are floored at 1/(B+1) and not yet adjusted (``p_holm`` None): the caller knows which rows it
    shows together and adjusts those with :func:`with_holm`.
    Raises ReportInputError (one message per problem).
    """
    problems = _pairing_problems(a, b)
    if problems:
        raise ReportInputError(problems)
    datasets = sorted(a.datasets)
    table = paired_bootstrap({d: a.counts[d] for d in datasets}, {d: b.counts[d] for d in datasets},
                                bootstrap=bootstrap, seed=seed, taus_a=result_taus(a), taus_b=result_taus(b),
                                per_class=per_class, cache=cache, names=(str(a.path), str(b.path)),
                                scopes_a=_scope_counts(a), scopes_b=_scope_counts(b), with_tests=True)
    # only metrics both metrics.json files report: a result scored before a metric was registered does not
    # grow comparisons of it (its metrics.json has no value to compare with); per row scope, from its section
    known = {None: set(a.metrics.get("overall", {})) & set(b.metrics.get("overall", {}))}
    known.update({s.section: set(_section_overall(a, s.section)) & set(_section_overall(b, s.section))
                  for s in sections(primary=False)})
    return [ComparisonRow(_name(r["dataset"]) or "overall", _name(r["class"]), r["metric"],
                          _opt(r["a"]), _opt(r["b"]), _opt(r["diff"]), _opt(r["diff_lo"]), _opt(r["diff_hi"]),
                          _floored(_opt(r["p_value"]), int(r["n_valid"])), int(r["n_valid"]),
                          test=r["test"] if isinstance(r["test"], str) else None)
            for r in table.to_dict("records")
            if r["metric"] in known[_section_of(r["dataset"])]]


def _section_overall(r: Result, section: str) -> dict:
    """A row scope's ``overall`` metrics in metrics.json; {} when absent or not an object (a file from outside
    is checked only for the sections the report knows the layout of)."""
    sec = r.metrics.get(section)
    overall = sec.get("overall") if isinstance(sec, dict) else None
    if overall is None and isinstance(sec, dict) and isinstance(sec.get("keys"), list):  # a section that lists its
        return dict.fromkeys(str(k) for k in sec["keys"])  # metric keys instead (subgroups: the gaps' metrics)
    return overall if isinstance(overall, dict) else {}


def _section_of(dataset) -> str | None:
    """The metrics.json section of a comparison row: a row scope's rows name it as ``dataset`` ("phrases" or
    "phrases/<dataset>"; dataset keys contain no "/"); None for the class rows."""
    if isinstance(dataset, str):
        for s in sections(primary=False):
            if dataset == s.section or dataset.startswith(s.section + "/"):
                return s.section
    return None


# -- p-values as people read them -----------------------------------------------------------------
def floor_text(floor: float) -> str:
    """1/(B+1) rounded up to one significant digit (0.004975 -> "0.005"): a bound that stays true."""
    import math

    e = math.floor(math.log10(floor))
    digit = math.ceil(round(floor / 10**e, 9))
    if digit == 10:
        digit, e = 1, e + 1
    return f"{digit * 10.0**e:.{max(0, -e)}f}"


def format_p(p: float | None, floor: float | None = None) -> str:
    """A bootstrap p-value for people. At the floor 1/(B+1) of its B resamples (``floor``), "< 1/(B+1)"
    rounded up ("< 0.005" for B = 200): fewer resamples cannot show a smaller p. Otherwise "< 0.001" below
    that, else 3 decimals."""
    if p is None:
        return "–"
    if floor is not None and p <= floor * (1 + 1e-12):
        return f"< {floor_text(floor)}"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def units_note(rows) -> str:
    """The units of a comparison's rows: percentage points for shares, and the rows' numbers (CNR, the gaze
    measures: :func:`xbench.score.metrics.registry.shown_as`) named as they are."""
    from xbench.score.metrics.registry import shown_as

    numbers = []
    for r in rows:
        m = shown_as(r.metric)
        if m is not None and m.fmt == "number" and m.short not in numbers:
            numbers.append(m.short)
    return "percentage points" + (f"; {', '.join(numbers)} as numbers" if numbers else "")


def p_note(rows, option: str = "--bootstrap") -> str:
    """The sentences on the p-values of ``rows``: resamples, the floor, Holm's family, the verdict, and when B is
    too small for any row to pass the adjustment, that sentence (:func:`floor_note`, naming ``option``)."""
    bs = sorted({r.n_valid for r in rows if r.p_value is not None})
    if not bs:
        return "No p-values (no resamples)."
    b_text = str(bs[0]) if len(bs) == 1 else f"{bs[0]}–{bs[-1]}"
    floor = floor_text(p_floor(bs[-1])) if len(bs) == 1 else f"{floor_text(p_floor(bs[-1]))}–{floor_text(p_floor(bs[0]))}"
    m, n = family_size(rows), sum(r.p_value is not None for r in rows)
    tests = f"{m} tests" + (f" in {n} rows" if n != m else "")
    note = floor_note(rows, option)
    return (f"p: two-sided paired-bootstrap p-value from B = {b_text} resamples, never below 1/(B+1) "
            f"(shown as \"< {floor}\" at that floor); p (Holm): Holm-adjusted over {HOLM_FAMILY} "
            f"({tests}). A difference is {VERDICT}." + (f" {note}" if note else ""))
