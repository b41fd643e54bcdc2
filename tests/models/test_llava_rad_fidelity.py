"""LLaVA-Rad: the authors' classes (github microsoft/LLaVA-Rad, kept outside the repository) beside XBench's
implementation on the same tiny random weights: the preprocessing, the prompt's token ids, the logits and the
answer position's attention agree to float tolerance.

Their code is found at $XBENCH_LLAVA_RAD (default .cache/reference/llava-rad); the test skips when it is absent
(CI never needs it). Their package ``__init__`` imports every model kind (MPT included), so the two packages
``llava`` and ``llava.model`` are given as bare namespaces and only the LLaVA-Llama modules are imported;
transformers 5 ships its own "llava" model type, so their ``AutoConfig.register`` calls are skipped during
the import. Nothing else of their code is changed.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import types
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("open_clip")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parent))
import decoder_tiny  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[2] / ".cache" / "reference"  # git-ignored; the env vars override
ROOT = Path(os.environ.get("XBENCH_LLAVA_RAD", REFERENCES / "llava-rad"))
pytestmark = pytest.mark.skipif(not (ROOT / "llava" / "model" / "llava_arch.py").is_file(),
                                reason=f"the authors' LLaVA-Rad code is not at {ROOT} (set XBENCH_LLAVA_RAD)")


@pytest.fixture(scope="module")
def authors():
    """Their modules: llava_llama, conversation, mm_utils, constants."""
    import transformers

    saved = {k: v for k, v in sys.modules.items() if k == "llava" or k.startswith("llava.")}
    for name, sub in (("llava", "llava"), ("llava.model", "llava/model")):
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(ROOT / sub)]
        sys.modules[name] = pkg
    try:
        with mock.patch.object(transformers.AutoConfig, "register", lambda *a, **k: None), \
                mock.patch.object(transformers.AutoModelForCausalLM, "register", lambda *a, **k: None):
            mods = {n: importlib.import_module(f"llava.{n}") for n in
                    ("model.language_model.llava_llama", "conversation", "mm_utils", "constants")}
        yield types.SimpleNamespace(**{k.rsplit(".", 1)[-1]: v for k, v in mods.items()})
    finally:
        for k in [k for k in sys.modules if k == "llava" or k.startswith("llava.")]:
            del sys.modules[k]
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def pair(authors, tmp_path_factory):
    """(their model in eval mode, our adapter) on the same random weights."""
    import open_clip

    from xbench.extract.models import create_adapter

    base = tmp_path_factory.mktemp("llava_rad_fid")
    (base / "vision.json").write_text(json.dumps(decoder_tiny.VISION))
    torch.manual_seed(1)
    clip = open_clip.model.CLIP(**decoder_tiny.VISION)
    torch.save(clip.state_dict(), base / "clip.pt")  # their tower loads an open_clip checkpoint (outside our folder)
    cfg = authors.llava_llama.LlavaConfig(**decoder_tiny.config(mm_vision_tower_config=str(base / "vision.json"),
                                                                mm_vision_tower_checkpoint=str(base / "clip.pt")))
    cfg._attn_implementation = "eager"  # their attention probabilities, every layer, for the comparison
    torch.manual_seed(0)
    theirs = authors.llava_llama.LlavaLlamaForCausalLM(cfg)
    theirs.get_vision_tower().load_model()
    with torch.no_grad():
        for p in theirs.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.2)
    theirs.eval()
    state = {k: v for k, v in theirs.state_dict().items()}
    folder = decoder_tiny.make_folder(base / "ours", state=state)
    ours = create_adapter("llava-rad", model=str(folder), method="attention")
    return theirs, ours


def _image(h=300, w=220, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (h, w), dtype=np.uint8)


def test_preprocessing_matches(pair):
    from PIL import Image

    theirs, ours = pair
    img = _image()
    want = theirs.get_vision_tower().image_processor.preprocess(Image.fromarray(img).convert("RGB"))["pixel_values"][0]
    got = ours.image_transform().apply(img, img.shape)
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-6)


def test_prompt_ids_match(pair, authors):
    theirs, ours = pair
    question = "Is there pneumonia in this chest X-ray?"
    conv = authors.conversation.conv_templates["v1"].copy()
    conv.append_message(conv.roles[0], authors.constants.DEFAULT_IMAGE_TOKEN + "\n" + question)
    conv.append_message(conv.roles[1], None)
    want = authors.mm_utils.tokenizer_image_token(conv.get_prompt(), ours.model.tok,
                                                  authors.constants.IMAGE_TOKEN_INDEX)
    before, after = ours.model.prompt_ids(question)
    assert before + [authors.constants.IMAGE_TOKEN_INDEX] + after == want
    assert 1 not in want  # no unknown word: the tiny vocabulary covers the whole prompt


def test_logits_and_attention_match(pair, authors):
    """Their forward (output_attentions, eager) and ours (sdpa, answer rows captured) on the same input."""
    from xbench.extract.models.decoder import maps

    theirs, ours = pair
    classes = ("Pneumonia", "Pleural Effusion")
    ours.set_classes(classes)
    img = _image(seed=3)
    pixels = ours.image_transform().apply(img, img.shape).unsqueeze(0)
    with torch.no_grad():
        feats = ours.model.vision_features(pixels)
        got_scores, got_rows = maps._attention(ours, feats[0])
    yes, no = ours._answers
    diffs = {}
    for c, name in enumerate(classes):
        before, after = ours._prompts[c]
        ids = torch.tensor([before + [authors.constants.IMAGE_TOKEN_INDEX] + after])
        with torch.no_grad():
            out = theirs(input_ids=ids, images=pixels, output_attentions=True, return_dict=True)
            ours_logits = ours.model.answer_logits(ours.sequences(ours.model.project(feats)[0], [c]).embeds,
                                                   torch.tensor([len(before) + feats.shape[1] + len(after) - 1]), None)
        want_logits = out.logits[0, -1]
        start = len(before)
        want_rows = torch.stack([a[0, :, -1, start:start + feats.shape[1]].mean(0) for a in out.attentions]).mean(0)
        diffs[name] = ((ours_logits[0] - want_logits).abs().max().item(),
                       (got_rows[c] - want_rows).abs().max().item())
        assert torch.allclose(ours_logits[0], want_logits, atol=1e-4, rtol=1e-4)
        assert torch.allclose(got_scores[c], want_logits[yes] - want_logits[no], atol=1e-4)
        assert torch.allclose(got_rows[c], want_rows, atol=1e-6)
        assert want_rows.std() > 0  # a map that is not flat: the comparison can fail
    print("max |logit diff|, max |attention diff|:", diffs)
