"""CheXagent-2 (Stanford AIMI, ``StanfordAIMI/CheXagent-2-3b``, the checkpoint the authors' current code loads):
a SigLIP ViT (XraySigLIP, 512 px, 16 px patches: a 32 x 32 patch grid), a per-token resampler (sin-cos position
embedding, a two-layer GELU MLP, LayerNorm, a projection matrix) and a Phi-2 decoder, written here from the
hub's remote code (read in a public copy; cited in model_cards/chexagent.md) over transformers' building blocks:
``SiglipVisionModel`` for the tower, ``PhiForCausalLM`` for the decoder.

The resampler keeps one token per patch, so the 1024 image tokens the decoder sees are the patch grid itself:
maps on them are undone to the image as on any ViT grid (no Q-Former, no invented grid).

The weights folder (``model: FOLDER``) holds what the hub's ``CheXagentForCausalLM`` saves, in safetensors only:
``config.json`` (the Phi config plus ``visual``), ``model.safetensors`` (or a sharded index) whose keys are that
class's state dict (the tower under ``model.visual.model.``), ``vocab.json`` and ``merges.txt`` (the byte-level
BPE the hub tokenizer reads), optionally ``tokenizer_config.json`` (its ``added_tokens_decoder`` is checked
against the authors' rule) and ``preprocessor_config.json`` (the tower's image mean and std; SigLIP's 0.5 when
absent), and ``vision_config.json``: the tower's config (the XraySigLIP repository's config.json, whose
``vision_config`` is used), which the hub model fetches from a second repository at load time. A folder holding
Python files or pickles is refused; the hub tokenizer's code is not run: the tokenizer is rebuilt from its data
files by the authors' rule (:func:`tokenizer`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from xbench.extract.models.decoder import capture
from xbench.extract.models.decoder.common import CausalLMDecoder, load_parts, split_state, DecoderVLMAdapter, build_adapter, published_prompts
from xbench.extract.models.decoder.folder import check_folder, load_safetensors, read_json
from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError
from xbench.schemas.errors import InputError
from xbench.schemas.inputs import read_bytes

REGISTER = {"chexagent": "build"}

VISION_PREFIX = "model.visual.model."
RESAMPLER_PREFIX = "model.visual."
#: the tokenizer's tags, added in this order after the BPE vocabulary (tokenization_chexagent.py:206-215)
TAGS = ("<|img|>", "<|/img|>", "<|imgpad|>", "<|ref|>", "<|/ref|>", "<|box|>", "<|/box|>", "<|quad|>", "<|/quad|>")
EOS = "<|endoftext|>"
SIGLIP_MEAN = SIGLIP_STD = (0.5, 0.5, 0.5)  # SiglipImageProcessor's defaults
#: config.json keys that are not the Phi decoder's
NOT_PHI = ("visual", "auto_map", "architectures", "model_type", "_name_or_path", "transformers_version", "torch_dtype",
           "dtype")


def sincos_2d(dim: int, side: int) -> torch.Tensor:
    """(side * side, dim) fixed 2-D sin-cos position embedding, row-major over the grid: the first half of the
    channels encodes the column, the second half the row, each as [sin | cos] of 10000^(-2k/d') frequencies
    (modeling_visual.py:47-95; its meshgrid puts the column first)."""
    if dim % 4:
        raise ModelConfigError(f"the resampler's width {dim} must be a multiple of 4")
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim / 4))

    def one(pos):
        out = pos.reshape(-1, 1) * omega.view(1, -1)
        return torch.cat([out.sin(), out.cos()], dim=1)

    rows, cols = torch.meshgrid(torch.arange(side, dtype=torch.float64), torch.arange(side, dtype=torch.float64),
                                indexing="ij")
    return torch.cat([one(cols), one(rows)], dim=1).float()


class Resampler(nn.Module):
    """Per-token: x + pos -> Linear(width, 4 D) -> GELU -> Linear(4 D, D) -> LayerNorm(eps 1e-6) -> @ proj
    (modeling_visual.py:201-219). The attribute names are the checkpoint's (``attn_pool`` is an MLP there)."""

    def __init__(self, width: int, out: int, side: int) -> None:
        super().__init__()
        self.pos_embed = nn.Parameter(sincos_2d(width, side), requires_grad=False)
        self.attn_pool = nn.Sequential(nn.Linear(width, out * 4), nn.GELU(), nn.Linear(out * 4, out))
        self.ln_post = nn.LayerNorm(out, eps=1e-6)
        self.proj = nn.Parameter(out ** -0.5 * torch.randn(out, out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] != self.pos_embed.shape[0]:  # the authors interpolate; every input here is the trained grid
            raise ModelConfigError(f"{x.shape[1]} vision tokens, the resampler's grid has {self.pos_embed.shape[0]}")
        return self.ln_post(self.attn_pool(x + self.pos_embed.to(x.dtype).unsqueeze(0))) @ self.proj


def tokenizer(folder: Path):
    """The hub tokenizer rebuilt from its data files: byte-level BPE over vocab.json + merges.txt (the GPT-2
    pattern, no prefix space, no BOS: tokenization_chexagent.py:155-188, 309-317), ``<|endoftext|>`` as BOS, EOS
    and UNK, then the tags, ``<|coord_i|>`` and ``<|extra_i|>`` padding to a multiple of 64, added in the
    authors' order and guards (tokenization_chexagent.py:211-221). Added tokens the folder's tokenizer_config.json
    lists keep their ids (refused when the rule cannot give them)."""
    from transformers import GPT2Tokenizer

    files = [folder / "vocab.json", folder / "merges.txt"]
    for f in files:
        if not f.is_file():
            raise WeightsNotFoundError("CheXagent tokenizer", str(f), "Copy the model's vocab.json and merges.txt.")
    vocab = read_json(files[0], "CheXagent vocab.json")
    if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in vocab.items()):
        raise ModelConfigError(f"{files[0]}: must map tokens to integer ids")
    try:  # the authors read it as: lines after the "#version" header, the trailing empty one dropped
        lines = read_bytes(files[1], max_bytes=64 << 20, where=str(files[1])).decode("utf-8").split("\n")[1:-1]
    except InputError as exc:
        raise ModelConfigError(str(exc)) from None
    except UnicodeDecodeError:
        raise ModelConfigError(f"{files[1]}: not UTF-8 text") from None
    merges = [tuple(line.split()) for line in lines]
    bad = [i for i, m in enumerate(merges) if len(m) != 2 or "".join(m) not in vocab]
    if bad:
        raise ModelConfigError(f"{files[1]}: line {bad[0] + 2} is not a merge of two pieces into a vocab.json token")
    try:
        fast = GPT2Tokenizer(vocab=vocab, merges=merges, bos_token=EOS, eos_token=EOS, unk_token=EOS)
    except Exception as exc:  # noqa: BLE001 - the tokenizers library raises its own kinds for a broken vocabulary
        raise ModelConfigError(f"{folder}: vocab.json and merges.txt do not make a tokenizer ({str(exc)[:160]})") from None
    listed = _listed_added(folder)
    for content, want in sorted(listed.items(), key=lambda kv: kv[1]):
        _add(fast, content, want)
    known = set(fast.get_vocab())
    for tag in TAGS:
        if tag not in known:
            _add(fast, tag)
    for i in range(10):
        if f"<{i}>" not in fast.get_vocab():  # the authors' guard (it looks for "<i>", adds "<|coord_i|>")
            if f"<|coord_{i}|>" not in fast.get_vocab():
                _add(fast, f"<|coord_{i}|>")
    size = len(fast.get_vocab())
    if size % 64:
        for extra in range((size // 64 + 1) * 64 - size):
            vocab_now = fast.get_vocab()
            if f"<extra_{extra}>" not in vocab_now and f"<|extra_{extra}|>" not in vocab_now:
                _add(fast, f"<|extra_{extra}|>")
    return fast


def _listed_added(folder: Path) -> dict[str, int]:
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return {}
    decoder = read_json(path, "CheXagent tokenizer_config.json").get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        raise ModelConfigError(f"{path}: added_tokens_decoder must map ids to tokens")
    out = {}
    for key, value in decoder.items():
        content = value.get("content") if isinstance(value, dict) else None
        if not isinstance(content, str) or not str(key).isdigit():
            raise ModelConfigError(f"{path}: added token {str(key)[:20]!r} is not an id with its content")
        out[content] = int(key)
    return out


def _add(fast, content: str, want: int | None = None) -> None:
    if content in fast.get_vocab():
        have = fast.convert_tokens_to_ids(content)
        if want is not None and have != want:
            raise ModelConfigError(f"tokenizer: {content!r} is id {have} in vocab.json, tokenizer_config.json says {want}")
        if content != EOS:
            fast.add_special_tokens({"additional_special_tokens": [content]}, replace_extra_special_tokens=False)
        return
    expected = len(fast.get_vocab())
    fast.add_special_tokens({"additional_special_tokens": [content]}, replace_extra_special_tokens=False)
    got = fast.convert_tokens_to_ids(content)
    if got != expected or (want is not None and got != want):
        raise ModelConfigError(f"tokenizer: added token {content!r} would be id {got}, "
                               f"expected {want if want is not None else expected}")


class CheXagent(CausalLMDecoder):
    """The model; ``hf_config`` is the folder's config.json, ``vision`` the tower's Siglip vision config."""

    resize = "squash"  # Resize((R, R)) of the whole image, no crop (modeling_visual.py:191-198, 229-237)
    interpolation = "bicubic"

    def __init__(self, hf_config: Mapping[str, Any], vision: Mapping[str, Any], tok,
                 mean=SIGLIP_MEAN, std=SIGLIP_STD) -> None:
        from transformers import PhiConfig, PhiForCausalLM, SiglipVisionConfig, SiglipVisionModel

        super().__init__()
        visual = hf_config.get("visual")
        if not isinstance(visual, Mapping) or not isinstance(visual.get("image_size"), int):
            raise ModelConfigError("config.json must carry `visual` with the input `image_size` (the hub config)")
        if hf_config.get("rope_scaling") not in (None, {}):
            raise ModelConfigError("rope_scaling is not supported (CheXagent-2's is null)")
        vcfg = SiglipVisionConfig(**{k: v for k, v in vision.items() if k not in ("model_type", "architectures")})
        vcfg._attn_implementation = "sdpa"
        self.input_size = int(visual["image_size"])
        side = self.input_size // vcfg.patch_size
        if vcfg.image_size != self.input_size or self.input_size % vcfg.patch_size:
            raise ModelConfigError(f"the tower's image_size {vcfg.image_size} (patch {vcfg.patch_size}) is not the "
                                   f"model's input {self.input_size}: its position embeddings would not fit")
        self.grid = (side, side)
        self.vit = SiglipVisionModel(vcfg)  # transformers 5's vision model holds the tower's modules itself
        phi = {k: v for k, v in hf_config.items() if k not in NOT_PHI and k != "rope_scaling"}
        lcfg = PhiConfig(**phi)
        capture.register()
        lcfg._attn_implementation = capture.NAME
        self.lm = PhiForCausalLM(lcfg)
        out = int(visual.get("output_dim", lcfg.hidden_size))
        if out != lcfg.hidden_size:
            raise ModelConfigError(f"visual.output_dim {out} is not the decoder's hidden_size {lcfg.hidden_size}")
        self.resampler = Resampler(vcfg.hidden_size, out, side)
        self.tok = self.tokenizer = tok
        self.mean, self.std = tuple(float(v) for v in mean), tuple(float(v) for v in std)
        prompts = published_prompts()["chexagent"]
        self.system, self.turns = str(prompts["system"]), str(prompts["turns"])
        self.img_start, self.img_end = (tok.convert_tokens_to_ids(t) for t in TAGS[:2])
        self._layers = {layer.self_attn: i for i, layer in enumerate(self.lm.model.layers)}

    # -- the vision side ---------------------------------------------------------------------------------
    def vision_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """The last encoder block's output, before the tower's post-LayerNorm and head: ``hidden_states[-1]``
        of the Siglip vision model (modeling_visual.py:221-227)."""
        return self.vit.encoder(inputs_embeds=self.vit.embeddings(pixels)).last_hidden_state

    def project(self, features: torch.Tensor) -> torch.Tensor:
        return self.resampler(features)

    # -- the prompt --------------------------------------------------------------------------------------
    def prompt_ids(self, question: str) -> tuple[list[int], list[int]]:
        """The authors' conversation (model_chexagent/chexagent.py:27-29): the system turn, the user turn ``Picture 1:<|img|>
        ...<|/img|>\\n{question}`` (from_list_format, tokenization_chexagent.py:466-475), the generation prompt,
        as their chat template renders it (``turns`` in prompts.toml); the image's tokens go between ``<|img|>``
        and ``<|/img|>`` (modeling_chexagent.py:836-841, 917-921)."""
        query = f"Picture 1:{TAGS[0]}{TAGS[1]}\n{question}"
        text = self.turns.replace("{system}", self.system).replace("{user}", query)
        ids = list(self.tok(text, add_special_tokens=False).input_ids)
        starts = [i for i, t in enumerate(ids) if t == self.img_start]
        if len(starts) != 1 or starts[0] + 1 >= len(ids) or ids[starts[0] + 1] != self.img_end:
            raise ModelConfigError("the question must not contain <|img|> or <|/img|>")
        return ids[:starts[0] + 1], ids[starts[0] + 1:]

    def load_state(self, state: Mapping[str, torch.Tensor]) -> None:
        """The hub's CheXagentForCausalLM state dict, strictly (derived buffers excepted)."""
        parts = split_state(state, {"vit": VISION_PREFIX, "resampler": RESAMPLER_PREFIX}, "lm",
                            skip=("inv_freq", "cos_cached", "sin_cached", "position_ids"))
        load_parts(self, parts, ignore_missing=("position_ids",))


def _vision_config(folder: Path) -> dict:
    cfg = read_json(folder / "vision_config.json", "CheXagent vision_config.json (the XraySigLIP tower's config)")
    cfg = cfg.get("vision_config", cfg)
    if not isinstance(cfg, dict) or not all(isinstance(cfg.get(k), int) for k in ("image_size", "patch_size")):
        raise ModelConfigError(f"{folder / 'vision_config.json'}: needs the tower's image_size and patch_size")
    return cfg


def _norm(folder: Path) -> tuple[tuple, tuple]:
    path = folder / "preprocessor_config.json"
    if not path.is_file():
        return SIGLIP_MEAN, SIGLIP_STD
    cfg = read_json(path, "CheXagent preprocessor_config.json")
    mean, std = cfg.get("image_mean", SIGLIP_MEAN), cfg.get("image_std", SIGLIP_STD)
    ok = all(isinstance(v, (list, tuple)) and len(v) == 3 and all(isinstance(x, (int, float)) and math.isfinite(x)
                                                                   for x in v) for v in (mean, std))
    if not ok or min(std) <= 0:
        raise ModelConfigError(f"{path}: image_mean and image_std must be three finite numbers (std > 0)")
    return tuple(mean), tuple(std)


def load(folder: str | Path, *, random: bool = False, seed: int = 0) -> CheXagent:
    """The model of a weights folder (refused when it holds code or pickles); ``random``: untrained weights."""
    folder = check_folder(folder, "CheXagent", need_weights=not random)
    hf_config = read_json(folder / "config.json", "CheXagent config.json")
    vision = _vision_config(folder)
    mean, std = _norm(folder)
    torch.manual_seed(seed)
    try:
        model = CheXagent(hf_config, vision, tokenizer(folder), mean, std)
    except Exception as exc:  # noqa: BLE001 - transformers 5 raises its strict dataclasses' own errors too
        raise ModelConfigError(f"{folder / 'config.json'}: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not random:
        model.load_state(load_safetensors(folder, "CheXagent"))
    return model.eval().requires_grad_(False)


def build(config: Mapping[str, Any]) -> DecoderVLMAdapter:
    return build_adapter(config, "chexagent", "CheXagent-2-3b", load)
