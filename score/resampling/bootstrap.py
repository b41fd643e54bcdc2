"""Percentile bootstrap intervals from per-pair counts, and a paired bootstrap of two submissions.

Method (contract, "Uncertainty"): cases are resampled with replacement *within a dataset* (all classes of a
case move together), exactly ``bootstrap`` times, from an explicit ``numpy.random.Generator``. A resample
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

Paired comparisons: :func:`xbench.score.sections.paired.paired_bootstrap` (or :func:`bootstrap_replicates` of both submissions, then
:func:`paired_differences`) applies one set of case resamples per dataset to both submissions, so the
interval of the *difference* ``a - b`` accounts for the cases they share. The point values of a comparison
come from :func:`identity_replicates` (every case drawn once), which equal the metrics.json values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from xbench.score.metrics import registry as R
from xbench.score.resampling.engine import (ALPHA, cluster_weights, holm, holm_family, holm_floor_note, holm_min_resamples, n_clusters,
                         positioned_stream, resample_streams, resample_weights, significant,
                         stream)
from xbench.score.kernels.counts import DatasetCounts, PhraseCounts
from xbench.score.resampling.intervals import nanmean_rows as _nanmean_rows, paired_row as _difference
from xbench.score.resampling.intervals import percentile_interval, percentile_intervals
from xbench.score.resampling.replicates import dataset_replicates, recognition_replicates, serial_blas  # noqa: F401

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
    "paired_class_rows",
    "phrase_replicates",
    "ALPHA",
    "holm",
    "holm_family",
    "significant",
    "holm_min_resamples",
    "holm_floor_note",
]

#: The contract's grounding and recognition keys of schema minor 0, as the registry lists them
#: (:data:`xbench.score.metrics.registry.CORE_KEYS`; every registered metric is bootstrapped).
GROUNDING_KEYS = R.CORE_KEYS["grounding"]
RECOGNITION_KEYS = R.CORE_KEYS["recognition"]
class Replicates(NamedTuple):
    """Replicates of one dataset: ``classes[name][key]`` and ``summary[key]``, (B,) float64 (NaN = undefined)."""

    classes: dict[str, dict[str, np.ndarray]]
    summary: dict[str, np.ndarray]


def _concat(blocks: list[Replicates]) -> Replicates:
    first = blocks[0]
    classes = {c: {k: np.concatenate([b.classes[c][k] for b in blocks]) for k in stats}
               for c, stats in first.classes.items()}
    return Replicates(classes, {k: np.concatenate([b.summary[k] for b in blocks]) for k in first.summary})


def _dataset_bootstrap(dc: DatasetCounts, bootstrap: int, rng: np.random.Generator, *,
                      taus: Mapping[str, tuple[int, int]] | None = None,
                      cluster: np.ndarray | None = None) -> Replicates:
    """One dataset's replicates (:func:`dataset_replicates` block by block) from ``rng`` positioned where the
    dataset's draws start (the one generator in order, or :func:`_resample_streams`); consumes ``rng``. Run it
    inside :func:`serial_blas`. ``cluster``: resample clusters of cases (:func:`cluster_weights`)."""
    cache: dict = {}  # per dataset, dropped with this call
    blocks = [Replicates(*dataset_replicates(dc, w, taus=taus, per_pair=cache))
              for w in cluster_weights(cluster, dc.n_cases, bootstrap, rng)]
    return _concat(blocks or [Replicates(*dataset_replicates(dc, np.zeros((0, dc.n_cases)), taus=taus))])


def bootstrap_replicates(counts: Mapping[str, DatasetCounts], *, bootstrap: int, seed: int,
                         taus: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
                         clusters: Mapping[str, np.ndarray] | None = None) -> dict[str, Replicates]:
    """Every class and dataset statistic on each of ``bootstrap`` case resamples, per dataset.

    The resamples come from one ``numpy.random.default_rng(seed)`` consumed in sorted dataset order, as
    :func:`xbench.score.scoring.metrics_from_counts` draws them: the percentile intervals of these
    replicates are exactly the ``ci95`` values of a metrics.json scored from the same datasets with the
    same ``bootstrap`` and seed. Two submissions of the same datasets therefore get the same resamples
    (what a paired comparison needs); a different set of datasets gives other resamples.

    Parameters
    ----------
    counts : {dataset: DatasetCounts}
    bootstrap, seed : int
        ``bootstrap = 0`` gives (0,) arrays.
    taus : optional {dataset: {class: (dice index, iou index)}} transferred thresholds.
    clusters : optional {dataset: (n_cases,) int cluster of each case}: that dataset's resamples draw clusters
        (:func:`cluster_weights`; the robustness track's copies, clustered by clean case).

    Returns
    -------
    {dataset: Replicates} with (B,) float64 arrays.
    """
    names = sorted(counts)
    workers = min(_workers(), len(names))
    with serial_blas():
        if workers <= 1:  # one generator consumed in order: nothing to position, nothing drawn twice
            rng = stream(seed)
            return {name: _dataset_bootstrap(counts[name], bootstrap, rng, taus=(taus or {}).get(name),
                                             cluster=(clusters or {}).get(name))
                    for name in names}
        # Datasets are independent given where their draws start in the one stream (_resample_streams), so the
        # replicates are those of the serial loop, bit for bit, whichever thread computes them. Largest first,
        # so the threads finish together. Matrix products (BLAS, one thread each) and the rank kernel release
        # the GIL.
        from concurrent.futures import ThreadPoolExecutor

        gens = resample_streams({name: n_clusters((clusters or {}).get(name), counts[name].n_cases)
                                  for name in names}, bootstrap, seed)

        def one(name: str) -> Replicates:
            return _dataset_bootstrap(counts[name], bootstrap, gens.pop(name), taus=(taus or {}).get(name),
                                      cluster=(clusters or {}).get(name))

        with ThreadPoolExecutor(workers) as pool:
            futures = {name: pool.submit(one, name) for name in sorted(names, key=lambda n: -_bootstrap_cost(counts[n]))}
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


def paired_differences(reps_a: Mapping[str, Replicates], reps_b: Mapping[str, Replicates],
                       point_a: Mapping[str, Replicates], point_b: Mapping[str, Replicates], *,
                       level: float = 0.95, per_class: bool = True) -> pd.DataFrame:
    """The table of ``a - b`` from replicates of two submissions drawn on the same resamples.

    ``reps_*`` come from :func:`bootstrap_replicates` (same datasets, ``bootstrap`` and seed for both),
    ``point_*`` from :func:`identity_replicates`. Rows: the overall means first (``dataset`` None), then per
    dataset (sorted) its summary (``class`` None, Hamming accuracy included) and, with ``per_class``, every
    class both hold. Columns :data:`PAIRED_COLUMNS`: point values ``a``, ``b``, ``diff = a - b`` (None where
    either is undefined), the percentile interval ``diff_lo``/``diff_hi`` and the two-sided bootstrap
    ``p_value = min(1, 2 min(P(d <= 0), P(d >= 0)))`` over the ``n_valid`` resamples where both are defined
    (None when there is none).
    """
    import pandas as pd

    return pd.DataFrame(_paired_rows(reps_a, reps_b, point_a, point_b, level=level, per_class=per_class),
                        columns=PAIRED_COLUMNS)


def _paired_rows(reps_a, reps_b, point_a, point_b, *, level: float, per_class: bool) -> list[dict]:
    """The rows of :func:`paired_differences`."""
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
    return rows


def _memo_replicates(counts: Mapping[str, DatasetCounts], taus, bootstrap: int, seed: int, cache: dict | None,
                     name: str | None) -> tuple[dict[str, Replicates], dict[str, Replicates]]:
    """(resampled, identity) replicates of one submission, memoised in ``cache`` under (``name``, dataset,
    what): a dataset's resamples depend on the datasets drawn before it, so the resample key names them all."""
    datasets = tuple(sorted(counts))
    found = {}
    for what, key in (("reps", (bootstrap, seed, datasets)), ("point", "identity")):
        if cache is not None and name is not None and all((name, d, key) in cache for d in datasets):
            found[what] = {d: cache[(name, d, key)] for d in datasets}
            continue
        found[what] = (identity_replicates(counts, taus=taus) if what == "point" else
                       bootstrap_replicates(counts, bootstrap=bootstrap, seed=seed, taus=taus))
        if cache is not None and name is not None:
            cache.update({(name, d, key): v for d, v in found[what].items()})
    return found["reps"], found["point"]


def paired_class_rows(a: Mapping[str, DatasetCounts], b: Mapping[str, DatasetCounts], *, bootstrap: int,
                      seed: int, level: float = 0.95, per_group: bool = True, cache: dict | None = None,
                      names: tuple[str, str] | None = None, taus_a=None, taus_b=None) -> list[dict]:
    """The class scope's rows of :func:`xbench.score.sections.paired.paired_bootstrap` (see there; ``per_group``: every class too)."""
    problems = ground_truth_problems(a, b)
    if problems:
        from xbench.score.errors import GroundTruthMismatchError

        raise GroundTruthMismatchError(problems)
    shared = sorted(set(a) & set(b))
    name_a, name_b = names if names is not None else (None, None)
    reps_a, point_a = _memo_replicates({d: a[d] for d in shared}, taus_a, bootstrap, seed, cache, name_a)
    reps_b, point_b = _memo_replicates({d: b[d] for d in shared}, taus_b, bootstrap, seed, cache, name_b)
    return _paired_rows(reps_a, reps_b, point_a, point_b, level=level, per_class=per_group)


# ------------------------------------------------------------------------------ phrase rows: resample images
# The one thing the phrase scope does differently: a resample draws the dataset's *images* with replacement and
# takes each drawn image with all its phrase rows (one image carries several phrases).
def _weighted(w: np.ndarray, v: np.ndarray, sel: np.ndarray | None) -> np.ndarray:
    """Weighted means of ``v`` (P,) or (P, T) over the rows ``sel`` (all when None) under weights ``w``
    (B, P); NaN where a resample put no weight on a selected row."""
    wd = w * (np.ones(v.shape[0], bool) if sel is None else sel)
    tot = wd.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (wd @ v) / (tot if v.ndim == 1 else tot[:, None])


class _Scope:
    """The registry's phrase metrics on some pair rows ``idx`` (a category, or every phrase): per-row values
    read once, then the weighted means of each block of resamples (:meth:`replicates`).

    Form of each metric on a resample with weights w over the rows: the w-weighted mean of its per-row
    values over the rows its ``pairs`` selects; a curve metric's mean curve at its threshold: a fixed index,
    the first maximum of each resample's curve (:class:`~xbench.score.metrics.registry.Best`), or per row the value at
    the index another metric chose in the same resample (:class:`~xbench.score.metrics.registry.ChosenBy`). A fixed
    threshold reads the whole mean curve when a searched metric of the scope computes it anyway, else its
    own column only."""

    def __init__(self, dc: DatasetCounts, idx: np.ndarray, ms: list):
        self.idx, self.ms = idx, ms
        view = R.PairView(dc, idx)
        full = {(m.values, m.pairs) for m in ms if R.searched(m)}
        self.sel = {m.pairs: None if m.pairs is None else np.asarray(m.pairs(view), bool) for m in ms}
        self.vals: dict = {}
        for m in ms:
            src = (m.values, m.pairs)
            if not m.curve:
                self.vals.setdefault(src, np.asarray(m.values(view), np.float64))
            elif src in full or isinstance(m.threshold, R.ChosenBy):
                self.vals.setdefault(src, np.asarray(m.values(view), np.float64))
            else:
                k = int(m.threshold)
                self.vals.setdefault((m.values, m.pairs, k), np.asarray(m.values(view.columns(slice(k, k + 1))),
                                                                        np.float64)[:, 0])

    def replicates(self, w: np.ndarray) -> dict[str, np.ndarray]:
        """(B,) replicates of every metric of the scope for row weights ``w`` (B, P_all)."""
        w = w[:, self.idx]
        means: dict = {}
        out: dict[str, np.ndarray] = {}
        ks: dict[str, np.ndarray] = {}
        for m in self.ms:
            src, sel = (m.values, m.pairs), self.sel[m.pairs]
            if not m.curve:
                out[m.key] = _weighted(w, self.vals[src], sel)
            elif isinstance(m.threshold, R.ChosenBy):
                k = ks[m.threshold.key]  # the value of each row at the tau its resample chose
                at = np.take(self.vals[src], k, axis=1).T  # (B, P)
                wd = w * (np.ones(w.shape[1], bool) if sel is None else sel)
                tot = wd.sum(axis=1)
                with np.errstate(invalid="ignore", divide="ignore"):
                    out[m.key] = (wd * at).sum(axis=1) / tot
            elif src in self.vals:
                if src not in means:
                    means[src] = _weighted(w, self.vals[src], sel)
                if isinstance(m.threshold, R.Best):
                    k = np.argmax(np.nan_to_num(means[src], nan=-np.inf), axis=1)  # first maximum
                    ks[m.key] = k
                    out[m.key] = means[src][np.arange(k.size), k]  # NaN where the category was not drawn
                else:
                    out[m.key] = means[src][:, int(m.threshold)]
            else:
                out[m.key] = _weighted(w, self.vals[(m.values, m.pairs, int(m.threshold))], sel)
        return out


def phrase_replicates(pc: PhraseCounts, bootstrap: int, seed: int, chunk: int = 250) -> dict:
    """Bootstrap replicates of every phrase metric, (B,) float64 each: {"categories": {category:
    {key: ...}}, "summary": {key: ...}, "pooled": {key: ...}} (the pooled keys only, :func:`R.pooled_keys`).

    Each resample draws the dataset's images with replacement: the dataset's own resamples in the run's one
    stream (:func:`positioned_stream` past ``pc.prior``; its images are its scored cases); a phrase enters with
    the multiplicity of its image. Best thresholds are chosen again per category in each
    resample. Two submissions of the same phrase rows get the same resamples (a paired comparison).
    """
    rng = positioned_stream(pc.prior, bootstrap, seed)
    dc = pc.counts
    n = pc.n_images
    ms = R.metrics("grounding", scope="phrase")
    pooled_ms = [m for m in ms if not R.searched(m)]
    cats = [c for c in range(len(dc.classes)) if dc.class_pairs(c).size]
    scopes = {dc.classes[c]: _Scope(dc, dc.class_pairs(c), ms) for c in cats}
    everything = _Scope(dc, np.arange(dc.pair_case.size), pooled_ms)
    per_cat: dict = {name: {m.key: [] for m in ms} for name in scopes}
    pooled: dict = {m.key: [] for m in pooled_ms}
    for draws in resample_weights(n, bootstrap, rng, chunk=chunk):  # (b, N) image counts
        w_all = draws[:, pc.image]
        for k, v in everything.replicates(w_all).items():
            pooled[k].append(v)
        for name, sc in scopes.items():
            for k, v in sc.replicates(w_all).items():
                per_cat[name][k].append(v)
    empty = np.zeros(0)
    per_cat = {c: {k: np.concatenate(v) if v else empty for k, v in s.items()} for c, s in per_cat.items()}
    # a resample may draw no phrase of any category: all-NaN is NaN (no warning, no process-wide filter)
    summary = {m.key: _nanmean_rows(np.stack([per_cat[c][m.key] for c in per_cat])) if per_cat
               else np.full(bootstrap, np.nan) for m in ms}
    return {"categories": per_cat, "summary": summary,
            "pooled": {k: np.concatenate(v) if v else empty for k, v in pooled.items()}}
