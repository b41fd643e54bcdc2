"""KAD (Zhang et al., Nature Communications 2023), xiaoman-zhang/KAD (``A3_CLIP``).

The checkpoint is a dict of three state dicts, each loaded strictly into a module named as in
``A3_CLIP/models/clip_tqn.py``:

* ``image_encoder`` -> ``KADImageEncoder`` (``ModelRes512``): ``resnet`` (the full ResNet-50,
  registered as an attribute upstream, so its ``fc`` is in the checkpoint) and ``res_features``
  (its children up to ``layer4``, sharing the same modules: 2048 x 16 x 16 at 512 px), then
  ``res_l1`` Linear(2048, 2048) + ReLU and ``res_l2`` Linear(2048, 768). The 224 px variant
  (``ModelRes``) stops at ``layer3``.
* ``text_encoder`` -> ``KADTextEncoder`` (``CLP_clinical``): ``bert_model`` (Med-KEBERT, built from
  the local folder's config; weights come from the checkpoint), ``mlp_embed`` 768 -> 768 -> 768 on
  the pooler output, ``logit_scale``.
* ``model`` -> ``KADFusion`` (``TQN_Model``): ``decoder_norm`` (also the decoder's final ``norm``,
  so both keys exist), 4 pre-norm layers with self-attention (d 768, 4 heads, FFN 1024),
  ``mlp_head.0`` Linear(768, 2), ``logit_scale``.

Queries are the text embeddings of bare finding names. Score: ``softmax(mlp_head)[..., 1]``. Map:
the **last** decoder layer's cross-attention only (``plot_visualize_512.py``), 16 x 16 over the
stretched whole image.

Preprocessing (``A3_CLIP/plot_visualize_512.py`` and ``dataset/test_dataset.py``): PIL grey ->
RGB, ``transforms.Resize([512, 512], interpolation=BICUBIC)``, ``ToTensor``, ImageNet
``Normalize``; no equalisation.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from xbench.extract.models.base import AdapterOutput, ModelAdapter
from xbench.extract.models.pixels import PILResize
from xbench.extract.models.errors import ModelConfigError
from xbench.extract.models.crossattn.common import (
    BERT_NON_PARAMETERS,
    zero_unsupported,
    prompt_texts,
    select_layers,
    layers_from,
    wants_random_weights,
    IMAGENET_MEAN,
    IMAGENET_STD,
    AdapterConfigError,
    QueryDecoder,
    QueryDecoderLayer,
    build_bert_from_config,
    equalize_for,
    equalize_setting,
    file_sha256,
    load_official_state_dict,
    load_tokenizer,
    option,
    pick_device,
    read_checkpoint,
    trust_option,
    bool_option,
    resnet_trunk,
    tokens_to_grid,
)
from xbench.extract.models.crossattn.medklip import arch_from, resnet_grid

DEFAULT_ARCH = {
    "embed_dim": 768,
    "nhead": 4,
    "num_layers": 4,
    "dim_feedforward": 1024,
    "resnet_layers": [3, 4, 6, 3],
    "class_num": 2,
    "dropout": 0.1,
}


class KADImageEncoder(nn.Module):
    """``ModelRes512`` (``stages=4``) or ``ModelRes`` (``stages=3``): image -> (B, T, embed_dim)."""

    def __init__(self, *, embed_dim=768, resnet_layers=(3, 4, 6, 3), stages=4) -> None:
        super().__init__()
        self.resnet = resnet_trunk(resnet_layers)
        num_ftrs = self.resnet.fc.in_features if stages == 4 else self.resnet.fc.in_features // 2
        cut = -2 if stages == 4 else -3
        self.res_features = nn.Sequential(*list(self.resnet.children())[:cut])
        self.res_l1 = nn.Linear(num_ftrs, num_ftrs)
        self.res_l2 = nn.Linear(num_ftrs, embed_dim)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        fea = self.res_features(img).flatten(2).transpose(1, 2)
        return self.res_l2(F.relu(self.res_l1(fea)))


class KADTextEncoder(nn.Module):
    """``CLP_clinical``: BERT pooler output -> ``mlp_embed``."""

    def __init__(self, bert: nn.Module, embed_dim: int = 768) -> None:
        super().__init__()
        self.bert_model = bert
        self.mlp_embed = nn.Sequential(nn.Linear(embed_dim, embed_dim), nn.GELU(), nn.Linear(embed_dim, embed_dim))
        self.logit_scale = nn.Parameter(torch.ones([]) * 2.6592)

    def encode_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.bert_model(input_ids=input_ids, attention_mask=attention_mask)
        return self.mlp_embed(out.pooler_output)


class KADFusion(nn.Module):
    """``TQN_Model``: ``forward(image_tokens (B, T, D), text (Q, D))`` -> (logits (B, Q, class_num),
    attentions list of (B, Q, T))."""

    def __init__(self, *, embed_dim=768, nhead=4, num_layers=4, dim_feedforward=1024, class_num=2,
                 dropout=0.1, self_attention=True, self_attention_params=None, head: nn.Module | None = None) -> None:
        super().__init__()
        self.logit_scale = nn.Parameter(torch.ones([]) * 2.6592)
        layer = QueryDecoderLayer(embed_dim, nhead, dim_feedforward, dropout, self_attention=self_attention,
                                  self_attention_params=self_attention_params)
        self.decoder_norm = nn.LayerNorm(embed_dim)
        self.decoder = QueryDecoder(layer, num_layers, self.decoder_norm)
        self.dropout_feas = nn.Dropout(dropout)
        self.mlp_head = head if head is not None else nn.Sequential(nn.Linear(embed_dim, class_num))

    def forward(self, image_features: torch.Tensor, text_features: torch.Tensor):
        return self.forward_sets(image_features, text_features.unsqueeze(0).expand(image_features.shape[0], -1, -1))

    def forward_sets(self, image_features: torch.Tensor, query_sets: torch.Tensor):
        """Each image with its own query set: image_features (B, T, D), query_sets (B, Q, D) ->
        (logits (B, Q, class_num), attentions list of (B, Q, T)). ``forward`` is the case of one set shared
        by every image (upstream's only use)."""
        memory = self.decoder_norm(image_features.transpose(0, 1))
        queries = self.decoder_norm(query_sets.transpose(0, 1))
        out, attentions = self.decoder(queries, memory)
        return self.mlp_head(self.dropout_feas(out).transpose(0, 1)), attentions


class TextQueryAdapter(ModelAdapter):
    """Shared logic for adapters whose queries are encoded prompts (KAD, DeViDe)."""

    score_kind = "probability"
    method = "cross-attention"

    def __init__(self, image_encoder, text_encoder, fusion, tokenizer, *, image_size: int, grid: int,
                 layers: Sequence[int], config: Mapping, prompt_model: str, max_length: int,
                 interpolation: str, mean=IMAGENET_MEAN, std=IMAGENET_STD, device: torch.device,
                 provenance: dict, equalize: bool | str = "auto") -> None:
        super().__init__()
        self.transform = PILResize(size=(int(image_size), int(image_size)), filter=interpolation,
                                   mean=tuple(mean), std=tuple(std))
        self.equalize = equalize
        self.image_encoder = image_encoder.eval()
        self.text_encoder = text_encoder.eval()
        self.fusion = fusion.eval()
        self.tokenizer = tokenizer
        self.image_size, self.grid, self.layers = int(image_size), int(grid), tuple(layers)
        self.config, self.prompt_model = config, prompt_model
        self.max_length = int(max_length)
        self.interpolation = interpolation
        self.mean, self.std = mean, std
        self.device, self.dtype = device, torch.float32
        self._provenance = provenance
        self.prompts: tuple[str, ...] = ()
        self.prompt_info = None
        self.text_features: torch.Tensor | None = None
        self.to(device)

    @property
    def map_shape(self) -> tuple[int, int]:
        return (self.grid, self.grid)

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """Text features (Q, D) of ``texts``: the tokenizer padded to ``max_length``, then the text tower."""
        tok = self.tokenizer(list(texts), add_special_tokens=True, padding="max_length", truncation=True,
                             max_length=self.max_length, return_tensors="pt")
        return self.text_encoder.encode_text(tok["input_ids"].to(self.device), tok["attention_mask"].to(self.device))

    @torch.no_grad()
    def set_classes(self, classes: Sequence[str]) -> None:
        self.classes = tuple(classes)
        self.prompt_info = prompt_texts(self.classes, self.config, self.prompt_model, self.dataset)
        self.prompts, self.unsupported = self.prompt_info.texts, self.prompt_info.unsupported
        self.text_features = self.encode(self.prompts).to(self.dtype)

    def image_transform(self, dataset: str | None = None) -> PILResize:
        """The official test transform (PIL ``Resize([S, S])``, ``ToTensor``, ``Normalize``); no
        official loader of these models equalises, so "auto" is off."""
        return dataclasses.replace(self.transform, equalize=equalize_for(self.equalize, dataset, ()))

    def preprocess(self, images: torch.Tensor, orig_size: torch.Tensor | None = None) -> torch.Tensor:
        if orig_size is None:
            orig_size = torch.tensor([images.shape[-2:]] * images.shape[0])
        return self.inputs(images, orig_size).to(self.device, self.dtype)

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, orig_size: torch.Tensor) -> AdapterOutput:
        if self.text_features is None:
            raise RuntimeError("call set_classes() before extracting")
        x = self.preprocess(images, orig_size)
        logits, attentions = self.fusion(self.image_encoder(x), self.text_features)
        scores = torch.softmax(logits.float(), dim=-1)[..., 1]
        maps = tokens_to_grid(select_layers(attentions, self.layers).float())
        zero_unsupported(scores, maps, self.classes, self.unsupported)
        return AdapterOutput(scores=scores, maps=maps)

    def provenance(self) -> dict:
        return {**self._provenance, "prompts": self.prompt_info.to_dict(self.classes) if self.prompt_info else {},
                "layers": list(self.layers),
                "map": f"cross-attention, mean of decoder layers {list(self.layers)}, "
                       f"{self.grid}x{self.grid} tokens, head-averaged"}

    def to(self, device, dtype=None):
        self.device = torch.device(device)
        if dtype is not None:
            self.dtype = dtype
        for m in (self.image_encoder, self.fusion):
            m.to(self.device, self.dtype)
        self.text_encoder.to(self.device)  # text features are computed once, in float32
        if self.text_features is not None:
            self.text_features = self.text_features.to(self.device, self.dtype)
        return self


class KADAdapter(TextQueryAdapter):
    """KAD, which also grounds free-text phrases (contract §Phrase rows).

    KAD's decoder runs self-attention among its queries, so a query's output depends on the queries beside
    it. A phrase therefore takes its category's slot in the dataset's query set (the class prompts of
    :meth:`set_classes`, the other classes unchanged): its score and map come from the same decoder, the
    same last-layer cross-attention and the same context as the class's, and a phrase whose text is the
    class prompt gives exactly the class's outputs. The phrase is tokenised as the class prompts are (the
    Med-KEBERT tokenizer, lower case, padded to ``max_length``), with no template: KAD's own scripts feed
    bare finding text (``A3_CLIP/plot_visualize_512.py:23-26,78-79``).
    """

    supports_phrases = True
    #: the runner passes each phrase's category (:meth:`phrase_outputs` needs the slot it takes)
    phrase_categories = True

    @torch.no_grad()
    def phrase_outputs(self, images: torch.Tensor, orig_size: torch.Tensor, texts: Sequence[str], rows: torch.Tensor,
                       categories: Sequence[str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.text_features is None:
            raise RuntimeError("call set_classes() before extracting")
        if categories is None or len(categories) != len(texts):
            raise ModelConfigError("KAD phrase rows need each phrase's category (the query slot it takes)")
        missing = sorted({c for c in categories if c not in self.classes})
        if missing:
            raise ModelConfigError(f"phrase categories {missing} are not among the classes {list(self.classes)}")
        q = len(texts)
        slot = torch.as_tensor([self.classes.index(c) for c in categories], dtype=torch.long, device=self.device)
        sets = self.text_features.unsqueeze(0).repeat(q, 1, 1)  # (Q, C, D): the class set of each phrase ...
        at = torch.arange(q, device=self.device)
        sets[at, slot] = self.encode(texts).to(sets.dtype)  # ... with the phrase in its category's slot
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.device)
        feats = self.image_encoder(self.preprocess(images, orig_size))
        logits, attentions = self.fusion.forward_sets(feats[rows], sets)
        scores = torch.softmax(logits.float(), dim=-1)[at, slot, 1]
        maps = tokens_to_grid(select_layers(attentions, self.layers).float())[at, slot]
        return scores, maps


def build_modules(config: Mapping):
    """The three KAD modules, random weights; ``options.arch`` shrinks them for tests."""
    arch = arch_from(config, DEFAULT_ARCH)
    image_size = int(option(config, "image_size", 512))
    stages = int(option(config, "stages", 4 if image_size >= 512 else 3))
    text_dir = config.get("text_encoder") or option(config, "text_encoder")
    bert = build_bert_from_config(text_dir, output_hidden_states=True)
    if bert.config.hidden_size != arch["embed_dim"]:
        raise AdapterConfigError(
            f"text encoder hidden size {bert.config.hidden_size} != embed_dim {arch['embed_dim']}")
    image = KADImageEncoder(embed_dim=arch["embed_dim"], resnet_layers=tuple(arch["resnet_layers"]), stages=stages)
    text = KADTextEncoder(bert, arch["embed_dim"])
    fusion = KADFusion(embed_dim=arch["embed_dim"], nhead=arch["nhead"], num_layers=arch["num_layers"],
                       dim_feedforward=arch["dim_feedforward"], class_num=arch["class_num"], dropout=arch["dropout"])
    return arch, image_size, stages, image, text, fusion


def load_kad_checkpoint(config: Mapping, image, text, fusion) -> dict:
    if wants_random_weights(config):
        return {"weights": None, "note": "random initialisation (weights: random)"}
    path = config.get("weights")
    if not path:
        raise AdapterConfigError("config key 'weights' (KAD checkpoint with image_encoder/text_encoder/model) is required")
    ckpt = read_checkpoint(path, trust=trust_option(config))
    missing = [k for k in ("image_encoder", "text_encoder", "model") if k not in ckpt]
    if missing:
        raise AdapterConfigError(f"{path}: KAD checkpoint lacks {missing} (top-level keys: {sorted(map(str, ckpt))[:10]})")
    dropped = []
    for key, module, drop in (("image_encoder", image, ()), ("text_encoder", text, BERT_NON_PARAMETERS),
                              ("model", fusion, ())):
        rep = load_official_state_dict(module, ckpt[key], prefixes=("module.",), drop=drop, where=f"{path}[{key}]")
        dropped += [f"{key}.{k}" for k in rep["dropped"]]
    info = {"weights": str(path), "dropped_keys": dropped}
    if bool_option(config, "hash_weights", True):
        info["weights_sha256"] = file_sha256(path)
    return info


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"kad": "build"}


def build(config: Mapping) -> KADAdapter:
    """Build the KAD adapter.

    Config keys: ``weights`` (KAD-512 or KAD-1024 checkpoint), ``text_encoder`` (local Med-KEBERT
    folder: config.json + tokenizer files; weights come from the checkpoint), ``device``;
    ``layers`` (default [-1], the last layer, as upstream); ``prompts`` (registry format; default:
    the authors' text for the dataset where a KAD script publishes it, else the bare finding
    text, see extract/models/prompts.toml); options: ``image_size`` (512; 1024 for KAD-1024, 224 for
    the layer3 variant), ``max_length`` (256), ``trust_checkpoint``, ``hash_weights``, ``arch``.
    """
    arch, image_size, stages, image, text, fusion = build_modules(config)
    info = load_kad_checkpoint(config, image, text, fusion)
    tokenizer = load_tokenizer(config.get("text_encoder") or option(config, "text_encoder"), do_lower_case=True)
    prov = {"model": "kad", "source": "github.com/xiaoman-zhang/KAD", **info,
            "preprocess": f"PIL Resize([{image_size}, {image_size}]) bicubic, ImageNet mean/std; equalize {equalize_setting(config)}",
            "score": "softmax over the 2-way mlp_head, index 1", "arch": arch,
            "text_encoder": str(config.get("text_encoder"))}
    return KADAdapter(image, text, fusion, tokenizer, image_size=image_size,
                      grid=resnet_grid(image_size, stages), layers=layers_from(config, 1),
                      config=config, prompt_model="kad", max_length=int(option(config, "max_length", 256)),
                      interpolation="bicubic", device=pick_device(config), provenance=prov,
                      equalize=equalize_setting(config))
