"""The counting pass: one dataset's probabilities and, for every positive pair, hit / |B| / |B∩R| per
threshold and the per-pair statistics the registered metrics declare (energy share, tolerant hit).

The same pass runs for every row source (classes; phrase rows through the view of :mod:`xbench.score.sections.phrases`)
and produces a :class:`~xbench.score.kernels.counts.DatasetCounts`: what the point estimates
(:mod:`xbench.score.metrics.estimates`) and the bootstrap (:mod:`xbench.score.resampling.bootstrap`) read.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from xbench.score.kernels import pair_stats as PS
from xbench.score.metrics import registry as R
from xbench.score.kernels.counts import DatasetCounts, count_dtype
from xbench.score.kernels.maps import N_THRESHOLDS, GroundingCounts, count_pairs_into, resize_plan
from xbench.score.metrics.recognition_sums import probabilities

__all__ = ["count_dataset", "gather_maps", "region_mask_problems", "MAP_BATCH_BYTES"]

#: Positive maps gathered at once (raw size, before resizing); 14 x 14 float16 maps of a full benchmark
#: take ~10 MB, so this only bites for very large maps.
MAP_BATCH_BYTES = 32 * 2**20

Progress = Callable[[int], None]


def _workers() -> int:
    """Threads for reading and counting: Numba's thread count (``NUMBA_NUM_THREADS``, default all cores)."""
    import numba

    return max(1, int(numba.get_num_threads()))


def gather_maps(saliency, rows: np.ndarray, cols: np.ndarray, pool: ThreadPoolExecutor | None = None, *,
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


def _recognition_rows(sub_ds, gt_ds, case_rows, class_cols, timings: dict):
    """The cases present and their recognition inputs: (classes, supported, labels, present, partial, case_id,
    case_rows, rows_all, case_row, prob); a partial run keeps the cases present as if they were all."""
    case_row = None
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

    return classes, supported, labels, present, partial, case_id, case_rows, rows_all, case_row, prob


def _grounding_pass(sub_ds, gt_ds, ri: np.ndarray, keep: np.ndarray, rows_all, class_cols, out: GroundingCounts,
                    extra: dict, stats, cell, params: Mapping, grid: tuple[int, int], mask_chunk, workers, progress,
                    timings: dict, where: str) -> tuple[list, list[int]]:
    """Decode every region chunk once and count its kept pairs into ``out`` and ``extra`` (threads overlap
    decoding and counting; :func:`count_dataset`); the region problems and the rows of the first empty regions."""
    from xbench.schemas.store import read_rows

    H, W = grid
    K = keep.size
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
        m = np.ascontiguousarray(maps[p0 - m0:p1 - m0], dtype=np.float32)
        energy, argmax = np.empty(p1 - p0, np.float64), np.empty(p1 - p0, np.int32)
        count_pairs_into(m, block, local, plan, GroundingCounts(out.b[p0:p1], out.br[p0:p1], out.hit[p0:p1],
                                                                out.region_pixels[p0:p1], energy, argmax))
        here = PS.Chunk(m, block, local, plan, energy, argmax, None if cell is None else cell[p0:p1], params)
        for s in stats:
            s.fill(here, extra[s.name][p0:p1])
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
            maps = gather_maps(sal, sub_rows[m0:m1], sub_cols[m0:m1], pool, dtype=map_dtype)
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
    return problems, first_empty


def count_dataset(sub_ds, gt_ds, *, case_rows: np.ndarray | None = None, class_cols: np.ndarray | None = None,
                  progress: Progress | None = None, mask_chunk: int | None = None,
                  timings: dict[str, float] | None = None, region_problems: list | None = None,
                  where: str | None = None, workers: int | None = None,
                  metric_params: Mapping | None = None, scope: str = "class") -> DatasetCounts:
    """Counts of one dataset: probabilities, and hit / |B| / |B∩R| for every positive pair.

    The same pass fills the per-pair columns of ``extra`` that some registered metric reads, each declared in
    :mod:`xbench.score.kernels.pair_stats` for the rows of ``scope`` ("class", or "phrase" for the phrase-row view):
    e.g. the energy share, the tolerant pointing-game hit (each case's ``orig_size`` over the grid gives its cell
    size; without ``orig_size`` that column is absent) and, on phrase rows, the signed CNR. ``metric_params``
    reaches every statistic's hook whole, resolved (each declared parameter's default where not given:
    :mod:`xbench.score.metrics.params`); no parameter is named here.

    Every region_mask chunk is decoded exactly once, on one of ``workers`` threads that then counts the
    chunk's pairs with the serial ``nogil`` kernel (:func:`xbench.score.kernels.maps.count_pairs_into`): decoding
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
    scope
        The rows counted: "class" (finding classes) or "phrase" (phrase rows, :mod:`xbench.score.sections.phrases`);
        picks the per-pair statistics defined on them.
    """
    from xbench.schemas import InvalidStoreError
    from xbench.schemas.ground_truth import empty_region_problem

    if case_rows is None or class_cols is None:
        from xbench.schemas import align

        case_rows, class_cols = align(sub_ds, gt_ds)
    timings = timings if timings is not None else {}
    where = where or str(gt_ds.name)
    (classes, supported, labels, present, partial, case_id, case_rows, rows_all, case_row,
     prob) = _recognition_rows(sub_ds, gt_ds, case_rows, class_cols, timings)
    ri = np.asarray(gt_ds.region_index, dtype=np.int64).reshape(-1, 2)
    keep_region = supported[ri[:, 1]] & present[ri[:, 0]] if partial and ri.size else supported[ri[:, 1]]
    keep = np.flatnonzero(keep_region) if ri.size else np.zeros(0, np.int64)
    K = keep.size
    H, W = (int(s) for s in gt_ds.grid)
    dtype = count_dtype((H, W))
    out = GroundingCounts(np.empty((K, N_THRESHOLDS), dtype), np.empty((K, N_THRESHOLDS), dtype),
                          np.empty(K, bool), np.empty(K, np.int32))
    # the per-pair statistics some registered metric reads (pair_stats.py), and only those
    has_size = hasattr(gt_ds, "orig_size")
    stats = PS.needed(R.metrics(kind=None, scope=None), scope, orig_size=has_size)
    extra = {s.name: np.empty(K, s.dtype) for s in stats}
    params = R.metric_params(metric_params)  # every declared parameter, checked (ScoreInputError); to the hooks
    # original pixels per grid cell (height, width) of each kept pair's case
    # (a ground-truth-like object without orig_size gets no tolerant column: its metric is then null)
    cell = (np.ascontiguousarray(np.asarray(gt_ds.orig_size, dtype=np.float64)[ri[keep, 0]]
                                 / np.array([H, W], dtype=np.float64)) if has_size else None)
    problems, first_empty = _grounding_pass(sub_ds, gt_ds, ri, keep, rows_all, class_cols, out, extra, stats, cell,
                                            params, (H, W), mask_chunk, workers, progress, timings, where)
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
        extra={name: v[order] for name, v in extra.items()},
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
