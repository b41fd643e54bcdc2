"""Escaping at the writers: labels (model, class, dataset names) come from submissions, i.e. from anyone.

At the bottom of score/'s layers (docs/explanation/architecture.md), below every table writer (the sections' own tables and
page fragments, :mod:`xbench.score.outputs.tables`, the report), so none imports another for it.
"""
from __future__ import annotations

import html
import re

__all__ = ["md_cell", "csv_cell", "html_text", "html_box"]

_MD_SPECIAL = {c: "\\" + c for c in "\\|*_`[]$~"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;", "\n": " ", "\r": " "}
#: OWASP's CSV-injection rule: a cell starting with one of these is a formula to a spreadsheet (\0 per ASVS 1.2.10).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\0")


def md_cell(text) -> str:
    """``text`` as literal Markdown table-cell content: no column break (``|``), no new row (line breaks become
    spaces), no HTML (``<script>`` shows as text), no emphasis, links, code or math."""
    return "".join(_MD_SPECIAL.get(ch, ch) for ch in str(text))


def csv_cell(text):
    """A text cell that a spreadsheet shows as text: a leading ``'`` when it starts like a formula (OWASP).
    Numbers pass unchanged (a negative value is data, not a formula); quoting is left to the csv writer."""
    if not isinstance(text, str):
        return text
    return "'" + text if text.startswith(_FORMULA_START) else text


def html_text(text) -> str:
    """``text`` escaped for HTML text and attribute values (quotes included)."""
    return html.escape(str(text), quote=True)


def html_box(table_html: str) -> str:
    """A table in a box of its own that scrolls (sideways and down, the header row and model column kept in view),
    its caption moved below the box as a paragraph: inside a table a caption is as wide as the table, so a wide
    table's caption would scroll out of view with its last columns."""
    m = re.search(r"<caption>(.*?)</caption>", table_html, flags=re.S)
    caption = ""
    if m:
        table_html = table_html[:m.start()] + table_html[m.end():]
        caption = f'<p class="caption">{m.group(1)}</p>'
    return f'<div class="scroll">{table_html}</div>{caption}'
