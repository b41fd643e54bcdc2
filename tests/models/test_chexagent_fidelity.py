"""CheXagent-2: the hub's remote code (a public copy, kept outside the repository) beside XBench's implementation on
the same tiny random weights: the prompt's token ids and image span, the preprocessing, the answer logits and the
answer position's attention over the image tokens agree to float tolerance.

Their code runs in a subprocess (tests/models/chexagent_reference.py) under the transformers version it asserts
(4.40.0), found at $XBENCH_CHEXAGENT_TF440 (a pip --target folder: transformers 4.40.0, tokenizers 0.19.1,
huggingface_hub 0.23.4, requests); their three files at $XBENCH_CHEXAGENT_REF (default .cache/reference/chexagent/...).
The test skips when either is absent (CI never needs them).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parent))
import chexagent_tiny  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[2] / ".cache" / "reference"  # git-ignored; the env vars override
REF = Path(os.environ.get("XBENCH_CHEXAGENT_REF", REFERENCES / "chexagent" / "chexagent-ref"))
TF440 = Path(os.environ.get("XBENCH_CHEXAGENT_TF440", REFERENCES / "chexagent" / "tf440"))
FILES = ("modeling_chexagent.py", "modeling_visual.py", "tokenization_chexagent.py")
pytestmark = pytest.mark.skipif(
    not all((REF / f).is_file() for f in FILES) or not (TF440 / "transformers" / "__init__.py").is_file(),
    reason=f"the CheXagent remote code ({REF}) or a transformers 4.40 folder ({TF440}) is absent")
QUESTIONS = ("Does this chest X-ray contain a pneumonia?", "Does this chest X-ray contain a pleural effusion?")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(our adapter, the image, their saved outputs per question)."""
    from PIL import Image

    from xbench.extract.models import create_adapter

    tmp = tmp_path_factory.mktemp("chexagent_ref")
    folder = chexagent_tiny.make_folder(tmp / "m", seed=3)
    image = np.random.default_rng(1).integers(0, 256, (40, 30), dtype=np.uint8)
    Image.fromarray(image).save(tmp / "i.png")
    env = {**os.environ, "PYTHONPATH": str(TF440)}
    outs = []
    for k, q in enumerate(QUESTIONS):
        out = tmp / f"ref{k}.npz"
        r = subprocess.run([sys.executable, str(Path(__file__).with_name("chexagent_reference.py")), str(REF),
                            str(folder), "i.png", q, str(out)], cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        outs.append(dict(np.load(out)))
    a = create_adapter("chexagent", model=str(folder))
    a.set_classes(("Pneumonia", "Pleural Effusion"))
    return a, image, outs


def test_prompt_ids_pixels_logits_and_attention_equal_the_authors(runs):
    from xbench.extract.models.decoder import maps

    a, image, outs = runs
    n = a.model.grid[0] * a.model.grid[1]
    pixels = a.image_transform().apply(image, image.shape)
    assert torch.equal(pixels, torch.from_numpy(outs[0]["pixels"]))  # their Resize/ToTensor/Normalize, exactly
    assert tuple(outs[0]["answers"]) == a._answers
    with torch.no_grad():
        scores, rows = maps._attention(a, a.model.vision_features(pixels.unsqueeze(0))[0])
    for c, ref in enumerate(outs):
        ids, (s0, s1) = ref["ids"].tolist(), ref["span"].tolist()
        before, after = a._prompts[c]
        assert ids[:s0 + 1] == before and ids[s1:] == after and s1 - s0 - 1 == n
        yes, no = a._answers
        want = float(ref["logits"][yes] - ref["logits"][no])
        assert abs(float(scores[c]) - want) < 1e-4, (float(scores[c]), want)
        want_rows = torch.from_numpy(ref["attentions"][:, :, -1, s0 + 1:s1].mean(1).mean(0))
        assert torch.allclose(rows[c], want_rows, atol=1e-6), (rows[c] - want_rows).abs().max()
        assert want_rows.std() > 0
    assert abs(float(scores[0] - scores[1])) > 1e-3


def test_every_layer_and_head_mean_equals_the_authors(runs):
    """Layer by layer (``layers=[k]``): each decoder layer's answer row, heads averaged."""
    from xbench.extract.models.decoder import maps
    from xbench.extract.models.decoder.common import DecoderVLMAdapter

    a, image, outs = runs
    pixels = torch.from_numpy(outs[0]["pixels"]).unsqueeze(0)
    s0, s1 = outs[0]["span"].tolist()
    for k in range(len(a.model.attention_layers())):
        b = DecoderVLMAdapter(name="chexagent", model=a.model, template=a.template, layers=[k])
        b.set_classes(("Pneumonia",))
        with torch.no_grad():
            _, rows = maps._attention(b, b.model.vision_features(pixels)[0])
        want = torch.from_numpy(outs[0]["attentions"][k, :, -1, s0 + 1:s1].mean(0))
        assert torch.allclose(rows[0], want, atol=1e-6), (k, (rows[0] - want).abs().max())
