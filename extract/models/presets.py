"""Named presets: a registered name that fills in a known model's defaults, then calls its backend.

Each is a registry factory ``(config) -> ModelAdapter``; user keys override the defaults.
"""
from __future__ import annotations

from typing import Any, Mapping

CLIP_DEFAULTS = {
    "model": "ViT-B-16-quickgelu",
    "weights": "openai",  # open_clip tag: resolved from the offline HF cache or ~/.cache/clip only
    "quick_gelu": True,
    "prompts": {"style": "single"},
}
BIOMEDCLIP_REPO = "microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224"
BIOMEDCLIP_DEFAULTS = {
    "model": f"hf-hub:{BIOMEDCLIP_REPO}",  # or local-dir:FOLDER with the downloaded repository
    "prompts": {"style": "single", "positive": "this is a photo of {}"},  # the model card's template
}


def _with(defaults: Mapping[str, Any], config: Mapping[str, Any]) -> dict:
    out = dict(defaults)
    for k, v in config.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = {**out[k], **v}
        elif v is not None:
            out[k] = v
    return out


def clip(config: Mapping[str, Any]):
    """OpenAI CLIP ViT-B/16 through open_clip (QuickGELU on)."""
    from .openclip import build

    return build(_with(CLIP_DEFAULTS, config))


def biomedclip(config: Mapping[str, Any]):
    """BiomedCLIP (ViT-B/16 + PubMedBERT) through open_clip, from a local folder or the offline cache."""
    from .openclip import build

    return build(_with(BIOMEDCLIP_DEFAULTS, config))
