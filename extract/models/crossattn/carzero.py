"""CARZero (Lai et al., CVPR 2024), laihaoran/CARZero.

``CARZeroNet`` mirrors ``models/CARZero_model_dqn_wo_self_atten_gl_mlp.py::CARZeroDQNWOSAGLMLP``;
the Lightning checkpoint's ``state_dict`` keys carry a ``CARZero.`` prefix:

* ``img_encoder.model``: the MRM/MAE ViT-B/16 (``patch_embed.proj``, ``cls_token``, ``pos_embed``,
  ``blocks.N.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}``, ``norm`` with eps 1e-6);
  it returns the class token (global) and 196 patch tokens after the final norm.
* ``text_encoder.model``: BioClinicalMPBERT (config from the local folder, weights from the
  checkpoint). Words: sum of the last 4 hidden layers with word pieces summed into words
  (``agg_tokens``); sentence: mean over the 97 word slots (zero padded), summed over layers.
* ``fusion_module`` (``TQN_Model`` of ``dqn_wo_self_atten_mlp.py``): ``decoder_norm`` (= the
  decoder's final ``norm``), 4 layers that keep ``self_attn``/``norm1`` parameters but run only
  cross-attention and FFN, ``mlp_head`` 768 -> 1024 -> 512 -> 256 -> 1.

Score (``dqn_shot_classification`` -> ``get_dqn_similarities``): i2t = fusion(text queries over
[global, 196 patch] image tokens), t2i = fusion(image global query over [sentence, 97 word]
text tokens); score = (i2t + t2i) / 2, a logit. Map (``get_grounding_map``): i2t cross-attention
per layer without the global-token column, mean of the last 4 layers, 14 x 14 over the 224 centre
crop of the 256 letterbox; this adapter maps it back onto the whole original image.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Mapping, Sequence

import numpy as np

import torch
import torch.nn.functional as F
from torch import nn

from xbench.extract.models.base import AdapterOutput, ModelAdapter
from xbench.extract.models.pixels import ImageTransform, to_normalised_tensor
from xbench.extract.models.crossattn.common import (
    BERT_NON_PARAMETERS,
    zero_unsupported,
    layers_from,
    prompt_texts,
    select_layers,
    wants_random_weights,
    AdapterConfigError,
    build_bert_from_config,
    equalize_for,
    equalize_setting,
    file_sha256,
    load_official_state_dict,
    load_tokenizer,
    option,
    pick_device,
    pick_state_dict,
    read_checkpoint,
    trust_option,
    bool_option,
)
from xbench.extract.models.crossattn.kad import KADFusion
from xbench.extract.models.crossattn.medklip import arch_from

CXR_MAE_MEAN = (0.4978,)
CXR_MAE_STD = (0.2449,)

DEFAULT_ARCH = {
    "embed_dim": 768,
    "depth": 12,
    "num_heads": 12,
    "mlp_ratio": 4.0,
    "patch_size": 16,
    "img_size": 224,
    "fusion_heads": 4,
    "fusion_layers": 4,
    "fusion_feedforward": 1024,
    "mlp_hidden": [1024, 512, 256],
    "dropout": 0.1,
}


# --------------------------------------------------------------------------------------------
# Image encoder: ViT with timm's Block / PatchEmbed parameter names
# --------------------------------------------------------------------------------------------
class _PatchEmbed(nn.Module):
    def __init__(self, patch_size: int, in_chans: int, embed_dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class _Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class _Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class _Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, eps: float = 1e-6) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = _Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = _Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViTEncoder(nn.Module):
    """MAE-style ViT: ``forward(x)`` -> (class token (B, D), patch tokens (B, N, D)) after ``norm``."""

    def __init__(self, *, img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12,
                 mlp_ratio=4.0, in_chans=3, eps=1e-6) -> None:
        super().__init__()
        self.patch_embed = _PatchEmbed(patch_size, in_chans, embed_dim)
        num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim), requires_grad=False)
        self.blocks = nn.ModuleList(_Block(embed_dim, num_heads, mlp_ratio, eps) for _ in range(depth))
        self.norm = nn.LayerNorm(embed_dim, eps=eps)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.patch_embed(x) + self.pos_embed[:, 1:, :]
        cls = (self.cls_token + self.pos_embed[:, :1, :]).expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return x[:, 0], x[:, 1:]


class _ImageEncoder(nn.Module):
    def __init__(self, vit: ViTEncoder) -> None:
        super().__init__()
        self.model = vit  # global_embedder / local_embedder are Identity upstream: no parameters


class _TextEncoder(nn.Module):
    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.model = bert


def carzero_mlp_head(embed_dim: int, hidden: Sequence[int], dropout: float) -> nn.Sequential:
    """Linear/ReLU/Dropout stack ending in one logit: indices 0, 3, 6, 9 are the Linear layers."""
    layers, width = [], embed_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU(inplace=True), nn.Dropout(dropout)]
        width = h
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


class CARZeroNet(nn.Module):
    def __init__(self, bert: nn.Module, *, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0, patch_size=16,
                 img_size=224, fusion_heads=4, fusion_layers=4, fusion_feedforward=1024,
                 mlp_hidden=(1024, 512, 256), dropout=0.1) -> None:
        super().__init__()
        self.img_encoder = _ImageEncoder(ViTEncoder(img_size=img_size, patch_size=patch_size, embed_dim=embed_dim,
                                                    depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio))
        self.text_encoder = _TextEncoder(bert)
        self.fusion_module = KADFusion(embed_dim=embed_dim, nhead=fusion_heads, num_layers=fusion_layers,
                                       dim_feedforward=fusion_feedforward, dropout=dropout, self_attention=False,
                                       self_attention_params=True,
                                       head=carzero_mlp_head(embed_dim, mlp_hidden, dropout))


# --------------------------------------------------------------------------------------------
# Text processing (``process_text`` and ``BertEncoder`` upstream)
# --------------------------------------------------------------------------------------------
def clean_prompt(text: str) -> str:
    """CARZero's text cleaning: split sentences on "N." and ".", keep ``\\w+`` tokens lower-cased
    and ASCII-only, drop sentences of one token or fewer, join with spaces."""
    text = text.replace("\n", " ")
    parts = [s for point in re.split(r"[0-9]+\.", text) for s in point.split(".")]
    sentences = []
    for part in parts:
        tokens = re.findall(r"\w+", part.replace("\ufffd\ufffd", " ").lower())
        if len(tokens) <= 1:
            continue
        tokens = [t.encode("ascii", "ignore").decode("ascii") for t in tokens]
        sentences.append(" ".join(t for t in tokens if t))
    return " ".join(sentences)


def aggregate_word_pieces(emb: torch.Tensor, ids: Sequence[int], id_to_word: Mapping[int, str]) -> torch.Tensor:
    """Sum word-piece embeddings into words up to and including ``[SEP]``; zero-pad to the input
    length. emb (L, layers, D) -> (L, layers, D)."""
    words, bank = [], []
    for pos, tid in enumerate(ids):
        word = id_to_word.get(int(tid), "")
        if word == "[SEP]":
            if bank:
                words.append(torch.stack(bank).sum(0))
            words.append(emb[pos])
            break
        if word.startswith("##"):
            bank.append(emb[pos])
        else:
            if bank:
                words.append(torch.stack(bank).sum(0))
            bank = [emb[pos]]
    out = torch.zeros_like(emb)
    if words:
        out[: len(words)] = torch.stack(words)
    return out


def encode_text(bert: nn.Module, tok: Mapping[str, torch.Tensor], id_to_word: Mapping[int, str],
                last_n_layers: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """-> words (C, L, D) and sentence (C, D) embeddings, aggregated as CARZero's BertEncoder
    (``agg_tokens``, ``aggregate_method='sum'``, no normalisation)."""
    out = bert(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"],
               token_type_ids=tok.get("token_type_ids"), output_hidden_states=True)
    hidden = torch.stack(out.hidden_states[-last_n_layers:], dim=1)  # (C, layers, L, D)
    per_text = [aggregate_word_pieces(h.transpose(0, 1), ids.tolist(), id_to_word).transpose(0, 1)
                for h, ids in zip(hidden, tok["input_ids"])]
    emb = torch.stack(per_text)  # (C, layers, L, D)
    sentence = emb.mean(dim=2).sum(dim=1)
    words = emb.sum(dim=1)
    return words, sentence


# --------------------------------------------------------------------------------------------
# Geometry: longer side -> 256, zero-pad to 256 x 256, centre-crop 224
# --------------------------------------------------------------------------------------------
def letterbox(h: int, w: int, scale: int = 256) -> tuple[int, int, int, int]:
    """(new_h, new_w, top, left) of ``_resize_img`` upstream (int truncation, floor/ceil pads;
    a square image counts as "taller"). A side that truncates to 0 (an image more than 256
    times longer than wide, where upstream fails) is kept at 1 pixel."""
    if h >= w:
        nh, nw = scale, max(1, int(float(w) * (scale / float(h))))
        return nh, nw, 0, (scale - nw) // 2
    nh, nw = max(1, int(float(h) * (scale / float(w)))), scale
    return nh, nw, (scale - nh) // 2, 0


def crop_offset(scale: int, crop: int) -> int:
    """torchvision ``CenterCrop`` offset: ``int(round((scale - crop) / 2))``."""
    return int(round((scale - crop) / 2.0))


@dataclasses.dataclass(frozen=True)
class CARZeroTransform(ImageTransform):
    """``process_img`` upstream (``models/CARZero_model_dqn_wo_self_atten_gl_mlp.py:283-365``):
    ``cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_AREA)`` of the longer side to
    ``scale``, ``np.pad`` with zeros to ``scale x scale`` (floor before, ceil after), PIL grey ->
    RGB, ``CenterCrop(crop)``, ``ToTensor``, ``Normalize([0.4978], [0.2449])`` (``builder.py:
    197-207``, ``norm: CXR_MAE``). The new size comes from ``orig_size``, so on a stored stretched
    S x S image the same call undoes the stretch."""

    scale: int = 256
    crop: int = 224
    mean: tuple[float, ...] = CXR_MAE_MEAN
    std: tuple[float, ...] = CXR_MAE_STD

    def canvas(self, image: np.ndarray, orig_size: tuple[int, int]) -> np.ndarray:
        """The zero-padded ``scale x scale`` uint8 letterbox, before the crop."""
        import cv2

        nh, nw, top, left = letterbox(orig_size[0], orig_size[1], self.scale)
        resized = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA)
        return np.pad(resized, [(top, self.scale - nh - top), (left, self.scale - nw - left)], "constant",
                      constant_values=0)

    def apply(self, image: np.ndarray, orig_size: tuple[int, int]) -> torch.Tensor:
        from PIL import Image
        from torchvision import transforms

        rgb = transforms.CenterCrop(self.crop)(Image.fromarray(self.canvas(image, orig_size)).convert("RGB"))
        return to_normalised_tensor(rgb, self.mean, self.std)

    def describe(self) -> str:
        eq = "skimage-style equalize_hist, " if self.equalize else ""
        return (f"{eq}cv2.resize longer side to {self.scale} (INTER_AREA), zero-pad to {self.scale}x{self.scale}, "
                f"PIL grey -> RGB, CenterCrop({self.crop}), ToTensor, Normalize({list(self.mean)}, {list(self.std)})")


def require_opencv() -> None:
    """CARZero's official resize is OpenCV's INTER_AREA; say how to get it instead of failing later."""
    try:
        import cv2  # noqa: F401
    except ImportError:
        raise AdapterConfigError("CARZero's preprocessing needs OpenCV (cv2.INTER_AREA, as upstream): "
                                 "pip install opencv-python-headless") from None


def uncrop_maps(maps: torch.Tensor, orig_size: torch.Tensor, *, scale: int, crop: int, patch: int,
                out_size: tuple[int, int]) -> torch.Tensor:
    """Resample token maps over the crop onto an ``out_size`` grid over each whole original image.

    Upstream maps exist only over the crop (``CARZero.py:819-848``, ``conve_attention_map``: a 16x
    ``np.repeat`` of the 14 x 14 tokens); XBench's maps cover the whole image, and for CARZero the
    strips the centre crop cuts off take the nearest token at the crop edge, the natural
    continuation of that nearest-token upsampling. (Dual encoders with ``resize: crop`` give such
    strips the map's minimum instead, see ``geometry.undo_box``.)

    maps (B, C, g, g) with g = crop / patch; ``out_size`` = (rows, cols). Output cell centres are mapped image -> letterbox ->
    crop -> token, nearest token (the upstream map is a 16x ``np.repeat``); image parts the crop
    cut off take the nearest token at the crop edge.
    """
    b, c, g, _ = maps.shape
    o = crop_offset(scale, crop)
    oh, ow = out_size
    centre_r = (torch.arange(oh, dtype=torch.float64) + 0.5) / oh
    centre_c = (torch.arange(ow, dtype=torch.float64) + 0.5) / ow
    out = maps.new_empty(b, c, oh, ow)
    for i, (h, w) in enumerate(orig_size.tolist()):
        nh, nw, top, left = letterbox(int(h), int(w), scale)
        rows = ((top + centre_r * nh - o) / patch).floor().clamp(0, g - 1).long().to(maps.device)
        cols = ((left + centre_c * nw - o) / patch).floor().clamp(0, g - 1).long().to(maps.device)
        out[i] = maps[i][:, rows][:, :, cols]
    return out


# --------------------------------------------------------------------------------------------
# Adapter
# --------------------------------------------------------------------------------------------
class CARZeroAdapter(ModelAdapter):
    score_kind = "logit"
    method = "cross-attention"
    supports_phrases = True  # free text, as upstream's get_grounding_map takes (see phrase_outputs)

    def __init__(self, net: CARZeroNet, tokenizer, *, layers: Sequence[int], map_size: tuple[int, int],
                 config: Mapping, prompt_model: str, word_num: int, last_n_layers: int, scale: int, crop: int,
                 patch: int, device: torch.device, provenance: dict) -> None:
        super().__init__()
        self.net = net.eval()
        self.tokenizer = tokenizer
        self.id_to_word = {v: k for k, v in tokenizer.get_vocab().items()}
        self.layers, self.map_size = tuple(layers), (int(map_size[0]), int(map_size[1]))
        self.config, self.prompt_model = config, prompt_model
        self.word_num, self.last_n_layers = int(word_num), int(last_n_layers)
        self.scale, self.crop, self.patch = int(scale), int(crop), int(patch)
        self.transform = CARZeroTransform(scale=self.scale, crop=self.crop)
        self.equalize = option(config, "equalize", "auto")
        self.device, self.dtype = device, torch.float32
        self._provenance = provenance
        self.prompts: tuple[str, ...] = ()
        self.prompt_info = None
        self.text_words = self.text_sentence = None
        self.to(device)

    @property
    def map_shape(self) -> tuple[int, int]:
        return self.map_size

    @torch.no_grad()
    def set_classes(self, classes: Sequence[str]) -> None:
        self.classes = tuple(classes)
        self.prompt_info = prompt_texts(self.classes, self.config, self.prompt_model, self.dataset)
        self.prompts, self.unsupported = self.prompt_info.texts, self.prompt_info.unsupported
        empty = [p for p in self.prompts if not clean_prompt(p)]
        if empty:
            raise AdapterConfigError(
                f"CARZero's text cleaning drops one-word sentences, leaving nothing of prompts {empty}; "
                "use prompts of two or more words (prompts.positive, e.g. 'there is {}')")
        self.text_words, self.text_sentence = self.encode(self.prompts)

    def image_transform(self, dataset: str | None = None) -> CARZeroTransform:
        """``process_img`` (see :class:`CARZeroTransform`); CARZero never equalises ("auto" is off)."""
        return dataclasses.replace(self.transform, equalize=equalize_for(self.equalize, dataset, ()))

    def preprocess(self, images: torch.Tensor, orig_size: torch.Tensor) -> torch.Tensor:
        return self.inputs(images, orig_size.cpu()).to(self.device, self.dtype)

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, orig_size: torch.Tensor) -> AdapterOutput:
        if self.text_words is None:
            raise RuntimeError("call set_classes() before extracting")
        scores, maps = self._outputs(images, orig_size, self.text_words, self.text_sentence)
        zero_unsupported(scores, maps, self.classes, self.unsupported)
        return AdapterOutput(scores=scores, maps=maps)

    def _outputs(self, images: torch.Tensor, orig_size: torch.Tensor, words: torch.Tensor, sentence: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores (B, Q) and whole-image maps (B, Q, h, w) of every image against every text (``words``
        (Q, L, D) and ``sentence`` (Q, D) from :func:`encode_text`)."""
        orig_size = orig_size.cpu()
        x = self.preprocess(images, orig_size)
        img_g, img_l = self.net.img_encoder.model(x)  # (B, D), (B, N, D)
        fusion = self.net.fusion_module
        i2t, attn = fusion(torch.cat([img_g.unsqueeze(1), img_l], dim=1), sentence)  # (B, Q, 1)
        t2i, _ = fusion(torch.cat([sentence.unsqueeze(1), words], dim=1), img_g)  # (Q, B, 1)
        scores = (i2t.squeeze(-1) + t2i.squeeze(-1).transpose(0, 1)).float() / 2
        patches = select_layers([a[:, :, 1:] for a in attn], self.layers).float()
        g = math.isqrt(patches.shape[-1])
        maps = uncrop_maps(patches.reshape(*patches.shape[:2], g, g), orig_size, scale=self.scale,
                           crop=self.crop, patch=self.patch, out_size=self.map_size)
        return scores, maps

    def encode(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(words (Q, L, D), sentence (Q, D)) of ``texts`` cleaned and tokenised as upstream's ``process_text``."""
        tok = self.tokenizer([clean_prompt(t) for t in texts], return_tensors="pt", truncation=True,
                             padding="max_length", max_length=self.word_num)
        tok = {k: v.to(self.device) for k, v in tok.items()}
        words, sentence = encode_text(self.net.text_encoder.model, tok, self.id_to_word, self.last_n_layers)
        return words.to(self.dtype), sentence.to(self.dtype)

    @torch.no_grad()
    def phrase_outputs(self, images: torch.Tensor, orig_size: torch.Tensor, texts: Sequence[str], rows: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """Phrase rows: each text through upstream's ``process_text`` (cleaning, tokenizer, no template; the
        text ``get_grounding_map`` takes, ``CARZero.py:863-905``) and the class path's fusion. CARZero's
        decoder runs no self-attention among queries, so a phrase's outputs do not depend on other queries,
        and a phrase whose text is a class prompt gives exactly the class's. A phrase of one word cleans to
        nothing, as upstream, and is encoded as the empty text (a class prompt like that is refused)."""
        words, sentence = self.encode(texts)
        scores, maps = self._outputs(images, orig_size, words, sentence)
        rows = torch.as_tensor(rows, dtype=torch.long, device=scores.device)
        cols = torch.arange(rows.shape[0], device=scores.device)
        return scores[rows, cols], maps[rows.to(maps.device), cols.to(maps.device)]

    def provenance(self) -> dict:
        return {**self._provenance, "prompts": self.prompt_info.to_dict(self.classes) if self.prompt_info else {},
                "layers": list(self.layers),
                "map": f"i2t cross-attention without the global-token column, mean of layers {list(self.layers)}, "
                       f"{self.crop // self.patch}x{self.crop // self.patch} tokens over the centre crop, resampled "
                       f"(nearest) to {self.map_size[0]}x{self.map_size[1]} over the whole image"}

    def to(self, device, dtype=None):
        self.device = torch.device(device)
        if dtype is not None:
            self.dtype = dtype
        self.net.img_encoder.to(self.device, self.dtype)
        self.net.fusion_module.to(self.device, self.dtype)
        self.net.text_encoder.to(self.device)
        if self.text_words is not None:
            self.text_words = self.text_words.to(self.device, self.dtype)
            self.text_sentence = self.text_sentence.to(self.device, self.dtype)
        return self


def build_net(config: Mapping) -> tuple[dict, CARZeroNet]:
    arch = arch_from(config, DEFAULT_ARCH)
    bert = build_bert_from_config(config.get("text_encoder") or option(config, "text_encoder"), output_hidden_states=True)
    if bert.config.hidden_size != arch["embed_dim"]:
        raise AdapterConfigError(f"text encoder hidden size {bert.config.hidden_size} != embed_dim {arch['embed_dim']}")
    return arch, CARZeroNet(bert, **{**arch, "mlp_hidden": tuple(arch["mlp_hidden"])})


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"carzero": "build"}


def build(config: Mapping) -> CARZeroAdapter:
    """Build the CARZero adapter.

    Config keys: ``weights`` (``CARZero_best_model.ckpt``, a Lightning checkpoint: needs
    ``options.trust_checkpoint: true`` because it pickles its hyper-parameters, or a
    ``.safetensors``/flat state dict converted from it), ``text_encoder`` (local
    BioClinicalMPBERT folder: config.json + tokenizer files), ``device``, ``layers``
    ([-4, -3, -2, -1]), ``map_size`` ([56, 56], the output grid over the whole image),
    ``prompts`` (registry format; default template "there is {}" filled with the finding text);
    options: ``word_num`` (97), ``imsize`` (256), ``arch``, ``trust_checkpoint``, ``hash_weights``.
    """
    require_opencv()
    equalize_setting(config)  # checked here, applied per dataset by image_transform
    arch, net = build_net(config)
    path = None if wants_random_weights(config) else config.get("weights")
    if path:
        ckpt = read_checkpoint(path, trust=trust_option(config))
        # The official loader keeps only keys its model has (``new_key in model_weights``).
        rep = load_official_state_dict(net, pick_state_dict(ckpt, ("state_dict", "model")), prefixes=("CARZero.",),
                                       drop=BERT_NON_PARAMETERS, drop_outside_children=True, where=str(path))
        info = {"weights": str(path), "dropped_keys": rep["dropped"]}
        if bool_option(config, "hash_weights", True):
            info["weights_sha256"] = file_sha256(path)
    elif wants_random_weights(config):
        info = {"weights": None, "note": "random initialisation (weights: random)"}
    else:
        raise AdapterConfigError("config key 'weights' (CARZero_best_model.ckpt) is required")
    tokenizer = load_tokenizer(config.get("text_encoder") or option(config, "text_encoder"))
    scale, crop = int(option(config, "imsize", 256)), int(arch["img_size"])
    prov = {"model": "carzero", "source": "github.com/laihaoran/CARZero", **info, "arch": arch,
            "preprocess": CARZeroTransform(scale=scale, crop=crop).describe() + f"; equalize {equalize_setting(config)}",
            "score": "(i2t + t2i) / 2 of the fusion head, raw logit", "text_encoder": str(config.get("text_encoder"))}
    map_size = config.get("map_size") or option(config, "map_size", 56)
    if isinstance(map_size, int):
        map_size = (map_size, map_size)
    return CARZeroAdapter(net, tokenizer, layers=layers_from(config, 4), map_size=tuple(map_size), config=config,
                          prompt_model="carzero",
                          word_num=int(option(config, "word_num", 97)),
                          last_n_layers=int(option(config, "last_n_layers", 4)), scale=scale, crop=crop,
                          patch=int(arch["patch_size"]), device=pick_device(config), provenance=prov)
