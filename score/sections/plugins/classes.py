"""The class rows: the primary row scope (the positive and labelled pairs of each finding class).

metrics.json's top level ("overall", "datasets"); a resample draws cases. Its ``score`` is the counting pass alone
(:func:`count_classes`): it returns no section, because the class metrics (thresholds searched or transferred, the
pairs table) are computed by the orchestration (:mod:`xbench.score.scoring`) once every scope's regions are checked.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xbench.score.kernels._allocator import release_freed_memory
from xbench.score.counting import count_dataset, region_mask_problems
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.metrics import registry as R
from xbench.score.resampling import bootstrap as BS
from xbench.score.sections.kinds import RowScope

__all__ = ["PLUGIN", "count_classes"]


def count_classes(sub, gt, names, *, bootstrap: int = 0, seed: int = 0, where: str = "",
                  region_problems: list | None = None, timings: dict | None = None,
                  cases: Mapping[str, np.ndarray] | None = None, aligned: Mapping, progress=None,
                  metric_params: Mapping | None = None) -> tuple[dict, dict]:
    """The class scope's row source: the counting pass over the positive pairs of each dataset of ``names``
    ({dataset: DatasetCounts}), on the case rows and class columns of ``aligned`` ({dataset: (case_rows,
    class_cols)}, the cases a partial run lacks marked -1, so ``cases`` adds nothing); then the region problems of
    the ground truth's datasets not scored, so every problem of the ground truth is listed together. The section is
    {}: the class metrics are metrics.json's top level, computed from these counts by
    :func:`xbench.score.scoring.metrics_from_counts` once every scope's regions are checked (thresholds searched or
    transferred). ``bootstrap`` and ``seed`` are the other scopes' (their estimator runs in their ``score``)."""
    region_problems = region_problems if region_problems is not None else []
    counts: dict[str, DatasetCounts] = {}
    for name in names:
        case_rows, class_cols = aligned[name]
        counts[name] = count_dataset(sub.datasets[name], gt.datasets[name], case_rows=case_rows,
                                     class_cols=class_cols, progress=progress, timings=timings,
                                     region_problems=region_problems, where=f"{where}/{name}",
                                     metric_params=metric_params)
        release_freed_memory()
    for name in sorted(set(gt.datasets) - set(names)):  # not scored, but part of the ground truth
        region_problems += region_mask_problems(gt.datasets[name], f"{where}/{name}")
    return {}, counts


class ClassRows(RowScope):
    name = "class"
    title = "finding classes"
    unit = "cases"
    kinds = ("grounding", "recognition", "dataset")
    section = None
    order = 0
    doc = "positive and labelled pairs of each finding class"
    keys = staticmethod(R.class_keys)
    score = staticmethod(count_classes)
    ground_truth_problems = staticmethod(BS.ground_truth_problems)
    paired_rows = staticmethod(BS.paired_class_rows)


PLUGIN = ClassRows()
