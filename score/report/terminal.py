"""Everything the commands print as a table in a terminal, one renderer each, readable at 100 columns.

- :func:`board_text`: the ranked leaderboard (``xbench-score`` with several submissions, ``xbench report`` and
  its ``report/leaderboard.txt``, ``xbench run`` and ``xbench demo``): one row per model, ranked by overall
  pointing game (then Dice*, then name), overall values in percent, each row's 95 % intervals on the line
  below it, the same headers everywhere (:data:`TERMINAL_COLUMNS`).
- :func:`overall_lines`: one scored submission (``xbench-score``): its row of the board, then every other
  overall metric wrapped at :data:`WIDTH` columns (not 23 values on one line).
- :func:`comparison_text`: ``xbench compare``'s rows as plain aligned text (the Markdown table, with its
  ``\\[`` escapes, is for files; a terminal gets the names as they are, control characters escaped).

Intervals come from metrics.json, else from the ones the report computed from pair_counts.npz (``computed``),
so the terminal shows the numbers of the page; "[–]" where neither exists (scored with ``--bootstrap 0`` and
no pair counts). Names come from submissions: :func:`escape_text` keeps each on its own line.
"""
from __future__ import annotations

import textwrap

from xbench.schemas.errors import escape_text
from xbench.score.outputs.leaderboard import TERMINAL_COLUMNS, format_cell

__all__ = ["TERMINAL_COLUMNS", "WIDTH", "board_text", "comparison_text", "format_cell", "format_interval",
           "leaderboard_text", "overall_lines"]

#: the terminal width every table here fits
WIDTH = 100
#: the board's first line: what the numbers are
BOARD_HEADING = "overall (%) ranked by pointing game; 95% interval under each value; * best threshold, @.5 fixed"


def format_value(value) -> str:
    """A share in percent with 2 decimals, "-" when undefined."""
    return "-" if value is None else f"{100 * value:.2f}"


def format_interval(ci) -> str:
    """A 95 % interval in percent, "[30.21, 53.80]"; "[–]" when there is none."""
    if not ci or ci[0] is None or ci[1] is None:
        return "[–]"
    return f"[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]"


def _rank_key(label: str, overall: dict):
    pg, dice = overall.get("pointing_game"), overall.get("dice_best")
    return (pg is None, -(pg or 0.0), dice is None, -(dice or 0.0), label)


def board_text(rows, *, heading: str | None = BOARD_HEADING, numbered: bool = True, name_header: str = "model") -> str:
    """The ranked board. ``rows``: (label, the metrics.json "overall" dict[, {key: (low, high)}]).

    Each model takes two lines: rank, name and values; then its intervals under the values. A name longer than
    the room left at :data:`WIDTH` columns goes on a line of its own above them."""
    items = []
    for r in rows:
        label, overall = escape_text(str(r[0])), r[1] or {}
        ci = (r[2] if len(r) > 2 else None) or {}
        items.append((label, overall, ci))
    items.sort(key=lambda it: _rank_key(it[0], it[1]))
    values = [[format_value(ov.get(k)) for k, _ in TERMINAL_COLUMNS] for _, ov, _ in items]
    intervals = [[format_interval(ci.get(k)) if ov.get(k) is not None else "" for k, _ in TERMINAL_COLUMNS]
                 for _, ov, ci in items]
    widths = [max([len(h)] + [len(v[j]) for v in values] + [len(c[j]) for c in intervals])
              for j, (_, h) in enumerate(TERMINAL_COLUMNS)]
    cells_width = sum(2 + w for w in widths)
    room = max(len(name_header), 5, WIDTH - 4 - cells_width)
    name_w = min(room, max([len(name_header)] + [len(label) for label, _, _ in items]))

    def line(rank: str, name: str, cells) -> str:
        return (f"{rank:>2}  {name:<{name_w}}" + "".join(f"  {c:>{w}}" for c, w in zip(cells, widths))).rstrip()

    lines = [heading] if heading else []
    lines.append(line("#" if numbered else "", name_header, [h for _, h in TERMINAL_COLUMNS]))
    for i, ((label, _, _), vals, cis) in enumerate(zip(items, values, intervals), start=1):
        rank = str(i) if numbered else ""
        if len(label) > name_w:  # on its own line: the columns stay where the header puts them
            lines.append(f"{rank:>2}  {label}")
            rank = ""
            label = ""
        lines.append(line(rank, label, vals))
        if any(cis):
            lines.append(line("", "", cis))
    return "\n".join(lines)


def leaderboard_text(results, computed: dict | None = None) -> str:
    """``xbench report``'s board (report/leaderboard.txt and the terminal) from loaded results (``name``,
    ``metrics``); ``computed``: {label: intervals in the metrics.json layout} for results whose metrics.json
    has none."""
    from xbench.score.outputs.tables import ci_of, value_of

    rows = []
    for r in results:
        comp = (computed or {}).get(r.name)
        part = r.partial() if hasattr(r, "partial") else None
        label = r.name + (f" (partial: {part['cases']} of {part['of']} cases)" if part else "")
        rows.append((label, {k: value_of(r.metrics, "overall", k) for k, _ in TERMINAL_COLUMNS},
                     {k: ci_of(r.metrics, "overall", k, computed=comp) for k, _ in TERMINAL_COLUMNS}))
    return board_text(rows)


def _wrap_items(first: str, items: list[str], indent: str) -> list[str]:
    """``items`` joined by ", " into lines of at most :data:`WIDTH` columns; an item is never split."""
    lines, cur = [], first
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if cur.strip() and len(cur) + len(piece) + (0 if cur.endswith(" ") else 1) > WIDTH:
            lines.append(cur.rstrip())
            cur = indent
        cur += ("" if cur.endswith(" ") else " ") + piece
    lines.append(cur.rstrip())
    return lines


def overall_lines(overall: dict, ci: dict | None = None) -> list[str]:
    """One submission's overall values: the board's columns (values and intervals), then every other defined
    metric as "key value" pairs (percent; 2 decimals) wrapped at :data:`WIDTH` columns."""
    shown = {k for k, _ in TERMINAL_COLUMNS}
    lines = board_text([("overall (%)", overall, ci or {})], heading=None, numbered=False, name_header="").splitlines()
    rest = [f"{escape_text(str(k))} {100 * v:.2f}" for k, v in overall.items() if k not in shown and v is not None]
    if rest:
        lines += _wrap_items("  also (%): ", rest, "    ")
    return lines


def comparison_text(rows, a_name: str, b_name: str) -> str:
    """``xbench compare`` for a terminal: the rows of the Markdown table (score/report/__init__.py's
    ``comparison_markdown``) as aligned plain text, grouped by scope; the p-value note as wrapped text."""
    from xbench.score.table import METRIC_TITLES, shown_value

    from xbench.score.resampling.engine import ALPHA

    from xbench.score.report.paired import format_p, p_note, scope_title, shown_once, units_note

    a, b = escape_text(a_name), escape_text(b_name)
    notes_rows = rows
    rows, repeats = shown_once(rows)  # one dataset: its summary equals Overall, printed once
    head = ["class", "metric", "A", "B", "A − B", "95% CI", "p", "p (Holm)"]
    right = [False, False, True, True, True, False, True, True]
    table: list[tuple[str, list[str]]] = []
    for r in rows:
        def shown(x, sign=""):
            return "–" if x is None else f"{shown_value(r.metric, x):{sign}.2f}"

        ci = "–" if r.ci_lo is None else f"{shown(r.ci_lo, '+')} to {shown(r.ci_hi, '+')}"
        d = "–" if r.diff is None else shown(r.diff, "+") + ("*" if r.significant else "")
        scope = scope_title(r.scope, repeats)
        table.append((escape_text(str(scope)), [escape_text(str(r.cls or "")), str(METRIC_TITLES.get(r.metric, r.metric)),
                                                 shown(r.a), shown(r.b), d, ci, format_p(r.p_value, r.p_floor),
                                                 format_p(r.p_holm, r.p_floor)]))
    widths = [max([len(h)] + [len(c[j]) for _, c in table]) for j, h in enumerate(head)]
    if not any(c[0] for _, c in table):  # no per-class rows: no class column
        widths[0] = 0

    def line(cells) -> str:
        return "  ".join((f"{c:>{w}}" if rt else f"{c:<{w}}") for c, w, rt in zip(cells, widths, right) if w).rstrip()

    out = textwrap.wrap(f"{a} vs {b}: paired bootstrap of A − B ({units_note(notes_rows)}); "
                        f"* = significant: Holm-adjusted p < {ALPHA:g}. " + p_note(notes_rows), width=WIDTH,
                        break_on_hyphens=False)
    out += ["", "  " + line(head)]
    scope = None
    for s, cells in table:
        if s != scope:
            out.append(s)
            scope = s
        out.append("  " + line(cells))
    return "\n".join(out)
