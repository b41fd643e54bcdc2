"""MedCLIP (Wang et al., EMNLP 2022): Swin-T or ResNet-50 image encoder + Bio_ClinicalBERT, own code.

The ``medclip`` package (RyanWangZf/MedCLIP 0.0.3) cannot be imported with the transformers this
project supports: ``medclip/dataset.py:15`` imports ``CLIPFeatureExtractor``, which transformers 5
removed, and ``requirements.txt`` pins ``transformers<=4.24``. Everything is therefore written here
from its published pipeline (file:line in ``model_cards/medclip.md``) and checked beside the
authors' code on the same random weights (``/work/verify/medclip``):

* the checkpoint is ``MedCLIPModel.state_dict()`` (``pytorch_model.bin``): ``vision_model.model``
  (a transformers ``SwinModel``, or a torchvision ResNet-50 whose ``fc`` is the projection),
  ``vision_model.projection_head`` (Swin only), ``text_model.model`` (BERT),
  ``text_model.projection_head`` and ``logit_scale``. Swin keys saved by transformers 4.x are
  renamed to the installed layout (:data:`SWIN_RENAMES`) only where the installed model needs it;
* the image path (:class:`MedCLIPTransform`): pad to a black square of side max(224, h, w), PIL
  resize to 224 (bicubic: ``MedCLIPProcessor``; bilinear: the zero-shot ``ZeroShotImageDataset``),
  /255, one grey mean / std, the grey channel repeated to 3;
* the text path: BERT hidden states 1, 2 and the last, each averaged over **all** positions
  (padding included, as upstream), averaged, then the projection;
* the zero-shot rule (``PromptClassifier(ensemble=True)``): the mean over a class's prompts of
  exp(clamp(logit_scale, 0, 4.6052)) * cos(image, prompt), i.e. the logit scale times the image
  embedding dotted with the mean of the normalised prompt embeddings.

Maps come from the generic dual-encoder methods on the 7 x 7 grid of the padded square, resampled
onto the whole image. Swin has no class token and shifted windows, so only ``similarity``,
``maskclip`` (the last block's value path: one 7 x 7 window there, every token its own) and
``gradcam`` apply; the ResNet has no attention, so ``similarity`` and ``gradcam``. The registry
refuses the others in one line.
"""
from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from xbench.extract.models.dual import DualEncoderAdapter
from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError
from xbench.extract.models.pixels import ImageTransform
from xbench.extract.models.prompts import ClassPrompts, build_prompts

#: ``constants.py:7-9``: input side and the grey mean / std (on the 0-1 scale)
MEDCLIP_SIZE = 224
MEDCLIP_MEAN = 0.5862785803043838
MEDCLIP_STD = 0.27950088968644304
#: ``modeling_medclip.py:229``: the logit scale's log is clamped to [0, ln 100] before exp
LOGIT_SCALE_MAX = 4.6052
#: ``prompts.py:110``: the tokenizer's model_max_length
MAX_TOKENS = 77
#: ``modeling_medclip.py:36``: hidden states averaged (embedding output is 0)
TEXT_LAYERS = (1, 2, -1)
VARIANTS = ("vit", "resnet")
ENSEMBLE_FILE = Path(__file__).with_name("medclip_prompts.toml")
BIO_CLINICALBERT = "emilyalsentzer/Bio_ClinicalBERT"  # constants.py:4
WEIGHTS_NAME = "pytorch_model.bin"  # constants.py:167
#: transformers 4.x Swin names (what MedCLIP's checkpoints hold) -> transformers 5 names, in order
SWIN_RENAMES = (
    ("attention.self.query", "attention.q_proj"),
    ("attention.self.key", "attention.k_proj"),
    ("attention.self.value", "attention.v_proj"),
    ("attention.self.relative_position_bias_table", "attention.relative_position_bias.relative_position_bias_table"),
    ("attention.output.dense", "attention.o_proj"),
    ("intermediate.dense", "mlp.fc1"),
    ("output.dense", "mlp.fc2"),
)
#: buffers older transformers saved with the weights; rebuilt from the config here
NON_PARAMETERS = (r"(^|\.)embeddings\.position_ids$", r"(^|\.)relative_position_index$")


# ----------------------------------------------------------------------------------------------
# Image path
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MedCLIPTransform(ImageTransform):
    """``MedCLIPFeatureExtractor`` (``dataset.py:30-141``) on one grey image.

    The original (h, w) is pasted on a black square of side ``max(size, h, w)`` at
    ``(int((side - w) / 2), int((side - h) / 2))`` (a small image is padded, not enlarged); the
    square is resized to ``size`` with PIL (``filter``), scaled to [0, 1] and normalised with
    one grey mean / std; the channel is repeated to 3 (``modeling_medclip.py:122``).

    On a stored stretched S x S image (no original kept) the content is first resized to its
    original aspect inside the square, so the frame and the maps are the same; pixel values then
    differ from the original's by that of one more resampling.
    """

    size: int = MEDCLIP_SIZE
    filter: str = "bicubic"
    mean: float = MEDCLIP_MEAN
    std: float = MEDCLIP_STD
    only_original = False

    def __post_init__(self) -> None:
        if self.filter not in ("bicubic", "bilinear"):
            raise ModelConfigError(f"medclip: interpolation must be bicubic or bilinear, got {self.filter!r}")

    def frame(self, orig_size: tuple[int, int]) -> tuple[int, int, int]:
        """(square side, top, left) of the padding for an original (h, w)."""
        h, w = int(orig_size[0]), int(orig_size[1])
        side = max(self.size, h, w)
        return side, int((side - h) / 2), int((side - w) / 2)

    def pad(self, image: np.ndarray, orig_size: tuple[int, int]) -> np.ndarray:
        """The black square upstream builds (``pad_img``), from the original or a stored image."""
        from PIL import Image

        h, w = int(orig_size[0]), int(orig_size[1])
        side, top, left = self.frame((h, w))
        img = Image.fromarray(image)
        if image.shape != (h, w):
            img = img.resize((w, h), self._pil_filter())
        out = Image.new("L", (side, side), 0)
        out.paste(img, (left, top))
        return np.asarray(out)

    def _pil_filter(self):
        from PIL import Image

        return Image.BICUBIC if self.filter == "bicubic" else Image.BILINEAR

    def apply(self, image: np.ndarray, orig_size: tuple[int, int]) -> torch.Tensor:
        from PIL import Image

        square = Image.fromarray(self.pad(image, orig_size)).resize((self.size, self.size), self._pil_filter())
        x = torch.from_numpy(np.asarray(square, dtype=np.float32) / np.float32(255.0))
        x = (x - self.mean) / self.std
        return x.unsqueeze(0).repeat(3, 1, 1)

    def boxes(self, orig_size: torch.Tensor) -> torch.Tensor:
        """(B, 4) model frames (the whole padded square) in normalised whole-image coordinates."""
        out = torch.empty(orig_size.shape[0], 4, dtype=torch.float64)
        for i, (h, w) in enumerate(orig_size.tolist()):
            side, top, left = self.frame((h, w))
            out[i] = torch.tensor([-left / w, -top / h, (side - left) / w, (side - top) / h], dtype=torch.float64)
        return out

    def describe(self) -> str:
        return (f"black square pad of side max({self.size}, h, w) (image centred, int offsets), PIL "
                f"{self.filter.upper()} resize to {self.size}, /255, Normalize({self.mean}, {self.std}), grey "
                "repeated to 3 channels (MedCLIP dataset.py:30-141, modeling_medclip.py:122)")


# ----------------------------------------------------------------------------------------------
# Networks in the checkpoint's layout
# ----------------------------------------------------------------------------------------------
class _Part(nn.Module):
    """A child holding ``model`` (and ``projection_head``), named as in MedCLIP's state dict."""

    def __init__(self, model: nn.Module, projection_head: nn.Module | None = None) -> None:
        super().__init__()
        self.model = model
        if projection_head is not None:
            self.projection_head = projection_head


class MedCLIPNet(nn.Module):
    """``MedCLIPModel``'s parameter layout (``modeling_medclip.py:129-149``)."""

    def __init__(self, vision: _Part, text: _Part) -> None:
        super().__init__()
        self.vision_model = vision
        self.text_model = text
        self.logit_scale = nn.Parameter(torch.log(torch.tensor(1 / 0.07)))

    def scale(self) -> float:
        return float(self.logit_scale.detach().clamp(0, LOGIT_SCALE_MAX).exp())


def swin_vision(overrides: Mapping[str, Any] | None, proj_dim: int) -> _Part:
    """``MedCLIPVisionModelViT``: SwinModel (swin-tiny-patch4-window7-224 unless overridden) + projection."""
    from transformers import SwinConfig, SwinModel

    cfg = SwinConfig(**dict(overrides or {}))
    swin = SwinModel(cfg, add_pooling_layer=True)
    swin.config._attn_implementation = "eager"
    return _Part(swin, nn.Linear(swin.num_features, proj_dim, bias=False))


def resnet_vision(layers: Sequence[int], proj_dim: int) -> _Part:
    """``MedCLIPVisionModel``: torchvision ResNet-50 whose ``fc`` is the projection (no bias)."""
    from xbench.extract.models.crossattn.common import resnet_trunk

    net = resnet_trunk(layers)
    net.fc = nn.Linear(net.fc.in_features, proj_dim, bias=False)
    return _Part(net)


def rename_swin_keys(state_dict: Mapping[str, torch.Tensor], own: set[str], prefix: str) -> dict:
    """Keys of a transformers-4.x Swin under ``prefix`` renamed to the installed layout, only
    where the installed model lacks the original name (so either layout loads)."""
    out = {}
    for key, value in state_dict.items():
        if key.startswith(prefix) and key not in own:
            new = key
            for old, repl in SWIN_RENAMES:
                new = new.replace(old, repl)
            key = new if new in own else key
        out[key] = value
    return out


# ----------------------------------------------------------------------------------------------
# Vision towers (xbench.extract.saliency VisionTower views)
# ----------------------------------------------------------------------------------------------
def _swin_value(layer: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """Attention replaced by its value path: out_proj(v(h)) (transformers 5 or 4.x names)."""
    a = layer.attention
    if hasattr(a, "v_proj"):
        return a.o_proj(a.v_proj(h))
    return a.output.dense(a.self.value(h))


def _swin_mlp(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    h = layer.layernorm_after(x)
    if hasattr(layer, "mlp"):
        return layer.mlp(h)
    return layer.output.dense(layer.intermediate(h))


class SwinTower:
    """The Swin + projection split before the last block of the last stage; no class token."""

    def __init__(self, part: _Part, size: int) -> None:
        self.swin, self.proj = part.model, part.projection_head
        c = self.swin.config
        stride = c.patch_size * 2 ** (len(c.depths) - 1)
        self.grid = (size // stride, size // stride)
        self.n_prefix = 0
        self.capabilities = frozenset({"gradients", "value_path"})

    def _last(self) -> nn.Module:
        return self.swin.encoder.layers[-1].blocks[-1]

    def tokens_before_last(self, pixels: torch.Tensor) -> torch.Tensor:
        x, dims = self.swin.embeddings(pixels)
        last = self._last()
        for stage in self.swin.encoder.layers:
            for blk in stage.blocks:
                if blk is not last:
                    out = blk(x, dims)
                    x = out[0] if isinstance(out, tuple) else out
            if stage.downsample is not None:
                x = stage.downsample(x, dims)
                dims = ((dims[0] + 1) // 2, (dims[1] + 1) // 2)
        if tuple(dims) != self.grid:
            raise ValueError(f"Swin grid {tuple(dims)} differs from the expected {self.grid}")
        return x

    def last_block(self, x: torch.Tensor) -> torch.Tensor:
        out = self._last()(x, self.grid)
        return out[0] if isinstance(out, tuple) else out

    def last_block_value(self, x: torch.Tensor) -> torch.Tensor:
        blk = self._last()
        x = x + _swin_value(blk, blk.layernorm_before(x))
        return x + _swin_mlp(blk, x)

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        # SwinModel: final layernorm, AdaptiveAvgPool1d over tokens (pooler_output), then the projection
        return self.proj(self.swin.layernorm(x).mean(dim=1))

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.swin.layernorm(x))


class ResNetTower:
    """The ResNet's layer4 output as (B, h*w, 2048) tokens; the "last block" is the head
    (average pool + ``fc``), so Grad-CAM is the classic one on layer4."""

    def __init__(self, part: _Part, size: int) -> None:
        self.net = part.model
        self.grid = (size // 32, size // 32)
        self.n_prefix = 0
        self.capabilities = frozenset({"gradients"})

    def tokens_before_last(self, pixels: torch.Tensor) -> torch.Tensor:
        n = self.net
        x = n.maxpool(n.relu(n.bn1(n.conv1(pixels))))
        x = n.layer4(n.layer3(n.layer2(n.layer1(x))))
        return x.flatten(2).transpose(1, 2)

    def last_block(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.fc(x.mean(dim=1))

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.fc(x)


# ----------------------------------------------------------------------------------------------
# Text path
# ----------------------------------------------------------------------------------------------
def text_embedding(text: _Part, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``MedCLIPTextModel.forward``: hidden states 1, 2 and last, each averaged over every position
    (padding included), averaged, projected. Not normalised."""
    out = text.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    hs = out.hidden_states
    stacked = torch.stack([hs[i] for i in TEXT_LAYERS], dim=1)  # (B, 3, L, D)
    return text.projection_head(stacked.mean(dim=2).mean(dim=1))


def encode_batch(text: _Part, tokenizer, texts: Sequence[str], device) -> torch.Tensor:
    """One padded batch, as upstream tokenises a class's prompt list (``prompts.py:108-115``):
    truncation to 77 tokens, padding to the longest text of the batch."""
    tok = tokenizer(list(texts), truncation=True, padding=True, max_length=MAX_TOKENS, return_tensors="pt")
    return text_embedding(text, tok["input_ids"].to(device), tok["attention_mask"].to(device))


# ----------------------------------------------------------------------------------------------
# Prompt ensembles
# ----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _ensemble_data() -> dict:
    import tomllib

    with open(ENSEMBLE_FILE, "rb") as fh:
        return tomllib.load(fh)


def expand(components: Sequence[Sequence[str]]) -> list[str]:
    """Every combination of the component lists, outer list first, joined by single spaces."""
    return [" ".join(parts) for parts in itertools.product(*components)]


def ensembles(n: int | None = None, seed: int = 0) -> dict[str, tuple[list[str], str]]:
    """XBench finding -> (MedCLIP's prompts for it, source).

    ``n`` None keeps every combination (upstream's ``n=None``). With ``n``, each group draws as
    upstream after ``random.seed(seed)``: one generator per group, classes in upstream's order,
    ``sample(prompts, n)`` only where n is smaller than the class's count.
    """
    out = {}
    for group in _ensemble_data()["groups"].values():
        rng = random.Random(seed)
        for upstream in group["order"]:
            entry = group["classes"][upstream]
            prompts = expand(entry["components"])
            if n is not None and n < len(prompts):
                prompts = rng.sample(prompts, n)
            out[entry["finding"]] = (prompts, f"{group['source']} [{upstream}]")
    return out


def _canonical(name: str) -> str:
    return " ".join(name.replace("_", " ").split()).lower()


# ----------------------------------------------------------------------------------------------
# Adapter
# ----------------------------------------------------------------------------------------------
class MedCLIPAdapter(DualEncoderAdapter):
    """The dual-encoder adapter with MedCLIP's image path on every input and its prompt ensembles.

    A class with a MedCLIP ensemble scores scale * img . mean(normalised prompt embeddings), each
    class's prompts tokenised as one padded batch as upstream; its maps use the normalised mean.
    Other classes, and phrases, are encoded one text at a time (no padding, so a text's embedding
    does not depend on its neighbours), with the vocabulary's text for classes.
    """

    def image_transform(self, dataset: str | None = None) -> MedCLIPTransform:
        return self.host

    def _host_pixels(self, images: torch.Tensor, orig_size: torch.Tensor) -> torch.Tensor:
        if images.dtype == torch.uint8:  # called directly on stored images: the same host transform
            return self.host.batch(images.cpu(), orig_size.cpu()).to(self.device)
        return images

    def __call__(self, images: torch.Tensor, orig_size: torch.Tensor):
        return super().__call__(self._host_pixels(images, orig_size), orig_size)

    def phrase_outputs(self, images, orig_size, texts, rows):
        return super().phrase_outputs(self._host_pixels(images, orig_size), orig_size, texts, rows)

    @torch.no_grad()
    def set_classes(self, classes: Sequence[str]) -> None:
        self.classes = tuple(classes)
        fallback = build_prompts(self.classes, self.prompt_cfg)
        table = {_canonical(k): v for k, v in ensembles(self.n_prompts, self.prompt_seed).items()} \
            if self.use_ensembles else {}
        pos, texts, sources = [], [], []
        for i, c in enumerate(self.classes):
            got = table.get(_canonical(c))
            if got is not None:
                prompts, src = got
                emb = F.normalize(self.encode_batch(prompts).float(), dim=-1).mean(dim=0)
                texts.append(f"MedCLIP ensemble of {len(prompts)} prompts")
            else:
                prompts, src = [fallback.positive[i]], f"{fallback.source}: {fallback.positive[i]!r}"
                emb = self._embed(prompts)[0]
                texts.append(fallback.positive[i])
            pos.append(emb.to(self.device))
            sources.append(src)
        self._text_pos = torch.stack(pos)  # mean of unit vectors: the ensemble's mean logit
        self._text_neg = None
        self._text_map = F.normalize(self._text_pos, dim=-1)
        self._text_empty = None
        self.prompts = ClassPrompts("single", tuple(texts), (), "medclip-ensemble+" + fallback.source,
                                    "; ".join(dict.fromkeys(sources)))


def _resolve_text_encoder(cfg: Mapping[str, Any]) -> Path:
    """The Bio_ClinicalBERT folder (config.json + tokenizer files): ``text_encoder`` or the offline hub cache."""
    path = cfg.get("text_encoder")
    if not path:
        from xbench.extract.models.hub import snapshot

        path = snapshot(BIO_CLINICALBERT, "MedCLIP text encoder (Bio_ClinicalBERT config + tokenizer)",
                        f"Download it on a networked machine (`huggingface-cli download {BIO_CLINICALBERT}`) or "
                        "pass --model-option text_encoder=/path/to/Bio_ClinicalBERT.",
                        needed=f"hub id {BIO_CLINICALBERT!r}")
    p = Path(str(path)).expanduser()
    if not (p / "config.json").is_file():
        raise WeightsNotFoundError("MedCLIP text encoder", str(p / "config.json"),
                                   "Point text_encoder at a Bio_ClinicalBERT folder (config.json, vocab.txt).")
    return p


def _weights_file(weights: str) -> Path:
    p = Path(weights).expanduser()
    if p.is_dir():
        p = p / WEIGHTS_NAME
    if not p.is_file():
        raise WeightsNotFoundError(
            "MedCLIP weights", str(p),
            "Download medclip-vit-pretrained.zip or medclip-resnet-pretrained.zip (links in RyanWangZf/MedCLIP "
            "medclip/medclip_*_weight.txt), unzip, and pass --model-option weights=/path/to/folder.")
    return p


def build_net(cfg: Mapping[str, Any]) -> MedCLIPNet:
    """The network for ``variant`` with random weights (text config from the text-encoder folder)."""
    from xbench.extract.models.crossattn.common import build_bert_from_config, option

    variant = str(option(cfg, "variant", "vit"))
    if variant not in VARIANTS:
        raise ModelConfigError(f"medclip: variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    proj_dim = int(option(cfg, "proj_dim", 512))  # modeling_medclip.py:18, 53, 95
    if variant == "vit":
        vision = swin_vision(option(cfg, "swin", None), proj_dim)
    else:
        vision = resnet_vision(tuple(option(cfg, "resnet_layers", (3, 4, 6, 3))), proj_dim)
    bert = build_bert_from_config(_resolve_text_encoder(cfg))
    text = _Part(bert, nn.Linear(bert.config.hidden_size, proj_dim, bias=False))
    return MedCLIPNet(vision, text)


def load_weights(net: MedCLIPNet, path: Path) -> dict:
    from xbench.extract.models.crossattn.common import load_official_state_dict, read_checkpoint

    sd = read_checkpoint(path)
    sd = rename_swin_keys(sd, set(net.state_dict()), "vision_model.model.")
    return load_official_state_dict(net, sd, drop=NON_PARAMETERS, where=str(path))


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"medclip": "build"}


def build(config: Mapping[str, Any]) -> MedCLIPAdapter:
    """Registry factory ``medclip``: ``weights`` = the folder of ``pytorch_model.bin`` (or the file,
    or ``random``), ``variant`` vit|resnet, ``text_encoder`` = Bio_ClinicalBERT folder."""
    from xbench.extract.models.crossattn.common import load_tokenizer, option, wants_random_weights

    from xbench.extract.models.presets import medclip_preflight

    cfg = dict(config)
    medclip_preflight(cfg)
    if wants_random_weights(cfg):
        torch.manual_seed(int(cfg.get("seed", 0)))  # the same untrained model in every process
    net = build_net(cfg)
    if wants_random_weights(cfg):
        loaded, weights = {}, "random"
    else:
        weights = str(_weights_file(str(cfg["weights"])))
        loaded = load_weights(net, Path(weights))
    net.eval().requires_grad_(False)  # frozen: maps leave the runner as numpy; Grad-CAM asks for its own gradients
    tokenizer = load_tokenizer(_resolve_text_encoder(cfg))
    interp = str(option(cfg, "interpolation", "bicubic"))
    transform = MedCLIPTransform(filter=interp)
    variant = str(option(cfg, "variant", "vit"))
    tower = SwinTower(net.vision_model, transform.size) if variant == "vit" else ResNetTower(net.vision_model, transform.size)

    def device() -> torch.device:
        return next(net.parameters()).device

    def encode_text(texts: list[str]) -> torch.Tensor:
        # one text at a time: no padding enters the mean over positions
        return torch.cat([encode_batch(net.text_model, tokenizer, [t], device()) for t in texts])

    adapter = MedCLIPAdapter(
        name=str(cfg.get("name") or "medclip"), tower=tower, encode_text=encode_text, modules=[net],
        logit_scale=net.scale(),
        preprocess={"size": transform.size, "mean": [MEDCLIP_MEAN] * 3, "std": [MEDCLIP_STD] * 3,
                    "resize": "pad", "interpolation": interp},
        method=cfg.get("method", "similarity"), prompts=cfg.get("prompts"), map_size=cfg.get("map_size"),
        info={"backend": "xbench (own code; transformers SwinModel/BertModel, torchvision ResNet)",
              "model": f"MedCLIP-{'ViT (Swin-T)' if variant == 'vit' else 'ResNet50'}",
              "weights": weights, "checkpoint_keys_dropped": loaded.get("dropped", []),
              "preprocess_official": transform.describe(),
              "score": "exp(clamp(logit_scale)) * mean over the class's prompts of cos(image, prompt) "
                       "(PromptClassifier ensemble=True)"})
    adapter.host = transform
    adapter.encode_batch = lambda texts: encode_batch(net.text_model, tokenizer, texts, device())
    ens = option(cfg, "ensembles", True)
    adapter.use_ensembles = bool(ens)
    n = option(cfg, "n_prompts", None)
    adapter.n_prompts = None if n in (None, "all") else int(n)
    adapter.prompt_seed = int(option(cfg, "prompt_seed", 0))
    return adapter
