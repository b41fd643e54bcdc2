"""Full-size networks (built on the meta device, no memory) against the key names and shapes of
the official modules, written out here from the official sources:

* MedKLIP ``models/model_MedKLIP.py::MedKLIP`` (+ DETR ``models/transformer.py``)
* MAVL ``Zero-shot_grounding/models/model_MAVL.py::MAVL`` (resnet50, decoder 'cross')
* KAD ``A3_CLIP/models/clip_tqn.py::{ModelRes512, CLP_clinical, TQN_Model}``
* CARZero ``models/CARZero_model_dqn_wo_self_atten_gl_mlp.py`` + ``transformer_backbones.py::MRM``
  + ``dqn_wo_self_atten_mlp.py::TQN_Model``

ResNet children follow torchvision's naming (conv1, bn1, layer1..4, fc; Sequential indices 0, 1,
4, 5, 6, 7). BERT keys are transformers' own and only checked for their prefix.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


def bn(prefix, c):
    return {f"{prefix}.{k}": (() if k == "num_batches_tracked" else (c,)) for k in BN}


def resnet50(prefix, *, stages=3, sequential=True, fc=False):
    """torchvision ResNet-50 keys up to layer``stages`` (index names when ``sequential``)."""
    names = {"conv1": "0", "bn1": "1", "layer1": "4", "layer2": "5", "layer3": "6", "layer4": "7"}
    n = (lambda k: names[k]) if sequential else (lambda k: k)
    keys = {f"{prefix}.{n('conv1')}.weight": (64, 3, 7, 7), **bn(f"{prefix}.{n('bn1')}", 64)}
    inplanes = 64
    for s, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3)), start=1):
        if s > stages:
            break
        for j in range(blocks):
            p = f"{prefix}.{n(f'layer{s}')}.{j}"
            keys[f"{p}.conv1.weight"] = (planes, inplanes, 1, 1)
            keys.update(bn(f"{p}.bn1", planes))
            keys[f"{p}.conv2.weight"] = (planes, planes, 3, 3)
            keys.update(bn(f"{p}.bn2", planes))
            keys[f"{p}.conv3.weight"] = (planes * 4, planes, 1, 1)
            keys.update(bn(f"{p}.bn3", planes * 4))
            if j == 0:
                keys[f"{p}.downsample.0.weight"] = (planes * 4, inplanes, 1, 1)
                keys.update(bn(f"{p}.downsample.1", planes * 4))
            inplanes = planes * 4
    if fc:
        keys[f"{prefix}.fc.weight"] = (1000, 2048)
        keys[f"{prefix}.fc.bias"] = (1000,)
    return keys


def linear(prefix, out, inp, bias=True):
    keys = {f"{prefix}.weight": (out, inp)}
    if bias:
        keys[f"{prefix}.bias"] = (out,)
    return keys


def layernorm(prefix, d):
    return {f"{prefix}.weight": (d,), f"{prefix}.bias": (d,)}


def mha(prefix, d):
    return {f"{prefix}.in_proj_weight": (3 * d, d), f"{prefix}.in_proj_bias": (3 * d,),
            **linear(f"{prefix}.out_proj", d, d)}


def decoder(prefix, d, ff=1024, layers=4, self_attn=True):
    keys = {}
    for i in range(layers):
        p = f"{prefix}.layers.{i}"
        if self_attn:
            keys.update(mha(f"{p}.self_attn", d))
            keys.update(layernorm(f"{p}.norm1", d))
        keys.update(mha(f"{p}.multihead_attn", d))
        keys.update(linear(f"{p}.linear1", ff, d))
        keys.update(linear(f"{p}.linear2", d, ff))
        keys.update(layernorm(f"{p}.norm2", d))
        keys.update(layernorm(f"{p}.norm3", d))
    keys.update(layernorm(f"{prefix}.norm", d))
    return keys


def shapes(module, skip_prefix=None):
    return {k: tuple(v.shape) for k, v in module.state_dict().items()
            if skip_prefix is None or not k.startswith(skip_prefix)}


def assert_same(actual: dict, expected: dict):
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    assert not missing and not extra, f"missing {missing[:5]}, unexpected {extra[:5]}"
    wrong = {k: (actual[k], expected[k]) for k in expected if tuple(actual[k]) != tuple(expected[k])}
    assert not wrong, f"shape mismatches: {list(wrong.items())[:5]}"


@pytest.fixture(scope="module")
def bert_base_dir(tmp_path_factory):
    """Only a config.json for a BERT-base (the adapters build text encoders from config)."""
    from transformers import BertConfig

    d = tmp_path_factory.mktemp("bertbase")
    BertConfig().save_pretrained(d)
    return d


def test_medklip_matches_official_modules():
    from xbench.extract.models.crossattn.medklip import MedKLIPNet

    with torch.device("meta"):
        net = MedKLIPNet()
    expected = {**linear("disease_embedding_layer", 256, 768), **linear("cl_fc", 768, 256),
                **resnet50("res_features"), **linear("res_l1", 1024, 1024), **linear("res_l2", 256, 1024),
                **decoder("decoder", 256), **linear("classifier", 2, 256)}
    assert_same(shapes(net), expected)


def test_mavl_matches_official_modules():
    from xbench.extract.models.crossattn.mavl import MAVLNet

    with torch.device("meta"):
        net = MAVLNet()
    expected = {**linear("disease_embedding_layer", 256, 768), **resnet50("backbone"),
                "pool.positional_embedding": (14 * 14 + 1, 1024), **linear("pool.k_proj", 1024, 1024),
                **linear("pool.q_proj", 1024, 1024), **linear("pool.v_proj", 1024, 1024),
                **linear("pool.c_proj", 256, 1024),
                "res_l1.0.weight": (1024, 1024, 1, 1), "res_l1.0.bias": (1024,), "res_l1.1.weight": (1,),
                "res_l2.weight": (256, 1024, 1, 1), "res_l2.bias": (256,),
                "location_emb.weight": (768, 256, 9), "location_emb.bias": (768,),
                **decoder("decoder", 256), **linear("classifier", 2, 256 * 9)}
    assert_same(shapes(net), expected)


def test_kad_matches_official_modules(bert_base_dir):
    from xbench.extract.models.crossattn.kad import build_modules

    with torch.device("meta"):
        _, size, stages, image, text, fusion = build_modules({"text_encoder": str(bert_base_dir)})
    assert (size, stages) == (512, 4)
    assert_same(shapes(image), {**resnet50("resnet", stages=4, sequential=False, fc=True),
                                **resnet50("res_features", stages=4), **linear("res_l1", 2048, 2048),
                                **linear("res_l2", 768, 2048)})
    assert_same(shapes(text, "bert_model."), {**linear("mlp_embed.0", 768, 768), **linear("mlp_embed.2", 768, 768),
                                              "logit_scale": ()})
    assert any(k.startswith("bert_model.encoder.layer.11.") for k in text.state_dict())
    assert "bert_model.pooler.dense.weight" in text.state_dict()  # CLP_clinical uses pooler_output
    assert_same(shapes(fusion), {"logit_scale": (), **layernorm("decoder_norm", 768), **decoder("decoder", 768),
                                 **linear("mlp_head.0", 2, 768)})


def test_carzero_matches_official_modules(bert_base_dir):
    from xbench.extract.models.crossattn.carzero import build_net

    with torch.device("meta"):
        _, net = build_net({"text_encoder": str(bert_base_dir)})
    vit = {"img_encoder.model.patch_embed.proj.weight": (768, 3, 16, 16),
           "img_encoder.model.patch_embed.proj.bias": (768,),
           "img_encoder.model.cls_token": (1, 1, 768), "img_encoder.model.pos_embed": (1, 197, 768),
           **layernorm("img_encoder.model.norm", 768)}
    for i in range(12):
        p = f"img_encoder.model.blocks.{i}"
        vit.update({**layernorm(f"{p}.norm1", 768), **linear(f"{p}.attn.qkv", 2304, 768),
                    **linear(f"{p}.attn.proj", 768, 768), **layernorm(f"{p}.norm2", 768),
                    **linear(f"{p}.mlp.fc1", 3072, 768), **linear(f"{p}.mlp.fc2", 768, 3072)})
    fusion = {"fusion_module.logit_scale": (), **layernorm("fusion_module.decoder_norm", 768),
              **decoder("fusion_module.decoder", 768, self_attn=True),  # parameters kept, never run
              **linear("fusion_module.mlp_head.0", 1024, 768), **linear("fusion_module.mlp_head.3", 512, 1024),
              **linear("fusion_module.mlp_head.6", 256, 512), **linear("fusion_module.mlp_head.9", 1, 256)}
    assert_same(shapes(net, "text_encoder."), {**vit, **fusion})
    assert any(k.startswith("text_encoder.model.encoder.layer.11.") for k in net.state_dict())


def test_devide_default_layout(bert_base_dir):
    """DeViDe has no official code: check only the documented (assumed) layout."""
    from transformers import AutoConfig, AutoModel

    from xbench.extract.models.crossattn.devide import DeViDeNet

    with torch.device("meta"):
        net = DeViDeNet(AutoModel.from_config(AutoConfig.from_pretrained(bert_base_dir)))
    keys = shapes(net)
    assert keys["image_encoder.pos_embed"] == (1, 197, 768)
    assert keys["model.mlp_head.0.weight"] == (2, 768)
    assert "model.decoder.layers.3.self_attn.in_proj_weight" in keys
    assert "text_encoder.mlp_embed.2.weight" in keys
