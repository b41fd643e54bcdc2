"""Named presets: a registered name that fills in a known model's defaults, then calls its backend.

Each preset is a data file, ``preset_configs/<name>.toml`` (one per preset, found by listing that folder, as
open_clip finds one JSON per architecture), read with the bounded config reader: ``builder`` (which backend
builds it, :data:`BUILDERS`), ``prompts_from`` (the ``prompts:`` default from prompts.toml's section of that
name), ``[defaults]`` (config keys; the user's keys override them) and, for ``clip-tiny``, ``[architecture]``.
``presets.<name>`` is the registry's factory ``(config) -> ModelAdapter`` of that preset.
"""
from __future__ import annotations

import copy
import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

PRESET_DIR = Path(__file__).resolve().with_name("preset_configs")
_FILE_KEYS = ("builder", "prompts_from", "defaults", "architecture")


@dataclass(frozen=True)
class Preset:
    """One preset file, parsed: calling it builds the model (``config`` overrides ``defaults``)."""

    name: str
    builder: str
    defaults: Mapping[str, Any]
    architecture: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, config: Mapping[str, Any]):
        return BUILDERS[self.builder](self, config)

    def fresh_defaults(self) -> dict:
        """A deep copy of :attr:`defaults` (a builder may change the config it is given; the preset stays)."""
        return copy.deepcopy(dict(self.defaults))


def preset_names() -> list[str]:
    """The presets, by listing :data:`PRESET_DIR` (no file is read)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


@functools.cache
def preset(name: str) -> Preset:
    """The preset ``name`` read from its file; ModelConfigError naming the file for a bad one."""
    from xbench.schemas.inputs import CONFIG, load_config
    from xbench.extract.models.errors import ModelConfigError
    from xbench.extract.models.prompts import preset_prompts

    path = PRESET_DIR / f"{name}.toml"
    doc = load_config(path, limits=CONFIG)
    problems = []
    for key in doc:
        if key not in _FILE_KEYS:
            close = difflib.get_close_matches(key, _FILE_KEYS, n=1)
            problems.append(f"{path}: unknown key {key!r}." + (f" Did you mean: {close[0]}?" if close else "")
                            + f" Keys: {', '.join(_FILE_KEYS)}")
    if doc.get("builder") not in BUILDERS:
        problems.append(f"{path}: builder must be one of {', '.join(BUILDERS)}, got {doc.get('builder')!r}")
    if not isinstance(doc.get("defaults", {}), dict) or not isinstance(doc.get("architecture", {}), dict):
        problems.append(f"{path}: [defaults] and [architecture] are tables")
    if problems:
        raise ModelConfigError("\n".join(problems))
    defaults = dict(doc.get("defaults", {}))
    if "prompts_from" in doc:
        defaults["prompts"] = preset_prompts(str(doc["prompts_from"]))
    return Preset(name, doc["builder"], defaults, dict(doc.get("architecture", {})))


def __getattr__(name: str):  # presets.clip, presets.biomedclip, getattr(presets, "clip-tiny"): the factories
    legacy = {"CLIP_DEFAULTS": "clip", "BIOMEDCLIP_DEFAULTS": "biomedclip", "CLIP_TINY_DEFAULTS": "clip-tiny"}
    if name in legacy:
        return dict(preset(legacy[name]).defaults)
    if name == "CLIP_TINY_ARCH":
        return dict(preset("clip-tiny").architecture)
    stem = "clip-tiny" if name == "clip_tiny" else name
    if stem in preset_names():
        return preset(stem)
    raise AttributeError(name)


BIOMEDCLIP_REPO = "microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224"


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


def _build_open_clip(preset: Preset, config: Mapping[str, Any]):
    """A preset of open_clip's adapter: its defaults under the user's keys."""
    from xbench.extract.models.openclip import build

    return build(_with(preset.fresh_defaults(), config))


#: Where the default ``clip`` weights (open_clip's ``openai`` tag for ViT-B-16-quickgelu) are found
#: offline: the two places open_clip's pretrained table names. Checked by :func:`clip_preflight`
#: before torch and open_clip are imported (importing them takes seconds; a missing file should not).
CLIP_OPENAI_HUB = ("timm/vit_base_patch16_clip_224.openai", ("open_clip_model.safetensors", "open_clip_pytorch_model.bin"))
CLIP_OPENAI_FILE = "~/.cache/clip/ViT-B-16.pt"


def clip_preflight(config: Mapping[str, Any]) -> None:
    """Raise WeightsNotFoundError at once when the default CLIP weights are in neither offline cache."""
    from pathlib import Path

    from xbench.extract.models.errors import WeightsNotFoundError

    defaults = preset("clip").defaults
    merged = _with(defaults, config)
    if (merged["model"], merged["weights"]) != (defaults["model"], defaults["weights"]):
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
    from xbench.extract.models.biovil_weights import preflight  # torch-free

    return preflight(name)


def _weights_given(what: str, needed: str, how: str) -> Callable[[Mapping[str, Any]], None]:
    """The preflight of a model without default weights: ``weights`` must be given, said before torch is
    imported (the path itself is checked by the CLI, then by the adapter)."""

    def check(config: Mapping[str, Any]) -> None:
        if not config.get("weights"):
            from xbench.extract.models.errors import WeightsNotFoundError

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
    from xbench.extract.models.errors import WeightsNotFoundError

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


def _build_clip_tiny(preset: Preset, config: Mapping[str, Any]):
    """An untrained tiny open_clip ViT (``[architecture]`` of clip-tiny.toml), offline: for the demo and tests.

    Its maps are those of random weights (a plumbing check, not a model); ``seed`` (default 0)
    makes the weights reproducible. ``weights: FILE`` loads a checkpoint of this architecture.
    """
    import torch

    from xbench.extract.models.openclip import build

    cfg = _with({**preset.fresh_defaults(), "name": preset.name}, config)
    cfg["model"] = f"local-dir:{_arch_folder(preset.architecture)}"
    with torch.random.fork_rng(devices=[]):  # leave the caller's generator untouched
        torch.manual_seed(int(cfg.get("seed", 0)))
        adapter = build(cfg)
    if hasattr(adapter, "info"):
        adapter.info["model"] = "clip-tiny (inline open_clip config, xbench presets.CLIP_TINY_ARCH)"
    return adapter


#: How each ``builder`` named by a preset file builds it.
BUILDERS: dict[str, Callable[[Preset, Mapping[str, Any]], Any]] = {"open_clip": _build_open_clip,
                                                                     "clip-tiny": _build_clip_tiny}
