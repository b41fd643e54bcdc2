"""A generative model's own boxes, read from its answer text: one registered parser per output format.

MAIRA-2 and CheXagent answer a grounding question with box coordinates written in their text (their own
tokens, their own coordinate scale). Each public module of this package is one format: it defines
``FORMAT``, an :class:`AnswerFormat`, and ``REGISTER = {"<name>": "FORMAT"}``; the package is listed, so adding a format is adding its file (and its
test). :func:`parse_answer` turns one answer into :class:`BoxAnswer`: boxes as fractions of the frame the
model saw, and at most one note saying why the answer gave no usable box. :func:`boxes_in_pixels` undoes
the model's own framing onto the case's original image. The rules, the caps and each format's source are
in docs/contract.md, "A model's own boxes".

A model's text is untrusted input: whatever it holds (no box, a box off the scale, a million boxes,
bytes that are not UTF-8, unbalanced or nested tokens, absurd numbers) becomes a counted note for that
answer, never an exception, in time linear in the answer's length (answers are capped at
:data:`MAX_ANSWER_CHARS`). An answer with any problem gives no box at all (its well-formed boxes are not
kept either): a malformed answer is the model's, and guessing which part it meant is not the scorer's job.
An answer without a box is an answer without a box: nothing is carried over from another answer.

Standard library only (no numpy, zarr or torch), so both sides may use it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from xbench.schemas.registry import Registry

__all__ = ["ANSWER_FORMATS", "FRAMES", "MAX_ANSWER_CHARS", "MAX_BOXES_PER_ANSWER", "AnswerFormat", "BoxAnswer",
           "answer_format", "boxes_in_pixels", "parse_answer"]

#: the longest answer read, in characters: a grounded report of MAIRA-2 or CheXagent (512 new tokens in the
#: authors' evaluation) is a few KiB; longer text is a counted note, not parsed
MAX_ANSWER_CHARS = 65_536
#: the most boxes one answer may give (MS-CXR's phrases have 1 to 6 boxes); more is a counted note and the
#: answer gives none
MAX_BOXES_PER_ANSWER = 100
#: the frame a model saw: the case's original image (``original``: a format that crops undoes its crop with the
#: original width and height, as the authors do), or a square copy of the whole image (``square``: the images
#: store's stretched copy; fractions of the square are fractions of the original width and height)
FRAMES = ("original", "square")

#: the notes' kinds, in the order reports list them (each note starts with its kind)
NOTE_KINDS = ("no box", "not UTF-8", "too long", "too many boxes", "malformed", "off the scale", "empty box",
              "outside the image")


@dataclass(frozen=True, slots=True)
class BoxAnswer:
    """One answer read: ``boxes`` as (x0, y0, x1, y1) fractions of the frame the model saw (x of its width, y of
    its height; not yet checked against an image), ``note`` "<kind>: <detail>" when it gave no usable box."""

    boxes: tuple[tuple[float, float, float, float], ...] = ()
    note: str | None = None

    @property
    def kind(self) -> str | None:
        return None if self.note is None else self.note.partition(":")[0]


@dataclass(frozen=True)
class AnswerFormat:
    """One model's box output format.

    ``parse(text) -> BoxAnswer`` reads a text already checked for type, encoding and length; ``crops_square``:
    the model's image processor centre-crops the image to a square of its shorter side before the model sees it
    (its fractions are of that square); ``source``: where the format is defined in the authors' code (file:line).
    """

    name: str
    description: str
    parse: Callable[[str], BoxAnswer]
    crops_square: bool
    source: str
    aliases: tuple[str, ...] = field(default=())


ANSWER_FORMATS: Registry[AnswerFormat] = Registry("answer format", check=AnswerFormat,
                                                  hint="(docs/how-to/convert.md, \"A model's own boxes\")")
ANSWER_FORMATS.discover(__name__, __path__, declared="REGISTER")  # each module's REGISTER = {"name": "FORMAT"}


def answer_format(name: str) -> AnswerFormat:
    """The registered format ``name`` (UnknownNameError with the close names otherwise)."""
    return ANSWER_FORMATS.get(name)


def note(kind: str, detail: str) -> BoxAnswer:
    """An answer that gives no usable box, and why (``kind`` one of :data:`NOTE_KINDS`)."""
    assert kind in NOTE_KINDS, kind
    return BoxAnswer((), f"{kind}: {detail}")


def parse_answer(fmt: AnswerFormat | str, text: object) -> BoxAnswer:
    """Read one answer (a str, or the bytes a model's decoder gave) in format ``fmt``; never raises on ``text``."""
    fmt = answer_format(fmt) if isinstance(fmt, str) else fmt
    if isinstance(text, (bytes, bytearray)):
        if len(text) > 4 * MAX_ANSWER_CHARS:
            return note("too long", f"{len(text):,} bytes; the limit is {MAX_ANSWER_CHARS:,} characters")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            return note("not UTF-8", f"invalid byte at offset {exc.start}")
    if not isinstance(text, str):
        return note("malformed", f"the answer is {type(text).__name__}, not text")
    if len(text) > MAX_ANSWER_CHARS:
        return note("too long", f"{len(text):,} characters; the limit is {MAX_ANSWER_CHARS:,}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate (a JSON "\udcff" escape, or bytes decoded with surrogateescape)
        return note("not UTF-8", f"invalid character at offset {exc.start}")
    got = fmt.parse(text)
    if got.note is None and not got.boxes:
        return note("no box", "the answer holds no box")
    if len(got.boxes) > MAX_BOXES_PER_ANSWER:
        return note("too many boxes", f"{len(got.boxes):,}; the limit is {MAX_BOXES_PER_ANSWER}")
    return got


def boxes_in_pixels(fmt: AnswerFormat, boxes, orig_size: tuple[int, int],
                    frame: str = "original") -> list[tuple[float, float, float, float]]:
    """``(x, y, w, h)`` in the case's original pixels of fractional boxes ``(x0, y0, x1, y1)`` of the frame the
    model saw (``orig_size`` = (height, width)). Not checked against the image (the converter's rule does that).

    A format that crops to a square, on the ``original`` frame, is undone as its authors undo it: the fraction
    times the crop side plus the crop's offset, truncated to a whole pixel (MAIRA-2's
    ``adjust_box_for_original_image_size``). Otherwise the fractions are of the whole width and height."""
    if frame not in FRAMES:
        raise ValueError(f"frame must be one of {', '.join(FRAMES)}, got {frame!r}")
    h0, w0 = (int(v) for v in orig_size)
    out = []
    for x0, y0, x1, y1 in boxes:
        if fmt.crops_square and frame == "original":
            side = min(w0, h0)
            ox, oy = (w0 - side) // 2, (h0 - side) // 2
            ax0, ax1 = math.floor(x0 * side + ox), math.floor(x1 * side + ox)
            ay0, ay1 = math.floor(y0 * side + oy), math.floor(y1 * side + oy)
        else:
            ax0, ax1, ay0, ay1 = x0 * w0, x1 * w0, y0 * h0, y1 * h0
        out.append((float(ax0), float(ay0), float(ax1 - ax0), float(ay1 - ay0)))
    return out
