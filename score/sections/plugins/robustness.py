"""Robustness: the same metrics on perturbed copies of the images (only with copies in the ground truth), a track
made from the opened run (metrics.json "robustness"). Its code: :mod:`xbench.score.sections.robustness`,
:mod:`xbench.score.sections.robustness_table`."""
from __future__ import annotations

from collections.abc import Mapping

from xbench.schemas.schema_versions import minor as schema_minor
from xbench.score.sections import robustness_table as RT
from xbench.score.sections.kinds import RunView, Track
from xbench.score.sections.plugins.phrases import phrase_metrics
from xbench.score.sections.robustness import score_robustness

__all__ = ["PLUGIN"]


class Robustness(Track):
    name = "robustness"
    title = "robustness"
    unit = "cases"
    section = "robustness"
    minor = schema_minor("metrics", "robustness")
    order = 40
    doc = "the same metrics on perturbed copies of the images (only with copies in the ground truth)"
    write_tables = staticmethod(RT.section_tables)
    page = staticmethod(RT.page)

    def run_section(self, run: RunView, *, bootstrap: int, seed: int, metric_params: Mapping, timings: dict) -> dict:
        if not any(getattr(run.gt.datasets[d], "perturbations", None) is not None for d in run.scored):
            return {}
        return score_robustness(run.sub, run.gt, list(run.scored), run.aligned, partial=run.partial,
                                metrics_from_counts=run.class_metrics, bootstrap=bootstrap, seed=seed,
                                thresholds=run.thresholds, metric_params=metric_params, timings=timings,
                                phrase_metrics=phrase_metrics)


PLUGIN = Robustness()
