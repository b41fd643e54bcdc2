"""Adapters on tiny random models: shapes, agreement with each model's own forward pass,
determinism, prompt styles, config files, plugins and missing-weights messages."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from xbench.extract import models as M
from xbench.extract.models import WeightsNotFoundError, create_adapter
from xbench.extract.models.base import ModelAdapter
from xbench.extract.models.prompts import build_prompts
from xbench.extract.saliency import METHODS

# every registered method of a dual encoder (a decoder VLM's `attention` has its own tests), not a hard-coded list
METHOD_NAMES = [n for n in METHODS.names() if "decoder" not in METHODS.get(n).needs]

CLASSES = ["Pneumonia", "Pleural effusion", "Madeupitis"]


def _images(n=3, s=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, s, s), dtype=torch.uint8, generator=g)


SIZES = torch.tensor([[64, 64], [200, 100], [90, 160]])


@pytest.mark.parametrize("method", METHOD_NAMES)
@pytest.mark.parametrize("resize", ["squash", "crop", "pad"])
def test_open_clip_shapes(tiny_open_clip, method, resize):
    a = create_adapter("open_clip", model=f"local-dir:{tiny_open_clip}", weights="random", method=method,
                       preprocess={"resize": resize})
    a.set_classes(CLASSES)
    out = a(_images(), SIZES)
    assert a.map_shape == (4, 4)
    assert out.scores.shape == (3, 3) and out.scores.dtype == torch.float32
    assert out.maps.shape == (3, 3, 4, 4) and torch.isfinite(out.maps).all()
    if method == "gradcam":
        assert (out.maps >= 0).all()


def test_open_clip_matches_model_forward(tiny_open_clip):
    """Scores equal the model's own encode_image/encode_text; similarity maps equal the model's
    own output tokens projected (an independent path through open_clip's forward)."""
    torch.manual_seed(0)
    a = create_adapter("open_clip", model=f"local-dir:{tiny_open_clip}", weights="random",
                       prompts={"style": "pair"})
    a.set_classes(CLASSES)
    imgs, sizes = _images(), SIZES
    out = a(imgs, sizes)
    model = a.modules[0]
    from xbench.extract.models.geometry import frame_boxes

    px = a._pixels(imgs, frame_boxes(sizes, "squash", 64))
    with torch.no_grad():
        img = F.normalize(model.encode_image(px), dim=-1)
        pos = F.normalize(model.encode_text(_tok(a, a.prompts.positive)), dim=-1)
        neg = F.normalize(model.encode_text(_tok(a, a.prompts.negative)), dim=-1)
        scale = model.logit_scale.exp()
        lp, ln = scale * img @ pos.T, scale * img @ neg.T
        # CheXzero: softmax over (positive, negative) logits
        p = torch.softmax(torch.stack([lp, ln], -1), -1)[..., 0]
        assert torch.allclose(torch.sigmoid(out.scores), p, atol=1e-5)
        model.visual.output_tokens = True
        _, tokens = model.visual(px)
        model.visual.output_tokens = False
        sim = F.normalize(tokens @ model.visual.proj, dim=-1) @ pos.T  # (B, N, C)
    assert torch.allclose(out.maps.flatten(2).transpose(1, 2), sim, atol=1e-5)


def _tok(adapter, texts):
    from open_clip.tokenizer import SimpleTokenizer

    return SimpleTokenizer(context_length=77)(list(texts))


def test_open_clip_deterministic(tiny_open_clip):
    outs = []
    for _ in range(2):
        torch.manual_seed(1)
        a = create_adapter("open_clip", model=f"local-dir:{tiny_open_clip}", weights="random", method="maskclip")
        a.set_classes(CLASSES)
        outs.append(a(_images(), SIZES))
    assert torch.equal(outs[0].scores, outs[1].scores) and torch.equal(outs[0].maps, outs[1].maps)
    # a case's values do not depend on the rest of its batch (up to float rounding)
    single = a(_images()[1:2], SIZES[1:2])
    assert torch.allclose(single.maps[0], outs[1].maps[1], atol=1e-5)


@pytest.mark.parametrize("kind", ["clip", "siglip"])
@pytest.mark.parametrize("method", METHOD_NAMES)
def test_transformers_shapes_and_scores(tiny_hf, kind, method):
    if kind == "siglip" and "class_token" in METHODS.get(method).needs:
        with pytest.raises(M.ModelConfigError, match=f"method '{method}' is not available for .*HFSiglipTower.*class token"):
            create_adapter("transformers", model=str(tiny_hf[kind]), method=method)
        return
    a = create_adapter("transformers", model=str(tiny_hf[kind]), method=method)
    a.set_classes(CLASSES)
    out = a(_images(s=48), SIZES)
    assert a.map_shape == (4, 4)
    assert out.scores.shape == (3, 3) and out.maps.shape == (3, 3, 4, 4)
    assert torch.isfinite(out.maps).all() and torch.isfinite(out.scores).all()
    model = a.modules[0]
    from xbench.extract.models.geometry import frame_boxes

    px = a._pixels(_images(s=48), frame_boxes(SIZES, "squash", 48))
    with torch.no_grad():
        feats = model.get_image_features(pixel_values=px)
        feats = getattr(feats, "pooler_output", feats)
    img = F.normalize(feats, dim=-1)
    expected = a.logit_scale * img @ a._text_pos.T + (a.logit_bias or 0.0)
    assert torch.allclose(out.scores, expected, atol=1e-4)


def test_prompts_vocabulary_and_fallback():
    p = build_prompts(["Pleural effusion", "Madeupitis"], {"style": "pair"})
    assert p.positive[1] == "Madeupitis" and p.negative[1] == "No Madeupitis"
    try:
        from xbench.schemas.vocabulary import prompts

        want = prompts("Pleural effusion")
        assert p.positive[0] == want.positive[0] and p.negative[0] == want.negative[0]
    except ImportError:
        pass
    t = build_prompts(["Madeupitis"], {"style": "pair", "positive": "There is {}", "negative": "There is no {}"})
    assert (t.positive[0], t.negative[0]) == ("There is Madeupitis", "There is no Madeupitis")
    s = build_prompts(["X"], {"classes": {"X": ["an x", "no x"]}})
    assert s.positive == ("an x",) and s.negative == ()
    with pytest.raises(ValueError, match="style"):
        build_prompts(["X"], {"style": "triple"})


def test_provenance_records_prompts(tiny_open_clip):
    a = create_adapter("open_clip", model=f"local-dir:{tiny_open_clip}", weights="random", prompts={"style": "pair"})
    a.set_classes(CLASSES)
    prov = a.provenance()
    json.dumps(prov)
    assert prov["prompts"]["style"] == "pair" and set(prov["prompts"]["negative"]) == set(CLASSES)
    assert prov["weights"] == "random" and prov["method"] == "similarity"


def test_config_files_yaml_and_toml(tmp_path, tiny_open_clip):
    import shutil

    shutil.copytree(tiny_open_clip, tmp_path / "tiny")
    (tmp_path / "m.yaml").write_text(
        "adapter: open_clip\nmodel: local-dir:./tiny\nweights: random\nmethod: maskclip\n"
        "prompts: {style: pair}\npreprocess: {resize: crop}\n")
    a = create_adapter(str(tmp_path / "m.yaml"))
    assert a.method == "maskclip" and a.resize == "crop" and a.config["name"] == "m"
    assert a.config["model"] == f"local-dir:{(tmp_path / 'tiny').resolve()}"
    b = create_adapter(str(tmp_path / "m.yaml"), method="gradcam")  # overrides win
    assert b.method == "gradcam" and b.config_hash != a.config_hash
    (tmp_path / "d.toml").write_text('model = "dog"\nmap_size = [6, 5]\n[preprocess]\nresize = "pad"\nsize = 96\n')
    d = create_adapter(str(tmp_path / "d.toml"))
    assert d.map_shape == (6, 5) and d.resize == "pad" and d.size == 96


def test_module_attr_and_entry_point(monkeypatch):
    c = create_adapter("xbench.extract.models.baselines:CenterBaseline", map_size=5)
    assert c.map_shape == (5, 5)
    f = create_adapter("xbench.extract.models.baselines:build_random", seed=3)
    assert f.seed == 3

    import importlib.metadata as md

    class EP:
        name, value = "my-plugin", "xbench.extract.models.baselines:build_center"

    monkeypatch.setattr(md, "entry_points", lambda group=None: [EP()] if group == M.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(M, "MODELS", M.Registry("model", entry_point_group=M.ENTRY_POINT_GROUP))
    M.MODELS.register("center", "xbench.extract.models.baselines:build_center")
    assert "my-plugin" in M.list_models()
    assert create_adapter("my-plugin").map_shape == (14, 14)


def test_factory_must_return_adapter():
    with pytest.raises(TypeError, match="must return a xbench.extract.models.base.ModelAdapter"):
        create_adapter("json:dumps")


def test_unknown_model_lists_choices():
    from xbench.schemas.registry import UnknownNameError

    with pytest.raises(UnknownNameError, match="Did you mean: dog"):
        create_adapter("dgo")


def test_missing_weights_messages(tmp_path, tiny_open_clip, tiny_hf):
    with pytest.raises(WeightsNotFoundError, match="timm/vit_base_patch16_clip_224.openai"):
        create_adapter("clip")
    with pytest.raises(WeightsNotFoundError, match="huggingface-cli download microsoft/BiomedCLIP"):
        create_adapter("biomedclip")
    with pytest.raises(WeightsNotFoundError, match="open_clip_pytorch_model.bin"):
        create_adapter("open_clip", model=f"local-dir:{tiny_open_clip}")
    with pytest.raises(WeightsNotFoundError, match="weights: random"):
        create_adapter("open_clip", model="ViT-B-16")
    with pytest.raises(WeightsNotFoundError, match="/nope/ViT-B-16.pt"):
        create_adapter("open_clip", model="ViT-B-16-quickgelu", weights="/nope/ViT-B-16.pt")
    import shutil

    shutil.copytree(tiny_hf["clip"], tmp_path / "noweights")
    for f in (tmp_path / "noweights").glob("model.safetensors"):
        f.unlink()
    with pytest.raises(WeightsNotFoundError, match="model.safetensors"):
        create_adapter("transformers", model=str(tmp_path / "noweights"))
    with pytest.raises(WeightsNotFoundError, match="huggingface-cli download org/absent"):
        create_adapter("transformers", model="org/absent")


def test_openai_torchscript_gets_quick_gelu(tmp_path):
    """A TorchScript archive (how OpenAI ships CLIP) switches QuickGELU on automatically."""
    from xbench.extract.models.openclip import resolve

    m = torch.jit.script(torch.nn.Linear(2, 2))
    path = tmp_path / "ViT-B-16.pt"
    m.save(str(path))
    res = resolve({"model": "ViT-B-16", "weights": str(path)})
    assert res["quick_gelu"] is True and res["checkpoint"] == str(path)


@pytest.mark.parametrize("name", ["random", "center", "dog"])
def test_baselines(name):
    a = create_adapter(name, map_size=[7, 7])
    assert isinstance(a, ModelAdapter)
    a.set_classes(CLASSES)
    imgs = _images()
    out = a(imgs, SIZES)
    assert out.scores.shape == (3, 3) and out.maps.shape == (3, 3, 7, 7)
    if a.score_kind == "probability":
        assert ((out.scores >= 0) & (out.scores <= 1)).all()
    again = a(imgs[[2, 0]], SIZES[[2, 0]])  # per-case values, whatever the batch
    assert torch.equal(again.maps[0], out.maps[2]) and torch.equal(again.scores[1], out.scores[0])


def test_center_prior_peaks_in_centre():
    from xbench.extract.models.baselines import center_prior

    m = center_prior((5, 5))
    assert int(m.argmax()) == 12 and m[2, 2] == 1.0 and np.allclose(m, m[::-1]) and np.allclose(m, m.T)


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_biomedclip_shaped_timm_tower(tiny_biomedclip, method):
    from xbench.extract.models.geometry import frame_boxes

    m = f"local-dir:{tiny_biomedclip['model']}"
    if method == "similarity":  # the BiomedCLIP offline gotcha: the text config names a hub id
        with pytest.raises(WeightsNotFoundError, match="BiomedNLP-BiomedBERT-base-uncased-abstract"):
            create_adapter("biomedclip", model=m, weights="random")
    kw = dict(model=m, weights="random", text_encoder=str(tiny_biomedclip["text_encoder"]), method=method,
              preprocess={"resize": "crop"})
    a = create_adapter("biomedclip", **kw)
    a.set_classes(CLASSES)
    imgs = _images()
    out = a(imgs, SIZES)
    assert a.map_shape == (10, 10) and out.maps.shape == (3, 3, 10, 10)
    assert a.prompts.positive[0].startswith("this is a photo of ")
    model = a.modules[0]
    with torch.no_grad():
        img = F.normalize(model.encode_image(a._pixels(imgs, frame_boxes(SIZES, "crop", 64))), dim=-1)
    assert torch.allclose(out.scores, a.logit_scale * img @ a._text_pos.T, atol=1e-5)
    if method == "similarity":  # the timm per-block views reproduce the trunk's own blocks
        from xbench.extract.saliency._tower import run_blocks

        px = a._pixels(imgs, frame_boxes(SIZES, "crop", 64))
        with torch.no_grad():
            assert torch.allclose(run_blocks(a.tower, px)[0], a.tower.last_block(a.tower.tokens_before_last(px)), atol=1e-5)


def test_dog_sigmas_are_fractions_of_the_frame_side():
    from xbench.extract.models.baselines import DOG_SIGMA
    from xbench.extract.models.errors import ModelConfigError

    d = create_adapter("dog", preprocess={"size": 200})
    assert d.sigma == pytest.approx((DOG_SIGMA[0] * 200, DOG_SIGMA[1] * 200))
    assert create_adapter("dog", sigma_px=[2, 8]).sigma == (2.0, 8.0)
    for bad in ([2, 8], [0.06, 0.015], [0, 0.1]):  # pixels, swapped, zero
        with pytest.raises(ModelConfigError, match="fractions of the image side"):
            create_adapter("dog", sigma=bad)
    for key, bad in (("sigma_px", 3), ("sigma", [0.1]), ("sigma_px", ["a", 2]), ("sigma", "x")):  # not a pair
        with pytest.raises(ModelConfigError, match=f"{key} must be a pair of numbers"):
            create_adapter("dog", **{key: bad})


def test_dog_prefers_a_lesion_sized_blob_to_a_long_soft_edge():
    """A sharp disc (radius 3 % of the side, +60) beats a blurred step (+100, anatomy-like): the
    lesion-scale sigmas respond to the blob, not to the smooth edge."""
    s = 224
    yy, xx = torch.meshgrid(torch.arange(s), torch.arange(s), indexing="ij")
    img = torch.where(xx > 150, 100.0, 0.0)[None, None]
    from xbench.extract.models.baselines import gaussian_blur
    img = torch.from_numpy(gaussian_blur(img.numpy(), 8.0))[0, 0]  # the baselines' NumPy blur
    img = img + 60.0 * (((xx - 60) ** 2 + (yy - 100) ** 2) < (0.03 * s) ** 2)
    d = create_adapter("dog")
    d.set_classes(["A", "B"])
    out = d(img.round().clamp(0, 255).to(torch.uint8)[None], torch.tensor([[s, s]]))
    m = out.maps[0, 0]
    assert divmod(int(m.argmax()), 14) == (100 * 14 // s, 60 * 14 // s)
    assert torch.equal(out.maps[0, 0], out.maps[0, 1])  # image-only: one map for every class


def test_clip_tiny_builds_offline_with_maps_of_the_grid_shape(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    a = create_adapter("xbench.extract.models.presets:clip_tiny", name="clip-tiny")
    a.set_classes(CLASSES)
    out = a(_images(), SIZES)
    assert a.map_shape == (14, 14) and out.scores.shape == (3, 3) and out.maps.shape == (3, 3, 14, 14)
    assert torch.isfinite(out.maps).all() and torch.isfinite(out.scores).all()
    assert a.provenance()["weights"] == "random"
    b = create_adapter("xbench.extract.models.presets:clip_tiny")  # seeded: the same untrained weights
    b.set_classes(CLASSES)
    assert torch.equal(b(_images(), SIZES).maps, out.maps)


def test_clip_tiny_is_registered():
    if "clip-tiny" not in M.list_models():
        pytest.skip("clip-tiny not yet in the registry")
    a = create_adapter("clip-tiny")
    assert a.map_shape == (14, 14)
