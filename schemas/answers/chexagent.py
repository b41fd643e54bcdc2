"""CheXagent's boxes: ``<|box|>(x1,y1),(x2,y2)<|/box|>``, integers 0..100 = hundredths of the width and height.

Where the format is defined (github Stanford-AIMI/CheXagent at e4f31e6e):

* ``data_chexinstruct/dataset_processors/ms_cxr.py:48-56`` (and ``:96-103``, ``:157-164``, ``:205-213``; the
  same in ``siim.py``, ``candid.py``, ``object_cxr.py``, ``vindr_cxr.py``): the training targets. A box's
  corners are quantised to 1000 bins of the image's own width and height (``x / image_width * qbins``), then
  written by ``cvt`` (``ms_cxr.py:9-12``: ``min(coord, 999)``, then ``round(coord / 10)``): integers 0..100,
  top-left corner first, each box between the ``<|box|>`` and ``<|/box|>`` tokens, several boxes side by side,
  optionally after ``<|ref|>phrase<|/ref|>``.
* ``evaluation_chexbench/axis_2_image_text_reasoning/run_phrase_grounding.py:64-71``: the authors' reading of
  a response: the ``box`` entries of the tokenizer's ``to_list_format`` (hub code), each ``(x1,y1),(x2,y2)``
  made integers by dropping the brackets and splitting at the commas. Two quirks are not copied: that script
  scores only the first box, and an answer without a box silently reuses the previous answer's box (lines
  66-69); here every box of the answer counts, and an answer without one is a counted note.

So a corner value ``v`` is the fraction ``v / 100`` of the whole image (no crop: the targets are fractions of
the full frame). Whitespace around the numbers is allowed (the authors' ``int()`` allows it); anything else
between the tokens, a value above 100, an unclosed or nested ``<|box|>``, a
``<|/box|>`` without its opening token, or a corner pair that does not span a box, is a note for the answer.
"""
from __future__ import annotations

import re

from xbench.schemas.answers import AnswerFormat, BoxAnswer, note

OPEN, CLOSE = "<|box|>", "<|/box|>"
SCALE = 100
_NUM = r"\s*([0-9]{1,12})\s*"
#: the text between the tokens: (x1,y1),(x2,y2) (bounded digit runs: no backtracking blow-up, no huge int())
_BOX = re.compile(rf"\s*\({_NUM},{_NUM}\)\s*,\s*\({_NUM},{_NUM}\)\s*")


def parse(text: str) -> BoxAnswer:
    boxes, pos = [], 0
    while True:
        start = text.find(OPEN, pos)
        stray = text.find(CLOSE, pos)
        if start < 0:
            if stray >= 0:
                return note("malformed", f"{CLOSE} at character {stray} closes no {OPEN}")
            return BoxAnswer(tuple(boxes))
        if 0 <= stray < start:
            return note("malformed", f"{CLOSE} at character {stray} closes no {OPEN}")
        body = start + len(OPEN)
        end = text.find(CLOSE, body)
        if end < 0:
            return note("malformed", f"{OPEN} at character {start} is never closed")
        inner = text[body:end]
        if OPEN in inner:
            return note("malformed", f"{OPEN} at character {start} holds another {OPEN}")
        m = _BOX.fullmatch(inner)
        if m is None:
            return note("malformed", f"box {len(boxes) + 1} is not (x1,y1),(x2,y2) with whole numbers: "
                                     f"{inner[:40]!r}")
        if any(len(g.lstrip("0")) > 3 or int(g) > SCALE for g in m.groups()):
            return note("off the scale", f"box {len(boxes) + 1} has a corner value above {SCALE}: {inner[:40]!r}")
        x1, y1, x2, y2 = (int(g) / SCALE for g in m.groups())
        if x2 <= x1 or y2 <= y1:
            return note("empty box", f"box {len(boxes) + 1} ({inner.strip()[:40]}) has its second corner not below "
                                     "and right of its first")
        boxes.append((x1, y1, x2, y2))
        pos = end + len(CLOSE)


REGISTER = {"chexagent": "FORMAT"}
FORMAT = AnswerFormat(
    name="chexagent",
    description="CheXagent: <|box|>(x1,y1),(x2,y2)<|/box|>, integers 0..100 of the whole width and height",
    parse=parse, crops_square=False,
    source="Stanford-AIMI/CheXagent@e4f31e6e data_chexinstruct/dataset_processors/ms_cxr.py:9-12,48-56; "
           "evaluation_chexbench/axis_2_image_text_reasoning/run_phrase_grounding.py:64-71")
