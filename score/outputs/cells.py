"""Escaping at the writers: labels (model, class, dataset names) come from submissions, i.e. from anyone.

Below every table writer (:mod:`xbench.score.outputs.tables`, the phrase table of :mod:`xbench.score.sections.phrases`, the
report), so none imports another for it.
"""
from __future__ import annotations

__all__ = ["md_cell", "csv_cell"]

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
