"""The gaze rows: the saliency measures of the models' maps against radiologists' gaze (issue 37), a row scope
whose rows are the cases with gaze in the ground truth (metrics.json "gaze"; a resample draws cases). Its code:
:mod:`xbench.score.sections.gaze`."""
from __future__ import annotations

from xbench.score.sections import gaze as G
from xbench.score.sections.kinds import RowScope

__all__ = ["PLUGIN"]


class GazeRows(RowScope):
    name = "gaze"
    title = "gaze rows"
    unit = "cases"
    kinds = ("gaze",)
    section = "gaze"
    minor = G.GAZE_METRICS_MINOR
    order = 20
    saves_counts = True
    doc = "the saliency measures of the models' maps against radiologists' gaze (only with gaze in the ground truth)"
    keys = staticmethod(G.gaze_keys)
    score = staticmethod(G.score_gaze)
    ground_truth_problems = staticmethod(G.ground_truth_problems)
    paired_rows = staticmethod(G.paired_rows)
    table_rows = staticmethod(G.gaze_rows)
    markdown = staticmethod(G.gaze_markdown)
    csv = staticmethod(G.gaze_csv)
    table = staticmethod(G.gaze_table)
    measures = staticmethod(G.measures)
    save_counts = staticmethod(G.save_counts)
    counts_problems = staticmethod(G.counts_problems)
    load_counts = staticmethod(G.load_counts)
    write_tables = staticmethod(G.write_gaze_tables)
    terminal = staticmethod(G.terminal_lines)


PLUGIN = GazeRows()
