"""The paired bootstrap of two submissions over every row scope: the class rows, then each declared scope's
(:mod:`xbench.score.sections.plugins`, in declaration order).

It sits in the sections layer because it loops over the declared sections; the resampling it runs for each
scope is below it (:mod:`xbench.score.resampling.bootstrap`: one set of case resamples per dataset applied to
both submissions, so the interval of the difference ``a - b`` accounts for the cases they share).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from xbench.score.kernels.counts import DatasetCounts
from xbench.score.resampling.bootstrap import PAIRED_COLUMNS
from xbench.score.sections.plugins import sections

if TYPE_CHECKING:  # imported where the paired table is built, not by the scorer
    import pandas as pd

__all__ = ["paired_bootstrap"]


def paired_bootstrap(a: Mapping[str, DatasetCounts], b: Mapping[str, DatasetCounts], *, bootstrap: int = 1000,
                     seed: int = 0, level: float = 0.95,
                     taus_a: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
                     taus_b: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
                     per_class: bool = True, cache: dict | None = None,
                     names: tuple[str, str] | None = None,
                     phrases_a: Mapping | None = None, phrases_b: Mapping | None = None,
                     scopes_a: Mapping[str, Mapping] | None = None,
                     scopes_b: Mapping[str, Mapping] | None = None, with_tests: bool = False) -> pd.DataFrame:
    """Paired bootstrap of ``a - b``, two submissions scored on the same ground truth: the one paired bootstrap
    of XBench (the report's comparisons call it too).

    Over the datasets both hold, one set of case resamples (:func:`~xbench.score.resampling.bootstrap.bootstrap_replicates`) is applied to
    both submissions, so the interval of the difference accounts for the cases they share; when both hold
    the same datasets, each submission's replicates are those behind its own metrics.json intervals (same
    ``bootstrap`` and seed). Load the inputs with :func:`xbench.score.kernels.counts.load_pair_counts` from each
    run's ``pair_counts.npz``.

    Parameters
    ----------
    a, b : dict {dataset: DatasetCounts}
    bootstrap, seed, level : resamples (0: point differences only), seed, interval level.
    taus_a, taus_b : optional {dataset: {class: (dice index, iou index)}} fixed (transferred) thresholds.
    per_class : also compare every class, not only the dataset and overall means.
    cache, names : a dict kept by the caller and a name for each submission (e.g. its folder): each
        submission's replicates are computed once however many comparisons it takes part in.
    phrases_a, phrases_b : optional {dataset: PhraseCounts} (:func:`xbench.score.sections.pair_counts.load_phrase_counts`):
        the phrase metrics of the datasets both hold are compared too, on the images resampled as for their
        metrics.json phrase intervals (rows after the class rows, ``dataset`` "phrases" or
        "phrases/<dataset>", see :func:`xbench.score.sections.phrases.paired_phrase_rows`).
    scopes_a, scopes_b : optional {row scope name: {dataset: counts}} of every other declared row scope
        (:mod:`xbench.score.sections.plugins`; ``phrases_a`` is ``{"phrase": phrases_a}``): each scope's rows follow
        the class rows, in declaration order, from the scope's ``paired_rows``.
    with_tests : add a column ``test``, each row's :func:`xbench.score.resampling.intervals.test_identity` (rows with the
        same one are one test: :func:`~xbench.score.resampling.engine.holm_family` counts them once); None for a scope's rows that lack it.

    Returns
    -------
    pandas.DataFrame, see :func:`xbench.score.resampling.bootstrap.paired_differences`.

    Raises
    ------
    xbench.score.errors.GroundTruthMismatchError
        (an InputError and a ValueError) When a shared dataset was scored against different ground truth
        (one problem line per dataset).
    """
    extra_a = {**({"phrase": phrases_a} if phrases_a else {}), **(scopes_a or {})}
    extra_b = {**({"phrase": phrases_b} if phrases_b else {}), **(scopes_b or {})}
    pairs = [(scope, a, b) if scope.section is None else (scope, extra_a.get(scope.name), extra_b.get(scope.name))
             for scope in sections()]  # the primary (class) scope first, then the others in declaration order
    pairs = [(scope, sa, sb) for scope, sa, sb in pairs if scope.section is None or (sa and sb and set(sa) & set(sb))]
    for scope, sa, sb in pairs:  # every scope's ground truth is checked before any work, scope by scope
        problems = scope.ground_truth_problems(sa, sb)
        if problems:
            from xbench.score.errors import GroundTruthMismatchError

            raise GroundTruthMismatchError(problems)
    common = dict(bootstrap=bootstrap, seed=seed, level=level, per_group=per_class, cache=cache, names=names)
    columns = PAIRED_COLUMNS + ["test"] if with_tests else PAIRED_COLUMNS
    table, rows = None, []
    for scope, sa, sb in pairs:
        compare = scope.paired_rows
        if scope.section is None:
            import pandas as pd

            table = pd.DataFrame(compare(a, b, taus_a=taus_a, taus_b=taus_b, **common), columns=columns)
        else:
            rows += compare(sa, sb, **common)
    if not rows:
        return table
    import pandas as pd

    return pd.DataFrame(table.to_dict("records") + rows, columns=columns)
