"""Every check of a model request that needs no torch: names, config keys, option values, weights paths.

``xbench-extract`` runs :func:`check_request` before importing torch or building the model, so a typo
costs a second, not a model load, and every problem is listed at once (one line each, exit 2).
:func:`parse_model_options` reads ``--model-option KEY=VALUE`` pairs through the bounded YAML reader.

What is checked, for a registered model (its :mod:`~xbench.extract.models.catalog` entry):

- the model name (``did you mean``), the config file (bounded reader: size, depth, aliases, duplicates);
- each config key against the keys the model's adapter reads (``did you mean``), ``options:`` included;
- the values of the keys with a fixed form (booleans, choices, sizes, layer lists, device, precision);
  ``trust_checkpoint`` must be a real boolean: a string such as ``"false"`` is refused, never read as true;
- ``--method`` / ``method``: a registered map method, and one the model runs where that does not
  depend on the architecture given;
- weights: given when the model has no default, and every path named there exists.

An adapter given as ``module:attr`` or by a plugin gets the value and path checks only (its keys are its own).
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Mapping

from ...schemas.errors import InputError, InputLimitError, Problem
from . import catalog

#: Choices mirrored from the torch-side modules (tests/extract/test_catalog.py checks they agree).
RESIZE_MODES = ("squash", "crop", "pad")  # extract/models/geometry.py
MAP_TEXT = ("positive", "contrast")       # extract/models/dual.py
PROMPT_STYLES = ("single", "pair")        # extract/models/prompts.py
PRECISIONS = ("fp32", "bf16", "fp16")     # extract/pipeline.py
DEVICE = re.compile(r"^(cpu|cuda|mps|xpu|hpu|mtia|meta)(:[0-9]{1,3})?$")
BOOLEAN_OPTIONS = ("trust_checkpoint", "hash_weights", "random_init", "ensembles")
PATH_KEYS = ("model", "weights", "text_encoder", "checkpoint", "embeddings_cache")
TRUST_HOW = ("write `trust_checkpoint: true` (a boolean, no quotes) under `options:` in the model config, or pass "
             "--model-option options.trust_checkpoint=true; only for a file you trust: it runs the code the file holds")


# -- --model-option KEY=VALUE ------------------------------------------------------------------------
#: A value on the command line is one scalar or a small list/mapping: tight bounds.
def _option_limits():
    from ...schemas.inputs import CONFIG, with_limits

    return with_limits(CONFIG, max_bytes=64 * 1024, max_depth=8, max_elements=4096)


#: YAML 1.1 words PyYAML reads as booleans; on the command line only ``true``/``false`` are (so
#: ``trust_checkpoint=yes`` stays the string "yes" and is refused, not taken as consent).
_LOOSE_BOOL = frozenset("y Y yes Yes YES n N no No NO True TRUE False FALSE on On ON off Off OFF".split())


def parse_option_value(text: str, where: str) -> Any:
    """One ``--model-option`` value: ``true``/``false``, a number, a list or mapping in YAML/JSON flow
    syntax, else the text itself. Bounded (64 KiB, depth 8); aliases and anything not YAML stay text."""
    from ...schemas.inputs import parse_yaml

    if text in ("true", "false"):
        return text == "true"
    if text.strip() in _LOOSE_BOOL:
        return text
    try:
        value = parse_yaml(text, where, _option_limits())
    except InputLimitError:
        raise
    except InputError:  # not YAML (or an alias): the text as written, inert
        return text
    return text if value is None else value


def parse_model_options(items) -> dict:
    """``KEY=VALUE`` pairs (dots for nesting: ``preprocess.resize=crop``) into a nested dict; every
    malformed pair is a problem line."""
    out: dict = {}
    problems: list[Problem] = []
    for item in items:
        key, sep, text = item.partition("=")
        where = f"--model-option {key}" if sep else "--model-option"
        parts = key.split(".")
        if not sep or not key or any(not p.strip() for p in parts):
            problems.append(Problem("--model-option", f"expected KEY=VALUE (dots for nesting), got {item[:200]!r}"))
            continue
        try:
            value = parse_option_value(text, where)
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        node = out
        for i, p in enumerate(parts[:-1]):
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                problems.append(Problem(where, f"{'.'.join(parts[:i + 1])} is already set to a value, "
                                               "so it cannot also hold keys"))
                break
            node = child
        else:
            if isinstance(node.get(parts[-1]), dict) and not isinstance(value, dict):
                problems.append(Problem(where, f"{key} already holds keys set by another --model-option"))
            else:
                node[parts[-1]] = value
    if problems:
        raise InputError(problems)
    return out


# -- the request -------------------------------------------------------------------------------------
def check_request(model: str, overrides: Mapping[str, Any], *, method: str | None = None,
                  device: str | None = None, precision: str | None = None) -> dict:
    """The model's config, after every torch-free check; :class:`InputError` listing every problem found.

    ``overrides`` come from ``--model-option``; ``method``, ``device``, ``precision`` from the CLI options
    of those names (they win over the config's keys of the same names)."""
    from . import list_models, load_config

    problems: list[Problem] = []
    if method is not None:
        problems += _method_name(method, "--method")
    if device is not None and not DEVICE.match(str(device)):
        problems.append(Problem("--device", f"{device!r} is not a device; give cpu, cuda, cuda:N (or mps)"))
    config = load_config(model, **dict(overrides))  # raises for an unknown name or an unreadable file
    label = str(model)
    problems += _loose_yaml_trust(model)
    adapter = config.get("adapter")
    if not isinstance(adapter, str) or (adapter not in list_models() and ":" not in adapter):
        close = difflib.get_close_matches(str(adapter), list_models(), n=3) if isinstance(adapter, str) else []
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        problems.append(Problem(_where("adapter", overrides, label),
                                f"unknown adapter {str(adapter)[:80]!r}.{hint} Registered: {', '.join(list_models())}, "
                                "or module:attr of your own factory"))
        raise InputError(problems)
    info = catalog.info(str(config.get("adapter")))
    if info is not None:
        problems += _unknown_keys(config, info, overrides, label)
    problems += _values(config, overrides, label, info, cli_device=device is not None,
                        cli_precision=precision is not None)
    if method is None and info is not None and config.get("method") is not None:
        problems += _method_name(str(config["method"]), _where("method", overrides, label), extra=(info.own_method,))
    chosen = method if method is not None else config.get("method")
    if info is not None and chosen and info.methods and info.methods_fixed and chosen not in info.methods \
            and chosen in _method_names():
        problems.append(Problem("--method" if method is not None else _where("method", overrides, label),
                                f"{chosen!r} is not available for {info.name}; it runs {', '.join(info.methods)}"))
    problems += _weights(config, overrides, label, info)
    if problems:
        raise InputError(problems)
    return config


#: YAML 1.1 spellings PyYAML reads as booleans that YAML 1.2 reads as text.
_YAML11_ONLY = frozenset("y Y yes Yes YES n N no No NO on On ON off Off OFF".split())


def _loose_yaml_trust(model: str) -> list[Problem]:
    """``trust_checkpoint: yes`` (or on, no, off) in a YAML config: the loader would read a boolean, YAML 1.2
    and most people would not; consent to run code must be written ``true``. (The file was already read
    through the bounded reader, so this second pass over its events is bounded too.)"""
    path = Path(model).expanduser()
    if path.suffix.lower() not in (".yaml", ".yml") or not path.is_file():
        return []
    import yaml

    problems, previous = [], None
    for event in yaml.parse(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader):
        if isinstance(event, yaml.ScalarEvent):
            if previous == "trust_checkpoint" and event.style is None and event.value in _YAML11_ONLY:
                problems.append(Problem(f"{model}: trust_checkpoint",
                                        f"must be written true or false, not {event.value!r} (line "
                                        f"{event.start_mark.line + 1}), which YAML 1.2 reads as text; {TRUST_HOW}"))
            previous = event.value
        else:
            previous = None
    return problems


def _method_names() -> list[str]:
    from ..saliency import method_names

    return method_names()


def _method_name(name: str, where: str, extra: tuple[str, ...] = ()) -> list[Problem]:
    known = _method_names()
    if name in known or (name and name in extra):
        return []
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return [Problem(where, f"unknown map method {name!r}.{hint} Methods: {', '.join(known)} "
                           "(xbench-extract --list-methods)")]


def _where(key: str, overrides: Mapping[str, Any], label: str) -> str:
    """Where a key came from: the ``--model-option`` that set it, else the config (file or name)."""
    node: Any = overrides
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return f"{label}: {key}"
        node = node[part]
    return f"--model-option {key}"


def _suggest(key: str, allowed) -> str:
    close = difflib.get_close_matches(key, sorted(allowed), n=2, cutoff=0.6)
    return f" Did you mean: {', '.join(close)}?" if close else ""


def _unknown_keys(config: Mapping, info: catalog.ModelInfo, overrides: Mapping, label: str) -> list[Problem]:
    problems = []
    top = catalog.COMMON_KEYS | info.keys | info.options
    for key in config:
        if key not in top:
            elsewhere = "" if info.options or key not in catalog.CROSSATTN_OPTIONS else f" ({info.name} reads no options)"
            problems.append(Problem(_where(str(key), overrides, label),
                                    f"{info.name} reads no key {str(key)[:80]!r}{elsewhere}.{_suggest(str(key), top)} "
                                    f"Its keys: {', '.join(sorted(top - {'adapter'}))}"))
    for key, allowed in (("options", info.options), ("preprocess", catalog.PREPROCESS_KEYS),
                         ("prompts", catalog.PROMPT_KEYS)):
        sub = config.get(key)
        if key not in top or not isinstance(sub, Mapping):
            continue
        for k in sub:
            if k not in allowed:
                problems.append(Problem(_where(f"{key}.{k}", overrides, label),
                                        f"{info.name} reads no {key}.{str(k)[:80]}.{_suggest(str(k), allowed)} "
                                        f"Its {key}: {', '.join(sorted(allowed)) or 'none'}"))
    return problems


def typed_config(config: Mapping[str, Any], label: str = "model config"):
    """The adapter's typed config (:attr:`catalog.ModelInfo.config`, a frozen dataclass) holding ``config``;
    :class:`ModelConfigError` listing every key the adapter does not read, with the close ones. None for an
    adapter outside the catalog (a plug-in's factory checks its own keys)."""
    from .errors import ModelConfigError

    info = catalog.info(str(config.get("adapter")))
    if info is None:
        return None
    if config.get("model") == config.get("adapter") and "model" not in catalog.field_names(info.config):
        config = {k: v for k, v in config.items() if k != "model"}  # ``model:`` naming the adapter (load_config)
    problems = _unknown_keys(config, info, {}, label)
    if problems:
        raise ModelConfigError(problems)
    names = catalog.field_names(info.config)
    return info.config(**{k: v for k, v in config.items() if k in names})


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _values(config: Mapping, overrides: Mapping, label: str, info, *, cli_device: bool,
            cli_precision: bool) -> list[Problem]:
    """Values of the keys whose form is fixed, wherever they sit (top level or ``options:``)."""
    problems = []

    def bad(key: str, message: str) -> None:
        problems.append(Problem(_where(key, overrides, label), message))

    opts = config.get("options")
    if opts is not None and not isinstance(opts, Mapping):
        bad("options", f"must be a mapping of keys, got {type(opts).__name__}")
        opts = None
    places = [("", config)] + ([("options.", opts)] if opts else [])
    for prefix, node in places:
        for key in BOOLEAN_OPTIONS:
            if key in node and node[key] is not None and not isinstance(node[key], bool):
                v = node[key]
                what = f"the string {v[:40]!r}" if isinstance(v, str) else f"{type(v).__name__} {str(v)[:40]}"
                extra = f"; {TRUST_HOW}" if key == "trust_checkpoint" else ""
                bad(prefix + key, f"must be the boolean true or false, not {what}{extra}")
        if "equalize" in node and node["equalize"] not in (True, False, "auto"):
            bad(prefix + "equalize", f"must be true, false or \"auto\", got {node['equalize']!r}"[:200])
        if "map_size" in node and not _map_size(node["map_size"]):
            bad(prefix + "map_size", f"must be a positive integer or [height, width], got {node['map_size']!r}"[:200])
    if "map_text" in config and config["map_text"] not in MAP_TEXT:
        bad("map_text", f"must be one of {', '.join(MAP_TEXT)}, got {config['map_text']!r}"[:200])
    for key in ("preprocess", "prompts"):
        if key in config and config[key] is not None and not isinstance(config[key], Mapping):
            bad(key, f"must be a mapping of keys, got {type(config[key]).__name__}")
    pre = config.get("preprocess") if isinstance(config.get("preprocess"), Mapping) else {}
    if "resize" in pre and pre["resize"] not in RESIZE_MODES:
        bad("preprocess.resize", f"must be one of {', '.join(RESIZE_MODES)}, got {pre['resize']!r}"[:200])
    prm = config.get("prompts") if isinstance(config.get("prompts"), Mapping) else {}
    if "style" in prm and prm["style"] not in PROMPT_STYLES:
        bad("prompts.style", f"must be one of {', '.join(PROMPT_STYLES)}, got {prm['style']!r}"[:200])
    if "layers" in config and not (_is_int(config["layers"]) or (isinstance(config["layers"], list) and config["layers"]
                                                                 and all(_is_int(v) for v in config["layers"]))):
        bad("layers", f"must be a list of decoder layer indices such as [-4, -3, -2, -1], got {config['layers']!r}"[:200])
    if "seed" in config and not _is_int(config["seed"]):
        bad("seed", f"must be an integer, got {config['seed']!r}"[:200])
    if "name" in config and not isinstance(config["name"], (str, int)):
        bad("name", f"must be text, got {type(config['name']).__name__}")
    if not cli_device and config.get("device") is not None and not DEVICE.match(str(config["device"])):
        bad("device", f"{config['device']!r} is not a device; give cpu, cuda, cuda:N (or mps)"[:200])
    if not cli_precision and config.get("precision") is not None and config["precision"] not in PRECISIONS:
        bad("precision", f"must be one of {', '.join(PRECISIONS)}, got {config['precision']!r}"[:200])
    if config.get("augment") is not None:
        from ..options import AugmentSpecs

        problem = AugmentSpecs().problem(config["augment"])
        if problem:
            bad("augment", problem[:400])
    for key in PATH_KEYS:
        if key in config and config[key] is not None and not isinstance(config[key], str):
            bad(key, f"must be text (a path or name), got {type(config[key]).__name__}")
    return problems


def _map_size(v: Any) -> bool:
    if _is_int(v):
        return v >= 1
    return isinstance(v, list) and len(v) == 2 and all(_is_int(x) and x >= 1 for x in v)


def _weights(config: Mapping, overrides: Mapping, label: str, info) -> list[Problem]:
    """Weights a model without defaults must be given; every path named must exist; the model's own
    torch-free preflight (offline caches) where it has one."""
    from .errors import WeightsNotFoundError
    from .presets import PREFLIGHTS

    problems = []
    opts = config.get("options") if isinstance(config.get("options"), Mapping) else {}
    random_init = config.get("weights") == "random" or opts.get("random_init") is True or config.get("random_init") is True
    for key in PATH_KEYS:
        value, at = config.get(key), key
        if key in opts and not value:
            value, at = opts.get(key), f"options.{key}"
        if not isinstance(value, str) or value in ("random", ""):
            continue
        local = value[len("local-dir:"):] if value.startswith("local-dir:") else value
        looks_like_path = (value.startswith("local-dir:") or local.startswith(("/", "~", "./", "../"))
                           or Path(local).suffix in (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz"))
        if key == "embeddings_cache" or (key == "text_encoder" and info is not None
                                         and info.kind in ("cross-attention", "word-region attention")):
            looks_like_path = True  # these read local files only (no hub ids)
        if looks_like_path and not Path(local).expanduser().exists():
            problems.append(Problem(_where(at, overrides, label),
                                    f"{local}: no such file or folder; check the path or download the weights "
                                    "to it (extraction never downloads)"))
    check = PREFLIGHTS.get(str(config.get("adapter")))
    if check is not None and not problems:  # the model's own check says where its weights come from
        try:
            check(config)
        except WeightsNotFoundError as exc:
            problems.append(Problem("", str(exc)))
    elif check is None and info is not None and info.weights_required and not config.get("weights") \
            and not random_init:
        problems.append(Problem(_where("weights", overrides, label),
                                f"{info.name} needs weights: {info.weights}; pass --model-option weights=PATH "
                                "or set weights: in a model config"))
    return problems
