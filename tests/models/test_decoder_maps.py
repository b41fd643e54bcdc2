"""Decoder VLM scores and maps against brute force on a tiny LLaVA-style model (tests/models/decoder_tiny.py).

The brute force runs the same decoder with eager attention and ``output_attentions=True`` (every layer's full
L x L probabilities), one sequence at a time without padding, and computes each definition directly:
the likelihood score from log-softmax, the answer row of the mean attention, the rollout product, Chefer's
relevance from the attention gradients, Grad-CAM from the projector inputs' gradient."""
from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("open_clip")
pytest.importorskip("transformers")

CLASSES = ("Pneumonia", "Pleural Effusion")


@pytest.fixture(scope="module")
def folder(tiny_llava_folder):
    """The tiny model, loaded once (tests build adapters of other methods and prompts around it)."""
    from xbench.extract.models.decoder.llava_rad import load

    return tiny_llava_folder, load(tiny_llava_folder)


def _adapter(folder, method="attention", layers=None, prompts=None):
    from xbench.extract.models.decoder.common import DecoderVLMAdapter, QuestionTemplate

    a = DecoderVLMAdapter(name="llava-rad", model=folder[1], method=method, layers=layers,
                          template=QuestionTemplate.from_config("llava-rad", prompts))
    a.set_classes(CLASSES)
    return a


@pytest.fixture(scope="module")
def pixels():
    torch.manual_seed(5)
    return torch.randn(1, 3, 224, 224)


def _one(adapter, feats, c, grad=False):
    """Sequence c alone (no padding): inputs, the answer position, the image columns."""
    tokens = adapter.model.project(feats.unsqueeze(0))[0]
    b = adapter.sequences(tokens, [c])
    return b.embeds, int(b.positions[0]), b.image


def _eager(adapter, embeds):
    lm = adapter.model.lm
    old = lm.config._attn_implementation
    lm.config._attn_implementation = "eager"
    try:
        out = lm.model(inputs_embeds=embeds, output_attentions=True, use_cache=False)
    finally:
        lm.config._attn_implementation = old
    return lm.lm_head(out.last_hidden_state), out.attentions


def _brute_score(adapter, logits, pos):
    yes, no = adapter._answers
    logp = logits[0, pos].double().log_softmax(-1)
    return (logp[yes] - logp[no]).float()


@pytest.mark.parametrize("layers", [None, [-2, -1], [0], -1])
def test_attention_and_scores_equal_brute_force(folder, pixels, layers):
    from xbench.extract.models.decoder import maps

    a = _adapter(folder, layers=layers)
    feats = a.model.vision_features(pixels)[0]
    scores, rows = maps._attention(a, feats)  # the findings batched, right-padded, rows captured
    n_layers = len(a.model.attention_layers())
    given = [layers] if isinstance(layers, int) else layers
    keep = range(n_layers) if given is None else sorted({v % n_layers for v in given})
    for c in range(len(CLASSES)):
        embeds, pos, (s0, s1) = _one(a, feats, c)
        with torch.no_grad():
            logits, att = _eager(a, embeds)
        want = torch.stack([att[k][0, :, pos, s0:s1].mean(0) for k in keep]).mean(0)
        assert torch.allclose(rows[c], want, atol=1e-6), (rows[c] - want).abs().max()
        assert torch.allclose(scores[c], _brute_score(a, logits, pos), atol=1e-4)
        assert want.std() > 0


def test_padding_does_not_change_a_finding(folder, pixels):
    """Findings whose questions differ in length, batched: each equals its own unpadded run."""
    from xbench.extract.models.decoder import maps

    a = _adapter(folder, prompts={"classes": {"Pneumonia": "is there pneumonia ?"}})
    feats = a.model.vision_features(pixels)[0]
    lengths = {len(a._prompts[c][1]) for c in range(2)}
    assert len(lengths) == 2
    scores, rows = maps._attention(a, feats)
    for c in range(2):
        a1 = _adapter(folder, prompts={"classes": {"Pneumonia": "is there pneumonia ?"}})
        a1.set_classes([CLASSES[c]])
        s1, r1 = maps._attention(a1, feats)
        assert torch.allclose(scores[c], s1[0], atol=1e-5) and torch.allclose(rows[c], r1[0], atol=1e-6)


def test_rollout_equals_brute_force(folder, pixels):
    from xbench.extract.models.decoder import maps

    a = _adapter(folder, method="rollout")
    feats = a.model.vision_features(pixels)[0]
    scores, rows = maps._rollout(a, feats)
    for c in range(len(CLASSES)):
        embeds, pos, (s0, s1) = _one(a, feats, c)
        with torch.no_grad():
            _, att = _eager(a, embeds)
        L = embeds.shape[1]
        r = torch.eye(L, dtype=torch.float64)
        for A in att:
            m = 0.5 * A[0].double().mean(0) + 0.5 * torch.eye(L, dtype=torch.float64)
            r = (m / m.sum(-1, keepdim=True)) @ r
        assert torch.allclose(rows[c].double(), r[pos, s0:s1], atol=1e-6)


def test_chefer_equals_brute_force(folder, pixels):
    from xbench.extract.models.decoder import maps

    a = _adapter(folder, method="chefer")
    feats = a.model.vision_features(pixels)[0]
    scores, rows = maps._chefer(a, feats)
    for c in range(len(CLASSES)):
        embeds, pos, (s0, s1) = _one(a, feats, c)
        embeds = embeds.detach().requires_grad_(True)
        logits, att = _eager(a, embeds)
        yes, no = a._answers
        grads = torch.autograd.grad(logits[0, pos, yes] - logits[0, pos, no], att)
        L = embeds.shape[1]
        r = torch.eye(L, dtype=torch.float64)
        for A, G in zip(att, grads):
            r = r + (A[0].double() * G[0].double()).clamp(min=0).mean(0) @ r
        assert torch.allclose(rows[c].double(), r[pos, s0:s1], atol=1e-5)
        assert torch.allclose(scores[c], _brute_score(a, logits.detach(), pos), atol=1e-4)


def test_gradcam_equals_brute_force(folder, pixels):
    from xbench.extract.models.decoder import maps

    a = _adapter(folder, method="gradcam")
    feats = a.model.vision_features(pixels)[0]
    scores, cams = maps._gradcam(a, feats)
    for c in range(len(CLASSES)):
        x = feats.detach().clone().requires_grad_(True)
        embeds, pos, _ = _one(a, x, c)
        logits, _ = _eager(a, embeds)
        yes, no = a._answers
        (g,) = torch.autograd.grad(logits[0, pos, yes] - logits[0, pos, no], x)
        want = torch.relu((x.detach() * g.mean(0, keepdim=True)).sum(-1))
        assert torch.allclose(cams[c], want, atol=1e-5)
        assert want.max() > 0


def test_adapter_maps_on_the_whole_image(folder):
    """The adapter's output: scores (B, C), maps (B, C, h, w) on the whole image; a square image's crop is the
    whole image, so its map is the patch grid's rows exactly."""
    from xbench.extract.models import create_adapter
    from xbench.extract.models.decoder import maps

    a = create_adapter("llava-rad", model=str(folder[0]))
    a.set_classes(CLASSES)
    images = torch.randint(0, 256, (2, 64, 64), dtype=torch.uint8)
    out = a(images, torch.tensor([[256, 256], [300, 200]]))
    assert out.scores.shape == (2, 2) and out.maps.shape == (2, 2, 14, 14)
    assert torch.isfinite(out.scores).all() and torch.isfinite(out.maps).all()
    pixels, _ = a.pixels(images[:1], torch.tensor([[256, 256]]))
    _, rows = maps._attention(a, a.model.vision_features(pixels)[0])
    assert torch.allclose(out.maps[0], rows.view(2, 14, 14), atol=1e-6)
    prov = a.provenance()
    assert prov["prompts"]["questions"]["Pneumonia"] == "Is there pneumonia in this chest X-ray?"


def test_attention_method_is_registered_for_decoders_only(folder, pixels):
    from xbench.extract.models.catalog import info
    from xbench.extract.models.decoder import maps
    from xbench.extract.saliency import METHODS

    m = METHODS.get("attention")
    a = _adapter(folder)
    s1, m1 = m(a, pixels, None)  # the registered method runs the decoder's own code
    s2, m2 = maps.METHODS["attention"](a, pixels)
    assert torch.equal(s1, s2) and torch.equal(m1, m2)
    assert m.missing({"gradients", "blocks", "class_token"})  # a dual encoder's tower lacks the decoder
    assert info("llava-rad").methods == ("attention", "rollout", "chefer", "gradcam")
