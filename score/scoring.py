"""Score a submission against a ground truth: validate, count, compute metrics and intervals.

:func:`score_submission` is the whole job behind ``xbench-score``. It

1. validates both stores (:func:`xbench.schemas.validate_ground_truth`, :func:`validate_submission`) and
   raises :class:`xbench.schemas.InvalidStoreError` listing every problem;
2. matches cases and classes by id and by name (:func:`xbench.schemas.align`);
3. streams the regions chunk by chunk (and the positive maps in bounded batches) through the one-pass
   kernel :func:`xbench.score.kernels.grounding_counts`, so memory holds at most one batch of maps and
   one chunk of masks, never all resized maps;
4. computes every metric of the contract from the counts (:func:`metrics_from_counts`) and, optionally,
   percentile bootstrap intervals (:mod:`xbench.score.bootstrap`).

The result carries the metrics dict (``metrics.json`` layout), a per-pair DataFrame and the per-pair
count arrays; :func:`xbench.score.outputs.write_outputs` writes them.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import registry as R
from .bootstrap import bootstrap_replicates, overall_replicates, percentile_intervals
from ._allocator import release_freed_memory
from .counts import DatasetCounts, count_dtype
from .errors import ScoreInputError, ThresholdsError
from .grounding import best_threshold, class_means, threshold_index
from .localisation import DEFAULT_POINTING_TOLERANCE, ENERGY_COLUMN, TOLERANT_COLUMN
from .kernels import N_THRESHOLDS, THRESHOLDS, GroundingCounts, count_pairs_into, resize_plan
from .recognition import NO_LABELLED_CASE, ONE_LABEL_VALUE, probabilities, recognition_sums

if TYPE_CHECKING:  # pandas is imported where a table is built: scoring itself never needs it (0.3-0.5 s)
    import pandas as pd

__all__ = [
    "ScoreResult",
    "score_submission",
    "count_dataset",
    "region_mask_problems",
    "metrics_from_counts",
    "pairs_table",
    "pair_table_columns",
    "write_pairs_parquet",
    "thresholds_from_metrics",
    "check_inputs",
    "Undefined",
    "undefined_notes",
]

UNSUPPORTED_REASON = "listed as unsupported by the submission"
#: why a class's grounding metrics are undefined (beside recognition's NO_LABELLED_CASE, ONE_LABEL_VALUE)
NO_POSITIVE_REGION = "no positive case with a region"
#: metrics.json minor version that adds the "phrases" section (contract §Versions)
PHRASES_METRICS_MINOR = 2
#: metrics.json minor version that adds "partial" (a run on the cases a submission holds; contract §Versions)
PARTIAL_METRICS_MINOR = 3

#: Positive maps gathered at once (raw size, before resizing); 14 x 14 float16 maps of a full benchmark
#: take ~10 MB, so this only bites for very large maps.
MAP_BATCH_BYTES = 32 * 2**20

Progress = Callable[[int], None]
Thresholds = Mapping[str, Mapping[str, tuple[float, float]]]


@dataclass
class ScoreResult:
    """What :func:`score_submission` returns.

    ``metrics``: the ``metrics.json`` dict; ``counts``: {dataset: DatasetCounts}; ``per_pair``: each
    class's per-pair Dice/IoU at the fixed and chosen thresholds ({dataset: {class column: arrays}});
    ``timings``: seconds per stage; ``phrase_counts``: {dataset: PhraseCounts} of the datasets whose phrase
    rows were scored (saved beside ``counts`` for paired comparisons). :attr:`pairs` builds the pairs table.
    """

    metrics: dict
    counts: dict[str, DatasetCounts]
    per_pair: dict = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    phrase_counts: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # undefined metrics, one counted line each (undefined_notes)

    @property
    def pairs(self) -> pd.DataFrame:
        """One row per labelled (case, class) pair of the supported classes (:func:`pairs_table`), built on
        each access: the scorer itself streams it to ``pairs.parquet`` (:func:`write_pairs_parquet`)."""
        return pairs_table(self.counts, self.per_pair)


class Undefined(NamedTuple):
    """A class whose metrics are undefined (reported as null and left out of the means), and why:
    :data:`NO_POSITIVE_REGION` (grounding), ``recognition.NO_LABELLED_CASE`` (recognition) or
    ``recognition.ONE_LABEL_VALUE`` (AUROC and AUPRC)."""

    dataset: str
    cls: str
    reason: str


#: what each reason leaves undefined, in the order the notes list them
_UNDEFINED_WHAT = {NO_POSITIVE_REGION: "grounding metrics", NO_LABELLED_CASE: "recognition metrics",
                   ONE_LABEL_VALUE: "AUROC and AUPRC"}


def undefined_notes(items: Sequence[Undefined], shown: int = 5) -> list[str]:
    """One line per dataset and reason (a count, not a warning per class): e.g. "phantom: AUROC and AUPRC
    undefined for 2 classes (one label value only: A, B); reported as null and left out of the means"."""
    groups: dict[tuple[str, str], list[str]] = {}
    for u in items:
        groups.setdefault((u.dataset, u.reason), []).append(u.cls)
    order = list(_UNDEFINED_WHAT)
    lines = []
    for (dataset, reason), classes in sorted(groups.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1])
                                                                               if kv[0][1] in order else 99)):
        n = len(classes)
        names = ", ".join(classes[:shown]) + (f" and {n - shown} more" if n > shown else "")
        lines.append(f"{dataset}: {_UNDEFINED_WHAT.get(reason, 'metrics')} undefined for {n} "
                     f"class{'' if n == 1 else 'es'} ({reason}: {names}); reported as null and left out of the means")
    return lines


# ------------------------------------------------------------------------------------------ counting
def _workers() -> int:
    """Threads for reading and counting: Numba's thread count (``NUMBA_NUM_THREADS``, default all cores)."""
    import numba

    return max(1, int(numba.get_num_threads()))


def _gather_maps(saliency, rows: np.ndarray, cols: np.ndarray, pool: ThreadPoolExecutor | None = None, *,
                 dtype=np.float32) -> np.ndarray:
    """Maps (P, h, w) for submission (row, col) pairs, reading each touched row block once.

    With ``pool``, blocks are read on its threads (zarr decodes chunks without holding the GIL); each
    block fills distinct rows of the output. ``dtype``: float32 (what the kernels take), or the stored
    dtype to hold float16 maps at half the size until they are counted.
    """
    out = np.empty((rows.shape[0],) + tuple(saliency.shape[2:]), dtype=dtype)
    if rows.size == 0:
        return out
    step = int(saliency.chunks[0]) if hasattr(saliency, "chunks") else int(saliency.shape[0])
    block_of = rows // step
    order = np.argsort(block_of, kind="stable")
    starts = np.flatnonzero(np.r_[True, block_of[order][1:] != block_of[order][:-1]])
    stops = np.r_[starts[1:], order.size]

    def fill(se):
        idx = order[se[0]:se[1]]
        lo = int(block_of[idx[0]]) * step
        block = np.asarray(saliency[lo:min(lo + step, saliency.shape[0])])
        out[idx] = block[rows[idx] - lo, cols[idx]]

    for _ in (pool.map(fill, zip(starts, stops)) if pool is not None else map(fill, zip(starts, stops))):
        pass
    return out


def _region_chunks(n_regions: int, step: int, keep: np.ndarray, batch: int) -> list[list[tuple[int, int, int, int]]]:
    """Region chunks ``(c0, c1, p0, p1)`` (regions c0..c1-1, kept pair positions p0..p1-1), grouped into
    batches of at most ~``batch`` kept pairs (a chunk is never split). Every chunk is listed, also one
    without kept pairs, because every region is checked for emptiness."""
    batches: list[list[tuple[int, int, int, int]]] = [[]]
    n_in = 0
    for c0 in range(0, n_regions, step):
        c1 = min(c0 + step, n_regions)
        p0, p1 = (int(x) for x in np.searchsorted(keep, (c0, c1)))
        if batches[-1] and n_in + (p1 - p0) > batch:
            batches.append([])
            n_in = 0
        batches[-1].append((c0, c1, p0, p1))
        n_in += p1 - p0
    return [b for b in batches if b]


def count_dataset(sub_ds, gt_ds, *, case_rows: np.ndarray | None = None, class_cols: np.ndarray | None = None,
                  progress: Progress | None = None, mask_chunk: int | None = None,
                  timings: dict[str, float] | None = None, region_problems: list | None = None,
                  where: str | None = None, workers: int | None = None,
                  pointing_tolerance: float = DEFAULT_POINTING_TOLERANCE) -> DatasetCounts:
    """Counts of one dataset: probabilities, and hit / |B| / |B∩R| for every positive pair.

    The same pass fills two per-pair columns of ``extra`` (see :mod:`xbench.score.localisation`): the
    energy share and the tolerant pointing-game hit at ``pointing_tolerance`` original pixels (each case's
    ``orig_size`` over the grid gives its cell size).

    Every region_mask chunk is decoded exactly once, on one of ``workers`` threads that then counts the
    chunk's pairs with the serial ``nogil`` kernel (:func:`xbench.score.kernels.count_pairs_into`): decoding
    and counting overlap, and memory holds one decoded chunk per thread plus the raw positive maps of one
    batch (at most ``MAP_BATCH_BYTES``), never resized maps. The same pass checks what
    ``validate_ground_truth(..., scan_masks=False)`` skipped: every region chunk decodes and no region
    is empty.

    Parameters
    ----------
    sub_ds, gt_ds
        A ``SubmissionDataset`` and a ``GroundTruthDataset`` (or any objects with the same attributes;
        arrays may be NumPy or lazy zarr arrays).
    case_rows, class_cols
        The alignment from :func:`xbench.schemas.align` (computed when omitted). A case row of -1 is a case
        the submission lacks (``align(..., allow_missing=True)``): the counts then hold only the cases present,
        in the ground truth's order, exactly as for a ground truth of those cases alone; the regions of the
        missing cases are still decoded and checked.
    progress
        Called with the number of positive pairs finished after each chunk.
    mask_chunk
        Regions per read (default: the region_mask chunk length).
    region_problems
        Where to append problems of the region masks (unreadable chunk, empty region; the validator's
        messages, ``where`` naming the dataset). When omitted, such problems raise
        :class:`xbench.schemas.InvalidStoreError`.
    workers
        Threads (default: Numba's thread count).
    """
    from xbench.schemas import InvalidStoreError
    from xbench.schemas.ground_truth import empty_region_problem
    from xbench.schemas.store import read_rows

    if case_rows is None or class_cols is None:
        from xbench.schemas import align

        case_rows, class_cols = align(sub_ds, gt_ds)
    timings = timings if timings is not None else {}
    where = where or str(gt_ds.name)
    classes = tuple(gt_ds.classes)
    unsupported = set(getattr(sub_ds, "unsupported", ()))
    supported = np.array([c not in unsupported for c in classes], dtype=bool)
    labels = np.asarray(gt_ds.labels, dtype=np.int8)
    present = np.asarray(case_rows) >= 0
    partial = not present.all()
    case_id = np.asarray(gt_ds.case_id, dtype=str)
    rows_all = case_rows
    if partial:  # the cases present, as if the ground truth held only them (case_row: their new rows)
        case_row = np.cumsum(present) - 1
        labels, case_id, case_rows = labels[present], case_id[present], np.asarray(case_rows)[present]
    t0 = time.perf_counter()
    scores = np.asarray(sub_ds.scores)[case_rows][:, class_cols]
    prob = probabilities(scores, sub_ds.score_kind)
    prob[:, ~supported] = np.nan
    timings["recognition"] = timings.get("recognition", 0.0) + time.perf_counter() - t0

    ri = np.asarray(gt_ds.region_index, dtype=np.int64).reshape(-1, 2)
    keep_region = supported[ri[:, 1]] & present[ri[:, 0]] if partial and ri.size else supported[ri[:, 1]]
    keep = np.flatnonzero(keep_region) if ri.size else np.zeros(0, np.int64)
    K = keep.size
    H, W = (int(s) for s in gt_ds.grid)
    dtype = count_dtype((H, W))
    out = GroundingCounts(np.empty((K, N_THRESHOLDS), dtype), np.empty((K, N_THRESHOLDS), dtype),
                          np.empty(K, bool), np.empty(K, np.int32), np.empty(K, np.float64), np.empty(K, np.int32),
                          np.empty(K, bool) if hasattr(gt_ds, "orig_size") else None)
    tol = float(pointing_tolerance)
    if not (np.isfinite(tol) and tol >= 0.0):
        raise ScoreInputError(f"the pointing tolerance must be a finite distance >= 0 (pixels); got {pointing_tolerance!r}")
    # original pixels per grid cell (height, width) of each kept pair's case
    # (a ground-truth-like object without orig_size gets no tolerant column: its metric is then null)
    cell = (np.asarray(gt_ds.orig_size, dtype=np.float64)[ri[keep, 0]] / np.array([H, W], dtype=np.float64)
            if K and out.hit_tolerant is not None else np.ones((K, 2)))
    cell = np.ascontiguousarray(cell)
    masks_arr = gt_ds.region_mask
    step = int(mask_chunk or (masks_arr.chunks[0] if hasattr(masks_arr, "chunks") else 256))
    sal = sub_ds.saliency
    plan = resize_plan(tuple(sal.shape[2:]), (H, W))
    # raw maps are held as stored (float16 maps at half the size) and widened to float32 chunk by chunk
    map_dtype = np.float16 if np.dtype(sal.dtype) == np.float16 else np.float32
    batch = max(1, MAP_BATCH_BYTES // max(int(np.prod(sal.shape[2:])) * np.dtype(map_dtype).itemsize, 1))
    sub_rows = rows_all[ri[keep, 0]] if K else np.zeros(0, np.int64)
    sub_cols = class_cols[ri[keep, 1]] if K else np.zeros(0, np.int64)
    problems: list = []
    first_empty: list[int] = []
    t_read = t_count = 0.0

    scratch = threading.local()  # one decoded region chunk per thread, reused from chunk to chunk

    def chunk(task, maps, m0):
        c0, c1, p0, p1 = task
        t0 = time.perf_counter()
        if getattr(scratch, "masks", None) is None:
            scratch.masks = np.empty((step, H, W), dtype=bool)
        block = read_rows(masks_arr, c0, c1, f"{where}/region_mask", problems, out=scratch.masks)
        t1 = time.perf_counter()
        if block is None:
            return t1 - t0, 0.0, 0
        block = np.ascontiguousarray(block, dtype=bool)
        local = np.ascontiguousarray(keep[p0:p1] - c0)
        count_pairs_into(np.ascontiguousarray(maps[p0 - m0:p1 - m0], dtype=np.float32), block, local, plan,
                         GroundingCounts(*(None if a is None else a[p0:p1] for a in out)), cell=cell[p0:p1],
                         tolerance=tol)
        # a kept region is empty when its |R| is 0; the regions of unsupported classes are checked here
        empty = local[out.region_pixels[p0:p1] == 0]
        other = np.setdiff1d(np.arange(c1 - c0), local, assume_unique=True)
        if other.size:
            other = other[~block[other].reshape(other.size, -1).any(axis=1)]
            empty = np.concatenate([empty, other])
        if empty.size:
            first_empty.append(c0 + int(empty.min()))
        return t1 - t0, time.perf_counter() - t1, p1 - p0

    with ThreadPoolExecutor(max_workers=workers or _workers()) as pool:
        for tasks in _region_chunks(int(ri.shape[0]), step, keep, batch):
            m0, m1 = tasks[0][2], tasks[-1][3]
            t0 = time.perf_counter()
            maps = _gather_maps(sal, sub_rows[m0:m1], sub_cols[m0:m1], pool, dtype=map_dtype)
            t1 = time.perf_counter()
            timings["read_maps"] = timings.get("read_maps", 0.0) + t1 - t0
            for tr, tc, n in pool.map(lambda t: chunk(t, maps, m0), tasks):
                t_read += tr
                t_count += tc
                if progress is not None and n:
                    progress(n)
            timings["grounding_pass"] = timings.get("grounding_pass", 0.0) + time.perf_counter() - t1
    # thread-seconds (summed over the workers), for where the time goes; the wall time is grounding_pass
    timings["read_regions_thread_s"] = timings.get("read_regions_thread_s", 0.0) + t_read
    timings["resize_and_bin_thread_s"] = timings.get("resize_and_bin_thread_s", 0.0) + t_count
    if first_empty:
        problems.append(empty_region_problem(where, min(first_empty)))
    if problems:
        if region_problems is None:
            raise InvalidStoreError(problems)
        region_problems.extend(problems)
    pair_case = case_row[ri[keep, 0]] if partial else ri[keep, 0]
    pair_class = ri[keep, 1]
    order = np.lexsort((pair_case, pair_class))
    if np.array_equal(order, np.arange(K)):  # already by class, then case (e.g. a single-class dataset)
        order = slice(None)
    return DatasetCounts(
        name=gt_ds.name, classes=classes, supported=supported, case_id=case_id,
        labels=labels, prob=prob, pair_case=pair_case[order], pair_class=pair_class[order],
        region_pixels=out.region_pixels[order], hit=out.hit[order], b=_take_rows_inplace(out.b, order),
        br=_take_rows_inplace(out.br, order), grid=(H, W),
        extra={ENERGY_COLUMN: out.energy[order],
               **({} if out.hit_tolerant is None else {TOLERANT_COLUMN: out.hit_tolerant[order]})},
    )


def _take_rows_inplace(a: np.ndarray, order: np.ndarray | slice, cols: int = 8) -> np.ndarray:
    """``a[order]`` for a (K, T) array, written back into ``a`` a few columns at a time.

    The count arrays are the scorer's largest per-pair arrays (404 B per pair for both); reordering them
    with ``a[order]`` would hold a second full copy, this holds a (K, ``cols``) temporary. Returns ``a``.
    """
    if isinstance(order, slice):
        return a
    for j in range(0, a.shape[1], cols):
        a[:, j:j + cols] = a[order, j:j + cols]  # the right side is a copy, so this is a permutation
    return a


def region_mask_problems(gt_ds, where: str) -> list:
    """The region_mask problems :func:`count_dataset` would find, for a dataset that is not scored."""
    from xbench.schemas.ground_truth import region_mask_problems as scan

    return scan(gt_ds.region_mask, where)


# ------------------------------------------------------------------------------------------- metrics
def _mean_defined(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _defined(x) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x


def _curve_means(view: R.PairView, values, sel: np.ndarray | None, block: int = 16) -> np.ndarray:
    """Class means (T,) of a curve metric's per-pair values over the selected pairs, ``block`` threshold columns
    at a time (memory: (P, block) temporaries, not (P, T) float64). For Dice and IoU over all pairs these are
    bit for bit :func:`xbench.score.grounding.class_mean_curves`."""
    out = np.full(N_THRESHOLDS, np.nan)
    for k0 in range(0, N_THRESHOLDS, block):
        k1 = min(N_THRESHOLDS, k0 + block)
        v = values(view.columns(slice(k0, k1)))
        out[k0:k1] = class_means(v if sel is None else v[sel])
    return out


def _at(view: R.PairView, values, k: int) -> np.ndarray:
    """Per-pair values (P,) of a curve metric at threshold index ``k``."""
    return values(view.columns(slice(k, k + 1)))[:, 0]


def _mean(v: np.ndarray) -> float | None:
    if v.size == 0:
        return None
    if v.dtype == bool:  # a share of hits, counted exactly
        return float(np.count_nonzero(v) / v.size)
    return float(np.mean(v))


def class_grounding_point(dc: DatasetCounts, idx: np.ndarray, taus: Mapping[str, int] | None = None, *,
                          scope: str = "class") -> tuple[dict, dict, dict]:
    """Point estimates of every registered grounding metric of ``scope`` for the positive pairs ``idx`` of
    one class (or the phrase rows ``idx`` of a category, ``scope="phrase"``).

    Returns (values {key: float or None}, chosen {tau key: index}, per_pair {key: (P,) values, NaN for
    pairs a metric does not select} of the metrics with a pairs-table column). Metrics sharing ``values``
    and ``pairs`` functions share one pass over the counts.
    """
    view = R.PairView(dc, idx)
    sels: dict = {}

    def sel_of(m):
        if m.pairs is None:
            return None
        if m.pairs not in sels:
            sels[m.pairs] = np.asarray(m.pairs(view), dtype=bool)
        return sels[m.pairs]

    curves: dict = {}
    out: dict = {}
    chosen: dict[str, int] = {}
    by_key: dict[str, int] = {}  # threshold index each curve metric used
    per_pair: dict = {}
    for m in R.metrics("grounding", scope=scope):
        sel = sel_of(m)
        if not m.curve:
            v = np.asarray(m.values(view))
            out[m.key] = _mean(v if sel is None else v[sel])
            pp = v
        else:
            rule = m.threshold
            if isinstance(rule, R.ChosenBy):
                k = by_key[rule.key]
                src = (m.values, m.pairs)
                pp = _at(view, m.values, k)
                out[m.key] = float(curves[src][k]) if src in curves else _mean(pp if sel is None else pp[sel])
            else:
                src = (m.values, m.pairs)
                if src not in curves:
                    curves[src] = _curve_means(view, m.values, sel)
                means = curves[src]
                if isinstance(rule, R.Best):
                    k = taus[rule.tau_key] if taus is not None else best_threshold(means)
                    chosen[rule.tau_key] = k
                else:
                    k = int(rule)
                out[m.key] = _defined(means[k]) if (sel is None or sel.any()) else None
                pp = _at(view, m.values, k) if m.pair_column else None
            by_key[m.key] = k
        if m.pair_column:
            pp = np.asarray(pp, dtype=np.float64)
            per_pair[m.key] = pp if sel is None else np.where(sel, pp, np.nan)
    return out, chosen, per_pair


def _class_point(dc: DatasetCounts, c: int, taus: Mapping[str, int] | tuple | None,
                 undefined: list | None = None) -> tuple[dict, dict]:
    """Point estimates of one class and its per-pair values (for the pairs table); the metrics undefined for
    it are appended to ``undefined`` (:class:`Undefined`)."""
    name = dc.classes[c]
    idx = dc.class_pairs(c)
    labelled = dc.labels[:, c] != -1
    entry: dict = {"n_positive": int(np.count_nonzero(dc.labels[:, c] == 1)), "n_regions": int(idx.size),
                   "n_labelled": int(np.count_nonzero(labelled))}
    per_pair: dict = {}
    grounding = R.metrics("grounding")
    if idx.size:
        values, chosen, pp = class_grounding_point(dc, idx, None if taus is None else R.tau_map(taus))
        entry.update(values)
        entry.update({k: float(THRESHOLDS[chosen[k]]) for k in R.tau_keys()})
        per_pair = {"idx": idx, **pp}
    else:
        if undefined is not None and any(m.warn for m in grounding):
            undefined.append(Undefined(str(dc.name), str(name), NO_POSITIVE_REGION))
        entry.update({m.key: None for m in grounding})
        entry.update({k: None for k in R.tau_keys()})
    reasons: list = []
    sums = recognition_sums(dc.labels[labelled, c], dc.prob[labelled, c], name=f"{dc.name}/{name}", undefined=reasons)
    if undefined is not None:
        undefined += [Undefined(str(dc.name), str(name), r) for r in reasons]
    entry.update({m.key: _defined(m.values(sums)[0]) for m in R.metrics("recognition")})
    return entry, per_pair


def _class_taus(dc: DatasetCounts, thresholds: Thresholds | None) -> dict[str, dict[str, int]] | None:
    if thresholds is None:
        return None
    given = thresholds.get(dc.name, {})
    keys = R.tau_keys()
    out, missing = {}, []
    for c, name in enumerate(dc.classes):
        if not dc.supported[c] or not np.any(dc.pair_class == c):
            continue
        pair = given.get(name)
        taus = {} if pair is None else (dict(pair) if isinstance(pair, Mapping) else dict(zip(keys, pair)))
        if any(taus.get(k) is None for k in keys):
            missing.append(f"{dc.name}/{name}")
            continue
        out[name] = {k: threshold_index(taus[k]) for k in keys}
    if missing:
        raise ThresholdsError(f"the transferred thresholds lack {'/'.join(keys)} for {', '.join(missing)}; "
                              "score the earlier split with these classes or drop --thresholds-from")
    return out


def metrics_from_counts(counts: Mapping[str, DatasetCounts], *, bootstrap: int = 1000, seed: int = 0,
                        thresholds: Thresholds | None = None, level: float = 0.95,
                        timings: dict[str, float] | None = None,
                        undefined: list | None = None) -> tuple[dict, dict]:
    """Metrics (``metrics.json`` "overall" and "datasets" parts) from per-dataset counts.

    Every metric of :data:`xbench.score.registry.REGISTRY` is computed: per class, the dataset summary
    (mean over the classes where it is defined) and the overall mean over datasets.

    Parameters
    ----------
    counts : {dataset: DatasetCounts}
    bootstrap : int
        Resamples per dataset (0 disables intervals; ``ci95`` values are then absent).
    seed : int
        Seeds one ``numpy.random.default_rng(seed)`` consumed in sorted dataset order.
    thresholds : {dataset: {class: (tau_dice, tau_iou)}}, optional
        Use these (grid) thresholds instead of searching (e.g. from a validation split); a class's entry
        is a tuple in :func:`xbench.score.registry.tau_keys` order or a {tau key: tau} mapping.
    undefined : list, optional
        Gets one :class:`Undefined` per class and reason a metric is undefined (reported as null); no
        Python warning is issued either way (:func:`undefined_notes` words them for people).

    Returns
    -------
    (metrics, per_pair): ``metrics`` = {"overall": ..., "datasets": ...} and ``per_pair`` =
    {dataset: {class column: per-pair arrays}} for :func:`pairs_table`.
    """
    timings = timings if timings is not None else {}
    # first, so that unusable thresholds fail before any work
    class_taus = {name: _class_taus(counts[name], thresholds) for name in sorted(counts)}
    with ThreadPoolExecutor(1) as pool:
        # the resamples need no point estimate: they run (on their own threads) while the point metrics are
        # computed here, and fill the cores that one dataset's bootstrap leaves idle at the end
        t_boot = time.perf_counter()
        reps = (pool.submit(bootstrap_replicates, counts, n_resamples=bootstrap, seed=seed,
                            taus=class_taus if thresholds is not None else None)
                if bootstrap > 0 and counts else None)
        metrics, per_pair_all = _point_metrics(counts, class_taus, timings, undefined)
        if reps is not None:
            _add_intervals(metrics, reps.result(), level)
            reps = None  # the future held the replicates
            release_freed_memory()
            timings["bootstrap"] = timings.get("bootstrap", 0.0) + time.perf_counter() - t_boot
    return metrics, per_pair_all


def _point_metrics(counts: Mapping[str, DatasetCounts], class_taus: dict, timings: dict,
                   undefined: list | None = None) -> tuple[dict, dict]:
    """The point estimates of :func:`metrics_from_counts`: (metrics without intervals, per-pair values)."""
    datasets: dict = {}
    per_pair_all: dict = {}
    class_keys, summary_keys = R.class_keys(), R.summary_keys()
    for name in sorted(counts):
        dc = counts[name]
        t0 = time.perf_counter()
        taus = class_taus[name]
        classes: dict = {}
        per_pair_all[name] = {}
        for c, cname in enumerate(dc.classes):
            if not dc.supported[c]:
                entry = {"n_positive": int(np.count_nonzero(dc.labels[:, c] == 1)),
                         "n_regions": int(np.count_nonzero(dc.pair_class == c)),
                         "n_labelled": int(np.count_nonzero(dc.labels[:, c] != -1))}
                entry.update({k: None for k in class_keys})
                entry.update({k: None for k in R.tau_keys()})
                entry.update({"unsupported": True, "reason": UNSUPPORTED_REASON})
                classes[cname] = entry
                continue
            entry, pp = _class_point(dc, c, None if taus is None else taus.get(cname), undefined)
            classes[cname] = entry
            per_pair_all[name][c] = pp
        summary = {}
        for k in summary_keys:
            m = R.metric(k)
            if m.kind == "dataset":
                summary[k] = _defined(m.values(dc, np.ones((1, dc.n_cases)))[0])
            else:
                summary[k] = _mean_defined(e[k] for e in classes.values())
        timings["metrics"] = timings.get("metrics", 0.0) + time.perf_counter() - t0
        datasets[name] = {"n_cases": dc.n_cases, "grid": [int(g) for g in dc.grid], "summary": summary,
                          "classes": classes}
    overall = {k: _mean_defined(d["summary"][k] for d in datasets.values()) for k in R.overall_keys()}
    return {"overall": overall, "datasets": datasets}, per_pair_all


def _add_intervals(metrics: dict, reps: Mapping, level: float) -> None:
    """Add the ``ci95`` entries of the bootstrap replicates ``reps`` (the one resampling path,
    :mod:`xbench.score.bootstrap`, shared with the report and paired comparisons) to ``metrics``."""
    datasets = metrics["datasets"]
    for name, rep in reps.items():
        ds_classes = datasets[name]["classes"]
        for cname, stats in rep.classes.items():
            ds_classes[cname]["ci95"] = percentile_intervals(stats, level)
        # after "classes" in metrics.json, as before
        datasets[name]["ci95"] = percentile_intervals(rep.summary, level)
    metrics["ci95"] = percentile_intervals(overall_replicates(reps), level)


_PAIR_BASE = ["dataset", "case_id", "class", "label", "probability", "predicted", "has_region", "region_pixels", "hit"]
#: The pairs-table columns of the contract's metrics; :func:`pair_table_columns` adds any registered later.
PAIR_COLUMNS = _PAIR_BASE + ["dice_fixed", "iou_fixed", "dice_best", "iou_best"]


def pair_table_columns() -> list[str]:
    """The pairs-table columns: the pair's identity and counts, then one per registered metric with
    ``pair_column`` (its per-pair value at the metric's threshold; NaN where the metric does not select the pair)."""
    return _PAIR_BASE + list(R.pair_columns())


class _DatasetPairs:
    """The pairs-table rows of one dataset, built for any range of its cases (rows run by case, then class)."""

    def __init__(self, dc: DatasetCounts, per_pair: Mapping[int, dict]):
        self.dc = dc
        sel = np.zeros(dc.labels.shape, bool)
        cols = np.flatnonzero(dc.supported)
        sel[:, cols] = dc.labels[:, cols] != -1
        sel[dc.pair_case, dc.pair_class] |= dc.supported[dc.pair_class]
        self.selected = sel
        # the row in the pair arrays of each (case, class), -1 where it has no region
        self.pair_of = np.full(dc.labels.shape, -1, np.int64)
        self.pair_of[dc.pair_case, dc.pair_class] = np.arange(dc.pair_case.size)
        self.values = {key: np.full(dc.pair_case.size, np.nan) for key in R.pair_columns()}
        for pp in per_pair.values():
            if pp:
                for key in self.values:
                    self.values[key][pp["idx"]] = pp[key]

    def rows(self, lo: int = 0, hi: int | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """(case rows, class columns, numeric columns) of the selected pairs of cases ``lo..hi-1``."""
        dc = self.dc
        r, c = np.nonzero(self.selected[lo:hi])
        r += lo
        k = self.pair_of[r, c]
        has = k >= 0
        cols = {"label": dc.labels[r, c].astype(np.int8), "probability": dc.prob[r, c],
                "predicted": dc.prob[r, c] >= 0.5, "has_region": has,
                "region_pixels": np.where(has, dc.region_pixels[k], 0).astype(np.int64), "hit": has & dc.hit[k]}
        cols.update({key: np.where(has, v[k], np.nan) for key, v in self.values.items()})
        return r, c, cols


def _frame(data: dict) -> pd.DataFrame:
    import pandas as pd

    data["hit"] = pd.arrays.BooleanArray(data["hit"], ~data["has_region"])
    return pd.DataFrame(data, columns=pair_table_columns(), copy=False)


def pairs_table(counts: Mapping[str, DatasetCounts], per_pair: Mapping[str, Mapping[int, dict]]) -> pd.DataFrame:
    """One row per (case, class) pair of the supported classes that is labelled or has a region.

    Columns :data:`PAIR_COLUMNS`: dataset, case_id, class, label (1/0/-1), probability, predicted
    (p >= 0.5), has_region, region_pixels, hit, dice_fixed, iou_fixed, dice_best, iou_best (grounding
    columns are empty for pairs without a region; dice_best/iou_best use the class's chosen thresholds).
    ``dataset``, ``case_id`` and ``class`` are categoricals: a full benchmark has ~70,000 rows per 10,000
    cases, and string columns would cost ~90 B a row. :func:`write_pairs_parquet` writes the same rows
    without holding them all.
    """
    import pandas as pd

    names = sorted(counts)
    if not names:
        return pd.DataFrame(columns=pair_table_columns())
    parts = [(name, _DatasetPairs(counts[name], per_pair.get(name, {})).rows()) for name in names]
    data = {k: np.concatenate([cols[k] for _, (_, _, cols) in parts]) for k in parts[0][1][2]}
    # categories must be unique: case ids (and class names) may repeat across datasets
    ids = np.concatenate([np.asarray(counts[name].case_id, dtype=str)[r] for name, (r, _, _) in parts])
    classes = np.concatenate([np.asarray(counts[name].classes, dtype=str)[c] for name, (_, c, _) in parts])
    data["dataset"] = pd.Categorical.from_codes(np.repeat(np.arange(len(names)), [r.size for _, (r, _, _) in parts]),
                                                categories=names)
    data["case_id"] = pd.Categorical(ids)
    data["class"] = pd.Categorical(classes)
    return _frame(data)


#: NumPy dtypes of the pairs table's non-label columns (a registered metric's column is float64), read by the
#: Parquet schema, the pandas metadata and the column builder alike; "boolean" is pandas' nullable bool (bool
#: with nulls in Arrow), so ``hit`` (empty without a region) reads back as one.
_PAIR_DTYPES = {"label": "int8", "probability": "float64", "predicted": "bool", "has_region": "bool",
                "region_pixels": "int64", "hit": "boolean"}
#: The label columns, stored as dictionaries (int32 codes) and read back as categoricals.
_LABEL_COLUMNS = ("dataset", "case_id", "class")


def _pair_dtype(column: str) -> str:
    return _PAIR_DTYPES.get(column, "float64")


def _arrow_type(dtype: str):
    import pyarrow as pa

    return pa.bool_() if dtype == "boolean" else pa.from_numpy_dtype(np.dtype(dtype))


def _pandas_metadata(first_categories: Mapping[str, int]) -> bytes:
    """The ``pandas`` schema metadata pyarrow's ``Table.from_pandas`` writes for :func:`pairs_table`'s
    frames (no index; the label columns categorical, with the category counts of the first row group, as
    from_pandas records them), so ``pandas.read_parquet`` restores the same dtypes; built here so that writing
    needs no pandas import (0.3-0.5 s of one core)."""
    from importlib.metadata import PackageNotFoundError, version

    import pyarrow as pa

    cols = []
    for name in pair_table_columns():
        if name in _LABEL_COLUMNS:
            n = int(first_categories[name])
            codes = "int8" if n < 127 else "int16" if n < 32767 else "int32" if n < 2**31 - 1 else "int64"  # pandas' codes
            cols.append({"name": name, "field_name": name, "pandas_type": "categorical", "numpy_type": codes,
                         "metadata": {"num_categories": n, "ordered": False}})
        else:
            dtype = _pair_dtype(name)
            cols.append({"name": name, "field_name": name, "pandas_type": "bool" if dtype == "boolean" else dtype,
                         "numpy_type": dtype, "metadata": None})
    try:
        pandas_version = version("pandas")
    except PackageNotFoundError:  # pragma: no cover - pandas is a dependency of the scorer
        pandas_version = "2.0.0"
    meta = {"index_columns": [], "column_indexes": [], "columns": cols, "attributes": {},
            "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": pandas_version}
    return json.dumps(meta).encode()


def _pairs_schema(first_categories: Mapping[str, int]):
    import pyarrow as pa

    label = pa.dictionary(pa.int32(), pa.string())
    fields = [(k, label if k in _LABEL_COLUMNS else _arrow_type(_pair_dtype(k))) for k in pair_table_columns()]
    return pa.schema(fields, metadata={b"pandas": _pandas_metadata(first_categories)})


def _arrow_numbers(values: np.ndarray, dtype: str):
    """A pyarrow array of a 1-D numeric numpy array, wrapping its buffer. (``pyarrow.array`` would import
    pandas to check whether it was handed a pandas object: 0.3-0.5 s the scorer does not need.)"""
    values = np.ascontiguousarray(values, dtype=dtype)
    import pyarrow as pa

    return pa.Array.from_buffers(_arrow_type(dtype), values.size, [None, pa.py_buffer(values)])


def _arrow_bools(values: np.ndarray, valid: np.ndarray | None = None):
    """A pyarrow bool array (bit-packed, least significant bit first), null where ``valid`` is False."""
    import pyarrow as pa

    values = np.asarray(values, dtype=bool)
    bits = pa.py_buffer(np.packbits(values, bitorder="little"))
    if valid is None:
        return pa.Array.from_buffers(pa.bool_(), values.size, [None, bits])
    valid = np.asarray(valid, dtype=bool)
    mask = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), values.size, [mask, bits], null_count=int(values.size - valid.sum()))


def _arrow_strings(strings) -> object:
    """A pyarrow string array of Python strings (UTF-8 bytes and int32 offsets)."""
    import pyarrow as pa

    encoded = [str(x).encode("utf-8") for x in strings]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def _iter_pairs_arrow(counts: Mapping[str, DatasetCounts], per_pair: Mapping[str, Mapping[int, dict]], max_rows: int):
    """The rows of :func:`pairs_table`, in the same order, as pyarrow columns of about ``max_rows`` rows at a
    time (whole cases; each batch with its own categories): ({column: array}, {label column: categories})."""
    import pyarrow as pa

    for name in sorted(counts):
        dc = counts[name]
        ds = _DatasetPairs(dc, per_pair.get(name, {}))
        per_case = max(1, max_rows // max(1, dc.labels.shape[1]))
        for lo in range(0, max(dc.n_cases, 1), per_case):
            hi = min(dc.n_cases, lo + per_case)
            r, c, data = ds.rows(lo, hi)
            labels = {"dataset": (np.zeros(r.size, np.int32), [name]),
                      "case_id": (r - lo, np.asarray(dc.case_id[lo:hi], dtype=str).tolist()),
                      "class": (c, list(dc.classes))}
            cols = {k: pa.DictionaryArray.from_arrays(_arrow_numbers(codes, "int32"), _arrow_strings(cats))
                    for k, (codes, cats) in labels.items()}
            for k, v in data.items():
                dtype = _pair_dtype(k)
                if dtype == "boolean":  # null where the pair has no region
                    cols[k] = _arrow_bools(v, valid=data["has_region"])
                elif dtype == "bool":
                    cols[k] = _arrow_bools(v)
                else:
                    cols[k] = _arrow_numbers(v, dtype)
            yield cols, {k: len(cats) for k, (_, cats) in labels.items()}


def write_pairs_parquet(path: str | os.PathLike, counts: Mapping[str, DatasetCounts],
                        per_pair: Mapping[str, Mapping[int, dict]], *, max_rows: int = 1 << 16) -> None:
    """Write :func:`pairs_table` to a Parquet file one row group of ~``max_rows`` rows at a time.

    Memory holds one row group, not the table (about 80 B per labelled pair: ~55 MB at 10x the paper's
    scale). ``dataset``, ``case_id`` and ``class`` are dictionary columns, read back as categoricals, and
    ``pandas.read_parquet`` gives the dtypes of :func:`pairs_table` (the file carries pandas' metadata).
    Written with pyarrow alone: no pandas import.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = schema = None
    try:
        for cols, categories in _iter_pairs_arrow(counts, per_pair, max_rows):
            if writer is None:
                schema = _pairs_schema(categories)
                writer = pq.ParquetWriter(str(path), schema)
            writer.write_table(pa.Table.from_arrays([cols[k] for k in schema.names], schema=schema))
        if writer is None:  # no dataset: an empty table with the columns
            schema = _pairs_schema({"dataset": 0, "case_id": 0, "class": 0})
            pq.write_table(schema.empty_table(), str(path))
    finally:
        if writer is not None:
            writer.close()


def _shown(path) -> str:
    """An input as recorded in metrics.json: a local path made absolute, a URL as given."""
    from xbench.schemas.paths import is_remote

    return str(path) if is_remote(path) else str(Path(path).resolve())


def thresholds_from_metrics(source: str | os.PathLike | Mapping) -> dict[str, dict[str, tuple[float, float]]]:
    """{dataset: {class: (tau_dice, tau_iou)}} from an earlier ``metrics.json`` (a path or its dict).

    A path is read through the bounded JSON reader (:func:`xbench.schemas.inputs.load_json`: size, depth,
    duplicate keys, numbers); anything that is not an XBench metrics.json raises :class:`ThresholdsError`
    (an :class:`~xbench.schemas.errors.InputError`: one line, exit 2)."""
    if isinstance(source, Mapping):
        data, where = source, "the transferred thresholds"
    else:
        from xbench.schemas.errors import InputError
        from xbench.schemas.inputs import load_json

        where = str(source)
        if not os.path.lexists(source):
            raise ThresholdsError(f"{source}: no such metrics.json (for --thresholds-from)")
        try:
            data = load_json(source, where=f"{source} (--thresholds-from)")
        except InputError as exc:
            raise ThresholdsError(exc.problems) from None
    try:
        found = {d: {c: (e.get("tau_dice"), e.get("tau_iou")) for c, e in ds["classes"].items()}
                 for d, ds in data["datasets"].items()}
    except (KeyError, TypeError, AttributeError):
        found = None
    if found is None or not all(isinstance(t, (int, float, type(None))) and not isinstance(t, bool)
                                for cls in found.values() for pair in cls.values() for t in pair):
        raise ThresholdsError(f"{where}: thresholds must come from an xbench metrics.json: it needs "
                              "datasets.<dataset>.classes.<class>.tau_dice / tau_iou (numbers)") from None
    return found


# ------------------------------------------------------------------------------------------ top level
def _dataset_names(gt, datasets: Sequence[str] | None) -> list[str]:
    """The dataset keys to score: ``datasets`` (in order, once each) or every one of the ground truth;
    :class:`~xbench.schemas.errors.UnknownNameError` for a key the ground truth lacks, with close matches."""
    import difflib

    from xbench.schemas.errors import UnknownNameError

    names = sorted(gt.datasets) if datasets is None else list(dict.fromkeys(datasets))
    unknown = [d for d in names if d not in gt.datasets]
    if unknown:
        close = sorted({m for d in unknown for m in difflib.get_close_matches(d, list(gt.datasets), n=2)})
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownNameError(f"dataset(s) {', '.join(unknown)} not in the ground truth; it has "
                               f"{', '.join(sorted(gt.datasets)) or 'none'}{hint}")
    return names


def check_inputs(submissions: Sequence[str | os.PathLike], gt, *, datasets: Sequence[str] | None = None,
                 allow_missing: bool = False):
    """Validate the ground truth and every submission against it, before anything is scored; the opened
    ground truth (:class:`xbench.schemas.GroundTruth`), to pass on to :func:`score_submission` with
    ``validate=False``.

    Raises :class:`~xbench.schemas.errors.InvalidStoreError` listing every problem (the ground truth's, when
    it has any, as its own validator lists them; else every submission's),
    :class:`~xbench.score.errors.MissingCasesError` when the only way the submissions fall short of the
    contract includes missing cases (its ``coverage`` says how many are present: ``allow_missing`` scores
    them), :class:`~xbench.schemas.errors.UnknownNameError` for an unknown dataset key. The region masks are
    checked while scoring decodes them (once), not here.
    """
    from xbench.schemas import GroundTruth, InvalidStoreError, read_ground_truth, validate_ground_truth, validate_submission
    from xbench.schemas.submission import MissingCases

    from .errors import MissingCasesError

    opened = gt if isinstance(gt, GroundTruth) else None
    gt_path = opened.path if opened is not None else gt
    if validate_ground_truth(gt_path, scan_masks=False):
        # only when something is wrong: the whole validation, so the problems listed are validate's
        raise InvalidStoreError(validate_ground_truth(gt_path))
    opened = opened if opened is not None else read_ground_truth(gt_path)
    names = _dataset_names(opened, datasets)
    total = sum(len(opened.datasets[d].case_id) for d in names)
    problems: list = []
    coverage: dict[str, tuple[int, int]] = {}
    for sub in submissions:
        found = validate_submission(sub, opened, datasets=names, allow_missing=allow_missing)
        missing = [p for p in found if isinstance(p, MissingCases)]
        if missing:
            coverage[str(sub)] = (total - sum(p.of - p.present for p in missing), total)
        problems += found
    if problems:
        # as if the ground truth had been validated whole first: its problems, else the submissions'
        gt_problems = validate_ground_truth(gt_path)
        if gt_problems:
            raise InvalidStoreError(gt_problems)
        raise MissingCasesError(problems, coverage) if coverage else InvalidStoreError(problems)
    return opened


def _partial_note(cases: int, of: int, not_scored: Sequence[str]) -> str:
    """The top-level note of a partial run's metrics.json (also the terminal's line)."""
    text = f"partial: {cases} of {of} cases"
    if not_scored:
        text += f"; not scored (no case in the submission): {', '.join(not_scored)}"
    return text + ("; every number is over the cases present only, not comparable with a full run's")


def _with_partial(metrics: dict, partial: Mapping[str, tuple[int, int]], cases: int, of: int,
                  not_scored: Sequence[str]) -> dict:
    """``metrics`` with the partial-run keys (contract §metrics.json, minor 3): per partially scored dataset
    ``"partial": {"cases", "of"}`` after its ``n_cases`` (also in its phrase entry), and the top-level
    ``"partial"`` note; added only to a partial run, so a full run's metrics.json is unchanged."""
    def insert(entry: dict, key: str, after: str, value) -> dict:
        out: dict = {}
        for k, v in entry.items():
            out[k] = v
            if k == after:
                out[key] = value
        if key not in out:
            out[key] = value
        return out

    datasets = {d: insert(e, "partial", "n_cases", {"cases": partial[d][0], "of": partial[d][1]}) if d in partial else e
                for d, e in metrics["datasets"].items()}
    out = {"partial": {"cases": int(cases), "of": int(of), **({"not_scored": list(not_scored)} if not_scored else {}),
                       "note": _partial_note(cases, of, not_scored)}}
    for k, v in metrics.items():
        out[k] = datasets if k == "datasets" else v
    phrases = out.get("phrases", {}).get("datasets", {})
    for d in list(phrases):
        if d in partial:
            after = "n_images" if "n_images" in phrases[d] else "n_phrases"
            phrases[d] = insert(phrases[d], "partial", after, {"cases": partial[d][0], "of": partial[d][1]})
    return out


def score_submission(submission_path: str | os.PathLike, gt_path, *, bootstrap: int = 1000,
                     seed: int = 0, thresholds: Thresholds | str | os.PathLike | None = None,
                     datasets: Sequence[str] | None = None, progress: Progress | None = None,
                     validate: bool = True, on_total: Callable[[int], None] | None = None,
                     pointing_tolerance: float = DEFAULT_POINTING_TOLERANCE,
                     allow_missing: bool = False) -> ScoreResult:
    """Score one submission store against a ground-truth store.

    Parameters
    ----------
    submission_path, gt_path : path
        ``.zarr`` directories or ``.zarr.zip`` files; both are only read. ``gt_path`` may also be the
        ground truth already opened (:func:`check_inputs` returns it), so it is not read twice.
    bootstrap : int
        Resamples for the 95 % intervals (0: none).
    seed : int
        Bootstrap seed.
    thresholds : mapping or path, optional
        Transferred best thresholds (see :func:`thresholds_from_metrics`).
    datasets : sequence of str, optional
        Score only these dataset keys of the ground truth.
    progress, on_total : callables, optional
        ``on_total(n_pairs)`` once, then ``progress(n)`` as positive pairs are done (for a progress bar).
    validate : bool
        Validate both stores first (:func:`check_inputs`; default). Turn off only for stores that
        :func:`check_inputs` has just passed, with the same ``datasets`` and ``allow_missing``.
    pointing_tolerance : float
        Tolerance of the tolerant pointing game in original pixels (default 15, Zhang et al. 2018).
    allow_missing : bool
        Score the cases the submission holds when it lacks some of the ground truth's (a smoke run): every
        metric and interval is then computed on those cases alone, exactly as against a ground truth of only
        them, a dataset with none of its cases is not scored, and metrics.json says so ("partial"). Without
        it a missing case is a problem (:class:`~xbench.score.errors.MissingCasesError`).

    The result never issues a Python warning: classes whose metrics are undefined (null in metrics.json)
    are listed in ``ScoreResult.notes``, one counted line per dataset and reason (:func:`undefined_notes`).

    Raises
    ------
    xbench.schemas.InvalidStoreError
        Listing every problem of the ground truth or the submission (``MissingCasesError`` among them).
    xbench.schemas.errors.UnknownNameError
        For unknown dataset keys.
    xbench.score.errors.ThresholdsError
        For unusable transferred thresholds.
    """
    from xbench import __version__
    from xbench.schemas import GroundTruth, InvalidStoreError, Problem, align, read_ground_truth, read_submission

    from .warm import start_background_warm

    start_background_warm()  # a first run compiles the ranking kernel on another core meanwhile
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if validate:
        gt = check_inputs([submission_path], gt_path, datasets=datasets, allow_missing=allow_missing)
        timings["validate"] = time.perf_counter() - t0
    else:
        gt = gt_path if isinstance(gt_path, GroundTruth) else read_ground_truth(gt_path)
    gt_path = gt.path
    t0 = time.perf_counter()
    names = _dataset_names(gt, datasets)
    sub = read_submission(submission_path)
    aligned = {}
    not_scored: list[str] = []
    for name in names:
        if name in sub.datasets:
            aligned[name] = align(sub.datasets[name], gt.datasets[name], allow_missing=allow_missing)
        if name not in aligned or not (aligned[name][0] >= 0).any():
            if not allow_missing:
                raise InvalidStoreError([Problem(f"{submission_path}/{name}", "dataset of the ground truth is missing")])
            not_scored.append(name)
    scored = [d for d in names if d not in not_scored]
    if not scored:
        raise InvalidStoreError([Problem(str(submission_path), "holds no case of the ground truth"
                                         + (f" in {', '.join(names)}" if datasets is not None else "")
                                         + "; nothing to score")])
    n_of = {d: len(gt.datasets[d].case_id) for d in names}
    n_in = {d: int(np.count_nonzero(aligned[d][0] >= 0)) if d in aligned else 0 for d in names}
    partial = {d: (n_in[d], n_of[d]) for d in scored if n_in[d] < n_of[d]}
    if thresholds is not None and not isinstance(thresholds, Mapping):
        thresholds = thresholds_from_metrics(thresholds)
    if thresholds is not None:  # unusable thresholds fail here, before any map is read
        for name in scored:
            _class_taus(_classes_with_pairs(sub.datasets[name], gt.datasets[name], aligned[name][0]), thresholds)
    timings["open"] = time.perf_counter() - t0
    if on_total is not None:
        on_total(int(sum(_pairs_present(gt.datasets[d], aligned[d][0]) for d in scored)))

    counts: dict[str, DatasetCounts] = {}
    region_problems: list = []
    for name in scored:
        case_rows, class_cols = aligned[name]
        counts[name] = count_dataset(sub.datasets[name], gt.datasets[name], case_rows=case_rows,
                                     class_cols=class_cols, progress=progress, timings=timings,
                                     region_problems=region_problems, where=f"{gt_path}/{name}",
                                     pointing_tolerance=pointing_tolerance)
        release_freed_memory()
    for name in sorted(set(gt.datasets) - set(scored)):  # not scored, but part of the ground truth
        region_problems += region_mask_problems(gt.datasets[name], f"{gt_path}/{name}")
    # phrase rows (free-text queries), scored apart from the classes (score/phrases.py)
    from .phrases import score_phrases

    phrases, phrase_counts = score_phrases(sub, gt, scored, bootstrap=bootstrap, seed=seed, where=str(gt_path),
                                           region_problems=region_problems, timings=timings,
                                           cases={d: aligned[d][0] >= 0 for d in partial})
    if region_problems:
        from xbench.schemas import validate_ground_truth

        # nothing has been written yet; list every problem of the ground truth, as its validator does
        raise InvalidStoreError(validate_ground_truth(gt_path) or region_problems)
    undefined: list[Undefined] = []
    metrics, per_pair = metrics_from_counts(counts, bootstrap=bootstrap, seed=seed, thresholds=thresholds,
                                            timings=timings, undefined=undefined)
    if phrases:  # only then: metrics.json of a store without phrase rows is unchanged
        metrics["phrases"] = phrases
    release_freed_memory()
    t0 = time.perf_counter()
    gt_sha256 = gt.sha256
    timings["hash_gt"] = time.perf_counter() - t0
    header = {"schema": 1, "schema_minor": max(m.minor for m in R.metrics()), "version": __version__,
              "gt_sha256": gt_sha256, "submission": dict(sub.attrs),
              "bootstrap": {"n_resamples": int(bootstrap), "seed": int(seed), "method": "percentile",
                            "level": 0.95, "resampling": "cases within each dataset"},
              "thresholds": "transferred" if thresholds is not None else "searched per class (0.00..1.00, step 0.01)",
              "datasets": scored,
              "pointing_tolerance_px": float(pointing_tolerance),
              "inputs": {"submission": _shown(submission_path), "gt": _shown(gt_path)}}
    if phrases:
        header["schema_minor"] = max(PHRASES_METRICS_MINOR, int(header.get("schema_minor", 0)))
    if partial or not_scored:  # only then: a full run's metrics.json is unchanged
        header["schema_minor"] = max(PARTIAL_METRICS_MINOR, int(header.get("schema_minor", 0)))
        metrics = _with_partial(metrics, partial, sum(n_in.values()), sum(n_of.values()), not_scored)
    return ScoreResult(metrics={"xbench": header, **metrics}, counts=counts, per_pair=per_pair, timings=timings,
                       phrase_counts=phrase_counts, notes=undefined_notes(undefined))


def _classes_with_pairs(sub_ds, gt_ds, case_rows: np.ndarray):
    """What :func:`_class_taus` reads of a dataset's counts (name, classes, supported, pair_class), from the
    stores before counting: the supported classes' regions of the cases present."""
    from types import SimpleNamespace

    unsupported = set(getattr(sub_ds, "unsupported", ()))
    supported = np.array([c not in unsupported for c in gt_ds.classes], dtype=bool)
    ri = np.asarray(gt_ds.region_index, dtype=np.int64).reshape(-1, 2)
    kept = ri[(case_rows[ri[:, 0]] >= 0) & supported[ri[:, 1]]] if ri.size else ri
    return SimpleNamespace(name=gt_ds.name, classes=tuple(gt_ds.classes), supported=supported, pair_class=kept[:, 1])


def _pairs_present(gt_ds, case_rows: np.ndarray) -> int:
    """Positive pairs with a region among the cases present (the progress bar's total)."""
    ri = np.asarray(gt_ds.region_index, dtype=np.int64).reshape(-1, 2)
    return int(np.count_nonzero(case_rows[ri[:, 0]] >= 0)) if ri.size else 0
