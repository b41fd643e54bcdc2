"""Human ceilings: a second radiologist scored like a model, and the model's % of human (xbench-score --human), a
track made from the command's own inputs (metrics.json "human"). Its code: :mod:`xbench.score.sections.human`."""
from __future__ import annotations

from xbench.score.sections.human import page as HP
from xbench.score.sections.human import section as HS
from xbench.score.sections.human import tables as HT
from xbench.score.sections.kinds import Track

__all__ = ["PLUGIN"]


class HumanCeilings(Track):
    name = "human"
    title = "human ceilings"
    unit = "cases"
    section = "human"
    minor = HS.HUMAN_METRICS_MINOR
    order = 50
    options = ("human_dir",)
    doc = "a second radiologist scored like a model, and the model's % of human (xbench-score --human)"
    prepare = staticmethod(HS.prepare)
    add = staticmethod(HS.add)
    write_tables = staticmethod(HT.section_tables)
    terminal = staticmethod(HT.human_lines)
    page = staticmethod(HP.report_sections)


PLUGIN = HumanCeilings()
