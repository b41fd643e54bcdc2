"""Map methods: every registered method through both backends, and per method a property its
paper promises, checked against an independent computation (the model's own attention outputs,
brute-force formulas) on tiny random models."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from xbench.extract.models import create_adapter
from xbench.extract.models.errors import ModelConfigError
from xbench.extract.models.geometry import frame_boxes
from xbench.extract.saliency import METHODS, NEEDS, MapMethod
from xbench.extract.saliency._tower import run_blocks

CLASSES = ["Pneumonia", "Pleural effusion", "Madeupitis"]
SIZES = torch.tensor([[64, 64], [200, 100]])


def _images(n=2, s=64, seed=0):
    return torch.randint(0, 256, (n, s, s), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _oc(tiny_open_clip, method="similarity", seed=0):
    torch.manual_seed(seed)
    a = create_adapter("open_clip", model=f"local-dir:{tiny_open_clip}", weights="random", method=method)
    a.set_classes(CLASSES)
    return a


def _hf(tiny_hf, method="similarity", kind="clip"):
    a = create_adapter("transformers", model=str(tiny_hf[kind]), method=method)
    a.set_classes(CLASSES)
    return a


def _px(a, s):
    return a._pixels(_images(s=s), frame_boxes(SIZES, "squash", s))


@pytest.mark.parametrize("name", METHODS.names())
def test_registered_method_is_complete(name):
    m = METHODS.get(name)
    assert isinstance(m, MapMethod) and m.name == name
    assert m.description and "\n" not in m.description and m.reference
    assert set(m.needs) <= set(NEEDS)


def test_unknown_need_is_refused():
    with pytest.raises(ValueError, match="unknown needs"):
        MapMethod(name="x", run=lambda *a: None, description="d", reference="r", needs=frozenset({"telepathy"}))


@pytest.mark.parametrize("backend", ["open_clip", "clip", "siglip"])
def test_block_views_reproduce_the_towers_forward(tiny_open_clip, tiny_hf, backend):
    """embed + every block through the views == the tower's own modules (the views are right)."""
    a = _oc(tiny_open_clip) if backend == "open_clip" else _hf(tiny_hf, kind=backend)
    px = _px(a, 64 if backend == "open_clip" else 48)
    with torch.no_grad():
        mine, probs = run_blocks(a.tower, px)
        ref = a.tower.last_block(a.tower.tokens_before_last(px))
    assert torch.allclose(mine, ref, atol=1e-5)
    assert all(torch.allclose(p.sum(-1), torch.ones(())) for p in probs)


@pytest.mark.parametrize("backend", ["open_clip", "clip"])
@pytest.mark.parametrize("name", [n for n in METHODS.names() if "decoder" not in METHODS.get(n).needs])  # dual encoders'
def test_every_method_keeps_the_models_scores(tiny_open_clip, tiny_hf, backend, name):
    """Whatever the map, scores are the unmodified model's; maps are finite, per case."""
    make = (lambda m: _oc(tiny_open_clip, m)) if backend == "open_clip" else (lambda m: _hf(tiny_hf, m))
    s = 64 if backend == "open_clip" else 48
    a, ref = make(name), make("similarity")
    out, base = a(_images(s=s), SIZES), ref(_images(s=s), SIZES)
    assert torch.allclose(out.scores, base.scores, atol=1e-4)
    assert torch.isfinite(out.maps).all() and out.maps.shape == base.maps.shape
    one = a(_images(s=s)[1:], SIZES[1:])
    assert torch.allclose(one.maps[0], out.maps[1], atol=1e-4)
    assert a.provenance()["layers"] == METHODS.get(name).description


def test_unsupported_combination_is_one_clear_line():
    from xbench.extract.models.dual import DualEncoderAdapter

    class BaseTower:  # the base interface only: no per-block views
        grid, n_prefix = (2, 2), 1

    with pytest.raises(ModelConfigError) as e:
        DualEncoderAdapter(name="m", tower=BaseTower(), encode_text=None, modules=[], logit_scale=1.0,
                           preprocess={"size": 32, "mean": [0.5], "std": [0.5]}, method="gem")
    msg = str(e.value)
    assert "\n" not in msg and "method 'gem' is not available for m (BaseTower)" in msg
    assert "per-block attention views" in msg and "similarity" in msg and "rollout" not in msg.split("model: ")[1]


# -- rollout ----------------------------------------------------------------------------------
def _hf_attentions(a, px, grad=False):
    model = a.modules[0]
    model.set_attn_implementation("eager")
    px = px.clone().requires_grad_(grad)
    out = model.vision_model(pixel_values=px, output_attentions=True)
    return model, out


def test_rollout_equals_brute_force_product_of_the_models_attentions(tiny_hf):
    a = _hf(tiny_hf, "rollout")
    px = _px(a, 48)
    got = a.map_method(a.tower, px, a._text_map)[1]
    with torch.no_grad():
        _, out = _hf_attentions(a, px)
    for b in range(px.shape[0]):
        r = np.eye(out.attentions[0].shape[-1])
        for att in out.attentions:  # first block first: R = A'_L ... A'_1
            m = 0.5 * att[b].mean(0).double().numpy() + 0.5 * np.eye(r.shape[0])
            r = (m / m.sum(1, keepdims=True)) @ r
        want = r[0, 1:].reshape(4, 4)
        for c in range(len(CLASSES)):  # text-independent: the same map for every class
            np.testing.assert_allclose(got[b, c].numpy(), want, atol=1e-5)


def test_rollout_of_uniform_attention_is_constant(tiny_open_clip):
    a = _oc(tiny_open_clip, "rollout")
    d = a.tower.v.transformer.width
    for blk in a.tower.v.transformer.resblocks:  # q = k = 0: every attention row is uniform
        blk.attn.in_proj_weight.data[: 2 * d] = 0
        blk.attn.in_proj_bias.data[: 2 * d] = 0
    maps = a(_images(), SIZES).maps
    assert torch.allclose(maps, maps.flatten(2)[..., :1, None].expand_as(maps), atol=1e-6)
    assert maps.abs().max() > 0


# -- gradient-weighted relevance (Chefer et al. 2021) -----------------------------------------
def test_chefer_equals_brute_force_on_the_models_own_attentions(tiny_hf):
    a = _hf(tiny_hf, "chefer")
    px = _px(a, 48)
    got = a.map_method(a.tower, px, a._text_map)[1]
    with torch.enable_grad():
        model, out = _hf_attentions(a, px, grad=True)
        img = F.normalize(model.visual_projection(out.pooler_output), dim=-1)
        cos = img @ a._text_map.T
        for c in range(len(CLASSES)):
            grads = torch.autograd.grad(cos[:, c].sum(), out.attentions, retain_graph=True)
            for b in range(px.shape[0]):
                r = np.eye(out.attentions[0].shape[-1])
                for att, g in zip(out.attentions, grads):
                    cam = np.clip((g[b] * att[b]).detach().double().numpy(), 0, None).mean(0)
                    r = r + cam @ r
                np.testing.assert_allclose(got[b, c].numpy(), r[0, 1:].reshape(4, 4), atol=1e-6)
    assert got.abs().max() > 0


def test_chefer_is_zero_when_the_target_ignores_the_image(tiny_open_clip):
    a = _oc(tiny_open_clip, "chefer")
    a.tower.v.proj.data.zero_()  # image embedding 0: cos(image, text) is constant
    maps = a(_images(), SIZES).maps
    assert torch.equal(maps, torch.zeros_like(maps))


# -- CLIP Surgery ---------------------------------------------------------------------------
def test_feature_surgery_equals_the_element_wise_form():
    from xbench.extract.saliency.clip_surgery import feature_surgery

    g = torch.Generator().manual_seed(0)
    p = F.normalize(torch.randn(2, 5, 8, generator=g), dim=-1)
    t = F.normalize(torch.randn(3, 8, generator=g), dim=-1)
    img = torch.randn(2, 8, generator=g)
    prob = (2 * F.normalize(img, dim=-1) @ t.T).softmax(-1)
    w = prob / prob.mean(-1, keepdim=True)
    feats = p[:, :, None, :] * t[None, None] * w[:, None, :, None]  # (B, N, C, E)
    want = (feats - feats.mean(2, keepdim=True)).sum(-1)
    assert torch.allclose(feature_surgery(p, t, img), want, atol=1e-6)
    empty = F.normalize(torch.randn(8, generator=g), dim=-1)
    assert torch.allclose(feature_surgery(p, t[:1], img, empty), (p @ (t[0] - empty))[..., None], atol=1e-6)


def test_clip_surgery_removes_what_all_classes_share(tiny_open_clip):
    a = _oc(tiny_open_clip, "clip_surgery")
    maps = a(_images(), SIZES).maps
    assert maps.abs().max() > 1e-4
    # the redundant feature is the class mean: maps sum to zero over classes at every patch
    assert torch.allclose(maps.sum(1), torch.zeros_like(maps[:, 0]), atol=1e-5)
    a.set_classes(["Pneumonia", "Pneumonia", "Pneumonia"])  # identical prompts: nothing but redundancy
    same = a(_images(), SIZES).maps
    assert torch.allclose(same, torch.zeros_like(same), atol=1e-6)
    a.set_classes(["Pneumonia"])  # one class: the empty prompt is the redundancy, the map is not zero
    assert a(_images(), SIZES).maps.abs().max() > 1e-4


# -- GEM --------------------------------------------------------------------------------------
def test_gem_self_self_attention_ignores_the_query_key_scale(tiny_open_clip):
    """GEM L2-normalises q, k, v before its self-self attention, so scaling the last block's query
    and key projections leaves its map unchanged, while the plain attention (and so the model's
    own similarity map) changes."""
    outs = {}
    for scale in (1.0, 3.0):
        for method in ("gem", "similarity"):
            a = _oc(tiny_open_clip, method)
            blk = a.tower.v.transformer.resblocks[-1]
            d = a.tower.v.transformer.width
            blk.attn.in_proj_weight.data[: 2 * d] *= scale
            blk.attn.in_proj_bias.data[: 2 * d] *= scale
            outs[method, scale] = a(_images(), SIZES).maps
    assert torch.allclose(outs["gem", 1.0], outs["gem", 3.0], atol=1e-5)
    assert not torch.allclose(outs["similarity", 1.0], outs["similarity", 3.0], atol=1e-3)


def test_gem_attention_matches_its_definition():
    from xbench.extract.saliency.gem import self_self_attention

    g = torch.Generator().manual_seed(1)
    h = torch.randn(2, 5, 8, generator=g)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=g) for _ in range(3))
    tau = h.norm(dim=-1).mean(-1).reshape(-1, 1, 1, 1) * 0.5
    want = 0
    for t in (q, k, v):
        u = F.normalize(t, dim=-1)
        u = F.normalize(torch.softmax(tau * u @ u.transpose(-1, -2), -1) @ u, dim=-1)  # one iteration
        want = want + torch.softmax(tau * u @ u.transpose(-1, -2), -1) @ v / 3
    assert torch.allclose(self_self_attention(h, q, k, v, 0.5), want, atol=1e-6)
