"""Model adapters behind one registry, and the config format that declares a model.

``create_adapter(name_or_config_path, **overrides)`` is the one entry point. It accepts

* a registered name (``xbench-extract --list-models``): ``clip``, ``biomedclip``, ``open_clip``,
  ``chexzero``, ``biovil``, ``biovil_t``, ``gloria``, ``medclip``, ``transformers``, the baselines ``random``/``center``/``dog``, the cross-attention models
  ``medklip``/``kad``/``mavl``/``carzero``/``devide``, the decoder VLMs ``llava-rad``/``medgemma``/``maira-2``/``chexagent``, and names from the ``xbench.models``
  entry point group of installed packages;
* a config file (``.yaml``/``.yml``, ``.toml`` or ``.json``);
* a ``"package.module:attr"`` string naming a factory or a ModelAdapter subclass.

Registry / factory contract
---------------------------
Every registry entry is a **factory** ``build(config: dict) -> ModelAdapter`` (registered as a
lazy ``"module:attr"`` string, so listing models imports nothing heavy). The factory receives the
whole config dict (below) with ``name`` set, must not download anything, and raises
:class:`~xbench.extract.models.errors.WeightsNotFoundError` (what, needed file or hub id, how to
get it) when weights are missing, :class:`~xbench.extract.models.errors.ModelConfigError` for a bad
key. A ``ModelAdapter`` subclass given instead of a factory is built with ``Cls.from_config(config)``
when it defines it, else ``Cls(config)``. An installed package plugs in a model with::

    [project.entry-points."xbench.models"]
    mymodel = "mypkg.xbench_adapter:build"

Config keys (all optional unless the factory needs them; a key the adapter does not read is refused)
----------------------------------------------------------------------------------------------------
``adapter``       registry name, entry point name or ``module:attr`` of the factory to call.
                  Default: ``model`` when that is a registered name.
``name``          name recorded as the submission's ``model`` (default: the registry name or file stem).
``model``         the backbone: an open_clip architecture, ``local-dir:FOLDER``, ``hf-hub:ORG/REPO``
                  (offline cache), or a transformers folder; cross-attention adapters: their variant.
``weights``       checkpoint file / folder / pretrained tag resolved offline; ``random`` = untrained (tests).
``text_encoder``  local folder of the HF text model (config.json + tokenizer): BiomedCLIP's
                  PubMedBERT, Bio_ClinicalBERT for MedKLIP/MAVL, Med-KEBERT for KAD, ...
``prompts``       ``{style: single|pair, positive: "There is {}", negative: "There is no {}",
                  classes: {<class>: [pos, neg]}, vocabulary: true}``; text comes from the finding
                  vocabulary (xbench.schemas.vocabulary) unless overridden.
``preprocess``    ``{resize: squash|crop|pad, size: 224, mean: [..], std: [..], interpolation: bicubic}``;
                  ``squash`` (default) covers the whole image; ``crop`` is CLIP's own centre crop,
                  ``pad`` a letterbox; maps are always returned on the whole image.
``method``        map method (``xbench.extract.saliency.METHODS``): ``similarity`` (default), ``maskclip``, ``gradcam``, ``rollout``, ``chefer``, ``clip_surgery``, ``gem`` for dual
                  encoders; ``cross-attention`` for the query-decoder models.
``map_size``      [h, w] of the written maps (default: the model's patch grid).
``map_text``      ``positive`` | ``contrast``: which text the maps use in the pair style.
``layers``        cross-attention layers to average (e.g. ``[-4, -3, -2, -1]``).
``device``, ``precision``  defaults for the runner (the CLI options win).
``augment``       test-time augmentation specs (``[hflip, "rotate:degrees=5"]``; docs/how-to/augmentations.md);
                  ``--augment`` replaces them.

Example (``biomedclip.yaml``)::

    adapter: open_clip
    name: biomedclip
    model: local-dir:/models/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224
    text_encoder: /models/BiomedNLP-BiomedBERT-base-uncased-abstract
    prompts: {style: single, positive: "this is a photo of {}"}
    preprocess: {resize: crop}
    method: maskclip

Relative paths in a config file are resolved against the file's folder.
"""
from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path
from typing import Any, Callable, Mapping

from xbench.schemas.options import CONFIG_SUFFIXES  # noqa: F401  (one definition, in the light layer: suites read it too)
from xbench.schemas.registry import ENTRY_POINT_GROUPS, Registry, UnknownNameError
from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError

Factory = Callable[[dict], "ModelAdapter"]  # noqa: F821 (base imports torch; keep this module light)
ENTRY_POINT_GROUP = ENTRY_POINT_GROUPS["model"]


def _is_factory(obj: Any) -> bool:
    """a factory build(config) -> ModelAdapter, or a ModelAdapter subclass"""
    return callable(obj)


#: Every model module declares its names (``REGISTER = {"name": "factory"}``); they are found by listing this
#: package and its ``crossattn`` subpackage, and the presets by listing ``preset_configs/`` (one TOML file per
#: preset: presets.py), so a new model is its module or its preset file (no central list to edit).
MODELS: Registry[Factory] = Registry("model", check=_is_factory, entry_point_group=ENTRY_POINT_GROUP,
                                     hint="(xbench-extract --list-models)")
MODELS.discover(__name__, __path__, declared="REGISTER")
MODELS.discover(f"{__name__}.crossattn", [str(Path(p) / "crossattn") for p in __path__], declared="REGISTER")
MODELS.discover(f"{__name__}.decoder", [str(Path(p) / "decoder") for p in __path__], declared="REGISTER")
for _preset in sorted(Path(__path__[0]).joinpath("preset_configs").glob("*.toml")):  # one file per preset
    MODELS.register(_preset.stem, f"{__name__}.presets:{_preset.stem}")
from xbench.extract.models.checks import PATH_KEYS  # noqa: E402  (the config keys that may name local files: one definition)


def _model_config_limits():
    """A model config is a page a person writes: 1 MiB, 16 levels, 100,000 values at most."""
    from xbench.schemas.inputs import CONFIG, with_limits

    return with_limits(CONFIG, max_bytes=1024 * 1024, max_depth=16, max_elements=100_000)


def _load_entry_points() -> None:
    """Register installed plugins (group ``xbench.models``) once, lazily (by their target string)."""
    MODELS.load_entry_points()


def list_models() -> list[str]:
    return MODELS.names()


def read_config_file(path: str | Path) -> dict:
    """Parse a YAML/TOML/JSON model config through the bounded readers (xbench.schemas.inputs: size, depth
    and element caps, YAML aliases and duplicate keys refused before anything walks the value); relative
    paths become relative to the file's folder."""
    from xbench.schemas.inputs import load_config as load_bounded

    path = Path(path)
    data = load_bounded(path, limits=_model_config_limits())
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path}: a model config must be a mapping of keys, got {type(data).__name__}")
    for key in PATH_KEYS:
        val = data.get(key)
        if not isinstance(val, str):
            continue
        prefix = "local-dir:" if val.startswith("local-dir:") else ""
        rest = val[len(prefix):]
        if rest.startswith("./") or rest.startswith("../"):
            data[key] = prefix + str((path.parent / rest).resolve())
    data.setdefault("name", path.stem)
    return data


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict:
    out = dict(base)
    for k, v in over.items():
        if v is None:
            continue
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def load_config(name_or_config_path: str, **overrides: Any) -> dict:
    """The full config dict for a registered name, config file or ``module:attr`` (overrides win)."""
    spec = str(name_or_config_path)
    p = Path(spec).expanduser()
    if p.suffix in CONFIG_SUFFIXES:
        if not p.is_file():
            raise ModelConfigError(f"model config file {spec!r} not found")
        config = read_config_file(p)
        if "adapter" not in config:
            if str(config.get("model", "")) in MODELS:
                config["adapter"] = config["model"]
            else:
                raise ModelConfigError(f"{p}: needs `adapter:` (one of {', '.join(list_models())}, or module:attr)")
    elif p.suffix and p.is_file():
        raise ModelConfigError(f"--model {spec}: a model config must end in {', '.join(CONFIG_SUFFIXES)}")
    else:
        _load_entry_points()
        if spec not in MODELS and ":" not in spec:
            raise UnknownNameError(MODELS.unknown_message(spec))
        config = {"adapter": spec, "name": spec.rsplit(":", 1)[-1] if ":" in spec else spec}
    return _merge(config, overrides)


def resolve_factory(adapter: str) -> Factory:
    """The factory callable for a registry / entry point name or a ``module:attr`` string."""
    _load_entry_points()
    if adapter in MODELS:
        return MODELS.get(adapter)
    if ":" in adapter:
        module, _, attr = adapter.partition(":")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ModelConfigError(f"cannot import adapter {adapter!r}: {e}") from None
        return obj
    raise UnknownNameError(MODELS._unknown_message(adapter))


def config_hash(config: Mapping[str, Any]) -> str:
    """sha256 of the config as canonical JSON (sorted keys): identifies a model declaration."""
    blob = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def runs_on_torch(name_or_config_path: str, **overrides: Any) -> bool:
    """Whether extracting this model needs torch: its catalog entry's ``torch`` (False for the weight-free
    baselines, whose runs import no torch: extract/runner.py); True for a model the catalog does not list and for
    a config that does not load (the runner then reports the config's problem)."""
    from xbench.extract.models.catalog import needs_torch

    try:
        return needs_torch(str(load_config(name_or_config_path, **overrides).get("adapter")))
    except Exception:  # noqa: BLE001 - any doubt: the torch path, whose checks say what is wrong
        return True


def create_adapter(name_or_config_path: str, **overrides: Any):
    """Build a :class:`~xbench.extract.models.base.ModelAdapter` from a name, config file or
    ``module:attr``; ``overrides`` replace config keys (dicts are merged one level deep).

    The returned adapter carries ``.config`` (the resolved dict) and ``.config_hash``.
    """
    from xbench.extract.models.base import ModelAdapter

    from xbench.extract.models.checks import typed_config

    config = load_config(name_or_config_path, **overrides)
    typed_config(config, str(name_or_config_path))  # a key the adapter does not read: refused, with the close ones
    factory = resolve_factory(str(config["adapter"]))
    if isinstance(factory, type) and issubclass(factory, ModelAdapter):
        adapter = factory.from_config(config) if hasattr(factory, "from_config") else factory(config)
    elif callable(factory):
        adapter = factory(config)
    else:
        raise ModelConfigError(f"adapter {config['adapter']!r} is a {type(factory).__name__}, not a factory")
    if not isinstance(adapter, ModelAdapter):
        raise TypeError(f"adapter factory {config['adapter']!r} returned {type(adapter).__name__}; "
                        "it must return a xbench.extract.models.base.ModelAdapter (wrap your model in one)")
    adapter.config = config
    adapter.config_hash = config_hash(config)
    return adapter


__all__ = ["MODELS", "ENTRY_POINT_GROUP", "ModelConfigError", "WeightsNotFoundError", "config_hash",
           "create_adapter", "list_models", "load_config", "read_config_file", "resolve_factory", "runs_on_torch"]
