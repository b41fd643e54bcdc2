"""Fingerprints: content digests of files and folders (cached by size and mtime), canonical spec texts, and a
model declaration as the extraction sees it (its resolved config and the digests of the files it names)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from xbench.schemas.errors import InputError
from xbench.schemas.options import CONFIG_SUFFIXES
from xbench.schemas.store import file_sha256
from xbench.suite.parse import SuiteError

# ----------------------------------------------------------------------------------------- digests
class DigestCache:
    """sha256 of files, remembered by (path, size, mtime_ns): unchanged files are not read again."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.entries: dict[str, list] = {}
        if path is not None and path.is_file():
            from xbench.schemas.errors import InputError
            from xbench.schemas.inputs import load_json

            try:  # bounded: the cache lies in the user's run folder
                self.entries = load_json(path)
            except (ValueError, InputError):
                self.entries = {}  # a damaged cache only costs re-reading

    def file(self, path: Path) -> str:
        st = path.stat()
        key = str(path.resolve())
        hit = self.entries.get(key)
        if hit and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
            return hit[2]
        digest = file_sha256(path)
        self.entries[key] = [st.st_size, st.st_mtime_ns, digest]
        return digest

    def save(self) -> None:
        if self.path is not None:
            _atomic_write(self.path, json.dumps(self.entries))


def _walk(root: Path):
    """Files under ``root`` in a fixed order (sorted relative paths), following no symlinked dirs."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for n in filenames:
            files.append(Path(dirpath) / n)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def tree_digest(path: str | os.PathLike, cache: DigestCache | None = None) -> str | None:
    """Content digest of a file or folder: sha256 over (relative path, sha256 of bytes) of every file.

    None when ``path`` does not exist. Empty folders do not count (zarr never needs them).
    """
    p = Path(path)
    if not p.exists():
        return None
    cache = cache or DigestCache()
    if p.is_file():
        return cache.file(p)
    h = hashlib.sha256()
    for f in _walk(p):
        h.update(f"{f.relative_to(p).as_posix()}\0{cache.file(f)}\n".encode())
    return h.hexdigest()


def path_digests(options: Mapping, keys, cache: DigestCache | None = None) -> dict[str, str | None]:
    """What each of ``keys`` that ``options`` sets names, by content (:func:`tree_digest`: a file's bytes, a
    folder's files; None where nothing is there), so a file edited in place under the same name is a new
    input; a URL (``://``) by its text, as its content is not read here."""
    return {k: (str(options[k]) if "://" in str(options[k]) else tree_digest(options[k], cache))
            for k in keys if options.get(k) is not None}


def listing_digest(root: str | os.PathLike) -> str | None:
    """Digest of a raw dataset folder from its file list with sizes and mtimes (no bytes read)."""
    p = Path(root)
    if not p.is_dir():
        return None
    h = hashlib.sha256()
    for f in _walk(p):
        st = f.stat()
        h.update(f"{f.relative_to(p).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str, separators=(",", ":")).encode()).hexdigest()


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise



def canonical_specs(kind: str, value):
    """A suite's ``augment`` (kind "augment") or ``perturb`` (kind "perturb") as the list of canonical spec texts,
    so two spellings of one spec (``rotate``, ``rotate:degrees=10``) are one fingerprint and one command line;
    the value itself when it does not parse (the suite's checks refuse it before any step runs)."""
    try:
        if kind == "augment":
            from xbench.schemas.augment import canonical, parse_specs

            return canonical(parse_specs(value))
        from xbench.schemas.perturbations import parse_templates

        return [t.text for t in parse_templates([value] if isinstance(value, str) else list(value))]
    except Exception:  # noqa: BLE001 - reported by the suite's own checks, with the key's path
        return value



def model_config(model: str, overrides: Mapping) -> dict:
    """The resolved model config as the extraction will see it. A config file is first read through the
    bounded reader (:func:`xbench.schemas.inputs.load_config`: size, depth, aliases, duplicate keys), so a
    hostile file is refused in one line before anything else parses it. Raises InputError subclasses."""
    from xbench.extract.models import load_config
    from xbench.schemas import inputs

    if Path(model).suffix in CONFIG_SUFFIXES and Path(model).is_file():
        data = inputs.load_config(model, where=str(model), limits=inputs.CONFIG)
        if not isinstance(data, Mapping):
            raise SuiteError(f"{model}: a model config must be a mapping of keys, got {type(data).__name__}")
    return load_config(model, **copy.deepcopy(dict(overrides)))


def model_digest(model: str, overrides: Mapping, cache: DigestCache) -> dict:
    """The model declaration as the extraction sees it: the resolved config (a config file's contents, not
    its name) and the content digest of every local file or folder it names (weights, text encoders)."""
    try:
        config = model_config(model, overrides)
    except InputError as e:  # reported by the dry run's checks, or by the extraction itself
        return {"error": str(e)}
    files = {key: tree_digest(path, cache) for key, path in config_paths(config).items() if path.exists()}
    if isinstance(config, Mapping) and config.get("augment") is not None:  # one spec, one fingerprint (plan_steps)
        config = {**config, "augment": canonical_specs("augment", config["augment"])}
    return {"config": config, "files": files}


def config_paths(config: Mapping) -> dict[str, Path]:
    """The local files and folders a model config names (values of the config keys that may name local files,
    ``xbench.extract.models.checks.PATH_KEYS``, that look like paths; a registered architecture, a pretrained
    tag or an ``hf-hub:`` id is not one). A dry run checks that they exist."""
    from xbench.extract.models.checks import PATH_KEYS

    out = {}
    for key in PATH_KEYS:
        value = config.get(key)
        if isinstance(value, str) and not value.startswith("hf-hub:") and ("/" in value or "\\" in value):
            out[key] = Path(os.path.expanduser(os.path.expandvars(value.removeprefix("local-dir:"))))
    return out
