"""MedGemma 4B (Google, 2025): transformers' ``Gemma3ForConditionalGeneration`` (a SigLIP tower at 896 px, a
projector that average-pools its 64 x 64 tokens to 16 x 16 and projects them, a Gemma 3 decoder in which the
image tokens attend to each other) with its processor's chat template. The transformers classes are the
reference implementation: this module calls their own modules (vision tower, projector, embeddings, language
model) and builds the prompt with the processor's chat template; tests/models/test_medgemma.py checks the
scores and attention against the transformers model called directly on the processor's inputs.

``model: FOLDER``: config.json (model_type gemma3), model.safetensors (or a sharded index), the tokenizer and
processor files (the chat template included). A folder holding Python files or pickles is refused.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from xbench.extract.models.decoder import capture
from xbench.extract.models.decoder.common import DecoderModel, DecoderVLMAdapter, build_adapter
from xbench.extract.models.decoder.folder import check_folder, read_json
from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError

REGISTER = {"medgemma": "build"}


class MedGemma(DecoderModel):
    """The transformers model and its processor behind the decoder VLM interface."""

    resize = "squash"        # Gemma3ImageProcessor resizes the whole image to size x size (no crop, no pan-and-scan)
    interpolation = "bilinear"

    def __init__(self, net, processor) -> None:
        super().__init__()
        self.net, self.processor = net, processor
        self.tokenizer = processor.tokenizer
        vc = net.config.vision_config
        side = int(round(net.config.mm_tokens_per_image ** 0.5))
        self.grid = (side, side)
        self.feature_grid = (vc.image_size // vc.patch_size,) * 2
        ip = processor.image_processor
        size = ip.size  # a SizeDict (height, width) in transformers 5
        height, width = int(getattr(size, "height", None) or size["height"]), int(getattr(size, "width", None) or size["width"])
        self.input_size = height
        if not height == width == vc.image_size:
            raise ModelConfigError(f"the processor's size {size} is not the vision tower's {vc.image_size}")
        if getattr(ip, "do_pan_and_scan", False):
            raise ModelConfigError("do_pan_and_scan is not supported (one image, one frame)")
        self.mean, self.std = tuple(float(v) for v in ip.image_mean), tuple(float(v) for v in ip.image_std)
        self.image_token_id = int(net.config.image_token_id)
        capture.register()
        net.config.get_text_config()._attn_implementation = capture.NAME
        self._layers = {layer.self_attn: i for i, layer in enumerate(net.model.language_model.layers)}

    def vision_features(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net.model.vision_tower(pixel_values=pixels).last_hidden_state

    def project(self, features: torch.Tensor) -> torch.Tensor:
        return self.net.model.multi_modal_projector(features)

    def prompt_ids(self, question: str) -> tuple[list[int], list[int]]:
        """The processor's chat template for one user turn (the image, then the question) with the generation
        prompt, tokenised by the processor itself; split around its run of image tokens."""
        from PIL import Image

        blank = Image.fromarray(np.zeros((self.input_size, self.input_size), np.uint8)).convert("RGB")
        messages = [{"role": "user", "content": [{"type": "image", "image": blank}, {"type": "text", "text": question}]}]
        ids = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                                 return_tensors="pt")["input_ids"][0].tolist()
        where = [i for i, t in enumerate(ids) if t == self.image_token_id]
        n = self.grid[0] * self.grid[1]
        if len(where) != n or where[-1] - where[0] != n - 1:
            raise ModelConfigError(f"the chat template gives {len(where)} image tokens, the model takes {n} in one run")
        return ids[:where[0]], ids[where[-1] + 1:]

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.net.model.get_input_embeddings()(ids)

    def answer_logits(self, embeds: torch.Tensor, positions: torch.Tensor, image=None) -> torch.Tensor:
        """Gemma3Model's forward on the spliced embeddings; token_type_ids mark the image tokens, so they attend
        to each other as in the model's own forward (its mask for image blocks)."""
        types = torch.zeros(embeds.shape[:2], dtype=torch.long, device=embeds.device)
        if image is not None:
            types[:, image[0]:image[1]] = 1
        hidden = self.net.model(inputs_embeds=embeds, token_type_ids=types, use_cache=False).last_hidden_state
        rows = hidden[torch.arange(hidden.shape[0], device=hidden.device), positions]
        return self.net.lm_head(rows)

    def attention_layers(self) -> dict:
        return self._layers


def load(folder: str | Path, *, random: bool = False, seed: int = 0) -> MedGemma:
    """The model and processor of a folder (refused when it holds code or pickles); ``random``: untrained."""
    from transformers import AutoProcessor, Gemma3Config, Gemma3ForConditionalGeneration

    folder = check_folder(folder, "MedGemma", need_weights=not random)
    hf_config = read_json(folder / "config.json", "MedGemma config.json")
    if hf_config.get("model_type") != "gemma3":
        raise ModelConfigError(f"{folder / 'config.json'}: model_type {hf_config.get('model_type')!r} is not gemma3")
    try:
        cfg = Gemma3Config.from_dict(hf_config)
        processor = AutoProcessor.from_pretrained(str(folder), trust_remote_code=False, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - config errors (transformers 5's strict dataclasses too), unreadable files
        raise WeightsNotFoundError("MedGemma processor", str(folder), f"a readable config and processor files "
                                   f"({type(exc).__name__}: {str(exc)[:160]})") from None
    torch.manual_seed(seed)
    if random:
        net = Gemma3ForConditionalGeneration(cfg)
    else:
        net = Gemma3ForConditionalGeneration.from_pretrained(str(folder), config=cfg, use_safetensors=True,
                                                             trust_remote_code=False, local_files_only=True)
    return MedGemma(net.eval().requires_grad_(False), processor)


def build(config: Mapping[str, Any]) -> DecoderVLMAdapter:
    return build_adapter(config, "medgemma", "MedGemma", load)
