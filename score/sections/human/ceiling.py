"""The human ceiling's arithmetic: each reader's pairs, the ceiling and its bootstrap, CheXlocalize's eval.py
values, % of human. No file, store or map here (:mod:`.reading` reads the files)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from xbench.schemas.errors import InputError, Problem

from xbench.score.kernels.counts import DatasetCounts
from xbench.score.metrics.grounding import FIXED_THRESHOLD_INDEX
from xbench.score.metrics.registry import CORE_KEYS
from xbench.score.resampling.intervals import percentile_interval

#: the grounding keys a ceiling exists for, the contract's of minor 0 (the maps of a reader are binary masks, so
#: the map-shape metrics of minor 1 measure nothing human)
KEYS = CORE_KEYS["grounding"]


#: CheXlocalize's human-benchmark values (eval.py): mIoU with true_pos_only True and False, the hit rate
CHEXLOCALIZE_KEYS = ("miou_true_pos_only", "miou_all", "hit_rate")


#: resamples computed at once (a block of case weights is (block, cases) int32)
_BLOCK = 100


@dataclass(frozen=True)
class ReaderPairs:
    """One reader's (or one model's) positive pairs of one dataset: per pair its case id, its class name, its
    pointing-game hit and its Dice and IoU at every threshold tau_k = k / 100."""

    case_id: np.ndarray   # (P,) str
    cls: np.ndarray       # (P,) str
    hit: np.ndarray       # (P,) float64
    dice: np.ndarray      # (P, T) float64
    iou: np.ndarray       # (P, T) float64
    cases: np.ndarray     # (N,) str: every case the reader was scored on (the resampled units), pairs or not

    def take(self, rows: np.ndarray) -> "ReaderPairs":
        return ReaderPairs(self.case_id[rows], self.cls[rows], self.hit[rows], self.dice[rows], self.iou[rows],
                           self.cases)


def reader_pairs(dc: DatasetCounts) -> ReaderPairs:
    """The positive pairs of ``dc`` (supported classes only) with their per-pair values, from the counts."""
    keep = np.asarray(dc.supported, dtype=bool)[dc.pair_class]
    b = dc.b[keep].astype(np.float64)
    br = dc.br[keep].astype(np.float64)
    r = dc.region_pixels[keep].astype(np.float64)[:, None]
    classes = np.asarray(dc.classes, dtype=object)
    return ReaderPairs(case_id=np.asarray(dc.case_id, dtype=str)[dc.pair_case[keep]],
                       cls=classes[dc.pair_class[keep]].astype(str),
                       hit=dc.hit[keep].astype(np.float64),
                       dice=2.0 * br / (b + r), iou=br / (b + r - br), cases=np.asarray(dc.case_id, dtype=str))


@dataclass(frozen=True)
class ReaderReading:
    """One reader's own pairs of one dataset as CheXlocalize's eval.py scores them: one row per (case, class)
    where the ground truth (``gt``) or the reader (``seg``) has a region on the grid; ``iou`` the IoU of the two
    binary regions (0 when one is empty), ``hit`` the reader's salient-point hit (NaN on rows without a ground
    truth region); ``cases`` every case the reader read (the resampled units)."""

    case_id: np.ndarray  # (R,) str
    cls: np.ndarray      # (R,) str
    gt: np.ndarray       # (R,) bool
    seg: np.ndarray      # (R,) bool
    iou: np.ndarray      # (R,) float64
    hit: np.ndarray      # (R,) float64
    cases: np.ndarray    # (N,) str, sorted, unique


def with_hits(pairs: ReaderPairs, reading: ReaderReading, source: str = "reading") -> ReaderPairs:
    """``pairs`` with each pair's hit taken from the reader's reading (the reader's salient points), so that the
    ceiling's pointing game is CheXlocalize's hit rate, not the maximum of the reader's map. Raises InputError
    (naming ``source``, the reading's file) when a pair of the counts has no ground-truth row in the reading."""
    where = {(c, k): float(h) for c, k, g, h in zip(reading.case_id.tolist(), reading.cls.tolist(),
                                                   reading.gt.tolist(), reading.hit.tolist()) if g}
    keys = list(zip(pairs.case_id.tolist(), pairs.cls.tolist()))
    lost = [k for k in keys if k not in where]
    if lost:
        raise InputError([Problem(source, f"does not match the reader's counts: {len(lost)} pair(s) of the counts "
                                          f"(e.g. {lost[0][0]}, {lost[0][1]}) have no ground-truth row in the reading")])
    hit = np.asarray([where[k] for k in keys], dtype=np.float64).reshape(-1)
    return ReaderPairs(pairs.case_id, pairs.cls, hit, pairs.dice, pairs.iou, pairs.cases)


def _chex_columns(r: ReaderReading) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per CheXlocalize key, (rows where the value is defined, their values): eval.py's calculate_iou with
    true_pos_only (both regions non-empty) and without (either non-empty), and get_hb_hitrates (ground truth
    non-empty)."""
    return {"miou_true_pos_only": (np.flatnonzero(r.gt & r.seg), r.iou),
            "miou_all": (np.flatnonzero(r.gt | r.seg), r.iou),
            "hit_rate": (np.flatnonzero(r.gt), r.hit)}


def chexlocalize_block(readings: Mapping[str, ReaderReading], *, classes: Sequence[str] | None = None,
                       bootstrap: int = 1000, seed: int = 0, resolution: str = "grid") -> dict:
    """CheXlocalize's own human-benchmark numbers (eval.py, --if_human_benchmark) from the readers' readings.

    Per reader and class, each key is the mean over the rows where it is defined (``n_<key>`` rows); per
    class the mean over the readers with a value; ``average`` the mean over classes
    (calculate_percentage_decrease.py's "Average"). The bootstrap is eval.py's: ``numpy.random.seed(seed)``,
    then per resample ``numpy.random.choice(n, size=n, replace=True)`` over the sorted union of the readers'
    cases, the resample's value the mean over the drawn rows where defined; ``mean`` the mean of the
    resamples, ``lower`` / ``upper`` the sorted resamples at positions int(0.025 B) - 1 and int(0.975 B) - 1
    (NaN resamples sorted last, as pandas does)."""
    names = list(readings)
    order = list(classes or ())
    for r in names:
        for c in readings[r].cls.tolist():
            if c not in order:
                order.append(c)
    order = [c for c in order if any(np.any(readings[r].cls == c) for r in names)]
    cases = np.unique(np.concatenate([readings[r].cases for r in names] or [np.zeros(0, str)]))
    index = {c: i for i, c in enumerate(cases.tolist())}
    cols = {r: _chex_columns(readings[r]) for r in names}
    groups = {r: {c: readings[r].cls == c for c in order} for r in names}

    def per_class(w: np.ndarray) -> dict:
        """{cls: {key: (B,)}} under case weights w (B, n)."""
        out = {}
        for c in order:
            out[c] = {}
            for k in CHEXLOCALIZE_KEYS:
                per = []
                for r in names:
                    rows, values = cols[r][k]
                    rows = rows[groups[r][c][rows]]
                    if not rows.size:
                        continue
                    ww = w[:, [index[x] for x in readings[r].case_id[rows].tolist()]].astype(np.float64)
                    den = ww.sum(axis=1)
                    with np.errstate(invalid="ignore", divide="ignore"):
                        per.append(np.where(den > 0, (ww @ values[rows]) / np.where(den > 0, den, 1.0), np.nan))
                out[c][k] = _nanmean(per) if per else np.full(w.shape[0], np.nan)
        return out

    point = per_class(np.ones((1, len(cases)), np.int64))
    reps = {c: {k: [] for k in CHEXLOCALIZE_KEYS} for c in order}
    if bootstrap and len(cases):
        from xbench.score.resampling.engine import legacy_choice_weights

        weights = legacy_choice_weights(len(cases), bootstrap, seed).astype(np.int64)
        for done in range(0, bootstrap, _BLOCK):
            got = per_class(weights[done:done + _BLOCK])
            for c in order:
                for k in CHEXLOCALIZE_KEYS:
                    reps[c][k].append(got[c][k])

    def num(v) -> float | None:
        return None if v is None or not np.isfinite(v) else float(v)

    def summary(values: np.ndarray) -> dict:
        if not values.size:
            return {"mean": None, "lower": None, "upper": None}
        ordered = np.sort(values)  # NaN last, as pandas' sort_values
        lo, hi = int(0.05 / 2 * values.size) - 1, int((1 - 0.05 / 2) * values.size) - 1
        ok = values[~np.isnan(values)]
        return {"mean": num(ok.mean()) if ok.size else None, "lower": num(ordered[lo]), "upper": num(ordered[hi])}

    out_classes, boot_means = {}, {k: [] for k in CHEXLOCALIZE_KEYS}
    for c in order:
        entry = {}
        for k in CHEXLOCALIZE_KEYS:
            n = int(sum(int(groups[r][c][cols[r][k][0]].sum()) for r in names))
            values = np.concatenate(reps[c][k]) if reps[c][k] else np.zeros(0)
            entry[k] = {"value": num(point[c][k][0]), "n": n, "bootstrap": summary(values)}
            boot_means[k].append(entry[k]["bootstrap"]["mean"])
        out_classes[c] = entry
    average = {}
    for k in CHEXLOCALIZE_KEYS:
        pts = [out_classes[c][k]["value"] for c in order if out_classes[c][k]["value"] is not None]
        bms = [v for v in boot_means[k] if v is not None]
        average[k] = {"value": sum(pts) / len(pts) if pts else None,
                      "bootstrap_mean": sum(bms) / len(bms) if bms else None}
    return {"resolution": resolution, "n_cases": int(len(cases)), "n_resamples": int(bootstrap),
            "seed": int(seed), "classes": out_classes, "average": average}


def _values(w: np.ndarray, p: ReaderPairs) -> dict[str, np.ndarray]:
    """Class values of the pairs ``p`` under pair weights ``w`` (B, P): (B,) per key, NaN where the weights
    sum to 0 (no pair of the class drawn). The best threshold is the first maximum of the weighted mean curve,
    as the scorer chooses it."""
    den = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        inv = np.where(den > 0, 1.0 / np.where(den > 0, den, 1.0), np.nan)
        dice = (w @ p.dice) * inv[:, None]
        iou = (w @ p.iou) * inv[:, None]
        out = {"pointing_game": (w @ p.hit) * inv,
               "dice_fixed": dice[:, FIXED_THRESHOLD_INDEX], "iou_fixed": iou[:, FIXED_THRESHOLD_INDEX]}
    rows = np.arange(w.shape[0])
    out["dice_best"] = dice[rows, np.argmax(np.nan_to_num(dice, nan=-1.0), axis=1)]
    out["iou_best"] = iou[rows, np.argmax(np.nan_to_num(iou, nan=-1.0), axis=1)]
    return out


def _nanmean(stack: list[np.ndarray]) -> np.ndarray:
    """Mean over the first axis of the defined values, NaN where none is (no warning)."""
    a = np.asarray(stack, dtype=np.float64)
    ok = ~np.isnan(a)
    n = ok.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.where(ok, a, 0.0).sum(axis=0) / np.maximum(n, 1), np.nan)


@dataclass
class HumanCeiling:
    """The ceiling of one dataset: point values and bootstrap replicates, per class and for the dataset.

    ``point[cls][key]`` float or None; ``reps[cls][key]`` (B,) (NaN: undefined in that resample); the
    dataset's own under the class name ``None``. ``cases``: the resampled units (the union of the readers'
    case ids, sorted)."""

    classes: list[str]
    readers: list[str]
    point: dict
    reps: dict
    n_pairs: dict
    n_readers: dict
    cases: np.ndarray


def _weights(n_cases: int, bootstrap: int, seed: int):
    """Blocks of case weights, (b, n_cases) int32: how often each case is drawn in each resample
    (``numpy.random.default_rng(seed)``, ``integers(0, n, n)`` per resample, in order)."""
    from xbench.score.resampling.engine import resample_weights, stream

    for w in resample_weights(n_cases, bootstrap, stream(seed), chunk=_BLOCK):
        yield w.astype(np.int32)


def _class_order(per_reader: Sequence[ReaderPairs], classes: Sequence[str] | None) -> list[str]:
    seen = list(classes or ())
    for p in per_reader:
        for c in p.cls:
            if c not in seen:
                seen.append(str(c))
    return seen


def ceiling(readers: Mapping[str, ReaderPairs], *, classes: Sequence[str] | None = None, bootstrap: int = 1000,
            seed: int = 0, model: ReaderPairs | None = None) -> tuple[HumanCeiling, HumanCeiling | None]:
    """The human ceiling of one dataset from each reader's pairs; with ``model``, also the model's values on the
    (case, class) pairs some reader was scored on, resampled with the same case weights (for the paired gap).

    Per reader and class the value is the class mean over that reader's pairs (the best threshold chosen per
    reader); the ceiling of a class is the mean over the readers with at least one pair of it; the dataset
    value the mean over classes where it is defined."""
    names = list(readers)
    order = _class_order([readers[r] for r in names], classes)
    cases = np.unique(np.concatenate([readers[r].cases for r in names] or [np.zeros(0, str)]))
    index = {c: i for i, c in enumerate(cases)}
    aligned = None
    if model is not None:  # only the pairs a reader was scored on: pairs align by (case, class)
        human_pairs = {(str(a), str(b)) for r in names for a, b in zip(readers[r].case_id, readers[r].cls)}
        rows = np.array([i for i, ab in enumerate(zip(model.case_id, model.cls)) if (str(ab[0]), str(ab[1])) in human_pairs],
                        dtype=np.int64)
        aligned = model.take(rows)
    groups = {r: {c: np.flatnonzero(readers[r].cls == c) for c in order} for r in names}
    mgroups = {c: np.flatnonzero(aligned.cls == c) for c in order} if aligned is not None else None

    def evaluate(w_cases: np.ndarray):
        """(B, ...) -> {cls: {key: (B,)}} for the readers' ceiling and the model."""
        hum, mod = {}, {}
        for c in order:
            per = []
            for r in names:
                rows = groups[r][c]
                if rows.size:
                    p = readers[r].take(rows)
                    per.append(_values(w_cases[:, [index[x] for x in p.case_id]].astype(np.float64), p))
            hum[c] = {k: _nanmean([v[k] for v in per]) if per else np.full(w_cases.shape[0], np.nan) for k in KEYS}
            if aligned is not None:
                rows = mgroups[c]
                p = aligned.take(rows)
                mod[c] = (_values(w_cases[:, [index[x] for x in p.case_id]].astype(np.float64), p) if rows.size
                          else {k: np.full(w_cases.shape[0], np.nan) for k in KEYS})
        for side in (hum, mod):
            if side:
                side[None] = {k: _nanmean([side[c][k] for c in order]) for k in KEYS}
        return hum, mod

    ones = np.ones((1, len(cases)), np.int32)
    hp, mp = evaluate(ones)
    hreps = {c: {k: [] for k in KEYS} for c in [*order, None]}
    mreps = {c: {k: [] for k in KEYS} for c in [*order, None]} if aligned is not None else None
    if bootstrap and len(cases):
        for w in _weights(len(cases), bootstrap, seed):
            h, m = evaluate(w)
            for c in hreps:
                for k in KEYS:
                    hreps[c][k].append(h[c][k])
                    if mreps is not None:
                        mreps[c][k].append(m[c][k])

    def build(point, reps, pairs_of):
        pt = {c: {k: (None if np.isnan(point[c][k][0]) else float(point[c][k][0])) for k in KEYS} for c in point}
        rp = {c: {k: (np.concatenate(reps[c][k]) if reps[c][k] else np.zeros(0)) for k in KEYS} for c in reps}
        n_pairs = {c: pairs_of(c) for c in order}
        return pt, rp, n_pairs

    pt, rp, npairs = build(hp, hreps, lambda c: int(sum(groups[r][c].size for r in names)))
    human = HumanCeiling(order, names, pt, rp, npairs, {c: int(sum(groups[r][c].size > 0 for r in names)) for c in order},
                         cases)
    mine = None
    if aligned is not None:
        pt, rp, npairs = build(mp, mreps, lambda c: int(mgroups[c].size))
        mine = HumanCeiling(order, ["model"], pt, rp, npairs, {c: 1 for c in order}, cases)
    return human, mine


def percent_of_human(model, human) -> float | None:
    """model / human x 100; None when either is undefined or the ceiling is 0."""
    if model is None or human is None or human == 0:
        return None
    return float(model) / float(human) * 100.0


def percentage_decrease(model, human) -> float | None:
    """CheXlocalize's percentage decrease from the human benchmark: (human - model) / human x 100."""
    if model is None or human is None or human == 0:
        return None
    return (float(human) - float(model)) / float(human) * 100.0


def ceiling_json(h: HumanCeiling, level: float = 0.95) -> dict:
    """A ceiling as human.json writes it: per dataset summary and per class, each key with its interval."""
    def entry(c):
        out = dict(h.point[c])
        out["ci95"] = {k: percentile_interval(h.reps[c][k], level) if h.reps[c][k].size else None for k in KEYS}
        return out

    return {"readers": list(h.readers), "n_cases": int(len(h.cases)), "summary": entry(None),
            "classes": {c: {"n_pairs": h.n_pairs[c], "n_readers": h.n_readers[c], **entry(c)} for c in h.classes}}
