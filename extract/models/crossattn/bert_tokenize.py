"""The BERT tokenisation MedKLIP and MAVL use for their query texts, reproduced token for token.

Both repositories ship their own copy of an old Hugging Face ``tokenization_bert.py`` (MedKLIP
``Sample_zero-shot_Classification_CXR14/models/tokenization_bert.py``; the same file in MAVL
``Zero-shot_grounding/models/``; all six copies are byte-identical) on top of
``transformers==4.5.0`` (pinned in MAVL ``requirements.txt:32``). It differs from a standard
BERT tokenizer in one place: a single sentence becomes ``[CLS] tokens`` with no ``[SEP]``
(``build_inputs_with_special_tokens``, lines 261-262), so truncation to ``max_length`` keeps
``max_length - 1`` word pieces, one more than a standard tokenizer. Everything else is BERT's
usual pipeline, which this module writes out as small pure functions:

1. literal special-token strings (``[CLS]`` ...) are cut out of the text and kept whole, and the
   rest is lower-cased one character at a time (the base class's ``tokenize`` in transformers
   4.5.0 does both before the BERT-specific steps; per character, so no final-sigma rule);
2. basic tokenisation (``BasicTokenizer``, lines 342-485): drop NUL, U+FFFD and control
   characters, map whitespace to spaces, put spaces around CJK ideographs, split on whitespace,
   lower-case and strip accents (NFD, drop ``Mn``) when lower-casing, split off punctuation;
3. WordPiece (lines 488-539): greedy longest match with ``##`` continuations; a word that
   cannot be covered, or longer than 100 characters, becomes ``[UNK]`` as a whole;
4. ids from ``vocab.txt`` (line number; a repeated token keeps its last line), unknown ->
   ``[UNK]``; keep the first ``max_length - 1`` ids, prepend ``[CLS]``, pad on the right with
   ``[PAD]`` to ``max_length``; attention mask 1 on ``[CLS]`` and the word pieces, 0 on padding.

The options come from the text-encoder folder the way ``BertTokenizer.from_pretrained`` reads
them: ``tokenizer_config.json`` (``do_lower_case``, ``strip_accents``,
``tokenize_chinese_chars``) and ``special_tokens_map.json``; without them lower-casing is on
(the class default, line 164), which is what Bio_ClinicalBERT's folder gives.
"""
from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from xbench.extract.models.errors import ModelConfigError
from xbench.extract.models.files import read_model_json

# Written into every cache's meta; bump VERSION when any step above changes ids or masks.
NAME = "xbench-bert-cls-only"
VERSION = 1
MAX_CHARS_PER_WORD = 100  # WordpieceTokenizer default (line 491)
SPECIAL_ROLES = ("unk", "sep", "pad", "cls", "mask")
DEFAULT_SPECIALS = {"unk": "[UNK]", "sep": "[SEP]", "pad": "[PAD]", "cls": "[CLS]", "mask": "[MASK]"}


# ------------------------------------------------------------------------------------------
# Character classes (BERT's definitions)
# ------------------------------------------------------------------------------------------
def is_whitespace(ch: str) -> bool:
    """Space, tab, newline, carriage return, or any Unicode space separator (Zs)."""
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch: str) -> bool:
    """Any "C*" category except tab/newline/carriage return (those count as whitespace)."""
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def is_punctuation(ch: str) -> bool:
    """Every non-alphanumeric printable ASCII character (so ``$``, ``^``, ``+`` too, which are
    not Unicode punctuation) plus every Unicode "P*" character."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


# The CJK Unified Ideograph blocks (and compatibility blocks) BERT pads with spaces.
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


# ------------------------------------------------------------------------------------------
# Basic tokenisation
# ------------------------------------------------------------------------------------------
def clean_text(text: str) -> str:
    """Drop NUL, U+FFFD and control characters; every whitespace character becomes a space."""
    out = []
    for ch in text:
        if ch in "\x00\ufffd" or is_control(ch):
            continue
        out.append(" " if is_whitespace(ch) else ch)
    return "".join(out)


def space_cjk(text: str) -> str:
    return "".join(f" {ch} " if is_cjk(ch) else ch for ch in text)


def strip_accents(word: str) -> str:
    """NFD, then drop the combining marks (category Mn); the result stays decomposed."""
    return "".join(ch for ch in unicodedata.normalize("NFD", word) if unicodedata.category(ch) != "Mn")


def split_punctuation(word: str) -> list[str]:
    """'a.b,,c' -> ['a', '.', 'b', ',', ',', 'c']: each punctuation character on its own."""
    pieces: list[str] = []
    current = ""
    for ch in word:
        if is_punctuation(ch):
            if current:
                pieces.append(current)
                current = ""
            pieces.append(ch)
        else:
            current += ch
    if current:
        pieces.append(current)
    return pieces


def basic_tokens(text: str, *, lower_case: bool = True, accents: bool | None = None,
                 chinese_chars: bool = True) -> list[str]:
    """Words and punctuation of ``text``. ``accents=None`` strips accents exactly when
    lower-casing (the upstream default); True/False force it on or off."""
    text = clean_text(text)
    if chinese_chars:
        text = space_cjk(text)
    out: list[str] = []
    # str.split() (not ' ') on purpose: it also splits on separators that clean_text keeps,
    # such as U+2028, as the upstream whitespace split does.
    for word in text.split():
        if lower_case:
            word = word.lower()
            if accents is not False:
                word = strip_accents(word)
        elif accents:
            word = strip_accents(word)
        out.extend(split_punctuation(word))
    return out


# ------------------------------------------------------------------------------------------
# WordPiece
# ------------------------------------------------------------------------------------------
def wordpiece(word: str, vocab: Mapping[str, int], unk: str, max_chars: int = MAX_CHARS_PER_WORD) -> list[str]:
    """Greedy longest-match-first split of one word; ``[unk]`` alone when any part is missing
    from the vocabulary or the word is longer than ``max_chars`` characters."""
    if len(word) > max_chars:
        return [unk]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return [unk]
        pieces.append(piece)
        start = end
    return pieces


def read_vocab(path: str | os.PathLike) -> dict[str, int]:
    """``vocab.txt``: one token per line, id = line number. Only the newline is stripped
    (text-mode reading turns CRLF into LF); a token on two lines keeps the later id."""
    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import decode_text, read_bytes

    try:  # a regular file of at most 16 MiB (a BERT vocabulary is ~0.2 MiB), strict UTF-8
        text = decode_text(read_bytes(path, max_bytes=16 * 2**20), str(path))
    except InputError as exc:
        raise ModelConfigError([f"text encoder vocabulary: {p}" for p in exc.problems]) from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # as text-mode reading splits them
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line opens no token
    return {token: i for i, token in enumerate(lines)}


def _special_name(value) -> str | None:
    """A special token in a tokenizer file is a string or an AddedToken dict with 'content'."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


# ------------------------------------------------------------------------------------------
# The tokenizer
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Encoded:
    """(N, max_length) int64 token ids and attention mask for N texts."""

    input_ids: np.ndarray
    attention_mask: np.ndarray


class ClsOnlyBertTokenizer:
    """BERT WordPiece tokenisation that encodes one sentence as ``[CLS] tokens [PAD]...`` (no
    ``[SEP]``), as MedKLIP's and MAVL's vendored tokenizer does. Pure Python, no transformers."""

    def __init__(self, vocab: Mapping[str, int], *, lower_case: bool = True, accents: bool | None = None,
                 chinese_chars: bool = True, specials: Mapping[str, str] | None = None) -> None:
        self.vocab = dict(vocab)
        self.lower_case = bool(lower_case)
        self.accents = accents
        self.chinese_chars = bool(chinese_chars)
        self.specials = {**DEFAULT_SPECIALS, **(specials or {})}
        missing = [t for t in self.specials.values() if t not in self.vocab]
        if missing:
            raise ModelConfigError(f"vocabulary lacks the special token(s) {', '.join(missing)}")
        # Longest first so that no special token is cut by a shorter one it contains.
        names = sorted(set(self.specials.values()), key=len, reverse=True)
        self._special_split = re.compile("(" + "|".join(re.escape(n) for n in names) + ")")

    @classmethod
    def from_folder(cls, folder: str | os.PathLike, *, lower_case: bool | None = None) -> "ClsOnlyBertTokenizer":
        """Read ``vocab.txt`` and the optional tokenizer files of a Hugging Face folder;
        ``lower_case`` overrides the folder's ``do_lower_case``."""
        d = Path(folder).expanduser()
        if not (d / "vocab.txt").is_file():
            raise ModelConfigError(f"text encoder {d} has no vocab.txt (a BERT WordPiece vocabulary is needed)")
        options, specials = {}, {}
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            f = d / name
            if not f.is_file():
                continue
            data = read_model_json(f, "text encoder")
            options.update({k: data[k] for k in ("do_lower_case", "strip_accents", "tokenize_chinese_chars")
                            if k in data})
            specials.update({role: _special_name(data.get(f"{role}_token")) for role in SPECIAL_ROLES
                             if _special_name(data.get(f"{role}_token"))})
        lc = options.get("do_lower_case", True) if lower_case is None else lower_case
        return cls(read_vocab(d / "vocab.txt"), lower_case=bool(lc), accents=options.get("strip_accents"),
                   chinese_chars=bool(options.get("tokenize_chinese_chars", True)), specials=specials)

    def tokens(self, text: str) -> list[str]:
        """Word pieces of ``text`` (no [CLS]); literal special-token strings stay whole."""
        if not text.strip():
            return []
        specials = set(self.specials.values())
        out: list[str] = []
        for part in self._special_split.split(text):
            if part in specials:
                out.append(part)
                continue
            if self.lower_case:
                # One character at a time, as upstream's regex substitution does.
                part = "".join(ch.lower() for ch in part)
            for word in basic_tokens(part, lower_case=self.lower_case, accents=self.accents,
                                     chinese_chars=self.chinese_chars):
                out.extend(wordpiece(word, self.vocab, self.specials["unk"]))
        return out

    def ids(self, text: str, max_length: int) -> list[int]:
        """``[CLS]`` + the first ``max_length - 1`` word-piece ids, unpadded."""
        if max_length < 1:
            raise ModelConfigError(f"max_length must be at least 1, got {max_length}")
        unk = self.vocab[self.specials["unk"]]
        body = [self.vocab.get(t, unk) for t in self.tokens(text)][: max_length - 1]
        return [self.vocab[self.specials["cls"]], *body]

    def encode(self, texts: Sequence[str], max_length: int = 64) -> Encoded:
        """Pad every text's ids on the right to ``max_length`` (``padding='max_length'``)."""
        pad = self.vocab[self.specials["pad"]]
        ids = np.full((len(texts), max_length), pad, dtype=np.int64)
        mask = np.zeros((len(texts), max_length), dtype=np.int64)
        for row, text in enumerate(texts):
            seq = self.ids(text, max_length)
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        return Encoded(ids, mask)

    def recipe(self, max_length: int) -> dict:
        """What a cache records about how its texts were tokenised."""
        return {"name": NAME, "version": VERSION, "max_length": int(max_length),
                "layout": f"{self.specials['cls']} + first max_length-1 word pieces, no {self.specials['sep']}, "
                          f"right-padded with {self.specials['pad']}",
                "lower_case": self.lower_case,
                "strip_accents": self.lower_case if self.accents is None else bool(self.accents),
                "chinese_chars": self.chinese_chars, "vocab_size": len(self.vocab)}
