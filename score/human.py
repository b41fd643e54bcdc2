"""Human ceilings: a second radiologist scored like a model, and a model's "% of human".

``xbench human`` (``xbench.extract.human``) turns radiologists' own annotations into submissions, scores each
reader against the ground truth with the ordinary scorer, and leaves one ``pair_counts.npz`` per reader in its
output folder, listed by ``human.json``. This module is the arithmetic on those counts, with no store and no
map in sight:

* :func:`ceiling`: per class the mean over readers of each reader's class value (pointing game, Dice and IoU at
  the fixed and at the best threshold, the best threshold chosen per reader and class as for a model), per
  dataset the mean over classes; 95 % percentile bootstrap intervals over cases (the union of the readers'
  cases, one resample shared by every reader, the best threshold re-chosen in each resample).
* :func:`human_block`: the ``human`` section of a model's metrics.json (metrics minor 6): beside each
  grounding value the ceiling, its interval, the model's % of human (model / human x 100) and CheXlocalize's
  percentage decrease ((human - model) / human x 100), and the paired gap model - human on the (case, class)
  pairs both were scored on, resampled together.

The rule is written out in docs/contract.md ("Human ceilings") and docs/human.md.
"""
from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xbench.schemas.errors import InputError, Problem
from xbench.schemas.paths import is_reader_name

from .counts import DatasetCounts
from .grounding import FIXED_THRESHOLD_INDEX
from .intervals import percentile_interval

__all__ = ["KEYS", "HUMAN_METRICS_MINOR", "HUMAN_FILE", "HUMAN_SCHEMA", "READING_FILE", "ReaderPairs", "reader_pairs",
           "ReaderReading", "NATIVE_READING_FILE", "save_reading", "load_reading", "with_hits", "chexlocalize_block", "CHEXLOCALIZE_KEYS",
           "ceiling", "HumanCeiling", "load_human", "human_block", "with_human", "percent_of_human",
           "percentage_decrease"]

#: the grounding keys a ceiling exists for (the maps of a reader are binary masks, so the map-shape metrics
#: of minor 1 measure nothing human)
KEYS = ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best")
#: metrics.json minor version that adds the "human" section (contract, "Versions")
HUMAN_METRICS_MINOR = 6
#: what ``xbench human`` writes at the top of its output folder
HUMAN_FILE = "human.json"
#: human.json's schema: 2 adds each reader's reading (READING_FILE) and the "chexlocalize" block
HUMAN_SCHEMA = 2
#: each reader's own pairs as CheXlocalize's eval.py scores them, beside its pair_counts.npz
READING_FILE = "reading.npz"
#: (CheXlocalize, masks) the reader's rows at the images' full resolution, against the ground truth's own file
NATIVE_READING_FILE = "reading_native.npz"
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


_READING_ARRAYS = ("case_id", "cls", "gt", "seg", "iou", "hit", "cases")


def save_reading(path: str | os.PathLike, r: ReaderReading) -> None:
    np.savez_compressed(path, **{k: getattr(r, k) for k in _READING_ARRAYS})


def _reading_problems(z: Mapping[str, np.ndarray], where: str) -> list[str]:
    missing = [k for k in _READING_ARRAYS if k not in z]
    if missing:
        return [f"missing array(s) {', '.join(missing)}"]
    a = {k: z[k] for k in _READING_ARRAYS}
    if any(v.ndim != 1 for v in a.values()):
        return ["every array must be one-dimensional"]
    n = len(a["case_id"])
    if any(len(a[k]) != n for k in ("cls", "gt", "seg", "iou", "hit")):
        return ["case_id, cls, gt, seg, iou and hit must have one length"]
    kinds = {"case_id": "U", "cls": "U", "cases": "U", "gt": "b", "seg": "b", "iou": "f", "hit": "f"}
    bad = [k for k, kind in kinds.items() if a[k].dtype.kind != kind]
    if bad:
        return [f"array(s) {', '.join(bad)} of the wrong type"]
    out = []
    if not np.all(a["gt"] | a["seg"]):
        out.append("a row where neither the ground truth nor the reader has a region")
    iou, hit, gt = a["iou"], a["hit"], a["gt"]
    if not np.all((iou >= 0) & (iou <= 1)) or np.any(iou[~(gt & a["seg"])] != 0):
        out.append("iou must be in [0, 1], and 0 where one of the two regions is empty")
    if np.any(np.isnan(hit) != ~gt) or not np.all((hit[gt] == 0) | (hit[gt] == 1)):
        out.append("hit must be 0 or 1 on the ground truth's rows and NaN elsewhere")
    cases = a["cases"]
    if cases.size and (np.any(cases[1:] <= cases[:-1])):
        out.append("cases must be sorted and unique")
    if n and not np.all(np.isin(a["case_id"], cases)):
        out.append("a row's case is not among the reader's cases")
    keys = np.char.add(np.char.add(a["case_id"], "\0"), a["cls"])
    if np.unique(keys).size != n:
        out.append("a (case, class) pair is listed twice")
    return out


def load_reading(path: str | os.PathLike, *, max_bytes: int = 1024 * 2**20) -> ReaderReading:
    """Read and check a reader's ``reading.npz`` (untrusted: :func:`xbench.schemas.inputs.load_npz`, bounded
    before inflating, no pickle). Raises InputError."""
    from xbench.schemas.inputs import load_npz

    z = load_npz(path, where=str(path), max_bytes=max_bytes)
    arrays = {k: np.asarray(v) for k, v in z.items() if k in _READING_ARRAYS}
    problems = _reading_problems(arrays, str(path))
    if problems:
        raise InputError([Problem(str(path), m) for m in problems])
    return ReaderReading(**{k: arrays[k] for k in _READING_ARRAYS})


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
                       n_resamples: int = 1000, seed: int = 0, resolution: str = "grid") -> dict:
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
    if n_resamples and len(cases):
        rs = np.random.RandomState(seed)
        done = 0
        while done < n_resamples:
            b = min(_BLOCK, n_resamples - done)
            w = np.zeros((b, len(cases)), np.int64)
            for i in range(b):
                w[i] = np.bincount(rs.choice(len(cases), size=len(cases), replace=True), minlength=len(cases))
            got = per_class(w)
            for c in order:
                for k in CHEXLOCALIZE_KEYS:
                    reps[c][k].append(got[c][k])
            done += b

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
    return {"resolution": resolution, "n_cases": int(len(cases)), "n_resamples": int(n_resamples),
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


def _weights(n_cases: int, n_resamples: int, seed: int):
    """Blocks of case weights, (b, n_cases) int32: how often each case is drawn in each resample
    (``numpy.random.default_rng(seed)``, ``integers(0, n, n)`` per resample, in order)."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < n_resamples:
        b = min(_BLOCK, n_resamples - done)
        w = np.zeros((b, n_cases), np.int32)
        for i in range(b):
            w[i] = np.bincount(rng.integers(0, n_cases, n_cases), minlength=n_cases)
        done += b
        yield w


def _class_order(per_reader: Sequence[ReaderPairs], classes: Sequence[str] | None) -> list[str]:
    seen = list(classes or ())
    for p in per_reader:
        for c in p.cls:
            if c not in seen:
                seen.append(str(c))
    return seen


def ceiling(readers: Mapping[str, ReaderPairs], *, classes: Sequence[str] | None = None, n_resamples: int = 1000,
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
    if n_resamples and len(cases):
        for w in _weights(len(cases), n_resamples, seed):
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


# -- reading a human folder (untrusted: the output of xbench human, possibly from elsewhere) ------------------
@dataclass
class HumanSource:
    """A human folder read and checked: {dataset: {reader: ReaderPairs}} and what human.json says."""

    folder: Path
    sha256: str
    info: dict
    readers: dict[str, dict[str, ReaderPairs]]
    classes: dict[str, list[str]]
    readings: dict[str, dict[str, ReaderReading]] | None = None
    natives: dict[str, dict[str, ReaderReading]] | None = None


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
        return True
    except ValueError:
        return False


def load_human(folder: str | os.PathLike) -> HumanSource:
    """Read ``FOLDER/human.json`` and each reader's ``pair_counts.npz`` it lists (``readers/<name>/pair_counts.npz``).

    Raises :class:`InputError` (one problem a line) for a missing or malformed file, a reader name that is not a
    plain folder name, a file outside the folder (a link leaving it), or counts that do not hold the dataset."""
    from xbench.schemas.inputs import load_json

    from .counts import read_counts_file

    folder = Path(folder)
    path = folder / HUMAN_FILE
    if not folder.is_dir():
        raise InputError([Problem(str(folder), "--human must be the output folder of `xbench human` (no such folder)")])
    if not path.is_file() or not _inside(path, folder):
        raise InputError([Problem(str(path), "no human.json here; --human takes the output folder of `xbench human`")])
    data = load_json(path)
    problems: list[Problem] = []
    info = data.get("xbench") if isinstance(data, dict) else None
    datasets = data.get("datasets") if isinstance(data, dict) else None
    if not isinstance(info, dict) or info.get("kind") != "human-ceiling" or not isinstance(datasets, dict) or not datasets:
        raise InputError([Problem(str(path), 'not a human.json of `xbench human` (expected {"xbench": {"kind": '
                                             '"human-ceiling", ...}, "datasets": {...}})')])
    if info.get("schema") != HUMAN_SCHEMA:
        raise InputError([Problem(str(path), f"written by another version of `xbench human` (schema "
                                             f"{info.get('schema')!r}, this one reads {HUMAN_SCHEMA}: each reader's "
                                             f"{READING_FILE}); run xbench human again")])
    readers: dict[str, dict[str, ReaderPairs]] = {}
    readings: dict[str, dict[str, ReaderReading]] = {}
    natives: dict[str, dict[str, ReaderReading]] = {}
    classes: dict[str, list[str]] = {}
    for name, entry in datasets.items():
        names = entry.get("readers") if isinstance(entry, dict) else None
        if not isinstance(names, list) or not names or len(names) > 10_000:
            problems.append(Problem(f"{path}: {name}", "readers must be a non-empty list of names"))
            continue
        if len(set(map(str, names))) != len(names):
            problems.append(Problem(f"{path}: {name}", "a reader is listed twice"))
            continue
        got = {}
        for r in names:
            if not is_reader_name(r):  # the definition xbench human writes by
                problems.append(Problem(f"{path}: {name}", f"reader name {r!r} is not a plain folder name "
                                                           "(letters, digits, _ . -)"))
                continue
            counts_path = folder / "readers" / r / "pair_counts.npz"
            if not counts_path.is_file() or not _inside(counts_path, folder):
                problems.append(Problem(str(counts_path), "missing (or a link leaving the human folder)"))
                continue
            try:
                counts, _ = read_counts_file(counts_path)
            except InputError as exc:
                problems.extend(exc.problems)
                continue
            if name not in counts:
                problems.append(Problem(str(counts_path), f"holds no counts of dataset {name!r}"))
                continue
            reading_path = folder / "readers" / r / READING_FILE
            if not reading_path.is_file() or not _inside(reading_path, folder):
                problems.append(Problem(str(reading_path), "missing (or a link leaving the human folder)"))
                continue
            try:
                reading = load_reading(reading_path)
                got[r] = with_hits(reader_pairs(counts[name]), reading, str(reading_path))
            except InputError as exc:
                problems.extend(exc.problems)
                continue
            native_path = folder / "readers" / r / NATIVE_READING_FILE
            if native_path.exists() or native_path.is_symlink():
                if not native_path.is_file() or not _inside(native_path, folder):
                    problems.append(Problem(str(native_path), "not a file inside the human folder"))
                    continue
                try:
                    natives.setdefault(str(name), {})[r] = load_reading(native_path)
                except InputError as exc:
                    problems.extend(exc.problems)
                    continue
            readings.setdefault(str(name), {})[r] = reading
            classes.setdefault(name, list(counts[name].classes))
        readers[str(name)] = got
    if problems:
        raise InputError(problems)
    for name, got in natives.items():
        if set(got) != set(readings.get(name, {})):
            problems.append(Problem(str(folder), f"{NATIVE_READING_FILE} is there for some readers of {name} only"))
    if problems:
        raise InputError(problems)
    return HumanSource(folder, hashlib.sha256(path.read_bytes()).hexdigest(), info, readers, classes, readings,
                       natives)


# -- the "human" section of a model's metrics.json ---------------------------------------------------------
def _entry(model_value, h: HumanCeiling, m: HumanCeiling | None, c, k: str, level: float) -> dict:
    hv = h.point[c][k]
    out = {"model": model_value, "human": hv,
           "ci95": percentile_interval(h.reps[c][k], level) if h.reps[c][k].size else None,
           "percent_of_human": percent_of_human(model_value, hv),
           "percentage_decrease": percentage_decrease(model_value, hv)}
    if m is not None:
        mv = m.point[c][k]
        out["paired"] = {"model": mv, "gap": None if mv is None or hv is None else mv - hv}
        if h.reps[c][k].size:
            d = m.reps[c][k] - h.reps[c][k]
            ok = d[~np.isnan(d)]
            out["paired"]["gap_ci95"] = percentile_interval(ok, level)
            out["paired"]["p_value"] = (float(min(1.0, 2.0 * min(np.mean(ok <= 0), np.mean(ok >= 0))))
                                        if ok.size else None)
    return out


def human_block(metrics: Mapping, counts: Mapping[str, DatasetCounts], source: HumanSource, *, bootstrap: int,
                seed: int, level: float = 0.95) -> dict:
    """The ``human`` section for a model's ``metrics`` (its per-dataset ``counts`` give the paired gaps)."""
    out = {"source": {"file": HUMAN_FILE, "sha256": source.sha256,
                      "rule": source.info.get("rule") if isinstance(source.info.get("rule"), str) else None},
           "keys": list(KEYS), "datasets": {}}
    for name, readers in source.readers.items():
        if name not in metrics.get("datasets", {}):
            continue
        dm = metrics["datasets"][name]
        model = reader_pairs(counts[name]) if name in counts else None
        h, m = ceiling(readers, classes=source.classes.get(name), n_resamples=bootstrap, seed=seed, model=model)
        entry = {"readers": list(h.readers), "n_cases": int(len(h.cases)),
                 "summary": {k: _entry((dm.get("summary") or {}).get(k), h, m, None, k, level) for k in KEYS},
                 "classes": {}}
        for c in h.classes:
            mc = (dm.get("classes") or {}).get(c)
            if mc is None or not h.n_pairs[c]:  # only where a ceiling exists
                continue
            entry["classes"][c] = {"n_pairs": h.n_pairs[c], "n_readers": h.n_readers[c],
                                   **({"n_paired": m.n_pairs[c]} if m is not None else {}),
                                   **{k: _entry(mc.get(k), h, m, c, k, level) for k in KEYS}}
        native = (source.natives or {}).get(name)
        chex = native or (source.readings or {}).get(name)
        if chex:
            entry["chexlocalize"] = chexlocalize_block(chex, classes=source.classes.get(name), n_resamples=bootstrap,
                                                       seed=seed, resolution="native" if native else "grid")
        out["datasets"][name] = entry
    return out


def with_human(result, source: HumanSource, *, bootstrap: int, seed: int):
    """``result`` (a ScoreResult) with the ``human`` section added and ``schema_minor`` raised to 6 at least."""
    block = human_block(result.metrics, result.counts, source, bootstrap=bootstrap, seed=seed)
    metrics = dict(result.metrics)
    header = dict(metrics["xbench"])
    header["schema_minor"] = max(int(header.get("schema_minor", 0) or 0), HUMAN_METRICS_MINOR)
    metrics["xbench"] = header
    metrics["human"] = block
    result.metrics = metrics
    return result


# -- rows for the tables and `xbench compare` ------------------------------------------------------------
ROW_COLUMNS = ("dataset", "class", "metric", "model", "human", "human_lo", "human_hi", "percent_of_human",
               "percentage_decrease", "gap", "gap_lo", "gap_hi", "p_value")


def _num(v) -> float | None:
    """A finite number of a metrics.json read back (a report reads files from elsewhere), else None."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _pair(v) -> list:
    return [_num(v[0]), _num(v[1])] if isinstance(v, list) and len(v) == 2 and None not in map(_num, v) \
        else [None, None]


def _mapping(v) -> Mapping:
    return v if isinstance(v, Mapping) else {}


def human_rows(block: Mapping, *, per_class: bool = True) -> list[dict]:
    """One row per (dataset, class or "(mean)", metric) of a ``human`` section; fractions and percents as stored.
    Entries of the wrong shape are left out and values that are not numbers read as missing, so a metrics.json
    from elsewhere never breaks a table."""
    rows = []
    for d, entry in _mapping(_mapping(block).get("datasets")).items():
        entry = _mapping(entry)
        scopes = [("(mean)", _mapping(entry.get("summary")))]
        if per_class:
            scopes += [(c, _mapping(e)) for c, e in _mapping(entry.get("classes")).items()]
        for cls, values in scopes:
            for k in KEYS:
                v = values.get(k)
                if not isinstance(v, Mapping):
                    continue
                ci = _pair(v.get("ci95"))
                paired = _mapping(v.get("paired"))
                gci = _pair(paired.get("gap_ci95"))
                rows.append({"dataset": str(d), "class": str(cls), "metric": k, "model": _num(v.get("model")),
                             "human": _num(v.get("human")), "human_lo": ci[0], "human_hi": ci[1],
                             "percent_of_human": _num(v.get("percent_of_human")),
                             "percentage_decrease": _num(v.get("percentage_decrease")), "gap": _num(paired.get("gap")),
                             "gap_lo": gci[0], "gap_hi": gci[1], "p_value": _num(paired.get("p_value"))})
    return rows


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def human_markdown(rows: Sequence[Mapping]) -> str:
    """The rows as a Markdown table: values in %, "% of human" = model / human x 100, the paired gap (model -
    human, points) with its 95 % interval."""
    from xbench.schemas.errors import escape_text

    head = ("| Dataset | Class | Metric | Model | Human [95% CI] | % of human | Gap model − human [95% CI] |\n"
            "|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        human = f"{_pct(r['human'])} [{_pct(r['human_lo'])}, {_pct(r['human_hi'])}]" if r["human_lo"] is not None \
            else _pct(r["human"])
        gap = "–" if r["gap"] is None else (f"{100 * r['gap']:+.1f}" + (
            f" [{100 * r['gap_lo']:+.1f}, {100 * r['gap_hi']:+.1f}]" if r["gap_lo"] is not None else ""))
        pct = "–" if r["percent_of_human"] is None else f"{r['percent_of_human']:.1f}"
        cells = [escape_text(str(r["dataset"])), escape_text(str(r["class"])).replace("|", "\\|"), r["metric"],
                 _pct(r["model"]), human, pct, gap]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def human_csv(rows: Sequence[Mapping]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(ROW_COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r[k] is None else r[k]) for k in ROW_COLUMNS})
    return buf.getvalue()


def write_human_tables(metrics: Mapping, out_dir: str | os.PathLike) -> list[Path]:
    """``table_human.csv`` / ``.md`` beside the other tables, only when metrics.json has a ``human`` section."""
    if "human" not in metrics:
        return []
    rows = human_rows(metrics["human"])
    out = Path(out_dir)
    (out / "table_human.csv").write_text(human_csv(rows))
    (out / "table_human.md").write_text(human_markdown(rows))
    return [out / "table_human.csv", out / "table_human.md"]


def human_lines(metrics: Mapping) -> list[str]:
    """One "human: ..." line per dataset of a ``human`` section (the summary's pointing game and best Dice), for
    the terminal and the report page."""
    lines = []
    rows = [r for r in human_rows(_mapping(metrics.get("human")), per_class=False)
            if r["metric"] in ("pointing_game", "dice_best", "iou_best") and r["human"] is not None]
    readers = {d: _mapping(e).get("readers") for d, e in _mapping(_mapping(metrics.get("human")).get("datasets")).items()}
    kind = "simulated reader(s)" if simulated(metrics) else "reader(s)"
    for d in dict.fromkeys(r["dataset"] for r in rows):
        parts = []
        for r in (r for r in rows if r["dataset"] == d):
            pct = ("model: –" if r["percent_of_human"] is None
                   else f"model at {r['percent_of_human']:.0f}% of it")
            parts.append(f"{r['metric']} {_pct(r['human'])}% ({pct})")
        n = readers.get(d)
        lines.append(f"human ceiling ({d}, {len(n) if isinstance(n, list) else '?'} {kind}): " + ", ".join(parts))
    return lines


def simulated(metrics: Mapping) -> bool:
    """Whether the ``human`` section's readers are simulated (``xbench human phantom``: its rule says so), not
    radiologists."""
    rule = _mapping(_mapping(metrics.get("human")).get("source")).get("rule")
    return isinstance(rule, str) and "simulated" in rule.lower()


def compare_human(a_dir, human_dir, *, n_boot: int, seed: int, per_class: bool, out_csv, quiet: bool,
                  as_json: bool) -> int:
    """``xbench compare RESULTS HUMAN_DIR``: the model of RESULTS against the human row, paired by (case, class)."""
    import json

    import click

    from xbench.schemas._cli import UserError

    from .report._load import ReportInputError, load_results

    try:
        (a,) = load_results([a_dir])
    except ReportInputError as err:
        raise UserError(err.problems) from None
    source = load_human(human_dir)
    if a.counts is None:
        raise UserError(f"{a_dir}: no pair_counts.npz; the paired comparison with the human row needs it")
    block = human_block(a.metrics, a.counts, source, bootstrap=n_boot, seed=seed)
    if not block["datasets"]:
        raise UserError(f"{a_dir} and {human_dir} share no dataset")
    rows = human_rows(block, per_class=per_class)
    if out_csv is not None:
        from .report._files import write_csv_outside

        write_csv_outside(out_csv, human_csv(rows), (a_dir, human_dir), what="the compared folder")
    if as_json:
        click.echo(json.dumps({"a": a.name, "b": "human", "n_boot": n_boot, "seed": seed, "rows": rows}, indent=2))
    elif not quiet:
        click.echo(human_markdown(rows).rstrip("\n"))
    return 0


def report_sections(results) -> tuple[list[str], str]:
    """The report's human section (Markdown lines, an HTML fragment) for the results whose metrics.json carries
    a ``human`` section; ([], "") when none does, so a report without one is unchanged. Each model gets its
    "human: ..." lines and the dataset rows (model, human [95% CI], % of human, paired gap)."""
    import html

    with_h = [r for r in results if "human" in r.metrics]
    if not with_h:
        return [], ""
    sim = all(simulated(r.metrics) for r in with_h)
    who = "simulated readers (xbench human phantom)" if sim else "radiologists' own annotations"
    md = [f"## Human ceiling ({who} scored like a model; % of human = model / human x 100)", ""]
    parts = ["<section id='human'><h2>Human ceiling</h2><p>"
             + ("Simulated readers of the phantom (they miss, shift and resize regions; not radiologists)"
                if sim else "Radiologists' own annotations")
             + " scored like a model (xbench human); % of human = model / human &times; 100; gap = model &minus; "
             "human on the (case, class) pairs both were scored on, paired bootstrap; 95% intervals in brackets.</p>"]
    for r in with_h:
        rows = human_rows(r.metrics["human"], per_class=False)
        lines = human_lines(r.metrics)
        md += [f"### {r.name}", ""] + [f"- {line}" for line in lines] + ["", human_markdown(rows)]
        parts.append(f"<h3>{html.escape(str(r.name))}</h3><ul>"
                     + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>")
        head = "".join(f"<th>{h}</th>" for h in ("Dataset", "Metric", "Model", "Human [95% CI]", "% of human",
                                                    "Gap [95% CI]"))
        body = []
        for row in rows:
            human = (f"{_pct(row['human'])} [{_pct(row['human_lo'])}, {_pct(row['human_hi'])}]"
                     if row["human_lo"] is not None else _pct(row["human"]))
            gap = "–" if row["gap"] is None else f"{100 * row['gap']:+.1f}" + (
                f" [{100 * row['gap_lo']:+.1f}, {100 * row['gap_hi']:+.1f}]" if row["gap_lo"] is not None else "")
            pct = "–" if row["percent_of_human"] is None else f"{row['percent_of_human']:.1f}"
            cells = [str(row["dataset"]), row["metric"], _pct(row["model"]), human, pct, gap]
            body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        # the report's table style (score/report/html.py: class "lb", no wrapping, in a scrolling box)
        parts.append(f"<div class=\"scroll\"><table class=\"lb\"><thead><tr>{head}</tr></thead>"
                     f"<tbody>{''.join(body)}</tbody></table></div>")
    parts.append("</section>")
    return md, "".join(parts)
