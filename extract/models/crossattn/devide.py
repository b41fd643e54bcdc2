"""DeViDe (Luo, Zhou, Royer, Sekuboyina, Menze; arXiv 2404.03618) — UNVERIFIED architecture.

No public code or weights were found. From the paper: a ViT-B image encoder, a Med-KEBERT text
encoder, and KAD-style knowledge-enhanced query decoding with a 2-way head, grounding shown
through cross-attention maps. This adapter therefore implements a configurable KAD-style query
decoder over ViT-B/16 patch tokens and loads a **user-provided** checkpoint:

* ``image_encoder``: ViT (``patch_embed.proj``, ``cls_token``, ``pos_embed``, ``blocks.N.*``,
  ``norm``; timm naming) -> 196 patch tokens at 224 px
* ``text_encoder``: ``bert_model`` + ``mlp_embed`` as KAD's ``CLP_clinical``
* ``model``: KAD's ``TQN_Model`` layout (``decoder_norm``, ``decoder.layers.N.*``, ``mlp_head.0``)

Checkpoints either hold the three sections as separate state dicts (like KAD) or one flat state
dict whose keys start with ``image_encoder.``/``text_encoder.``/``model.``; ``options.key_rename``
([[regex, replacement], ...]) adapts other layouts. Everything here is an assumption to be
checked against the authors' weights when they exist (see model_cards/devide.md).
"""
from __future__ import annotations

import re
from typing import Mapping

import torch
from torch import nn

from xbench.extract.models.crossattn.carzero import ViTEncoder
from xbench.extract.models.crossattn.common import (
    BERT_NON_PARAMETERS,
    AdapterConfigError,
    build_bert_from_config,
    equalize_setting,
    file_sha256,
    load_official_state_dict,
    layers_from,
    load_tokenizer,
    option,
    wants_random_weights,
    pick_device,
    read_checkpoint,
    trust_option,
    bool_option,
)
from xbench.extract.models.crossattn.kad import KADFusion, KADTextEncoder, TextQueryAdapter
from xbench.extract.models.crossattn.medklip import arch_from

DEFAULT_ARCH = {
    "embed_dim": 768,
    "depth": 12,
    "num_heads": 12,
    "mlp_ratio": 4.0,
    "patch_size": 16,
    "img_size": 224,
    "nhead": 4,
    "num_layers": 4,
    "dim_feedforward": 1024,
    "class_num": 2,
    "self_attention": True,
    "dropout": 0.1,
}


class DeViDeNet(nn.Module):
    def __init__(self, bert: nn.Module, *, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0, patch_size=16,
                 img_size=224, nhead=4, num_layers=4, dim_feedforward=1024, class_num=2, self_attention=True,
                 dropout=0.1) -> None:
        super().__init__()
        self.image_encoder = ViTEncoder(img_size=img_size, patch_size=patch_size, embed_dim=embed_dim, depth=depth,
                                        num_heads=num_heads, mlp_ratio=mlp_ratio)
        self.text_encoder = KADTextEncoder(bert, embed_dim)
        self.model = KADFusion(embed_dim=embed_dim, nhead=nhead, num_layers=num_layers,
                               dim_feedforward=dim_feedforward, class_num=class_num, dropout=dropout,
                               self_attention=self_attention)


class _PatchTokens(nn.Module):
    """Calls the ViT and keeps the patch tokens (B, N, D); holds no parameters of its own."""

    def __init__(self, vit: ViTEncoder) -> None:
        super().__init__()
        self.vit = vit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.vit(x)[1]


def rename_keys(state_dict: Mapping[str, torch.Tensor], rules) -> dict:
    """Apply ``[(regex, replacement), ...]`` in order to every key."""
    compiled = [(re.compile(p), r) for p, r in (rules or [])]
    out = {}
    for key, value in state_dict.items():
        for pattern, repl in compiled:
            key = pattern.sub(repl, key)
        out[key] = value
    return out


def load_devide_weights(net: DeViDeNet, config: Mapping) -> dict:
    if wants_random_weights(config):
        return {"weights": None, "note": "random initialisation (weights: random)"}
    path = config.get("weights")
    if not path:
        raise AdapterConfigError("config key 'weights' (a DeViDe checkpoint you provide) is required")
    ckpt = read_checkpoint(path, trust=trust_option(config))
    rules = option(config, "key_rename", [])
    prefixes = tuple(option(config, "strip_prefixes", ["module."]))
    dropped = []
    if all(k in ckpt for k in ("image_encoder", "text_encoder", "model")):
        for key, module, drop in (("image_encoder", net.image_encoder, ()),
                                  ("text_encoder", net.text_encoder, BERT_NON_PARAMETERS), ("model", net.model, ())):
            rep = load_official_state_dict(module, rename_keys(ckpt[key], rules), prefixes=prefixes, drop=drop,
                                           where=f"{path}[{key}]")
            dropped += [f"{key}.{k}" for k in rep["dropped"]]
    else:
        flat = ckpt.get("state_dict", ckpt.get("model", ckpt))
        rep = load_official_state_dict(net, rename_keys(flat, rules), prefixes=prefixes, drop=BERT_NON_PARAMETERS,
                                       where=str(path))
        dropped = rep["dropped"]
    info = {"weights": str(path), "dropped_keys": dropped}
    if bool_option(config, "hash_weights", True):
        info["weights_sha256"] = file_sha256(path)
    return info


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"devide": "build"}


def build(config: Mapping) -> TextQueryAdapter:
    """Build the DeViDe adapter (architecture assumed, see the module docstring).

    Config keys: ``weights``, ``text_encoder`` (local Med-KEBERT-style folder: config.json +
    tokenizer), ``device``, ``layers`` ([-1]), ``prompts``; options: ``arch`` (sizes,
    ``self_attention``), ``image_size`` (224), ``prompt_template`` ("{}"), ``max_length`` (256),
    ``key_rename``, ``strip_prefixes``, ``mean``/``std`` (ImageNet), ``trust_checkpoint``,
    ``hash_weights``.
    """
    arch = arch_from(config, DEFAULT_ARCH)
    text_dir = config.get("text_encoder") or option(config, "text_encoder")
    bert = build_bert_from_config(text_dir, output_hidden_states=False)
    if bert.config.hidden_size != arch["embed_dim"]:
        raise AdapterConfigError(f"text encoder hidden size {bert.config.hidden_size} != embed_dim {arch['embed_dim']}")
    net = DeViDeNet(bert, **arch)
    info = load_devide_weights(net, config)
    image_size = int(option(config, "image_size", arch["img_size"]))
    mean = tuple(option(config, "mean", (0.485, 0.456, 0.406)))
    std = tuple(option(config, "std", (0.229, 0.224, 0.225)))
    prov = {"model": "devide", "source": "arXiv 2404.03618 (no public code; architecture assumed)", **info,
            "arch": arch, "preprocess": f"PIL Resize([{image_size}, {image_size}]) bilinear (assumed, as MedKLIP), mean {mean} std {std}",
            "score": "softmax over the 2-way mlp_head, index 1", "verified": False}
    return TextQueryAdapter(_PatchTokens(net.image_encoder), net.text_encoder, net.model,
                            load_tokenizer(text_dir, do_lower_case=True), image_size=image_size,
                            grid=image_size // arch["patch_size"], layers=layers_from(config, 1),
                            config=config, prompt_model="devide", max_length=int(option(config, "max_length", 256)),
                            interpolation="bilinear", mean=mean, std=std, device=pick_device(config),
                            provenance=prov, equalize=equalize_setting(config))
