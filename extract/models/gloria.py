"""GLoRIA (Huang et al., ICCV 2021), marshuang80/gloria: global + local image-text similarity and
word-region attention maps.

Network (``gloria/models/gloria_model.py``, ``vision_model.py``, ``text_model.py``), rebuilt here
with the official parameter names so the released Lightning checkpoint (``state_dict`` keys prefixed
``gloria.``) loads strictly:

* ``img_encoder.model``: torchvision ResNet-50 (``fc`` replaced by an identity); the input is first
  upsampled to 299 x 299 (bilinear, ``align_corners=True``); ``layer3`` gives the local features
  (1024 x 19 x 19), ``layer4`` + average pool the global one (2048);
* ``img_encoder.local_embedder`` (1 x 1 conv, no bias) and ``global_embedder`` (linear) project both
  to the text width (768 for Bio_ClinicalBERT);
* ``text_encoder.model``: Bio_ClinicalBERT (config and tokenizer from a local folder, weights from
  the checkpoint); words = sum of the last 4 hidden layers with word pieces summed into words up to
  ``[SEP]`` and zero padding after it; sentence = mean over the 97 word slots, summed over layers
  (the same aggregation CARZero inherited, reused from :mod:`.crossattn.carzero`).

Zero-shot score (``gloria.py:184-275``): per (image, prompt) the mean of the global cosine and the
local similarity, the maximum over a class's prompts. The local similarity
(``gloria_model.py:103-139``) attends every word to the 19 x 19 regions (``attention_fn``, softmax
over words, then softmax over regions with temperature 4), takes the cosine of each word with its
attended context and keeps ``log(max_w exp(5 cos_w))``. The word slots it uses are positions
``1 .. n`` where upstream's ``n`` is the number of *characters* of the raw prompt
(``gloria_model.py:229-231`` counts ``w`` over the string): past ``[SEP]`` the slots are zero
vectors (cosine 0), and they also take part in the softmax over words. That is reproduced exactly
(:func:`char_count`); ``n`` is capped at 96, where upstream fails with a reshape error.
Upstream then standardises each class over the evaluated images (``utils.normalize``): an affine map
per class that depends on the whole image set, so it is left out here (it changes no ranking).

Map: GLoRIA's own word-region attention (``get_attn_maps`` -> ``loss/gloria_loss.py::local_loss``:
the ``[CLS]`` slot and the words, ``attention_fn`` with temperature 4), aggregated over the words
by their maximum, as the first column of the authors' attention figures
(``utils.build_attention_images``, ``attn.max(dim=1)``). The 19 x 19 grid covers the 224 centre
crop of the 256 letterbox; it is resampled onto the whole image (``geometry.undo_box``: bilinear,
strips the crop cut off take the map's minimum). For a class, the map of its best-scoring prompt.
"""
from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from xbench.extract.models.base import AdapterOutput, ModelAdapter
from xbench.extract.models.crossattn.carzero import CARZeroTransform, clean_prompt, crop_offset, encode_text, letterbox, require_opencv
from xbench.extract.models.crossattn.common import (
    BERT_NON_PARAMETERS,
    AdapterConfigError,
    build_bert_from_config,
    canonical_key,
    file_sha256,
    load_official_state_dict,
    load_tokenizer,
    option,
    pick_device,
    pick_state_dict,
    prompt_texts,
    read_checkpoint,
    trust_option,
    bool_option,
    resnet_trunk,
    wants_random_weights,
)
from xbench.extract.models.geometry import undo_box

#: ``configs/chexpert_pretrain_config.yaml``: temp1 (attention), temp2 (word aggregation), word_num, imsize, crop
TEMP_ATTENTION = 4.0
TEMP_WORDS = 5.0
WORD_NUM = 97
IMSIZE = 256
CROP = 224
MODEL_INPUT = 299  # vision_model.py:60, the ResNet always sees 299 x 299
HALF = (0.5, 0.5, 0.5)  # transforms.norm 'half' (builder.py:182-183)

#: GLoRIA's CheXpert prompt table (``gloria/constants.py:77-169``): per class three lists combined
#: as "<first> <second> <third>" in this order (the dict order upstream; Pleural Effusion's middle
#: list is its locations). ``generate_chexpert_class_prompts`` (``gloria.py:278-306``) draws
#: ``random.sample(all, 5)`` per class, in this class order, after ``random.seed(6)`` at import
#: (``gloria.py:16-17``): :func:`chexpert_prompts` reproduces that draw with its own ``Random(6)``.
CHEXPERT_PROMPT_TABLE: dict[str, tuple[tuple[str, ...], ...]] = {
    "Atelectasis": (
        ("", "mild", "minimal"),
        ("subsegmental atelectasis", "linear atelectasis", "trace atelectasis", "bibasilar atelectasis",
         "retrocardiac atelectasis", "bandlike atelectasis", "residual atelectasis"),
        ("at the mid lung zone", "at the upper lung zone", "at the right lung zone", "at the left lung zone",
         "at the lung bases", "at the right lung base", "at the left lung base", "at the bilateral lung bases",
         "at the left lower lobe", "at the right lower lobe"),
    ),
    "Cardiomegaly": (
        ("",),
        ("cardiac silhouette size is upper limits of normal", "cardiomegaly which is unchanged",
         "mildly prominent cardiac silhouette", "portable view of the chest demonstrates stable cardiomegaly",
         "portable view of the chest demonstrates mild cardiomegaly", "persistent severe cardiomegaly",
         "heart size is borderline enlarged", "cardiomegaly unchanged",
         "heart size is at the upper limits of normal", "redemonstration of cardiomegaly",
         "ap erect chest radiograph demonstrates the heart size is the upper limits of normal",
         "cardiac silhouette size is mildly enlarged",
         "mildly enlarged cardiac silhouette, likely left ventricular enlargement. other chambers are less prominent",
         "heart size remains at mildly enlarged", "persistent cardiomegaly with prominent upper lobe vessels"),
        ("",),
    ),
    "Consolidation": (
        ("", "increased", "improved", "apperance of"),
        ("bilateral consolidation", "reticular consolidation", "retrocardiac consolidation", "patchy consolidation",
         "airspace consolidation", "partial consolidation"),
        ("at the lower lung zone", "at the upper lung zone", "at the left lower lobe", "at the right lower lobe",
         "at the left upper lobe", "at the right uppper lobe", "at the right lung base", "at the left lung base"),
    ),
    "Edema": (
        ("", "mild", "improvement in", "presistent", "moderate", "decreased"),
        ("pulmonary edema", "trace interstitial edema", "pulmonary interstitial edema"),
        ("",),
    ),
    "Pleural Effusion": (
        ("", "small", "stable", "large", "decreased", "increased"),
        ("left", "right", "tiny"),
        ("bilateral pleural effusion", "subpulmonic pleural effusion", "bilateral pleural effusion"),
    ),
}
PROMPT_SEED = 6
PROMPTS_PER_CLASS = 5
PROMPT_ORIGIN = ("GLoRIA (marshuang80/gloria@416466a) constants.py:77-169 CHEXPERT_CLASS_PROMPTS, "
                 "gloria.py:278-306 generate_chexpert_class_prompts(n=5) after random.seed(6)")


def chexpert_prompts(n: int = PROMPTS_PER_CLASS, seed: int = PROMPT_SEED) -> dict[str, list[str]]:
    """The prompts ``generate_chexpert_class_prompts(n)`` returns right after ``import gloria``:
    every class's combinations in nested order, ``sample(n)`` per class from one generator seeded
    ``seed`` (deterministic: no other draw happens between the seed and the call upstream)."""
    rng = random.Random(seed)
    out = {}
    for name, parts in CHEXPERT_PROMPT_TABLE.items():
        pool = [f"{a} {b} {c}" for a, b, c in itertools.product(*parts)]
        out[name] = rng.sample(pool, n)
    return out


def char_count(text: str) -> int:
    """Upstream's ``cap_lens`` for the local similarity (``gloria_model.py:229-231``): it iterates
    the raw prompt string, so it counts its characters other than "["."""
    return sum(1 for ch in text if not ch.startswith("["))


def attention_words(ids: Sequence[int], id_to_word: Mapping[int, str]) -> int:
    """Upstream's ``cap_lens`` for the attention maps (``gloria_model.py:53-55``): the aggregated
    words before ``[SEP]`` that do not start with "[" (a word starts with its first piece), plus one."""
    n = 0
    for tid in list(ids)[1:]:
        word = id_to_word.get(int(tid), "")
        if word == "[SEP]":
            break
        if not word.startswith("##") and not word.startswith("["):
            n += 1
    return n + 1


def attention(words: torch.Tensor, context: torch.Tensor, temp: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``attention_fn``: words (B, D, n), regions (B, D, h, w) -> attended context (B, D, n) and
    attention (B, n, h, w). Softmax over the words of each region, then (times ``temp``) over the
    regions of each word."""
    b, d, h, w = context.shape
    ctx = context.reshape(b, d, h * w)
    a = torch.softmax(torch.bmm(ctx.transpose(1, 2), words), dim=-1)  # (B, hw, n): over words
    a = torch.softmax(a.transpose(1, 2) * temp, dim=-1)  # (B, n, hw): over regions
    return torch.bmm(ctx, a.transpose(1, 2)), a.reshape(b, -1, h, w)


def cosine(x: torch.Tensor, y: torch.Tensor, dim: int, eps: float = 1e-8) -> torch.Tensor:
    """``gloria_loss.cosine_similarity``: a zero vector gives 0 (the norm product is clamped)."""
    return (x * y).sum(dim) / (torch.linalg.vector_norm(x, dim=dim) * torch.linalg.vector_norm(y, dim=dim)).clamp(min=eps)


def local_similarity(words: torch.Tensor, regions: torch.Tensor, n: int) -> torch.Tensor:
    """``get_local_similarities`` for one text: words (D, L) of the text, regions (B, D, h, w), ``n``
    its character count (slots 1..n, capped at L - 1). -> (B,) ``log(max_w exp(5 cos_w))``."""
    n = max(1, min(int(n), words.shape[1] - 1))
    w = words[:, 1:n + 1].unsqueeze(0).expand(regions.shape[0], -1, -1)
    attended, _ = attention(w, regions, TEMP_ATTENTION)
    sim = torch.exp(cosine(w, attended, dim=1) * TEMP_WORDS)  # (B, n)
    return torch.log(sim.max(dim=1).values)


def attention_map(words: torch.Tensor, regions: torch.Tensor, m: int) -> torch.Tensor:
    """The word-region attention of slots 0..m-1 ([CLS] and the words), maximum over them: (B, h, w)."""
    w = words[:, :m].unsqueeze(0).expand(regions.shape[0], -1, -1)
    _, attn = attention(w, regions, TEMP_ATTENTION)
    return attn.max(dim=1).values


# --------------------------------------------------------------------------------------------
# Network with the official parameter names
# --------------------------------------------------------------------------------------------
class GLoRIAImageEncoder(nn.Module):
    """``vision_model.ImageEncoder`` for ResNet-50: -> global (B, E), local (B, E, 19, 19) embeddings."""

    def __init__(self, embed_dim: int, layers: Sequence[int] = (3, 4, 6, 3)) -> None:
        super().__init__()
        self.model = resnet_trunk(layers)  # fewer blocks per stage only for tests (same widths, same grid)
        self.model.fc = nn.Identity()
        self.global_embedder = nn.Linear(2048, embed_dim)
        self.local_embedder = nn.Conv2d(1024, embed_dim, kernel_size=1, stride=1, padding=0, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = self.model
        x = F.interpolate(x, size=(MODEL_INPUT, MODEL_INPUT), mode="bilinear", align_corners=True)
        x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
        local = m.layer3(m.layer2(m.layer1(x)))
        pooled = F.adaptive_avg_pool2d(m.layer4(local), 1).flatten(1)
        return self.global_embedder(pooled), self.local_embedder(local)


class _TextEncoder(nn.Module):
    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.model = bert


class GLoRIANet(nn.Module):
    def __init__(self, bert: nn.Module, resnet_layers: Sequence[int] = (3, 4, 6, 3)) -> None:
        super().__init__()
        self.text_encoder = _TextEncoder(bert)
        self.img_encoder = GLoRIAImageEncoder(int(bert.config.hidden_size), resnet_layers)


@dataclasses.dataclass(frozen=True)
class GLoRIATransform(CARZeroTransform):
    """``GLoRIA.process_img`` (``gloria_model.py:248-314``) with the test transform of
    ``builder.build_transformation`` (``builder.py:174-183``): ``cv2.resize`` of the longer side to
    256 (INTER_AREA, other side ``int``-truncated), zero padding to 256 x 256 (floor before, ceil
    after), PIL grey -> RGB, ``CenterCrop(224)``, ``ToTensor``, ``Normalize(0.5, 0.5)``. CARZero
    kept this loader; only the normalisation differs."""

    scale: int = IMSIZE
    crop: int = CROP
    mean: tuple[float, ...] = HALF
    std: tuple[float, ...] = HALF

    def boxes(self, orig_size: torch.Tensor) -> torch.Tensor:
        """(B, 4) extents of the model frame (the crop) in normalised whole-image coordinates."""
        o = crop_offset(self.scale, self.crop)
        out = torch.empty(orig_size.shape[0], 4, dtype=torch.float64)
        for i, (h, w) in enumerate(orig_size.tolist()):
            nh, nw, top, left = letterbox(int(h), int(w), self.scale)
            out[i] = torch.tensor([(o - left) / nw, (o - top) / nh, (o + self.crop - left) / nw,
                                   (o + self.crop - top) / nh], dtype=torch.float64)
        return out

    def describe(self) -> str:
        return (f"cv2.resize longer side to {self.scale} (INTER_AREA), zero-pad to {self.scale}x{self.scale}, "
                f"PIL grey -> RGB, CenterCrop({self.crop}), ToTensor, Normalize({list(self.mean)}, {list(self.std)}) "
                "(GLoRIA gloria_model.py:248-314, builder.py:174-183); the network upsamples to 299 (bilinear, "
                "align_corners=True, vision_model.py:60)")


# --------------------------------------------------------------------------------------------
# Adapter
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class EncodedTexts:
    """Per text: word slots (T, E, L), sentence (T, E), character count and attention word count."""

    words: torch.Tensor
    sentence: torch.Tensor
    chars: tuple[int, ...]
    attn_words: tuple[int, ...]


class GLoRIAAdapter(ModelAdapter):
    score_kind = "logit"
    method = "gloria-attention"
    supports_phrases = True

    def __init__(self, net: GLoRIANet, tokenizer, *, config: Mapping, map_size: tuple[int, int] | None,
                 device: torch.device, provenance: dict) -> None:
        super().__init__()
        self.net = net.eval()
        self.tokenizer = tokenizer
        self.id_to_word = {v: k for k, v in tokenizer.get_vocab().items()}
        self.config = config
        self.transform = GLoRIATransform()
        self.grid = (19, 19)
        self.map_size = tuple(int(v) for v in map_size) if map_size else self.grid
        self.device, self.dtype = device, torch.float32
        self._provenance = provenance
        self.class_prompts: tuple[tuple[str, ...], ...] = ()
        self.prompt_origins: tuple[str, ...] = ()
        self.texts: EncodedTexts | None = None
        self.to(device)

    @property
    def map_shape(self) -> tuple[int, int]:
        return self.map_size

    # -- text ---------------------------------------------------------------------------------
    @torch.no_grad()
    def encode_texts(self, texts: Sequence[str]) -> EncodedTexts:
        """``process_text`` then ``text_encoder_forward`` for each raw text (cleaned as upstream: a
        one-word sentence is dropped, so a one-word text is encoded as ``[CLS] [SEP]``)."""
        tok = self.tokenizer([clean_prompt(t) for t in texts], return_tensors="pt", truncation=True,
                             padding="max_length", max_length=WORD_NUM)
        tok = {k: v.to(self.device) for k, v in tok.items()}
        words, sentence = encode_text(self.net.text_encoder.model, tok, self.id_to_word, 4)
        return EncodedTexts(words.transpose(1, 2).to(self.dtype), sentence.to(self.dtype),
                            tuple(char_count(t) for t in texts),
                            tuple(attention_words(ids.tolist(), self.id_to_word) for ids in tok["input_ids"]))

    def prompts_for(self, classes: Sequence[str]) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
        """Prompts per class: the config's (``prompts.classes`` / ``prompts.positive``) win; else
        GLoRIA's sampled CheXpert prompts; else the packaged template ([gloria] in prompts.toml)."""
        info = prompt_texts(classes, self.config, "gloria", self.dataset)
        spec = self.config.get("prompts") if isinstance(self.config.get("prompts"), Mapping) else {}
        user = {canonical_key(k) for k in (spec.get("classes") or {})}
        templated = isinstance(spec.get("positive"), str) or option(self.config, "prompt_template") is not None
        table = {canonical_key(k): v for k, v in chexpert_prompts(int(option(self.config, "n_prompts", 5))).items()}
        out, origins = [], []
        for name, text, origin in zip(classes, info.texts, info.origins):
            key = canonical_key(name)
            raw = (spec.get("classes") or {}).get(name)
            if key in user and isinstance(raw, (list, tuple)) and raw:
                out.append(tuple(str(v) for v in raw))  # several prompts of the user's, max over them
                origins.append("config prompts.classes")
            elif key in table and key not in user and not templated:
                out.append(tuple(table[key]))
                origins.append(PROMPT_ORIGIN)
            else:
                out.append((text,))
                origins.append(origin)
        self.unsupported = info.unsupported
        return tuple(out), tuple(origins)

    @torch.no_grad()
    def set_classes(self, classes: Sequence[str]) -> None:
        self.classes = tuple(classes)
        self.class_prompts, self.prompt_origins = self.prompts_for(self.classes)
        self.texts = self.encode_texts([p for ps in self.class_prompts for p in ps])

    # -- images -------------------------------------------------------------------------------
    def image_transform(self, dataset: str | None = None) -> GLoRIATransform:
        return self.transform

    def _features(self, images: torch.Tensor, orig_size: torch.Tensor):
        x = self.inputs(images, orig_size.cpu()).to(self.device, self.dtype)
        glob, regions = self.net.img_encoder(x)
        return glob, regions, self.transform.boxes(orig_size.cpu())

    def _pairs(self, glob: torch.Tensor, regions: torch.Tensor, texts: EncodedTexts, columns: Sequence[int]):
        """Scores (B, T) and maxima-over-words attention maps (B, T, 19, 19) of images x texts."""
        g = cosine(glob.unsqueeze(1), texts.sentence.unsqueeze(0), dim=-1)  # (B, T)
        scores, maps = [], []
        for t in columns:
            loc = local_similarity(texts.words[t], regions, texts.chars[t])
            scores.append((loc + g[:, t]) / 2)
            maps.append(attention_map(texts.words[t], regions, texts.attn_words[t]))
        return torch.stack(scores, 1), torch.stack(maps, 1)

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, orig_size: torch.Tensor) -> AdapterOutput:
        if self.texts is None:
            raise RuntimeError("call set_classes() before extracting")
        glob, regions, boxes = self._features(images, orig_size)
        per_prompt, maps = self._pairs(glob, regions, self.texts, range(self.texts.words.shape[0]))
        scores, best, start = [], [], 0
        for ps in self.class_prompts:  # gloria.py:264: the maximum over the class's prompts
            s, i = per_prompt[:, start:start + len(ps)].max(dim=1)
            scores.append(s)
            best.append(maps[torch.arange(maps.shape[0]), start + i])
            start += len(ps)
        out = undo_box(torch.stack(best, 1), boxes, self.map_size)
        return AdapterOutput(scores=torch.stack(scores, 1).float(), maps=out)

    @torch.no_grad()
    def phrase_outputs(self, images, orig_size, texts, rows):
        if len(texts) == 0:
            return torch.zeros(0), torch.zeros(0, *self.map_size)
        glob, regions, boxes = self._features(images, orig_size)
        enc = self.encode_texts(list(texts))
        rows = torch.as_tensor(rows, dtype=torch.long).tolist()
        scores, maps = [], []
        for q, r in enumerate(rows):
            s, m = self._pairs(glob[r:r + 1], regions[r:r + 1], enc, [q])
            scores.append(s[0, 0])
            maps.append(m[0])
        out = undo_box(torch.stack(maps), boxes[rows], self.map_size)
        return torch.stack(scores).float(), out[:, 0]

    def provenance(self) -> dict:
        prompts = {c: list(p) for c, p in zip(self.classes, self.class_prompts)}
        return {**self._provenance, "prompts": {"style": "max over prompts", "positive": prompts,
                                                "origin": dict(zip(self.classes, self.prompt_origins))},
                "map_shape": list(self.map_size)}

    def to(self, device, dtype=None):
        self.device = torch.device(device)
        if dtype is not None:
            self.dtype = dtype
        self.net.img_encoder.to(self.device, self.dtype)
        self.net.text_encoder.to(self.device)
        if self.texts is not None:
            self.texts = dataclasses.replace(self.texts, words=self.texts.words.to(self.device, self.dtype),
                                             sentence=self.texts.sentence.to(self.device, self.dtype))
        return self


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"gloria": "build"}


def build(config: Mapping) -> GLoRIAAdapter:
    """Registry factory ``gloria``.

    ``weights``: the released ``chexpert_resnet50.ckpt`` (a Lightning checkpoint: it pickles its
    hyper-parameters, so ``options.trust_checkpoint: true`` is needed, or a flat state dict /
    ``.safetensors`` converted from it), ``random`` for tests; ``text_encoder``: a local
    Bio_ClinicalBERT folder (config.json + tokenizer files; its weights come from the checkpoint);
    ``map_size`` (default the 19 x 19 grid); ``prompts`` (registry format); options
    ``n_prompts`` (5), ``trust_checkpoint``, ``hash_weights``, ``resnet_layers`` ([3, 4, 6, 3] = ResNet-50;
    smaller block counts keep the widths and the 19 x 19 grid: offline tests only).
    """
    from xbench.extract.models.presets import gloria_preflight

    gloria_preflight(config)
    require_opencv()
    text_dir = config.get("text_encoder") or option(config, "text_encoder")
    bert = build_bert_from_config(text_dir, output_hidden_states=True)
    layers = [int(v) for v in option(config, "resnet_layers", (3, 4, 6, 3))]
    if len(layers) != 4 or min(layers) < 1:
        raise AdapterConfigError(f"options.resnet_layers must be 4 positive block counts, got {layers}")
    net = GLoRIANet(bert, layers)
    if wants_random_weights(config):
        info = {"weights": None, "note": "random initialisation (weights: random)"}
    else:
        path = config["weights"]
        ckpt = read_checkpoint(path, trust=trust_option(config))
        rep = load_official_state_dict(net, pick_state_dict(ckpt, ("state_dict",)), prefixes=("gloria.",),
                                       drop=BERT_NON_PARAMETERS, where=str(path))
        info = {"weights": str(path), "dropped_keys": rep["dropped"]}
        if bool_option(config, "hash_weights", True):
            info["weights_sha256"] = file_sha256(path)
    tokenizer = load_tokenizer(text_dir)
    prov = {"model": "gloria", "source": "github.com/marshuang80/gloria", **info, "text_encoder": str(text_dir),
            "resnet_layers": layers,
            "preprocess": GLoRIATransform().describe(),
            "score": "max over the class's prompts of (global cosine + local similarity) / 2 (gloria.py:184-275), "
                     "before upstream's per-class standardisation over the evaluated images",
            "map": "word-region attention (temperature 4) of [CLS] and the words, maximum over them, 19x19 over the "
                   "224 crop, bilinear onto the whole image; a class uses its best-scoring prompt"}
    map_size = config.get("map_size")
    if isinstance(map_size, int):
        map_size = (map_size, map_size)
    return GLoRIAAdapter(net, tokenizer, config=config, map_size=map_size, device=pick_device(config), provenance=prov)


__all__ = ["CHEXPERT_PROMPT_TABLE", "GLoRIAAdapter", "GLoRIANet", "GLoRIATransform", "attention", "attention_map",
           "build", "char_count", "chexpert_prompts", "local_similarity"]
