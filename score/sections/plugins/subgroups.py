"""Subgroups: every metric per group of case attributes, and the gap between groups (xbench-score --by), a track
made from the command's own inputs that keeps its groups' counts for paired comparisons (metrics.json
"subgroups"). Its code: :mod:`xbench.score.sections.subgroups`."""
from __future__ import annotations

from xbench.score.sections import subgroups as S
from xbench.score.sections.kinds import Track

__all__ = ["PLUGIN"]


class Subgroups(Track):
    name = "subgroups"
    title = "subgroups"
    unit = "cases"
    section = "subgroups"
    minor = S.SUBGROUP_METRICS_MINOR
    order = 60
    options = ("by", "age_bands", "min_group")
    saves_counts = True
    doc = "every metric per group of case attributes, and the gap between groups (xbench-score --by)"
    prepare = staticmethod(S.prepare)
    add = staticmethod(S.add)
    write_tables = staticmethod(S.write_subgroup_tables)
    save_counts = staticmethod(S.save_counts)
    counts_problems = staticmethod(S.counts_problems)
    load_counts = staticmethod(S.load_counts)
    paired_rows = staticmethod(S.paired_rows)
    compare = staticmethod(S.compare_lines)
    page = staticmethod(S.page)


PLUGIN = Subgroups()
