"""A generative model's answers (JSONL) -> submission.zarr: its own boxes, scored through the boxes route.

``xbench-convert answers.jsonl --answers chexagent --images images.zarr --out boxes.zarr`` reads one answer a
line (docs/how-to/convert.md, "A model's own boxes")::

    {"case_id": "<case>", "finding": "<finding>", "text": "<the model's answer>", "score": p}
    {"query_id": "<phrase row>", "text": "<the model's answer>"}

``dataset`` names the row's dataset (default ``--dataset``, else the images store's only one); ``score`` (the
finding's probability, e.g. from the likelihood of "yes") is optional; ``case_id`` is optional on a phrase row
(when given it must be the phrase's image). The answer text is read by the registered format
(:mod:`xbench.schemas.answers`), its boxes undone onto the case's original image and written by the same rule
as a marks JSON holding those boxes (:func:`xbench.schemas.convert_boxes.write_parsed`): each box counts 1, the
finding's score is its ``score``, else 1 when the answer gave a box, else 0. A finding no row asks about, in a
dataset, is declared unsupported there.

Two kinds of trouble, kept apart. The file and its rows are the team's own wrapper: a line that is not a JSON
object, an unknown key, a case or phrase row not in the images store, a row given twice, a bad ``score`` are
refused, one problem a line, exit 2, nothing written. The answer text is the model's: whatever it holds is a
counted note for its row (the row then gives no box), never a refusal; the counts and the first notes are
kept in the store's provenance and summed up on the terminal.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from xbench.schemas.answers import FRAMES, NOTE_KINDS, AnswerFormat, answer_format, boxes_in_pixels, parse_answer
from xbench.schemas.convert import Problems
from xbench.schemas.convert_boxes import DEFAULT_GRID, MAX_MARKS, mark_problem, read_mapping, read_marks, write_parsed
from xbench.schemas.errors import InputError, InputLimitError, InvalidStoreError, Problem
from xbench.schemas.inputs import MiB, TextLimits, parse_json, read_bytes

#: an answers file: its size, its rows, and each row's JSON (a flat object) are capped before it is parsed
ANSWERS_MAX_BYTES = 128 * MiB
MAX_ANSWER_ROWS = 1_000_000
ROW_LIMITS = TextLimits(max_bytes=1 * MiB, max_depth=1, max_elements=16)
ROW_KEYS = ("dataset", "case_id", "finding", "query_id", "text", "score")
#: notes shown in the provenance (the counts cover all of them)
MAX_NOTE_EXAMPLES = 20


@dataclass
class Notes:
    """What the model's answers gave: rows read, boxes kept, and the rows that gave none, by kind."""

    rows: int = 0
    boxes: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def add(self, where: str, text: str) -> None:
        kind = text.partition(":")[0]
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if len(self.examples) < MAX_NOTE_EXAMPLES:
            self.examples.append(f"{where}: {text}")

    def summary(self) -> str:
        """One line for the terminal."""
        noted = sum(self.counts.values())
        kinds = ", ".join(f"{k} {self.counts[k]}" for k in NOTE_KINDS if k in self.counts)
        tail = f"; {noted} gave no usable box ({kinds})" if noted else ""
        return f"{self.rows} answer(s), {self.boxes} box(es){tail}"

    def as_dict(self) -> dict:
        return {"rows": self.rows, "boxes": self.boxes, "notes": {k: self.counts[k] for k in NOTE_KINDS if k in self.counts},
                "note_examples": list(self.examples)}


def _lines(src: Path):
    """(line number, text) of each non-blank line; bytes that are not UTF-8 are kept as surrogates, so a row's
    structure is still read and only its answer text (where they belong to a model) is noted."""
    data = read_bytes(src, max_bytes=ANSWERS_MAX_BYTES, where=str(src))
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    n = 0
    for k, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        n += 1
        if n > MAX_ANSWER_ROWS:
            raise InputLimitError(Problem(str(src), f"holds more than {MAX_ANSWER_ROWS:,} answers; the limit is stated "
                                                    "in docs/how-to/convert.md"))
        yield k, raw.decode("utf-8", "surrogateescape")


def _row_problem(row) -> str | None:
    if not isinstance(row, dict):
        return "must be an object {case_id, finding, text} or {query_id, text}"
    unknown = sorted(set(row) - set(ROW_KEYS))
    if unknown:
        return f"unknown key(s) {', '.join(unknown)} (expected {', '.join(ROW_KEYS)})"
    if ("finding" in row) == ("query_id" in row):
        return "names a finding (with case_id) or a phrase row (query_id): exactly one of them"
    if "finding" in row and "case_id" not in row:
        return "lacks case_id"
    if "text" not in row:
        return "lacks text (the model's answer)"
    for key in ("dataset", "case_id", "finding", "query_id", "text"):
        if key in row and not isinstance(row[key], str):
            return f"{key} must be a string"
    score = row.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                              or not math.isfinite(score) or not 0.0 <= score <= 1.0):
        return f"score must be a probability in [0, 1], got {score!r:.40}"
    return None


@dataclass
class _Reader:
    """Reads the rows of one answers file into the marks JSON layout (pixels) and the notes."""

    src: Path
    store: object
    fmt: AnswerFormat
    frame: str
    dataset: str | None
    problems: Problems = field(default_factory=Problems)
    notes: Notes = field(default_factory=Notes)
    marks: dict = field(default_factory=lambda: {"coordinates": "pixels", "datasets": {}, "phrases": {}})
    asked: dict[str, set[str]] = field(default_factory=dict)
    seen: dict[tuple, int] = field(default_factory=dict)
    lookups: dict[str, tuple[dict[str, int], dict[str, int]]] = field(default_factory=dict)

    def lookup(self, name: str) -> tuple[dict[str, int], dict[str, int]]:
        """(case id -> row, query id -> phrase row) of a dataset, built once."""
        if name not in self.lookups:
            ds = self.store.datasets[name]
            self.lookups[name] = ({str(c): i for i, c in enumerate(ds.case_id)},
                                  {str(q): i for i, q in enumerate(ds.queries.id.tolist())} if ds.queries is not None
                                  else {})
        return self.lookups[name]

    def dataset_of(self, row: dict, where: str) -> str | None:
        name = row.get("dataset", self.dataset)
        names = sorted(self.store.datasets)
        if name is None:
            if len(names) == 1:
                return names[0]
            self.problems.add(where, f"names no dataset; give \"dataset\" or --dataset (the images store has "
                                     f"{', '.join(names)})")
            return None
        if name not in self.store.datasets:
            self.problems.add(where, f"dataset {name!r:.60} is not in the images store ({', '.join(names)})")
            return None
        return name

    def target(self, row: dict, where: str, name: str):
        """(key for duplicates, the case's row index, the marks dict the entry goes into, its key) or None."""
        ds = self.store.datasets[name]
        cases, queries = self.lookup(name)
        case = row.get("case_id")
        if case is not None and case not in cases:
            self.problems.add(where, f"case_id {case!r:.60} is not in the images store's {name}")
            return None
        if "finding" in row:
            self.asked.setdefault(name, set()).add(row["finding"])
            per_case = self.marks["datasets"].setdefault(name, {}).setdefault(case, {})
            return (name, case, "finding", row["finding"]), cases[case], per_case, row["finding"]
        qrow = queries.get(row["query_id"])
        if qrow is None:
            self.problems.add(where, f"query_id {row['query_id']!r:.60} is not a phrase row of the images store's "
                                     f"{name}" + ("" if queries else " (it has none)"))
            return None
        image = int(ds.queries.case[qrow])
        if case is not None and cases[case] != image:
            self.problems.add(where, f"query_id {row['query_id']!r:.60} is a phrase of case {str(ds.case_id[image])!r}, "
                                     f"not of {case!r:.60}")
            return None
        return (name, "query", row["query_id"]), image, self.marks["phrases"].setdefault(name, {}), row["query_id"]

    def read_row(self, k: int, line: str) -> None:
        where = f"{self.src}: line {k}"
        try:
            row = parse_json(line, where, ROW_LIMITS)
        except InputError as exc:
            self.problems.extend(exc.problems)
            return
        why = _row_problem(row)
        if why:
            self.problems.add(where, why)
            return
        name = self.dataset_of(row, where)
        got = self.target(row, where, name) if name is not None else None
        if got is None:
            return
        key, image, into, label = got
        if key in self.seen:
            self.problems.add(where, f"repeats the answer of line {self.seen[key]} (one answer per case and finding, "
                                     "or per phrase row)")
            return
        self.seen[key] = k
        self.notes.rows += 1
        size = tuple(int(v) for v in self.store.datasets[name].orig_size[image])
        entry = {"boxes": self.boxes(row["text"], size, f"line {k}")}
        if row.get("score") is not None:
            entry["score"] = float(row["score"])
        into[label] = entry

    def boxes(self, text: str, size: tuple[int, int], where: str) -> list[list[float]]:
        """The answer's boxes in original pixels (x, y, w, h), or [] with its note counted."""
        answer = parse_answer(self.fmt, text)
        if answer.note is not None:
            self.notes.add(where, answer.note)
            return []
        pixels = boxes_in_pixels(self.fmt, answer.boxes, size, self.frame)
        for j, box in enumerate(pixels):
            why = mark_problem(box, 1.0, size)
            if why:
                kind = "outside the image" if "outside" in why else "empty box"
                self.notes.add(where, f"{kind}: box {j + 1} in pixels {why}")
                return []
        self.notes.boxes += len(pixels)
        if self.notes.boxes > MAX_MARKS:
            raise InputLimitError(Problem(str(self.src), f"its answers give more than {MAX_MARKS:,} boxes; the limit "
                                                         "is stated in docs/how-to/convert.md"))
        return [list(b) for b in pixels]


def read_answers(src: Path, store, *, fmt: AnswerFormat, frame: str, dataset: str | None, mapping: dict):
    """(Parsed, Notes) of an answers file against the images store (problems of the wrapper raised together)."""
    if frame not in FRAMES:
        raise InvalidStoreError(Problem("--answers-frame", f"must be one of {', '.join(FRAMES)}, got {frame!r}"))
    if dataset is not None and dataset not in store.datasets:
        raise InvalidStoreError(Problem("--dataset", f"{dataset!r} is not in the images store (it has "
                                                     f"{', '.join(sorted(store.datasets))})"))
    reader = _Reader(src, store, fmt, frame, dataset)
    for k, line in _lines(src):
        reader.read_row(k, line)
    if not reader.notes.rows and not reader.problems:
        reader.problems.add(str(src), "holds no answer")
    reader.problems.raise_if_any()
    marks = reader.marks
    marks["model"] = mapping["model"] or fmt.name
    if not marks["phrases"]:
        del marks["phrases"]
    parsed = read_marks(src, store, mapping=mapping, data=marks)
    for name in parsed.findings:  # a finding no row asks about was not asked: unsupported, not "absent"
        classes = tuple(store.datasets[name].classes)
        asked = {f for label in reader.asked.get(name, ()) if (f := _resolved(label, mapping, classes))}
        parsed.unsupported[name] = [c for c in classes if c not in asked]
    parsed.info = {"format": "answers-jsonl", "answer_format": fmt.name, "answer_source": fmt.source,
                   "frame": frame, **reader.notes.as_dict()}
    parsed.method = "boxes"
    return parsed, reader.notes


def _resolved(label: str, mapping: dict, classes: tuple[str, ...]) -> str | None:
    from xbench.schemas.convert_boxes import _resolve_name

    return _resolve_name(label, mapping["categories"], classes)


def convert_answers(src: str | Path, out: str | Path, *, images: str | Path, answers: str, frame: str = "original",
                    mapping: str | Path | None = None, dataset: str | None = None, grid: int | None = None,
                    cases_per_block: int = 64, map_dtype: str = "float32",
                    progress: Callable[[int], None] | None = None, total: Callable[[int], None] | None = None,
                    gt=None, require_phrases: bool = False, phrases_reason: str | None = None) -> tuple[Path, Notes]:
    """Convert an answers file (the layout in the module docstring) into a submission store; (out, the notes)."""
    from xbench.schemas.convert import _refuse_out_in_inputs
    from xbench.schemas.images import read_images

    src = Path(src)
    _refuse_out_in_inputs(out, src, gt)
    fmt = answer_format(answers)
    grid = DEFAULT_GRID if grid is None else grid
    if not 1 <= grid <= 1024:
        raise InvalidStoreError(Problem("--grid", f"must be 1..1024 cells per side, got {grid}"))
    store = read_images(images)
    maps = read_mapping(Path(mapping) if mapping else None)
    parsed, notes = read_answers(src, store, fmt=fmt, frame=frame, dataset=dataset, mapping=maps)
    path = write_parsed(parsed, store, src, out, mapping=mapping, images=images, grid=grid,
                        cases_per_block=cases_per_block, map_dtype=map_dtype, progress=progress, total=total, gt=gt,
                        require_phrases=require_phrases, phrases_reason=phrases_reason)
    return path, notes
