"""xbench.score: score submissions against a ground truth (CPU, Numba; never imports torch).

Public API (imported lazily, so ``import xbench.score`` stays cheap):

- :func:`run` (:class:`ScoreOptions`, submissions) -> [:class:`Scored`]: the one way to score submissions, as
  ``xbench-score``, a suite, ``xbench human`` and the platforms do
- :func:`score_submission` -> :class:`ScoreResult` (metrics dict, per-pair DataFrame, count arrays)
- :func:`write_outputs` (metrics.json, pairs.parquet, pair_counts.npz, tables, platform formats)
- :class:`DatasetCounts`, :func:`load_pair_counts`, :func:`save_pair_counts` (``pair_counts.npz``)
- :func:`paired_bootstrap` (two submissions, same case resamples, every row scope: :mod:`xbench.score.sections.paired`)
  and the bootstrap building blocks in :mod:`xbench.score.resampling.bootstrap`
- metric functions in :mod:`xbench.score.metrics.grounding` and :mod:`xbench.score.metrics.recognition`, kernels in
  :mod:`xbench.score.kernels.maps`, table builders in :mod:`xbench.score.outputs.tables`
"""

from __future__ import annotations

import importlib

__all__ = [
    "run",
    "ScoreOptions",
    "Scored",
    "ScoreResult",
    "score_submission",
    "check_inputs",
    "metrics_from_counts",
    "thresholds_from_metrics",
    "write_outputs",
    "DatasetCounts",
    "load_pair_counts",
    "save_pair_counts",
    "paired_bootstrap",
]

_WHERE = {
    "run": "entry",
    "ScoreOptions": "options",
    "Scored": "entry",
    "ScoreResult": "scoring",
    "score_submission": "scoring",
    "check_inputs": "scoring",
    "metrics_from_counts": "scoring",
    "thresholds_from_metrics": "scoring",
    "write_outputs": "outputs.folder",
    "DatasetCounts": "kernels.counts",
    "load_pair_counts": "kernels.counts",
    "save_pair_counts": "kernels.counts",
    "paired_bootstrap": "sections.paired",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module 'xbench.score' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
