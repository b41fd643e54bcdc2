"""CheXzero (Tiu et al., Nature BME 2022): OpenAI CLIP ViT-B/32 fine-tuned on MIMIC-CXR, through open_clip.

The released checkpoints are ``torch.save(model.state_dict())`` of OpenAI's CLIP module
(rajpurkarlab/CheXzero ``run_train.py:136-137``); open_clip's CLIP keeps OpenAI's parameter names,
so ``ViT-B-32-quickgelu`` loads them strictly. What is CheXzero's own is kept here:

* the image path (:class:`CheXzeroTransform`): ``data_process.py:31-41`` letterboxes every image
  to 320 x 320 (PIL LANCZOS of the longer side, black padding), ``zero_shot.py:377-386`` then
  normalises on the 0-255 scale with one grey mean/std and resizes to 224 (bicubic, on the tensor);
* the zero-shot rule (``zero_shot.py:244-261``): prompts ``("{}", "no {}")`` and
  p = exp(cos_pos) / (exp(cos_pos) + exp(cos_neg)) over **raw cosines** (no logit scale,
  ``zero_shot.py:152-156``). XBench writes the equivalent logit cos_pos - cos_neg, so the
  adapter's ``logit_scale`` is 1.

Maps come from the generic dual-encoder saliency methods on the 7 x 7 patch grid of the
letterboxed frame, resampled onto the whole image (the padding is dropped).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import torch

from xbench.extract.models.dual import DualEncoderAdapter
from xbench.extract.models.pixels import ImageTransform

#: ``zero_shot.py:379``: a grey mean / std on the 0-255 scale, the same for the three channels
CHEXZERO_MEAN = 101.48761
CHEXZERO_STD = 83.43944
CHEXZERO_DEFAULTS = {
    "model": "ViT-B-32-quickgelu",  # zero_shot.py:88 clip.load("ViT-B/32"); OpenAI CLIP uses QuickGELU
    "quick_gelu": True,
    "prompts": {"style": "pair", "positive": "{}", "negative": "no {}",
                "origin": "CheXzero (rajpurkarlab/CheXzero) notebooks/zero_shot.ipynb cxr_pair_template "
                          "('{}', 'no {}'); zero_shot.py:244-261 run_softmax_eval"},
}


@dataclass(frozen=True)
class CheXzeroTransform(ImageTransform):
    """``data_process.preprocess`` then the ``zero_shot.make`` transform, on one grey image.

    The longer side is resized to ``canvas`` with PIL LANCZOS (new size ``int(side * ratio)``),
    pasted on a black ``canvas`` square at ``((canvas - w) // 2, (canvas - h) // 2)``; the 0-255
    floats are normalised with :data:`CHEXZERO_MEAN` / :data:`CHEXZERO_STD`, then resized to
    ``size`` (torchvision ``Resize``, bicubic, antialiased, on the tensor) in that order, as upstream.
    The letterbox comes from ``orig_size``, so a stored stretched S x S image is un-stretched by
    the same resize (hence usable on stored images too).
    """

    canvas: int = 320
    size: int = 224
    mean: float = CHEXZERO_MEAN
    std: float = CHEXZERO_STD
    only_original = False

    def frame(self, orig_size: tuple[int, int]) -> tuple[int, int, int, int]:
        """(content h, content w, top, left) of the letterbox for an original (h, w)."""
        h, w = max(1, int(orig_size[0])), max(1, int(orig_size[1]))
        ratio = float(self.canvas) / max(h, w)
        # upstream: int(x * ratio) (a zero side would crash PIL there; it is kept >= 1 here)
        nh, nw = max(1, int(h * ratio)), max(1, int(w * ratio))
        return nh, nw, (self.canvas - nh) // 2, (self.canvas - nw) // 2

    def letterbox(self, image: np.ndarray, orig_size: tuple[int, int]) -> np.ndarray:
        """The ``canvas`` x ``canvas`` uint8 image upstream stores in its HDF5 file."""
        from PIL import Image

        nh, nw, top, left = self.frame(orig_size)
        out = Image.new("L", (self.canvas, self.canvas))
        out.paste(Image.fromarray(image).resize((nw, nh), Image.LANCZOS), (left, top))
        return np.asarray(out)

    def apply(self, image: np.ndarray, orig_size: tuple[int, int]) -> torch.Tensor:
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as TF

        x = torch.from_numpy(self.letterbox(image, orig_size).astype(np.float32))
        x = x.unsqueeze(0).repeat(3, 1, 1)
        x = TF.normalize(x, [self.mean] * 3, [self.std] * 3)
        return TF.resize(x, [self.size, self.size], interpolation=InterpolationMode.BICUBIC, antialias=True)

    def boxes(self, orig_size: torch.Tensor) -> torch.Tensor:
        """(B, 4) model frames (the whole canvas) in normalised whole-image coordinates."""
        out = torch.empty(orig_size.shape[0], 4, dtype=torch.float64)
        for i, (h, w) in enumerate(orig_size.tolist()):
            nh, nw, top, left = self.frame((h, w))
            c = self.canvas
            out[i] = torch.tensor([-left / nw, -top / nh, (c - left) / nw, (c - top) / nh], dtype=torch.float64)
        return out

    def describe(self) -> str:
        return (f"PIL LANCZOS of the longer side to {self.canvas}, black letterbox {self.canvas}x{self.canvas}, "
                f"0-255 floats, Normalize({self.mean}, {self.std}), Resize({self.size}, BICUBIC, antialias) "
                "on the tensor (CheXzero data_process.py:31-41, zero_shot.py:377-386)")


class CheXzeroAdapter(DualEncoderAdapter):
    """The generic dual encoder with CheXzero's image path on every input (stored or original)."""

    def image_transform(self, dataset: str | None = None) -> CheXzeroTransform:
        return self.host

    def __call__(self, images: torch.Tensor, orig_size: torch.Tensor):
        if images.dtype == torch.uint8:  # called directly on stored images: same host transform
            images = self.host.batch(images.cpu(), orig_size.cpu()).to(self.device)
        return super().__call__(images, orig_size)


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"chexzero": "build"}


def build(config: Mapping[str, Any]) -> CheXzeroAdapter:
    """Registry factory ``chexzero``: ``weights`` = a CheXzero ``.pt`` state dict (or ``random``)."""
    from xbench.extract.models.openclip import load_model, vision_tower
    from xbench.extract.models.presets import _with, chexzero_preflight

    cfg = _with(CHEXZERO_DEFAULTS, config)
    chexzero_preflight(cfg)
    model, tokenizer, res = load_model(cfg)
    transform = CheXzeroTransform()

    def encode_text(texts: list[str]) -> torch.Tensor:
        device = next(model.parameters()).device
        return model.encode_text(tokenizer(texts).to(device))

    size = transform.size
    adapter = CheXzeroAdapter(
        name=str(cfg.get("name") or "chexzero"), tower=vision_tower(model), encode_text=encode_text,
        modules=[model], logit_scale=1.0,  # upstream softmaxes raw cosines
        preprocess={"size": size, "mean": [CHEXZERO_MEAN / 255] * 3, "std": [CHEXZERO_STD / 255] * 3,
                    "resize": "pad", "interpolation": "bicubic"},
        method=cfg.get("method", "similarity"), prompts=cfg.get("prompts"), map_size=cfg.get("map_size"),
        map_text=cfg.get("map_text", "positive"),
        info={"backend": "open_clip", "model": "CheXzero " + str(cfg.get("model")),
              "weights": res["checkpoint"] or "random", "quick_gelu": res["quick_gelu"],
              "tokenizer": res["tokenizer"], "preprocess_official": transform.describe(),
              "score": "cos_pos - cos_neg (logit of CheXzero's softmax over raw cosines)"})
    adapter.host = transform
    return adapter
