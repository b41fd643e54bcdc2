"""GLoRIA adapter on a random ResNet-50 and the tiny 4-layer BERT (offline): prompts, text slots,
the letterbox transform, attention and local similarity against independent numpy code, the
released checkpoint layout, scores, maps, phrases and the CLI preflight."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("cv2")

from xbench.extract.models import create_adapter, list_models  # noqa: E402
from xbench.extract.models.crossattn.common import AdapterConfigError  # noqa: E402
from xbench.extract.models.errors import WeightsNotFoundError  # noqa: E402
from xbench.extract.models.gloria import (  # noqa: E402
    CHEXPERT_PROMPT_TABLE,
    GLoRIATransform,
    attention,
    attention_map,
    attention_words,
    char_count,
    chexpert_prompts,
    local_similarity,
)

CLASSES = ("Atelectasis", "Pleural effusion", "Pneumothorax")
SHAPES = [(120, 90), (64, 150)]
TINY = {"resnet_layers": [1, 1, 1, 1]}  # ResNet-50's widths and 19 x 19 grid, one block per stage (fast on CPU)


@pytest.fixture(scope="module")
def adapter(tiny_bert):
    torch.manual_seed(5)
    ad = create_adapter("gloria", weights="random", text_encoder=str(tiny_bert), device="cpu", options=TINY)
    with torch.no_grad():  # BN statistics away from (0, 1) so that the test is not degenerate
        for name, b in ad.net.named_buffers():
            if name.endswith("running_var"):
                b.copy_(0.5 + torch.rand_like(b))
    return ad


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, hw, dtype=np.uint8) for hw in SHAPES]


# -- prompts and text slots ------------------------------------------------------------------------
def test_registered_and_preflight(tiny_bert):
    assert "gloria" in list_models()
    with pytest.raises(WeightsNotFoundError, match="GLoRIA weights"):
        create_adapter("gloria", text_encoder=str(tiny_bert))
    with pytest.raises(WeightsNotFoundError, match="Bio_ClinicalBERT"):
        create_adapter("gloria", weights="random")


def test_chexpert_prompts_are_the_seeded_draw():
    got = chexpert_prompts()
    assert list(got) == list(CHEXPERT_PROMPT_TABLE) and all(len(v) == 5 for v in got.values())
    rng = random.Random(6)  # the same draw written out: combinations in nested order, one generator
    for name, parts in CHEXPERT_PROMPT_TABLE.items():
        pool = [" ".join(c) for c in itertools.product(*parts)]
        assert got[name] == rng.sample(pool, 5)
    assert chexpert_prompts() == got  # no global state
    # pinned against upstream's generate_chexpert_class_prompts() (verify/gloria/gloria_check.py)
    assert got["Edema"][0] == " pulmonary edema " and got["Atelectasis"][2] == " trace atelectasis at the mid lung zone"
    assert got["Pleural Effusion"][-1] == " tiny bilateral pleural effusion"


def test_char_count_and_attention_words(adapter):
    assert char_count(" mild edema ") == 12 and char_count("a [b]") == 4 and char_count("") == 0
    tok = adapter.tokenizer(["there is cardiomegaly", "Cardiomegaly", ""])["input_ids"]
    # cardiomegaly = cardio ##megaly: one word; a one-word text is still tokenised here
    assert [attention_words(t, adapter.id_to_word) for t in tok] == [4, 2, 1]


def test_one_word_text_is_encoded_as_cls_sep(adapter):
    enc = adapter.encode_texts(["Cardiomegaly.", "there is pneumothorax"])
    assert enc.attn_words == (1, 4) and enc.chars == (13, 21)
    assert enc.words[0, :, 2:].abs().max() == 0  # [CLS] [SEP], then zero slots
    assert enc.words[1, :, 4].abs().max() > 0 and enc.words[1, :, 5:].abs().max() == 0


# -- attention and similarities against numpy -------------------------------------------------------
def _np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_attention(words, regions, temp):
    """One image: words (D, n), regions (D, R) -> attended (D, n), attention (n, R)."""
    logits = regions.T @ words  # (R, n)
    a = _np_softmax(logits, axis=1)  # each region over the words
    a = _np_softmax(a.T * temp, axis=1)  # each word over the regions
    return regions @ a.T, a


def test_attention_against_numpy():
    g = torch.Generator().manual_seed(0)
    words, regions = torch.randn(2, 8, 5, generator=g), torch.randn(2, 8, 3, 4, generator=g)
    att, a = attention(words, regions, 4.0)
    for b in range(2):
        ea, eattn = _np_attention(words[b].double().numpy(), regions[b].reshape(8, 12).double().numpy(), 4.0)
        np.testing.assert_allclose(att[b].numpy(), ea, atol=1e-5)
        np.testing.assert_allclose(a[b].reshape(5, 12).numpy(), eattn, atol=1e-6)
    assert torch.allclose(a.sum((2, 3)), torch.ones(2, 5))


def test_local_similarity_and_map_against_numpy():
    g = torch.Generator().manual_seed(1)
    words = torch.zeros(8, 10)
    words[:, :4] = torch.randn(8, 4, generator=g)  # [CLS] + 2 words + [SEP], zero slots after
    regions = torch.randn(3, 8, 2, 3, generator=g)
    for n in (2, 6, 40):  # inside the words, into the zero slots, past the end (capped at 9)
        got = local_similarity(words, regions, n)
        k = min(n, 9)
        for b in range(3):
            w = words[:, 1:k + 1].double().numpy()
            att, _ = _np_attention(w, regions[b].reshape(8, 6).double().numpy(), 4.0)
            num, den = (w * att).sum(0), np.linalg.norm(w, axis=0) * np.linalg.norm(att, axis=0)
            cos = num / np.maximum(den, 1e-8)
            assert got[b].item() == pytest.approx(np.log(np.exp(5 * cos).max()), abs=1e-5)
            if n > 3:
                assert got[b].item() >= -1e-6  # a zero slot has cosine 0: the maximum is at least exp(0)
    m = attention_map(words, regions, 3)
    for b in range(3):
        _, a = _np_attention(words[:, :3].double().numpy(), regions[b].reshape(8, 6).double().numpy(), 4.0)
        np.testing.assert_allclose(m[b].reshape(6).numpy(), a.max(0), atol=1e-6)


# -- preprocessing ----------------------------------------------------------------------------------
@pytest.mark.parametrize("hw", [(300, 200), (120, 480), (256, 256), (1000, 3)])
def test_transform_letterbox_crop_and_boxes(hw):
    t = GLoRIATransform()
    img = np.full(hw, 200, np.uint8)
    x = t(img, hw)
    assert x.shape == (3, 224, 224)
    h, w = hw
    # independent: longer side -> 256 (int), centred with floor padding, crop offset 16
    nh, nw = (256, max(1, int(w * 256 / h))) if h >= w else (max(1, int(h * 256 / w)), 256)
    top, left = (256 - nh) // 2, (256 - nw) // 2
    inside = (200 / 255 - 0.5) / 0.5
    r0, c0 = min(max(top + nh // 2 - 16, 0), 223), min(max(left + nw // 2 - 16, 0), 223)
    assert x[0, r0, c0].item() == pytest.approx(inside, abs=1e-6)
    if left > 16:
        assert x[0, r0, 0].item() == pytest.approx(-1.0)  # zero padding after Normalize(0.5, 0.5)
    if top > 16:
        assert x[0, 0, c0].item() == pytest.approx(-1.0)
    x0, y0, x1, y1 = t.boxes(torch.tensor([hw]))[0].tolist()
    # the crop [16, 240) of the canvas, in units of the content box [left, left + nw)
    assert (x0, x1) == pytest.approx(((16 - left) / nw, (240 - left) / nw))
    assert (y0, y1) == pytest.approx(((16 - top) / nh, (240 - top) / nh))


# -- the adapter ------------------------------------------------------------------------------------
def _inputs(adapter, images):
    tf = adapter.image_transform()
    return torch.stack([tf(o, o.shape) for o in images]), torch.tensor([o.shape for o in images])


def test_prompts_per_class(adapter):
    adapter.set_classes(CLASSES)
    ps = dict(zip(CLASSES, adapter.class_prompts))
    assert ps["Atelectasis"] == tuple(chexpert_prompts()["Atelectasis"])
    assert ps["Pleural effusion"] == tuple(chexpert_prompts()["Pleural Effusion"])
    assert ps["Pneumothorax"] == ("there is Pneumothorax",)  # lower-cased by process_text
    prov = adapter.provenance()
    assert "constants.py:77-169" in prov["prompts"]["origin"]["Atelectasis"]
    assert prov["prompts"]["positive"]["Pneumothorax"] == ["there is Pneumothorax"]


def test_scores_and_maps_from_the_network(adapter, images):
    adapter.set_classes(CLASSES)
    x, osz = _inputs(adapter, images)
    out = adapter(x, osz)
    assert out.scores.shape == (2, 3) and out.maps.shape == (2, 3, 19, 19)
    assert torch.isfinite(out.scores).all() and torch.isfinite(out.maps).all() and out.maps.std() > 0
    # independent recomputation from the encoders' outputs
    with torch.no_grad():
        glob, regions = adapter.net.img_encoder(x)
    assert regions.shape == (2, 32, 19, 19)
    enc, start = adapter.texts, 0
    raw = [p for ps in adapter.class_prompts for p in ps]
    for c, ps in enumerate(adapter.class_prompts):
        per = []
        for t in range(start, start + len(ps)):
            gcos = torch.nn.functional.cosine_similarity(glob, enc.sentence[t][None], dim=-1)
            per.append((gcos + local_similarity(enc.words[t], regions, char_count(raw[t]))) / 2)
        torch.testing.assert_close(out.scores[:, c], torch.stack(per, 1).max(1).values, atol=1e-5, rtol=0)
        start += len(ps)
    # stored uint8 images (the S x S stretch) go through the same letterbox transform
    stored = torch.from_numpy(np.stack([np.asarray(__import__("PIL.Image").Image.fromarray(o).resize((64, 64)))
                                        for o in images]))
    assert torch.isfinite(adapter(stored, osz).scores).all()


def test_released_checkpoint_layout(adapter, tiny_bert, tmp_path, images):
    """Lightning layout: {'hyper_parameters': <object>, 'state_dict': {'gloria.' + key}}: needs trust."""
    import argparse

    sd = {"gloria." + k: v for k, v in adapter.net.state_dict().items()}
    sd["gloria.text_encoder.model.embeddings.position_ids"] = torch.arange(300)[None]  # old transformers buffer
    path = tmp_path / "chexpert_resnet50.ckpt"
    torch.save({"hyper_parameters": argparse.Namespace(phase="pretrain"), "state_dict": sd}, path)
    with pytest.raises(AdapterConfigError, match="trust_checkpoint"):
        create_adapter("gloria", weights=str(path), text_encoder=str(tiny_bert), device="cpu", options=TINY)
    other = create_adapter("gloria", weights=str(path), text_encoder=str(tiny_bert), device="cpu",
                           options={**TINY, "trust_checkpoint": True})
    assert other.provenance()["dropped_keys"] == ["text_encoder.model.embeddings.position_ids"]
    adapter.set_classes(CLASSES)
    other.set_classes(CLASSES)
    x, osz = _inputs(adapter, images)
    a, b = adapter(x, osz), other(x, osz)
    torch.testing.assert_close(a.scores, b.scores, atol=0, rtol=0)
    torch.testing.assert_close(a.maps, b.maps, atol=0, rtol=0)
    bad = dict(sd)
    bad.pop("gloria.img_encoder.local_embedder.weight")
    torch.save({"state_dict": bad}, tmp_path / "bad.ckpt")
    with pytest.raises(AdapterConfigError, match="missing keys"):
        create_adapter("gloria", weights=str(tmp_path / "bad.ckpt"), text_encoder=str(tiny_bert), device="cpu",
                       options=TINY)


def test_phrases_match_a_single_prompt_class(adapter, images):
    x, osz = _inputs(adapter, images)
    phrases = ["there is pneumothorax", "there is pleural effusion", "Pneumothorax"]
    scores, maps = adapter.phrase_outputs(x, osz, phrases, torch.tensor([1, 0, 0]))
    assert scores.shape == (3,) and maps.shape == (3, 19, 19) and torch.isfinite(maps).all()
    adapter.set_classes(("Pneumothorax",))
    cls = adapter(x, osz)
    assert scores[0].item() == pytest.approx(cls.scores[1, 0].item(), abs=1e-6)
    torch.testing.assert_close(maps[0], cls.maps[1, 0])
    assert not torch.allclose(maps[0], maps[1])
    s0, m0 = adapter.phrase_outputs(x, osz, [], torch.zeros(0, dtype=torch.long))
    assert s0.shape == (0,) and m0.shape == (0, 19, 19)


def test_cli_without_weights_fails_before_torch(tmp_path):
    import subprocess
    import sys

    argv = ["--model", "gloria", "--images", str(tmp_path), "--out", str(tmp_path / "g.zarr")]
    code = ("import sys\nfrom xbench.extract.cli import main\ntry:\n    main(%r)\nexcept SystemExit as e:\n"
            "    print('exit', e.code, 'torch' in sys.modules)\n" % argv)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "exit 2 False", out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "GLoRIA weights" in out.stderr


@pytest.mark.slow
def test_extraction_with_phrase_rows_validates_and_scores(tmp_path, tiny_bert):
    """xbench-extract's runner on the phantom's phrase variant: class rows and phrase rows, valid, scored."""
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset
    from xbench.extract.runner import ExtractOptions, run_extraction
    from xbench.schemas import read_images, read_submission, validate_submission
    from xbench.score.scoring import score_submission

    stores = tmp_path / "stores"
    prepare_dataset(PhantomReader(n_cases=4, size=64, phrases="true"), stores, grid=(16, 16), image_size=64,
                    workers=1, progress=False, cases_per_block=4)
    sub = tmp_path / "gloria.zarr"
    cfg = {"weights": "random", "text_encoder": str(tiny_bert), "options": TINY}
    run_extraction(ExtractOptions(model="gloria", images=stores / "images.zarr", out=sub, overrides=cfg, workers=0,
                                  quiet=True, batch_size=4, cases_per_block=4, device="cpu"))
    assert validate_submission(sub, stores / "gt.zarr") == []
    got = read_submission(sub)
    assert got.attrs["method"] == "gloria-attention"
    ds = got.datasets["phantom"]
    assert ds.query_id.tolist() == read_images(stores / "images.zarr").datasets["phantom"].queries.id.tolist()
    assert np.isfinite(np.asarray(ds.saliency[:])).all()
    m = score_submission(sub, stores / "gt.zarr", bootstrap=5).metrics
    assert m["phrases"]["datasets"]["phantom"]["n_phrases"] == len(ds.query_id)
