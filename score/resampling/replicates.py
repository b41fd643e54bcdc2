"""One dataset's statistics on given case weights: every registered metric of every class, and the dataset
summaries, for each row of a block of resample weights (the multiplicity of each case in each resample), as
weighted sums over the original pairs (matrix products, no copy of the data). :mod:`xbench.score.resampling.bootstrap`
draws the weights; the subgroup track and the tests hand their own (a group's indicator, every case once).

Split out of bootstrap.py by role (issue 47 item 4): the estimator here, the resampling there.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from xbench.score.kernels.counts import DatasetCounts
from xbench.score.kernels.maps import _ranked_replicates, rank_order
from xbench.score.metrics import registry as R
from xbench.score.resampling.intervals import nanmean_rows as _nanmean_rows

__all__ = ["PAIR_CHUNK", "CURVE_CACHE_BYTES", "serial_blas", "recognition_replicates", "dataset_replicates"]

#: Pairs of a class per matrix product in the bootstrap (every class at the paper's scale fits in one).
PAIR_CHUNK = 8192
#: Bytes of per-pair Dice/IoU matrices kept per dataset between resample blocks; beyond it they are
#: recomputed from the counts in every block (time for memory: the scorer's memory then does not grow
#: with the size of a dataset's largest class).
CURVE_CACHE_BYTES = 16 * 2**20


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
    """Each row's first maximum (the smallest tau on ties) and its index; a row with a NaN (a resample that
    drew none of the pairs: all NaN) counts NaN as -1, i.e. index 0 for an all-NaN row."""
    nan = np.isnan(means)
    if nan.any():
        means = np.where(nan, -1.0, means)
    k = np.argmax(means, axis=1)
    return means[np.arange(means.shape[0]), k], k


def _inverse(den: np.ndarray) -> np.ndarray:
    """1 / den where den > 0, NaN elsewhere (a resample that drew none of the pairs)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 1.0 / np.where(den > 0, den, 1.0), np.nan)


class _Plan(NamedTuple):
    """Where each registered grounding metric's weighted sums sit, the same for every class of a run.

    ``metrics``: the registered grounding metrics. A chunk's per-pair matrix ``vec`` (P, K) has one column per
    ``sources`` entry, the distinct (values, pairs) sources of non-curve metrics (values times the 0/1
    selection), then one per ``dens`` entry, the distinct pair selections (0/1; their weighted sums are the
    denominators). ``curves``: the distinct (values, pairs) sources of curve metrics, each a block of T rows
    of a chunk's transposed curve matrix. ``chosen``: {(values, chosen-by key): [pairs function, ...]} for
    the :class:`~xbench.score.metrics.registry.ChosenBy` metrics, read from the raw curve block ``(values, None)``."""

    metrics: tuple
    sources: tuple
    dens: tuple
    curves: tuple
    chosen: dict


def _plan() -> _Plan:
    ms = tuple(R.metrics("grounding"))
    direct = [m for m in ms if not isinstance(m.threshold, R.ChosenBy)]
    chosen: dict = {}
    for m in ms:
        if isinstance(m.threshold, R.ChosenBy):
            chosen.setdefault((m.values, m.threshold.key), [])
            if m.pairs not in chosen[(m.values, m.threshold.key)]:
                chosen[(m.values, m.threshold.key)].append(m.pairs)
    curves = list(dict.fromkeys((m.values, m.pairs) for m in direct if m.curve))
    curves += [src for src in dict.fromkeys((values, None) for values, _ in chosen) if src not in curves]
    return _Plan(ms, tuple(dict.fromkeys((m.values, m.pairs) for m in direct if not m.curve)),
                 tuple(dict.fromkeys(m.pairs for m in ms)), tuple(curves), chosen)


def _selection(view: R.PairView, fn, memo: dict) -> np.ndarray | None:
    """The 0/1 float64 selection ``fn`` of a chunk's pairs (None: every pair)."""
    if fn is None:
        return None
    if fn not in memo:
        memo[fn] = np.asarray(fn(view), dtype=bool).astype(np.float64)
    return memo[fn]


def _chunk_vectors(dc: DatasetCounts, rows: np.ndarray, plan: _Plan) -> dict:
    """A chunk's per-pair columns (P, K) float64 (``vec``, see :class:`_Plan`) and the chosen-by selections
    (P, m) float64, one matrix per (values, chosen-by key)."""
    view, memo = R.PairView(dc, rows), {}
    cols = []
    for values, pairs in plan.sources:
        v = np.asarray(values(view), dtype=np.float64)
        sel = _selection(view, pairs, memo)
        cols.append(v if sel is None else v * sel)
    for fn in plan.dens:
        sel = _selection(view, fn, memo)
        cols.append(np.ones(rows.size) if sel is None else sel)
    ones = np.ones(rows.size)
    chosen = {key: np.stack([ones if fn is None else _selection(view, fn, memo) for fn in fns], axis=1)
              for key, fns in plan.chosen.items()}
    vec = np.stack(cols, axis=1) if cols else np.zeros((rows.size, 0))
    return {"vec": vec, "chosen": chosen}


def _chunk_curves(dc: DatasetCounts, rows: np.ndarray, plan: _Plan) -> np.ndarray:
    """A chunk's curve sources, transposed and stacked: (len(plan.curves) * T, P) float64, C order, so that
    both the weighted sums (``w @ ct.T``) and each resample's row at its chosen tau (``ct[k]``) read it
    without a copy."""
    view, memo = R.PairView(dc, rows), {}
    raw: dict = {}
    blocks = []
    for values, pairs in plan.curves:
        if values not in raw:
            raw[values] = np.asarray(values(view), dtype=np.float64)
        sel = _selection(view, pairs, memo)
        blocks.append((raw[values] if sel is None else raw[values] * sel[:, None]).T)
    return np.ascontiguousarray(np.concatenate(blocks, axis=0)) if blocks else np.zeros((0, rows.size))


def _class_grounding(w_cases: np.ndarray, dc: DatasetCounts, cc: dict, plan: _Plan,
                     taus: Mapping[str, int] | None) -> dict[str, np.ndarray]:
    """Every registered grounding metric of one class on each resample, (B,) float64 (NaN where a resample
    drew none of the pairs a metric selects).

    The class's pairs are taken a chunk (:data:`PAIR_CHUNK` pairs) at a time. Pass 1 takes two matrix products
    per chunk: the resample weights of its pairs (B, P) times the chunk's per-pair columns (every non-curve
    source and every pair selection, see :class:`_Plan`) and times its stacked curves (B, sources x T).
    Fixed-threshold and :class:`~xbench.score.metrics.registry.Best` metrics are read from those sums (Best: the
    first maximum of each resample's class-mean curve, ties to the smallest tau, or the transferred index).
    Pass 2, only for :class:`~xbench.score.metrics.registry.ChosenBy` metrics, takes each pair's value at the tau its
    resample chose (a row gather of the transposed curves) times the weights, times the chosen-by
    selections: (B, P) work instead of another (B, P) x (P, T) product. Curves of a chunk come from the
    dataset's cache when they fit its budget (see :func:`_class_cache`) and are recomputed otherwise. Only
    the order of the sums differs from summing each metric on its own (last bits).
    """
    idx, pc, step = cc["idx"], cc["pair_case"], cc["step"]
    T = dc.b.shape[1]
    spans = [(s, min(idx.size, s + step)) for s in range(0, idx.size, step)]

    def curves(s: int, e: int) -> np.ndarray:
        ct = cc["chunks"][s].get("ct")
        return _chunk_curves(dc, idx[s:e], plan) if ct is None else ct

    vec_sum = curve_sum = w = None
    for s, e in spans:
        w = w_cases[:, pc[s:e]]
        part_v, part_c = w @ cc["chunks"][s]["vec"], w @ curves(s, e).T
        vec_sum = part_v if vec_sum is None else vec_sum + part_v
        curve_sum = part_c if curve_sum is None else curve_sum + part_c
    nv = len(plan.sources)
    num = {src: vec_sum[:, j] for j, src in enumerate(plan.sources)}
    num.update({src: curve_sum[:, j * T:(j + 1) * T] for j, src in enumerate(plan.curves)})
    den = {fn: vec_sum[:, nv + j] for j, fn in enumerate(plan.dens)}
    inverses = _inverse(vec_sum[:, nv:])
    inv = {fn: inverses[:, j] for j, fn in enumerate(plan.dens)}
    out: dict[str, np.ndarray] = {}
    ks: dict[str, np.ndarray] = {}
    for m in plan.metrics:
        if isinstance(m.threshold, R.ChosenBy):
            continue
        total, i = num[(m.values, m.pairs)], inv[m.pairs]
        if not m.curve:
            out[m.key] = total * i
            continue
        with np.errstate(invalid="ignore"):
            means = total * i[:, None]
        rule = m.threshold
        if isinstance(rule, R.Best):
            if taus is None or taus.get(rule.tau_key) is None:
                val, k = _first_max_rows(means)
            else:
                k = np.full(means.shape[0], int(taus[rule.tau_key]))
                val = means[:, k[0]] if means.shape[0] else np.zeros(0)
            out[m.key] = np.where(den[m.pairs] > 0, val, np.nan)
            ks[m.key] = k
        else:
            out[m.key] = means[:, int(rule)]
    if plan.chosen:
        gathered: dict = {}
        for s, e in spans:
            if len(spans) > 1:  # else the one chunk's weights are still those of pass 1
                w = w_cases[:, pc[s:e]]
            ct = curves(s, e)
            for (values, key), fns in plan.chosen.items():
                at = ct[plan.curves.index((values, None)) * T + ks[key]]  # (B, P): each pair at its resample's tau
                at *= w
                part = at @ cc["chunks"][s]["chosen"][(values, key)]
                for j, fn in enumerate(fns):
                    g = (values, key, fn)
                    gathered[g] = part[:, j] if g not in gathered else gathered[g] + part[:, j]
        for m in plan.metrics:
            if isinstance(m.threshold, R.ChosenBy):
                out[m.key] = gathered[(m.values, m.threshold.key, m.pairs)] * inv[m.pairs]
    return {m.key: out[m.key] for m in plan.metrics}


_INDICATORS = ("tp", "fp", "fn", "correct", "labelled")


def _indicators(labels: np.ndarray, prob: np.ndarray) -> np.ndarray:
    """Per-case indicators (N, C, 5) int8 (:data:`_INDICATORS`) of classes' columns ``labels`` (1/0/-1) and
    ``prob``; all 0 where a case is not labelled.

    int8, not float64: they stay cached while a dataset's resamples are drawn, and their weighted sums are
    integers, exact whichever way the product is computed.
    """
    lab, pos, y_hat = labels != -1, labels == 1, prob >= 0.5
    return np.stack([y_hat & pos, y_hat & ~pos & lab, ~y_hat & pos, (y_hat == pos) & lab, lab],
                    axis=-1).astype(np.int8)


def _recognition_from_sums(wt: np.ndarray, ranks: list[tuple], sums: np.ndarray) -> dict[str, np.ndarray]:
    """Every registered recognition metric of C classes on each resample, (B, C) each, from the weights (N, B),
    each class's rank order and the weighted indicator sums (B, C, 5). (The registry's recognition metrics
    are elementwise, so all classes go through them at once.)"""
    B, C = sums.shape[:2]
    auroc, ap = np.empty((B, C)), np.empty((B, C))
    for j, rank in enumerate(ranks):
        auroc[:, j], ap[:, j] = _ranked_replicates(wt, *rank)
    tp, fp, fn, correct, total = np.moveaxis(sums, 2, 0)
    s = R.RecognitionSums(tp=tp, fp=fp, fn=fn, correct=correct, total=total, auroc=auroc, auprc=ap)
    return {m.key: np.asarray(m.values(s), dtype=np.float64).reshape(B, C) for m in R.metrics("recognition")}


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
    y, p = np.asarray(y), np.asarray(p, dtype=np.float64)
    n = w.shape[1]
    sums = w @ _indicators(y[:, None], p[:, None])[:, 0].astype(np.float64)
    out = _recognition_from_sums(np.ascontiguousarray(w.T), [rank_order(y == 1, p, np.arange(n))], sums[:, None])
    return {k: v[:, 0] for k, v in out.items()}


def _class_cache(dc: DatasetCounts, c: int, cache: dict, plan: _Plan) -> dict:
    """Everything a resample needs about class column ``c``, computed once per dataset.

    Per chunk of the class's pairs: its per-pair columns (:func:`_chunk_vectors`) and, while the dataset's
    cache holds less than ``cache["budget"]`` bytes of them, its curves (Dice and IoU: 1.6 KB per pair,
    :func:`_chunk_curves`); :func:`_class_grounding` recomputes the curves of the other chunks.
    """
    out: dict = {}
    idx = dc.class_pairs(c)
    if idx.size:
        step = cache["pair_chunk"]
        out.update(idx=idx, pair_case=dc.pair_case[idx], step=step, chunks={})
        for s in range(0, idx.size, step):
            rows = idx[s:s + step]
            out["chunks"][s] = chunk = _chunk_vectors(dc, rows, plan)
            size = len(plan.curves) * 8 * rows.size * dc.b.shape[1]
            if cache["bytes"] + size <= cache["budget"]:
                chunk["ct"] = _chunk_curves(dc, rows, plan)
                cache["bytes"] += size
    rows = np.flatnonzero(dc.labels[:, c] != -1)
    out["rank"] = rank_order(dc.labels[rows, c] == 1, dc.prob[rows, c], rows)
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
        ``CURVE_CACHE_BYTES``), per-pair columns, indicators and rank orders so each block only does the
        weighted sums. Preset ``"pair_chunk"`` or ``"budget"`` in it to override :data:`PAIR_CHUNK` and
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
    if "plan" not in cache:
        cache["plan"] = _plan()
    plan = cache["plan"]
    w_cases = np.ascontiguousarray(w_cases, dtype=np.float64)
    B = w_cases.shape[0]
    w_t = np.ascontiguousarray(w_cases.T)  # (N, B), shared by every class's rank kernel
    supported = [c for c in range(len(dc.classes)) if dc.supported[c]]
    if "indicators" not in cache:
        cache["indicators"] = _indicators(dc.labels[:, supported], dc.prob[:, supported]).reshape(dc.n_cases, -1)
    # every class's weighted indicator sums in one product (B, 5 per class): integers, exact in any order
    indicator_sums = (w_cases @ cache["indicators"].astype(np.float64)).reshape(B, len(supported), 5)
    for c in supported:
        if c not in cache:
            cache[c] = _class_cache(dc, c, cache, plan)
    recognition = _recognition_from_sums(w_t, [cache[c]["rank"] for c in supported], indicator_sums)
    grounding = [m.key for m in plan.metrics]
    classes: dict[str, dict[str, np.ndarray]] = {}
    for j, c in enumerate(supported):
        name, cc = dc.classes[c], cache[c]
        stats: dict[str, np.ndarray] = {}
        if "idx" in cc:
            t = (taus or {}).get(name)
            stats.update(_class_grounding(w_cases, dc, cc, plan, None if t is None else R.tau_map(t)))
        else:
            stats.update({k: np.full(B, np.nan) for k in grounding})
        stats.update({k: v[:, j] for k, v in recognition.items()})
        classes[name] = stats
    summary: dict[str, np.ndarray] = {}
    keys = R.summary_keys()
    means = [k for k in keys if R.metric(k).kind != "dataset"]
    if classes and means:  # every class-mean key at once: (keys, classes, B), the mean over classes
        stacked = _nanmean_rows(np.stack([np.stack([s[k] for s in classes.values()]) for k in means], axis=1))
        summary.update(zip(means, stacked))
    for key in keys:
        if R.metric(key).kind == "dataset":
            summary[key] = R.metric(key).values(dc, w_cases, cache)
        elif key not in summary:
            summary[key] = np.full(B, np.nan)
    return classes, {k: summary[k] for k in keys}
