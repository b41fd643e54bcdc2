"""The torch-free checks of one model config: its keys and the values of the keys with a fixed form.

:func:`typed_config` holds a config to its adapter's typed config (its :mod:`~xbench.extract.models.catalog`
entry), refusing a key the adapter does not read with the close ones (``options:`` included);
:func:`parse_model_options` reads ``--model-option KEY=VALUE`` pairs through the bounded YAML reader;
``PATH_KEYS`` names the keys that may name local files. The model registry (:mod:`xbench.extract.models`) uses
this module, so it never imports the registry: the whole request (the model's name, ``--method``, the values,
the weights paths) is checked by :func:`xbench.extract.models.request.check_request`, which sits above both.

An adapter given as ``module:attr`` or by a plugin gets the value and path checks only (its keys are its own).
"""
from __future__ import annotations

import difflib
import re
from typing import Any, Mapping

from xbench.schemas.errors import InputError, InputLimitError, Problem
from xbench.extract.models.catalog import COMMON_KEYS, CROSSATTN_OPTIONS, PREPROCESS_KEYS, PROMPT_KEYS, ModelInfo, field_names
from xbench.extract.models.catalog import info as catalog_info

#: Choices mirrored from the torch-side modules (tests/extract/test_catalog.py checks they agree).
RESIZE_MODES = ("squash", "crop", "pad")  # extract/models/geometry.py
MAP_TEXT = ("positive", "contrast")       # extract/models/dual.py
PROMPT_STYLES = ("single", "pair")        # extract/models/prompts.py
PRECISIONS = ("fp32", "bf16", "fp16")     # extract/pipeline.py
DEVICE = re.compile(r"^(cpu|cuda|mps|xpu|hpu|mtia|meta)(:[0-9]{1,3})?$")
BOOLEAN_OPTIONS = ("trust_checkpoint", "hash_weights", "random_init", "ensembles")
#: config keys that may name local files (the one definition: the model loader, the dry run and `xbench run`'s
#: fingerprints read it)
PATH_KEYS = ("model", "weights", "text_encoder", "checkpoint", "embeddings_cache")
TRUST_HOW = ("write `trust_checkpoint: true` (a boolean, no quotes) under `options:` in the model config, or pass "
             "--model-option options.trust_checkpoint=true; only for a file you trust: it runs the code the file holds")


# -- --model-option KEY=VALUE ------------------------------------------------------------------------
#: A value on the command line is one scalar or a small list/mapping: tight bounds.
def _option_limits():
    from xbench.schemas.inputs import CONFIG, with_limits

    return with_limits(CONFIG, max_bytes=64 * 1024, max_depth=8, max_elements=4096)


#: YAML 1.1 words PyYAML reads as booleans; on the command line only ``true``/``false`` are (so
#: ``trust_checkpoint=yes`` stays the string "yes" and is refused, not taken as consent).
_LOOSE_BOOL = frozenset("y Y yes Yes YES n N no No NO True TRUE False FALSE on On ON off Off OFF".split())


def parse_option_value(text: str, where: str) -> Any:
    """One ``--model-option`` value: ``true``/``false``, a number, a list or mapping in YAML/JSON flow
    syntax, else the text itself. Bounded (64 KiB, depth 8); aliases and anything not YAML stay text."""
    from xbench.schemas.inputs import parse_yaml

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


def _unknown_keys(config: Mapping, info: ModelInfo, overrides: Mapping, label: str) -> list[Problem]:
    problems = []
    top = COMMON_KEYS | info.keys | info.options
    for key in config:
        if key not in top:
            elsewhere = "" if info.options or key not in CROSSATTN_OPTIONS else f" ({info.name} reads no options)"
            problems.append(Problem(_where(str(key), overrides, label),
                                    f"{info.name} reads no key {str(key)[:80]!r}{elsewhere}.{_suggest(str(key), top)} "
                                    f"Its keys: {', '.join(sorted(top - {'adapter'}))}"))
    for key, allowed in (("options", info.options), ("preprocess", PREPROCESS_KEYS),
                         ("prompts", PROMPT_KEYS)):
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
    """The adapter's typed config (:attr:`.catalog.ModelInfo.config`, a frozen dataclass) holding ``config``;
    :class:`ModelConfigError` listing every key the adapter does not read, with the close ones. None for an
    adapter outside the catalog (a plug-in's factory checks its own keys)."""
    from xbench.extract.models.errors import ModelConfigError

    info = catalog_info(str(config.get("adapter")))
    if info is None:
        return None
    if config.get("model") == config.get("adapter") and "model" not in field_names(info.config):
        config = {k: v for k, v in config.items() if k != "model"}  # ``model:`` naming the adapter (load_config)
    problems = _unknown_keys(config, info, {}, label)
    if problems:
        raise ModelConfigError(problems)
    names = field_names(info.config)
    return info.config(**{k: v for k, v in config.items() if k in names})


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


