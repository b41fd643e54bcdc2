"""Strict loading of checkpoints saved the way the official code saves them (containers and
prefixes), and the errors for checkpoints that do not match."""
from __future__ import annotations

import argparse
import sys
import types

import pytest

torch = pytest.importorskip("torch")

from xbench.extract.models.crossattn import carzero, devide, kad, mavl, medklip  # noqa: E402
from xbench.extract.models.crossattn.common import (  # noqa: E402
    AdapterConfigError,
    CheckpointMismatchError,
    read_checkpoint,
    strip_prefixes,
)
from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError  # noqa: E402



def randomised(module):
    """A state dict with every float tensor replaced by fresh random values; tensors shared by
    two names (KAD's ``resnet``/``res_features``, ``decoder_norm``/``decoder.norm``) stay shared,
    as in a real checkpoint."""
    g = torch.Generator().manual_seed(1)
    fresh, out = {}, {}
    for k, v in module.state_dict().items():
        if v.data_ptr() not in fresh:
            fresh[v.data_ptr()] = torch.randn(v.shape, generator=g) if v.is_floating_point() else v.clone()
        out[k] = fresh[v.data_ptr()]
    return out


def assert_loaded(module, sd):
    own = module.state_dict()
    for k, v in sd.items():
        assert torch.equal(own[k], v), k


def test_strip_prefixes_repeats_and_keeps_others():
    sd = {"module.module.a": 1, "CARZero.b": 2, "c": 3}
    assert strip_prefixes(sd, ("module.", "CARZero.")) == {"a": 1, "b": 2, "c": 3}


def test_medklip_loads_dataparallel_checkpoint(tmp_path, tiny_bert, tiny_cache, tiny_config):
    ref = medklip.build(tiny_config("medklip", tiny_bert, tiny_cache))
    sd = randomised(ref.net)
    path = tmp_path / "checkpoint_final.pth"
    torch.save({"model": {f"module.{k}": v for k, v in sd.items()}, "epoch": 3, "config": {"N": 4}}, path)
    adapter = medklip.build(tiny_config("medklip", tiny_bert, tiny_cache, weights=str(path)))
    assert_loaded(adapter.net, sd)
    assert len(adapter.provenance()["weights_sha256"]) == 64


def test_medklip_rejects_missing_and_renamed_keys(tmp_path, tiny_bert, tiny_cache, tiny_config):
    ref = medklip.build(tiny_config("medklip", tiny_bert, tiny_cache))
    sd = {f"module.{k}": v for k, v in randomised(ref.net).items()}
    sd.pop("module.cl_fc.weight")
    sd["module.classifier.weight_renamed"] = sd.pop("module.classifier.weight")
    path = tmp_path / "bad.pth"
    torch.save({"model": sd}, path)
    with pytest.raises(CheckpointMismatchError, match=r"missing keys.*cl_fc.weight") as info:
        medklip.build(tiny_config("medklip", tiny_bert, tiny_cache, weights=str(path)))
    assert "unexpected keys" in str(info.value) and "weight_renamed" in str(info.value)


def test_medklip_reports_shape_mismatch(tmp_path, tiny_bert, tiny_cache, tiny_config):
    ref = medklip.build(tiny_config("medklip", tiny_bert, tiny_cache))
    sd = randomised(ref.net)
    sd["classifier.weight"] = torch.zeros(3, sd["classifier.weight"].shape[1])
    path = tmp_path / "shape.pth"
    torch.save({"model": sd}, path)
    with pytest.raises(CheckpointMismatchError, match="shape mismatches.*classifier.weight"):
        medklip.build(tiny_config("medklip", tiny_bert, tiny_cache, weights=str(path)))


def test_mavl_drops_temperature_keys(tmp_path, tiny_bert, tiny_cache, tiny_config):
    ref = mavl.build(tiny_config("mavl", tiny_bert, tiny_cache))
    sd = randomised(ref.net)
    ckpt = {f"module.{k}": v for k, v in sd.items()}
    ckpt["module.temp"] = torch.tensor(0.07)  # learnt temperature kept by the training code
    path = tmp_path / "checkpoint_full_40.pth"
    torch.save({"model": ckpt}, path)
    adapter = mavl.build(tiny_config("mavl", tiny_bert, tiny_cache, weights=str(path)))
    assert_loaded(adapter.net, sd)
    assert adapter.provenance()["dropped_keys"] == ["temp"]


def test_kad_loads_three_part_checkpoint(tmp_path, tiny_bert, tiny_cache, tiny_config):
    ref = kad.build(tiny_config("kad", tiny_bert, tiny_cache))
    parts = {"image_encoder": randomised(ref.image_encoder), "text_encoder": randomised(ref.text_encoder),
             "model": randomised(ref.fusion)}
    # the shared LayerNorm and the shared ResNet modules appear under both names, as upstream
    assert "decoder_norm.weight" in parts["model"] and "decoder.norm.weight" in parts["model"]
    assert "resnet.layer1.0.conv1.weight" in parts["image_encoder"] and "res_features.4.0.conv1.weight" in parts["image_encoder"]
    saved = {k: dict(v) for k, v in parts.items()}
    saved["text_encoder"]["bert_model.embeddings.position_ids"] = torch.arange(300)[None]  # older transformers
    path = tmp_path / "KAD_512.pt"
    torch.save(saved, path)
    adapter = kad.build(tiny_config("kad", tiny_bert, tiny_cache, weights=str(path)))
    assert_loaded(adapter.image_encoder, parts["image_encoder"])
    assert_loaded(adapter.text_encoder, parts["text_encoder"])
    assert_loaded(adapter.fusion, parts["model"])
    assert adapter.provenance()["dropped_keys"] == ["text_encoder.bert_model.embeddings.position_ids"]


def test_kad_checkpoint_without_sections_is_rejected(tmp_path, tiny_bert, tiny_cache, tiny_config):
    path = tmp_path / "flat.pt"
    torch.save({"model": {}}, path)
    with pytest.raises(AdapterConfigError, match="lacks .*image_encoder"):
        kad.build(tiny_config("kad", tiny_bert, tiny_cache, weights=str(path)))


def _fake_omegaconf():
    """A stand-in ``omegaconf.DictConfig`` importable only while saving."""
    mod = types.ModuleType("omegaconf")

    class DictConfig:
        def __init__(self, content):
            self.content = content

    DictConfig.__module__ = "omegaconf"
    DictConfig.__qualname__ = "DictConfig"
    mod.DictConfig = DictConfig
    return mod


def test_carzero_lightning_checkpoint_needs_trust_and_loads(tmp_path, tiny_bert, tiny_cache, monkeypatch, tiny_config):
    ref = carzero.build(tiny_config("carzero", tiny_bert, tiny_cache))
    sd = randomised(ref.net)
    state = {f"CARZero.{k}": v for k, v in sd.items()}
    state["CARZero.text_encoder.model.embeddings.position_ids"] = torch.arange(300)[None]
    state["loss_module.weight"] = torch.ones(1)  # outside the model: the official loader skips it
    fake = _fake_omegaconf()
    monkeypatch.setitem(sys.modules, "omegaconf", fake)
    path = tmp_path / "CARZero_best_model.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": fake.DictConfig({"model": 1}), "epoch": 9}, path)
    monkeypatch.delitem(sys.modules, "omegaconf")  # the environment does not have omegaconf
    cfg = tiny_config("carzero", tiny_bert, tiny_cache, weights=str(path))
    with pytest.raises(AdapterConfigError, match="trust_checkpoint"):
        carzero.build(cfg)
    cfg["options"] = {**cfg["options"], "trust_checkpoint": True}
    adapter = carzero.build(cfg)
    assert_loaded(adapter.net, sd)
    assert set(adapter.provenance()["dropped_keys"]) == {"loss_module.weight", "text_encoder.model.embeddings.position_ids"}


def test_carzero_unknown_key_inside_model_is_an_error(tmp_path, tiny_bert, tiny_cache, tiny_config):
    ref = carzero.build(tiny_config("carzero", tiny_bert, tiny_cache))
    state = {f"CARZero.{k}": v for k, v in randomised(ref.net).items()}
    state["CARZero.fusion_module.extra_head.weight"] = torch.ones(2)
    path = tmp_path / "c.ckpt"
    torch.save({"state_dict": state}, path)
    with pytest.raises(CheckpointMismatchError, match="fusion_module.extra_head.weight"):
        carzero.build(tiny_config("carzero", tiny_bert, tiny_cache, weights=str(path)))


def test_devide_loads_flat_checkpoint_with_renames(tmp_path, tiny_bert, tiny_cache, tiny_config):
    ref = devide.build(tiny_config("devide", tiny_bert, tiny_cache))
    net = torch.nn.ModuleDict({"image_encoder": ref.image_encoder.vit, "text_encoder": ref.text_encoder,
                               "model": ref.fusion})
    sd = randomised(net)
    renamed = {k.replace("image_encoder.", "visual.", 1): v for k, v in sd.items()}
    path = tmp_path / "devide.pt"
    torch.save({"state_dict": renamed}, path)
    cfg = tiny_config("devide", tiny_bert, tiny_cache, weights=str(path))
    cfg["options"] = {**cfg["options"], "key_rename": [["^visual\\.", "image_encoder."]]}
    adapter = devide.build(cfg)
    assert_loaded(adapter.image_encoder.vit, {k[len("image_encoder."):]: v for k, v in sd.items()
                                              if k.startswith("image_encoder.")})


def test_missing_weights_file_is_weights_not_found(tiny_bert, tiny_cache, tiny_config):
    with pytest.raises(WeightsNotFoundError, match="nope.pth"):
        medklip.build(tiny_config("medklip", tiny_bert, tiny_cache, weights="/nonexistent/nope.pth"))
    with pytest.raises(ModelConfigError, match="'weights'"):
        medklip.build(tiny_config("medklip", tiny_bert, tiny_cache, weights=None))


def test_weights_only_refuses_pickled_objects_without_trust(tmp_path):
    path = tmp_path / "ns.pth"
    torch.save({"model": {"a": torch.zeros(1)}, "args": argparse.Namespace(lr=1)}, path)
    with pytest.raises(AdapterConfigError, match="weights_only"):
        read_checkpoint(path)
    assert torch.equal(read_checkpoint(path, trust=True)["model"]["a"], torch.zeros(1))
