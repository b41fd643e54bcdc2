"""Named presets: a registered name that fills in a known model's defaults, then calls its backend.

Each is a registry factory ``(config) -> ModelAdapter``; user keys override the defaults.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from .prompts import preset_prompts

CLIP_DEFAULTS = {
    "model": "ViT-B-16-quickgelu",
    "weights": "openai",  # open_clip tag: resolved from the offline HF cache or ~/.cache/clip only
    "quick_gelu": True,
    "prompts": preset_prompts("clip"),  # the finding vocabulary's text (prompts.toml [clip])
}
BIOMEDCLIP_REPO = "microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224"
BIOMEDCLIP_DEFAULTS = {
    "model": f"hf-hub:{BIOMEDCLIP_REPO}",  # or local-dir:FOLDER with the downloaded repository
    "prompts": preset_prompts("biomedclip"),  # the model card's template (prompts.toml [biomedclip])
}


def _with(defaults: Mapping[str, Any], config: Mapping[str, Any]) -> dict:
    out = dict(defaults)
    for k, v in config.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            merged = {**out[k], **v}
            if k == "prompts" and "origin" not in v and any(t in v for t in ("positive", "negative", "classes")):
                merged.pop("origin", None)  # the packaged origin no longer describes the user's text
            out[k] = merged
        elif v is not None:
            out[k] = v
    return out


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"clip": "clip", "biomedclip": "biomedclip", "clip-tiny": "clip_tiny"}


def clip(config: Mapping[str, Any]):
    """OpenAI CLIP ViT-B/16 through open_clip (QuickGELU on)."""
    from .openclip import build

    return build(_with(CLIP_DEFAULTS, config))


#: Where the default ``clip`` weights (open_clip's ``openai`` tag for ViT-B-16-quickgelu) are found
#: offline: the two places open_clip's pretrained table names. Checked by :func:`clip_preflight`
#: before torch and open_clip are imported (importing them takes seconds; a missing file should not).
CLIP_OPENAI_HUB = ("timm/vit_base_patch16_clip_224.openai", ("open_clip_model.safetensors", "open_clip_pytorch_model.bin"))
CLIP_OPENAI_FILE = "~/.cache/clip/ViT-B-16.pt"


def clip_preflight(config: Mapping[str, Any]) -> None:
    """Raise WeightsNotFoundError at once when the default CLIP weights are in neither offline cache."""
    from pathlib import Path

    from .errors import WeightsNotFoundError

    merged = _with(CLIP_DEFAULTS, config)
    if (merged["model"], merged["weights"]) != (CLIP_DEFAULTS["model"], CLIP_DEFAULTS["weights"]):
        return  # another architecture or a weights path: the open_clip adapter resolves it
    if Path(CLIP_OPENAI_FILE).expanduser().is_file():
        return
    repo, names = CLIP_OPENAI_HUB
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return  # the adapter reports it
    if any(isinstance(try_to_load_from_cache(repo, name), str) for name in names):
        return
    raise WeightsNotFoundError(
        "clip weights (open_clip ViT-B-16-quickgelu/openai)", f"hub id {repo!r} or file {CLIP_OPENAI_FILE}",
        "Download one on a networked machine (e.g. `huggingface-cli download " + repo + "`), or pass "
        "--model-option weights=/path/to/ViT-B-16.pt.")


def _biovil_preflight(name: str):
    from .biovil_weights import preflight  # torch-free

    return preflight(name)


def _weights_given(what: str, needed: str, how: str) -> Callable[[Mapping[str, Any]], None]:
    """The preflight of a model without default weights: ``weights`` must be given, said before torch is
    imported (the path itself is checked by the CLI, then by the adapter)."""

    def check(config: Mapping[str, Any]) -> None:
        if not config.get("weights"):
            from .errors import WeightsNotFoundError

            raise WeightsNotFoundError(what, needed, how)

    return check


chexzero_preflight = _weights_given(
    "CheXzero weights", "a checkpoint file such as best_64_5e-05_original_22000_0.864.pt",
    "Download the checkpoints linked from the rajpurkarlab/CheXzero README (Google Drive) and pass "
    "--model-option weights=/path/to/checkpoint.pt.")
medclip_preflight = _weights_given(
    "MedCLIP weights", "a folder holding pytorch_model.bin (medclip-vit-pretrained or medclip-resnet-pretrained)",
    "Download the zip linked from RyanWangZf/MedCLIP medclip/medclip_vit_weight.txt (or _resnet_), unzip it, "
    "and pass --model-option weights=/path/to/folder.")
_gloria_weights = _weights_given(
    "GLoRIA weights", "the checkpoint chexpert_resnet50.ckpt",
    "Download it from the link in the marshuang80/gloria README and pass --model-option "
    "weights=/path/to/chexpert_resnet50.ckpt --model-option options.trust_checkpoint=true.")


def gloria_preflight(config: Mapping[str, Any]) -> None:
    """GLoRIA needs its checkpoint and a local Bio_ClinicalBERT folder: say so before torch is imported."""
    from .errors import WeightsNotFoundError

    _gloria_weights(config)
    if not (config.get("text_encoder") or (config.get("options") or {}).get("text_encoder")):
        raise WeightsNotFoundError(
            "GLoRIA text encoder", "a local emilyalsentzer/Bio_ClinicalBERT folder (config.json, vocab.txt)",
            "Download it on a networked machine (huggingface-cli download emilyalsentzer/Bio_ClinicalBERT) and "
            "pass --model-option text_encoder=/path/to/Bio_ClinicalBERT.")


#: Checks a preset can make without torch, by registry name; run by xbench-extract before loading anything.
PREFLIGHTS = {"clip": clip_preflight, "chexzero": chexzero_preflight, "gloria": gloria_preflight,
              "medclip": medclip_preflight}
PREFLIGHTS.update({name: _biovil_preflight(name) for name in ("biovil", "biovil_t")})


def biomedclip(config: Mapping[str, Any]):
    """BiomedCLIP (ViT-B/16 + PubMedBERT) through open_clip, from a local folder or the offline cache."""
    from .openclip import build

    return build(_with(BIOMEDCLIP_DEFAULTS, config))


#: ``clip-tiny``: an untrained open_clip CLIP small enough for a 2-core CPU, built from this inline
#: architecture (no file, no download). ViT 4 layers x width 64, patch 16 at 224 px (a 14 x 14 map);
#: text transformer 2 x 64 with CLIP's vocabulary (49408), so open_clip's bundled BPE tokenizer works.
CLIP_TINY_ARCH = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 224, "layers": 4, "width": 64, "patch_size": 16, "head_width": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}
CLIP_TINY_DEFAULTS = {
    "weights": "random",
    "seed": 0,  # untrained weights drawn from torch.manual_seed(seed): the same model in every process
    "preprocess": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]},
    "prompts": {"style": "single"},
}


def _arch_folder(arch: Mapping[str, Any]) -> str:
    """A folder holding ``open_clip_config.json`` for ``arch`` (the open_clip adapter reads
    architectures from folders): under the temp dir, named by the config's hash, written
    atomically once and then reused, so its path is the same in every run and process."""
    import hashlib
    import json
    import os
    import tempfile
    from pathlib import Path

    text = json.dumps({"model_cfg": arch}, sort_keys=True, indent=1)
    folder = Path(tempfile.gettempdir()) / f"xbench-clip-tiny-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    path = folder / "open_clip_config.json"
    if not (path.is_file() and path.read_text() == text):
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".cfg-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return str(folder)


def clip_tiny(config: Mapping[str, Any]):
    """An untrained tiny open_clip ViT (:data:`CLIP_TINY_ARCH`), offline: for the demo and tests.

    Its maps are those of random weights (a plumbing check, not a model); ``seed`` (default 0)
    makes the weights reproducible. ``weights: FILE`` loads a checkpoint of this architecture.
    """
    import torch

    from .openclip import build

    cfg = _with({**CLIP_TINY_DEFAULTS, "name": "clip-tiny"}, config)
    cfg["model"] = f"local-dir:{_arch_folder(CLIP_TINY_ARCH)}"
    with torch.random.fork_rng(devices=[]):  # leave the caller's generator untouched
        torch.manual_seed(int(cfg.get("seed", 0)))
        adapter = build(cfg)
    if hasattr(adapter, "info"):
        adapter.info["model"] = "clip-tiny (inline open_clip config, xbench presets.CLIP_TINY_ARCH)"
    return adapter
