"""A generative model's own boxes (issue 45 item 4): each model's answer format read exactly, scored through the
boxes route, hostile answers noted per row.

The formats are checked against independent encoders written here from the authors' code (CheXagent's training
targets, ms_cxr.py:48-56 and cvt at :9-12, read back as run_phrase_grounding.py:70 reads them; MAIRA-2's
``<x..><y..>`` bins and its crop undone as processing_maira2.py:613-646 does). Answers in each format, converted
with ``xbench-convert --answers``, give exactly the store and exactly the scores (class rows and MS-CXR-style
phrase rows, CNR included) of the same boxes handed in as a marks JSON.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from xbench.schemas import ImagesWriter, read_submission, write_ground_truth
from xbench.schemas.answers import (ANSWER_FORMATS, MAX_ANSWER_CHARS, MAX_BOXES_PER_ANSWER, answer_format,
                                    boxes_in_pixels, parse_answer)
from xbench.schemas.cli import convert_main
from xbench.schemas.queries import Queries

CLASSES = ["Cardiomegaly", "Nodule", "Pneumothorax"]
N = 8
#: (height, width): portrait, landscape and square, so a crop's offset and x/y cannot be swapped unnoticed
SIZES = [(400, 600), (512, 512), (300, 200), (1000, 800), (333, 517), (640, 480), (256, 256), (97, 211)]
IDS = [f"case-{i:02d}" for i in range(N)]


# -- the formats, against encoders written from the authors' code ----------------------------------------------
def chexagent_text(frac_boxes, ref="opacity"):
    """CheXagent's training target for boxes given as fractions (ms_cxr.py:48-56: 1000 bins of the width and
    height, then cvt: min(c, 999), round(c / 10))."""
    def cvt(c):
        return str(round(min(c, 999) / 10))
    q = [[int(x0 * 1000), int(y0 * 1000), int(x1 * 1000), int(y1 * 1000)] for x0, y0, x1, y1 in frac_boxes]
    return f"<|ref|>{ref}<|/ref|>" + "".join(f"<|box|>({cvt(b[0])},{cvt(b[1])}),({cvt(b[2])},{cvt(b[3])})<|/box|>"
                                             for b in q)


def authors_chexagent_read(text):
    """run_phrase_grounding.py:70's reading of each box's text, on every box: brackets dropped, split at commas."""
    out = []
    for piece in text.split("<|box|>")[1:]:
        inner = piece.split("<|/box|>")[0]
        out.append(tuple(int(c) / 100 for c in inner.replace("(", "").replace(")", "").split(",")))
    return out


def test_both_formats_are_registered_with_their_sources():
    assert {"chexagent", "maira-2"} <= set(ANSWER_FORMATS.names())
    assert "run_phrase_grounding.py:64-71" in answer_format("chexagent").source
    assert "613-646" in answer_format("maira-2").source and answer_format("maira-2").crops_square
    with pytest.raises(Exception, match="Did you mean: maira-2"):
        answer_format("maira2")


def test_chexagent_reads_its_own_training_targets():
    rng = np.random.default_rng(0)
    for trial in range(300):
        boxes = []
        for _ in range(int(rng.integers(1, 5))):
            x0, y0 = rng.uniform(0, 0.9, 2)
            boxes.append((x0, y0, rng.uniform(x0 + 0.02, 1.0), rng.uniform(y0 + 0.02, 1.0)))
        text = chexagent_text(boxes) + (" The opacity is in the left lower lobe." if trial % 2 else "")
        want = authors_chexagent_read(text)
        got = parse_answer("chexagent", text)
        if any(b[2] <= b[0] or b[3] <= b[1] for b in want):  # two corners rounded into one value
            assert got.kind == "empty box"
            continue
        assert got.note is None and list(got.boxes) == want, text
    # whitespace around the numbers, as int() reads it; the whole frame, no crop
    got = parse_answer("chexagent", "<|box|>( 10 , 20 ),(30,40)<|/box|>")
    assert got.boxes == ((0.1, 0.2, 0.3, 0.4),)
    assert boxes_in_pixels(answer_format("chexagent"), got.boxes, (400, 600)) == [(60.0, 80.0, 120.0, 80.0)]


def maira_text(bin_boxes, phrase="Left basal opacity"):
    return "<obj>" + phrase + "".join("<box><x%d><y%d><x%d><y%d></box>" % tuple(b) for b in bin_boxes) + "</obj>"


def authors_maira_pixels(bins, width, height):
    """processing_maira2.py:601 ((bin + 0.5) / 100) then :631-642 (centre square crop undone, int() pixels)."""
    side = min(width, height)
    ox, oy = (width - side) // 2, (height - side) // 2
    x0, y0, x1, y1 = ((b + 0.5) / 100 for b in bins)
    ax0, ax1 = int(x0 * side + ox), int(x1 * side + ox)
    ay0, ay1 = int(y0 * side + oy), int(y1 * side + oy)
    return (ax0, ay0, ax1 - ax0, ay1 - ay0)


def test_maira2_reads_its_bins_and_undoes_its_crop():
    rng = np.random.default_rng(1)
    fmt = answer_format("maira-2")
    for trial in range(300):
        bins = [tuple(int(v) for v in (*rng.integers(0, 60, 2), *rng.integers(60, 100, 2))) for _ in range(3)]
        text = maira_text(bins[:2]) + "<obj>No pneumothorax.</obj>" + maira_text(bins[2:], "Right effusion")
        got = parse_answer(fmt, text)
        assert got.note is None and got.boxes == tuple(tuple((b + 0.5) / 100 for b in bb) for bb in bins)
        h, w = SIZES[trial % len(SIZES)]
        assert boxes_in_pixels(fmt, got.boxes, (h, w)) == [authors_maira_pixels(b, w, h) for b in bins]
        # on a square copy (the images store's), the fractions are of the whole width and height
        sq = boxes_in_pixels(fmt, got.boxes, (h, w), "square")
        for (x, y, bw, bh), b in zip(sq, got.boxes):
            assert (x, y, x + bw, y + bh) == pytest.approx((b[0] * w, b[1] * h, b[2] * w, b[3] * h))
    assert parse_answer(fmt, "No acute findings.").kind == "no box"
    assert parse_answer(fmt, "<obj>No acute findings.</obj>").kind == "no box"
    assert parse_answer(fmt, "  <obj>a<box><x0007><y1><x99><y98></box></obj>\n").boxes == ((0.075, 0.015, 0.995, 0.985),)


HOSTILE = {
    # (format, answer) -> the note's kind
    ("chexagent", "The heart is normal."): "no box",
    ("chexagent", ""): "no box",
    ("chexagent", "<|box|>(10,20),(30,40)"): "malformed",
    ("chexagent", "(10,20),(30,40)<|/box|>"): "malformed",
    ("chexagent", "<|box|><|box|>(10,20),(30,40)<|/box|><|/box|>"): "malformed",
    ("chexagent", "<|box|>(10,20),(30,40)<|/box|><|/box|>"): "malformed",
    ("chexagent", "<|box|>(10.5,20),(30,40)<|/box|>"): "malformed",
    ("chexagent", "<|box|>(-1,20),(30,40)<|/box|>"): "malformed",
    ("chexagent", "<|box|>(1,2),(3,4),(5,6)<|/box|>"): "malformed",
    ("chexagent", "<|box|>(10,20),(101,40)<|/box|>"): "off the scale",
    ("chexagent", "<|box|>(10,20),(" + "9" * 5000 + ",40)<|/box|>"): "malformed",
    ("chexagent", "<|box|>(10,20),(999999999999,40)<|/box|>"): "off the scale",
    ("chexagent", "<|box|>(30,20),(10,40)<|/box|>"): "empty box",
    ("chexagent", "<|box|>(10,20),(10,40)<|/box|>"): "empty box",
    ("chexagent", "<|box|>(1,1),(2,2)<|/box|>" * (MAX_BOXES_PER_ANSWER + 1)): "too many boxes",
    ("chexagent", "<|box|>(1,1),(2,2)<|/box|>" * 1_000_000): "too long",
    ("chexagent", b"<|box|>(1,1),(2,2)<|/box|>\xff"): "not UTF-8",
    ("chexagent", "<|box|>(1,1),(2,2)<|/box|>\udcff"): "not UTF-8",
    ("chexagent", None): "malformed",
    ("chexagent", "<|box|>" * 9000): "malformed",
    ("maira-2", "<obj>a<box><x1><y2><x3><y4></box></obj> <obj>b</obj>"): "malformed",
    ("maira-2", "<box><x1><y2><x3><y4></box>"): "malformed",
    ("maira-2", "<obj>a<box><x1><y2><x3><y4></obj>"): "malformed",
    ("maira-2", "<obj>a<box><x1><y2><x3></box></obj>"): "malformed",
    ("maira-2", "<obj>a</box></obj>"): "malformed",
    ("maira-2", "<obj><obj>a</obj></obj>"): "malformed",
    ("maira-2", "<obj>a<box><x1><y2><x100><y4></box></obj>"): "off the scale",
    ("maira-2", "<obj>a<box><x1><y2><x" + "9" * 5000 + "><y4></box></obj>"): "off the scale",
    ("maira-2", ("<obj>a" + "<box><x1><y2><x3><y4></box>" * 200 + "</obj>")): "too many boxes",
    ("maira-2", "<obj>" * 1_000_000): "too long",
    ("maira-2", "<obj>" * 13000): "malformed",
    ("maira-2", b"\xc3\x28"): "not UTF-8",
}


@pytest.mark.parametrize("fmt, text", list(HOSTILE), ids=lambda v: repr(v)[:40])
def test_hostile_answers_are_a_note_never_an_exception(fmt, text):
    got = parse_answer(fmt, text)
    assert got.boxes == () and got.kind == HOSTILE[(fmt, text)], got.note
    assert len(got.note) < 200  # one short line, whatever the answer held


def test_long_answers_are_refused_before_parsing():
    assert parse_answer("maira-2", "x" * (MAX_ANSWER_CHARS + 1)).kind == "too long"
    assert parse_answer("maira-2", "x" * MAX_ANSWER_CHARS).kind == "no box"


# -- the converter -------------------------------------------------------------------------------------------
#: each case's phrase rows: (query id, the phrase's box as fractions of the width and height)
PHRASES = [(f"{c}#{k}", i, (0.1 + 0.1 * k, 0.2, 0.5 + 0.1 * k, 0.7)) for i, c in enumerate(IDS) for k in range(2)]


@pytest.fixture
def stores(tmp_path):
    """images.zarr and gt.zarr of non-square cases with class regions and phrase rows (each a box)."""
    images = tmp_path / "images.zarr"
    queries = Queries.of([q for q, _, _ in PHRASES], [i for _, i, _ in PHRASES], ["Nodule"] * len(PHRASES),
                         [f"nodule {k}" for k in range(len(PHRASES))])
    w = ImagesWriter(images, "phantom", case_ids=IDS, classes=CLASSES, image_size=8, cases_per_block=4,
                     queries=queries)
    for b in w.blocks_todo():
        s, e = w.block_rows(b)
        w.write_block(b, np.zeros((e - s, 8, 8), np.uint8), np.asarray(SIZES[s:e], np.int32))
    w.finish()
    labels = np.zeros((N, 3), np.int8)
    labels[:, 1] = [1, 1, 1, 1, 0, 0, 1, 0]
    labels[:, 0] = [1, 0] * 4
    pairs = np.argwhere(labels == 1).astype(np.int32)
    g = 16
    masks = np.zeros((len(pairs), g, g), bool)
    masks[:, 4:9, 2:7] = True
    qmask = np.zeros((len(PHRASES), g, g), bool)
    for k, (_, _, (x0, y0, x1, y1)) in enumerate(PHRASES):
        qmask[k, int(y0 * g):int(y1 * g), int(x0 * g):int(x1 * g)] = True
    gt = tmp_path / "gt.zarr"
    write_ground_truth(gt, "phantom", case_ids=IDS, classes=CLASSES, labels=labels, region_index=pairs,
                       region_mask=masks, orig_size=np.asarray(SIZES, np.int32), grid=(g, g),
                       queries=Queries.of(queries.id, queries.case, queries.category), query_mask=qmask)
    return images, gt


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        convert_main([str(a) for a in args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def model_answers(fmt: str):
    """(answers rows, the same boxes in original pixels by the authors' rules, computed here) for every finding
    row and phrase row: some answers without a box, one with several boxes, and likelihood scores on some."""
    rows, pixels = [], {}
    rng = np.random.default_rng(7)
    for i, case in enumerate(IDS):
        h, w = SIZES[i]
        for j, finding in enumerate(CLASSES[:2]):
            if (i + j) % 3 == 2:
                rows.append({"case_id": case, "finding": finding, "text": "No evidence of it."})
                pixels[(case, finding)] = []
                continue
            n = 2 if i == 3 else 1
            if fmt == "chexagent":
                vals = [(int(rng.integers(5, 40)), int(rng.integers(5, 40)), int(rng.integers(50, 95)),
                         int(rng.integers(50, 95))) for _ in range(n)]
                text = "".join(f"<|ref|>{finding}<|/ref|><|box|>({a},{b}),({c},{d})<|/box|>" for a, b, c, d in vals)
                px = [(a / 100 * w, b / 100 * h, (c - a) / 100 * w, (d - b) / 100 * h) for a, b, c, d in vals]
            else:
                vals = [tuple(int(v) for v in (*rng.integers(5, 40, 2), *rng.integers(50, 95, 2))) for _ in range(n)]
                text = maira_text(vals, finding)
                px = [authors_maira_pixels(v, w, h) for v in vals]
            row = {"case_id": case, "finding": finding, "text": text}
            if i % 2:
                row["score"] = round(float(rng.uniform(0.05, 0.95)), 3)
            rows.append(row)
            pixels[(case, finding)] = px
    for q, i, (x0, y0, x1, y1) in PHRASES:
        h, w = SIZES[i]
        if fmt == "chexagent":
            a, b, c, d = (round(v * 100) for v in (x0, y0, x1, y1))
            text = f"<|box|>({a},{b}),({c},{d})<|/box|>"
            px = [(a / 100 * w, b / 100 * h, (c - a) / 100 * w, (d - b) / 100 * h)]
        else:
            v = tuple(min(int(t * 100), 99) for t in (x0, y0, x1, y1))
            text = maira_text([v], "nodule")
            px = [authors_maira_pixels(v, w, h)]
        rows.append({"query_id": q, "text": text})
        pixels[q] = px
    return rows, pixels


def marks_json(rows, pixels) -> dict:
    """The same boxes as a marks JSON (the boxes route's own input), written from the test's own pixels."""
    data = {"model": "m", "unsupported": ["Pneumothorax"], "datasets": {"phantom": {}}, "phrases": {"phantom": {}}}
    for r in rows:
        entry = {"boxes": [list(map(float, b)) for b in pixels[r.get("query_id") or (r["case_id"], r["finding"])]]}
        if "score" in r:
            entry["score"] = r["score"]
        if "query_id" in r:
            data["phrases"]["phantom"][r["query_id"]] = entry
        else:
            data["datasets"]["phantom"].setdefault(r["case_id"], {})[r["finding"]] = entry
    return data


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def score(tmp_path, sub, gt, name):
    from xbench.score.cli import main as score_main

    out = tmp_path / name
    with pytest.raises(SystemExit) as exc:
        score_main([str(sub), "--gt", str(gt), "--out", str(out), "--bootstrap", "0", "-q"])
    assert exc.value.code == 0
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize("fmt", ["chexagent", "maira-2"])
def test_answers_score_exactly_as_the_same_boxes_through_the_boxes_route(tmp_path, stores, capsys, fmt):
    images, gt = stores
    rows, pixels = model_answers(fmt)
    answers = write_jsonl(tmp_path / "answers.jsonl", rows)
    (tmp_path / "marks.json").write_text(json.dumps(marks_json(rows, pixels)))
    code, out, err = run(capsys, answers, "--answers", fmt, "--images", images, "--gt", gt, "--out", tmp_path / "a.zarr")
    assert code == 0, err
    assert "no box 5" in out and f"{len(rows)} answer(s)" in out
    code, _, err = run(capsys, tmp_path / "marks.json", "--images", images, "--gt", gt, "-q", "--out", tmp_path / "m.zarr")
    assert code == 0, err
    a, m = read_submission(tmp_path / "a.zarr").datasets["phantom"], read_submission(tmp_path / "m.zarr").datasets["phantom"]
    np.testing.assert_array_equal(np.asarray(a.scores[...]), np.asarray(m.scores[...]))
    np.testing.assert_array_equal(np.asarray(a.saliency[...]), np.asarray(m.saliency[...]))
    np.testing.assert_array_equal(np.asarray(a.query_saliency[...]), np.asarray(m.query_saliency[...]))
    assert a.query_id.tolist() == m.query_id.tolist() and a.unsupported == m.unsupported == ("Pneumothorax",)
    assert np.asarray(a.saliency[...]).any() and np.asarray(a.query_saliency[...]).any()
    sa, sm = score(tmp_path, tmp_path / "a.zarr", gt, "sa"), score(tmp_path, tmp_path / "m.zarr", gt, "sm")
    for section in ("datasets", "phrases"):
        assert json.dumps(sa[section], sort_keys=True) == json.dumps(sm[section], sort_keys=True)
    phr = sa["phrases"]["datasets"]["phantom"]
    assert phr["n_phrases"] == len(PHRASES) and phr["summary"]["pointing_game"] is not None
    assert phr["summary"].get("cnr") is not None, sorted(phr["summary"])  # the phrase rows' CNR is compared too
    import zarr

    prov = dict(zarr.open_group(str(tmp_path / "a.zarr"), mode="r").attrs)["xbench"]["source"]
    assert prov["format"] == "answers-jsonl" and prov["answer_format"] == fmt and prov["notes"] == {"no box": 5}


def test_model_text_problems_are_counted_notes_and_the_rest_still_scores(tmp_path, stores, capsys):
    images, gt = stores
    texts = ["<|box|>(10,20),(50,60)<|/box|>", "nothing", "<|box|>(1,2)", "<|box|>(10,20),(500,60)<|/box|>",
             "<|box|>(1,1),(2,2)<|/box|>" * 300, "ok \udcff", "<|box|>(60,20),(10,60)<|/box|>"]
    rows = [{"case_id": IDS[i], "finding": "Nodule", "text": t} for i, t in enumerate(texts)]
    lines = [json.dumps(r) for r in rows]
    lines.append(b'{"case_id": "case-07", "finding": "Nodule", "text": "bad \xff byte"}'.decode("latin-1"))
    (tmp_path / "a.jsonl").write_bytes("\n".join(lines[:-1]).encode() + b"\n" + lines[-1].encode("latin-1") + b"\n")
    code, out, err = run(capsys, tmp_path / "a.jsonl", "--answers", "chexagent", "--images", images, "--json",
                         "--out", tmp_path / "s.zarr")
    assert code == 0, err
    notes = json.loads(out)["answers"]
    assert notes["rows"] == 8 and notes["boxes"] == 1
    assert notes["notes"] == {"no box": 1, "not UTF-8": 2, "too many boxes": 1, "malformed": 1, "off the scale": 1,
                              "empty box": 1}
    sub = read_submission(tmp_path / "s.zarr").datasets["phantom"]
    scores = np.asarray(sub.scores[...])
    assert scores[0, 1] == 1.0 and not scores[1:, 1].any()  # only the one good answer gives a box
    assert sub.unsupported == ("Cardiomegaly", "Pneumothorax") and sub.attrs["phrases_unsupported"]


def test_a_box_off_the_image_after_the_crop_is_noted(tmp_path, stores, capsys):
    images, _ = stores
    # case-04 is 517 wide, 333 high: MAIRA-2's bins are of the centre 333 x 333 square; zero-width after int()
    rows = [{"case_id": "case-04", "finding": "Nodule", "text": maira_text([(10, 10, 10, 50)])}]
    code, out, err = run(capsys, write_jsonl(tmp_path / "a.jsonl", rows), "--answers", "maira-2", "--images", images,
                         "--out", tmp_path / "s.zarr")
    assert code == 0, err
    assert "empty box 1" in out


WRAPPER = {
    "not_json": ('{"case_id": "case-00", "finding": "Nodule", "text": "x"\n', "line 1: is not valid JSON"),
    "not_object": ('["case-00", "Nodule", "x"]\n', "line 1: must be an object"),
    "unknown_key": ('{"case_id": "case-00", "finding": "Nodule", "text": "x", "bbox": 1}\n', "unknown key(s) bbox"),
    "both": ('{"case_id": "case-00", "finding": "Nodule", "query_id": "case-00#0", "text": "x"}\n', "exactly one"),
    "no_text": ('{"case_id": "case-00", "finding": "Nodule"}\n', "lacks text"),
    "text_not_str": ('{"case_id": "case-00", "finding": "Nodule", "text": 3}\n', "text must be a string"),
    "unknown_case": ('{"case_id": "case-99", "finding": "Nodule", "text": "x"}\n', "case_id 'case-99' is not in"),
    "unknown_query": ('{"query_id": "case-00#9", "text": "x"}\n', "is not a phrase row"),
    "wrong_image": ('{"case_id": "case-01", "query_id": "case-00#0", "text": "x"}\n', "is a phrase of case 'case-00'"),
    "unknown_finding": ('{"case_id": "case-00", "finding": "Tumour", "text": "x"}\n', "names no finding"),
    "bad_score": ('{"case_id": "case-00", "finding": "Nodule", "text": "x", "score": 1.5}\n', "score must be"),
    "nan_score": ('{"case_id": "case-00", "finding": "Nodule", "text": "x", "score": NaN}\n', "not JSON"),
    "repeat": ('{"case_id": "case-00", "finding": "Nodule", "text": "x"}\n' * 2, "line 2: repeats the answer of line 1"),
    "deep": ('{"case_id": "case-00", "finding": "Nodule", "text": {"a": ["b"]}}\n', "nests 3 levels deep; the limit is 1"),
    "many_values": ("{" + ", ".join(f'"k{i}": 0' for i in range(40)) + "}\n", "holds more than 16 values"),
    "unknown_dataset": ('{"dataset": "vindr", "case_id": "case-00", "finding": "Nodule", "text": "x"}\n',
                        "dataset 'vindr' is not in the images store"),
    "empty": ("\n\n", "holds no answer"),
    "huge_int": ('{"case_id": "case-00", "finding": "Nodule", "text": "x", "score": ' + "9" * 100 + '}\n',
                 "integer of 100 digits"),
}


@pytest.mark.parametrize("case", list(WRAPPER))
def test_the_answers_file_itself_is_refused_one_line_per_problem(tmp_path, stores, capsys, case):
    images, _ = stores
    text, expected = WRAPPER[case]
    (tmp_path / "a.jsonl").write_text(text)
    code, out, err = run(capsys, tmp_path / "a.jsonl", "--answers", "chexagent", "--images", images,
                         "--out", tmp_path / "s.zarr")
    assert code == 2 and expected in err, err
    assert "Traceback" not in err and not os.path.lexists(tmp_path / "s.zarr")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no hidden work folder left


def test_answers_file_limits_links_and_options(tmp_path, stores, capsys, monkeypatch):
    images, _ = stores
    ok = write_jsonl(tmp_path / "a.jsonl", [{"case_id": "case-00", "finding": "Nodule", "text": "x"}])
    code, _, err = run(capsys, ok, "--images", images, "--out", tmp_path / "s.zarr")
    assert code == 2 and "name their format with --answers" in err
    code, _, err = run(capsys, ok, "--answers", "maira2", "--images", images, "--out", tmp_path / "s.zarr")
    assert code == 2 and "Did you mean: maira-2" in err
    code, _, err = run(capsys, ok, "--answers", "chexagent", "--out", tmp_path / "s.zarr")
    assert code == 2 and "need --images" in err
    code, _, err = run(capsys, ok, "--answers", "chexagent", "--images", images, "--dataset", "nih",
                       "--out", tmp_path / "s.zarr")
    assert code == 2 and "--dataset: 'nih' is not in the images store" in err
    (tmp_path / "m.json").write_text('{"datasets": {}}')
    code, _, err = run(capsys, tmp_path / "m.json", "--images", images, "--answers-frame", "square",
                       "--out", tmp_path / "s.zarr")
    assert code == 2 and "--answers-frame: only for a model's answers" in err
    link = tmp_path / "zero.jsonl"
    os.symlink("/dev/zero", link)
    code, _, err = run(capsys, link, "--answers", "chexagent", "--images", images, "--out", tmp_path / "s.zarr")
    assert code == 2 and "not a regular file" in err
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    code, _, err = run(capsys, fifo, "--answers", "chexagent", "--images", images, "--out", tmp_path / "s.zarr")
    assert code == 2 and "not a regular file" in err
    import xbench.schemas.convert_answers as ca
    monkeypatch.setattr(ca, "ANSWERS_MAX_BYTES", 100)
    big = write_jsonl(tmp_path / "big.jsonl", [{"case_id": "case-00", "finding": "Nodule", "text": "x" * 200}])
    code, _, err = run(capsys, big, "--answers", "chexagent", "--images", images, "--out", tmp_path / "s.zarr")
    assert code == 2 and "the limit for this file is 100 bytes" in err
    monkeypatch.setattr(ca, "MAX_ANSWER_ROWS", 2)
    rows = [{"case_id": c, "finding": "Nodule", "text": "x"} for c in IDS[:3]]
    monkeypatch.setattr(ca, "ANSWERS_MAX_BYTES", 10_000)
    code, _, err = run(capsys, write_jsonl(tmp_path / "rows.jsonl", rows), "--answers", "chexagent", "--images", images,
                       "--out", tmp_path / "s.zarr")
    assert code == 2 and "more than 2 answers" in err
    assert not os.path.lexists(tmp_path / "s.zarr")


def test_notes_never_carry_a_box_over_from_another_answer(tmp_path, stores, capsys):
    """CheXagent's phrase-grounding script reuses the previous answer's box when one has none
    (run_phrase_grounding.py:66-69); here an answer without a box gives an empty map and score 0."""
    images, _ = stores
    rows = [{"query_id": "case-00#0", "text": "<|box|>(10,20),(50,60)<|/box|>"},
            {"query_id": "case-00#1", "text": "I cannot locate it."}]
    code, _, err = run(capsys, write_jsonl(tmp_path / "a.jsonl", rows), "--answers", "chexagent", "--images", images,
                       "-q", "--out", tmp_path / "s.zarr")
    assert code == 0, err
    sub = read_submission(tmp_path / "s.zarr").datasets["phantom"]
    row = {q: k for k, q in enumerate(sub.query_id.tolist())}
    maps = np.asarray(sub.query_saliency[...])
    assert maps[row["case-00#0"]].any() and not maps[row["case-00#1"]].any()
    assert float(sub.query_scores[row["case-00#1"]]) == 0.0 and math.isclose(float(sub.query_scores[row["case-00#0"]]), 1)


def test_the_time_budget_stops_a_long_answers_file_and_leaves_nothing(tmp_path):
    """--timeout holds for answers as for every source: the watchdog stops the run and removes its work folder."""
    import subprocess
    import sys
    from pathlib import Path

    n = 20_000
    ids = [f"c{k:05d}" for k in range(n)]
    w = ImagesWriter(tmp_path / "images.zarr", "phantom", case_ids=ids, classes=CLASSES, image_size=8,
                     cases_per_block=n)
    w.write_block(0, np.zeros((n, 8, 8), np.uint8), np.full((n, 2), 512, np.int32))
    w.finish()
    text = "<obj>a" + "<box><x1><y2><x30><y40></box>" * 50 + "</obj>"
    with open(tmp_path / "a.jsonl", "w") as f:  # 20,000 answers of 50 boxes each (1,000,000 boxes, the cap)
        for case in ids:
            f.write(json.dumps({"case_id": case, "finding": "Nodule", "text": text}) + "\n")
    res = subprocess.run([str(Path(sys.executable).parent / "xbench-convert"), str(tmp_path / "a.jsonl"), "--answers",
                          "maira-2", "--images", str(tmp_path / "images.zarr"), "--out", str(tmp_path / "s.zarr"), "-q",
                          "--timeout", "1"], capture_output=True, text=True, timeout=300)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("xbench-convert: the time budget of 1 s ran out (--timeout)"), res.stderr
    assert not os.path.lexists(tmp_path / "s.zarr") and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
