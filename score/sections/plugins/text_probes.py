"""The text probes: paraphrases, negations and decoys of the phrase rows (only with probes in the ground truth), a
track made from the opened run (metrics.json "text_probes"). Its code: :mod:`xbench.score.sections.probes`,
:mod:`xbench.score.sections.probe_table`."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xbench.score.sections import probe_table as PT
from xbench.score.sections.kinds import RunView, Track
from xbench.score.sections.probes import PROBES_METRICS_MINOR, score_probes

__all__ = ["PLUGIN"]


class TextProbes(Track):
    name = "text_probes"
    title = "text probes"
    unit = "images"
    section = "text_probes"
    minor = PROBES_METRICS_MINOR
    order = 30
    page_at = "end"
    doc = "paraphrases, negations and decoys of the phrase rows (only with probes in the ground truth)"
    write_tables = staticmethod(PT.section_tables)
    page = staticmethod(PT.page)

    def run_section(self, run: RunView, *, bootstrap: int, seed: int, metric_params: Mapping, timings: dict) -> dict:
        return score_probes(run.sub, run.gt, run.scored, bootstrap=bootstrap, seed=seed, cases=run.cases(),
                            units={d: int(np.count_nonzero(run.aligned[d][0] >= 0)) for d in run.scored})


PLUGIN = TextProbes()
