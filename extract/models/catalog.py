"""What each registered model is, what it needs and which config keys it reads, without importing torch.

``xbench-extract --list-models`` / ``--list-methods`` print from here, and the CLI's checks
(:mod:`xbench.extract.models.checks`) refuse an unknown config key, a map method the model cannot run or
a missing weights path from here, before torch or the model is loaded. Each entry mirrors what the
adapter's factory reads (``config.get(...)`` and ``option(config, ...)`` in its module);
``tests/extract/test_catalog.py`` checks the entries against the adapters built with tiny random weights.
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: Keys every registered adapter accepts: the registry's own and the runner's defaults.
COMMON_KEYS = frozenset({"adapter", "name", "device", "precision", "method"})
#: What a dual encoder reads (extract/models/dual.py and its backends).
DUAL_KEYS = frozenset({"weights", "prompts", "map_size", "map_text"})
#: Keys under ``preprocess:`` (dual encoders, the dog baseline) and ``prompts:``.
PREPROCESS_KEYS = frozenset({"resize", "size", "mean", "std", "interpolation", "crop_offset"})
PROMPT_KEYS = frozenset({"style", "positive", "negative", "classes", "vocabulary", "origin", "dataset"})
#: The options every adapter built on extract/models/crossattn/common.py reads (``option(config, key)``:
#: under ``options:`` or at the top level).
CROSSATTN_OPTIONS = frozenset({"trust_checkpoint", "hash_weights", "random_init", "equalize", "map_layers",
                               "arch", "text_encoder"})

#: The methods every ViT tower (open_clip, timm, transformers CLIP) runs.
ALL_VIT = ("similarity", "maskclip", "gradcam", "rollout", "chefer", "clip_surgery", "gem")


@dataclass(frozen=True)
class ModelInfo:
    """One registered model, as ``--list-models`` shows it and the checks use it."""

    name: str
    kind: str                 # "dual encoder", "cross-attention", "baseline"
    summary: str
    weights: str              # what ``weights`` must be (or where the default is found); "none" for baselines
    text_encoder: str = ""    # what ``text_encoder`` must be, "" when the model needs none
    methods: tuple[str, ...] = ()  # map methods it runs; () = its own only
    methods_fixed: bool = True  # False: which of ``methods`` run depends on the architecture given (checked at load)
    own_method: str = ""      # the method it always uses (cross-attention models, baselines)
    keys: frozenset = field(default_factory=frozenset)     # top-level config keys besides COMMON_KEYS
    options: frozenset = field(default_factory=frozenset)  # keys under ``options:`` (read also at the top level)
    weights_required: bool = False  # no default: ``weights`` must be given (or ``random``)
    trust: str = ""           # when the released checkpoint needs ``options.trust_checkpoint: true``
    card: str = ""

    @property
    def needs(self) -> str:
        """What the model needs, in one phrase."""
        if self.kind == "baseline" or self.weights == "none":
            return "nothing (no weights, no text encoder)"
        parts = [f"weights: {self.weights}"]
        if self.text_encoder:
            parts.append(f"text encoder: {self.text_encoder}")
        return "; ".join(parts)

    def as_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "summary": self.summary, "needs": self.needs,
                "weights": self.weights, "weights_required": self.weights_required,
                "text_encoder": self.text_encoder or None, "methods": list(self.methods) or [self.own_method],
                "method_selectable": bool(self.methods), "trust_checkpoint": self.trust or None,
                "card": self.card or None}


_OPEN_CLIP_KEYS = DUAL_KEYS | {"model", "text_encoder", "preprocess", "quick_gelu", "seed"}
_HF_KEYS = DUAL_KEYS | {"model", "preprocess"}
_BIOVIL_KEYS = DUAL_KEYS | {"text_encoder", "interpolation", "sigma", "crop", "resize"}
_CROSS = "cross-attention"

MODELS: dict[str, ModelInfo] = {m.name: m for m in [
    ModelInfo("clip", "dual encoder", "OpenAI CLIP ViT-B/16 through open_clip (QuickGELU)",
              "hub id timm/vit_base_patch16_clip_224.openai or ~/.cache/clip/ViT-B-16.pt (offline cache), or weights=FILE",
              methods=ALL_VIT, keys=_OPEN_CLIP_KEYS, card="model_cards/clip.md"),
    ModelInfo("biomedclip", "dual encoder", "BiomedCLIP ViT-B/16 + PubMedBERT through open_clip (timm trunk)",
              "hub id microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224 (offline cache) or model=local-dir:FOLDER",
              methods=ALL_VIT, keys=_OPEN_CLIP_KEYS, card="model_cards/biomedclip.md"),
    ModelInfo("clip-tiny", "dual encoder", "untrained 4-layer open_clip ViT (plumbing checks, the demo)",
              "none", methods=ALL_VIT, keys=_OPEN_CLIP_KEYS),
    ModelInfo("open_clip", "dual encoder", "any open_clip architecture, local-dir:FOLDER or hf-hub:ORG/REPO",
              "model=ARCH|local-dir:FOLDER|hf-hub:ID and weights=FILE|pretrained tag in the offline cache|random",
              methods=ALL_VIT, methods_fixed=False, keys=_OPEN_CLIP_KEYS, card="model_cards/clip.md"),
    ModelInfo("chexzero", "dual encoder", "CheXzero (CLIP ViT-B/32 fine-tuned on MIMIC-CXR) through open_clip",
              "a checkpoint file (best_64_5e-05_original_22000_0.864.pt), weights=FILE",
              methods=ALL_VIT, keys=_OPEN_CLIP_KEYS, weights_required=True, card="model_cards/chexzero.md"),
    ModelInfo("transformers", "dual encoder", "any transformers CLIPModel / SiglipModel folder",
              "model=FOLDER (config.json, weights, tokenizer)",
              methods=ALL_VIT, methods_fixed=False, keys=_HF_KEYS, card="model_cards/transformers-clip.md"),
    ModelInfo("hf-clip", "dual encoder", "alias of transformers", "model=FOLDER (config.json, weights, tokenizer)",
              methods=ALL_VIT, methods_fixed=False, keys=_HF_KEYS, card="model_cards/transformers-clip.md"),
    ModelInfo("hf-siglip", "dual encoder", "alias of transformers (SigLIP pools without a class token: no rollout, chefer)",
              "model=FOLDER (config.json, weights, tokenizer)",
              methods=tuple(m for m in ALL_VIT if m not in ("rollout", "chefer")), methods_fixed=False, keys=_HF_KEYS,
              card="model_cards/transformers-clip.md"),
    ModelInfo("biovil", "dual encoder", "BioViL (ResNet-50 + CXR-BERT)",
              "hub id microsoft/BiomedVLP-CXR-BERT-specialized (offline cache) or weights=DIR|FILE",
              "the same hub folder, or text_encoder=FOLDER when weights is a file",
              methods=("similarity", "gradcam"),
              keys=_BIOVIL_KEYS, card="model_cards/biovil.md"),
    ModelInfo("biovil_t", "dual encoder", "BioViL-T (ResNet-50 + ViT temporal image encoder, CXR-BERT)",
              "hub id microsoft/BiomedVLP-BioViL-T (offline cache) or weights=DIR|FILE",
              "the same hub folder, or text_encoder=FOLDER when weights is a file",
              methods=("similarity", "gradcam"),
              keys=_BIOVIL_KEYS, card="model_cards/biovil.md"),
    ModelInfo("medclip", "dual encoder", "MedCLIP (Swin-T 'vit' or ResNet-50 variant, own code)",
              "the folder of pytorch_model.bin (medclip-vit-pretrained), weights=DIR",
              "hub id emilyalsentzer/Bio_ClinicalBERT (offline cache) or text_encoder=FOLDER",
              methods=("similarity", "maskclip", "gradcam"), methods_fixed=False,  # ResNet variant: no maskclip
              keys=DUAL_KEYS - {"map_text"} | {"text_encoder", "seed", "options", "variant", "proj_dim", "swin", "resnet_layers", "interpolation",
                                "ensembles", "n_prompts", "prompt_seed", "random_init"},
              options=frozenset({"variant", "proj_dim", "swin", "resnet_layers", "interpolation", "ensembles",
                                 "n_prompts", "prompt_seed", "text_encoder", "random_init"}),
              weights_required=True, card="model_cards/medclip.md"),
    ModelInfo("gloria", "word-region attention", "GLoRIA (ResNet-50 + Bio_ClinicalBERT), word-region attention maps",
              "the checkpoint chexpert_resnet50.ckpt, weights=FILE",
              "a local emilyalsentzer/Bio_ClinicalBERT folder, text_encoder=FOLDER",
              own_method="gloria-attention",
              keys=frozenset({"weights", "text_encoder", "prompts", "map_size", "options"}),
              options=frozenset({"text_encoder", "n_prompts", "prompt_template", "resnet_layers", "trust_checkpoint",
                                 "hash_weights", "random_init"}),
              weights_required=True, trust="the released Lightning .ckpt pickles its hyper-parameters",
              card="model_cards/gloria.md"),
    ModelInfo("medklip", _CROSS, "MedKLIP (ResNet-50 + query decoder over a fixed entity vocabulary)",
              "checkpoint_final.pth, weights=FILE",
              "none at run time: embeddings_cache=FILE built once by `xbench build-embeddings` (Bio_ClinicalBERT)",
              own_method=_CROSS, keys=frozenset({"weights", "embeddings_cache", "layers", "prompts", "options"}),
              options=CROSSATTN_OPTIONS | {"embeddings_cache", "entity_map", "image_size"},
              weights_required=True, card="model_cards/medklip.md"),
    ModelInfo("mavl", _CROSS, "MAVL (MedKLIP with multi-aspect visual queries)",
              "the MAVL checkpoint, weights=FILE",
              "none at run time: embeddings_cache=FILE built by `xbench build-embeddings --aspects`",
              own_method=_CROSS, keys=frozenset({"weights", "embeddings_cache", "layers", "prompts", "options"}),
              options=CROSSATTN_OPTIONS | {"embeddings_cache", "entity_map", "image_size", "aspect_queries"},
              weights_required=True, card="model_cards/mavl.md"),
    ModelInfo("kad", _CROSS, "KAD (knowledge-enhanced query decoder, free-text queries)",
              "KAD_512.pt (or KAD_1024), weights=FILE", "a local Med-KEBERT folder, text_encoder=FOLDER",
              own_method=_CROSS, keys=frozenset({"weights", "text_encoder", "layers", "prompts", "options"}),
              options=CROSSATTN_OPTIONS | {"image_size", "stages", "max_length", "prompt_template"},
              weights_required=True, card="model_cards/kad.md"),
    ModelInfo("carzero", _CROSS, "CARZero (ViT-B/16 + cross-attention alignment, free-text queries)",
              "the CARZero Lightning checkpoint, weights=FILE", "a local BioClinicalMPBERT folder, text_encoder=FOLDER",
              own_method=_CROSS, keys=frozenset({"weights", "text_encoder", "layers", "prompts", "map_size", "options"}),
              options=CROSSATTN_OPTIONS | {"imsize", "word_num", "last_n_layers", "map_size", "prompt_template"},
              weights_required=True, trust="the released Lightning checkpoint pickles its hyper-parameters",
              card="model_cards/carzero.md"),
    ModelInfo("devide", _CROSS, "DeViDe (assumed architecture: no public code, see its card)",
              "a DeViDe checkpoint, weights=FILE", "a local text-encoder folder, text_encoder=FOLDER",
              own_method=_CROSS, keys=frozenset({"weights", "text_encoder", "layers", "prompts", "options"}),
              options=CROSSATTN_OPTIONS | {"image_size", "max_length", "key_rename", "strip_prefixes", "mean", "std",
                                         "prompt_template"},
              weights_required=True, card="model_cards/devide.md"),
    ModelInfo("random", "baseline", "uniform random maps and scores (a floor)", "none", own_method="random",
              keys=frozenset({"map_size", "grid", "seed"}), card="model_cards/baselines.md"),
    ModelInfo("center", "baseline", "a centred Gaussian map, constant scores (the centre bias)", "none",
              own_method="center", keys=frozenset({"map_size", "grid", "sigma"}), card="model_cards/baselines.md"),
    ModelInfo("dog", "baseline", "difference-of-Gaussians image saliency, no text (a bottom-up baseline)", "none",
              own_method="dog", keys=frozenset({"map_size", "grid", "sigma", "sigma_px", "preprocess"}),
              card="model_cards/baselines.md"),
]}

#: The models whose own method is not a dual-encoder map method, by method, for ``--list-methods``.
OWN_METHODS = {
    _CROSS: ("the decoder's cross-attention of each finding's query over the image patches, averaged over "
             "the model's map layers", "the paper of each model (MedKLIP, MAVL, KAD, CARZero, DeViDe; model cards)"),
    "gloria-attention": ("word-region attention (temperature 4) of the prompt's words over the 19 x 19 "
                         "ResNet features, maximum over words",
                         "Huang, Shen, Lungren & Yeung, GLoRIA, ICCV 2021"),
}

#: What a method's needs mean for the kinds of models (``--list-methods``).
NEEDS_MODELS = {
    "blocks": "ViT towers with per-block attention views",
    "class_token": "a class token that pools the image (not SigLIP)",
    "value_path": "ViT / Swin towers (the last block's value path)",
    "gradients": "gradients through the image tower (every dual encoder)",
    "empty_prompt": "",  # every dual encoder embeds the empty prompt (extract/models/dual.py)
}


def info(name: str) -> ModelInfo | None:
    return MODELS.get(name)


def models_for_method(method: str) -> list[str]:
    """Registered models that run ``method`` (a dual-encoder method or a model's own)."""
    return [m.name for m in MODELS.values() if method in m.methods or method == m.own_method]
