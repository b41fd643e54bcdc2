"""The ranked leaderboard printed in a terminal (``xbench report``; ``report/leaderboard.txt``): one line per
model, overall values in percent with their 95 % intervals beside them, ranked by overall pointing game.

Intervals come from metrics.json, else from the ones the report computed from pair_counts.npz (``computed``),
so the terminal shows the numbers of the page; "[–]" where neither exists (scored with ``--bootstrap 0`` and
no pair counts).
"""
from __future__ import annotations

from xbench.schemas.errors import escape_text
from xbench.score.ranking import TERMINAL_COLUMNS, format_cell

__all__ = ["TERMINAL_COLUMNS", "format_cell", "leaderboard_text"]


def leaderboard_text(results, computed: dict | None = None) -> str:
    """The table as text: a heading line, the header, one line per model (rank, label, cells).

    ``results``: loaded results (``name``, ``metrics``); ``computed``: {label: intervals in the metrics.json
    layout} for results whose metrics.json has none. Labels are escaped (text from data never forges a line).
    """
    from xbench.score.tables import ci_of, value_of

    def key(r):
        v = value_of(r.metrics, "overall", TERMINAL_COLUMNS[0][0])
        return (v is None, -(v or 0.0), r.name)

    rows = []
    for r in sorted(results, key=key):
        comp = (computed or {}).get(r.name)
        part = r.partial() if hasattr(r, "partial") else None
        label = r.name + (f" (partial: {part['cases']} of {part['of']} cases)" if part else "")
        rows.append((escape_text(label), [format_cell(value_of(r.metrics, "overall", k),
                                                 ci_of(r.metrics, "overall", k, computed=comp))
                                           for k, _ in TERMINAL_COLUMNS]))
    width = max([len("model")] + [len(n) for n, _ in rows])
    widths = [max([len(h)] + [len(cells[i]) for _, cells in rows]) for i, (_, h) in enumerate(TERMINAL_COLUMNS)]
    lines = ["overall (%), ranked by pointing game, 95% interval in brackets; * best threshold, @.5 fixed threshold",
             f"{'#':>2}  {'model':<{width}}" + "".join(f"  {h:>{w}}" for (_, h), w in zip(TERMINAL_COLUMNS, widths))]
    for rank, (name, cells) in enumerate(rows, start=1):
        lines.append(f"{rank:>2}  {name:<{width}}" + "".join(f"  {c:>{w}}" for c, w in zip(cells, widths)))
    return "\n".join(lines)
