"""MAVL (Phan et al., CVPR 2024), HieuPhan33/MAVL.

Network (``MAVLNet``), names as in ``Zero-shot_grounding/models/model_MAVL.py::MAVL`` with
``base_model: resnet50``, ``decoder: cross``, ``self_attention: True``:

* ``backbone``: ResNet-50 children up to ``layer3`` (1024 x 14 x 14 at 224 px)
* ``pool``: CLIP-style ``AttentionPool2d`` (``positional_embedding``, ``q/k/v/c_proj``) giving the
  global feature used only by MAVL's "text" scoring mode (kept for strict loading)
* ``res_l1`` Conv1x1 + PReLU, ``res_l2`` Conv1x1 -> 256
* ``disease_embedding_layer`` Linear(768, 256) over 75 x 9 queries: each entity's description
  followed by its 8 visual-aspect sentences
* ``location_emb`` Conv1d(256, 768, k=9, s=9) (training-only head, kept for strict loading)
* ``decoder``: 4 pre-norm layers with self-attention, 4 heads, FFN 1024
* ``classifier`` Linear(256 * 9, 2) over the concatenated 9 query outputs of an entity

Score: ``softmax(classifier)[..., 1]`` (mode "feature"). Map: cross-attention averaged over the
last 4 layers, then over queries [0, 6, 7, 8] of each entity (description, patterns, shape,
texture; mode "avg"), 14 x 14 over the stretched whole image.

Preprocessing as MedKLIP's (``Zero-shot_grounding/dataset/dataset.py``, the zero-shot
classification ``dataset/dataset.py``): PIL ``Resize([224, 224])`` bilinear, ImageNet
``Normalize``; ``RSNA2018_Dataset.read_dcm`` equalises first ("auto": on for ``rsna_pneumonia``).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from xbench.extract.models.crossattn.cache import read_query_cache
from xbench.extract.models.crossattn.common import (
    AdapterConfigError,
    QueryDecoder,
    equalize_setting,
    QueryDecoderLayer,
    layers_from,
    select_layers,
    option,
    pick_device,
    resnet_trunk,
    tokens_to_grid,
)
from xbench.extract.models.crossattn.entities import MAVL_GROUNDING_QUERIES
from xbench.extract.models.crossattn.medklip import EntityQueryAdapter, arch_from, load_weights, resnet_grid

DEFAULT_ARCH = {
    "d_model": 256,
    "nhead": 4,
    "num_layers": 4,
    "dim_feedforward": 1024,
    "text_dim": 768,
    "location_dim": 768,
    "resnet_layers": [3, 4, 6, 3],
    "n_concepts": 9,
    "pool_grid": 14,  # AttentionPool2d(224 // 16, ...) is hard-coded upstream
    "pool_heads": 8,
    "self_attention": True,
    "dropout": 0.1,
}


class AttentionPool2d(nn.Module):
    """CLIP's attention pooling (parameter layout only matters here; see module docstring)."""

    def __init__(self, spacial_dim: int, embed_dim: int, num_heads: int, output_dim: int | None = None) -> None:
        super().__init__()
        self.positional_embedding = nn.Parameter(torch.randn(spacial_dim ** 2 + 1, embed_dim) / embed_dim ** 0.5)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.c_proj = nn.Linear(embed_dim, output_dim or embed_dim)
        self.num_heads = num_heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, h, w) -> (B, output_dim): the mean token attending over all tokens."""
        x = x.flatten(2).permute(2, 0, 1)
        x = torch.cat([x.mean(dim=0, keepdim=True), x], dim=0) + self.positional_embedding[:, None, :].to(x.dtype)
        out, _ = F.multi_head_attention_forward(
            query=x[:1], key=x, value=x, embed_dim_to_check=x.shape[-1], num_heads=self.num_heads,
            q_proj_weight=self.q_proj.weight, k_proj_weight=self.k_proj.weight, v_proj_weight=self.v_proj.weight,
            in_proj_weight=None, in_proj_bias=torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]),
            bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0,
            out_proj_weight=self.c_proj.weight, out_proj_bias=self.c_proj.bias,
            use_separate_proj_weight=True, training=self.training, need_weights=False)
        return out[0]


class MAVLNet(nn.Module):
    """``forward(images, concept_book (E*K, text_dim))`` -> (logits (B, E, 2), attentions list of
    (B, E*K, T)), K = ``n_concepts`` queries per entity."""

    def __init__(self, *, d_model=256, nhead=4, num_layers=4, dim_feedforward=1024, text_dim=768,
                 location_dim=768, resnet_layers=(3, 4, 6, 3), n_concepts=9, pool_grid=14, pool_heads=8,
                 self_attention=True, dropout=0.1, attribute_set_size=2) -> None:
        super().__init__()
        self.n_concepts = n_concepts
        self.disease_embedding_layer = nn.Linear(text_dim, d_model)
        resnet = resnet_trunk(resnet_layers)
        num_ftrs = resnet.fc.in_features // 2
        self.backbone = nn.Sequential(*list(resnet.children())[:-3])
        self.pool = AttentionPool2d(pool_grid, num_ftrs, pool_heads, d_model)
        self.res_l1 = nn.Sequential(nn.Conv2d(num_ftrs, num_ftrs, kernel_size=1), nn.PReLU())
        self.res_l2 = nn.Conv2d(num_ftrs, d_model, kernel_size=1)
        self.location_emb = nn.Conv1d(d_model, location_dim, kernel_size=n_concepts, stride=n_concepts)
        layer = QueryDecoderLayer(d_model, nhead, dim_feedforward, dropout, self_attention=self_attention)
        self.decoder = QueryDecoder(layer, num_layers, nn.LayerNorm(d_model))
        self.dropout_feas = nn.Dropout2d(dropout)
        self.classifier = nn.Linear(d_model * n_concepts, attribute_set_size)

    def forward(self, images: torch.Tensor, concept_book: torch.Tensor):
        b = images.shape[0]
        x = self.res_l2(self.res_l1(self.backbone(images)))  # (B, d, h, w)
        memory = x.flatten(2).permute(2, 0, 1)  # (h*w, B, d), row-major
        queries = self.disease_embedding_layer(concept_book).unsqueeze(1).expand(-1, b, -1)
        out, attentions = self.decoder(queries, memory)  # (E*K, B, d)
        out = out.transpose(0, 1).reshape(b, -1, self.n_concepts * out.shape[-1])  # (B, E, K*d)
        return self.classifier(out), attentions


class MAVLAdapter(EntityQueryAdapter):
    model_name = "mavl"

    def __init__(self, *args, aspect_queries: Sequence[int], **kwargs) -> None:
        self.aspect_queries = tuple(int(i) for i in aspect_queries)
        super().__init__(*args, **kwargs)

    def _query_book(self) -> torch.Tensor:
        """(E * (1 + A), D): per entity its description then its A aspect sentences."""
        book = np.concatenate([self.cache.disease_book[:, None, :], self.cache.aspect_book], axis=1)
        return torch.from_numpy(book.reshape(-1, book.shape[-1]))

    def entity_outputs(self, x: torch.Tensor):
        logits, attentions = self.net(x, self.book.to(x.dtype))
        probs = torch.softmax(logits.float(), dim=-1)[..., 1]
        attn = select_layers(attentions, self.layers).float()  # (B, E*K, T)
        b, _, t = attn.shape
        attn = attn.reshape(b, len(self.cache.entities), -1, t)[:, :, list(self.aspect_queries)].mean(dim=2)
        return probs, tokens_to_grid(attn)

    def provenance(self) -> dict:
        prov = super().provenance()
        names = ("description", *self.cache.aspects)
        prov["map"] += "; then mean over queries " + ", ".join(
            f"{i} ({names[i] if i < len(names) else '?'})" for i in self.aspect_queries)
        return prov


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"mavl": "build"}


def build(config: Mapping) -> MAVLAdapter:
    """Build the MAVL adapter.

    Config keys: ``weights`` (``checkpoint_full_40.pth`` for grounding or ``..._46`` for
    classification; ``['model']``, ``module.`` stripped, keys containing ``temp`` dropped as the
    official test does), ``embeddings_cache`` (built with ``--aspects``), ``device``; options:
    ``image_size`` (224); ``layers`` ([-4, -3, -2, -1]); ``aspect_queries`` ([0, 6, 7, 8]), ``entity_map``,
    ``trust_checkpoint``, ``hash_weights``, ``arch``, ``random_init``.
    """
    arch = arch_from(config, DEFAULT_ARCH)
    cache_path = config.get("embeddings_cache") or option(config, "embeddings_cache")
    if not cache_path:
        raise AdapterConfigError("config key 'embeddings_cache' is required (build it with `xbench build-embeddings --aspects ...`)")
    cache = read_query_cache(cache_path, need_aspects=True)
    if cache.aspect_book.shape[1] + 1 != arch["n_concepts"]:
        raise AdapterConfigError(
            f"cache has {cache.aspect_book.shape[1]} aspects per entity; the checkpoint needs {arch['n_concepts'] - 1}")
    if cache.disease_book.shape[1] != arch["text_dim"]:
        raise AdapterConfigError(
            f"cache embeddings are {cache.disease_book.shape[1]}-d but the model expects {arch['text_dim']}-d")
    aspect_queries = option(config, "aspect_queries", list(MAVL_GROUNDING_QUERIES))
    if not aspect_queries or any(not 0 <= int(i) < arch["n_concepts"] for i in aspect_queries):
        raise AdapterConfigError(f"options.aspect_queries must be indices in [0, {arch['n_concepts']}), got {aspect_queries}")
    net = MAVLNet(**{**arch, "resnet_layers": tuple(arch["resnet_layers"])})
    info = load_weights(net, config, drop=(r"temp",))
    image_size = int(option(config, "image_size", 224))
    prov = {"model": "mavl", "source": "github.com/HieuPhan33/MAVL", **info,
            "preprocess": f"PIL Resize([{image_size}, {image_size}]) bilinear, ImageNet mean/std; equalize {equalize_setting(config)}",
            "score": "softmax over the 2-way classifier, index 1 (mode 'feature')", "arch": arch}
    return MAVLAdapter(net, cache, image_size=image_size, grid=resnet_grid(image_size, 3),
                       layers=layers_from(config, 4), entity_map=option(config, "entity_map"),
                       device=pick_device(config), provenance=prov, aspect_queries=aspect_queries,
                       equalize=equalize_setting(config))
