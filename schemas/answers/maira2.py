"""MAIRA-2's boxes: ``<obj>phrase<box><x..><y..><x..><y..></box>...</obj>``, bins 0..99 of the square crop.

Where the format is defined: the processor MAIRA-2 ships as hub remote code, ``processing_maira2.py`` (read as
a reference only, never run by XBench; a copy at github johannes2moll/maira_rrg@a68f14ec, ``processing_maira2.py``;
transformers 5.24 has no MAIRA-2 class):

* ``:58-62``: the tokens ``<obj>``, ``</obj>``, ``<box>``, ``</box>`` and ``num_box_coord_bins = 100``;
* ``:507-539`` (``_get_text_between_delimiters``): the text must be a run of ``begin ... end`` pieces with
  nothing between or after them (anything else fails the authors' asserts);
* ``:542-610`` (``convert_output_to_plaintext_or_grounded_sequence``): the stripped answer with none of the four
  tokens is plain text (no box); otherwise each ``<obj>`` piece holding a box token splits at its first
  ``<box>`` into the phrase and its boxes, each box read by ``re.search`` of ``<x(\\d+?)><y(\\d+?)><x(\\d+?)><y(\\d+?)>``
  and made the fractions ``(bin + 0.5) / 100`` (top-left then bottom-right), refused outside [0, 1];
* ``:613-646`` (``adjust_box_for_original_image_size``): the fractions are of the centre square crop of side
  ``min(width, height)`` offset by ``((width - side) // 2, (height - side) // 2)``; a corner is
  ``int(fraction * side + offset)`` pixels of the original image (:func:`xbench.schemas.answers.boxes_in_pixels`).

This parser follows the same steps and refuses exactly what the authors' code refuses (as a note, where theirs
raises), checked against their code on generated answers (model_cards/maira-2-boxes.md). The digits are ASCII
(``[0-9]``; the tokens ``<x0>``..``<x99>`` are ASCII) and a bin of more than 3 digits is off the scale before it
is made a number (leading zeros aside, as ``int()`` reads them).
"""
from __future__ import annotations

import re

from xbench.schemas.answers import AnswerFormat, BoxAnswer, note

PHRASE_START, PHRASE_END, BOX_START, BOX_END = "<obj>", "</obj>", "<box>", "</box>"
BINS = 100
_BOX = re.compile(r"<x([0-9]+)><y([0-9]+)><x([0-9]+)><y([0-9]+)>")


def _pieces(text: str, begin: str, end: str) -> list[str] | str:
    """The pieces ``begin ... end`` that make up ``text`` whole, or why it is not made of them (linear time)."""
    out, pos = [], 0
    while text.find(begin, pos) >= 0:
        if not text.startswith(begin, pos):
            return f"text before {begin} at character {pos}"
        stop = text.find(end, pos + len(begin))
        if stop < 0:
            return f"{begin} at character {pos} is never closed by {end}"
        out.append(text[pos + len(begin):stop])
        pos = stop + len(end)
    if pos != len(text):
        return f"text after the last {end}" if out else f"text outside {begin}...{end}"
    return out


def parse(text: str) -> BoxAnswer:
    text = text.strip()
    if not any(t in text for t in (PHRASE_START, PHRASE_END, BOX_START, BOX_END)):
        return BoxAnswer(())  # plain text: no box
    phrases = _pieces(text, PHRASE_START, PHRASE_END)
    if isinstance(phrases, str):
        return note("malformed", phrases)
    boxes = []
    for k, piece in enumerate(phrases):
        if BOX_START not in piece and BOX_END not in piece:
            continue  # an ungrounded phrase
        first = piece.find(BOX_START)  # -1 when only </box> is there: the authors then read the last character
        got = _pieces(piece[first:], BOX_START, BOX_END)
        if isinstance(got, str):
            return note("malformed", f"phrase {k + 1}: {got}")
        for j, inner in enumerate(got):
            m = _BOX.search(inner)
            if m is None:
                return note("malformed", f"phrase {k + 1}, box {j + 1} is not <x..><y..><x..><y..>: {inner[:40]!r}")
            if any(len(g.lstrip("0")) > 3 or int(g) > BINS - 1 for g in m.groups()):
                return note("off the scale", f"phrase {k + 1}, box {j + 1} has a bin above {BINS - 1}: {inner[:40]!r}")
            x0, y0, x1, y1 = ((int(g) + 0.5) / BINS for g in m.groups())
            boxes.append((x0, y0, x1, y1))
    return BoxAnswer(tuple(boxes))


REGISTER = {"maira-2": "FORMAT"}
FORMAT = AnswerFormat(
    name="maira-2",
    description="MAIRA-2: <obj>phrase<box><x..><y..><x..><y..></box></obj>, bins 0..99 of the centre square crop",
    parse=parse, crops_square=True,
    source="microsoft MAIRA-2 processing_maira2.py (hub remote code; copy johannes2moll/maira_rrg@a68f14ec) "
           ":58-62,507-539,542-610,613-646")
