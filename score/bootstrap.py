"""Percentile bootstrap intervals from per-pair counts, and a paired bootstrap of two submissions.

Method (contract, "Uncertainty"): cases are resampled with replacement *within a dataset* (all classes of a
case move together), exactly ``n_resamples`` times, from an explicit ``numpy.random.Generator``. A resample
is represented by its multiplicity vector ``w`` (how often each case was drawn), so a class statistic on a
resample is a ``w``-weighted statistic over the original pairs, computed with matrix products instead of
copying data. In every resample the best threshold is re-chosen (unless thresholds were transferred), a
class with no positive pair (or a single label value) in that resample is left out of its dataset mean,
and the 95 % interval is ``numpy.nanpercentile(replicates, [2.5, 97.5])`` (linear interpolation) over the
resamples where the statistic is defined.

Known bias: the percentile interval of a max-over-thresholds statistic is biased upwards, and it is
optimistic for classes with few positive pairs (a resample cannot show a region it never drew); treat
intervals of classes with fewer than ~20 positive pairs as indicative only.

Seeding: :func:`bootstrap_replicates` draws every dataset's resamples from one
``numpy.random.default_rng(seed)`` consumed in sorted dataset order, as the scorer does for metrics.json, so
the report's intervals and paired comparisons use exactly the scorer's resamples for the same n and seed.
The datasets are then computed on Numba's thread count of threads (``NUMBA_NUM_THREADS``), each from a copy of
the generator taken where its draws start, so the replicates are bit for bit those of a serial loop.

Paired comparisons: :func:`paired_bootstrap` (or :func:`bootstrap_replicates` of both submissions, then
:func:`paired_differences`) applies one set of case resamples per dataset to both submissions, so the
interval of the *difference* ``a - b`` accounts for the cases they share. The point values of a comparison
come from :func:`identity_replicates` (every case drawn once), which equal the metrics.json values.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import registry as R
from .counts import DatasetCounts
from .kernels import _ranked_replicates, rank_order

if TYPE_CHECKING:  # imported where the paired table is built, not by the scorer
    import pandas as pd

__all__ = [
    "GROUNDING_KEYS",
    "RECOGNITION_KEYS",
    "resample_weights",
    "serial_blas",
    "recognition_replicates",
    "dataset_replicates",
    "percentile_interval",
    "percentile_intervals",
    "Replicates",
    "bootstrap_replicates",
    "identity_replicates",
    "overall_replicates",
    "ground_truth_problems",
    "PAIRED_COLUMNS",
    "paired_differences",
    "paired_bootstrap",
]

#: The contract's grounding and recognition keys of schema minor 0 (every registered metric is bootstrapped:
#: see :mod:`xbench.score.registry`).
GROUNDING_KEYS = ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best")
RECOGNITION_KEYS = ("auroc", "auprc", "f1", "accuracy")
_CHUNK = 125  # resamples per block at most
_BLOCK_WEIGHTS = 1_000_000  # and at most this many case weights per block (8 MB); the block shape reaches
# the matrix products, whose last bit depends on it, so changing it changes intervals in the last ulp
#: Pairs of a class per matrix product in the bootstrap (every class at the paper's scale fits in one).
PAIR_CHUNK = 8192
#: Bytes of per-pair Dice/IoU matrices kept per dataset between resample blocks; beyond it they are
#: recomputed from the counts in every block (time for memory: the scorer's memory then does not grow
#: with the size of a dataset's largest class).
CURVE_CACHE_BYTES = 16 * 2**20


def resample_weights(n_cases: int, n_resamples: int, rng: np.random.Generator,
                     *, chunk: int | None = None) -> Iterator[np.ndarray]:
    """Yield blocks of case multiplicities, float64 (b, n_cases), ``n_resamples`` rows in all.

    Row r counts how often each case was drawn in resample r (``n_cases`` draws with replacement, uniform).
    The draws consume ``rng`` in order, so the same seed gives the same resamples whatever the block size;
    blocks default to at most ~1 M weights (8 MB) so memory does not grow with the number of resamples.
    Only the yielded block stays alive while the caller works on it (the int64 draws are dropped first).
    """
    for b in _block_sizes(n_cases, n_resamples, chunk):
        w = np.zeros((b, n_cases))
        if n_cases:
            draws = rng.integers(0, n_cases, size=(b, n_cases))
            for r in range(b):  # row by row: no (b * n_cases) int64 temporaries besides the draws
                w[r] = np.bincount(draws[r], minlength=n_cases)
            del draws
        yield w


def _block_sizes(n_cases: int, n_resamples: int, chunk: int | None = None) -> list[int]:
    """Resamples per block of :func:`resample_weights` (checked arguments)."""
    if n_resamples < 0 or n_cases < 0:
        raise ValueError(f"n_resamples and n_cases must be >= 0; got {n_resamples} and {n_cases}.")
    if chunk is None:
        chunk = max(8, min(_CHUNK, _BLOCK_WEIGHTS // max(n_cases, 1)))
    return [min(chunk, n_resamples - done) for done in range(0, n_resamples, chunk)]


def _skip_resamples(n_cases: int, n_resamples: int, rng: np.random.Generator) -> None:
    """Advance ``rng`` exactly as :func:`resample_weights` consumes it, without building the weights."""
    if n_cases:
        for b in _block_sizes(n_cases, n_resamples):
            rng.integers(0, n_cases, size=(b, n_cases))


@contextmanager
def serial_blas() -> Iterator[None]:
    """Run BLAS (NumPy's matrix products) on one thread inside the block.

    The bootstrap makes hundreds of small matrix products per dataset. On a machine whose cores are busy
    (other processes, or Numba's worker threads left over from counting), OpenBLAS's worker threads wait
    for a time slice on every product: measured on 2 shared cores, the full-scale bootstrap took 0.3-4.8 s
    from run to run and ~7-23 s at 10x the data, against a steady 0.34 s and 3.4 s on one thread. The
    results do not depend on the thread count (OpenBLAS splits the output, not the sums).
    """
    try:
        from threadpoolctl import threadpool_limits  # a scikit-learn dependency
    except ImportError:  # pragma: no cover - scikit-learn is a dependency of the scorer
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _first_max_rows(means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = np.argmax(means, axis=1)  # first maximum = smallest tau on ties
    return means[np.arange(means.shape[0]), k], k


def _inverse(den: np.ndarray) -> np.ndarray:
    """1 / den where den > 0, NaN elsewhere (a resample that drew none of the pairs)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 1.0 / np.where(den > 0, den, 1.0), np.nan)


class _Chunk:
    """The per-pair arrays of one chunk of a class's pairs that the registered grounding metrics read:
    ``value(fn)`` (P,) or (P, T) float64 and ``selected(fn)`` (P,) float64 0/1. ``kept`` (the class cache's
    dict of this chunk) holds the curves that fit the cache budget and keeps every (P,) array from block to
    block; a curve beyond the budget is recomputed for each block of resamples and dropped after it."""

    def __init__(self, dc: DatasetCounts, rows: np.ndarray, kept: dict):
        self.view = R.PairView(dc, rows)
        self.kept = kept
        self.local: dict = {}

    def value(self, fn) -> np.ndarray:
        if fn in self.kept:
            return self.kept[fn]
        if fn not in self.local:
            v = np.asarray(fn(self.view))
            v = v.astype(np.float64) if v.dtype != np.float64 else v
            (self.kept if v.ndim == 1 else self.local)[fn] = v
            return v
        return self.local[fn]

    def selected(self, fn) -> np.ndarray | None:
        if fn is None:
            return None
        key = ("pairs", fn)
        if key not in self.kept:
            self.kept[key] = np.asarray(fn(self.view), dtype=bool).astype(np.float64)
        return self.kept[key]


def _weighted(w: np.ndarray, v: np.ndarray, sel: np.ndarray | None) -> np.ndarray:
    """Weighted sum over pairs, (B,) or (B, T); pairs outside ``sel`` count 0."""
    if sel is None:
        return w @ v
    return w @ (v * (sel if v.ndim == 1 else sel[:, None]))


def _class_grounding(w_cases: np.ndarray, dc: DatasetCounts, cc: dict, step: int,
                     taus: Mapping[str, int] | None) -> dict[str, np.ndarray]:
    """Every registered grounding metric of one class on each resample, (B,) float64 (NaN where a resample
    drew none of the pairs a metric selects).

    The class's pairs are taken ``step`` (:data:`PAIR_CHUNK`) at a time. Pass 1 sums, per distinct
    (values, pairs) source, the weighted per-pair values (a (B, T) matrix product for a curve) and the
    weighted pair counts; fixed-threshold and :class:`~xbench.score.registry.Best` metrics are read from
    those sums (Best: the first maximum of each resample's class-mean curve, ties to the smallest tau, or
    the transferred index). Pass 2, only for :class:`~xbench.score.registry.ChosenBy` metrics, sums each
    pair's value at the tau its resample chose, (B, P) work instead of another (B, P) x (P, T) product.
    Curves of a chunk come from the dataset's cache when they fit its budget (see :func:`_class_cache`) and
    are recomputed otherwise. A class of one chunk (every class at the paper's scale) gives exactly the
    one-product numbers; with several chunks the sums differ in the last bits only.
    """
    idx, pc = cc["idx"], cc["pair_case"]
    ms = R.metrics("grounding")
    direct = [m for m in ms if not isinstance(m.threshold, R.ChosenBy)]
    chosen_by = [m for m in ms if isinstance(m.threshold, R.ChosenBy)]
    sources = list(dict.fromkeys((m.values, m.pairs) for m in direct))
    dens = list(dict.fromkeys(m.pairs for m in ms))
    num: dict = {}
    den: dict = {}
    chunks = []
    for s in range(0, idx.size, step):
        e = min(idx.size, s + step)
        ch = _Chunk(dc, idx[s:e], cc["curves"].setdefault(s, {}))
        w = w_cases[:, pc[s:e]]
        for src in sources:
            part = _weighted(w, ch.value(src[0]), ch.selected(src[1]))
            if src in num:
                num[src] += part
            else:
                num[src] = part
        for fn in dens:
            sel = ch.selected(fn)
            part = w.sum(axis=1) if sel is None else w @ sel
            if fn in den:
                den[fn] += part
            else:
                den[fn] = part
        ch.local.clear()  # a curve beyond the cache budget: memory holds one chunk's at a time
        if chosen_by:
            chunks.append((s, e, ch))
    inv = {fn: _inverse(d) for fn, d in den.items()}
    out: dict[str, np.ndarray] = {}
    ks: dict[str, np.ndarray] = {}
    for m in direct:
        total, i = num[(m.values, m.pairs)], inv[m.pairs]
        if not m.curve:
            out[m.key] = total * i
            continue
        with np.errstate(invalid="ignore"):
            means = total * i[:, None]
        rule = m.threshold
        if isinstance(rule, R.Best):
            if taus is None or taus.get(rule.tau_key) is None:
                val, k = _first_max_rows(np.nan_to_num(means, nan=-1.0))
            else:
                k = np.full(means.shape[0], int(taus[rule.tau_key]))
                val = means[:, k[0]] if means.shape[0] else np.zeros(0)
            out[m.key] = np.where(den[m.pairs] > 0, val, np.nan)
            ks[m.key] = k
        else:
            out[m.key] = means[:, int(rule)]
    if chosen_by:
        gathered: dict = {}
        for s, e, ch in chunks:
            w = w_cases[:, pc[s:e]]
            local: dict = {}
            for m in chosen_by:
                key = (m.values, m.threshold.key)
                if key not in local:  # w * v[p, k_b]: each resample's weights times the values at its tau
                    local[key] = np.take(ch.value(m.values), ks[m.threshold.key], axis=1).T
                    local[key] *= w
                sel = ch.selected(m.pairs)
                part = local[key].sum(axis=1) if sel is None else local[key] @ sel
                gathered[m.key] = gathered[m.key] + part if m.key in gathered else part
            ch.local.clear()
        for m in chosen_by:
            out[m.key] = gathered[m.key] * inv[m.pairs]
    return {m.key: out[m.key] for m in ms}


def _pair_curves(dc: DatasetCounts, rows: np.ndarray) -> dict:
    """The curve metrics' per-pair (P, T) float64 values of some pairs, {values function: matrix}."""
    view = R.PairView(dc, rows)
    fns = dict.fromkeys(m.values for m in R.metrics("grounding") if m.curve)
    return {fn: np.asarray(fn(view), dtype=np.float64) for fn in fns}


_INDICATORS = ("tp", "fp", "fn", "correct", "labelled")


def _recognition_vectors(y, p, n_cases: int, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Per-case indicators (N, 5) int8 (:data:`_INDICATORS`) and rank order of one class's labelled cases ``rows``.

    int8, not float64: they stay cached for every class of the dataset while its resamples are drawn, and
    their weighted sums are integers, exact whichever way the product is computed.
    """
    pos = np.asarray(y) == 1
    y_hat = np.asarray(p) >= 0.5
    ind = np.zeros((n_cases, len(_INDICATORS)), dtype=np.int8)
    ind[rows] = np.stack([y_hat & pos, y_hat & ~pos, ~y_hat & pos, y_hat == pos, np.ones_like(pos)], axis=1)
    return {"indicators": ind, "rank": rank_order(pos, p, rows)}


def _recognition_from_vectors(w: np.ndarray, vec: dict, wt: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Every registered recognition metric of one class on each resample, from its cached vectors."""
    auroc, ap = _ranked_replicates(np.ascontiguousarray(w.T) if wt is None else wt, *vec["rank"])
    tp, fp, fn, correct, total = (w @ vec["indicators"].astype(np.float64)).T
    sums = R.RecognitionSums(tp=tp, fp=fp, fn=fn, correct=correct, total=total, auroc=auroc, auprc=ap)
    return {m.key: m.values(sums) for m in R.metrics("recognition")}


def recognition_replicates(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
    """Class recognition statistics on each resample.

    Parameters
    ----------
    w : (B, n) float64
        Multiplicity of each labelled case of the class in each resample.
    y : (n,) int, 0 or 1; p : (n,) float64
        Labels and probabilities of the labelled cases.

    Returns
    -------
    dict of (B,) float64 keyed by the registered recognition metrics (:data:`RECOGNITION_KEYS` and any
    added); AUROC/AUPRC NaN where a resample holds a single label value, everything NaN where it holds no
    labelled case.
    """
    w = np.ascontiguousarray(w, dtype=np.float64)
    n = w.shape[1]
    return _recognition_from_vectors(w, _recognition_vectors(y, p, n, np.arange(n)))


def _class_cache(dc: DatasetCounts, c: int, cache: dict) -> dict:
    """Everything a resample needs about class column ``c``, computed once per dataset.

    The class's curve matrices (Dice and IoU: 1.6 KB per pair) are kept chunk by chunk while the dataset's
    cache holds less than ``cache["budget"]`` bytes of them; :func:`_class_grounding` recomputes the rest.
    """
    out: dict = {}
    idx = dc.class_pairs(c)
    if idx.size:
        step = cache["pair_chunk"]
        n_curves = len(dict.fromkeys(m.values for m in R.metrics("grounding") if m.curve))
        out.update(idx=idx, pair_case=dc.pair_case[idx], curves={})
        for s in range(0, idx.size, step):
            size = n_curves * 8 * min(step, idx.size - s) * dc.b.shape[1]
            if cache["bytes"] + size > cache["budget"]:
                break
            out["curves"][s] = _pair_curves(dc, idx[s:s + step])
            cache["bytes"] += size
    rows = np.flatnonzero(dc.labels[:, c] != -1)
    out["recognition"] = _recognition_vectors(dc.labels[rows, c], dc.prob[rows, c], dc.n_cases, rows)
    return out


def dataset_replicates(dc: DatasetCounts, w_cases: np.ndarray, *, taus: dict[str, tuple[int, int]] | None = None,
                       per_pair: dict | None = None
                       ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Replicates of every class statistic and of the dataset summary for one block of case resamples.

    Parameters
    ----------
    dc : DatasetCounts
    w_cases : (B, N) float64
        Case multiplicities from :func:`resample_weights`.
    taus : dict, optional
        {class: (dice index, iou index)} to use fixed (transferred) thresholds instead of re-choosing.
    per_pair : dict, optional
        A dict kept between blocks of the same dataset, caching the per-class Dice/IoU matrices (up to
        ``CURVE_CACHE_BYTES``), indicator vectors and rank orders so each block only does the weighted
        sums. Preset ``"pair_chunk"`` or ``"budget"`` in it to override :data:`PAIR_CHUNK` and
        :data:`CURVE_CACHE_BYTES`.

    Returns
    -------
    (classes, summary): ``classes[name][key]`` and ``summary[key]`` are (B,) float64 arrays (NaN =
    undefined in that resample); the summary is the mean over classes defined in each resample, plus
    ``hamming_accuracy``.
    """
    cache = per_pair if per_pair is not None else {}
    cache.setdefault("pair_chunk", PAIR_CHUNK)
    cache.setdefault("budget", CURVE_CACHE_BYTES)
    cache.setdefault("bytes", 0)
    w_cases = np.ascontiguousarray(w_cases, dtype=np.float64)
    B = w_cases.shape[0]
    w_t = np.ascontiguousarray(w_cases.T)  # (N, B), shared by every class's rank kernel
    grounding = [m.key for m in R.metrics("grounding")]
    classes: dict[str, dict[str, np.ndarray]] = {}
    for c, name in enumerate(dc.classes):
        if not dc.supported[c]:
            continue
        if c not in cache:
            cache[c] = _class_cache(dc, c, cache)
        cc = cache[c]
        stats: dict[str, np.ndarray] = {}
        if "idx" in cc:
            t = (taus or {}).get(name)
            stats.update(_class_grounding(w_cases, dc, cc, cache["pair_chunk"], None if t is None else R.tau_map(t)))
        else:
            stats.update({k: np.full(B, np.nan) for k in grounding})
        stats.update(_recognition_from_vectors(w_cases, cc["recognition"], w_t))
        classes[name] = stats
    summary: dict[str, np.ndarray] = {}
    for key in R.summary_keys():
        m = R.metric(key)
        if m.kind == "dataset":
            summary[key] = m.values(dc, w_cases, cache)
        elif classes:
            summary[key] = _nanmean_rows(np.stack([s[key] for s in classes.values()]))
        else:
            summary[key] = np.full(B, np.nan)
    return classes, summary


def _nanmean_rows(stack: np.ndarray) -> np.ndarray:
    """``numpy.nanmean(stack, axis=0)`` with numpy's own steps (NaN set to 0, sum, divide by the count), so the
    same bits, but NaN without a "Mean of empty slice" warning for all-NaN columns (they are expected:
    undefined resamples). No ``warnings.catch_warnings``: it swaps process-wide state, and the bootstrap runs
    on several threads."""
    stack = np.asarray(stack, dtype=np.float64)
    mask = np.isnan(stack)
    cnt = np.sum(~mask, axis=0, dtype=np.intp)
    tot = np.sum(np.where(mask, 0.0, stack), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.divide(tot, cnt, out=tot, casting="unsafe")


def percentile_interval(replicates: np.ndarray, level: float = 0.95) -> list[float] | None:
    """[lo, hi] percentile interval over the defined (non-NaN) replicates; None when none is defined."""
    r = np.asarray(replicates, dtype=np.float64)
    r = r[~np.isnan(r)]
    if r.size == 0:
        return None
    a = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(r, [a, 100.0 - a])
    return [float(lo), float(hi)]


def percentile_intervals(stats: Mapping[str, np.ndarray], level: float = 0.95) -> dict[str, list[float] | None]:
    """:func:`percentile_interval` of every array of ``stats``, with the same numbers: the arrays without an
    undefined replicate go through one ``numpy.percentile`` along an axis (the same partition and
    interpolation per row; one call instead of one per metric), the others one by one."""
    out: dict[str, list[float] | None] = dict.fromkeys(stats)
    full = [k for k, v in stats.items() if np.asarray(v).size and not np.isnan(v).any()]
    for k in stats:
        if k not in full:
            out[k] = percentile_interval(stats[k], level)
    if full:
        a = (1.0 - level) / 2.0 * 100.0
        q = np.percentile(np.stack([np.asarray(stats[k], dtype=np.float64) for k in full]), [a, 100.0 - a], axis=1)
        for j, k in enumerate(full):
            out[k] = [float(q[0, j]), float(q[1, j])]
    return out


class Replicates(NamedTuple):
    """Replicates of one dataset: ``classes[name][key]`` and ``summary[key]``, (B,) float64 (NaN = undefined)."""

    classes: dict[str, dict[str, np.ndarray]]
    summary: dict[str, np.ndarray]


def _concat(blocks: list[Replicates]) -> Replicates:
    first = blocks[0]
    classes = {c: {k: np.concatenate([b.classes[c][k] for b in blocks]) for k in stats}
               for c, stats in first.classes.items()}
    return Replicates(classes, {k: np.concatenate([b.summary[k] for b in blocks]) for k in first.summary})


def bootstrap_replicates(counts: Mapping[str, DatasetCounts], *, n_resamples: int, seed: int,
                         taus: Mapping[str, Mapping[str, tuple[int, int]]] | None = None) -> dict[str, Replicates]:
    """Every class and dataset statistic on each of ``n_resamples`` case resamples, per dataset.

    The resamples come from one ``numpy.random.default_rng(seed)`` consumed in sorted dataset order, as
    :func:`xbench.score.scoring.metrics_from_counts` draws them: the percentile intervals of these
    replicates are exactly the ``ci95`` values of a metrics.json scored from the same datasets with the
    same ``n_resamples`` and seed. Two submissions of the same datasets therefore get the same resamples
    (what a paired comparison needs); a different set of datasets gives other resamples.

    Parameters
    ----------
    counts : {dataset: DatasetCounts}
    n_resamples, seed : int
        ``n_resamples = 0`` gives (0,) arrays.
    taus : optional {dataset: {class: (dice index, iou index)}} transferred thresholds.

    Returns
    -------
    {dataset: Replicates} with (n_resamples,) float64 arrays.
    """
    rng = np.random.default_rng(seed)
    names = sorted(counts)

    def one(name: str, gen: np.random.Generator) -> Replicates:
        dc = counts[name]
        cache: dict = {}  # per dataset, dropped with this call
        t = (taus or {}).get(name)
        blocks = [Replicates(*dataset_replicates(dc, w, taus=t, per_pair=cache))
                  for w in resample_weights(dc.n_cases, n_resamples, gen)]
        return _concat(blocks or [Replicates(*dataset_replicates(dc, np.zeros((0, dc.n_cases)), taus=t))])

    workers = min(_workers(), len(names))
    with serial_blas():
        if workers <= 1:
            return {name: one(name, rng) for name in names}
        # Datasets are independent given where their draws start in the one stream: each gets a copy of the
        # generator at that point (the stream is then skipped past its draws), so the replicates are those of
        # the serial loop, bit for bit, whichever thread computes them. Largest first, so the threads finish
        # together. Matrix products (BLAS, one thread each) and the rank kernel release the GIL.
        from concurrent.futures import ThreadPoolExecutor

        gens = {}
        for name in names:
            gens[name] = copy.deepcopy(rng)
            _skip_resamples(counts[name].n_cases, n_resamples, rng)
        with ThreadPoolExecutor(workers) as pool:
            futures = {name: pool.submit(one, name, gens.pop(name))
                       for name in sorted(names, key=lambda n: -_bootstrap_cost(counts[n]))}
            return {name: futures[name].result() for name in names}


def _workers() -> int:
    """Threads for the bootstrap: Numba's thread count (``NUMBA_NUM_THREADS``, default all cores)."""
    import numba

    return max(1, int(numba.get_num_threads()))


def _bootstrap_cost(dc: DatasetCounts) -> float:
    """A rough relative cost of one dataset's bootstrap (per-pair curve products plus per-class
    recognition work), only to start the largest datasets first."""
    return dc.b.shape[0] + 0.25 * dc.labels.size


def identity_replicates(counts: Mapping[str, DatasetCounts], *,
                        taus: Mapping[str, Mapping[str, tuple[int, int]]] | None = None) -> dict[str, Replicates]:
    """The point estimates, as the one "resample" that draws every case once: (1,) arrays per dataset.

    They equal the metrics.json values of the same counts (and thresholds); NaN where metrics.json has null.
    """
    with serial_blas():
        return {name: Replicates(*dataset_replicates(dc, np.ones((1, dc.n_cases)), taus=(taus or {}).get(name)))
                for name, dc in sorted(counts.items())}


def overall_replicates(per_dataset: Mapping[str, Replicates]) -> dict[str, np.ndarray]:
    """Overall statistic per resample: the mean over the datasets where it is defined (NaN where none is)."""
    if not per_dataset:
        return {}
    keys = next(iter(per_dataset.values())).summary
    out = {}
    for key in keys:
        out[key] = _nanmean_rows(np.stack([r.summary[key] for r in per_dataset.values()]))
    return out


def ground_truth_problems(a: Mapping[str, DatasetCounts], b: Mapping[str, DatasetCounts]) -> list[str]:
    """One message per dataset both hold that was scored against different ground truth ([] when none)."""
    return [f"{name}: the two submissions were scored against different ground truth (cases, classes, labels "
            "or regions differ); a paired bootstrap needs the same." for name in sorted(set(a) & set(b))
            if not a[name].same_ground_truth(b[name])]


PAIRED_COLUMNS = ["dataset", "class", "metric", "a", "b", "diff", "diff_lo", "diff_hi", "p_value", "n_valid"]


def _defined(x) -> float | None:
    return None if x is None or np.isnan(x) else float(x)


def _difference(dataset, cls, metric, point_a, point_b, reps_a, reps_b, level) -> dict:
    """One row of :func:`paired_differences` (see there)."""
    a, b = _defined(point_a), _defined(point_b)
    d = np.asarray(reps_a, dtype=np.float64) - np.asarray(reps_b, dtype=np.float64)
    ok = d[~np.isnan(d)]
    ci = percentile_interval(ok, level)
    p = float(min(1.0, 2.0 * min(np.mean(ok <= 0), np.mean(ok >= 0)))) if ok.size else None
    return {"dataset": dataset, "class": cls, "metric": metric, "a": a, "b": b,
            "diff": None if a is None or b is None else a - b, "diff_lo": None if ci is None else ci[0],
            "diff_hi": None if ci is None else ci[1], "p_value": p, "n_valid": int(ok.size)}


def paired_differences(reps_a: Mapping[str, Replicates], reps_b: Mapping[str, Replicates],
                       point_a: Mapping[str, Replicates], point_b: Mapping[str, Replicates], *,
                       level: float = 0.95, per_class: bool = True) -> pd.DataFrame:
    """The table of ``a - b`` from replicates of two submissions drawn on the same resamples.

    ``reps_*`` come from :func:`bootstrap_replicates` (same datasets, ``n_resamples`` and seed for both),
    ``point_*`` from :func:`identity_replicates`. Rows: the overall means first (``dataset`` None), then per
    dataset (sorted) its summary (``class`` None, Hamming accuracy included) and, with ``per_class``, every
    class both hold. Columns :data:`PAIRED_COLUMNS`: point values ``a``, ``b``, ``diff = a - b`` (None where
    either is undefined), the percentile interval ``diff_lo``/``diff_hi`` and the two-sided bootstrap
    ``p_value = min(1, 2 min(P(d <= 0), P(d >= 0)))`` over the ``n_valid`` resamples where both are defined
    (None when there is none).
    """
    rows = []
    shared = sorted(set(reps_a) & set(reps_b))
    oa, ob = (overall_replicates({d: r[d] for d in shared}) for r in (reps_a, reps_b))
    pa, pb = (overall_replicates({d: p[d] for d in shared}) for p in (point_a, point_b))
    rows += [_difference(None, None, k, pa[k][0], pb[k][0], oa[k], ob[k], level) for k in oa]
    for name in shared:
        ra, rb, qa, qb = reps_a[name], reps_b[name], point_a[name], point_b[name]
        rows += [_difference(name, None, k, qa.summary[k][0], qb.summary[k][0], ra.summary[k], rb.summary[k], level)
                 for k in ra.summary]
        if per_class:
            rows += [_difference(name, c, k, qa.classes[c][k][0], qb.classes[c][k][0], stats[k], rb.classes[c][k],
                                 level) for c, stats in ra.classes.items() if c in rb.classes for k in stats]
    import pandas as pd

    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)


def _memo_replicates(counts: Mapping[str, DatasetCounts], taus, n_resamples: int, seed: int, cache: dict | None,
                     name: str | None) -> tuple[dict[str, Replicates], dict[str, Replicates]]:
    """(resampled, identity) replicates of one submission, memoised in ``cache`` under (``name``, dataset,
    what): a dataset's resamples depend on the datasets drawn before it, so the resample key names them all."""
    datasets = tuple(sorted(counts))
    found = {}
    for what, key in (("reps", (n_resamples, seed, datasets)), ("point", "identity")):
        if cache is not None and name is not None and all((name, d, key) in cache for d in datasets):
            found[what] = {d: cache[(name, d, key)] for d in datasets}
            continue
        found[what] = (identity_replicates(counts, taus=taus) if what == "point" else
                       bootstrap_replicates(counts, n_resamples=n_resamples, seed=seed, taus=taus))
        if cache is not None and name is not None:
            cache.update({(name, d, key): v for d, v in found[what].items()})
    return found["reps"], found["point"]


def paired_bootstrap(a: Mapping[str, DatasetCounts], b: Mapping[str, DatasetCounts], *, n_resamples: int = 1000,
                     seed: int = 0, level: float = 0.95,
                     taus_a: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
                     taus_b: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
                     per_class: bool = True, cache: dict | None = None,
                     names: tuple[str, str] | None = None,
                     phrases_a: Mapping | None = None, phrases_b: Mapping | None = None) -> pd.DataFrame:
    """Paired bootstrap of ``a - b``, two submissions scored on the same ground truth: the one paired bootstrap
    of XBench (the report's comparisons call it too).

    Over the datasets both hold, one set of case resamples (:func:`bootstrap_replicates`) is applied to
    both submissions, so the interval of the difference accounts for the cases they share; when both hold
    the same datasets, each submission's replicates are those behind its own metrics.json intervals (same
    ``n_resamples`` and seed). Load the inputs with :func:`xbench.score.counts.load_pair_counts` from each
    run's ``pair_counts.npz``.

    Parameters
    ----------
    a, b : dict {dataset: DatasetCounts}
    n_resamples, seed, level : resamples (0: point differences only), seed, interval level.
    taus_a, taus_b : optional {dataset: {class: (dice index, iou index)}} fixed (transferred) thresholds.
    per_class : also compare every class, not only the dataset and overall means.
    cache, names : a dict kept by the caller and a name for each submission (e.g. its folder): each
        submission's replicates are computed once however many comparisons it takes part in.
    phrases_a, phrases_b : optional {dataset: PhraseCounts} (:func:`xbench.score.counts.load_phrase_counts`):
        the phrase metrics of the datasets both hold are compared too, on the images resampled as for their
        metrics.json phrase intervals (rows after the class rows, ``dataset`` "phrases" or
        "phrases/<dataset>", see :func:`xbench.score.phrases.paired_phrase_rows`).

    Returns
    -------
    pandas.DataFrame, see :func:`paired_differences`.

    Raises
    ------
    ValueError
        When a shared dataset was scored against different ground truth (one line per dataset).
    """
    problems = ground_truth_problems(a, b)
    if problems:
        raise ValueError("\n".join(problems))
    shared = sorted(set(a) & set(b))
    name_a, name_b = names if names is not None else (None, None)
    reps_a, point_a = _memo_replicates({d: a[d] for d in shared}, taus_a, n_resamples, seed, cache, name_a)
    reps_b, point_b = _memo_replicates({d: b[d] for d in shared}, taus_b, n_resamples, seed, cache, name_b)
    table = paired_differences(reps_a, reps_b, point_a, point_b, level=level, per_class=per_class)
    if not (phrases_a and phrases_b and set(phrases_a) & set(phrases_b)):
        return table
    from .phrases import paired_phrase_rows

    rows = paired_phrase_rows(phrases_a, phrases_b, n_resamples=n_resamples, seed=seed, level=level,
                              per_category=per_class, cache=cache, names=names)
    import pandas as pd

    return pd.DataFrame(table.to_dict("records") + rows, columns=PAIRED_COLUMNS)
