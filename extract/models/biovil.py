"""BioViL (Boecking et al., ECCV 2022) and BioViL-T (Bannur et al., CVPR 2023), XBench's own code.

The authors' package is ``hi-ml-multimodal`` (import ``health_multimodal``, microsoft/hi-ml). It is
not needed at run time: what its inference path does is written out here, checked side by side
against version 0.2.2 (model_cards/biovil.md, "Verified"). Paths below are in
``hi-ml-multimodal/src/health_multimodal/``.

* Image model (``image/model/model.py:34-115``, ``encoder.py:24-141``): a torchvision ResNet up to
  ``layer4`` (``resnet.py:37-50``); BioViL-T adds a 1x1 conv to 256 channels concatenated with a
  learnt "missing previous image" embedding (its temporal pooler runs only with a prior image,
  ``encoder.py:122-133``); a 1x1-conv MLP projector (conv, BatchNorm, ReLU, conv; ``modules.py``)
  gives the projected patch embeddings; their mean is the global embedding.
* Text model (``text/model/modelling_cxrbert.py``): CXR-BERT, the [CLS] state of the last layer
  through a projection head (dense, GELU, LayerNorm eps 1e-12, dense). Prompts lose trailing
  ``!?.`` and are padded to the longest (``text/data/io.py:38-44``).
* Image path (``image/data/io.py:16-68``, ``image/data/transforms.py:28-38``): min-max stretch to
  uint8 (truncation), PIL grey, ``Resize(512)`` of the shorter side (bilinear), ``CenterCrop``
  (480 BioViL, 448 BioViL-T: ``image/utils.py:31-42``), ``ToTensor``, grey copied to 3 channels; no
  mean/std normalisation.
* Map (``vlp/inference_engine.py:57-158``): cos(L2-normalised projected patch, text) on the patch
  grid, ``scipy.ndimage.gaussian_filter`` sigma 1.5, then ``F.interpolate`` onto the crop's extent
  in original pixels (side ``int(crop * min(h, w) / resize)``) and NaN padding around it.

XBench writes maps on a fixed grid covering the whole image: each output cell takes the value of
the authors' full-resolution map at the original pixel holding the cell's centre (so with
``map_size`` = the original size the two are the same array), and the pixels their map leaves NaN
(outside the crop) get the map's minimum, XBench's convention for cells a model never saw.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from xbench.extract.models.biovil_weights import VARIANTS, resolve_weights
from xbench.extract.models.dual import DualEncoderAdapter
from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError
from xbench.extract.models.files import check_model_json, read_model_json
from xbench.extract.models.pixels import ImageTransform

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # extraction never downloads

RESIZE = 512  # image/utils.py:13 TRANSFORM_RESIZE
SIGMA = 1.5  # vlp/inference_engine.py:92
INTERPOLATIONS = ("nearest", "bilinear", "bicubic")


#: The authors' zero-shot rule (test_multimodal/vlp/test_zero_shot_classification.py:39-56, 147-157):
#: a class is present when cos(image, positive prompts) > cos(image, negative prompts). XBench writes
#: cos_pos - cos_neg (logit scale 1); the templates are the first sentence of each of their lists.
BIOVIL_PROMPTS = {
    "style": "pair", "positive": "Findings consistent with {}", "negative": "There is no {}",
    "origin": "hi-ml-multimodal test_zero_shot_classification.py:43-54 (first positive / negative "
              "pneumonia prompt as a template); rule pos > neg, lines 147-157",
}


# -- image path ------------------------------------------------------------------------------------
def remap_to_uint8(image: np.ndarray) -> np.ndarray:
    """Min-max stretch to 0..255, truncated to uint8 (``image/data/io.py:16-43`` without percentiles).

    A constant image has no range; upstream divides by zero there (NaN cast to uint8), XBench gives zeros.
    """
    a = image.astype(np.float64)
    a -= a.min()
    top = a.max()
    if top <= 0:
        return np.zeros(image.shape, np.uint8)
    a /= top
    a *= 255
    return a.astype(np.uint8)


def resized_size(orig_size: tuple[int, int], resize: int) -> tuple[int, int]:
    """torchvision ``Resize(int)``: the shorter side becomes ``resize``, the longer int(resize * long / short)."""
    h, w = max(1, int(orig_size[0])), max(1, int(orig_size[1]))
    return (resize, int(resize * w / h)) if h <= w else (int(resize * h / w), resize)


def crop_extent(orig_size: tuple[int, int], resize: int, crop: int) -> tuple[int, int, int]:
    """(top, left, side) in original pixels where the authors put the crop's map
    (``vlp/inference_engine.py:136-150``: side int(crop * min / resize), NaN margins floor / ceil)."""
    h, w = int(orig_size[0]), int(orig_size[1])
    side = int(crop * min(h, w) / resize)
    return (h - side) // 2, (w - side) // 2, side


@dataclass(frozen=True)
class BioViLTransform(ImageTransform):
    """The authors' inference transform on one grey image (original or stored stretched S x S).

    The resize target comes from ``orig_size``, so a stored stretched image is brought back to the
    original's aspect ratio by the same call (one resampling more than from the original).
    """

    resize: int = RESIZE
    crop: int = 480
    only_original = False

    def apply(self, image: np.ndarray, orig_size: tuple[int, int]) -> torch.Tensor:
        from PIL import Image
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as TF

        pil = Image.fromarray(remap_to_uint8(image)).convert("L")
        pil = TF.resize(pil, list(resized_size(orig_size, self.resize)), interpolation=InterpolationMode.BILINEAR)
        x = TF.to_tensor(TF.center_crop(pil, [self.crop, self.crop]))
        return torch.repeat_interleave(x, 3, dim=0)

    def describe(self) -> str:
        return (f"min-max stretch to uint8, PIL grey, Resize({self.resize}, BILINEAR) of the shorter side, "
                f"CenterCrop({self.crop}), ToTensor, grey x3, no normalisation (hi-ml-multimodal image/data/io.py:16-68, "
                "image/data/transforms.py:28-38)")


# -- maps --------------------------------------------------------------------------------------------
def gaussian_smooth(maps: torch.Tensor, sigma: float) -> torch.Tensor:
    """``scipy.ndimage.gaussian_filter(m, (sigma, sigma))`` of every (h, w) map, in float32 as upstream."""
    if sigma <= 0:
        return maps.float()
    from scipy import ndimage

    arr = maps.detach().float().cpu().numpy()
    out = np.empty_like(arr)
    for idx in np.ndindex(arr.shape[:-2]):
        out[idx] = ndimage.gaussian_filter(arr[idx], sigma=(sigma, sigma), order=0)
    return torch.from_numpy(out).to(maps.device)


def _cell_pixels(n_out: int, n_px: int) -> torch.Tensor:
    """Index of the original pixel holding the centre of each of ``n_out`` cells along an axis."""
    i = torch.arange(n_out, dtype=torch.int64)
    return ((2 * i + 1) * n_px) // (2 * n_out)


def _interp_axis(x: torch.Tensor, size: int, axis: int, mode: str) -> torch.Tensor:
    """F.interpolate along one axis of (N, 1, h, w) (the other kept): separable, as upstream's 2-D call."""
    h, w = x.shape[-2:]
    shape = (size, w) if axis == 0 else (h, size)
    return F.interpolate(x, size=shape, mode=mode, **({} if mode == "nearest" else {"align_corners": False}))


def whole_image_maps(grid: torch.Tensor, orig_size: tuple[int, int], out_shape: tuple[int, int], *,
                     resize: int, crop: int, interpolation: str) -> torch.Tensor:
    """(C, gh, gw) smoothed crop-frame maps of one image -> (C, H, W) on the whole image.

    Cell (i, j) is the authors' full-resolution map (``convert_similarity_to_image_size``) at the
    original pixel holding the cell's centre; pixels outside the crop get the map's minimum.
    """
    C, gh, gw = grid.shape
    H, W = out_shape
    top, left, side = crop_extent(orig_size, resize, crop)
    rows = _cell_pixels(H, int(orig_size[0])) - top
    cols = _cell_pixels(W, int(orig_size[1])) - left
    x = grid.float().cpu().unsqueeze(1)
    if side < 1:  # a degenerate image (a side below resize / crop pixels): nothing inside the crop
        return x.amin(dim=(2, 3)).view(C, 1, 1).expand(C, H, W).clone()
    x = _interp_axis(x, side, 0, interpolation)[:, :, rows.clamp(0, side - 1)]
    x = _interp_axis(x, side, 1, interpolation)[:, :, :, cols.clamp(0, side - 1)]
    inside = ((rows >= 0) & (rows < side)).view(H, 1) & ((cols >= 0) & (cols < side)).view(1, W)
    low = grid.float().cpu().amin(dim=(1, 2)).view(C, 1, 1)
    return torch.where(inside, x[:, 0], low).to(grid.device)


# -- image model ---------------------------------------------------------------------------------------
def _grid_side(n: int) -> int:
    """Side of a torchvision ResNet's layer4 output: stem conv, max pool and three stages halve, rounding up."""
    for _ in range(5):
        n = (n + 1) // 2
    return n


class _Encoder(nn.Module):
    """``encoder.encoder`` (the ResNet) and, for BioViL-T, ``backbone_to_vit`` + ``missing_previous_emb``."""

    def __init__(self, block: type, layers: Sequence[int], temporal_dim: int | None) -> None:
        super().__init__()
        from torchvision.models.resnet import ResNet

        self.encoder = ResNet(block, list(layers))  # keeps fc: the released checkpoints hold it
        self.temporal = temporal_dim is not None
        if self.temporal:
            width = 512 * block.expansion
            self.backbone_to_vit = nn.Conv2d(width, temporal_dim, kernel_size=1, bias=False)
            self.missing_previous_emb = nn.Parameter(torch.zeros(1, temporal_dim, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = self.encoder
        x = r.maxpool(r.relu(r.bn1(r.conv1(x))))
        x = r.layer4(r.layer3(r.layer2(r.layer1(x))))
        if self.temporal:  # no prior image: the learnt embedding stands for the difference features
            x = self.backbone_to_vit(x)
            x = torch.cat([x, self.missing_previous_emb.expand(x.shape[0], -1, *x.shape[2:])], dim=1)
        return x


class _Projector(nn.Module):
    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Conv2d(d_in, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                                   nn.ReLU(inplace=True), nn.Conv2d(hidden, d_out, 1, bias=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class BioViLImageModel(nn.Module):
    """The released image checkpoint's module layout, built from the checkpoint's own tensor shapes."""

    #: keys of the checkpoint XBench does not use: the temporal pooler (prior image only) and a classifier
    IGNORED = ("encoder.vit_pooler.", "classifier.")

    def __init__(self, state: Mapping[str, torch.Tensor]) -> None:
        super().__init__()
        from torchvision.models.resnet import BasicBlock, Bottleneck

        block = Bottleneck if "encoder.encoder.layer1.0.conv3.weight" in state else BasicBlock
        layers = [1 + max((int(k.split(".")[3]) for k in state if k.startswith(f"encoder.encoder.layer{i}.")),
                          default=-1) for i in range(1, 5)]
        if min(layers) < 1:
            raise ModelConfigError("BioViL image checkpoint: no ResNet stages under encoder.encoder.layer1-4")
        t = state.get("encoder.backbone_to_vit.weight")
        self.encoder = _Encoder(block, layers, None if t is None else int(t.shape[0]))
        w0, w3 = state["projector.model.0.weight"], state["projector.model.3.weight"]
        self.projector = _Projector(int(w0.shape[1]), int(w0.shape[0]), int(w3.shape[0]))
        self.arch = f"resnet{'50' if block is Bottleneck else '18'}-like {layers}" + (" + temporal head" if t is not None else "")

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


def load_image_model(path: Path) -> BioViLImageModel:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ModelConfigError(f"BioViL image weights {path}: cannot read ({type(e).__name__}: {e})") from None
    if not isinstance(state, Mapping) or "projector.model.0.weight" not in state:
        raise ModelConfigError(f"BioViL image weights {path}: not a hi-ml-multimodal ImageModel state dict "
                               "(no projector.model.0.weight)")
    state = {k: v for k, v in state.items() if not k.startswith(BioViLImageModel.IGNORED)}
    model = BioViLImageModel(state)
    _load_strict(model, state, f"BioViL image weights {path}")
    return model.eval().requires_grad_(False)


def _load_strict(module: nn.Module, state: Mapping[str, torch.Tensor], what: str) -> None:
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        first = str(e).splitlines()[0:2]
        raise ModelConfigError(f"{what}: does not match the expected layout ({' '.join(first)[:300]})") from None


class ResNetTower:
    """The VisionTower view of the image model: layer4 features as tokens (no prefix token), the
    projector per token as ``patches``, their mean as the image embedding. A CNN has no attention
    blocks, so only methods needing at most gradients apply (``similarity``, ``gradcam``)."""

    n_prefix = 0
    capabilities = frozenset({"gradients"})

    def __init__(self, model: BioViLImageModel, crop: int) -> None:
        self.model = model
        self.grid = (_grid_side(crop), _grid_side(crop))

    def tokens_before_last(self, pixels: torch.Tensor) -> torch.Tensor:
        f = self.model.features(pixels)
        if tuple(f.shape[-2:]) != self.grid:
            raise ValueError(f"feature grid {tuple(f.shape[-2:])} != expected {self.grid}")
        return f.flatten(2).transpose(1, 2)

    def last_block(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        f = self.model.projector(x.transpose(1, 2).reshape(B, D, *self.grid))
        return f.flatten(2).transpose(1, 2)

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        return self.patches(x).mean(dim=1)  # model.py:85 mean of the projected patch embeddings


# -- text model --------------------------------------------------------------------------------------
class _ProjectionHead(nn.Module):
    def __init__(self, hidden: int, size: int) -> None:
        super().__init__()
        self.dense_to_hidden = nn.Linear(hidden, size)
        self.LayerNorm = nn.LayerNorm(size, eps=1e-12)
        self.dense_to_output = nn.Linear(size, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense_to_output(self.LayerNorm(F.gelu(self.dense_to_hidden(x))))


class CXRBertText(nn.Module):
    """CXR-BERT's encoder (``bert.*``) and ``cls_projection_head``; the MLM head (``cls.*``) is not needed."""

    def __init__(self, config) -> None:
        super().__init__()
        from transformers import BertModel

        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls_projection_head = _ProjectionHead(config.hidden_size, int(getattr(config, "projection_size", 128)))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.cls_projection_head(h[:, 0])


def load_text_model(folder: Path):
    """(tokenizer, CXRBertText) from a CXR-BERT folder: config.json, vocab.txt, model weights."""
    from transformers import BertConfig, BertTokenizer

    cfg_path = folder / "config.json"
    if not cfg_path.is_file() or not (folder / "vocab.txt").is_file():
        raise WeightsNotFoundError("CXR-BERT text model", f"config.json and vocab.txt in {folder}",
                                   "Pass text_encoder=FOLDER holding the downloaded Hugging Face repository.")
    raw = read_model_json(cfg_path, "CXR-BERT text model config")
    raw.pop("model_type", None)  # "cxr-bert": a BertConfig with projection_size
    try:
        config = BertConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "auto_map")})
        config.projection_size = int(raw.get("projection_size", 128))
    except (TypeError, ValueError) as exc:
        raise ModelConfigError(f"CXR-BERT text model config: {cfg_path}: {str(exc)[:200]}") from None
    model = CXRBertText(config)
    state = _read_weights(folder)
    state = {k: v for k, v in state.items() if k.startswith(("bert.", "cls_projection_head."))
             and not k.endswith("embeddings.position_ids")}
    _load_strict(model, state, f"CXR-BERT weights in {folder}")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):  # bounded before transformers reads them
        check_model_json(folder / name, "CXR-BERT tokenizer")
    return BertTokenizer.from_pretrained(str(folder)), model.eval().requires_grad_(False)


def _read_weights(folder: Path) -> dict:
    st, pt = folder / "model.safetensors", folder / "pytorch_model.bin"
    if st.is_file():
        from safetensors.torch import load_file

        return load_file(str(st))
    if pt.is_file():
        try:
            return torch.load(pt, map_location="cpu", weights_only=True)  # tensors only: nothing from the file runs
        except Exception as e:  # noqa: BLE001 - torch raises several unpickling error types
            raise ModelConfigError(f"CXR-BERT weights {pt}: cannot read as weights only ({type(e).__name__}: "
                                   f"{str(e).splitlines()[0][:160] if str(e) else ''})") from None
    raise WeightsNotFoundError("CXR-BERT text model", f"model.safetensors or pytorch_model.bin in {folder}",
                               "Download the model repository (all files) to that folder.")


def encode_text_fn(tokenizer, model: CXRBertText, max_positions: int):
    """The authors' ``get_embeddings_from_prompt`` (unnormalised): checks, rstrip('!?.'), longest padding."""
    specials = [t for t in tokenizer.all_special_tokens if t != tokenizer.mask_token]

    def encode(texts: list[str]) -> torch.Tensor:
        bad = [t for t in texts if any(s in t for s in specials)]
        if bad:  # text/data/io.py:52-57
            raise ModelConfigError(f"BioViL text {bad[0]!r} contains a special token ({', '.join(specials)})")
        tok = tokenizer([t.rstrip("!?.") for t in texts], add_special_tokens=True, padding="longest",
                        return_tensors="pt")
        if tok["input_ids"].shape[1] > max_positions:  # text/inference_engine.py:43-48
            raise ModelConfigError(f"BioViL text of {tok['input_ids'].shape[1]} tokens is longer than the model's "
                             f"{max_positions} positions")
        device = next(model.parameters()).device
        return model(tok["input_ids"].to(device), tok["attention_mask"].to(device))

    return encode


# -- adapter ---------------------------------------------------------------------------------------------
class BioViLAdapter(DualEncoderAdapter):
    """The dual encoder with BioViL's image path, Gaussian smoothing and crop-aware upsampling."""

    def image_transform(self, dataset: str | None = None) -> BioViLTransform:
        return self.host

    def _maps(self, pixels: torch.Tensor, orig_size: torch.Tensor, text: torch.Tensor):
        image, grid = self.map_method(self.tower, pixels, text)
        grid = gaussian_smooth(grid, self.sigma)
        out = [whole_image_maps(grid[i], tuple(orig_size[i].tolist()), self.map_shape, resize=self.host.resize,
                                crop=self.host.crop, interpolation=self.upsample) for i in range(grid.shape[0])]
        return F.normalize(image.float(), dim=-1), torch.stack(out).to(grid.device)

    def __call__(self, images: torch.Tensor, orig_size: torch.Tensor):
        from xbench.extract.models.base import AdapterOutput

        if self._text_pos is None:
            raise RuntimeError("set_classes() must be called before the adapter is run")
        pixels = self.inputs(images.cpu() if images.dtype == torch.uint8 else images, orig_size.cpu())
        img, maps = self._maps(pixels.to(self.device), orig_size.cpu(), self._text_map)
        scores = img @ self._text_pos.T
        if self._text_neg is not None:
            scores = scores - img @ self._text_neg.T
        return AdapterOutput((self.logit_scale * scores).float(), maps.float())

    def phrase_outputs(self, images: torch.Tensor, orig_size: torch.Tensor, texts, rows):
        """Each phrase as written (no template); score cos(image, phrase) as ``get_similarity_score_from_raw_data``."""
        pixels = self.inputs(images.cpu() if images.dtype == torch.uint8 else images, orig_size.cpu())
        with torch.no_grad():
            text = self._embed(list(texts))
        img, maps = self._maps(pixels.to(self.device), orig_size.cpu(), text)
        rows = torch.as_tensor(rows, dtype=torch.long, device=maps.device)
        cols = torch.arange(rows.shape[0], device=maps.device)
        scores = (img[rows] * text.to(img.device)).sum(-1)
        # detached: a gradient method's maps carry the graph, and the runner copies them to numpy
        return scores.detach().float(), maps[rows, cols].detach().float()


def _build(variant: str, config: Mapping[str, Any]) -> BioViLAdapter:
    from xbench.extract.models.presets import _with

    v = VARIANTS[variant]
    cfg = _with({"prompts": BIOVIL_PROMPTS, "interpolation": "bilinear", "sigma": SIGMA, "crop": v.crop,
                 "resize": RESIZE}, config)
    interpolation = str(cfg["interpolation"])
    if interpolation not in INTERPOLATIONS:
        raise ModelConfigError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}")
    sigma, resize, crop = float(cfg["sigma"]), int(cfg["resize"]), int(cfg["crop"])
    if not (sigma >= 0 and math.isfinite(sigma)) or crop < 32 or resize < crop:
        raise ModelConfigError(f"need sigma >= 0 and 32 <= crop <= resize, got sigma={sigma}, crop={crop}, resize={resize}")
    image_path, text_dir = resolve_weights(variant, cfg)
    image_model = load_image_model(image_path)
    tokenizer, text_model = load_text_model(text_dir)
    transform = BioViLTransform(resize=resize, crop=crop)
    adapter = BioViLAdapter(
        name=str(cfg.get("name") or variant), tower=ResNetTower(image_model, crop),
        encode_text=encode_text_fn(tokenizer, text_model, int(text_model.bert.config.max_position_embeddings)),
        modules=[image_model, text_model], logit_scale=1.0,
        preprocess={"size": crop, "mean": [0.0] * 3, "std": [1.0] * 3, "resize": "crop", "interpolation": "bilinear"},
        method=cfg.get("method", "similarity"), prompts=cfg.get("prompts"), map_size=cfg.get("map_size"),
        map_text=cfg.get("map_text", "positive"),
        info={"backend": "xbench (hi-ml-multimodal 0.2.2 pipeline)", "model": v.title,
              "image_arch": image_model.arch, "weights": str(image_path), "text_encoder": str(text_dir),
              "preprocess_official": transform.describe(),
              "map_postprocess": f"gaussian_filter sigma {sigma}, {interpolation} upsampling onto the crop's "
                                 "extent in original pixels, sampled at cell centres; outside the crop = map minimum",
              "score": "cos_pos - cos_neg (the authors' rule: positive when cos_pos > cos_neg)"})
    adapter.host = transform
    adapter.sigma, adapter.upsample = sigma, interpolation
    return adapter


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"biovil": "build_biovil", "biovil_t": "build_biovil_t"}


def build_biovil(config: Mapping[str, Any]) -> BioViLAdapter:
    """Registry factory ``biovil``: ``weights`` = the image .pt or a folder with it and CXR-BERT-specialized."""
    return _build("biovil", config)


def build_biovil_t(config: Mapping[str, Any]) -> BioViLAdapter:
    """Registry factory ``biovil_t``: ``weights`` = the BioViL-T image .pt or the BiomedVLP-BioViL-T folder."""
    return _build("biovil_t", config)
