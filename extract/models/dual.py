"""The generic dual-encoder (CLIP-family) adapter: prompts -> text embeddings once, images ->
preprocessing -> a saliency method on a :class:`~xbench.extract.saliency.VisionTower` -> scores
and whole-image maps. Backends (open_clip, transformers) only supply the tower and a text encoder.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F

from xbench.extract.saliency import METHODS
from xbench.extract.saliency._tower import VisionTower, capabilities
from xbench.extract.models.base import AdapterOutput, ModelAdapter
from xbench.extract.models.errors import ModelConfigError
from xbench.extract.models.geometry import RESIZE_MODES, frame_boxes, model_input, undo_box
from xbench.extract.models.pixels import PIL_FILTERS, DualEncoderTransform
from xbench.extract.models.prompts import ClassPrompts, build_prompts

MAP_TEXT = ("positive", "contrast")


class DualEncoderAdapter(ModelAdapter):
    """Adapter for any dual encoder exposed as a vision tower plus a text encoder.

    encode_text: list of N strings -> (N, E) text embeddings (not necessarily normalised), on any
    device. logit_scale / logit_bias: the model's (already exponentiated) scale and SigLIP bias.
    preprocess: {"size": R, "mean": (3,), "std": (3,), "resize": squash|crop|pad,
    "interpolation": bicubic|bilinear}. map_text: which text the maps use in the pair style,
    "positive" (default) or "contrast" (positive minus negative embedding).
    """

    score_kind = "logit"
    supports_phrases = True

    def __init__(self, *, name: str, tower: VisionTower, encode_text: Callable[[list[str]], torch.Tensor],
                 modules: Sequence[torch.nn.Module], logit_scale: float, logit_bias: float | None = None,
                 preprocess: Mapping[str, Any], method: str = "similarity",
                 prompts: Mapping[str, Any] | None = None, map_size: Sequence[int] | None = None,
                 map_text: str = "positive", info: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if method not in METHODS:
            raise ModelConfigError(f"unknown saliency method {method!r}; available: {', '.join(METHODS.names())}")
        self.map_method = METHODS.get(method)
        missing = self.map_method.missing(capabilities(tower) | {"empty_prompt"})
        if missing:
            ok = [m for m in METHODS.names() if not METHODS.get(m).missing(capabilities(tower) | {"empty_prompt"})]
            raise ModelConfigError(f"method {method!r} is not available for {name} ({type(tower).__name__}): it needs "
                                   f"{'; '.join(missing)}. Methods for this model: {', '.join(ok)}")
        if map_text not in MAP_TEXT:
            raise ModelConfigError(f"map_text must be one of {MAP_TEXT}, got {map_text!r}")
        resize = preprocess.get("resize", "squash")
        if resize not in RESIZE_MODES:
            raise ModelConfigError(f"preprocess.resize must be one of {RESIZE_MODES}, got {resize!r}")
        self.name = name
        self.method = method
        self.tower = tower
        self.encode_text = encode_text
        self.modules = list(modules)
        self.logit_scale = float(logit_scale)
        self.logit_bias = None if logit_bias is None else float(logit_bias)
        size = preprocess["size"]
        self.input_size = (size, size) if isinstance(size, int) else tuple(size)
        self.resize = resize
        self.interpolation = preprocess.get("interpolation", "bicubic")
        self.mean = torch.tensor(preprocess["mean"], dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(preprocess["std"], dtype=torch.float32).view(1, -1, 1, 1)
        self.host = host_transform(self.input_size, resize, self.interpolation, preprocess)
        self.prompt_cfg = dict(prompts or {})
        self.map_text = map_text
        self._map_size = tuple(map_size) if map_size else None
        self.info = dict(info or {})
        self.device = torch.device("cpu")
        self.prompts: ClassPrompts | None = None
        self._text_pos = self._text_neg = self._text_map = self._text_empty = None

    # -- ModelAdapter -------------------------------------------------------------------------
    @property
    def map_shape(self) -> tuple[int, int]:
        return self._map_size or tuple(self.tower.grid)

    def to(self, device, dtype=None) -> "DualEncoderAdapter":
        self.device = torch.device(device)
        for m in self.modules:
            m.to(self.device)
        for attr in ("_text_pos", "_text_neg", "_text_map", "_text_empty"):
            t = getattr(self, attr)
            if t is not None:
                setattr(self, attr, t.to(self.device))
        return self

    @torch.no_grad()
    def set_classes(self, classes: Sequence[str]) -> None:
        self.classes = tuple(classes)
        self.prompts = build_prompts(self.classes, self.prompt_cfg)
        pos = self._embed(list(self.prompts.positive))
        neg = self._embed(list(self.prompts.negative)) if self.prompts.style == "pair" else None
        self._text_pos, self._text_neg = pos, neg
        if neg is not None and self.map_text == "contrast":
            self._text_map = F.normalize(pos - neg, dim=-1)
        else:
            self._text_map = pos
        self._text_empty = None
        if "empty_prompt" in self.map_method.needs and len(self.classes) == 1:
            self._text_empty = self._embed([""])[0]  # CLIP Surgery's redundant feature for a single class

    def image_transform(self, dataset: str | None = None) -> DualEncoderTransform | None:
        """open_clip's own transform on originals (squash and square crop); None otherwise."""
        return self.host

    def __call__(self, images: torch.Tensor, orig_size: torch.Tensor) -> AdapterOutput:
        if self._text_pos is None:
            raise RuntimeError("set_classes() must be called before the adapter is run")
        if images.dtype == torch.uint8:  # stored S x S images: resample on the device
            boxes = frame_boxes(orig_size, self.resize, images.shape[-1])
            pixels = self._pixels(images, boxes)
        else:  # inputs the runner prepared from the originals with self.host
            boxes = self.host.boxes(orig_size.cpu())
            pixels = images.to(self.device)
        extra = {"empty_text": self._text_empty} if "empty_prompt" in self.map_method.needs else {}
        image, maps = self.map_method(self.tower, pixels, self._text_map, **extra)
        img = F.normalize(image.float(), dim=-1)
        logits = self.logit_scale * (img @ self._text_pos.T)
        if self._text_neg is not None:
            # softmax over (pos, neg) == sigmoid(l_pos - l_neg); a shared bias cancels
            scores = logits - self.logit_scale * (img @ self._text_neg.T)
        else:
            scores = logits + (self.logit_bias or 0.0)
        maps = undo_box(maps.float(), boxes, self.map_shape)
        return AdapterOutput(scores.float(), maps)

    def phrase_outputs(self, images: torch.Tensor, orig_size: torch.Tensor, texts, rows):
        """Phrase rows: each text through the text tower as written (its own tokenisation, no prompt
        template), the map by the adapter's method for that text, the score cos(image, text)."""
        if images.dtype == torch.uint8:
            boxes = frame_boxes(orig_size, self.resize, images.shape[-1])
            pixels = self._pixels(images, boxes)
        else:
            boxes = self.host.boxes(orig_size.cpu())
            pixels = images.to(self.device)
        with torch.no_grad():
            text = self._embed(list(texts))  # (Q, E), normalised
        image, maps = METHODS.get(self.method)(self.tower, pixels, text)  # maps (B, Q, h, w)
        rows = torch.as_tensor(rows, dtype=torch.long, device=maps.device)
        cols = torch.arange(rows.shape[0], device=maps.device)
        img = F.normalize(image.float(), dim=-1)
        scores = (img[rows] * text.to(img.device)).sum(-1)
        maps = undo_box(maps.float(), boxes, self.map_shape)
        return scores.float(), maps[rows, cols]

    def provenance(self) -> dict:
        out = {
            "adapter": type(self).__name__,
            "method": self.method,
            "layers": self.map_method.description,
            "method_reference": self.map_method.reference,
            "preprocess": {"size": list(self.input_size), "resize": self.resize,
                           "interpolation": self.interpolation,
                           "mean": self.mean.flatten().tolist(), "std": self.std.flatten().tolist()},
            "logit_scale": self.logit_scale, "logit_bias": self.logit_bias,
            "map_text": self.map_text, "map_shape": list(self.map_shape),
            "originals": self.host.describe() if self.host else "not used (stored image only)",
            "score": ("logit of softmax(pos, neg): scale*(cos_pos - cos_neg)"
                      if self.prompt_cfg.get("style", "single") == "pair"
                      else "scale*cos(image, prompt)" + (" + bias" if self.logit_bias is not None else "")),
        }
        if self.prompts is not None:
            out["prompts"] = self.prompts.to_dict(self.classes)
        out.update(self.info)
        return out

    # -- helpers ------------------------------------------------------------------------------

    def _embed(self, texts: list[str]) -> torch.Tensor:
        emb = self.encode_text(texts)
        return F.normalize(emb.float(), dim=-1).to(self.device)

    def _pixels(self, images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        x = model_input(images, boxes, self.input_size, self.resize, self.interpolation)
        x = x.expand(-1, self.mean.shape[1], -1, -1)
        return (x - self.mean.to(x.device)) / self.std.to(x.device)


def host_transform(size: tuple[int, int], resize: str, interpolation: str, preprocess: Mapping[str, Any]):
    """The host-side transform used when the store keeps originals: open_clip's evaluation
    transform for ``squash`` and (square) ``crop``; None for ``pad`` and filters PIL lacks here."""
    if resize == "pad" or interpolation not in PIL_FILTERS or (resize == "crop" and size[0] != size[1]):
        return None
    return DualEncoderTransform(size=tuple(int(v) for v in size), mode=resize, filter=interpolation,
                                mean=tuple(float(v) for v in preprocess["mean"]),
                                std=tuple(float(v) for v in preprocess["std"]),
                                crop_offset=preprocess.get("crop_offset", "round"))
