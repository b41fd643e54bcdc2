"""MAIRA-2: the authors' code (the hub's remote code, kept outside the repository) beside XBench's implementation
on the same tiny random weights: the processor's token ids and pixels, the image features, the answer position's
logits and its attention over the image tokens agree to float tolerance.

Their code needs transformers 4.46-4.51 (it subclasses the 4.4x ``LlavaForConditionalGeneration``), so it runs in
a subprocess of a second interpreter (tests/models/maira2_reference.py): $XBENCH_MAIRA2_PY (default
.cache/reference/maira-2/venv/bin/python) with their three files under $XBENCH_MAIRA2/maira2/ (default
.cache/reference/maira-2). The test skips when either is absent (CI never needs them);
tests/models/maira2_reference_env.sh sets them up.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import decoder_tiny  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[2] / ".cache" / "reference"  # git-ignored; the env vars override
CODE = Path(os.environ.get("XBENCH_MAIRA2", REFERENCES / "maira-2"))
PY = Path(os.environ.get("XBENCH_MAIRA2_PY", CODE / "venv" / "bin" / "python"))
pytestmark = pytest.mark.skipif(not ((CODE / "maira2" / "modeling_maira2.py").is_file() and PY.is_file()),
                                reason=f"the authors' MAIRA-2 code ({CODE}/maira2) or its transformers-4.51 "
                                       f"interpreter ({PY}) is absent: see tests/models/maira2_reference_env.sh")
QUESTIONS = ["Pneumonia", "Pleural Effusion"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(our adapter, their outputs) on one image and two findings' questions."""
    from xbench.extract.models import create_adapter

    base = tmp_path_factory.mktemp("maira2_fid")
    folder = decoder_tiny.make_maira_folder(base / "ours", seed=3)
    ours = create_adapter("maira-2", model=str(folder), method="attention")
    ours.set_classes(QUESTIONS)
    # a square image, so that it is its own stored S x S image; not 0..255, so that the stretch matters
    img = np.random.default_rng(5).integers(20, 200, (112, 112), dtype=np.uint8)
    np.save(base / "image.npy", img)
    (base / "questions.json").write_text(json.dumps([ours.template.text(c) for c in QUESTIONS]))
    proc = subprocess.run([str(PY), str(HERE / "maira2_reference.py"), str(CODE), str(folder), str(base / "image.npy"),
                           str(base / "questions.json"), str(base / "theirs.npz")],
                          capture_output=True, text=True, timeout=600, cwd=base)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ours, img, dict(np.load(base / "theirs.npz"))


def test_prompt_ids_match(run):
    ours, _, theirs = run
    n = ours.model.grid[0] * ours.model.grid[1]
    for c in range(len(QUESTIONS)):
        before, after = ours._prompts[c]
        assert before + [ours.model.image_token_id] * n + after == theirs[f"ids{c}"].tolist()
        assert 1 not in before + after  # no unknown word: the tiny vocabulary covers the whole prompt


def test_preprocessing_matches(run):
    """Their processor (grey stretch, PIL resize of the shorter side, centre crop, normalise) vs ours from the
    stored uint8 image (the stretch, then geometry's crop and resize). PIL resamples the stretched uint8 image
    and rounds to 8 bits; ours resamples in float: the bound is in grey levels of the normalised input."""
    ours, img, theirs = run
    pixels, _ = ours.pixels(torch.as_tensor(img)[None], torch.tensor([img.shape]))
    want = torch.as_tensor(theirs["pixels0"])
    diff = (pixels[0] - want).abs()
    print("pixels: max |diff|", diff.max().item(), "mean", diff.mean().item())
    assert pixels.shape[1:] == want.shape
    assert diff.mean() < 0.01 and diff.max() < 0.05  # 0.05 at std 0.2583 is 3.3 grey levels (measured 1.4)


def test_features_logits_and_attention_match(run):
    """On their pixels (so that only the model is compared): the projector's output, the logits at the answer
    position and the answer row's attention over the image tokens (heads and layers averaged)."""
    from xbench.extract.models.decoder import maps

    ours, _, theirs = run
    pixels = torch.as_tensor(theirs["pixels0"])[None]
    yes, no = ours._answers
    with torch.no_grad():
        feats = ours.model.vision_features(pixels)
        tokens = ours.model.project(feats)[0]
        scores, rows = maps._attention(ours, feats[0])
        batch = ours.sequences(tokens)
        logits = ours.model.answer_logits(batch.embeds, batch.positions, batch.image)
    diffs = {"features": (tokens - torch.as_tensor(theirs["features0"])).abs().max().item()}
    for c, name in enumerate(QUESTIONS):
        want_logits = torch.as_tensor(theirs[f"logits{c}"])
        want_rows = torch.as_tensor(theirs[f"rows{c}"]).mean(0)
        diffs[name] = ((logits[c] - want_logits).abs().max().item(), (rows[c] - want_rows).abs().max().item())
        assert torch.allclose(logits[c], want_logits, atol=1e-4, rtol=1e-4)
        assert torch.allclose(scores[c], want_logits[yes] - want_logits[no], atol=1e-4)
        assert torch.allclose(rows[c], want_rows, atol=1e-6)
        assert want_rows.std() > 0  # a map that is not flat: the comparison can fail
    assert diffs["features"] < 1e-4
    print("max |diff| (features; logits, attention per question):", diffs)
