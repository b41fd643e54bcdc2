"""A decoder VLM's weights folder, read as data only.

A folder downloaded from a model hub may carry Python (``modeling_*.py`` for ``trust_remote_code``) and
pickled weights (``pytorch_model.bin``, ``*.pt``): both can run code when loaded. XBench never imports the
former and never unpickles the latter: a folder holding either is refused with one line per file, so that what
runs is always XBench's own implementation over safetensors tensors. Side files (config.json, the vision
config, tokenizer files) go through the bounded JSON reader (:mod:`xbench.extract.models.files`) before
transformers parses them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError
from xbench.extract.models.files import check_model_json, read_model_json

#: Suffixes of files that execute or unpickle when a library loads them.
REFUSED = (".py", ".pyc", ".pyo", ".so", ".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy")
SIDE_JSON = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
             "tokenizer.json", "added_tokens.json", "preprocessor_config.json", "processor_config.json",
             "model.safetensors.index.json")
MAX_LISTED = 20_000  # entries walked in a folder before giving up (a hostile folder of millions of files)


def check_folder(folder: str | Path, what: str, *, need_weights: bool = True) -> Path:
    """``folder`` as a Path, refused (:class:`ModelConfigError`, one line per file) when it holds Python or
    pickles anywhere below it; :class:`WeightsNotFoundError` when it lacks config.json or safetensors."""
    p = Path(folder).expanduser()
    if not p.is_dir():
        raise WeightsNotFoundError(f"{what} weights folder", str(p), "Set `model:` to the local folder (see the model card).")
    bad: list[str] = []
    for n, f in enumerate(p.rglob("*")):
        if n >= MAX_LISTED:
            raise ModelConfigError(f"{p}: more than {MAX_LISTED} entries; not a model folder")
        if f.suffix.lower() in REFUSED and len(bad) < 50:
            bad.append(f"{f}: refused: {what} runs only XBench's own code over safetensors weights; this file "
                       f"({f.suffix}) could run code when loaded (Python or a pickle). Remove it from the folder "
                       f"(convert pickled weights to safetensors on a machine you trust)")
    if bad:
        raise ModelConfigError(bad)
    if not (p / "config.json").is_file():
        raise WeightsNotFoundError(f"{what} config", str(p / "config.json"), "Copy the model's config.json into the folder.")
    if need_weights and not any((p / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json")):
        raise WeightsNotFoundError(f"{what} weights", str(p / "model.safetensors"),
                                   "The folder needs model.safetensors (or a sharded model.safetensors.index.json); "
                                   "or set weights: random for an untrained model.")
    for side in SIDE_JSON:
        check_model_json(p / side, f"{what} {side}")
    return p


def read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise WeightsNotFoundError(what, str(path), "Copy it into the weights folder (see the model card).")
    return read_model_json(path, what)


def _shards(folder: Path, what: str) -> list[Path]:
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    index = read_model_json(folder / "model.safetensors.index.json", f"{what} model.safetensors.index.json")
    names = index.get("weight_map")
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        raise ModelConfigError(f"{folder}/model.safetensors.index.json: weight_map must map names to shard files")
    shards = []
    for name in sorted(set(names.values())):
        shard = folder / name
        if Path(name).name != name or not name.endswith(".safetensors") or not shard.is_file():
            raise ModelConfigError(f"{folder}/model.safetensors.index.json: shard {name[:200]!r} is not a "
                                   "safetensors file in the folder")
        shards.append(shard)
    return shards


def load_safetensors(folder: Path, what: str) -> dict[str, Any]:
    """Every tensor of the folder's safetensors file(s); one line for an unreadable file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state: dict[str, Any] = {}
    for shard in _shards(folder, what):
        try:
            state.update(load_file(str(shard)))
        except (SafetensorError, OSError, ValueError) as exc:
            raise ModelConfigError(f"{shard}: not a readable safetensors file ({str(exc)[:160]})") from None
    return state


def tokenizer(folder: Path, what: str, config=None):
    """The folder's tokenizer, built by transformers from its data files (never remote code). ``config``: the
    model config transformers would otherwise read from config.json (a model type it does not know, MAIRA-2's)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False, local_files_only=True,
                                             **({"config": config} if config is not None else {}))
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a broken tokenizer folder
        raise WeightsNotFoundError(f"{what} tokenizer", str(folder / "tokenizer.json"),
                                   f"Copy the model's tokenizer files into the folder ({type(exc).__name__}).") from None
