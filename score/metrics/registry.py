"""The metric registry: every metric of ``metrics.json`` defined once.

A :class:`Metric` says what a metric is called (its ``metrics.json`` key, title and short title), how it
is shown (percent or number, higher or lower is better), which means it enters (dataset summary, overall
mean), and how it is computed. Scoring (point estimates), the bootstrap (replicates), the tables, the
report, the pairs table and paired comparisons all iterate over :data:`REGISTRY`, so a new metric is one
:func:`register` call (plus its test).

Three kinds:

``"grounding"`` (per positive pair of a class)
    ``values(view)`` maps the counts of a class's positive pairs (a :class:`PairView`) to per-pair values:
    ``(P,)`` (``curve=False``), or ``(P, T)`` over the 101 thresholds (``curve=True``; the function must
    work column by column, because the machinery may hand it a block of threshold columns). The point
    estimate is the mean over the pairs selected by ``pairs(view)`` (all pairs when ``pairs`` is None), and
    its bootstrap form is the weighted mean with the case-resampling weights. A curve metric needs a
    threshold rule: a fixed index (``threshold=50``), :class:`Best` (the first maximum of the class-mean
    curve, re-chosen in each resample, ties to the smallest tau, the chosen tau reported under
    ``Best.tau_key``), or :class:`ChosenBy` (the tau another metric of the class chose, in the same
    resample). Metrics that share the same ``values`` and ``pairs`` functions share their computation.
``"recognition"`` (per labelled pair of a class)
    ``values(s)`` maps :class:`RecognitionSums` (weighted counts and the rank statistics of a class, arrays
    (B,), B = 1 for the point estimate) to the metric, NaN where undefined.
``"dataset"`` (one value per dataset, not per class; e.g. Hamming accuracy)
    ``values(dc, w)`` gives (B,) values for case weights ``w`` (B, N) (``w`` = ones for the point estimate).

The built-in metrics are the contract's (``pointing_game`` ... ``hamming_accuracy``, schema minor 0) and
grounding by lesion size (schema minor 1, see :data:`LESION_SIZES`).

Scopes. A metric says which rows it is computed on (``scopes``, names of the row scopes declared in
:mod:`xbench.score.sections.plugins`): ``"class"`` (the positive pairs of a finding class: metrics.json "datasets")
or ``"phrase"`` (the phrase rows of a category: metrics.json "phrases", :mod:`xbench.score.sections.phrases`, whose
counts are a DatasetCounts with the categories as classes), or any other declared scope; a scope's ``kinds``
say which metric kinds its rows take (phrase rows: grounding only).

Per-pair statistics. A metric that reads a column of ``DatasetCounts.extra`` (declared in
:mod:`xbench.score.kernels.pair_stats`) names it in ``needs``; the counting pass fills only the statistics some
registered metric needs.
:func:`metrics` and every helper built on it return the class scope unless asked, so class-level code
never meets a phrase-only metric (CNR) and the phrase pass only the metrics the contract defines on
phrases. Pointing game, Dice and IoU are defined once and carry both scopes. On phrase rows a
metric's point estimate is the mean over the rows its ``pairs`` selects (per category; the "all
phrases" mean only for metrics without a searched threshold, :func:`pooled_keys`) and its bootstrap form
the weighted mean with image-resampling weights.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from xbench.schemas.registry import ENTRY_POINT_GROUPS, PluginError, UnknownNameError
from xbench.schemas.registry import Registry as SharedRegistry
from xbench.score.kernels import pair_stats as _ps
from xbench.score.metrics.grounding import FIXED_THRESHOLD_INDEX, dice_from_counts, iou_from_counts
from xbench.score.kernels.maps import THRESHOLDS
from xbench.score.metrics.params import POINTING_TOLERANCE, MetricParam, resolve
from xbench.score.metrics.recognition_sums import RecognitionSums, f1_from_counts  # defined beside what builds it

__all__ = [
    "Best",
    "ChosenBy",
    "Measure",
    "Metric",
    "PairView",
    "RecognitionSums",
    "REGISTRY",
    "LESION_SIZES",
    "PLUGINS",
    "load_plugins",
    "register",
    "registered",
    "metric",
    "metrics",
    "class_keys",
    "summary_keys",
    "overall_keys",
    "tau_keys",
    "tau_map",
    "pair_columns",
    "table_metrics",
    "lesion_size",
    "phrase_keys",
    "pooled_keys",
    "searched",
    "CNR_COLUMN",
    "OPT_IN",
    "opt_in",
    "opt_in_metrics",
    "opt_in_keys",
    "opt_in_groups_of",
]


@dataclass(frozen=True)
class Best:
    """Threshold rule: the first maximum of the class-mean curve (re-chosen in every resample), reported
    in ``metrics.json`` under ``tau_key`` and transferable from an earlier metrics.json."""

    tau_key: str


@dataclass(frozen=True)
class ChosenBy:
    """Threshold rule: the tau that grounding metric ``key`` (a :class:`Best` metric) chose for the class,
    in the same resample (or transferred)."""

    key: str


class PairView:
    """The counts of some positive pairs (``rows`` of a DatasetCounts), read lazily.

    ``b``, ``br`` (P, T') are the threshold columns ``cols`` (all 101 unless the machinery asks for a block),
    ``region_pixels``, ``hit`` (P,), ``extra[name]`` (P,) the optional per-pair columns of
    :attr:`DatasetCounts.extra`, ``grid`` (H, W) and ``thresholds`` (T',) the taus of ``cols``.
    """

    def __init__(self, dc, rows: np.ndarray, cols: slice = slice(None)):
        self._dc, self._rows, self._cols = dc, rows, cols
        self.grid = dc.grid
        self._cache: dict[str, Any] = {}

    @property
    def thresholds(self) -> np.ndarray:
        return THRESHOLDS[self._cols]

    def _get(self, name, fn):
        if name not in self._cache:
            self._cache[name] = fn()
        return self._cache[name]

    @property
    def n_pairs(self) -> int:
        return int(self._rows.size)

    @property
    def b(self) -> np.ndarray:
        return self._get("b", lambda: self._dc.b[self._rows, self._cols])

    @property
    def br(self) -> np.ndarray:
        return self._get("br", lambda: self._dc.br[self._rows, self._cols])

    @property
    def region_pixels(self) -> np.ndarray:
        return self._get("r", lambda: self._dc.region_pixels[self._rows])

    @property
    def hit(self) -> np.ndarray:
        return self._get("hit", lambda: self._dc.hit[self._rows])

    @property
    def extra(self) -> Mapping[str, np.ndarray]:
        return self._get("extra", lambda: {k: v[self._rows] for k, v in (self._dc.extra or {}).items()})

    def columns(self, cols: slice) -> "PairView":
        """The same pairs, threshold columns ``cols`` only."""
        return PairView(self._dc, self._rows, cols)


Kind = Literal["grounding", "recognition", "dataset"]
Scope = str  # a declared row scope's name (:mod:`xbench.score.sections.plugins`): "class", "phrase", ...


@dataclass(frozen=True)
class Metric:
    """One metric of ``metrics.json`` (see the module docstring for ``values`` of each ``kind``).

    key: metrics.json name; title: long name (report captions); short: column title; fmt: "percent" (a
    fraction printed x100) or "number"; summary: enters the dataset summary (mean over the classes where it
    is defined); overall: enters the overall mean over datasets; pair_column: a pairs-table column of the
    per-pair value at the metric's threshold; column: its header in xbench-score's tables (default
    ``short``); stratum/base: for a metric restricted to one lesion-size
    stratum, the stratum name and the unrestricted metric's key (tables group them); warn: warn when the
    class has no positive pair (strata stay quiet: most classes lack some size); minor: the metrics.json
    schema minor version that added it (in its scope's section); scopes: the row sets it is computed on,
    ``"class"`` and/or ``"phrase"`` or any other declared row scope (module docstring); needs: the per-pair
    statistics it reads (names declared in :mod:`xbench.score.kernels.pair_stats`, e.g. ``"energy_share"``): the
    counting pass allocates and fills a statistic only when a registered metric needs it.
    """

    key: str
    title: str
    short: str
    kind: Kind
    values: Callable[..., np.ndarray]
    higher_is_better: bool = True
    fmt: Literal["percent", "number"] = "percent"
    curve: bool = False
    threshold: int | Best | ChosenBy | None = None
    pairs: Callable[[PairView], np.ndarray] | None = None
    summary: bool = True
    overall: bool = True
    pair_column: bool = False
    column: str | None = None
    stratum: str | None = None
    base: str | None = None
    warn: bool = True
    minor: int = 0
    scopes: tuple[str, ...] = ("class",)
    needs: tuple[str, ...] = ()
    params: tuple[MetricParam, ...] = ()
    doc: str = field(default="", compare=False)

    def __post_init__(self):
        _check_scopes(self)
        if self.kind == "grounding" and self.curve and self.threshold is None:
            raise ValueError(f"{self.key}: a curve metric needs a threshold rule (an index, Best or ChosenBy).")
        if self.kind == "grounding" and not self.curve and self.threshold is not None:
            raise ValueError(f"{self.key}: a per-pair (P,) metric takes no threshold rule.")
        if not all(isinstance(p, MetricParam) for p in self.params):
            raise ValueError(f"{self.key}: params must be a tuple of MetricParam; got {self.params!r}.")
        if isinstance(self.needs, str) or not all(isinstance(n, str) for n in self.needs):
            raise ValueError(f"{self.key}: needs must be a tuple of per-pair statistic names; got {self.needs!r}.")
        # pair_stats.column / present read one statistic: a metric built on them must say it needs it, or the
        # column would never be counted and the metric would be null everywhere
        read = [n for fn in (self.values, self.pairs) for n in _ps.reads_of(fn) if n not in self.needs]
        if read:
            raise ValueError(f"{self.key}: reads the per-pair statistic(s) {', '.join(read)}; declare them in "
                             f"needs=(...).")


#: Every metric, in metrics.json order within its kind. Change it only through :func:`register` /
#: :func:`registered`.
REGISTRY: dict[str, Metric] = {}


#: {row scope: the metric kinds its rows take} and {key: Measure} of the sections' own values, installed by the
#: section plug-ins when they are loaded (:func:`xbench.score.sections.plugins.sections`): this layer sits below
#: them, so it is told rather than asking; None until then (the built-in metrics are checked when it comes)
_SCOPES: dict[str, tuple[str, ...]] | None = None
_MEASURES: dict[str, Measure] = {}


def _check_scopes(m: Metric) -> None:
    if not m.scopes:
        raise ValueError(f"{m.key}: scopes must be a non-empty subset of the row scopes; got {m.scopes!r}.")
    if _SCOPES is None:
        return
    if any(s not in _SCOPES for s in m.scopes):
        raise ValueError(f"{m.key}: scopes must be a non-empty subset of {tuple(_SCOPES)}; got {m.scopes!r}.")
    for s in m.scopes:  # e.g. phrase rows have no recognition labels
        if m.kind not in _SCOPES[s]:
            raise ValueError(f"{m.key}: only {' / '.join(_SCOPES[s])} metrics take the {s} scope.")


def set_scopes(scopes: Mapping[str, tuple[str, ...]], measures: Mapping[str, Measure]) -> None:
    """Install the row scopes ({name: metric kinds}) and the sections' measures; every registered metric is
    checked against the scopes (ValueError: one naming an undeclared scope, or a kind its scope does not take)."""
    global _SCOPES
    _SCOPES = dict(scopes)
    _MEASURES.clear()
    _MEASURES.update(measures)
    for m in REGISTRY.values():
        _check_scopes(m)


def register(m: Metric) -> Metric:
    """Add ``m`` (its key must be new; a :class:`ChosenBy` rule must name a registered Best metric)."""
    if m.key in REGISTRY:
        raise ValueError(f"metric {m.key!r} is already registered.")
    unknown = [n for n in m.needs if n not in _ps.PAIR_STATS]
    if unknown:
        raise ValueError(f"{m.key}: needs the per-pair statistic(s) {', '.join(unknown)}, not declared "
                         f"(pair_stats.declare); declared: {', '.join(_ps.PAIR_STATS)}.")
    if isinstance(m.threshold, ChosenBy):
        ref = REGISTRY.get(m.threshold.key)
        if ref is None or not isinstance(ref.threshold, Best):
            raise ValueError(f"{m.key}: ChosenBy({m.threshold.key!r}) must name a registered Best metric.")
        if not set(m.scopes) <= set(ref.scopes):  # the threshold must be chosen on the same rows
            raise ValueError(f"{m.key}: ChosenBy({m.threshold.key!r}) must name a metric of its scopes {m.scopes}.")
    REGISTRY[m.key] = m
    return m


@contextmanager
def registered(*ms: Metric) -> Iterator[tuple[Metric, ...]]:
    """Register ``ms`` for the duration of a ``with`` block (tests), restoring the registry afterwards."""
    saved = dict(REGISTRY)
    try:
        for m in ms:
            register(m)
        yield ms
    finally:
        REGISTRY.clear()
        REGISTRY.update(saved)


def _is_metrics(obj: Any) -> bool:
    """a Metric, or a tuple or list of Metric objects (registered in that order)"""
    return isinstance(obj, Metric) or (isinstance(obj, (tuple, list)) and bool(obj)
                                       and all(isinstance(m, Metric) for m in obj))


#: Third-party metrics: each entry point of the ``xbench.metrics`` group names a :class:`Metric` (or a tuple
#: of them), added after the built-in metrics when this module is imported (docs/explanation/architecture.md). Built-in
#: metrics are plain :func:`register` calls below; a plug-in module may call :func:`register` itself too.
PLUGINS: SharedRegistry[Any] = SharedRegistry("metric plug-in", check=_is_metrics,
                                              entry_point_group=ENTRY_POINT_GROUPS["metric"])


def load_plugins(*, reload: bool = False) -> list[str]:
    """Register the installed metric plug-ins not registered yet (keys already taken are a ValueError);
    returns the keys added. ``reload`` reads the entry points again (tests)."""
    PLUGINS.load_entry_points(reload=reload)
    added = []
    for name in PLUGINS.names():
        entry = PLUGINS.get(name)
        for m in (entry if isinstance(entry, (tuple, list)) else (entry,)):
            if REGISTRY.get(m.key) is not m:
                try:
                    added.append(register(m).key)
                except ValueError as exc:  # a taken key or a bad ChosenBy: the plug-in's declaration
                    raise PluginError(f"metric plug-in {name!r}: {exc}") from None
    return added


def metric(key: str) -> Metric:
    """The registered metric ``key``; :class:`UnknownNameError` (a KeyError) naming the close keys otherwise."""
    try:
        return REGISTRY[key]
    except KeyError:
        close = difflib.get_close_matches(str(key), list(REGISTRY), n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise UnknownNameError(f"unknown metric {key!r}.{hint} Available: {', '.join(REGISTRY)}") from None


@dataclass(frozen=True)
class Measure:
    """How a value that a section reports outside the registry prints (the gaze section's saliency measures:
    computed by the section, not from the pair counts): the column title, "percent" (a fraction printed x100)
    or "number", and its direction. A row scope declares its measures with its ``measures`` hook."""

    key: str
    short: str
    fmt: Literal["percent", "number"] = "percent"
    higher_is_better: bool = True


def shown_as(key: str) -> Metric | Measure | None:
    """What prints ``key``: the registered metric, else the measure a declared row scope reports under that name
    (:meth:`xbench.score.sections.kinds.Section.measures`, installed by :func:`set_scopes`), else None (an unknown key prints as a share)."""
    m = REGISTRY.get(key)
    return m if m is not None else _MEASURES.get(key)


def metric_params(given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """{parameter: value} of every registered metric's declared parameters (:attr:`Metric.params`): ``given``'s
    values where it has them, else the defaults the metrics declare. Raises ScoreInputError (one problem a line)
    for a value out of range or a name no metric declares."""
    declared = {p.name: p for m in metrics(kind=None, scope=None) for p in m.params}
    return resolve(declared.values(), given)


def metrics(kind: Kind | None = None, scope: Scope | None = "class") -> list[Metric]:
    """Registered metrics of ``kind`` (all kinds when None) computed on ``scope`` rows (the class scope
    unless asked; every scope when None), in registration order."""
    return [m for m in REGISTRY.values()
            if (kind is None or m.kind == kind) and (scope is None or scope in m.scopes)]


def searched(m: Metric) -> bool:
    """True for a metric at a threshold chosen on the data (:class:`Best` or :class:`ChosenBy`)."""
    return isinstance(m.threshold, (Best, ChosenBy))


def phrase_keys() -> tuple[str, ...]:
    """Keys of a phrase category, a dataset's phrase summary and the overall phrase means."""
    return tuple(m.key for m in metrics(scope="phrase"))


def pooled_keys() -> tuple[str, ...]:
    """Keys of the mean over every phrase row of a dataset ("all_phrases"): the phrase metrics without a
    searched threshold (a threshold is searched per category, as per class)."""
    return tuple(m.key for m in metrics(scope="phrase") if not searched(m))


def class_keys() -> tuple[str, ...]:
    """Keys of a class entry: grounding, then recognition (dataset-level metrics have none)."""
    return tuple(m.key for m in metrics("grounding") + metrics("recognition"))


def summary_keys() -> tuple[str, ...]:
    """Keys of a dataset summary: the class means, then the dataset-level metrics."""
    return tuple(m.key for m in metrics("grounding") + metrics("recognition") + metrics("dataset") if m.summary)


def overall_keys() -> tuple[str, ...]:
    return tuple(k for k in summary_keys() if REGISTRY[k].overall)


def tau_keys() -> tuple[str, ...]:
    """The metrics.json keys of the chosen thresholds (``tau_dice``, ``tau_iou``), in order."""
    return tuple(m.threshold.tau_key for m in metrics("grounding") if isinstance(m.threshold, Best))


def tau_map(taus) -> dict[str, int]:
    """A class's fixed (transferred) threshold indices as {tau key: index}; a tuple such as
    ``(dice index, iou index)`` follows :func:`tau_keys`."""
    return dict(taus) if isinstance(taus, Mapping) else dict(zip(tau_keys(), taus))


def table_metrics(group: Literal["paper", "other", "lesion_size", "recognition"]) -> list[Metric]:
    """The summary metrics a table shows: ``"paper"`` the contract's five grounding metrics, ``"other"`` every
    other grounding metric but the lesion-size strata, ``"lesion_size"`` the strata (by stratum, then metric),
    ``"recognition"`` the recognition and dataset-level metrics."""
    ground = [m for m in metrics("grounding") if m.summary]
    if group == "paper":
        return [m for m in ground if m.minor == 0 and m.stratum is None and m.key in CORE_KEYS["grounding"]]
    if group == "other":
        return [m for m in ground if m.stratum is None and m.key not in CORE_KEYS["grounding"]]
    if group == "lesion_size":
        return sorted((m for m in ground if m.stratum is not None),
                      key=lambda m: ([s for s, _, _ in LESION_SIZES].index(m.stratum), list(REGISTRY).index(m.key)))
    return [m for m in metrics("recognition") + metrics("dataset") if m.summary]


def pair_columns() -> tuple[str, ...]:
    return tuple(m.key for m in metrics("grounding") if m.pair_column)


# --------------------------------------------------------------------------------------- built-ins
def _hit(v: PairView) -> np.ndarray:
    return v.hit


def _dice(v: PairView) -> np.ndarray:
    return dice_from_counts(v.b, v.br, v.region_pixels)


def _iou(v: PairView) -> np.ndarray:
    return iou_from_counts(v.b, v.br, v.region_pixels)


def _auroc(s: RecognitionSums) -> np.ndarray:
    return s.auroc


def _auprc(s: RecognitionSums) -> np.ndarray:
    return s.auprc


def _f1(s: RecognitionSums) -> np.ndarray:
    return np.where(s.total > 0, f1_from_counts(s.tp, s.fp, s.fn), np.nan)


def _accuracy(s: RecognitionSums) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s.total > 0, s.correct / s.total, np.nan)


def _hamming(dc, w: np.ndarray, cache: dict | None = None) -> np.ndarray:
    """Hamming accuracy per resample: weighted correct / weighted labelled pairs over supported classes."""
    cache = cache if cache is not None else {}
    if "hamming" not in cache:
        cols = [c for c in range(len(dc.classes)) if dc.supported[c]]
        lab = dc.labels[:, cols]
        known = (lab != -1).sum(axis=1).astype(np.float64)
        correct = (((dc.prob[:, cols] >= 0.5) == (lab == 1)) & (lab != -1)).sum(axis=1).astype(np.float64)
        cache["hamming"] = (known, correct)
    known, correct = cache["hamming"]
    tot = w @ known
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, (w @ correct) / tot, np.nan)


BEST_DICE, BEST_IOU = Best("tau_dice"), Best("tau_iou")
_BOTH = ("class", "phrase")  # the contract defines these on finding classes and on phrase rows alike

for _m in (
    Metric("pointing_game", "Pointing game", "Point", "grounding", _hit, scopes=_BOTH,
           doc="share of positive pairs whose peak (the centroid of the maximum's cells) lies in the region"),
    Metric("dice_fixed", "Dice at tau = 0.5", "Dice@0.5", "grounding", _dice, curve=True,
           threshold=FIXED_THRESHOLD_INDEX, pair_column=True, scopes=_BOTH),
    Metric("iou_fixed", "IoU at tau = 0.5", "IoU@0.5", "grounding", _iou, curve=True,
           threshold=FIXED_THRESHOLD_INDEX, pair_column=True, scopes=_BOTH),
    Metric("dice_best", "Dice at the best tau", "Dice", "grounding", _dice, curve=True, threshold=BEST_DICE,
           pair_column=True, scopes=_BOTH),
    Metric("iou_best", "IoU at the best tau", "IoU", "grounding", _iou, curve=True, threshold=BEST_IOU,
           pair_column=True, scopes=_BOTH),
    Metric("auroc", "AUROC", "AUROC", "recognition", _auroc),
    Metric("auprc", "AUPRC (average precision)", "AUPRC", "recognition", _auprc),
    Metric("f1", "F1 of the positive class", "F1", "recognition", _f1),
    Metric("accuracy", "Accuracy", "Acc", "recognition", _accuracy, column="Accuracy"),
    Metric("hamming_accuracy", "Hamming accuracy", "Hamming", "dataset", _hamming),
):
    register(_m)

#: The contract's metrics of schema minor 0 by kind, read off the batch registered just above (the paper's five
#: grounding metrics, the four recognition ones): the one list the tables' "paper" group, the bootstrap's
#: keys and the human ceiling use. Metrics registered later (minor 1 and up, plug-ins, a test's) are not in it.
CORE_KEYS: dict[str, tuple[str, ...]] = {kind: tuple(m.key for m in metrics(kind) if m.minor == 0)
                                         for kind in ("grounding", "recognition")}


# ---------------------------------------------------------------------------------- lesion size
#: Lesion-size strata by the region's share of the grid, |R| / (H W): (name, lower bound, upper bound),
#: lower bound inclusive: small < 1 %, medium 1-5 %, large >= 5 % of the image (the report's region-size
#: figure uses the same edges). At 224 x 224 a small region is under 502 cells (a box of about 22 x 22 cells,
#: a nodule, a fracture, a small pneumothorax), a large one at least 2,509 cells (about 50 x 50: an effusion,
#: a lobar consolidation, the heart). COCO's cut-offs (32^2 and 96^2 pixels of a ~640 x 480 image) are
#: 0.33 % and 3 %; chest X-ray findings run larger, and at a 14 x 14 grid one cell is already 0.5 %.
LESION_SIZES: tuple[tuple[str, float, float], ...] = (("small", 0.0, 0.01), ("medium", 0.01, 0.05),
                                                      ("large", 0.05, np.inf))


def lesion_size(region_pixels, grid: tuple[int, int]) -> np.ndarray:
    """Stratum index (0 small, 1 medium, 2 large) of each region: its area |R| / (H W) against
    :data:`LESION_SIZES`. Compared in integers (|R| * 100 against H W * percent) so no float rounding
    decides a region exactly on a cut-off."""
    r = np.asarray(region_pixels, dtype=np.int64) * 100
    cells = int(grid[0]) * int(grid[1])
    out = np.zeros(r.shape, np.int8)
    for i, (_, lo, _) in enumerate(LESION_SIZES[1:], start=1):
        out[r >= round(lo * 100) * cells] = i
    return out


def _in_stratum(i: int) -> Callable[[PairView], np.ndarray]:
    def pairs(v: PairView) -> np.ndarray:
        return lesion_size(v.region_pixels, v.grid) == i

    pairs.__name__ = f"in_{LESION_SIZES[i][0]}"
    return pairs


for _i, (_size, _lo, _hi) in enumerate(LESION_SIZES):
    _sel = _in_stratum(_i)
    _span = f"{100 * _lo:g}-{100 * _hi:g} % of the image" if np.isfinite(_hi) else f">= {100 * _lo:g} % of the image"
    for _base, _title, _rule in (("pointing_game", "Pointing game", None), ("dice_best", "Dice", ChosenBy("dice_best")),
                                 ("iou_best", "IoU", ChosenBy("iou_best"))):
        b = REGISTRY[_base]
        register(Metric(f"{_base}_{_size}", f"{_title}, {_size} lesions ({_span})", f"{b.short} {_size}",
                        "grounding", b.values, curve=b.curve, threshold=_rule, pairs=_sel, stratum=_size,
                        base=_base, warn=False, minor=1))
del _m, _i, _size, _lo, _hi, _sel, _span, _base, _title, _rule, b


# ------------------------------------------------------------------- localisation beyond the paper
# a per-pair statistic's column (declared in pair_stats.py) and the pairs that have it
_extra_present = _ps.present
_extra = _ps.column


def _rank_accuracy(v: PairView) -> np.ndarray:
    return _loc.rank_accuracy_from_counts(v.b, v.br, v.region_pixels)


def _map_auroc(v: PairView) -> np.ndarray:
    # undefined (whole-grid) pairs are left out by _not_whole_grid; 0 keeps them out of weighted sums too
    # (NaN x weight 0 would be NaN)
    return np.nan_to_num(_loc.map_auroc_from_counts(v.b, v.br, v.region_pixels), nan=0.0)


def _not_whole_grid(v: PairView) -> np.ndarray:
    # the map AUROC needs a cell outside the region
    return v.region_pixels < int(v.grid[0]) * int(v.grid[1])


from xbench.score.metrics import localisation as _loc  # noqa: E402  (pure functions; no import cycle)

for _m in (
    Metric("energy_pointing_game", "Energy-based pointing game", "Energy", "grounding",
           _extra(_loc.ENERGY_COLUMN, np.float64), pairs=_extra_present(_loc.ENERGY_COLUMN), minor=1, pair_column=True,
           needs=(_loc.ENERGY_COLUMN,),
           doc="share of the normalised map's mass inside the region"),
    Metric("relevance_rank_accuracy", "Relevance rank accuracy", "RRA", "grounding", _rank_accuracy, minor=1, pair_column=True,
           doc="of the |R| highest-ranked cells (quantised map, ties shared), the share inside the region"),
    Metric("map_auroc", "Map-vs-region pixel AUROC", "pxAUROC", "grounding", _map_auroc, pairs=_not_whole_grid,
           minor=1, pair_column=True, doc="Mann-Whitney AUROC of region cells against the others on the quantised map"),
    Metric("tolerant_pointing_game", "Tolerant pointing game", "Point±", "grounding",
           _extra(_loc.TOLERANT_COLUMN, bool), pairs=_extra_present(_loc.TOLERANT_COLUMN), minor=1, pair_column=True,
           needs=(_loc.TOLERANT_COLUMN,), params=(POINTING_TOLERANCE,),
           doc="share of positive pairs whose peak lies within the tolerance of the region"),
):
    register(_m)
del _m


# ------------------------------------------------------------------------------------- phrase rows
#: The per-row column of the phrase counts (``DatasetCounts.extra``) holding the signed CNR of each
#: phrase row, NaN where CNR is undefined (:func:`xbench.score.kernels.cnr.cnr_of_pairs`).
CNR_COLUMN = _ps.CNR_COLUMN


def _cnr_defined(v: PairView) -> np.ndarray:
    # undefined CNR (region covers the grid; zero variances with different means) is left out of means
    col = v.extra.get(CNR_COLUMN)
    return np.zeros(v.n_pairs, bool) if col is None else ~np.isnan(col)


def _cnr_values(signed: bool) -> Callable[[PairView], np.ndarray]:
    def values(v: PairView) -> np.ndarray:
        col = v.extra.get(CNR_COLUMN)
        if col is None:
            return np.zeros(v.n_pairs)
        # 0 where undefined keeps those rows out of weighted sums too (NaN x weight 0 would be NaN)
        return np.nan_to_num(np.asarray(col, np.float64) if signed else np.abs(col), nan=0.0)

    values.__name__ = "cnr_signed" if signed else "cnr"
    return values


for _m in (
    Metric("cnr", "Contrast-to-noise ratio", "CNR", "grounding", _cnr_values(False), pairs=_cnr_defined,
           fmt="number", minor=2, scopes=("phrase",), needs=(CNR_COLUMN,),
           doc="|mu_in - mu_out| / sqrt(var_in + var_out) of the map resized to the grid (contract §Phrase grounding)"),
    Metric("cnr_signed", "Contrast-to-noise ratio, signed", "CNR±", "grounding", _cnr_values(True),
           pairs=_cnr_defined, fmt="number", minor=2, scopes=("phrase",), needs=(CNR_COLUMN,),
           doc="(mu_in - mu_out) / sqrt(var_in + var_out): negative when the map is lower inside the region"),
):
    register(_m)
del _m

# ---------------------------------------------------------------------------------------- opt-in groups
#: Metrics outside the default set, by group: registered only for a run that asks for the group
#: (``xbench-score --metrics GROUP``, or :func:`opt_in` from Python), so that default outputs never change.
#: Each value names the module attribute holding the group's Metric tuple, imported when first asked for.
OPT_IN: dict[str, str] = {"complexity": "xbench.score.metrics.complexity:METRICS"}


def opt_in_metrics(group: str) -> tuple[Metric, ...]:
    """The metrics of opt-in ``group`` (:class:`UnknownNameError` naming the groups for another name)."""
    import importlib

    if group not in OPT_IN:
        raise UnknownNameError(f"unknown metric group {group!r}; the opt-in groups are {', '.join(OPT_IN)}")
    module, attr = OPT_IN[group].split(":")
    return tuple(getattr(importlib.import_module(module), attr))


def opt_in_keys() -> dict[str, str]:
    """{metric key: opt-in group} of every opt-in group's metrics (imports each group's module)."""
    return {m.key: group for group in OPT_IN for m in opt_in_metrics(group)}


def opt_in_groups_of(keys: Iterable[str]) -> tuple[str, ...]:
    """The opt-in groups (in :data:`OPT_IN` order) one of whose metrics is among ``keys``, e.g. the keys of a
    metrics.json scored with ``--metrics GROUP``: what a later report registers to show them."""
    found = set(keys)
    return tuple(dict.fromkeys(g for k, g in opt_in_keys().items() if k in found))


@contextmanager
def opt_in(*groups: str) -> Iterator[tuple[Metric, ...]]:
    """Register the metrics of ``groups`` (each once, after the default ones) for a ``with`` block."""
    ms = [m for g in dict.fromkeys(groups) for m in opt_in_metrics(g) if REGISTRY.get(m.key) is not m]
    with registered(*ms) as added:
        yield added


load_plugins()  # installed metrics (entry points) come after every built-in one, in metrics.json order
