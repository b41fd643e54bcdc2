"""CheXzero adapter on a tiny random OpenAI-layout CLIP (patch 32): loading, letterbox
preprocessing, the softmax-over-raw-cosines score, maps of every dual-encoder method, phrases."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
open_clip = pytest.importorskip("open_clip")

from xbench.extract.models import create_adapter, list_models  # noqa: E402
from xbench.extract.models.chexzero import CHEXZERO_MEAN, CHEXZERO_STD, CheXzeroTransform  # noqa: E402
from xbench.extract.models.errors import WeightsNotFoundError  # noqa: E402
from xbench.extract.models.presets import _arch_folder  # noqa: E402
from xbench.extract.saliency import METHODS  # noqa: E402

# ViT-B/32's layout at toy sizes: 224 px, patch 32 (a 7 x 7 grid), QuickGELU
TINY = {"embed_dim": 32, "quick_gelu": True,
        "vision_cfg": {"image_size": 224, "layers": 2, "width": 64, "patch_size": 32, "head_width": 32},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2}}
CLASSES = ("Atelectasis", "Pleural Effusion", "Pneumothorax")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A state dict in the released layout (torch.save(model.state_dict()), OpenAI key names)."""
    torch.manual_seed(3)
    model = open_clip.CLIP(**TINY)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = tmp_path_factory.mktemp("chexzero") / "best.pt"
    torch.save(model.state_dict(), path)
    return path, model.eval()


def make(checkpoint, **kw):
    return create_adapter("chexzero", model=f"local-dir:{_arch_folder(TINY)}", weights=str(checkpoint[0]),
                          prompts={"vocabulary": False}, **kw)


def test_registered_and_weights_required():
    assert "chexzero" in list_models()
    with pytest.raises(WeightsNotFoundError, match="CheXzero"):
        create_adapter("chexzero")


@pytest.mark.parametrize("hw", [(410, 300), (256, 512), (333, 333), (700, 90)])
def test_letterbox_frame_and_boxes(hw):
    t = CheXzeroTransform()
    h, w = hw
    nh, nw, top, left = t.frame(hw)
    r = 320 / max(h, w)
    assert (nh, nw) == (int(h * r), int(w * r)) and max(nh, nw) == 320
    assert (top, left) == ((320 - nh) // 2, (320 - nw) // 2)
    x0, y0, x1, y1 = t.boxes(torch.tensor([hw]))[0].tolist()
    # the frame maps the content box [left, left + nw) x [top, top + nh) onto the unit image
    assert x0 + (x1 - x0) * left / 320 == pytest.approx(0.0, abs=1e-12)
    assert x0 + (x1 - x0) * (left + nw) / 320 == pytest.approx(1.0, abs=1e-12)
    assert y0 + (y1 - y0) * top / 320 == pytest.approx(0.0, abs=1e-12)
    assert y0 + (y1 - y0) * (top + nh) / 320 == pytest.approx(1.0, abs=1e-12)


def test_transform_values_against_hand_computation():
    """Constant image: content = (v - mean) / std, padding = -mean / std, bicubic keeps constants."""
    t = CheXzeroTransform()
    img = np.full((100, 320), 200, np.uint8)  # content rows 110..209 of the canvas (top 110)
    x = t(img, img.shape)
    assert x.shape == (3, 224, 224)
    pad, inner = -CHEXZERO_MEAN / CHEXZERO_STD, (200 - CHEXZERO_MEAN) / CHEXZERO_STD
    assert x[:, :70].sub(pad).abs().max() < 1e-4  # canvas rows < 100 -> model rows < 70
    assert x[:, 85:140].sub(inner).abs().max() < 1e-4
    canvas = t.letterbox(img, img.shape)
    assert canvas.shape == (320, 320) and canvas[:110].max() == 0 and canvas[210:].max() == 0
    assert (canvas[110:210] == 200).all()


def test_scores_are_chexzero_softmax_over_raw_cosines(checkpoint):
    ad = make(checkpoint)
    ad.set_classes(CLASSES)
    assert ad.map_shape == (7, 7)
    rng = np.random.default_rng(0)
    origs = [rng.integers(0, 256, hw, dtype=np.uint8) for hw in [(60, 45), (40, 80)]]
    tf = ad.image_transform()
    x = torch.stack([tf(o, o.shape) for o in origs])
    osz = torch.tensor([o.shape for o in origs])
    out = ad(x, osz)
    # independent: the checkpoint's own module, encode_image / encode_text, OpenAI tokenizer
    ref = checkpoint[1]
    tok = open_clip.tokenizer.SimpleTokenizer(context_length=77)
    with torch.no_grad():
        img = torch.nn.functional.normalize(ref.encode_image(x), dim=-1)
        pos = torch.nn.functional.normalize(ref.encode_text(tok(list(CLASSES))), dim=-1)
        neg = torch.nn.functional.normalize(ref.encode_text(tok([f"no {c}" for c in CLASSES])), dim=-1)
    cp, cn = img @ pos.T, img @ neg.T
    prob = torch.exp(cp) / (torch.exp(cp) + torch.exp(cn))
    torch.testing.assert_close(torch.sigmoid(out.scores), prob, atol=1e-6, rtol=0)
    assert out.maps.shape == (2, 3, 7, 7) and torch.isfinite(out.maps).all()
    # stored uint8 images go through the same transform inside the adapter
    out2 = ad(torch.from_numpy(np.stack([np.asarray(__import__("PIL.Image").Image.fromarray(o).resize((64, 64)))
                                         for o in origs])), osz)
    assert torch.isfinite(out2.scores).all()
    prov = ad.provenance()
    assert prov["prompts"]["negative"]["Pneumothorax"] == "no Pneumothorax"
    assert "LANCZOS" in prov["originals"] and prov["logit_scale"] == 1.0


@pytest.mark.parametrize("method", [n for n in METHODS.names() if "decoder" not in METHODS.get(n).needs])
def test_every_dual_encoder_method(checkpoint, method):
    ad = make(checkpoint, method=method)
    ad.set_classes(CLASSES)
    img = np.random.default_rng(1).integers(0, 256, (50, 70), dtype=np.uint8)
    x = ad.image_transform()(img, img.shape)[None]
    out = ad(x, torch.tensor([img.shape]))
    assert out.maps.shape == (1, 3, 7, 7) and torch.isfinite(out.maps).all()
    assert out.maps.std() > 0


def test_phrase_text_is_encoded_without_template(checkpoint):
    ad = make(checkpoint)
    phrases = ["small left apical pneumothorax", "Cardiomegaly."]
    got = ad.encode_text(phrases)
    ref = checkpoint[1].encode_text(open_clip.tokenizer.SimpleTokenizer(context_length=77)(phrases))
    torch.testing.assert_close(got, ref)


def test_cli_without_weights_fails_before_torch(tmp_path):
    """`xbench-extract --model chexzero` with no weights: exit 2, one line, torch never imported."""
    import subprocess
    import sys

    argv = ["--model", "chexzero", "--images", str(tmp_path), "--out", str(tmp_path / "c.zarr")]
    code = ("import sys\nfrom xbench.extract.cli import main\ntry:\n    main(%r)\nexcept SystemExit as e:\n"
            "    print('exit', e.code, 'torch' in sys.modules)\n" % argv)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "exit 2 False", out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "CheXzero weights" in out.stderr
