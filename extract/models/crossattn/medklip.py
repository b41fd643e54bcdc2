"""MedKLIP (Wu et al., ICCV 2023), MediaBrain-SJTU/MedKLIP.

Network (``MedKLIPNet``), parameter names as in ``models/model_MedKLIP.py::MedKLIP``:

* ``res_features``: ResNet-50 children up to ``layer3`` (1024 x 14 x 14 at 224 px)
* ``res_l1`` Linear(1024, 1024) + ReLU, ``res_l2`` Linear(1024, 256): 196 visual tokens
* ``disease_embedding_layer`` Linear(768, 256) over the 75 cached entity embeddings (queries)
* ``decoder``: 4 pre-norm layers (self-attention, cross-attention, FFN 1024), 4 heads, final norm
* ``classifier`` Linear(256, 2); ``cl_fc`` Linear(256, 768) is a training-only head kept so the
  checkpoint loads strictly.

Score: ``softmax(classifier)[..., 1]`` per entity (a probability). Map: cross-attention averaged
over the last 4 layers, (B, 75, 196) -> 14 x 14; the image is stretched to 224 x 224, so the grid
covers the whole image without any geometry to undo.

Preprocessing (official test transform, ``Sample_zero-shot_Classification_CXR14/dataset/dataset.py``
and ``Sample_Zero-Shot_Grounding_RSNA/dataset/dataset_RSNA.py``): PIL grey -> RGB,
``transforms.Resize([224, 224])`` (PIL bilinear), ``ToTensor``, ImageNet ``Normalize``; the RSNA
loader equalises the histogram first (``options.equalize``, "auto": on for ``rsna_pneumonia``).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from xbench.extract.models.base import AdapterOutput, ModelAdapter
from xbench.extract.models.pixels import PILResize
from xbench.extract.models.crossattn.cache import QueryCache, read_query_cache
from xbench.extract.models.crossattn.common import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    AdapterConfigError,
    QueryDecoder,
    QueryDecoderLayer,
    equalize_for,
    equalize_setting,
    file_sha256,
    gather_columns,
    load_mapping_table,
    load_official_state_dict,
    layers_from,
    merge_mapping,
    option,
    pick_device,
    pick_state_dict,
    read_checkpoint,
    trust_option,
    bool_option,
    resnet_trunk,
    resolve_entities,
    select_layers,
    tokens_to_grid,
    wants_random_weights,
)

log = logging.getLogger(__name__)

# Official sizes; tests shrink them through ``options.arch``.
DEFAULT_ARCH = {
    "d_model": 256,
    "nhead": 4,
    "num_layers": 4,
    "dim_feedforward": 1024,
    "text_dim": 768,
    "resnet_layers": [3, 4, 6, 3],
    "dropout": 0.1,
}


def resnet_grid(size: int, stages: int) -> int:
    """Spatial side of a torchvision ResNet feature map after ``stages`` residual stages (3 =
    ``layer3``, 4 = ``layer4``) for a ``size`` x ``size`` input."""
    n = (size + 2 * 3 - 7) // 2 + 1  # conv1 7x7/2
    n = (n + 2 * 1 - 3) // 2 + 1  # maxpool 3x3/2
    for _ in range(stages - 1):  # layer2.. each halve with a 3x3/2 conv
        n = (n + 2 * 1 - 3) // 2 + 1
    return n


class MedKLIPNet(nn.Module):
    """MedKLIP with the official module names. ``forward(images, book)`` -> (logits (B, Q, 2),
    per-layer cross-attention list of (B, Q, T))."""

    def __init__(self, *, d_model=256, nhead=4, num_layers=4, dim_feedforward=1024, text_dim=768,
                 resnet_layers=(3, 4, 6, 3), dropout=0.1, attribute_set_size=2) -> None:
        super().__init__()
        self.disease_embedding_layer = nn.Linear(text_dim, d_model)
        self.cl_fc = nn.Linear(d_model, text_dim)
        resnet = resnet_trunk(resnet_layers)
        num_ftrs = resnet.fc.in_features // 2
        self.res_features = nn.Sequential(*list(resnet.children())[:-3])
        self.res_l1 = nn.Linear(num_ftrs, num_ftrs)
        self.res_l2 = nn.Linear(num_ftrs, d_model)
        layer = QueryDecoderLayer(d_model, nhead, dim_feedforward, dropout, self_attention=True)
        self.decoder = QueryDecoder(layer, num_layers, nn.LayerNorm(d_model))
        self.dropout_feas = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, attribute_set_size)

    def image_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) -> (B, T, d_model), tokens in row-major order of the layer3 grid."""
        fea = self.res_features(x).flatten(2).transpose(1, 2)
        return self.res_l2(F.relu(self.res_l1(fea)))

    def forward(self, images: torch.Tensor, book: torch.Tensor):
        memory = self.image_tokens(images).transpose(0, 1)  # (T, B, d)
        queries = self.disease_embedding_layer(book).unsqueeze(1).expand(-1, images.shape[0], -1)
        out, attentions = self.decoder(queries, memory)
        logits = self.classifier(self.dropout_feas(out)).transpose(0, 1)  # (B, Q, 2)
        return logits, attentions


class EntityQueryAdapter(ModelAdapter):
    """Shared adapter logic for the fixed-vocabulary entity-query models (MedKLIP, MAVL)."""

    score_kind = "probability"
    method = "cross-attention"
    model_name = "medklip"
    #: datasets whose official loader equalises the histogram (RSNA2018_Dataset.read_dcm)
    equalize_datasets: tuple[str, ...] = ("rsna_pneumonia",)

    def __init__(self, net: nn.Module, cache: QueryCache, *, image_size: int, grid: int,
                 layers: Sequence[int], entity_map: Mapping | None, device: torch.device,
                 provenance: dict, equalize: bool | str = "auto") -> None:
        super().__init__()
        self.transform = PILResize(size=(int(image_size), int(image_size)), filter="bilinear",
                                   mean=IMAGENET_MEAN, std=IMAGENET_STD)
        self.equalize = equalize
        self.net = net.eval()
        self.cache = cache
        self.image_size = int(image_size)
        self.grid = int(grid)
        self.layers = tuple(layers)
        self.table = merge_mapping(load_mapping_table("entities"), entity_map)
        self.device = device
        self.dtype = torch.float32
        self._provenance = provenance
        self._indices: list[int] = []
        self.book = self._query_book().to(device)
        self.net.to(device)

    def _query_book(self) -> torch.Tensor:
        return torch.from_numpy(self.cache.disease_book)

    @property
    def map_shape(self) -> tuple[int, int]:
        return (self.grid, self.grid)

    def set_classes(self, classes: Sequence[str]) -> None:
        self.classes = tuple(classes)
        self._indices, self.unsupported = resolve_entities(self.classes, self.table, self.cache.entities)

    def image_transform(self, dataset: str | None = None) -> PILResize:
        """Official test transform (module docstring), equalising where ``options.equalize`` says."""
        return dataclasses.replace(self.transform, equalize=equalize_for(self.equalize, dataset, self.equalize_datasets))

    def preprocess(self, images: torch.Tensor, orig_size: torch.Tensor | None = None) -> torch.Tensor:
        """Model input (B, 3, S, S) on the adapter's device from stored uint8 images or runner inputs."""
        if orig_size is None:
            orig_size = torch.tensor([images.shape[-2:]] * images.shape[0])
        return self.inputs(images, orig_size).to(self.device, self.dtype)

    def entity_outputs(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, 3, S, S) -> per-entity probabilities (B, E) and maps (B, E, g, g)."""
        logits, attentions = self.net(x, self.book.to(x.dtype))
        probs = torch.softmax(logits.float(), dim=-1)[..., 1]
        maps = tokens_to_grid(select_layers(attentions, self.layers).float())
        return probs, maps

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, orig_size: torch.Tensor) -> AdapterOutput:
        if not self.classes:
            raise RuntimeError("call set_classes() before extracting")
        probs, maps = self.entity_outputs(self.preprocess(images, orig_size))
        return AdapterOutput(scores=gather_columns(probs, self._indices, 0.0),
                             maps=gather_columns(maps, self._indices, 0.0))

    def provenance(self) -> dict:
        mapping = {c: (self.cache.entities[i] if i >= 0 else None) for c, i in zip(self.classes, self._indices)}
        return {**self._provenance, "entity_map": mapping, "cache": self.cache.meta, "layers": list(self.layers),
                "map": f"cross-attention, mean of decoder layers {list(self.layers)}, "
                       f"{self.grid}x{self.grid} tokens, head-averaged"}

    def to(self, device, dtype=None) -> "EntityQueryAdapter":
        self.device = torch.device(device)
        if dtype is not None:
            self.dtype = dtype
        self.net.to(self.device, self.dtype)
        self.book = self.book.to(self.device)
        return self


def arch_from(config: Mapping, defaults: Mapping) -> dict:
    arch = dict(defaults)
    unknown = set(option(config, "arch", {}) or {}) - set(defaults)
    if unknown:
        raise AdapterConfigError(f"unknown options.arch keys {sorted(unknown)}; known: {sorted(defaults)}")
    arch.update(option(config, "arch", {}) or {})
    return arch


def load_weights(net: nn.Module, config: Mapping, *, keys=("model", "state_dict"), prefixes=("module.",),
                 drop=()) -> dict:
    """Load ``config['weights']`` strictly into ``net``; ``options.random_init`` skips loading
    (tests and smoke runs only; the provenance says so)."""
    if wants_random_weights(config):
        return {"weights": None, "note": "random initialisation (weights: random)"}
    path = config.get("weights")
    if not path:
        raise AdapterConfigError("config key 'weights' (path to the official checkpoint) is required")
    ckpt = read_checkpoint(path, trust=trust_option(config))
    report = load_official_state_dict(net, pick_state_dict(ckpt, keys), prefixes=prefixes, drop=drop,
                                      where=str(path))
    info = {"weights": str(path), "dropped_keys": report["dropped"], "loaded_keys": report["loaded"]}
    if bool_option(config, "hash_weights", True):
        info["weights_sha256"] = file_sha256(path)
    return info


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"medklip": "build"}


def build(config: Mapping) -> EntityQueryAdapter:
    """Build the MedKLIP adapter.

    Config keys: ``weights`` (official checkpoint, ``['model']`` with ``module.`` prefixes),
    ``embeddings_cache`` (from ``xbench build-embeddings``), ``device``; options:
    ``image_size`` (224); ``layers`` (default [-4, -3, -2, -1]), ``entity_map`` (finding -> entity overrides),
    ``trust_checkpoint``, ``hash_weights``, ``arch`` (size overrides, for tests); ``weights: random`` for tests.
    """
    arch = arch_from(config, DEFAULT_ARCH)
    cache_path = config.get("embeddings_cache") or option(config, "embeddings_cache")
    if not cache_path:
        raise AdapterConfigError("config key 'embeddings_cache' is required (build it with `xbench build-embeddings`)")
    cache = read_query_cache(cache_path)
    if cache.disease_book.shape[1] != arch["text_dim"]:
        raise AdapterConfigError(
            f"cache embeddings are {cache.disease_book.shape[1]}-d but the model expects {arch['text_dim']}-d")
    net = MedKLIPNet(**{**arch, "resnet_layers": tuple(arch["resnet_layers"])})
    info = load_weights(net, config)
    image_size = int(option(config, "image_size", 224))
    prov = {"model": "medklip", "source": "github.com/MediaBrain-SJTU/MedKLIP", **info,
            "preprocess": f"PIL Resize([{image_size}, {image_size}]) bilinear, ImageNet mean/std; equalize {equalize_setting(config)}",
            "score": "softmax over the 2-way classifier, index 1", "arch": arch}
    return EntityQueryAdapter(net, cache, image_size=image_size, grid=resnet_grid(image_size, 3),
                              layers=layers_from(config, 4),
                              entity_map=option(config, "entity_map"), device=pick_device(config),
                              provenance=prov, equalize=equalize_setting(config))
