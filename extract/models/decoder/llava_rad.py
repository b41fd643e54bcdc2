"""LLaVA-Rad (Microsoft, github microsoft/LLaVA-Rad): a BiomedCLIP-CXR ViT (open_clip / timm trunk, 518 px),
an MLP projector (``mlp2x_gelu``) and a Llama (Vicuna-7B v1.5) decoder, written here from the authors' code
(cited in model_cards/llava-rad.md; tests/models/test_llava_rad.py runs their classes beside these).

The weights folder (``model: FOLDER``) holds what the authors' ``LlavaLlamaForCausalLM`` saves, in safetensors
only: ``config.json`` (the Llama config plus the ``mm_*`` keys), ``model.safetensors`` (or a sharded
``model.safetensors.index.json``) whose keys are that class's state dict, the vision tower included under
``model.vision_tower.vision_tower.vit.``, the vision tower's open_clip config (``mm_vision_tower_config``'s
file name, e.g. ``biomedclipcxr_518.json``) and the tokenizer files. A folder holding Python files or pickles
is refused (:func:`xbench.extract.models.decoder.folder.check_folder`); nothing in it runs.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from xbench.extract.models.decoder import capture
from xbench.extract.models.decoder.common import CausalLMDecoder, load_parts, split_state, DecoderVLMAdapter, build_adapter, published_prompts
from xbench.extract.models.decoder.folder import check_folder, load_safetensors, read_json, tokenizer
from xbench.extract.models.errors import ModelConfigError

REGISTER = {"llava-rad": "build"}

#: open_clip's normalisation of a model built from a config and a checkpoint (open_clip.constants OPENAI_DATASET_*)
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
VISION_PREFIX = "model.vision_tower.vision_tower.vit."
PROJECTOR_PREFIX = "model.mm_projector."


def projector(kind: str, vision_dim: int, hidden: int) -> nn.Module:
    """``linear`` or ``mlp{N}x_gelu``: N linear layers with GELU between them (the authors' projector types)."""
    if kind == "linear":
        return nn.Linear(vision_dim, hidden)
    match = re.fullmatch(r"mlp([1-9])x_gelu", kind)
    if match is None:
        raise ModelConfigError(f"mm_projector_type {kind!r} is not supported (linear, mlp<N>x_gelu)")
    layers: list[nn.Module] = [nn.Linear(vision_dim, hidden)]
    for _ in range(int(match.group(1)) - 1):
        layers += [nn.GELU(), nn.Linear(hidden, hidden)]
    return nn.Sequential(*layers)


class LlavaRad(CausalLMDecoder):
    """The model; ``hf_config`` is the folder's config.json, ``vision_config`` the open_clip model config."""

    resize = "crop"  # open_clip's eval transform: shorter side to R, centre crop (model_mimic_cxr.py:124)

    def __init__(self, hf_config: Mapping[str, Any], vision_config: Mapping[str, Any], tok) -> None:
        from open_clip.model import _build_vision_tower
        from transformers import LlamaConfig, LlamaForCausalLM

        super().__init__()
        if hf_config.get("mm_use_im_start_end"):
            raise ModelConfigError("mm_use_im_start_end: true is not supported (LLaVA-Rad does not use it)")
        if hf_config.get("mm_vision_select_feature", "patch") != "patch":
            raise ModelConfigError("mm_vision_select_feature must be 'patch' (the image tokens are the patches)")
        vcfg = dict(vision_config.get("vision_cfg") or {})
        if not vcfg.get("timm_model_name"):
            raise ModelConfigError("the vision config must name a timm ViT (vision_cfg.timm_model_name)")
        vcfg["timm_model_pretrained"] = False  # never download
        self.vit = _build_vision_tower(int(vision_config.get("embed_dim", 512)), vcfg).trunk
        self.select_layer = int(hf_config.get("mm_vision_select_layer", -2))
        depth = len(self.vit.blocks)
        if not -(depth + 1) <= self.select_layer <= depth:
            raise ModelConfigError(f"mm_vision_select_layer {self.select_layer} outside the tower's {depth} blocks")
        llama = {k: v for k, v in hf_config.items() if not k.startswith("mm_") and k not in ("architectures", "model_type")}
        try:
            lcfg = LlamaConfig(**llama)
        except Exception as exc:  # noqa: BLE001 - transformers 5 raises its strict dataclasses' own errors too
            raise ModelConfigError(f"config.json: {str(exc)[:200]}") from None
        capture.register()
        lcfg._attn_implementation = capture.NAME
        self.lm = LlamaForCausalLM(lcfg)
        self.projector = projector(str(hf_config.get("mm_projector_type", "linear")), self.vit.embed_dim, lcfg.hidden_size)
        self.tok = self.tokenizer = tok
        self.grid = tuple(int(v) for v in self.vit.patch_embed.grid_size)
        self.input_size = int(self.vit.patch_embed.img_size[0])
        # open_clip's eval transform for a model built from a hf_config and a checkpoint file (no pretrained
        # hf_config): OpenAI's mean and std, bicubic (open_clip_encoder/utils.py:41-44 -> open_clip)
        self.mean, self.std, self.interpolation = OPENAI_MEAN, OPENAI_STD, "bicubic"
        prompts = published_prompts()["llava-rad"]
        self.system, self.roles = prompts["system"], tuple(prompts["roles"])
        self._layers = {layer.self_attn: i for i, layer in enumerate(self.lm.model.layers)}

    # -- the vision side ---------------------------------------------------------------------------------
    def vision_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """The hidden state after block ``select_layer`` (the authors index [embeddings, block 1, ...]),
        class token dropped: patch_embed, _pos_embed, norm_pre, blocks (open_clip_encoder.py:23-36, 97-105)."""
        vit = self.vit
        x = vit.norm_pre(vit._pos_embed(vit.patch_embed(pixels)))
        for block in vit.blocks[:self.select_layer % (len(vit.blocks) + 1)]:
            x = block(x)
        return x[:, 1:]

    def project(self, features: torch.Tensor) -> torch.Tensor:
        return self.projector(features)

    # -- the prompt --------------------------------------------------------------------------------------
    def prompt_ids(self, question: str) -> tuple[list[int], list[int]]:
        """The v1 conversation around ``<image>\\n{question}``, tokenised in two pieces as the authors'
        ``tokenizer_image_token`` does (llava/mm_utils.py:45-64): each piece with the tokenizer's special
        tokens; when the first starts with BOS, BOS is kept once and each piece loses its first token."""
        text = f"{self.system} {self.roles[0]}: <image>\n{question} {self.roles[1]}:"
        before, after = text.split("<image>")
        pieces = [list(self.tok(before).input_ids), list(self.tok(after).input_ids)]
        if pieces[0] and pieces[0][0] == self.tok.bos_token_id:
            return [pieces[0][0]] + pieces[0][1:], pieces[1][1:]
        return pieces[0], pieces[1]

    def load_state(self, state: Mapping[str, torch.Tensor]) -> None:
        """The authors' state dict (LlavaLlamaForCausalLM.state_dict(), vision tower included), strictly."""
        # rotary_emb.inv_freq: a buffer recomputed from the config
        parts = split_state(state, {"vit": VISION_PREFIX, "projector": PROJECTOR_PREFIX}, "lm",
                            skip=("rotary_emb.inv_freq",))
        load_parts(self, parts)


def load(folder: str | Path, *, random: bool = False, seed: int = 0) -> LlavaRad:
    """The model of a weights folder (refused when it holds code or pickles); ``random``: untrained weights."""
    folder = check_folder(folder, "LLaVA-Rad", need_weights=not random)
    hf_config = read_json(folder / "config.json", "LLaVA-Rad config.json")
    vname = Path(str(hf_config.get("mm_vision_tower_config") or "biomedclipcxr_518.json")).name
    vision = read_json(folder / vname, f"LLaVA-Rad vision tower config {vname}")
    torch.manual_seed(seed)
    model = LlavaRad(hf_config, vision, tokenizer(folder, "LLaVA-Rad"))
    if not random:
        model.load_state(load_safetensors(folder, "LLaVA-Rad"))
    return model.eval().requires_grad_(False)


def build(config: Mapping[str, Any]) -> DecoderVLMAdapter:
    return build_adapter(config, "llava-rad", "LLaVA-Rad", load, lambda model: {"select_layer": model.select_layer})
