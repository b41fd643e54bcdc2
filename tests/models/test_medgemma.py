"""MedGemma through XBench's decoder path against transformers' Gemma3ForConditionalGeneration called directly
on its processor's inputs (the reference implementation), on a tiny random Gemma 3 (sliding-window and global
layers, image tokens attending to each other): the same prompt ids, pixels, answer logits and answer-row
attention; and the maps against brute force."""
from __future__ import annotations


import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

CLASSES = ("Pneumonia", "Pleural Effusion")


@pytest.fixture(scope="module")
def adapter(tiny_gemma_folder):
    from xbench.extract.models import create_adapter

    a = create_adapter("medgemma", model=str(tiny_gemma_folder))
    a.set_classes(CLASSES)
    return a


def _reference(a, image, question):
    """transformers alone: the processor's chat template and inputs, the model's forward, eager attention."""
    from PIL import Image

    messages = [{"role": "user", "content": [{"type": "image", "image": Image.fromarray(image).convert("RGB")},
                                             {"type": "text", "text": question}]}]
    inputs = a.model.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                   return_dict=True, return_tensors="pt")
    text_cfg = a.model.net.config.get_text_config()
    old = text_cfg._attn_implementation
    text_cfg._attn_implementation = "eager"
    try:
        with torch.no_grad():
            out = a.model.net(**inputs, output_attentions=True)
    finally:
        text_cfg._attn_implementation = old
    return inputs, out


def test_scores_and_attention_equal_the_transformers_model(adapter):
    from xbench.extract.models.decoder import maps

    a = adapter
    image = np.random.default_rng(0).integers(0, 256, (40, 30), dtype=np.uint8)
    yes, no = a._answers
    refs = [_reference(a, image, a.template.text(c)) for c in CLASSES]
    pixels = refs[0][0]["pixel_values"].float()
    ours_px = a.image_transform().apply(image, image.shape)
    print("max |pixel diff| (PIL bilinear vs the processor):", (ours_px - pixels[0]).abs().max().item())
    with torch.no_grad():
        scores, rows = maps._attention(a, a.model.vision_features(pixels)[0])
    for c, (inputs, out) in enumerate(refs):
        ids = inputs["input_ids"][0].tolist()
        before, after = a._prompts[c]
        n = a.model.grid[0] * a.model.grid[1]
        assert ids == before + [a.model.image_token_id] * n + after
        want = out.logits[0, -1]
        assert torch.allclose(scores[c], want[yes] - want[no], atol=1e-4), (scores[c], want[yes] - want[no])
        s0 = len(before)
        want_rows = torch.stack([att[0, :, -1, s0:s0 + n].mean(0) for att in out.attentions]).mean(0)
        assert torch.allclose(rows[c], want_rows, atol=1e-6), (rows[c] - want_rows).abs().max()
        assert want_rows.std() > 0
    assert not torch.allclose(scores[0], scores[1])


def test_image_tokens_attend_to_each_other(adapter):
    """The bidirectional image block is on: an image token's output depends on a later image token."""
    a = adapter
    with torch.no_grad():
        tokens = a.model.project(a.model.vision_features(torch.randn(1, 3, 32, 32)))[0]
        b = a.sequences(tokens, [0])
        hidden = a.model.net.model(inputs_embeds=b.embeds, token_type_ids=torch.nn.functional.pad(
            torch.ones(1, b.image[1] - b.image[0], dtype=torch.long), (b.image[0], b.embeds.shape[1] - b.image[1])),
            use_cache=False).last_hidden_state
        changed = b.embeds.clone()
        changed[0, b.image[1] - 1] += 1.0
        hidden2 = a.model.net.model(inputs_embeds=changed, token_type_ids=torch.nn.functional.pad(
            torch.ones(1, b.image[1] - b.image[0], dtype=torch.long), (b.image[0], b.embeds.shape[1] - b.image[1])),
            use_cache=False).last_hidden_state
    assert not torch.allclose(hidden[0, b.image[0]], hidden2[0, b.image[0]])


@pytest.mark.parametrize("method", ["rollout", "gradcam", "chefer"])
def test_every_method_runs_and_keeps_the_scores(adapter, method):
    from xbench.extract.models.decoder.common import DecoderVLMAdapter

    b = DecoderVLMAdapter(name="medgemma", model=adapter.model, template=adapter.template, method=method)
    b.set_classes(CLASSES)
    images = torch.randint(0, 256, (2, 48, 48), dtype=torch.uint8)
    sizes = torch.tensor([[300, 200], [200, 200]])
    out, ref = b(images, sizes), adapter(images, sizes)
    assert torch.allclose(out.scores, ref.scores, atol=1e-4)
    # written on the image tokens' grid (map_size); Grad-CAM's 4 x 4 tower-token map is resampled onto it
    assert out.maps.shape == (2, 2, 2, 2) and torch.isfinite(out.maps).all()


def test_a_config_value_the_strict_config_rejects_is_an_input_error(tiny_gemma_folder, tmp_path):
    """transformers 5's strict config dataclasses raise their own error kind: it is XBench's one-line error."""
    import json
    import shutil

    from xbench.extract.models import create_adapter
    from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError

    bad = tmp_path / "bad"
    shutil.copytree(tiny_gemma_folder, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["text_config"]["hidden_size"] = [1]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises((ModelConfigError, WeightsNotFoundError), match="config"):
        create_adapter("medgemma", model=str(bad))
