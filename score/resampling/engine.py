"""The one resampling engine: every interval, p-value and paired comparison of the scorer draws here
(issue 36), and the one definition of "significant" lives here.

Draws (docs/contract.md, "Resampling"):

* :func:`resample_weights` — the case bootstrap: per resample, n cases drawn with replacement, uniform, from a
  ``numpy.random.default_rng(seed)`` stream (``integers(0, n, size=(b, n))`` in blocks; the draws do not depend on
  the block size), as case multiplicities (b, n). Every metrics.json interval (class rows, the dataset and overall
  summaries, human ceilings, faithfulness, gaze, subgroups) and every paired comparison of two submissions on the
  same cases uses it; :func:`resample_streams` positions one stream per dataset as the serial loop would, and
  :func:`cluster_weights` draws clusters (a clean case with its perturbed copies) instead of cases.
* :func:`case_indices` — the same draws as indices (B, n): ``default_rng(seed).integers(0, n, size=(B, n))``, for
  the tracks that index rows (robustness's clean cases, the report's size figure). Row r of it and row r of
  :func:`resample_weights` over the same seed are the same resample.
* :func:`positioned_stream` / :func:`prior_units` — THE policy: a dataset's resamples are the B resamples it takes
  from the one ``default_rng(seed)`` after the datasets sorted before it; a section that resamples a dataset's
  cases (or images) asks for that stream (class rows, summaries, subgroups, gaze, text probes, phrase rows, their
  paired comparisons), so its resample r is the dataset's resample r. (The human ceiling and faithfulness start
  ``stream(seed)`` per dataset on purpose: docs/contract.md, "Resampling", says why.)
* :func:`permutation_stream` / :func:`label_permutations` — the subgroup gaps' permutation test, a generator of its
  own per dataset (``default_rng([seed, *name bytes])``) so it never moves the resamples.
* :func:`legacy_choice_weights` — CheXlocalize's own bootstrap, replicated on purpose (its ``eval.py``):
  ``numpy.random.RandomState(seed)`` and per resample ``choice(n, size=n, replace=True)``; used only for their
  summary values (the human section's ``chexlocalize`` block), never for XBench's own intervals.

The percentile interval and the two-sided paired p-value (min(1, 2 min(P*(d <= 0), P*(d >= 0)))) are computed from
these replicates by :mod:`xbench.score.resampling.intervals`; whether a gap is "significant" is :func:`significant` (Holm over
the family shown together, below :data:`ALPHA`). A test (tests/score/resampling/test_resampling.py) holds every random draw of
``score/`` to this module.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping

import numpy as np

_CHUNK = 125  # resamples per block at most
_BLOCK_WEIGHTS = 1_000_000  # and at most this many case weights per block (8 MB); the block shape reaches
# the matrix products, whose last bit depends on it, so changing it changes intervals in the last ulp


def stream(seed: int) -> np.random.Generator:
    """The generator every draw of a run starts from: ``numpy.random.default_rng(seed)``."""
    return np.random.default_rng(seed)


def resample_weights(n_cases: int, bootstrap: int, rng: np.random.Generator,
                     *, chunk: int | None = None) -> Iterator[np.ndarray]:
    """Yield blocks of case multiplicities, float64 (b, n_cases), ``bootstrap`` rows in all.

    Row r counts how often each case was drawn in resample r (``n_cases`` draws with replacement, uniform).
    The draws consume ``rng`` in order, so the same seed gives the same resamples whatever the block size;
    blocks default to at most ~1 M weights (8 MB) so memory does not grow with the number of resamples.
    Only the yielded block stays alive while the caller works on it (the int64 draws are dropped first).
    """
    for b in _block_sizes(n_cases, bootstrap, chunk):
        w = np.zeros((b, n_cases))
        if n_cases:
            draws = rng.integers(0, n_cases, size=(b, n_cases))
            for r in range(b):  # row by row: no (b * n_cases) int64 temporaries besides the draws
                w[r] = np.bincount(draws[r], minlength=n_cases)
            del draws
        yield w


def _block_sizes(n_cases: int, bootstrap: int, chunk: int | None = None) -> list[int]:
    """Resamples per block of :func:`resample_weights` (checked arguments)."""
    if bootstrap < 0 or n_cases < 0:
        from xbench.score.errors import ScoreInputError

        raise ScoreInputError(f"the number of bootstrap resamples must be >= 0; got {bootstrap} "
                              f"(and {n_cases} cases)")
    if chunk is None:
        chunk = max(8, min(_CHUNK, _BLOCK_WEIGHTS // max(n_cases, 1)))
    return [min(chunk, bootstrap - done) for done in range(0, bootstrap, chunk)]


def skip_resamples(n_cases: int, bootstrap: int, rng: np.random.Generator) -> None:
    """Advance ``rng`` exactly as :func:`resample_weights` consumes it, without building the weights."""
    if n_cases:
        for b in _block_sizes(n_cases, bootstrap):
            rng.integers(0, n_cases, size=(b, n_cases))


def resample_streams(n_cases: Mapping[str, int], bootstrap: int, seed: int) -> dict[str, np.random.Generator]:
    """Each dataset's generator, positioned where its draws start in the one ``numpy.random.default_rng(seed)``
    stream consumed in sorted dataset order (see :func:`bootstrap_replicates`): a dataset's resamples depend
    only on the case counts of the datasets before it, so each can be drawn on its own, in any order or
    thread, and still be those of the serial loop bit for bit."""
    rng = np.random.default_rng(seed)
    names = sorted(n_cases)
    out = {}
    for i, name in enumerate(names):
        out[name] = copy.deepcopy(rng)
        if i + 1 < len(names):  # the draws are skipped (made and dropped) only where another dataset follows
            skip_resamples(int(n_cases[name]), bootstrap, rng)
    return out


def positioned_stream(prior_units, bootstrap: int, seed: int) -> np.random.Generator:
    """A dataset's generator: ``numpy.random.default_rng(seed)`` advanced past the resamples of the datasets
    before it in sorted order (``prior_units``: their unit counts, cases or clusters, in that order), exactly as
    :func:`resample_streams` positions it. Any section resampling a dataset's cases asks for this stream, so its
    resamples are the dataset's own (those behind the dataset's metrics.json intervals), row for row."""
    rng = stream(seed)
    for n in prior_units:
        skip_resamples(int(n), bootstrap, rng)
    return rng


def prior_units(units: Mapping[str, int], name: str) -> tuple[int, ...]:
    """The unit counts of the datasets before ``name`` in sorted order among ``units`` (the scored datasets):
    what :func:`positioned_stream` skips."""
    return tuple(int(units[d]) for d in sorted(units) if d < name)


def permutation_stream(seed: int, dataset: str) -> np.random.Generator:
    """The generator of a dataset's label permutations (the subgroup gaps' test):
    ``numpy.random.default_rng([seed, *dataset.encode("utf-8")])``; it depends on the seed and the dataset's name
    only, never on the other datasets scored, and never touches the resampling stream."""
    return np.random.default_rng([int(seed), *dataset.encode("utf-8")])


def label_permutations(n_labelled: int, n_permutations: int, rng: np.random.Generator,
                       *, chunk: int | None = None) -> Iterator[np.ndarray]:
    """Blocks (b, n_labelled) int64 of ``n_permutations`` permutations in all, row r = ``rng.permutation(n)``
    (drawn in order, so the block size does not change them): in permutation r, the j-th labelled case takes the
    label of the ``perm[r, j]``-th labelled case."""
    for b in _block_sizes(n_labelled, n_permutations, chunk):
        yield np.stack([rng.permutation(n_labelled) for _ in range(b)]) if b else np.zeros((0, n_labelled), np.int64)


def n_clusters(cluster: np.ndarray | None, n_cases: int) -> int:
    """How many units a resample draws: the cases, or the clusters ``0..max(cluster)`` of a clustered dataset."""
    if cluster is None:
        return int(n_cases)
    return int(cluster.max()) + 1 if cluster.size else 0


def cluster_weights(cluster: np.ndarray | None, n_cases: int, bootstrap: int,
                    rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Blocks of case multiplicities (b, n_cases) of a cluster bootstrap: each resample draws the clusters
    ``0..M-1`` with replacement (:func:`resample_weights` over M units, the same draws) and every case takes its
    cluster's multiplicity, so all cases of a drawn cluster come together (copies of one clean case are not
    independent). ``cluster=None``: the case bootstrap itself. With one case per cluster, in cluster order, the
    weights are those of the case bootstrap bit for bit."""
    if cluster is None:
        yield from resample_weights(n_cases, bootstrap, rng)
        return
    cluster = np.asarray(cluster, dtype=np.int64)
    if cluster.shape != (n_cases,) or (cluster.size and cluster.min() < 0):
        raise RuntimeError(  # the scorer built it from a validated table: a bug here, not an input
            f"a cluster index per case is needed: {cluster.shape} for {n_cases} cases")
    m = n_clusters(cluster, n_cases)
    # blocks sized by the expanded (b, n_cases) weights; the draws do not depend on the block size
    chunk = max(8, min(_CHUNK, _BLOCK_WEIGHTS // max(n_cases, m, 1)))
    for w in resample_weights(m, bootstrap, rng, chunk=chunk):
        yield w[:, cluster]


def draw_indices(rng: np.random.Generator, n_cases: int, bootstrap: int) -> np.ndarray:
    """(B, n_cases) cases drawn from ``rng`` as it stands (several datasets drawn in turn from one
    stream): ``rng.integers(0, n, size=(B, n))``."""
    return rng.integers(0, n_cases, size=(bootstrap, n_cases))


def case_indices(n_cases: int, bootstrap: int, seed: int) -> np.ndarray:
    """(B, n_cases) int64: the cases each resample draws, ``default_rng(seed).integers(0, n, (B, n))``
    (the rows of :func:`resample_weights` over the same seed, as indices); (B, 0) without cases."""
    _block_sizes(n_cases, bootstrap)  # checks the arguments
    if not n_cases or not bootstrap:
        return np.zeros((max(bootstrap, 0), n_cases), np.int64)
    return stream(seed).integers(0, n_cases, size=(bootstrap, n_cases))


def legacy_choice_weights(n_cases: int, bootstrap: int, seed: int) -> np.ndarray:
    """(B, n_cases) case multiplicities of CheXlocalize's bootstrap (their eval.py): one
    ``numpy.random.RandomState(seed)`` (the legacy global seed), per resample ``choice(n, size=n, replace=True)``."""
    _block_sizes(n_cases, bootstrap)
    rs = np.random.RandomState(seed)
    w = np.zeros((bootstrap, n_cases))
    for i in range(bootstrap):
        if n_cases:
            w[i] = np.bincount(rs.choice(n_cases, size=n_cases, replace=True), minlength=n_cases)
    return w


# ------------------------------------------------------------------------------ one definition of "significant"
#: The family-wise error rate of every verdict ("significant", "real", ``*``): 1 - the 95 % intervals' level.
ALPHA = 0.05


def holm(pvalues) -> list[float | None]:
    """Holm's step-down adjustment (Holm 1979) of the p-values given (None: no test, left out of the family).

    Sorted ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j)), m the number of tests; the
    result is in the input order. Controls the family-wise error rate under any dependence between the tests.
    """
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    m = len(idx)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: (pvalues[i], i))):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        out[i] = running
    return out


def holm_family(pvalues, tests=None) -> tuple[list[float | None], int]:
    """Holm over the family of *distinct* tests among the rows shown: (adjusted p per row, m).

    ``pvalues``: each row's p (None: no test, outside the family). ``tests``: each row's identity
    (:func:`xbench.score.resampling.intervals.test_identity`; None: a test of its own). Rows with the same identity are one
    test (with one dataset the overall row and that dataset's row resample the same statistic): it enters the
    family once, with the largest p of its rows (they are equal), and every one of its rows gets its adjusted p.
    m is the number of distinct tests.
    """
    pvalues = list(pvalues)
    tests = [None] * len(pvalues) if tests is None else list(tests)
    group: dict = {}  # identity -> index into the family
    family: list[float] = []
    where: list[int | None] = []
    for i, (p, t) in enumerate(zip(pvalues, tests, strict=True)):  # one identity per row
        if p is None:
            where.append(None)
            continue
        key = ("row", i) if t is None else ("test", t)
        if key not in group:
            group[key] = len(family)
            family.append(float(p))
        else:
            family[group[key]] = max(family[group[key]], float(p))
        where.append(group[key])
    adjusted = holm(family)
    return [None if j is None else adjusted[j] for j in where], len(family)


def significant(p_holm: float | None, alpha: float = ALPHA) -> bool:
    """The one verdict of XBench's paired comparisons ("significant", a gap "real", ``*``): the Holm-adjusted p
    over the family of distinct tests shown together (:func:`holm_family`) is below ``alpha``. False without an
    adjusted p (no resamples, or not adjusted)."""
    return p_holm is not None and p_holm < alpha


def holm_min_resamples(m: int, alpha: float = ALPHA) -> int:
    """The fewest resamples B for which a test can pass Holm over m tests: the smallest bootstrap p is 1/(B+1)
    (the floor), so the smallest adjusted p is m/(B+1), and it must be below ``alpha``."""
    if m <= 0:
        return 0
    b = max(0, int(m / alpha) - 2)
    while m / (b + 1) >= alpha:
        b += 1
    return b


def holm_floor_note(m: int, bootstrap: int, alpha: float = ALPHA, option: str = "--bootstrap") -> str | None:
    """The sentence saying that B = ``bootstrap`` is too few for any of m tests to pass the Holm adjustment
    (m/(B+1) >= ``alpha``: even a test at the floor 1/(B+1) is not significant), naming the option to raise and
    the least B that can; None when some test could pass (or there is no test)."""
    if m <= 0 or bootstrap <= 0 or m / (bootstrap + 1) < alpha:
        return None
    return (f"B = {bootstrap} resamples are too few for any gap to pass the Holm adjustment over {m} tests "
            f"(the smallest adjusted p is {m}/(B+1) = {m / (bootstrap + 1):.3f}, not below {alpha:g}), so none "
            f"is called significant whatever the data; raise {option} to at least {holm_min_resamples(m, alpha)}.")
