"""What each registered model is, what it needs and which config keys it reads, without importing torch.

``xbench-extract --list-models`` / ``--list-methods`` print from here, and the CLI's checks
(:mod:`xbench.extract.models.checks`) refuse an unknown config key, a map method the model cannot run or
a missing weights path from here, before torch or the model is loaded. Each entry mirrors what the
adapter's factory reads (``config.get(...)`` and ``option(config, ...)`` in its module);
``tests/extract/test_catalog.py`` checks the entries against the adapters built with tiny random weights.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

#: Keys under ``preprocess:`` (dual encoders, the dog baseline) and ``prompts:``.
PREPROCESS_KEYS = frozenset({"resize", "size", "mean", "std", "interpolation", "crop_offset"})
PROMPT_KEYS = frozenset({"style", "positive", "negative", "classes", "vocabulary", "origin", "dataset",
                         "answers", "phrase"})  # answers: the two answers a decoder VLM compares, phrase: the
# question it is asked of a phrase row (extract/models/decoder)

#: The methods every ViT tower (open_clip, timm, transformers CLIP) runs.
ALL_VIT = ("similarity", "maskclip", "gradcam", "rollout", "chefer", "clip_surgery", "gem")
#: The methods of a decoder VLM (extract/models/decoder/maps.py: read at the answer position).
DECODER_METHODS = ("attention", "rollout", "chefer", "gradcam")


# -- typed configs -------------------------------------------------------------------------------------
# Each adapter's config as a frozen dataclass: its fields are the keys the adapter reads (the one list of them;
# ModelInfo.keys / .options and the CLI's checks derive from these), typed as the checks accept them.
# ``checks.typed_config`` builds one from a config dict, refusing an unknown key with the close ones.
@dataclass(frozen=True)
class Config:
    """The keys every registered adapter accepts (the registry's own and the runner's defaults)."""

    adapter: str | None = None
    name: str | int | None = None
    device: str | None = None
    precision: str | None = None
    method: str | None = None
    augment: str | list | None = None  # test-time augmentation specs (extract/tta.py); --augment wins


@dataclass(frozen=True)
class DualConfig(Config):
    """What a dual encoder reads (extract/models/dual.py and its backends)."""

    weights: str | None = None
    prompts: dict | None = None
    map_size: int | list[int] | None = None
    map_text: str | None = None


@dataclass(frozen=True)
class OpenClipConfig(DualConfig):
    model: str | None = None
    text_encoder: str | None = None
    preprocess: dict | None = None
    quick_gelu: bool | None = None
    seed: int | None = None


@dataclass(frozen=True)
class HFConfig(DualConfig):
    model: str | None = None
    preprocess: dict | None = None


@dataclass(frozen=True)
class BioViLConfig(DualConfig):
    text_encoder: str | None = None
    interpolation: str | None = None
    sigma: float | None = None
    crop: bool | None = None
    resize: int | None = None


@dataclass(frozen=True)
class MedCLIPOptions:
    variant: str | None = None
    proj_dim: int | None = None
    swin: dict | None = None
    resnet_layers: list | None = None
    interpolation: str | None = None
    ensembles: int | None = None
    n_prompts: int | None = None
    prompt_seed: int | None = None
    text_encoder: str | None = None
    random_init: bool | None = None


@dataclass(frozen=True)
class MedCLIPConfig(MedCLIPOptions, Config):  # its options are read at the top level too
    weights: str | None = None
    prompts: dict | None = None
    map_size: int | list[int] | None = None
    seed: int | None = None
    options: dict | None = None


@dataclass(frozen=True)
class GLoRIAOptions:
    text_encoder: str | None = None
    n_prompts: int | None = None
    prompt_template: str | None = None
    resnet_layers: list | None = None
    trust_checkpoint: bool | None = None
    hash_weights: bool | None = None
    random_init: bool | None = None


@dataclass(frozen=True)
class GLoRIAConfig(Config):
    weights: str | None = None
    text_encoder: str | None = None
    prompts: dict | None = None
    map_size: int | list[int] | None = None
    options: dict | None = None


@dataclass(frozen=True)
class CrossAttnOptions:
    """The options every adapter built on extract/models/crossattn/common.py reads (``option(config, key)``:
    under ``options:`` or at the top level)."""

    trust_checkpoint: bool | None = None
    hash_weights: bool | None = None
    random_init: bool | None = None
    equalize: bool | str | None = None
    map_layers: list | None = None
    arch: dict | None = None
    text_encoder: str | None = None


@dataclass(frozen=True)
class CrossAttnConfig(Config):
    weights: str | None = None
    layers: int | list[int] | None = None
    prompts: dict | None = None
    options: dict | None = None


@dataclass(frozen=True)
class MedKLIPConfig(CrossAttnConfig):
    embeddings_cache: str | None = None


@dataclass(frozen=True)
class MedKLIPOptions(CrossAttnOptions):
    embeddings_cache: str | None = None
    entity_map: dict | None = None
    image_size: int | None = None


@dataclass(frozen=True)
class MAVLOptions(MedKLIPOptions):
    aspect_queries: bool | None = None


@dataclass(frozen=True)
class TextQueryConfig(CrossAttnConfig):
    text_encoder: str | None = None


@dataclass(frozen=True)
class KADOptions(CrossAttnOptions):
    image_size: int | None = None
    stages: list | None = None
    max_length: int | None = None
    prompt_template: str | None = None


@dataclass(frozen=True)
class CARZeroConfig(TextQueryConfig):
    map_size: int | list[int] | None = None


@dataclass(frozen=True)
class CARZeroOptions(CrossAttnOptions):
    imsize: int | None = None
    word_num: int | None = None
    last_n_layers: int | None = None
    map_size: int | list[int] | None = None
    prompt_template: str | None = None


@dataclass(frozen=True)
class DeViDeOptions(CrossAttnOptions):
    image_size: int | None = None
    max_length: int | None = None
    key_rename: dict | None = None
    strip_prefixes: list | None = None
    mean: list | None = None
    std: list | None = None
    prompt_template: str | None = None


@dataclass(frozen=True)
class DecoderConfig(Config):
    """What a decoder VLM reads (extract/models/decoder/)."""

    model: str | None = None
    weights: str | None = None
    prompts: dict | None = None
    layers: int | list[int] | None = None
    map_size: int | list[int] | None = None
    seed: int | None = None


@dataclass(frozen=True)
class BaselineConfig(Config):
    map_size: int | list[int] | None = None
    grid: int | list[int] | None = None


@dataclass(frozen=True)
class RandomConfig(BaselineConfig):
    seed: int | None = None


@dataclass(frozen=True)
class CenterConfig(BaselineConfig):
    sigma: float | None = None


@dataclass(frozen=True)
class DoGConfig(CenterConfig):
    sigma_px: float | None = None
    preprocess: dict | None = None


def field_names(cls: type | None) -> frozenset:
    """The keys a config (or options) dataclass declares."""
    return frozenset(f.name for f in fields(cls)) if cls is not None else frozenset()


#: Keys every registered adapter accepts: the registry's own and the runner's defaults.
COMMON_KEYS = field_names(Config)
#: What a dual encoder reads (extract/models/dual.py and its backends).
DUAL_KEYS = field_names(DualConfig) - COMMON_KEYS
#: The options every adapter built on extract/models/crossattn/common.py reads.
CROSSATTN_OPTIONS = field_names(CrossAttnOptions)


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
    config: type = Config     # the adapter's typed config: its fields are the keys it reads
    options_config: type | None = None  # the typed ``options:`` (its keys are read at the top level too)
    weights_required: bool = False  # no default: ``weights`` must be given (or ``random``)
    trust: str = ""           # when the released checkpoint needs ``options.trust_checkpoint: true``
    card: str = ""
    #: False: the adapter computes in NumPy (``outputs``/``phrase_arrays``) and the runner extracts it without
    #: importing torch (extract/runner.py's _run_numpy; `make demo`'s torch-free first run)
    torch: bool = True

    @property
    def keys(self) -> frozenset:
        """Top-level config keys besides COMMON_KEYS (the typed config's fields)."""
        return field_names(self.config) - COMMON_KEYS

    @property
    def options(self) -> frozenset:
        """Keys under ``options:`` (read also at the top level)."""
        return field_names(self.options_config)

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


_CROSS = "cross-attention"

MODELS: dict[str, ModelInfo] = {m.name: m for m in [
    ModelInfo("clip", "dual encoder", "OpenAI CLIP ViT-B/16 through open_clip (QuickGELU)",
              "hub id timm/vit_base_patch16_clip_224.openai or ~/.cache/clip/ViT-B-16.pt (offline cache), or weights=FILE",
              methods=ALL_VIT, config=OpenClipConfig, card="model_cards/clip.md"),
    ModelInfo("biomedclip", "dual encoder", "BiomedCLIP ViT-B/16 + PubMedBERT through open_clip (timm trunk)",
              "hub id microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224 (offline cache) or model=local-dir:FOLDER",
              methods=ALL_VIT, config=OpenClipConfig, card="model_cards/biomedclip.md"),
    ModelInfo("clip-tiny", "dual encoder", "untrained 4-layer open_clip ViT (plumbing checks, the demo)",
              "none", methods=ALL_VIT, config=OpenClipConfig),
    ModelInfo("open_clip", "dual encoder", "any open_clip architecture, local-dir:FOLDER or hf-hub:ORG/REPO",
              "model=ARCH|local-dir:FOLDER|hf-hub:ID and weights=FILE|pretrained tag in the offline cache|random",
              methods=ALL_VIT, methods_fixed=False, config=OpenClipConfig, card="model_cards/clip.md"),
    ModelInfo("chexzero", "dual encoder", "CheXzero (CLIP ViT-B/32 fine-tuned on MIMIC-CXR) through open_clip",
              "a checkpoint file (best_64_5e-05_original_22000_0.864.pt), weights=FILE",
              methods=ALL_VIT, config=OpenClipConfig, weights_required=True, card="model_cards/chexzero.md"),
    ModelInfo("transformers", "dual encoder", "any transformers CLIPModel / SiglipModel folder",
              "model=FOLDER (config.json, weights, tokenizer)",
              methods=ALL_VIT, methods_fixed=False, config=HFConfig, card="model_cards/transformers-clip.md"),
    ModelInfo("hf-clip", "dual encoder", "alias of transformers", "model=FOLDER (config.json, weights, tokenizer)",
              methods=ALL_VIT, methods_fixed=False, config=HFConfig, card="model_cards/transformers-clip.md"),
    ModelInfo("hf-siglip", "dual encoder", "alias of transformers (SigLIP pools without a class token: no rollout, chefer)",
              "model=FOLDER (config.json, weights, tokenizer)",
              methods=tuple(m for m in ALL_VIT if m not in ("rollout", "chefer")), methods_fixed=False, config=HFConfig,
              card="model_cards/transformers-clip.md"),
    ModelInfo("biovil", "dual encoder", "BioViL (ResNet-50 + CXR-BERT)",
              "hub id microsoft/BiomedVLP-CXR-BERT-specialized (offline cache) or weights=DIR|FILE",
              "the same hub folder, or text_encoder=FOLDER when weights is a file",
              methods=("similarity", "gradcam"),
              config=BioViLConfig, card="model_cards/biovil.md"),
    ModelInfo("biovil_t", "dual encoder", "BioViL-T (ResNet-50 + ViT temporal image encoder, CXR-BERT)",
              "hub id microsoft/BiomedVLP-BioViL-T (offline cache) or weights=DIR|FILE",
              "the same hub folder, or text_encoder=FOLDER when weights is a file",
              methods=("similarity", "gradcam"),
              config=BioViLConfig, card="model_cards/biovil.md"),
    ModelInfo("medclip", "dual encoder", "MedCLIP (Swin-T 'vit' or ResNet-50 variant, own code)",
              "the folder of pytorch_model.bin (medclip-vit-pretrained), weights=DIR",
              "hub id emilyalsentzer/Bio_ClinicalBERT (offline cache) or text_encoder=FOLDER",
              methods=("similarity", "maskclip", "gradcam"), methods_fixed=False,  # ResNet variant: no maskclip
              config=MedCLIPConfig, options_config=MedCLIPOptions,
              weights_required=True, card="model_cards/medclip.md"),
    ModelInfo("gloria", "word-region attention", "GLoRIA (ResNet-50 + Bio_ClinicalBERT), word-region attention maps",
              "the checkpoint chexpert_resnet50.ckpt, weights=FILE",
              "a local emilyalsentzer/Bio_ClinicalBERT folder, text_encoder=FOLDER",
              own_method="gloria-attention",
              config=GLoRIAConfig, options_config=GLoRIAOptions,
              weights_required=True, trust="the released Lightning .ckpt pickles its hyper-parameters",
              card="model_cards/gloria.md"),
    ModelInfo("medklip", _CROSS, "MedKLIP (ResNet-50 + query decoder over a fixed entity vocabulary)",
              "checkpoint_final.pth, weights=FILE",
              "none at run time: embeddings_cache=FILE built once by `xbench build-embeddings` (Bio_ClinicalBERT)",
              own_method=_CROSS, config=MedKLIPConfig, options_config=MedKLIPOptions,
              weights_required=True, card="model_cards/medklip.md"),
    ModelInfo("mavl", _CROSS, "MAVL (MedKLIP with multi-aspect visual queries)",
              "the MAVL checkpoint, weights=FILE",
              "none at run time: embeddings_cache=FILE built by `xbench build-embeddings --aspects`",
              own_method=_CROSS, config=MedKLIPConfig, options_config=MAVLOptions,
              weights_required=True, card="model_cards/mavl.md"),
    ModelInfo("kad", _CROSS, "KAD (knowledge-enhanced query decoder, free-text queries)",
              "KAD_512.pt (or KAD_1024), weights=FILE", "a local Med-KEBERT folder, text_encoder=FOLDER",
              own_method=_CROSS, config=TextQueryConfig, options_config=KADOptions,
              weights_required=True, card="model_cards/kad.md"),
    ModelInfo("carzero", _CROSS, "CARZero (ViT-B/16 + cross-attention alignment, free-text queries)",
              "the CARZero Lightning checkpoint, weights=FILE", "a local BioClinicalMPBERT folder, text_encoder=FOLDER",
              own_method=_CROSS, config=CARZeroConfig, options_config=CARZeroOptions,
              weights_required=True, trust="the released Lightning checkpoint pickles its hyper-parameters",
              card="model_cards/carzero.md"),
    ModelInfo("devide", _CROSS, "DeViDe (assumed architecture: no public code, see its card)",
              "a DeViDe checkpoint, weights=FILE", "a local text-encoder folder, text_encoder=FOLDER",
              own_method=_CROSS, config=TextQueryConfig, options_config=DeViDeOptions,
              weights_required=True, card="model_cards/devide.md"),
    ModelInfo("llava-rad", "decoder VLM", "LLaVA-Rad (BiomedCLIP-CXR ViT + MLP projector + Llama), yes/no likelihood",
              "model=FOLDER (config.json, model.safetensors in the authors' state-dict layout, the vision config, "
              "tokenizer; no Python, no pickles)", methods=DECODER_METHODS, config=DecoderConfig,
              card="model_cards/llava-rad.md"),
    ModelInfo("medgemma", "decoder VLM", "MedGemma 4B (transformers Gemma3ForConditionalGeneration), yes/no likelihood",
              "model=FOLDER (config.json, model.safetensors, tokenizer and processor files; no Python, no pickles)",
              methods=DECODER_METHODS, config=DecoderConfig, card="model_cards/medgemma.md"),
    ModelInfo("maira-2", "decoder VLM", "MAIRA-2 (RAD-DINO Dinov2 + 4-layer MLP projector + Llama), yes/no likelihood",
              "model=FOLDER (config.json, model.safetensors in the authors' state-dict layout, preprocessor, "
              "processor and tokenizer files with the chat template; no Python, no pickles)",
              methods=DECODER_METHODS, config=DecoderConfig, card="model_cards/maira-2.md"),
    ModelInfo("chexagent", "decoder VLM", "CheXagent-2-3b (XraySigLIP ViT + per-token resampler + Phi-2), yes/no "
              "likelihood", "model=FOLDER (the hub's config.json, model.safetensors, vocab.json, merges.txt, and the "
              "tower's vision_config.json; no Python, no pickles)", methods=DECODER_METHODS, config=DecoderConfig,
              card="model_cards/chexagent.md"),
    ModelInfo("random", "baseline", "uniform random maps and scores (a floor)", "none", own_method="random",
              config=RandomConfig, card="model_cards/baselines.md", torch=False),
    ModelInfo("center", "baseline", "a centred Gaussian map, constant scores (the centre bias)", "none",
              own_method="center", config=CenterConfig, card="model_cards/baselines.md", torch=False),
    ModelInfo("dog", "baseline", "difference-of-Gaussians image saliency, no text (a bottom-up baseline)", "none",
              own_method="dog", config=DoGConfig,
              card="model_cards/baselines.md", torch=False),
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
    "decoder": "decoder VLMs (the answer position over the image tokens)",
    "empty_prompt": "",  # every dual encoder embeds the empty prompt (extract/models/dual.py)
}


def info(name: str) -> ModelInfo | None:
    return MODELS.get(name)


def needs_torch(adapter: str) -> bool:
    """Whether the model behind registry name ``adapter`` (a config's ``adapter:``) runs on torch: what its
    catalog entry declares; True for anything the catalog does not list (plugins, ``module:attr``)."""
    entry = MODELS.get(str(adapter))
    return entry is None or entry.torch


def models_for_method(method: str) -> list[str]:
    """Registered models that run ``method`` (a dual-encoder method or a model's own)."""
    return [m.name for m in MODELS.values() if method in m.methods or method == m.own_method]
