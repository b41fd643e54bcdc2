"""The query-embedding cache (library and CLI) and complete extractions through the runner."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xbench.extract.models.crossattn.cache import (  # noqa: E402
    CACHE_VERSION,
    build_query_cache,
    read_query_cache,
    write_query_cache,
)
from xbench.extract.models.crossattn.cache_cli import build_embeddings  # noqa: E402
from xbench.extract.models.crossattn.entities import ENTITIES  # noqa: E402


@pytest.fixture()
def text_files(tmp_path):
    """Description and aspect files laid out as the authors ship them: MedKLIP's descriptions in
    entity order with position 20 keyed "eumonia"; MAVL's aspects keyed by name (8 per entity,
    "name: sentence") with an extra "covid19" entry."""
    desc = {("eumonia" if e == "pneumonia" else e): f"there is {e} in the lung" for e in ENTITIES}
    aspects = {e: [f"{a}: {e} pattern" for a in ("border", "fluid", "location", "opacity", "other",
                                                  "patterns", "shape", "texture")] for e in (*ENTITIES, "covid19")}
    d, a = tmp_path / "observation explanation.json", tmp_path / "gpt4_mimic.json"
    d.write_text(json.dumps(desc))
    a.write_text(json.dumps(aspects))
    return d, a, desc, aspects


def reference_cls(tiny_bert, texts, max_length=64):
    """Independent CLS computation: Hugging Face's word pieces, laid out as the authors' tokenizer
    does ([CLS] + first max_length-1 pieces, no [SEP], right-padded), through BertModel."""
    from transformers import BertModel, BertTokenizer

    tok = BertTokenizer(str(tiny_bert / "vocab.txt"), do_lower_case=True)
    ids = np.zeros((len(texts), max_length), dtype=np.int64)
    for row, text in enumerate(texts):
        seq = [tok.cls_token_id] + tok.convert_tokens_to_ids(tok.tokenize(text))[:max_length - 1]
        ids[row, :len(seq)] = seq
    model = BertModel.from_pretrained(tiny_bert).eval()
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy((ids != 0).astype(np.int64)))
    return out.last_hidden_state[:, 0].numpy()


def test_medklip_descriptions_by_position_with_the_eumonia_key(tmp_path, tiny_bert, text_files):
    d, _, desc, _ = text_files
    out = tmp_path / "medklip.npz"
    build_query_cache(tiny_bert, d, out)
    back = read_query_cache(out)
    assert back.entities == ENTITIES
    assert back.meta["descriptions_by"] == "position" and back.meta["description_keys"] == {"pneumonia": "eumonia"}
    some = [0, 20, 74]
    np.testing.assert_allclose(back.disease_book[some], reference_cls(tiny_bert, [list(desc.values())[i] for i in some]),
                               atol=1e-5)
    assert "in the lung" in list(desc.values())[20] and "pneumonia" in list(desc.values())[20]
    assert back.meta["tokenizer"]["name"] == "xbench-bert-cls-only" and back.meta["tokenizer"]["max_length"] == 64
    assert back.meta["version"] == CACHE_VERSION and "CLS" in back.meta["pooling"]
    # by name, the same file lacks 'pneumonia' and says how to read it instead
    with pytest.raises(ValueError, match="'pneumonia' has no description text.*--descriptions-by position"):
        build_query_cache(tiny_bert, d, tmp_path / "x.npz", descriptions_by="name")


def test_mavl_cache_by_name_matches_direct_cls_embeddings(tmp_path, tiny_bert, text_files):
    d, a, desc, aspects = text_files
    named = {e: desc["eumonia" if e == "pneumonia" else e] for e in ENTITIES}
    d.write_text(json.dumps({**named, "covid19": "covid 19 pneumonia"}))  # MAVL's file: true names + covid19
    out = tmp_path / "mavl.npz"
    some = ("normal", "effusion", "excluded_obs")  # a subset keeps the test fast
    cache = build_query_cache(tiny_bert, d, out, aspects_path=a, entities=some, max_length=5)
    back = read_query_cache(out, need_aspects=True)
    assert back.entities == some and back.aspects[5] == "patterns" and back.aspect_book.shape[:2] == (3, 8)
    assert back.meta["descriptions_by"] == "name" and back.meta["tokenizer"]["max_length"] == 5
    np.testing.assert_allclose(back.disease_book, reference_cls(tiny_bert, [named[e] for e in some], 5), atol=1e-5)
    np.testing.assert_allclose(back.aspect_book[1, [0, 7]],
                               reference_cls(tiny_bert, [aspects["effusion"][i] for i in (0, 7)], 5), atol=1e-5)
    np.testing.assert_array_equal(cache.disease_book, back.disease_book)
    # --extra-entity covid19 takes the 76th entries of both files
    ext = build_query_cache(tiny_bert, d, tmp_path / "c.npz", aspects_path=a, entities=("normal",),
                            extra_entities=("covid19",), max_length=5)
    np.testing.assert_allclose(ext.disease_book[1], reference_cls(tiny_bert, ["covid 19 pneumonia"], 5)[0], atol=1e-5)


def test_cache_input_problems_are_listed(tmp_path, tiny_bert, text_files):
    d, a, desc, aspects = text_files
    del desc["effusion"]
    aspects["edema"] = aspects["edema"][:3]
    d.write_text(json.dumps(desc))
    a.write_text(json.dumps(aspects))
    with pytest.raises(ValueError) as info:
        build_query_cache(tiny_bert, d, tmp_path / "x.npz", aspects_path=a, descriptions_by="name")
    msg = str(info.value)
    assert "'effusion' has no description" in msg and "same number of aspect sentences" in msg
    with pytest.raises(ValueError, match="has 74 entries; read by position .* needs exactly 75"):
        build_query_cache(tiny_bert, d, tmp_path / "x.npz")
    desc["effusion"] = ""
    d.write_text(json.dumps(desc))
    with pytest.raises(ValueError, match="entry 74 \\(key 'effusion', entity 'excluded_obs'\\) has no description"):
        build_query_cache(tiny_bert, d, tmp_path / "x.npz")
    assert not (tmp_path / "x.npz").exists()
    with pytest.raises(ValueError, match="between 1 and the text encoder's 300 positions, got 301"):
        build_query_cache(tiny_bert, d, tmp_path / "x.npz", descriptions_by="name", entities=("normal",),
                          max_length=301)


def test_read_cache_without_aspects_for_mavl(tmp_path):
    from xbench.extract.models.crossattn.cache import QueryCache

    p = write_query_cache(QueryCache(ENTITIES, np.zeros((75, 4), "f4")), tmp_path / "m.npz")
    assert read_query_cache(p).aspect_book is None
    with pytest.raises(ValueError, match="MAVL needs a cache built with --aspects"):
        read_query_cache(p, need_aspects=True)
    with pytest.raises(ValueError, match="build-embeddings"):
        read_query_cache(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(ValueError, match="not a query cache"):
        read_query_cache(tmp_path / "junk.npz")


def write_old_cache(path, meta):
    np.savez(path, entities=np.asarray((*ENTITIES, "covid19")), disease_book=np.zeros((76, 4), "f4"),
             meta=np.asarray(json.dumps(meta)))


def test_old_cache_is_refused_with_the_rebuild_command(tmp_path, tiny_cache, tiny_config):
    from xbench.extract.models.crossattn import medklip

    old = tmp_path / "old cache.npz"
    write_old_cache(old, {"version": 1, "text_encoder": "/m/Bio_ClinicalBERT", "lower_case": True,
                          "descriptions": "/r/observation explanation.json", "aspects": "/r/gpt4_mimic.json"})
    with pytest.raises(ValueError) as info:
        read_query_cache(old)
    msg = str(info.value)
    assert "\n" not in msg and "cache format 1" in msg and "[SEP]" in msg
    assert msg.endswith("rebuild it: xbench build-embeddings --text-encoder /m/Bio_ClinicalBERT "
                        "--descriptions '/r/observation explanation.json' --aspects /r/gpt4_mimic.json "
                        f"--extra-entity covid19 --out '{old}'")
    write_old_cache(old, {"version": 1, "text_encoder": "/m", "descriptions": "/d.json", "max_length": 32,
                          "lower_case": False})
    with pytest.raises(ValueError, match="--extra-entity covid19 --cased --max-length 32 --out"):
        read_query_cache(old)
    write_old_cache(old, {"test": True})  # no version, no paths: placeholders
    with pytest.raises(ValueError, match="version None.*--text-encoder <Bio_ClinicalBERT folder>"):
        read_query_cache(old)
    write_old_cache(old, {"version": CACHE_VERSION, "tokenizer": {"name": "xbench-bert-cls-only", "version": 0}})
    with pytest.raises(ValueError, match="tokenised by xbench-bert-cls-only v0, not xbench-bert-cls-only v1; rebuild"):
        read_query_cache(old)
    write_old_cache(old, {"version": CACHE_VERSION + 1})
    with pytest.raises(ValueError, match="newer XBench"):
        read_query_cache(old)
    with pytest.raises(ValueError, match="rebuild it: xbench build-embeddings"):  # the adapter refuses it too
        medklip.build(tiny_config("medklip", None, old))
    assert medklip.build(tiny_config("medklip", None, tiny_cache)).cache.meta["version"] == CACHE_VERSION


def test_cli_builds_cache_and_reports_errors(tmp_path, tiny_bert, text_files):
    from click.testing import CliRunner

    d, a, *_ = text_files
    out = tmp_path / "medklip.npz"
    res = CliRunner().invoke(build_embeddings, ["--text-encoder", str(tiny_bert), "--descriptions", str(d),
                                                "--out", str(out), "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["entities"] == 75 and out.is_file() and summary["description_keys"] == {"pneumonia": "eumonia"}
    res = CliRunner().invoke(build_embeddings, ["--text-encoder", str(tiny_bert), "--descriptions", str(d),
                                                "--out", str(out)])
    assert res.exit_code == 0 and "key 'eumonia' was taken for entity 'pneumonia'" in res.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    res = CliRunner().invoke(build_embeddings, ["--text-encoder", str(tiny_bert), "--descriptions", str(bad),
                                                "--out", str(tmp_path / "y.npz"), "--quiet"])
    assert res.exit_code == 2 and "error:" in res.stderr and "Traceback" not in res.output
    res = CliRunner().invoke(build_embeddings, ["--text-encoder", str(tiny_bert), "--descriptions", str(d),
                                                "--descriptions-by", "name", "--out", str(tmp_path / "y.npz")])
    assert res.exit_code == 2 and res.stderr.count("error:") == 1 and "'pneumonia'" in res.stderr
    assert not (tmp_path / "y.npz").exists()


# ---------------------------------------------------------------------------------------------
# Complete extraction on a small phantom images store
# ---------------------------------------------------------------------------------------------
PHANTOM_CLASSES = ("Pleural effusion", "Pneumothorax", "Nodule", "Lung cavity")


@pytest.fixture(scope="module")
def images_store(tmp_path_factory):
    from xbench.schemas import ImagesWriter

    path = tmp_path_factory.mktemp("imgs") / "images.zarr"
    n, size = 5, 96
    rng = np.random.default_rng(0)
    w = ImagesWriter(path, "phantom", case_ids=[f"case{i}" for i in range(n)], classes=PHANTOM_CLASSES,
                     image_size=size, cases_per_block=4)
    for b in w.blocks_todo():
        start, stop = w.block_rows(b)
        imgs = rng.integers(0, 256, size=(stop - start, size, size), dtype=np.uint8)
        sizes = np.array([[1024, 800 + 50 * i] for i in range(start, stop)], dtype=np.int32)
        w.write_block(b, imgs, sizes)
    w.finish()
    return path


@pytest.mark.parametrize("model", ["medklip", "mavl", "kad", "carzero", "devide"])
def test_complete_extraction_validates(model, tmp_path, images_store, tiny_bert, tiny_cache, tiny_config):
    runner = pytest.importorskip("xbench.extract.runner")
    from xbench.schemas import read_submission, validate_submission

    cfg = tiny_config(model, tiny_bert, tiny_cache)
    out = tmp_path / f"{model}.zarr"
    opts = runner.ExtractOptions(model=model, images=images_store, out=out, overrides=cfg, batch_size=3,
                                 device="cpu", workers=0, quiet=True)
    summary = runner.run_extraction(opts)
    assert summary["cases"] == 5
    assert validate_submission(out) == []
    sub = read_submission(out)
    ds = sub.datasets["phantom"]
    expected_unsupported = ("Lung cavity",) if model in ("medklip", "mavl") else ()
    assert tuple(ds.unsupported) == expected_unsupported
    assert ds.score_kind == ("logit" if model == "carzero" else "probability")
    assert sub.attrs["method"] == "cross-attention"
    sal = np.asarray(ds.saliency[:])
    assert np.isfinite(sal).all() and sal.shape[:2] == (5, 4)


def test_cli_replaces_only_a_cache_it_wrote(tmp_path, tiny_bert, text_files):
    """Issue 44, class 5: --out is replaced when it is a query cache (the re-run above), never a file of the
    user's, another npz, a folder or a link: exit 2, one line, before the text encoder loads; left as it was."""
    import os

    from click.testing import CliRunner

    d, *_ = text_files
    (tmp_path / "notes.npz").write_text("mine")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    (tmp_path / "folder.npz").mkdir()
    os.symlink(tmp_path / "notes.npz", tmp_path / "link.npz")
    for name in ("notes.npz", "other.npz", "folder.npz", "link.npz"):
        path = tmp_path / name
        before = path.read_bytes() if path.is_file() else None
        res = CliRunner().invoke(build_embeddings, ["--text-encoder", str(tiny_bert), "--descriptions", str(d),
                                                    "--out", str(path), "--quiet"])
        assert res.exit_code == 2 and res.stderr.count("error:") == 1, res.output
        assert ("is not a query cache XBench wrote" in res.stderr or "is a directory" in res.stderr)  # click's own
        assert "Traceback" not in res.output
        assert (path.read_bytes() if path.is_file() else None) == before
    assert (tmp_path / "link.npz").is_symlink() and (tmp_path / "folder.npz").is_dir()
