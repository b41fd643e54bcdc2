"""Text probes of phrase rows (``xbench-prepare --text-probes``): each phrase negated, its side swapped, its
words shuffled, as extra phrase rows with their own ids (contract §Text probes; docs/how-to/text-probes.md).

The rules, on the phrase as stored (whitespace already collapsed to single spaces by the readers):

* **negation**: ``"no " + phrase``, the phrase unchanged (an MS-CXR phrase names a finding that is present,
  so the probe names its absence; the rule does not parse the sentence).
* **laterality**: every whole word ``left`` or ``right`` (ASCII letters between non-letters, any case, also
  inside ``left-sided``) becomes the other, keeping its case pattern (``Left`` -> ``Right``, ``LEFT`` ->
  ``RIGHT``, otherwise lower case). ``L``/``R``/``lt``/``rt`` are not swapped (too ambiguous in reports:
  "R" is also a marker, "L" a unit). A phrase without such a word gets no laterality probe.
* **shuffle**: the words (split on spaces; punctuation stays with its word) in the order of
  ``numpy.random.default_rng(s).permutation(n)``, s the first 8 bytes (big-endian) of
  sha256("<seed>\\0<query id>"), so a phrase's probe never depends on the other phrases; when that order
  gives the phrase back, the words rotated left by one instead. A phrase whose words are all equal (a
  one-word phrase among them) gets no shuffle probe: no order differs from its own.

A probe's id is ``<case id>#`` + the first 12 hex digits of sha256("<query id>\\0<kind>"): it names its
image, as every phrase id does, but neither its original nor its kind; that mapping (``query_probe_of``,
``query_probe_kind``) is written to the private ground truth only. A probe's region is its original's.
"""
from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

import numpy as np

__all__ = ["KINDS", "negate", "swap_sides", "shuffle_words", "probe_id", "Probes", "add_probes", "DEFAULT_SEED"]

#: probe kinds, in the order their rows follow the original phrases
KINDS = ("negation", "laterality", "shuffle")
DEFAULT_SEED = 0
_SIDE = re.compile(r"(?<![A-Za-z])(left|right)(?![A-Za-z])", re.IGNORECASE)
_OTHER = {"left": "right", "right": "left"}


def negate(phrase: str) -> str:
    return "no " + phrase


def _same_case(word: str, template: str) -> str:
    if template.isupper():
        return word.upper()
    if template[0].isupper():
        return word.capitalize()
    return word


def swap_sides(phrase: str) -> str | None:
    """The phrase with left and right swapped, or None when it names no side."""
    if not _SIDE.search(phrase):
        return None
    return _SIDE.sub(lambda m: _same_case(_OTHER[m.group(1).lower()], m.group(1)), phrase)


def _seed_of(query_id: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\0{query_id}".encode()).digest()[:8], "big")


def shuffle_words(phrase: str, query_id: str, seed: int = DEFAULT_SEED) -> str | None:
    """The phrase's words in a seeded order that differs from its own, or None when no order differs."""
    words = phrase.split(" ")
    if len(set(words)) < 2:
        return None
    order = np.random.default_rng(_seed_of(query_id, seed)).permutation(len(words))
    out = " ".join(words[i] for i in order)
    return out if out != phrase else " ".join(words[1:] + words[:1])


def probe_id(case_id: str, query_id: str, kind: str) -> str:
    digest = hashlib.sha256((query_id + "\0" + kind).encode()).hexdigest()
    return f"{case_id}#{digest[:12]}"


class Probes(NamedTuple):
    """Phrase rows with their probes: ``queries`` (originals and probes, in case order), and per row ``source``
    (the row of its original phrase in the input, its own row for an original), ``of`` (the original's id, ""
    for an original) and ``kind`` ("" for an original)."""

    queries: object  # xbench.schemas.queries.Queries, with text
    source: np.ndarray
    of: np.ndarray
    kind: np.ndarray


def add_probes(queries, case_ids, seed: int = DEFAULT_SEED) -> Probes:
    """``queries`` (with text; case order) followed, per case, by the probes of that case's phrases."""
    from xbench.schemas.queries import Queries

    ids, cases, cats, texts, source, of, kinds = [], [], [], [], [], [], []

    def add(qid, case, cat, text, src, orig, kind):
        ids.append(qid), cases.append(case), cats.append(cat), texts.append(text)
        source.append(src), of.append(orig), kinds.append(kind)

    case = np.asarray(queries.case, np.int64)
    starts = np.flatnonzero(np.r_[True, case[1:] != case[:-1]]) if len(case) else np.zeros(0, np.int64)
    for a, b in zip(starts, np.r_[starts[1:], len(case)]):
        rows = range(int(a), int(b))
        for r in rows:
            add(str(queries.id[r]), int(case[r]), str(queries.category[r]), str(queries.text[r]), r, "", "")
        for r in rows:
            qid, text = str(queries.id[r]), str(queries.text[r])
            made = {"negation": negate(text), "laterality": swap_sides(text), "shuffle": shuffle_words(text, qid, seed)}
            for kind in KINDS:
                if made[kind] is not None:
                    add(probe_id(str(case_ids[case[r]]), qid, kind), int(case[r]), str(queries.category[r]),
                        made[kind], r, qid, kind)
    return Probes(Queries.of(ids, cases, cats, texts), np.asarray(source, np.int64), np.asarray(of, dtype=str),
                  np.asarray(kinds, dtype=str))
