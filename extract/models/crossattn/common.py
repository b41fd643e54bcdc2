"""Building blocks shared by the cross-attention adapters.

* ``QueryDecoderLayer`` / ``QueryDecoder``: the DETR-style pre-norm query decoder used by MedKLIP,
  KAD, MAVL, CARZero (and assumed for DeViDe), with the official parameter names
  (``self_attn``, ``multihead_attn``, ``linear1``, ``linear2``, ``norm1..3``) and returning the
  head-averaged cross-attention weights of every layer.
* ``resnet_trunk``: a torchvision ResNet built without pretrained weights.
* Checkpoint reading and strict loading with documented prefix stripping.
* The ``options.equalize`` setting (the transforms themselves are in ``extract/models/pixels.py``).
* Loading the finding -> entity/prompt tables (``mappings.toml``).
"""
from __future__ import annotations

import copy
import math
import os
import pickle
import re
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from xbench.schemas.store import file_sha256  # noqa: F401  (the adapters import it from here)

from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class AdapterConfigError(ModelConfigError):
    """A configuration, checkpoint or cache problem; the message is one line per problem."""


class CheckpointMismatchError(AdapterConfigError):
    """The checkpoint's keys or shapes do not match the module built from the configuration."""


# --------------------------------------------------------------------------------------------
# Query decoder
# --------------------------------------------------------------------------------------------
class QueryDecoderLayer(nn.Module):
    """One pre-norm decoder layer: [self-attention], cross-attention, feed-forward.

    Sequences are (length, batch, d_model) as in ``nn.MultiheadAttention(batch_first=False)``.

    Parameters
    ----------
    self_attention:
        Run self-attention among the queries (MedKLIP, KAD, MAVL). CARZero keeps the
        ``self_attn``/``norm1`` parameters but never runs them: pass ``self_attention=False,
        self_attention_params=True`` for that layout.
    self_attention_params:
        Whether ``self_attn`` and ``norm1`` exist; defaults to ``self_attention``.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 1024,
        dropout: float = 0.1,
        *,
        self_attention: bool = True,
        self_attention_params: bool | None = None,
    ) -> None:
        super().__init__()
        has_sa = self_attention if self_attention_params is None else self_attention_params
        if self_attention and not has_sa:
            raise ValueError("self_attention=True needs self_attention_params=True")
        self.run_self_attention = self_attention
        if has_sa:
            self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
            self.norm1 = nn.LayerNorm(d_model)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tgt (Q, B, D), memory (T, B, D) -> (tgt (Q, B, D), attention (B, Q, T)).

        The attention is softmax-normalised over T and averaged over heads, so each (b, q) row
        sums to 1.
        """
        if self.run_self_attention:
            q = self.norm1(tgt)
            tgt = tgt + self.dropout1(self.self_attn(q, q, q, need_weights=False)[0])
        q = self.norm2(tgt)
        out, attn = self.multihead_attn(q, memory, memory, need_weights=True, average_attn_weights=True)
        tgt = tgt + self.dropout2(out)
        ff = self.linear2(self.dropout(F.relu(self.linear1(self.norm3(tgt)))))
        return tgt + self.dropout3(ff), attn


class QueryDecoder(nn.Module):
    """``num_layers`` copies of a layer followed by a final LayerNorm (``layers``, ``norm``)."""

    def __init__(self, layer: QueryDecoderLayer, num_layers: int, norm: nn.LayerNorm) -> None:
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))
        self.norm = norm

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Returns the normed output (Q, B, D) and one (B, Q, T) attention per layer."""
        attentions = []
        for layer in self.layers:
            tgt, attn = layer(tgt, memory)
            attentions.append(attn)
        return self.norm(tgt), attentions


def mean_last_layers(attentions: Sequence[torch.Tensor], n: int) -> torch.Tensor:
    """Mean of the last ``n`` per-layer attentions (all of them if fewer exist)."""
    if n < 1:
        raise ModelConfigError(f"n must be >= 1, got {n}")
    return torch.stack(list(attentions[-n:]), dim=0).mean(dim=0)


def select_layers(attentions: Sequence[torch.Tensor], layers: Sequence[int]) -> torch.Tensor:
    """Mean of the per-layer attentions at the given (possibly negative) layer indices."""
    n = len(attentions)
    bad = [i for i in layers if not -n <= int(i) < n]
    if not layers or bad:
        raise ModelConfigError(f"layer indices {list(layers)} are not valid for a {n}-layer decoder")
    return torch.stack([attentions[int(i)] for i in layers], dim=0).mean(dim=0)


def layers_from(config: Mapping, default_last: int) -> tuple[int, ...]:
    """Decoder layers whose cross-attention is averaged: config ``layers`` (e.g. [-4, -3, -2, -1]),
    else ``options.map_layers`` = n meaning the last n, else the model's default."""
    layers = config.get("layers")
    if layers is None:
        n = int(option(config, "map_layers", default_last))
        if n < 1:
            raise AdapterConfigError(f"options.map_layers must be >= 1, got {n}")
        layers = list(range(-n, 0))
    if isinstance(layers, int):
        layers = [layers]
    return tuple(int(i) for i in layers)


def tokens_to_grid(attn: torch.Tensor) -> torch.Tensor:
    """(B, Q, T) with T = h*w row-major -> (B, Q, h, w); T must be a perfect square."""
    side = math.isqrt(attn.shape[-1])
    if side * side != attn.shape[-1]:
        raise ValueError(f"cannot reshape {attn.shape[-1]} tokens into a square grid")
    return attn.reshape(*attn.shape[:-1], side, side)


# --------------------------------------------------------------------------------------------
# Backbones
# --------------------------------------------------------------------------------------------
def resnet_trunk(layers: Sequence[int] = (3, 4, 6, 3)) -> nn.Module:
    """A torchvision bottleneck ResNet (ResNet-50 for the default ``layers``), random weights.

    Built directly from ``torchvision.models.resnet.ResNet`` so nothing is ever downloaded.
    """
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, list(layers))


# --------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------
class _StubObject:
    """Stands in for a class the checkpoint pickles but this environment lacks (omegaconf,
    lightning callbacks, argparse namespaces of the training code)."""

    def __init__(self, *args, **kwargs) -> None:
        self.__dict__["_args"] = args

    def __setstate__(self, state) -> None:
        self.__dict__["_state"] = state


class _LenientUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return type(name, (_StubObject,), {"__module__": module})


_lenient_pickle = types.ModuleType("xbench_lenient_pickle")
_lenient_pickle.Unpickler = _LenientUnpickler  # type: ignore[attr-defined]
_lenient_pickle.load = pickle.load  # type: ignore[attr-defined]
_lenient_pickle.__dict__["__name__"] = "pickle"


TRUST_HOW = ("only if you trust this file, write `trust_checkpoint: true` (a boolean, no quotes) under `options:` "
             "in the model config or pass --model-option options.trust_checkpoint=true")


def bool_option(config: Mapping, key: str, default: bool) -> bool:
    """A yes/no option that must be a real boolean (a string such as "false" is truthy in Python)."""
    value = option(config, key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        shown = f"the string {value[:40]!r}" if isinstance(value, str) else f"{type(value).__name__} {str(value)[:40]}"
        raise AdapterConfigError(f"options.{key} must be the boolean true or false, not {shown}")
    return value


def trust_option(config: Mapping) -> bool:
    """``options.trust_checkpoint``: True only for the boolean ``true``. A string (``"false"``, ``"yes"``),
    a number or anything else is refused with one line: a truthy string must never turn trust on."""
    value = option(config, "trust_checkpoint", False)
    if value is None or isinstance(value, bool):
        return value is True
    shown = f"the string {value[:40]!r}" if isinstance(value, str) else f"{type(value).__name__} {str(value)[:40]}"
    raise AdapterConfigError(f"options.trust_checkpoint must be the boolean true or false, not {shown}; {TRUST_HOW}")


def read_checkpoint(path: str | os.PathLike, *, trust: bool = False) -> dict:
    """Read a checkpoint file onto the CPU.

    ``.safetensors`` files are read with safetensors. Other files are read with
    ``torch.load(weights_only=True)``, which builds tensors and plain containers only and runs nothing
    from the file. A checkpoint that also pickles Python objects (Lightning's ``hyper_parameters``,
    argparse namespaces) is refused unless ``trust`` is the boolean True (:func:`trust_option`), which
    unpickles it fully (running whatever the pickle calls) and replaces classes missing here with inert
    stubs. Only do that for files you trust.
    """
    if not isinstance(trust, bool):
        raise AdapterConfigError(f"trust must be a boolean, got {type(trust).__name__}")
    p = Path(path).expanduser()
    if not p.is_file():
        raise WeightsNotFoundError("checkpoint", str(p), "Download the official weights (see the model card) "
                                   "and set `weights:` to the file.")
    if p.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(p))
        except (SafetensorError, OSError, ValueError) as exc:
            raise AdapterConfigError(f"{p}: not a readable safetensors file ({str(exc)[:160]})") from None
    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several unpickling error types
        if trust is not True:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AdapterConfigError(
                f"{p}: refused by torch.load(weights_only=True) ({first[:160]}): the file pickles Python objects, "
                f"and loading it fully would run code from it; {TRUST_HOW}"
            ) from None
    return torch.load(p, map_location="cpu", weights_only=False, pickle_module=_lenient_pickle)


def pick_state_dict(ckpt: Mapping, keys: Sequence[str]) -> dict:
    """Return ``ckpt[key]`` for the first key present, or ``ckpt`` itself if it already looks
    like a flat state dict (all values tensors)."""
    for key in keys:
        if key in ckpt and isinstance(ckpt[key], Mapping):
            return dict(ckpt[key])
    if ckpt and all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        return dict(ckpt)
    raise AdapterConfigError(
        f"checkpoint has none of the keys {list(keys)} and is not a flat state dict "
        f"(top-level keys: {sorted(map(str, ckpt))[:10]})"
    )


def strip_prefixes(state_dict: Mapping[str, torch.Tensor], prefixes: Iterable[str]) -> dict:
    """Remove any of ``prefixes`` from the start of every key, repeatedly (``module.module.x``)."""
    prefixes = tuple(p for p in prefixes if p)
    out = {}
    for key, value in state_dict.items():
        changed = True
        while changed:
            changed = False
            for p in prefixes:
                if key.startswith(p):
                    key, changed = key[len(p):], True
        out[key] = value
    return out


def load_official_state_dict(
    module: nn.Module,
    state_dict: Mapping[str, torch.Tensor],
    *,
    prefixes: Iterable[str] = (),
    drop: Iterable[str] = (),
    drop_outside_children: bool = False,
    where: str = "checkpoint",
) -> dict:
    """Strip ``prefixes``, drop keys matching any regex in ``drop`` (known non-parameters such as
    BERT's ``position_ids`` buffer), then ``load_state_dict(strict=True)``.

    With ``drop_outside_children`` keys whose first component is not a child module or parameter
    of ``module`` are dropped too (CARZero's official loader keeps only keys its model has).
    Raises ``CheckpointMismatchError`` listing missing/unexpected keys and shape mismatches.
    Returns ``{"loaded": n, "dropped": [keys]}``.
    """
    sd = strip_prefixes(state_dict, prefixes)
    patterns = [re.compile(p) for p in drop]
    own = module.state_dict()
    roots = {k.split(".", 1)[0] for k in own}
    dropped, kept = [], {}
    for key, value in sd.items():
        if any(p.search(key) for p in patterns) and key not in own:
            dropped.append(key)
        elif drop_outside_children and key.split(".", 1)[0] not in roots:
            dropped.append(key)
        else:
            kept[key] = value
    missing = sorted(set(own) - set(kept))
    unexpected = sorted(set(kept) - set(own))
    shapes = sorted(
        f"{k}: checkpoint {tuple(kept[k].shape)} vs model {tuple(own[k].shape)}"
        for k in set(own) & set(kept)
        if tuple(kept[k].shape) != tuple(own[k].shape)
    )
    problems = []
    if missing:
        problems.append(f"{where}: {len(missing)} missing keys, e.g. {missing[:5]}")
    if unexpected:
        problems.append(f"{where}: {len(unexpected)} unexpected keys, e.g. {unexpected[:5]}")
    if shapes:
        problems.append(f"{where}: {len(shapes)} shape mismatches, e.g. {shapes[:3]}")
    if problems:
        raise CheckpointMismatchError("\n".join(problems))
    module.load_state_dict(kept, strict=True)
    return {"loaded": len(kept), "dropped": sorted(dropped)}


# --------------------------------------------------------------------------------------------
# Text encoders (local folders only)
# --------------------------------------------------------------------------------------------
def _local_dir(path: str | os.PathLike | None, what: str) -> Path:
    if not path:
        raise AdapterConfigError(f"{what}: no local folder given (config key 'text_encoder')")
    p = Path(path).expanduser()
    if not (p / "config.json").is_file():
        raise AdapterConfigError(f"{what}: {p} is not a Hugging Face model folder (no config.json)")
    from xbench.extract.models.files import check_model_json

    for name in ("config.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
        check_model_json(p / name, what)  # bounded before transformers parses them itself
    return p


def build_bert_from_config(path: str | os.PathLike, *, output_hidden_states: bool = False) -> nn.Module:
    """A BERT whose weights will come from the model checkpoint: only ``config.json`` is read."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig, AutoModel

    p = _local_dir(path, "text encoder")
    cfg = AutoConfig.from_pretrained(str(p), local_files_only=True)
    cfg.output_hidden_states = output_hidden_states
    return AutoModel.from_config(cfg, attn_implementation="eager")


def load_pretrained_text_model(path: str | os.PathLike) -> nn.Module:
    """A text encoder with its own weights from a local folder (used to build the query cache)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel

    p = _local_dir(path, "text encoder")
    return AutoModel.from_pretrained(str(p), local_files_only=True)


def load_tokenizer(path: str | os.PathLike, **kwargs):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    p = Path(path).expanduser() if path else None
    if p is None or not p.is_dir():
        raise AdapterConfigError(f"tokenizer: {path} is not a local folder")
    from xbench.extract.models.files import check_model_json

    for name in ("tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "config.json"):
        check_model_json(p / name, "tokenizer")  # bounded before transformers parses them itself
    return AutoTokenizer.from_pretrained(str(p), local_files_only=True, **kwargs)


# BERT checkpoints saved with older transformers carry this buffer; newer ones do not.
BERT_NON_PARAMETERS = (r"(^|\.)embeddings\.position_ids$",)


# --------------------------------------------------------------------------------------------
# Preprocessing
# --------------------------------------------------------------------------------------------
def equalize_setting(config: Mapping) -> bool | str:
    """``options.equalize``: true, false or "auto" (the default: on exactly where the model's
    official loader for that dataset equalises, see :func:`equalize_for`)."""
    value = option(config, "equalize", "auto")
    if value not in (True, False, "auto"):
        raise AdapterConfigError(f"options.equalize must be true, false or \"auto\", got {value!r}")
    return value


def equalize_for(setting: bool | str, dataset: str | None, official: Sequence[str]) -> bool:
    """Whether to equalise ``dataset``: ``setting`` if boolean; for "auto", whether the model's
    official loader of that dataset does (``official``: dataset keys); never for an unnamed one."""
    if setting == "auto":
        return dataset is not None and dataset in official
    return bool(setting)


# --------------------------------------------------------------------------------------------
# Finding vocabulary -> model vocabulary
# --------------------------------------------------------------------------------------------
def canonical_key(name: str) -> str:
    """Case- and spacing-insensitive key for a finding name ("Pleural  Effusion" == "pleural effusion")."""
    return " ".join(name.replace("_", " ").split()).casefold()


def load_mapping_table(section: str) -> dict[str, str | None]:
    """The ``[section]`` table of the packaged ``mappings.toml``: canonical key -> target, where
    an empty string means "known, but the model cannot name it"."""
    import tomllib

    with open(Path(__file__).with_name("mappings.toml"), "rb") as fh:
        data = tomllib.load(fh)
    if section not in data:
        raise KeyError(f"mappings.toml has no [{section}] table")
    return {canonical_key(k): (v or None) for k, v in data[section].items()}


def merge_mapping(table: Mapping[str, str | None], overrides: Mapping[str, str | None] | None) -> dict:
    """Apply user overrides (finding name -> target or null) on top of a packaged table."""
    merged = dict(table)
    for key, value in (overrides or {}).items():
        merged[canonical_key(key)] = value or None
    return merged


def resolve_entities(
    classes: Sequence[str], table: Mapping[str, str | None], vocabulary: Sequence[str]
) -> tuple[list[int], tuple[str, ...]]:
    """Map each class to an index into ``vocabulary`` (-1 when the model cannot name it).

    A class is unsupported when the table has no entry, maps it to nothing, or maps it to an
    entity absent from ``vocabulary``. Returns (indices, unsupported class names in order).
    """
    index = {v: i for i, v in enumerate(vocabulary)}
    out, unsupported = [], []
    for c in classes:
        target = table.get(canonical_key(c))
        if target is None or target not in index:
            out.append(-1)
            unsupported.append(c)
        else:
            out.append(index[target])
    return out, tuple(unsupported)


def gather_columns(values: torch.Tensor, indices: Sequence[int], fill: float) -> torch.Tensor:
    """values (B, Q, ...) -> (B, C, ...) picking ``indices``; -1 columns are filled with ``fill``."""
    idx = torch.as_tensor([max(i, 0) for i in indices], device=values.device, dtype=torch.long)
    out = values.index_select(1, idx)
    missing = [c for c, i in enumerate(indices) if i < 0]
    if missing:
        out[:, missing] = fill
    return out


def zero_unsupported(scores: torch.Tensor, maps: torch.Tensor, classes: Sequence[str], unsupported: Sequence[str]) -> None:
    """Set the columns of findings the model cannot name to 0 (finite, and ignored by the scorer)."""
    cols = [i for i, c in enumerate(classes) if c in unsupported]
    if cols:
        scores[:, cols] = 0.0
        maps[:, cols] = 0.0


def finding_text(name: str, table: Mapping[str, str | None]) -> str:
    """Text naming a finding: the packaged ``[prompts]`` entry, else the vocabulary's first
    positive prompt (schemas/findings.toml), else the name itself."""
    key = canonical_key(name)
    if table.get(key):
        return str(table[key])
    from xbench.schemas import vocabulary

    try:
        return vocabulary.prompts(name).positive[0]
    except Exception:  # noqa: BLE001 - unknown names and a missing vocabulary both fall back
        return name


@dataclass(frozen=True)
class TextPrompts:
    """The prompt of each class for a free-text query model and where it came from."""

    texts: tuple[str, ...]
    unsupported: tuple[str, ...]
    origins: tuple[str, ...]

    def to_dict(self, classes: Sequence[str]) -> dict:
        """Provenance in the dual-encoder adapters' layout (style, positive) plus per-class origin."""
        return {"style": "single", "positive": dict(zip(classes, self.texts)),
                "origin": dict(zip(classes, self.origins))}


def prompt_texts(classes: Sequence[str], config: Mapping, model: str, dataset: str | None = None) -> TextPrompts:
    """Prompt per class for the free-text query models (KAD, CARZero, DeViDe).

    Precedence, per class: the config's ``prompts.classes`` entry (registry format: text,
    [positive, negative] or null = unsupported); a template the config gives (``prompts.positive``
    or ``options.prompt_template``) filled with :func:`finding_text`; the authors' own text for
    this dataset (extract/models/prompts.toml, ``prompts.dataset`` overrides the dataset key);
    the model's packaged template filled with :func:`finding_text`.
    """
    from xbench.extract.models.prompts import model_prompts

    spec = config.get("prompts") if isinstance(config.get("prompts"), Mapping) else {}
    defaults = model_prompts(model)
    user_template = spec.get("positive") if isinstance(spec.get("positive"), str) else option(config, "prompt_template")
    template = str(user_template or defaults.template or "{}")
    if "{}" not in template:
        raise AdapterConfigError(f"prompt template {template!r} needs a '{{}}' placeholder")
    published, source = defaults.for_dataset(spec.get("dataset") or dataset)
    published = {canonical_key(k): v for k, v in published.items()}
    per_class = {canonical_key(k): v for k, v in (spec.get("classes") or {}).items()}
    table = load_mapping_table("prompts")
    texts, unsupported, origins = [], [], []
    for name in classes:
        key = canonical_key(name)
        filled = template.format(finding_text(name, table))
        if key in per_class:
            v = per_class[key]
            if isinstance(v, (list, tuple)):
                v = v[0] if v else None
            if not v:
                unsupported.append(name)
            texts.append(str(v) if v else filled)
            origins.append("config prompts.classes" + ("" if v else " (null: unsupported)"))
        elif user_template:
            texts.append(filled)
            origins.append(f"config template {template!r}")
        elif key in published:
            texts.append(str(published[key]))
            origins.append(str(source))
        else:
            texts.append(filled)
            origins.append(f"template {template!r}: {defaults.origin}")
    return TextPrompts(tuple(texts), tuple(unsupported), tuple(origins))


def wants_random_weights(config: Mapping) -> bool:
    """``weights: random`` (the registry's convention) or ``options.random_init``: tests only."""
    return config.get("weights") == "random" or bool_option(config, "random_init", False)


def option(config: Mapping, key: str, default=None):
    """Read ``config['options'][key]`` falling back to ``config[key]`` and then ``default``."""
    opts = config.get("options") or {}
    if key in opts:
        return opts[key]
    return config.get(key, default)


def pick_device(config: Mapping) -> torch.device:
    dev = config.get("device")
    if dev:
        try:
            return torch.device(dev)
        except (RuntimeError, TypeError, ValueError):
            raise AdapterConfigError(f"device: {str(dev)[:40]!r} is not a device; give cpu, cuda or cuda:N") from None
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
