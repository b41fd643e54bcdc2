"""The authors' [CLS]-only BERT tokenisation: token ids pinned by hand on a small vocabulary."""
from __future__ import annotations

import json

import numpy as np
import pytest

from xbench.extract.models.crossattn.bert_tokenize import (
    ClsOnlyBertTokenizer,
    basic_tokens,
    read_vocab,
    split_punctuation,
    wordpiece,
)

# id = position in this list
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",          # 0-4
         "there", "is", "a", "small", "pleural",                  # 5-9
         "effusion", ".", ",", "cafe", "naive",                   # 10-14
         "card", "##io", "##megaly", "right", "-",                # 15-19
         "side", "##d", "!", "肺", "x",                           # 20-24
         "There", "_", "obs", "σ", "$"]                           # 25-29
V = {t: i for i, t in enumerate(VOCAB)}
CLS, PAD, UNK, MASK = 2, 0, 1, 4


@pytest.fixture()
def tok():
    return ClsOnlyBertTokenizer(V)


def ids_and_mask(tok, text, max_length):
    enc = tok.encode([text], max_length)
    return enc.input_ids[0].tolist(), enc.attention_mask[0].tolist()


@pytest.mark.parametrize("text, expected", [
    ("There is a small pleural effusion.", [CLS, 5, 6, 7, 8, 9, 10, 11]),     # upper case folded, "." split
    ("CAFÉ  naïve", [CLS, 13, 14]),                                          # accents stripped after lower-casing
    ("cardiomegaly", [CLS, 15, 16, 17]),                                     # WordPiece card ##io ##megaly
    ("cardiox is", [CLS, UNK, 6]),                                           # no ##x: the whole word is [UNK]
    ("pneumonia, right-sided!", [CLS, UNK, 12, 18, 19, 20, 21, 22]),         # unknown word; punctuation split
    ("肺x", [CLS, 23, 24]),                                                  # CJK ideograph spaced off
    ("a [MASK] x[MASK]a", [CLS, 7, MASK, 24, MASK, 7]),                      # literal special tokens kept whole
    ("tail_obs$", [CLS, UNK, 26, 27, 29]),                                   # ASCII symbols split like punctuation
    ("ΣΣ", [CLS, UNK]),                                                      # per-character lower: 'σσ', not in vocab
    ("Σ", [CLS, 28]),
    ("a\u00a0is\tx\u2028a\x07\x00x", [CLS, 7, 6, 24, UNK]),                 # whitespace kinds split; control
    ("a\x07 x", [CLS, 7, 24]),                                               # chars vanish ('ax' is one word)
    ("", [CLS]),
    ("  \n ", [CLS]),
])
def test_pinned_ids_lower_case(tok, text, expected):
    ids, mask = ids_and_mask(tok, text, 12)
    assert ids == expected + [PAD] * (12 - len(expected))
    assert mask == [1] * len(expected) + [0] * (12 - len(expected))


def test_truncation_keeps_max_length_minus_one_pieces_and_no_sep(tok):
    text = "there is a small pleural effusion"  # 6 word pieces
    # exactly max_length - 1 pieces: nothing dropped, and no [SEP] anywhere
    assert ids_and_mask(tok, text, 7) == ([CLS, 5, 6, 7, 8, 9, 10], [1] * 7)
    assert ids_and_mask(tok, text, 4) == ([CLS, 5, 6, 7], [1] * 4)
    assert ids_and_mask(tok, "cardiomegaly is", 3) == ([CLS, 15, 16], [1] * 3)  # cut inside a word
    assert ids_and_mask(tok, text, 1) == ([CLS], [1])
    with pytest.raises(ValueError, match="max_length"):
        tok.encode([text], 0)


def test_cased_mode_keeps_case_and_accents():
    tok = ClsOnlyBertTokenizer(V, lower_case=False)
    assert tok.tokens("There there CAFÉ cafe") == ["There", "there", "[UNK]", "cafe"]
    # accents can be stripped without lower-casing when asked, and kept when lower-casing
    assert ClsOnlyBertTokenizer(V, lower_case=False, accents=True).tokens("café") == ["cafe"]
    assert ClsOnlyBertTokenizer(V, accents=False).tokens("CAFÉ") == ["[UNK]"]


def test_long_words_and_chinese_option(tok):
    assert tok.tokens("x" * 100) == ["[UNK]"]  # no '##x' in the vocabulary
    vocab = {**V, "##x": len(V)}
    t = ClsOnlyBertTokenizer(vocab)
    assert t.tokens("x" * 100) == ["x"] + ["##x"] * 99
    assert t.tokens("x" * 101) == ["[UNK]"]  # over 100 characters: [UNK] without trying
    assert ClsOnlyBertTokenizer(V, chinese_chars=False).tokens("肺x") == ["[UNK]"]


def test_pieces():
    assert split_punctuation("a.b,,c") == ["a", ".", "b", ",", ",", "c"]
    assert split_punctuation("...") == [".", ".", "."] and split_punctuation("") == []
    assert basic_tokens("Hello, WORLD") == ["hello", ",", "world"]
    assert basic_tokens("Hello, WORLD", lower_case=False) == ["Hello", ",", "WORLD"]
    assert basic_tokens("e\u0301 \u0301") == ["e"]  # a lone combining mark vanishes
    assert wordpiece("cardio", V, "[UNK]") == ["card", "##io"]
    assert wordpiece("cardiox", V, "[UNK]") == ["[UNK]"]


def test_batch_padding_is_per_row(tok):
    enc = tok.encode(["there is", "", "cardiomegaly"], 5)
    np.testing.assert_array_equal(enc.input_ids, [[CLS, 5, 6, PAD, PAD], [CLS, PAD, PAD, PAD, PAD],
                                                  [CLS, 15, 16, 17, PAD]])
    np.testing.assert_array_equal(enc.attention_mask, [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]])
    assert enc.input_ids.dtype == np.int64 and enc.attention_mask.dtype == np.int64


def test_from_folder_reads_vocab_and_tokenizer_files(tmp_path):
    # CRLF line ends, and a token listed twice: the later line's id is the one used upstream
    (tmp_path / "vocab.txt").write_bytes(("\r\n".join(VOCAB + ["there"]) + "\r\n").encode())
    assert read_vocab(tmp_path / "vocab.txt")["there"] == len(VOCAB)
    tok = ClsOnlyBertTokenizer.from_folder(tmp_path)  # no tokenizer_config.json: lower-cases
    assert tok.lower_case and tok.encode(["There"], 3).input_ids.tolist() == [[CLS, len(VOCAB), PAD]]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    assert not ClsOnlyBertTokenizer.from_folder(tmp_path).lower_case
    assert ClsOnlyBertTokenizer.from_folder(tmp_path, lower_case=True).lower_case
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"unk_token": {"content": "[MASK]"}}))
    assert ClsOnlyBertTokenizer.from_folder(tmp_path).tokens("pneumonia") == ["[MASK]"]
    recipe = ClsOnlyBertTokenizer.from_folder(tmp_path).recipe(64)
    assert recipe["max_length"] == 64 and recipe["lower_case"] is False and "no [SEP]" in recipe["layout"]


def test_folder_problems_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="has no vocab.txt"):
        ClsOnlyBertTokenizer.from_folder(tmp_path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nthere\n")
    with pytest.raises(ValueError, match=r"lacks the special token\(s\) \[SEP\], \[CLS\], \[MASK\]"):
        ClsOnlyBertTokenizer.from_folder(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB))
    (tmp_path / "tokenizer_config.json").write_text("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        ClsOnlyBertTokenizer.from_folder(tmp_path)


def test_differs_from_a_standard_tokenizer_only_by_sep(tmp_path):
    """A standard Hugging Face BERT tokenizer on the same vocabulary gives the same word pieces
    but appends [SEP] and so keeps one piece fewer under truncation (issue 11)."""
    transformers = pytest.importorskip("transformers")
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    hf = transformers.BertTokenizer(str(tmp_path / "vocab.txt"), do_lower_case=True)
    ours = ClsOnlyBertTokenizer.from_folder(tmp_path)
    texts = ["There is a small pleural effusion.", "CAFÉ naïve cardiomegaly, right-sided!", "pneumonia 肺x"]
    for text in texts:
        assert ours.tokens(text) == hf.tokenize(text)
        std = hf(text, padding="max_length", truncation=True, max_length=6)["input_ids"]
        assert std[0] == CLS and 3 in std  # [SEP]
        pieces = [i for i in std if i not in (CLS, 3, PAD)]
        assert ours.ids(text, 6)[1:][:len(pieces)] == pieces and len(ours.ids(text, 6)) >= len(pieces) + 1
