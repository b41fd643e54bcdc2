"""MAIRA-2 (Microsoft, 2024; hub ``microsoft/maira-2``): a RAD-DINO vision tower (transformers'
``Dinov2Backbone``, 518 px), a multi-layer MLP projector and a Vicuna-7B (Llama) decoder, written here over
transformers 5 building blocks from the authors' hub remote code (``modeling_maira2.py``,
``configuration_maira2.py``, ``processing_maira2.py``: cited in model_cards/maira-2.md; that code subclasses
transformers 4.4x's ``LlavaForConditionalGeneration`` and does not run under transformers 5, and XBench never
runs a folder's code). tests/models/test_maira2_fidelity.py runs their classes under transformers 4.51 beside these.

The weights folder (``model: FOLDER``) holds, as data only: ``config.json`` (``model_type: maira2`` with its
``vision_config`` (dinov2) and ``text_config`` (llama)), ``model.safetensors`` (or a sharded index) whose keys
are the authors' ``Maira2ForConditionalGeneration.state_dict()`` as transformers 4.51 saves it
(``vision_tower.*``, ``multi_modal_projector.layers.*``, ``language_model.model.*``, ``language_model.lm_head.*``),
``preprocessor_config.json`` (the BitImageProcessor's resize, crop, mean and std), ``processor_config.json``
(the image token) and the tokenizer files with the chat template. A folder holding Python files or pickles is
refused (:func:`xbench.extract.models.decoder.folder.check_folder`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from xbench.extract.models.decoder import capture
from xbench.extract.models.decoder.common import CausalLMDecoder, load_parts, DecoderVLMAdapter, build_adapter, published_prompts
from xbench.extract.models.decoder.folder import check_folder, load_safetensors, read_json, tokenizer
from xbench.extract.models.errors import ModelConfigError

REGISTER = {"maira-2": "build"}

#: transformers 4.51's Dinov2 attention names (the authors' saved layout) -> transformers 5's
DINOV2_RENAMES = (("attention.attention.query.", "attention.q_proj."), ("attention.attention.key.", "attention.k_proj."),
                  ("attention.attention.value.", "attention.v_proj."), ("attention.output.dense.", "attention.o_proj."))
#: PIL resample codes of the image processor -> geometry's interpolation names
RESAMPLE = {2: "bilinear", 3: "bicubic"}


class Projector(nn.Module):
    """``projector_n_layers`` Linear layers (vision width -> text width, then text width) with the configured
    activation between them, as ``layers`` (the authors' key names, modeling_maira2.py Maira2MultiModalProjector)."""

    def __init__(self, n_layers: int, vision: int, text: int, act: str) -> None:
        from transformers.activations import ACT2FN

        super().__init__()
        if not isinstance(n_layers, int) or n_layers < 1:
            raise ModelConfigError(f"projector_n_layers must be a whole number >= 1, got {n_layers!r}")
        if act not in ACT2FN:
            raise ModelConfigError(f"projector_hidden_act {act!r} is not an activation transformers knows")
        layers: list[nn.Module] = [nn.Linear(vision, text)]
        for _ in range(n_layers - 1):
            layers += [ACT2FN[act], nn.Linear(text, text)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def _image_processor(pre: Mapping[str, Any]) -> dict:
    """Size, interpolation, mean and std of the folder's BitImageProcessor config: the shortest edge resized to
    R and an R x R centre crop (geometry ``crop``); anything else is refused rather than approximated."""
    size, crop = pre.get("size") or {}, pre.get("crop_size") or {}
    edge = size.get("shortest_edge") if isinstance(size, Mapping) else None
    side = {crop.get("height"), crop.get("width")} if isinstance(crop, Mapping) else set()
    problems = []
    if not (pre.get("do_resize", True) and pre.get("do_center_crop", True) and isinstance(edge, int)
            and side == {edge}):
        problems.append(f"the image processor must resize the shortest edge to R and centre-crop R x R, got size "
                        f"{size!r}, crop_size {crop!r}")
    if pre.get("resample", 3) not in RESAMPLE:
        problems.append(f"resample {pre.get('resample')!r} is not bilinear (2) or bicubic (3)")
    mean, std = pre.get("image_mean"), pre.get("image_std")
    if not all(isinstance(v, list) and len(v) == 3 and all(isinstance(x, (int, float)) for x in v) for v in (mean, std)) \
            or not all(x > 0 for x in std):
        problems.append("image_mean and image_std must be three numbers each (std positive)")
    if not (pre.get("do_rescale", True) and pre.get("do_normalize", True)):
        problems.append("do_rescale and do_normalize must be true (the model's inputs are normalised)")
    if problems:
        raise ModelConfigError([f"preprocessor_config.json: {p}" for p in problems])
    return {"size": edge, "interpolation": RESAMPLE[pre.get("resample", 3)],
            "mean": tuple(float(v) for v in mean), "std": tuple(float(v) for v in std)}


def _text_config(tcfg: Mapping[str, Any]):
    """The decoder's transformers config (llama, or mistral as the class MAIRA-2's text_config may name)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    kind = tcfg.get("model_type")
    if kind not in ("llama", "mistral"):
        raise ModelConfigError(f"config.json: MAIRA-2's text_config is a llama, got model_type {kind!r}")
    try:
        return CONFIG_MAPPING[kind](**{k: v for k, v in tcfg.items() if k != "model_type"})
    except Exception as exc:  # noqa: BLE001 - transformers 5 raises its strict dataclasses' own errors too
        raise ModelConfigError(f"config.json text_config: {str(exc)[:200]}") from None


class Maira2(CausalLMDecoder):
    """The model; ``hf_config`` the folder's config.json, ``pre`` its preprocessor config, ``image_token`` the
    processor's placeholder text."""

    resize = "crop"
    stretch = True  # Maira2Processor._normalize_image: grey, stretched to 0..255, before the image processor

    def __init__(self, hf_config: Mapping[str, Any], pre: Mapping[str, Any], tok, image_token: str = "<image>") -> None:
        from transformers import AutoModelForCausalLM, Dinov2Backbone, Dinov2Config

        super().__init__()
        vcfg, tcfg = hf_config.get("vision_config"), hf_config.get("text_config")
        if not isinstance(vcfg, Mapping) or vcfg.get("model_type") != "dinov2" or not isinstance(tcfg, Mapping):
            raise ModelConfigError("config.json: MAIRA-2 has a vision_config of model_type dinov2 and a text_config")
        try:
            vision = Dinov2Config(**{k: v for k, v in vcfg.items() if k != "model_type"})
        except Exception as exc:  # noqa: BLE001 - transformers 5 raises its strict dataclasses' own errors too
            raise ModelConfigError(f"config.json vision_config: {str(exc)[:200]}") from None
        if vision.reshape_hidden_states or not vision.apply_layernorm:
            raise ModelConfigError("the vision tower must give its layer-normed tokens unreshaped "
                                   "(reshape_hidden_states: false, apply_layernorm: true), as MAIRA-2's does")
        self.feature_layer = hf_config.get("vision_feature_layer", -1)
        self.strategy = hf_config.get("vision_feature_select_strategy", "default")
        n_maps = len(vision.out_features)
        if not isinstance(self.feature_layer, int) or not -n_maps <= self.feature_layer < n_maps:
            raise ModelConfigError(f"vision_feature_layer {self.feature_layer!r} is not one of the tower's "
                                   f"{n_maps} output stages")
        if self.strategy not in ("default", "full"):
            raise ModelConfigError(f"vision_feature_select_strategy {self.strategy!r} is not default or full")
        self.vision_tower = Dinov2Backbone(vision)
        text = _text_config(tcfg)
        capture.register()
        text._attn_implementation = capture.NAME
        self.language_model = AutoModelForCausalLM.from_config(text)
        self.multi_modal_projector = Projector(hf_config.get("projector_n_layers", 4), vision.hidden_size,
                                               text.hidden_size, str(hf_config.get("projector_hidden_act", "gelu")))
        proc = _image_processor(pre)
        self.input_size, self.interpolation = proc["size"], proc["interpolation"]
        self.mean, self.std = proc["mean"], proc["std"]
        side = self.input_size // vision.patch_size
        if self.strategy == "full":
            raise ModelConfigError("vision_feature_select_strategy 'full' puts the class token among the image "
                                   "tokens, which has no place on the patch grid: not supported")
        self.grid = (side, side)
        self.tokenizer, self.image_token = tok, image_token
        self.image_token_id = tok.convert_tokens_to_ids(image_token)
        if self.image_token_id is None or self.image_token_id == tok.unk_token_id:
            raise ModelConfigError(f"the tokenizer has no image token {image_token!r}")
        if not getattr(tok, "chat_template", None):
            raise ModelConfigError("the tokenizer has no chat template (tokenizer_config.json chat_template)")
        self.prefix = published_prompts()["maira-2"]["prefix"]
        self._layers = {layer.self_attn: i for i, layer in enumerate(self.language_model.model.layers)}

    # -- the vision side ---------------------------------------------------------------------------------
    def vision_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """The backbone's layer-normed feature map ``vision_feature_layer``, class token dropped
        (modeling_maira2.py get_image_features: ``feature_maps``, not ``hidden_states``)."""
        return self.vision_tower(pixels).feature_maps[self.feature_layer][:, 1:]

    def project(self, features: torch.Tensor) -> torch.Tensor:
        return self.multi_modal_projector(features)

    # -- the prompt --------------------------------------------------------------------------------------
    def prompt_ids(self, question: str) -> tuple[list[int], list[int]]:
        """One user turn as the authors' processor builds its phrase-grounding turn (processing_maira2.py
        ``_construct_chat_messages_phrase_grounding``): the prefix text, the image, then the question after a
        space; rendered by the folder's chat template with the generation prompt, the image placeholder
        repeated once per image token and the text tokenised whole, as LlavaProcessor does; split around the run."""
        messages = [{"role": "user", "content": [
            {"index": None, "text": self.prefix, "type": "text"}, {"index": 0, "text": None, "type": "image"},
            {"index": None, "text": f" {question}", "type": "text"}]}]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        n = self.grid[0] * self.grid[1]
        if text.count(self.image_token) != 1:
            raise ModelConfigError(f"the chat template renders {text.count(self.image_token)} image placeholders, "
                                   "not one")
        ids = self.tokenizer(text.replace(self.image_token, self.image_token * n)).input_ids
        where = [i for i, t in enumerate(ids) if t == self.image_token_id]
        if len(where) != n or where[-1] - where[0] != n - 1:
            raise ModelConfigError(f"the prompt gives {len(where)} image tokens, the model takes {n} in one run")
        return ids[:where[0]], ids[where[-1] + 1:]

    @property
    def causal_lm(self) -> torch.nn.Module:
        return self.language_model

    def load_state(self, state: Mapping[str, torch.Tensor]) -> None:
        """The authors' state dict (transformers 4.51 names, the Dinov2 attention renamed), strictly."""
        own = {}
        for key, value in state.items():
            if key.startswith("vision_tower."):
                for old, new in DINOV2_RENAMES:
                    key = key.replace(old, new)
            if not key.endswith("rotary_emb.inv_freq"):  # a buffer recomputed from the config
                own[key] = value
        load_parts(self, {"": own})


def load(folder: str | Path, *, random: bool = False, seed: int = 0) -> Maira2:
    """The model of a weights folder (refused when it holds code or pickles); ``random``: untrained weights."""
    folder = check_folder(folder, "MAIRA-2", need_weights=not random)
    hf_config = read_json(folder / "config.json", "MAIRA-2 config.json")
    if hf_config.get("model_type") != "maira2":
        raise ModelConfigError(f"{folder / 'config.json'}: model_type {hf_config.get('model_type')!r} is not maira2")
    pre = read_json(folder / "preprocessor_config.json", "MAIRA-2 preprocessor_config.json")
    proc = read_json(folder / "processor_config.json", "MAIRA-2 processor_config.json") \
        if (folder / "processor_config.json").is_file() else {}
    torch.manual_seed(seed)
    text = hf_config.get("text_config")
    text = _text_config(text) if isinstance(text, Mapping) else None  # the tokenizer's model: the decoder's
    model = Maira2(hf_config, pre, tokenizer(folder, "MAIRA-2", text), str(proc.get("image_token") or "<image>"))
    if not random:
        model.load_state(load_safetensors(folder, "MAIRA-2"))
    return model.eval().requires_grad_(False)


def build(config: Mapping[str, Any]) -> DecoderVLMAdapter:
    return build_adapter(config, "maira-2", "MAIRA-2", load)
