"""The whole request of ``xbench-extract`` checked before torch is imported: the model's name and config file,
``--method``, ``--device``, ``--precision``, every value of a key with a fixed form, and the weights paths.

``xbench-extract`` runs :func:`check_request` before importing torch or building the model, so a typo costs a
second, not a model load, and every problem is listed at once (one line each, exit 2). It reads the model
registry (:mod:`xbench.extract.models`) and the checks of one config's keys and values
(:mod:`~xbench.extract.models.checks`, which the registry itself uses): this module sits above both, so
neither imports it.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Mapping

from xbench.schemas.errors import InputError, Problem
from xbench.extract.models import catalog
from xbench.extract.models.checks import (BOOLEAN_OPTIONS, DEVICE, MAP_TEXT, PATH_KEYS, PRECISIONS, PROMPT_STYLES, RESIZE_MODES, TRUST_HOW,
                     _is_int, _unknown_keys, _where)


def check_request(model: str, overrides: Mapping[str, Any], *, method: str | None = None,
                  device: str | None = None, precision: str | None = None) -> dict:
    """The model's config, after every torch-free check; :class:`InputError` listing every problem found.

    ``overrides`` come from ``--model-option``; ``method``, ``device``, ``precision`` from the CLI options
    of those names (they win over the config's keys of the same names)."""
    from xbench.extract.models import list_models, load_config

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
    from xbench.schemas.inputs import CONFIG, decode_text, read_bytes

    text = decode_text(read_bytes(path, max_bytes=CONFIG.max_bytes), str(path))  # bounded, as its first read
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
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
    from xbench.extract.saliency import method_names

    return method_names()


def _method_name(name: str, where: str, extra: tuple[str, ...] = ()) -> list[Problem]:
    known = _method_names()
    if name in known or (name and name in extra):
        return []
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return [Problem(where, f"unknown map method {name!r}.{hint} Methods: {', '.join(known)} "
                           "(xbench-extract --list-methods)")]


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
        from xbench.extract.options import AugmentSpecs

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
    from xbench.extract.models.errors import WeightsNotFoundError
    from xbench.extract.models.presets import PREFLIGHTS

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
