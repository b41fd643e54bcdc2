"""xbench-prepare --text-probes: the probe rules (negation, side swap, seeded shuffle) exactly as documented,
and the probe rows in the stores prepared from the MS-CXR fixture and from phantom."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from test_reader_ms_cxr import write_ms_cxr

from xbench.extract.datasets.ms_cxr import MSCXRReader
from xbench.extract.datasets.phantom import PhantomReader
from xbench.extract.datasets.prepare import PrepareError, prepare_dataset
from xbench.extract.datasets.text_probes import add_probes, negate, probe_id, shuffle_words, swap_sides
from xbench.schemas import read_ground_truth, read_images, validate_ground_truth, validate_images
from xbench.schemas.queries import Queries


def test_negation_prefixes_no():
    assert negate("small left apical pneumothorax") == "no small left apical pneumothorax"
    assert negate("No acute findings") == "no No acute findings"  # no parsing: the rule is the prefix


@pytest.mark.parametrize("phrase, want", [
    ("small left apical pneumothorax", "small right apical pneumothorax"),
    ("Left-sided effusion, right basal opacity", "Right-sided effusion, left basal opacity"),
    ("RIGHT lower lobe", "LEFT lower lobe"),
    ("LeFt lung", "Right lung"),  # capitalised first letter, not all upper: capitalised
    ("bilateral pleural effusions", None),
    ("leftward shift; upright film; R hilum; L base", None),  # not whole words / abbreviations
])
def test_side_swap(phrase, want):
    assert swap_sides(phrase) == want


def test_shuffle_is_seeded_by_the_phrase_id_and_always_differs():
    words = "patchy right basal opacity"
    a = shuffle_words(words, "d1#2")
    assert a == shuffle_words(words, "d1#2") and a != words and sorted(a.split()) == sorted(words.split())
    seed = int.from_bytes(hashlib.sha256(b"0\x00d1#2").digest()[:8], "big")
    order = np.random.default_rng(seed).permutation(4)
    expect = " ".join(words.split()[i] for i in order)
    assert a == (expect if expect != words else "right basal opacity patchy")
    assert shuffle_words("effusion", "x") is None and shuffle_words("no no", "x") is None
    # a draw that gives the phrase back is replaced by the rotation: find an id whose draw is the identity
    for k in range(200):
        qid = f"c#{k}"
        s = int.from_bytes(hashlib.sha256(f"0\0{qid}".encode()).digest()[:8], "big")
        if (np.random.default_rng(s).permutation(2) == [0, 1]).all():
            assert shuffle_words("heart enlarged", qid) == "enlarged heart"
            break
    else:
        pytest.fail("no identity draw among 200 ids")


def test_add_probes_orders_rows_by_case_and_keeps_the_mapping():
    q = Queries.of(["a#0", "a#1", "b#0"], [0, 0, 1], ["Edema", "Edema", "Pneumothorax"],
                   ["left effusion", "edema", "right apical pneumothorax"])
    p = add_probes(q, ["a", "b"])
    assert p.queries.id[:2].tolist() == ["a#0", "a#1"]
    assert p.queries.text.tolist()[2:6] == ["no left effusion", "right effusion", "effusion left", "no edema"]
    assert p.kind.tolist() == ["", "", "negation", "laterality", "shuffle", "negation",
                               "", "negation", "laterality", "shuffle"]
    assert p.of.tolist()[2:6] == ["a#0"] * 3 + ["a#1"]
    assert p.queries.id[2] == probe_id("a", "a#0", "negation") == "a#" + hashlib.sha256(b"a#0\x00negation").hexdigest()[:12]
    assert (np.diff(p.queries.case) >= 0).all() and p.source.tolist() == [0, 1, 0, 0, 0, 1, 2, 2, 2, 2]


def test_ms_cxr_fixture_prepares_probe_rows(tmp_path):
    write_ms_cxr(tmp_path / "raw")
    out, plain = tmp_path / "out", tmp_path / "plain"
    prepare_dataset(MSCXRReader(tmp_path / "raw"), out, grid=(16, 20), image_size=32, workers=1, progress=False,
                    text_probes=True)
    prepare_dataset(MSCXRReader(tmp_path / "raw"), plain, grid=(16, 20), image_size=32, workers=1, progress=False)
    assert validate_images(out / "images.zarr") == [] and validate_ground_truth(out / "gt.zarr") == []
    img = read_images(out / "images.zarr").datasets["ms_cxr"]
    gt = read_ground_truth(out / "gt.zarr").datasets["ms_cxr"]
    base = read_ground_truth(plain / "gt.zarr").datasets["ms_cxr"]
    texts = dict(zip(img.queries.id.tolist(), img.queries.text.tolist()))
    got = {(str(o), str(k)): texts[i] for i, o, k in zip(gt.queries.id.tolist(), gt.query_probes.of, gt.query_probes.kind) if k}
    assert got == {
        ("d1#0", "negation"): "no small left apical pneumothorax",
        ("d1#0", "laterality"): "small right apical pneumothorax",
        ("d1#0", "shuffle"): shuffle_words("small left apical pneumothorax", "d1#0"),
        ("d1#1", "negation"): "no bilateral pleural effusions",
        ("d1#1", "shuffle"): shuffle_words("bilateral pleural effusions", "d1#1"),
        ("d1#2", "negation"): "no patchy right basal opacity",
        ("d1#2", "laterality"): "patchy left basal opacity",
        ("d1#2", "shuffle"): shuffle_words("patchy right basal opacity", "d1#2"),
        ("d2#0", "negation"): "no the heart is enlarged",
        ("d2#0", "shuffle"): shuffle_words("the heart is enlarged", "d2#0"),
    }
    # the originals keep their ids, order and masks; each probe's mask is its original's
    original = gt.query_probes.kind == ""
    assert gt.queries.id[original].tolist() == base.queries.id.tolist()
    masks, base_masks = np.asarray(gt.query_mask[...]), np.asarray(base.query_mask[...])
    np.testing.assert_array_equal(masks[original], base_masks)
    row = {q: r for r, q in enumerate(base.queries.id.tolist())}
    for r in np.flatnonzero(~original):
        np.testing.assert_array_equal(masks[r], base_masks[row[str(gt.query_probes.of[r])]])
    # the public store says nothing of which rows are probes
    assert read_images(out / "images.zarr").attrs.get("schema_minor") == read_images(plain / "images.zarr").attrs.get("schema_minor")
    assert read_ground_truth(out / "gt.zarr").attrs["schema_minor"] == 4
    assert base.query_probes is None


def test_phantom_phrases_get_probes_and_a_dataset_without_phrases_is_refused(tmp_path):
    prepare_dataset(PhantomReader(None, n_cases=5, phrases=True), tmp_path / "p", grid=16, image_size=32, workers=1,
                    progress=False, text_probes=True)
    gt = read_ground_truth(tmp_path / "p" / "gt.zarr").datasets["phantom"]
    img = read_images(tmp_path / "p" / "images.zarr").datasets["phantom"]
    texts = img.queries.text[gt.query_probes.kind == ""].tolist()
    # every phantom phrase but the heart's names a side; every one has several distinct words
    assert int((gt.query_probes.kind == "laterality").sum()) == sum(("left" in t) or ("right" in t) for t in texts) > 0
    assert int((gt.query_probes.kind == "negation").sum()) == int((gt.query_probes.kind == "shuffle").sum()) == len(texts)
    with pytest.raises(PrepareError, match="phrases=true"):
        prepare_dataset(PhantomReader(None, n_cases=3), tmp_path / "q", grid=16, image_size=32, workers=1,
                        progress=False, text_probes=True)
    assert not (tmp_path / "q" / "gt.zarr").exists()


def test_cli_refuses_text_probes_without_phrase_rows(tmp_path, capsys):
    from xbench.extract.prepare_cli import main

    with pytest.raises(SystemExit) as exc:
        main(["phantom", "--out", str(tmp_path / "o"), "--n-cases", "2", "--text-probes", "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--text-probes needs phrase rows" in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_a_case_that_fails_to_decode_takes_its_probes_with_it(tmp_path):
    from test_reader_ms_cxr import PATH

    write_ms_cxr(tmp_path / "raw")
    (tmp_path / "raw" / PATH["d1"]).write_bytes(b"not a jpeg")  # fails in the worker: the images group is rewritten
    out = tmp_path / "out"
    prepare_dataset(MSCXRReader(tmp_path / "raw"), out, grid=(16, 20), image_size=32, workers=1, progress=False,
                    text_probes=True, max_skip_fraction=0.9)
    assert validate_images(out / "images.zarr") == [] and validate_ground_truth(out / "gt.zarr") == []
    img = read_images(out / "images.zarr").datasets["ms_cxr"]
    gt = read_ground_truth(out / "gt.zarr").datasets["ms_cxr"]
    assert img.case_id.tolist() == ["d2"] and img.queries.id.tolist() == gt.queries.id.tolist()
    assert img.queries.text.tolist() == ["the heart is enlarged", "no the heart is enlarged",
                                         shuffle_words("the heart is enlarged", "d2#0")]
    assert gt.query_probes.of.tolist() == ["", "d2#0", "d2#0"] and (np.asarray(gt.queries.case) == 0).all()
    masks = np.asarray(gt.query_mask[...])
    assert (masks[1] == masks[0]).all() and (masks[2] == masks[0]).all() and masks[0].any()
