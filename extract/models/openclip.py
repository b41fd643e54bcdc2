"""Any open_clip model (CLIP, BiomedCLIP, ...) as a dual-encoder adapter, offline only.

Config keys (see :mod:`xbench.extract.models` for the common ones):

``model``
    an open_clip architecture name (``ViT-B-16-quickgelu``), ``local-dir:/folder`` or a folder
    holding ``open_clip_config.json`` (BiomedCLIP downloaded as a folder), or
    ``hf-hub:org/repo`` resolved from the local Hugging Face cache only.
``weights``
    a checkpoint file (``.pt`` incl. OpenAI's TorchScript, ``.bin``, ``.safetensors``), an
    open_clip pretrained tag (``openai``) found in the offline cache, or ``random`` (untrained,
    for tests). A folder model finds its own weights. Missing weights raise
    :class:`~xbench.extract.models.errors.WeightsNotFoundError` naming the file or hub id.
``quick_gelu``
    true/false; default: on when the pretrained tag says so or the file is an OpenAI TorchScript
    archive (OpenAI weights were trained with QuickGELU; without it activations are silently wrong).
``text_encoder``
    a local folder with the HF text model's ``config.json`` and tokenizer, for configs whose text
    tower names a hub model (BiomedCLIP's ``microsoft/BiomedNLP-BiomedBERT-base-uncased-abstract``);
    default: the model folder's own tokenizer files and the HF cache.
"""
from __future__ import annotations

import copy
import os
import zipfile
from pathlib import Path
from typing import Any, Mapping

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # extraction never downloads

import torch
import torch.nn as nn
import torch.nn.functional as F

from xbench.extract.models.dual import DualEncoderAdapter
from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError
from xbench.extract.models.files import check_model_json, read_model_json
from xbench.extract.models.hub import cached_file, snapshot

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
CHECKPOINT_NAMES = ("open_clip_model.safetensors", "open_clip_pytorch_model.safetensors",
                    "open_clip_pytorch_model.bin", "open_clip_model.bin", "model.safetensors",
                    "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")


# -- vision towers ------------------------------------------------------------------------------
class _MHABlock:
    """:class:`~xbench.extract.saliency._tower.AttentionBlock` view of an open_clip residual block."""

    def __init__(self, blk: nn.Module) -> None:
        if not isinstance(getattr(blk, "attn", None), nn.MultiheadAttention):
            raise ModelConfigError("attention-based map methods need standard attention blocks (nn.MultiheadAttention)")
        self.b, self.heads = blk, blk.attn.num_heads
        self.scale = (blk.attn.embed_dim // self.heads) ** -0.5

    def norm1(self, x):
        return self.b.ln_1(x)

    def qkv(self, h):
        from xbench.extract.saliency._tower import split_heads

        t = F.linear(h, self.b.attn.in_proj_weight, self.b.attn.in_proj_bias)
        return tuple(split_heads(u, self.heads) for u in t.chunk(3, dim=-1))

    def attn_out(self, o, h):
        from xbench.extract.saliency._tower import merge_heads

        return self.b.ls_1(self.b.attn.out_proj(merge_heads(o)))

    def mlp_out(self, x):
        return self.b.ls_2(self.b.mlp(self.b.ln_2(x)))


class _TimmBlock:
    """:class:`~xbench.extract.saliency._tower.AttentionBlock` view of a timm ViT block."""

    def __init__(self, blk: nn.Module) -> None:
        self.b, a = blk, blk.attn
        if not hasattr(a, "qkv") or not hasattr(blk, "norm1"):
            raise ModelConfigError(f"timm block {type(blk).__name__} has no fused qkv attention")
        self.heads, self.scale = a.num_heads, float(a.scale)

    def norm1(self, x):
        return self.b.norm1(x)

    def qkv(self, h):
        from xbench.extract.saliency._tower import split_heads

        a = self.b.attn
        q, k, v = (split_heads(u, self.heads) for u in a.qkv(h).chunk(3, dim=-1))
        return a.q_norm(q), a.k_norm(k), v

    def attn_out(self, o, h):
        from xbench.extract.saliency._tower import merge_heads

        a = self.b.attn
        o = a.norm(merge_heads(o)) if hasattr(a, "norm") else merge_heads(o)
        if getattr(a, "gate", None) is not None:
            o = o * a.gate(h).sigmoid()
        return self.b.ls1(a.proj(o))

    def mlp_out(self, x):
        return self.b.ls2(self.b.mlp(self.b.norm2(x)))


class OpenCLIPViTTower:
    """open_clip ``VisionTransformer`` split at its last residual block."""

    def __init__(self, visual: nn.Module) -> None:
        if getattr(visual, "attn_pool", None) is not None:
            raise ModelConfigError("open_clip vision towers with attentional pooling (CoCa) are not supported")
        self.v = visual
        self.grid = tuple(int(g) for g in visual.grid_size)
        self.n_prefix = 1
        self.batch_first = getattr(visual.transformer, "batch_first", True)
        self.capabilities = frozenset({"gradients", "value_path", "class_token", "blocks"})

    def embed(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.v._embeds(pixels)

    @property
    def blocks(self) -> list:
        return [_MHABlock(b) for b in self.v.transformer.resblocks]

    def _run(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.batch_first:
            return block(x)
        return block(x.transpose(0, 1)).transpose(0, 1)

    def tokens_before_last(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.v._embeds(pixels)
        for blk in self.v.transformer.resblocks[:-1]:
            x = self._run(blk, x)
        return x

    def last_block(self, x: torch.Tensor) -> torch.Tensor:
        return self._run(self.v.transformer.resblocks[-1], x)

    def last_block_value(self, x: torch.Tensor) -> torch.Tensor:
        blk = self.v.transformer.resblocks[-1]
        if not isinstance(getattr(blk, "attn", None), nn.MultiheadAttention):
            raise ModelConfigError("maskclip needs a standard attention block (nn.MultiheadAttention)")
        d = x.shape[-1]
        w, b = blk.attn.in_proj_weight, blk.attn.in_proj_bias
        v = F.linear(blk.ln_1(x), w[2 * d:], None if b is None else b[2 * d:])
        x = x + blk.ls_1(blk.attn.out_proj(v))
        return x + blk.ls_2(blk.mlp(blk.ln_2(x)))

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        pooled, _ = self.v._pool(x)
        return pooled @ self.v.proj if self.v.proj is not None else pooled

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        tok = self.v.ln_post(x[:, self.n_prefix:])
        return tok @ self.v.proj if self.v.proj is not None else tok


class TimmViTTower:
    """open_clip ``TimmModel`` whose trunk is a timm VisionTransformer (BiomedCLIP)."""

    def __init__(self, visual: nn.Module) -> None:
        trunk = visual.trunk
        if not hasattr(trunk, "blocks") or not hasattr(trunk, "patch_embed"):
            raise ModelConfigError(f"timm trunk {type(trunk).__name__} is not a ViT; saliency needs patch tokens")
        self.visual, self.trunk = visual, trunk
        self.grid = tuple(int(g) for g in trunk.patch_embed.grid_size)
        self.n_prefix = int(getattr(trunk, "num_prefix_tokens", 1))
        caps = {"gradients", "value_path", "blocks"}
        # rollout/relevance read the class token's row: only when the trunk pools by that token
        if getattr(trunk, "global_pool", "token") == "token" and getattr(trunk, "cls_token", None) is not None:
            caps.add("class_token")
        self.capabilities = frozenset(caps)

    def embed(self, pixels: torch.Tensor) -> torch.Tensor:
        t = self.trunk
        return t.norm_pre(t.patch_drop(t._pos_embed(t.patch_embed(pixels))))

    @property
    def blocks(self) -> list:
        return [_TimmBlock(b) for b in self.trunk.blocks]

    def tokens_before_last(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.embed(pixels)
        for blk in self.trunk.blocks[:-1]:
            x = blk(x)
        return x

    def last_block(self, x: torch.Tensor) -> torch.Tensor:
        return self.trunk.blocks[-1](x)

    def last_block_value(self, x: torch.Tensor) -> torch.Tensor:
        blk = self.trunk.blocks[-1]
        attn = blk.attn
        h = blk.norm1(x)
        dim = getattr(attn, "attn_dim", x.shape[-1])
        v = attn.qkv(h)[..., 2 * dim:]
        v = attn.norm(v) if hasattr(attn, "norm") else v
        if getattr(attn, "gate", None) is not None:
            v = v * attn.gate(h).sigmoid()
        x = x + blk.ls1(attn.proj(v))
        return x + blk.ls2(blk.mlp(blk.norm2(x)))

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        return self.visual.head(self.trunk.forward_head(self.trunk.norm(x)))

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        tok = self.trunk.norm(x)[:, self.n_prefix:]
        return self.visual.head(self.trunk.fc_norm(tok))


def vision_tower(model: nn.Module):
    visual = model.visual
    if hasattr(visual, "trunk"):
        return TimmViTTower(visual)
    if hasattr(visual, "transformer") and hasattr(visual, "_embeds"):
        return OpenCLIPViTTower(visual)
    raise ModelConfigError(f"open_clip vision tower {type(visual).__name__} has no patch tokens "
                           "(ResNet towers are not supported for saliency)")


# -- resolving config, weights and tokenizer offline ----------------------------------------------
def _model_dir(model: str) -> Path | None:
    if model.startswith("local-dir:"):
        return Path(model[len("local-dir:"):]).expanduser()
    if model.startswith("hf-hub:"):
        repo = model[len("hf-hub:"):]
        return snapshot(repo, f"open_clip model {model}",
                        f"Download it on a networked machine: `huggingface-cli download {repo} "
                        "--local-dir DIR`, then use model: local-dir:DIR.")
    p = Path(model).expanduser()
    return p if p.is_dir() else None


def _is_torchscript(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("constants.pkl") for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def resolve(config: Mapping[str, Any]) -> dict:
    """Turn the user's ``model``/``weights``/``text_encoder`` into an architecture config, a
    preprocessing config, a checkpoint path (or None) and a tokenizer source, touching no network."""
    import open_clip

    model = str(config.get("model") or "")
    if not model:
        raise ModelConfigError("open_clip config needs `model`: an architecture name, local-dir:FOLDER or hf-hub:ORG/REPO")
    weights = config.get("weights")
    weights = None if weights is None else str(weights)
    out: dict[str, Any] = {"preprocess": {}, "checkpoint": None, "tokenizer_dir": None, "quick_gelu": None}
    folder = _model_dir(model)
    if folder is not None:
        cfg_path = folder / "open_clip_config.json"
        if not cfg_path.is_file():
            raise WeightsNotFoundError(f"open_clip model folder {folder}", "open_clip_config.json",
                                       "Point `model` at the downloaded model repository folder.")
        raw = read_model_json(cfg_path, "open_clip model config")
        if not isinstance(raw.get("model_cfg"), dict) or not isinstance(raw.get("preprocess_cfg", {}), dict):
            raise ModelConfigError(f"{cfg_path} has no 'model_cfg'")
        out["model_cfg"], out["preprocess"] = raw["model_cfg"], raw.get("preprocess_cfg", {})
        if any((folder / f).is_file() for f in TOKENIZER_FILES):
            out["tokenizer_dir"] = str(folder)
        if weights is None:
            found = next((folder / n for n in CHECKPOINT_NAMES if (folder / n).is_file()), None)
            if found is None:
                raise WeightsNotFoundError(
                    f"open_clip weights in {folder}", f"one of {', '.join(CHECKPOINT_NAMES[:3])}",
                    "Download the model repository folder completely, give `weights: FILE`, "
                    "or `weights: random` for an untrained model.")
            out["checkpoint"] = str(found)
    else:
        name = model.replace("/", "-")
        cfg = open_clip.get_model_config(name)
        if cfg is None:
            import difflib
            close = difflib.get_close_matches(name, open_clip.list_models(), n=3)
            raise ModelConfigError(f"unknown open_clip architecture {name!r}."
                                   + (f" Did you mean: {', '.join(close)}?" if close else ""))
        out["model_cfg"] = cfg
        tags = open_clip.list_pretrained_tags_by_model(name)
        if weights is None:
            raise WeightsNotFoundError(
                f"open_clip model {name}", "`weights`",
                "Set weights: /path/to/checkpoint (.pt, .bin, .safetensors)"
                + (f", a pretrained tag already in the offline cache ({', '.join(tags)})" if tags else "")
                + ", or `weights: random` for an untrained model.")
        if weights in tags:
            pcfg = open_clip.get_pretrained_cfg(name, weights)
            out["checkpoint"] = _cached_pretrained(name, weights, pcfg)
            out["preprocess"] = {k: pcfg[k] for k in ("mean", "std", "interpolation") if k in pcfg}
            out["quick_gelu"] = bool(pcfg.get("quick_gelu", False)) or None
    if weights is not None and weights != "random" and out["checkpoint"] is None:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise WeightsNotFoundError(f"weights for {model}", f"file {str(path)!r}",
                                       "Check the path, or download the checkpoint to it.")
        out["checkpoint"] = str(path)
        if _is_torchscript(path):
            out["quick_gelu"] = True  # OpenAI's TorchScript releases were all trained with QuickGELU
    return out


def _cached_pretrained(name: str, tag: str, pcfg: Mapping[str, Any]) -> str:
    """Path of a pretrained tag's file in the offline caches (HF cache, then open_clip's URL cache)."""
    hub = pcfg.get("hf_hub", "")
    if hub:
        parts = hub.strip("/").split("/")
        repo = "/".join(parts[:2])
        names = ["/".join(parts[2:])] if len(parts) > 2 else ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
        for fname in names:
            got = cached_file(repo, fname)
            if got is not None:
                return str(got)
    url = pcfg.get("url", "")
    if url:
        cached = Path(os.path.expanduser("~/.cache/clip")) / os.path.basename(url)
        if cached.is_file():
            return str(cached)
    where = " or ".join(x for x in (f"hub id {hub.strip('/')!r} (open_clip_pytorch_model.bin)" if hub else "",
                                      f"url {url}" if url else "") if x)
    raise WeightsNotFoundError(
        f"open_clip weights {name}/{tag}", where or "a download source",
        "Download the file on a networked machine and set `weights:` to its path "
        "(or fill the Hugging Face cache there and copy it here).")


def _text_encoder_dir(text_cfg: dict, config: Mapping[str, Any], model: str) -> str | None:
    """Local folder standing in for the HF text model the config names (BiomedCLIP gotcha)."""
    hf_name = text_cfg.get("hf_model_name")
    if not hf_name:
        return None
    if config.get("text_encoder"):
        path = Path(str(config["text_encoder"])).expanduser()
        if not (path / "config.json").is_file():
            raise WeightsNotFoundError(f"text encoder for {model}", f"{path / 'config.json'}",
                                       f"Copy the `{hf_name}` config.json (and tokenizer files) into that folder.")
        return str(path)
    if Path(hf_name).is_dir():
        return hf_name
    return str(snapshot(
        hf_name, f"text encoder config for {model}",
        f"Download it on a networked machine: `huggingface-cli download {hf_name} config.json vocab.txt "
        "tokenizer_config.json --local-dir DIR`, then set text_encoder: DIR."))


def _check_side_files(folder: Path, what: str) -> None:
    """The JSON files transformers reads from a text-encoder / tokenizer folder, bounded first."""
    for name in ("config.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
        check_model_json(folder / name, what)


def load_model(config: Mapping[str, Any]):
    """Build the open_clip model (eval mode, no grads) and its tokenizer. Returns (model, tokenizer, resolved)."""
    import open_clip
    from open_clip.tokenizer import HFTokenizer, SimpleTokenizer

    res = resolve(config)
    cfg = copy.deepcopy(res["model_cfg"])
    text_cfg, vision_cfg = cfg.setdefault("text_cfg", {}), cfg.setdefault("vision_cfg", {})
    model_name = str(config.get("model"))
    text_dir = _text_encoder_dir(text_cfg, config, model_name)
    if text_dir:
        text_cfg["hf_model_name"] = text_dir
        text_cfg["hf_model_pretrained"] = False  # text weights come from the checkpoint
    if "timm_model_name" in vision_cfg:
        vision_cfg["timm_model_pretrained"] = False
    quick = config.get("quick_gelu")
    if quick is None:
        quick = res["quick_gelu"]
    if quick is not None:
        cfg["quick_gelu"] = bool(quick)
    if "multimodal_cfg" in cfg:
        raise ModelConfigError("CoCa-style open_clip models are not supported")
    custom = cfg.pop("custom_text", False) or "hf_model_name" in text_cfg
    cls = open_clip.CustomTextCLIP if custom else open_clip.CLIP
    if text_dir and Path(text_dir).is_dir():
        _check_side_files(Path(text_dir), f"text encoder of {model_name}")
    try:
        model = cls(**cfg)
    except (TypeError, ValueError, KeyError, AssertionError) as exc:  # keys or values the architecture cannot take
        raise ModelConfigError(f"open_clip model config of {model_name}: cannot build {cls.__name__} "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
    if res["checkpoint"]:
        _load_checkpoint(model, res["checkpoint"])
    model.eval().requires_grad_(False)

    ctx = int(text_cfg.get("context_length", 77))
    if config.get("text_encoder"):
        tok_src = text_dir
    elif res["tokenizer_dir"] and (text_dir or text_cfg.get("hf_tokenizer_name")):
        tok_src = res["tokenizer_dir"]  # the model folder ships its own tokenizer files
    else:
        tok_src = text_cfg.get("hf_tokenizer_name") or text_dir
    if tok_src:
        if not Path(str(tok_src)).is_dir():
            tok_src = str(snapshot(str(tok_src), f"tokenizer for {model_name}",
                                   f"Download `{tok_src}` tokenizer files and set text_encoder: DIR."))
        _check_side_files(Path(str(tok_src)), f"tokenizer of {model_name}")
        tokenizer = HFTokenizer(str(tok_src), context_length=ctx, **text_cfg.get("tokenizer_kwargs", {}))
    else:
        if int(text_cfg.get("vocab_size", 49408)) != 49408:
            raise ModelConfigError(f"{model_name}: text vocab_size {text_cfg.get('vocab_size')} needs an HF tokenizer "
                                   "(set text_encoder: DIR with tokenizer files)")
        tokenizer = SimpleTokenizer(context_length=ctx)
    res["quick_gelu"] = bool(cfg.get("quick_gelu", False))
    res["text_encoder"] = text_dir
    res["tokenizer"] = str(tok_src) if tok_src else "open_clip SimpleTokenizer (bundled BPE)"
    return model, tokenizer, res


def _load_checkpoint(model: nn.Module, path: str) -> None:
    """Weights into ``model``: a TorchScript archive (OpenAI's ``ViT-B-16.pt``: its pickles are read by
    TorchScript's restricted unpickler, its code is never run here) or a state dict read with
    ``weights_only=True`` (tensors and plain containers only: a pickle that would run code is refused)."""
    import pickle

    import open_clip

    try:
        if _is_torchscript(Path(path)):
            sd = torch.jit.load(path, map_location="cpu").state_dict()
            for key in ("input_resolution", "context_length", "vocab_size"):
                sd.pop(key, None)
            model.load_state_dict(sd, strict=True)
        else:
            open_clip.load_checkpoint(model, path, strict=True, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, KeyError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelConfigError(f"{path}: not loadable as the weights of {type(model).__name__} ({first[:200]}); "
                               "give a checkpoint of this architecture (.pt state dict, TorchScript or "
                               ".safetensors). Pickled Python objects are never loaded") from None


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"open_clip": "build"}


def build(config: Mapping[str, Any]) -> DualEncoderAdapter:
    """Registry factory: an open_clip model from ``config`` (see the module docstring)."""
    model, tokenizer, res = load_model(config)
    vision_cfg = res["model_cfg"].get("vision_cfg", {})
    pre = dict(res["preprocess"])
    size = pre.get("size") or vision_cfg.get("image_size", 224)
    if "timm_model_name" in vision_cfg:
        size = tuple(int(s) for s in model.visual.trunk.patch_embed.img_size)
    user = dict(config.get("preprocess") or {})
    preprocess = {
        "size": user.get("size", size if isinstance(size, int) else tuple(size)),
        "mean": tuple(user.get("mean", pre.get("mean", OPENAI_MEAN))),
        "std": tuple(user.get("std", pre.get("std", OPENAI_STD))),
        "interpolation": user.get("interpolation", pre.get("interpolation", "bicubic")),
        "resize": user.get("resize", "squash"),
    }
    if isinstance(preprocess["size"], (list, tuple)) and len(set(preprocess["size"])) == 1:
        preprocess["size"] = int(preprocess["size"][0])

    def encode_text(texts: list[str]) -> torch.Tensor:
        device = next(model.parameters()).device
        return model.encode_text(tokenizer(texts).to(device))

    bias = getattr(model, "logit_bias", None)
    info = {"backend": "open_clip", "model": str(config.get("model")),
            "weights": res["checkpoint"] or "random", "quick_gelu": res["quick_gelu"],
            "text_encoder": res["text_encoder"], "tokenizer": res["tokenizer"]}
    return DualEncoderAdapter(
        name=str(config.get("name") or config.get("model")), tower=vision_tower(model),
        encode_text=encode_text, modules=[model], logit_scale=float(model.logit_scale.exp().item()),
        logit_bias=None if bias is None else float(bias.item()), preprocess=preprocess,
        method=config.get("method", "similarity"), prompts=config.get("prompts"),
        map_size=config.get("map_size"), map_text=config.get("map_text", "positive"), info=info)
