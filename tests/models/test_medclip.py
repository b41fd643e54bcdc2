"""MedCLIP adapter on tiny random Swin / ResNet + BERT, offline: padding transform, checkpoint layout
(transformers-4.x Swin names), prompt ensembles, the ensemble score, map methods, phrases."""
from __future__ import annotations

import itertools
import random
import tomllib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from xbench.extract.models import create_adapter, list_models  # noqa: E402
from xbench.extract.models.crossattn.common import CheckpointMismatchError  # noqa: E402
from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError  # noqa: E402
from xbench.extract.models.medclip import (  # noqa: E402
    ENSEMBLE_FILE, LOGIT_SCALE_MAX, MEDCLIP_MEAN, MEDCLIP_STD, SWIN_RENAMES, MedCLIPTransform, build_net, ensembles)

SWIN = {"embed_dim": 8, "depths": [1, 1, 1, 2], "num_heads": [1, 1, 2, 2]}
CLASSES = ("Atelectasis", "Pleural effusion", "Pneumothorax")


def cfg(tiny_bert, variant="vit", **kw):
    base = {"text_encoder": str(tiny_bert), "variant": variant, "proj_dim": 16}
    base.update({"swin": SWIN} if variant == "vit" else {"resnet_layers": [1, 1, 1, 1]})
    base.update(kw)
    return base


def old_layout(state_dict):
    """The state dict as transformers 4.x saved it (MedCLIP's release): old Swin names + buffers."""
    out = {}
    for k, v in state_dict.items():
        if k.startswith("vision_model.model."):
            for old, new in reversed(SWIN_RENAMES):
                k = k.replace(new, old)
        out[k] = v
    out["text_model.model.embeddings.position_ids"] = torch.arange(512)[None]
    out["vision_model.model.encoder.layers.0.blocks.0.attention.self.relative_position_index"] = torch.zeros(49, 49)
    return out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_bert):
    """A random tiny MedCLIP saved as the release does (folder with pytorch_model.bin, old names)."""
    torch.manual_seed(7)
    net = build_net(cfg(tiny_bert))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
        net.logit_scale.fill_(5.0)  # above the clamp
    d = tmp_path_factory.mktemp("medclip")
    torch.save(old_layout(net.state_dict()), d / "pytorch_model.bin")
    return d, net.eval()


def test_registered_and_weights_required(tiny_bert):
    assert "medclip" in list_models()
    with pytest.raises(WeightsNotFoundError, match="MedCLIP weights"):
        create_adapter("medclip", text_encoder=str(tiny_bert))
    with pytest.raises(WeightsNotFoundError, match="folder not found"):
        create_adapter("medclip", **cfg(tiny_bert, weights="/nonexistent/folder"))
    with pytest.raises(ModelConfigError, match="variant must be one of vit, resnet"):
        create_adapter("medclip", **{**cfg(tiny_bert, weights="random"), "variant": "deit"})


@pytest.mark.parametrize("hw,side,top,left", [((100, 150), 224, 62, 37), ((300, 200), 300, 0, 50),
                                              ((201, 700), 700, 249, 0), ((224, 224), 224, 0, 0)])
def test_pad_frame_and_values(hw, side, top, left):
    """Constant image: content (v/255 - mean)/std, padding -mean/std; a small image is not enlarged."""
    t = MedCLIPTransform()
    assert t.frame(hw) == (side, top, left)
    img = np.full(hw, 200, np.uint8)
    sq = t.pad(img, hw)
    assert sq.shape == (side, side) and (sq[top:top + hw[0], left:left + hw[1]] == 200).all()
    assert sq.sum() == 200 * hw[0] * hw[1]
    x = t(img, hw)
    assert x.shape == (3, 224, 224) and torch.equal(x[0], x[2])
    inner, pad = (200 / 255 - MEDCLIP_MEAN) / MEDCLIP_STD, -MEDCLIP_MEAN / MEDCLIP_STD
    r = 224 / side  # content rows/cols in the model frame, away from the resampled edges
    r0, r1, c0, c1 = int(top * r) + 3, int((top + hw[0]) * r) - 3, int(left * r) + 3, int((left + hw[1]) * r) - 3
    assert (x[:, r0:r1, c0:c1] - inner).abs().max() < 1e-5
    if top * r > 3:
        assert (x[:, : int(top * r) - 3] - pad).abs().max() < 1e-5
    # the frame maps the content box onto the unit image
    x0, y0, x1, y1 = t.boxes(torch.tensor([hw]))[0].tolist()
    assert x0 + (x1 - x0) * left / side == pytest.approx(0.0, abs=1e-12)
    assert x0 + (x1 - x0) * (left + hw[1]) / side == pytest.approx(1.0, abs=1e-12)
    assert y0 + (y1 - y0) * (top + hw[0]) / side == pytest.approx(1.0, abs=1e-12)


def test_transform_matches_pil_pipeline():
    """Random image: PIL pad + resize by hand, then the grey normalisation (both filters)."""
    from PIL import Image

    img = np.random.default_rng(0).integers(0, 256, (90, 260), dtype=np.uint8)
    canvas = Image.new("L", (260, 260))
    canvas.paste(Image.fromarray(img), (0, 85))
    for name, flt in (("bicubic", Image.BICUBIC), ("bilinear", Image.BILINEAR)):
        ref = np.asarray(canvas.resize((224, 224), flt), dtype=np.float32) / 255
        ref = (ref - MEDCLIP_MEAN) / MEDCLIP_STD
        got = MedCLIPTransform(filter=name)(img, img.shape)
        assert np.abs(got[1].numpy() - ref).max() < 1e-6
    with pytest.raises(ModelConfigError, match="interpolation"):
        MedCLIPTransform(filter="nearest")
    # a stored stretched image lands in the same frame (content where the original's is)
    stored = np.asarray(Image.fromarray(img).resize((128, 128)))
    x = MedCLIPTransform()(stored, img.shape)
    assert x.shape == (3, 224, 224) and torch.isfinite(x).all()
    assert (x[:, :60] + MEDCLIP_MEAN / MEDCLIP_STD).abs().max() < 1e-5  # padding rows stay black


def test_prompt_ensembles_and_seeded_sampling():
    """Counts and text of every combination; a seeded sample equals random.seed + random.sample."""
    data = tomllib.loads(ENSEMBLE_FILE.read_text())["groups"]
    all_ = ensembles()
    assert {k: len(v[0]) for k, v in all_.items()} == {
        "Atelectasis": 210, "Cardiomegaly": 15, "Consolidation": 192, "Edema": 18, "Pleural effusion": 54,
        "Pneumonia": 312}
    # Pleural Effusion lists severity, location, subtype: that is the nesting order
    assert all_["Pleural effusion"][0][:2] == [" left bilateral pleural effusion", " left subpulmonic pleural effusion"]
    assert all_["Cardiomegaly"][0][0] == " cardiac silhouette size is upper limits of normal "
    for seed in (0, 5):
        random.seed(seed)
        expected = {}
        for upstream in data["chexpert"]["order"]:
            c = data["chexpert"]["classes"][upstream]["components"]
            flat = [f"{a} {b} {d}" for a in c[0] for b in c[1] for d in c[2]]
            expected[upstream] = random.sample(flat, 10) if 10 < len(flat) else flat
        got = ensembles(10, seed)
        assert got["Pleural effusion"][0] == expected["Pleural Effusion"]
        assert got["Atelectasis"][0] == expected["Atelectasis"] and got["Edema"][0] == expected["Edema"]
    assert ensembles(10, 0)["Atelectasis"][0] != ensembles(10, 1)["Atelectasis"][0]
    assert len(set(itertools.chain(*[v[0] for v in ensembles(3, 0).values()]))) == 18


def _reference(net, tokenizer, x, prompts_per_class):
    """Independent: the HF modules' own forward (pooler_output), per-class padded prompt batches."""
    with torch.no_grad():
        img = net.vision_model.projection_head(net.vision_model.model(x).pooler_output)
        img = torch.nn.functional.normalize(img, dim=-1)
        rows = []
        for prompts in prompts_per_class:
            tok = tokenizer(prompts, padding=True, truncation=True, max_length=77, return_tensors="pt")
            hs = net.text_model.model(**{k: tok[k] for k in ("input_ids", "attention_mask")},
                                      output_hidden_states=True).hidden_states
            emb = net.text_model.projection_head(((hs[1].mean(1) + hs[2].mean(1) + hs[-1].mean(1)) / 3))
            rows.append(torch.nn.functional.normalize(emb, dim=-1).mean(0))
        return float(np.exp(LOGIT_SCALE_MAX)) * img @ torch.stack(rows).T


def test_old_layout_loads_and_scores_are_the_ensemble_mean(checkpoint, tiny_bert):
    from xbench.extract.models.crossattn.common import load_tokenizer

    folder, net = checkpoint
    ad = create_adapter("medclip", **cfg(tiny_bert, weights=str(folder), n_prompts=4, prompt_seed=2))
    assert ad.logit_scale == pytest.approx(np.exp(LOGIT_SCALE_MAX), rel=1e-6)
    assert "text_model.model.embeddings.position_ids" in ad.provenance()["checkpoint_keys_dropped"]
    ad.set_classes(CLASSES)
    rng = np.random.default_rng(0)
    origs = [rng.integers(0, 256, hw, dtype=np.uint8) for hw in [(120, 90), (260, 300)]]
    x = torch.stack([ad.image_transform()(o, o.shape) for o in origs])
    out = ad(x, torch.tensor([o.shape for o in origs]))
    ens = ensembles(4, 2)
    ref = _reference(net, load_tokenizer(tiny_bert), x,
                     [ens["Atelectasis"][0], ens["Pleural effusion"][0], ["Pneumothorax"]])
    torch.testing.assert_close(out.scores, ref.float(), atol=2e-5, rtol=0)
    assert out.maps.shape == (2, 3, 7, 7) and torch.isfinite(out.maps).all()
    prov = ad.provenance()
    assert prov["prompts"]["positive"]["Atelectasis"] == "MedCLIP ensemble of 4 prompts"
    assert prov["prompts"]["positive"]["Pneumothorax"] == "Pneumothorax"
    # uint8 stored images go through the same host transform inside the adapter
    stored = torch.from_numpy(np.stack([np.asarray(__import__("PIL.Image").Image.fromarray(o).resize((64, 64)))
                                        for o in origs]))
    assert torch.isfinite(ad(stored, torch.tensor([o.shape for o in origs])).scores).all()


def test_wrong_architecture_is_a_clear_mismatch(checkpoint, tiny_bert):
    folder, _ = checkpoint
    with pytest.raises(CheckpointMismatchError, match="missing keys"):
        create_adapter("medclip", **cfg(tiny_bert, weights=str(folder), swin={**SWIN, "depths": [1, 1, 2, 2]}))


@pytest.mark.parametrize("variant,ok", [("vit", ("similarity", "maskclip", "gradcam")), ("resnet", ("similarity", "gradcam"))])
def test_map_methods(tiny_bert, variant, ok):
    from xbench.extract.saliency import METHODS

    img = np.random.default_rng(1).integers(0, 256, (150, 110), dtype=np.uint8)
    maps = {}
    # every method that applies, and two that do not (refused in one line, before any forward pass)
    refused = [m for m in METHODS.names() if m not in ok]
    for method in [*ok, *refused[:2]]:
        kw = cfg(tiny_bert, variant, weights="random", method=method, ensembles=False)
        if method not in ok:
            with pytest.raises(ModelConfigError, match=f"not available for medclip.*Methods for this model: {', '.join(sorted(ok))}"):
                create_adapter("medclip", **kw)
            continue
        ad = create_adapter("medclip", **kw)
        ad.set_classes(CLASSES)
        x = ad.image_transform()(img, img.shape)[None]
        out = ad(x, torch.tensor([img.shape]))
        assert out.maps.shape == (1, 3, 7, 7) and torch.isfinite(out.maps).all() and out.maps.std() > 0
        maps[method] = out.maps
    assert not torch.allclose(maps["similarity"], maps["gradcam"])
    if variant == "vit":
        assert not torch.allclose(maps["similarity"], maps["maskclip"])


def test_phrases_are_encoded_one_at_a_time(tiny_bert):
    """A phrase's score and map do not depend on the other phrases of the batch (no padding)."""
    ad = create_adapter("medclip", **cfg(tiny_bert, weights="random", ensembles=False))
    assert ad.supports_phrases
    img = np.random.default_rng(2).integers(0, 256, (200, 160), dtype=np.uint8)
    x = ad.image_transform()(img, img.shape)[None]
    osz = torch.tensor([img.shape])
    long = "there is a small left pleural effusion and lung opacity at the base"
    s1, m1 = ad.phrase_outputs(x, osz, ["pneumothorax"], [0])
    s2, m2 = ad.phrase_outputs(x, osz, [long, "pneumothorax"], [0, 0])
    torch.testing.assert_close(s2[1], s1[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(m2[1], m1[0], atol=1e-6, rtol=0)
    assert m2.shape == (2, 7, 7) and not torch.allclose(m2[0], m2[1])
    # padded with the long phrase, the upstream batch embedding differs: proof the test can fail
    padded = torch.nn.functional.normalize(ad.encode_batch([long, "pneumothorax"])[1], dim=-1)
    alone = ad._embed(["pneumothorax"])[0]
    assert (padded - alone).abs().max() > 1e-4


def test_cli_without_weights_fails_before_torch(tmp_path):
    """`xbench-extract --model medclip` with no weights: exit 2, one line, torch never imported."""
    import subprocess
    import sys

    argv = ["--model", "medclip", "--images", str(tmp_path), "--out", str(tmp_path / "m.zarr")]
    code = ("import sys\nfrom xbench.extract.cli import main\ntry:\n    main(%r)\nexcept SystemExit as e:\n"
            "    print('exit', e.code, 'torch' in sys.modules)\n" % argv)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "exit 2 False", out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "MedCLIP weights" in out.stderr
