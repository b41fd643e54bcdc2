"""Faithfulness: deletion, insertion and ROAD from a round-2 submission (xbench-score --faithfulness --key), a
track made from the command's own inputs (metrics.json "faithfulness"). Its code:
:mod:`xbench.score.sections.faithfulness`."""
from __future__ import annotations

from xbench.score.sections import faithfulness as F
from xbench.score.sections.kinds import Track

__all__ = ["PLUGIN"]


class Faithfulness(Track):
    name = "faithfulness"
    title = "faithfulness"
    unit = "cases"
    section = "faithfulness"
    minor = F.METRICS_MINOR
    order = 70
    options = ("faithfulness", "key")
    doc = "deletion, insertion and ROAD from a round-2 submission (xbench-score --faithfulness --key)"
    prepare = staticmethod(F.prepare)
    add = staticmethod(F.add)
    write_tables = staticmethod(F.write_tables)
    page = staticmethod(F.page)


PLUGIN = Faithfulness()
