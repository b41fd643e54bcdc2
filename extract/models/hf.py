"""transformers CLIPModel and SiglipModel as dual-encoder adapters, from a local folder only.

Config keys: ``model`` (a folder written by ``save_pretrained`` / ``huggingface-cli download``,
or a hub id already in the offline cache), ``weights: random`` to build an untrained model from
the folder's config.json (tests). Preprocessing defaults come from the folder's
``preprocessor_config.json`` (image_mean, image_std, resample) when present.

SigLIP has no class token and pools with an attention head (MAP); its patch tokens are taken
into the joint space through that head's value path (value projection, output projection, then
the head's residual MLP), i.e. the pooled embedding the head would give if it attended to that
patch alone.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # extraction never downloads

import torch
import torch.nn as nn
import torch.nn.functional as F

from xbench.extract.models.dual import DualEncoderAdapter
from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError
from xbench.extract.models.files import check_model_json, read_model_json

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}


def _layer(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = layer(x, None)
    return out[0] if isinstance(out, tuple) else out


class _HFBlock:
    """:class:`~xbench.extract.saliency._tower.AttentionBlock` view of a transformers CLIP/SigLIP encoder layer."""

    def __init__(self, layer: nn.Module) -> None:
        self.l, a = layer, layer.self_attn
        self.heads = int(a.num_heads)
        self.scale = float(a.scale)

    def norm1(self, x):
        return self.l.layer_norm1(x)

    def qkv(self, h):
        from xbench.extract.saliency._tower import split_heads

        a = self.l.self_attn
        return tuple(split_heads(p(h), self.heads) for p in (a.q_proj, a.k_proj, a.v_proj))

    def attn_out(self, o, h):
        from xbench.extract.saliency._tower import merge_heads

        return self.l.self_attn.out_proj(merge_heads(o))

    def mlp_out(self, x):
        return self.l.mlp(self.l.layer_norm2(x))


class HFCLIPTower:
    """transformers CLIPVisionTransformer + visual_projection split at the last encoder layer."""

    def __init__(self, model: nn.Module) -> None:
        self.vm, self.proj = model.vision_model, model.visual_projection
        c = model.config.vision_config
        self.grid = (c.image_size // c.patch_size,) * 2
        self.n_prefix = 1
        self.capabilities = frozenset({"gradients", "value_path", "class_token", "blocks"})

    def embed(self, pixels):
        return self.vm.pre_layrnorm(self.vm.embeddings(pixels))

    @property
    def blocks(self):
        return [_HFBlock(layer) for layer in self.vm.encoder.layers]

    def tokens_before_last(self, pixels):
        x = self.vm.pre_layrnorm(self.vm.embeddings(pixels))
        for layer in self.vm.encoder.layers[:-1]:
            x = _layer(layer, x)
        return x

    def last_block(self, x):
        return _layer(self.vm.encoder.layers[-1], x)

    def last_block_value(self, x):
        layer = self.vm.encoder.layers[-1]
        x = x + layer.self_attn.out_proj(layer.self_attn.v_proj(layer.layer_norm1(x)))
        return x + layer.mlp(layer.layer_norm2(x))

    def pool(self, x):
        return self.proj(self.vm.post_layernorm(x[:, 0]))

    def patches(self, x):
        return self.proj(self.vm.post_layernorm(x[:, 1:]))


class HFSiglipTower(HFCLIPTower):
    """transformers SiglipVisionTransformer (no class token, attention-pooling head)."""

    def __init__(self, model: nn.Module) -> None:
        self.vm = model.vision_model
        if getattr(self.vm, "head", None) is None:
            raise ModelConfigError("SigLIP vision model without a pooling head is not supported")
        c = model.config.vision_config
        self.grid = (c.image_size // c.patch_size,) * 2
        self.n_prefix = 0
        # no class token: the attention-pooling head mixes all tokens (no rollout/relevance row)
        self.capabilities = frozenset({"gradients", "value_path", "blocks"})

    def embed(self, pixels):
        return self.vm.embeddings(pixels)

    def tokens_before_last(self, pixels):
        x = self.vm.embeddings(pixels)
        for layer in self.vm.encoder.layers[:-1]:
            x = _layer(layer, x)
        return x

    def pool(self, x):
        return self.vm.head(self.vm.post_layernorm(x))

    def patches(self, x):
        head = self.vm.head
        t = self.vm.post_layernorm(x)
        d = t.shape[-1]
        w, b = head.attention.in_proj_weight, head.attention.in_proj_bias
        o = head.attention.out_proj(F.linear(t, w[2 * d:], None if b is None else b[2 * d:]))
        return o + head.mlp(head.layernorm(o))


def _folder(model: str) -> Path:
    p = Path(model).expanduser()
    if p.is_dir():
        return p
    from xbench.extract.models.hub import snapshot

    return snapshot(model, f"transformers model {model!r}",
                    f"Download it on a networked machine: `huggingface-cli download {model} --local-dir DIR`, "
                    "then set model: DIR.", needed="a local folder or an offline-cached hub id")


def load_model(config: Mapping[str, Any]):
    """(model, tokenizer, folder, model_type) for a CLIP or SigLIP folder; eval mode, no grads."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    name = str(config.get("model") or "")
    if not name:
        raise ModelConfigError("transformers config needs `model`: a local folder holding config.json")
    folder = _folder(name)
    if not (folder / "config.json").is_file():
        raise WeightsNotFoundError(f"transformers model {name}", str(folder / "config.json"),
                                   "Point `model` at the folder written by save_pretrained or huggingface-cli download.")
    for side in ("config.json", "preprocessor_config.json", "tokenizer_config.json", "special_tokens_map.json",
                 "tokenizer.json"):  # bounded before transformers parses them itself
        check_model_json(folder / side, f"transformers model {name}")
    try:
        cfg = AutoConfig.from_pretrained(folder)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise ModelConfigError(f"{folder / 'config.json'}: not a transformers model config ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})") from None
    if cfg.model_type not in ("clip", "siglip"):
        raise ModelConfigError(f"{folder}: model_type {cfg.model_type!r} is not supported (clip, siglip)")
    if config.get("weights") == "random":
        model = AutoModel.from_config(cfg)
    else:
        if not any((folder / f).is_file() for f in WEIGHT_FILES):
            raise WeightsNotFoundError(f"transformers weights in {folder}", "model.safetensors or pytorch_model.bin",
                                       "Download the full model folder, or set weights: random for an untrained model.")
        model = AutoModel.from_pretrained(folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as e:
        raise WeightsNotFoundError(f"tokenizer of {folder}", "tokenizer files (tokenizer.json, tokenizer_config.json)",
                                   f"Copy the model's tokenizer files into the folder ({type(e).__name__}).") from None
    model.eval().requires_grad_(False)
    return model, tokenizer, folder, cfg.model_type


def _preprocess_defaults(folder: Path, model_type: str, image_size: int) -> dict:
    mean, std = ((0.5,) * 3, (0.5,) * 3) if model_type == "siglip" else (
        (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
    out = {"size": image_size, "mean": mean, "std": std, "interpolation": "bicubic"}
    pp = folder / "preprocessor_config.json"
    if pp.is_file():
        d = read_model_json(pp, "transformers preprocessor config")
        out["mean"] = tuple(d.get("image_mean", mean))
        out["std"] = tuple(d.get("image_std", std))
        out["interpolation"] = RESAMPLE.get(d.get("resample"), "bicubic")
    return out


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"transformers": "build", "hf-clip": "build", "hf-siglip": "build"}


def build(config: Mapping[str, Any]) -> DualEncoderAdapter:
    """Registry factory for transformers CLIPModel / SiglipModel folders."""
    model, tokenizer, folder, mtype = load_model(config)
    tower = HFSiglipTower(model) if mtype == "siglip" else HFCLIPTower(model)
    vcfg, tcfg = model.config.vision_config, model.config.text_config
    pre = _preprocess_defaults(folder, mtype, vcfg.image_size)
    pre.update({k: v for k, v in dict(config.get("preprocess") or {}).items() if k != "size"})
    pre.setdefault("resize", "squash")
    pre.setdefault("crop_offset", "floor")  # CLIPImageProcessor.center_crop floors the offsets
    max_len = int(getattr(tcfg, "max_position_embeddings", 77))

    def encode_text(texts: list[str]) -> torch.Tensor:
        device = next(model.parameters()).device
        kw = {"padding": "max_length"} if mtype == "siglip" else {"padding": True}
        tok = tokenizer(texts, truncation=True, max_length=max_len, return_tensors="pt", **kw)
        ids = tok["input_ids"].to(device)
        mask = tok.get("attention_mask")
        args = {"input_ids": ids}
        if mask is not None and mtype != "siglip":
            args["attention_mask"] = mask.to(device)
        out = model.get_text_features(**args)
        return getattr(out, "pooler_output", out)  # transformers >= 5 returns a ModelOutput

    bias = getattr(model, "logit_bias", None)
    info = {"backend": f"transformers-{mtype}", "model": str(folder),
            "weights": "random" if config.get("weights") == "random" else str(folder)}
    return DualEncoderAdapter(
        name=str(config.get("name") or folder.name), tower=tower, encode_text=encode_text, modules=[model],
        logit_scale=float(model.logit_scale.exp().item()),
        logit_bias=None if bias is None else float(bias.reshape(-1)[0].item()), preprocess=pre,
        method=config.get("method", "similarity"), prompts=config.get("prompts"),
        map_size=config.get("map_size"), map_text=config.get("map_text", "positive"), info=info)
