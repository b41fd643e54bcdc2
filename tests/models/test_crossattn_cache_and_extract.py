"""The query-embedding cache (library and CLI) and complete extractions through the runner."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xbench.extract.models.crossattn.cache import build_query_cache, read_query_cache, write_query_cache  # noqa: E402
from xbench.extract.models.crossattn.cache_cli import build_embeddings  # noqa: E402
from xbench.extract.models.crossattn.entities import ENTITIES  # noqa: E402


@pytest.fixture()
def text_files(tmp_path):
    desc = {e: f"there is {e} in the lung" for e in ENTITIES}
    aspects = {e: [f"{a}: {e} pattern" for a in ("border", "fluid", "location", "opacity", "other",
                                                  "patterns", "shape", "texture")] for e in ENTITIES}
    d, a = tmp_path / "observation explanation.json", tmp_path / "gpt4_mimic.json"
    d.write_text(json.dumps(desc))
    a.write_text(json.dumps(aspects))
    return d, a, desc, aspects


def reference_cls(tiny_bert, texts):
    """Independent CLS computation: tokenizer + BertModel, max_length 64, padded."""
    from transformers import AutoTokenizer, BertModel

    tok = AutoTokenizer.from_pretrained(tiny_bert)
    model = BertModel.from_pretrained(tiny_bert).eval()
    enc = tok(texts, padding="max_length", truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        return model(**{k: enc[k] for k in ("input_ids", "attention_mask")}).last_hidden_state[:, 0].numpy()


def test_cache_matches_direct_cls_embeddings(tmp_path, tiny_bert, text_files):
    d, a, desc, aspects = text_files
    out = tmp_path / "mavl.npz"
    some = ("normal", "effusion", "excluded_obs")  # a subset keeps the test fast
    cache = build_query_cache(tiny_bert, d, out, aspects_path=a, entities=some)
    back = read_query_cache(out, need_aspects=True)
    assert back.entities == some and back.aspects[5] == "patterns"
    np.testing.assert_allclose(back.disease_book, reference_cls(tiny_bert, [desc[e] for e in some]), atol=1e-5)
    np.testing.assert_allclose(back.aspect_book[1, [0, 7]], reference_cls(tiny_bert, [aspects["effusion"][i] for i in (0, 7)]),
                               atol=1e-5)
    assert back.meta["max_length"] == 64 and len(back.meta["descriptions_sha256"]) == 64
    np.testing.assert_array_equal(cache.disease_book, back.disease_book)


def test_cache_input_problems_are_listed(tmp_path, tiny_bert, text_files):
    d, a, desc, aspects = text_files
    del desc["effusion"]
    aspects["edema"] = aspects["edema"][:3]
    d.write_text(json.dumps(desc))
    a.write_text(json.dumps(aspects))
    with pytest.raises(ValueError) as info:
        build_query_cache(tiny_bert, d, tmp_path / "x.npz", aspects_path=a)
    msg = str(info.value)
    assert "'effusion' has no description" in msg and "same number of aspect sentences" in msg
    assert not (tmp_path / "x.npz").exists()


def test_read_cache_without_aspects_for_mavl(tmp_path):
    from xbench.extract.models.crossattn.cache import QueryCache

    p = write_query_cache(QueryCache(ENTITIES, np.zeros((75, 4), "f4")), tmp_path / "m.npz")
    assert read_query_cache(p).aspect_book is None
    with pytest.raises(ValueError, match="MAVL needs a cache built with --aspects"):
        read_query_cache(p, need_aspects=True)
    with pytest.raises(ValueError, match="build-embeddings"):
        read_query_cache(tmp_path / "missing.npz")


def test_cli_builds_cache_and_reports_errors(tmp_path, tiny_bert, text_files):
    from click.testing import CliRunner

    d, a, *_ = text_files
    out = tmp_path / "medklip.npz"
    res = CliRunner().invoke(build_embeddings, ["--text-encoder", str(tiny_bert), "--descriptions", str(d),
                                                "--out", str(out), "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["entities"] == 75 and out.is_file()
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    res = CliRunner().invoke(build_embeddings, ["--text-encoder", str(tiny_bert), "--descriptions", str(bad),
                                                "--out", str(tmp_path / "y.npz"), "--quiet"])
    assert res.exit_code == 2 and "error:" in res.stderr and "Traceback" not in res.output


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
