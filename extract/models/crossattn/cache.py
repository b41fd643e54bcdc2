"""Entity (MedKLIP) and entity + aspect (MAVL) query embeddings, computed once and cached.

MedKLIP and MAVL build their queries in ``__init__`` from a text encoder (Bio_ClinicalBERT,
``last_hidden_state[:, 0]`` with the attention mask, MedKLIP
``Sample_zero-shot_Classification_CXR14/models/model_MedKLIP.py:33-36``, MAVL
``Zero-shot_grounding/models/model_MAVL.py:79-90``); the embeddings are not part of the
checkpoints. This module computes them once, exactly as those scripts do, from the user's local
text-encoder folder and the authors' own description files, and stores them in a small ``.npz``
(no pickle) that the adapters read.

How the official scripts take their texts (each reproduced here):

* tokenisation: the authors' vendored BERT tokenizer, ``[CLS]`` + word pieces with no
  ``[SEP]``, ``padding='max_length', truncation=True, max_length=64`` (MedKLIP
  ``Sample_zero-shot_Classification_CXR14/test.py:62-64``, MAVL ``Zero-shot_grounding/test.py:31-33``);
  see :mod:`.bert_tokenize`.
* descriptions, MedKLIP: the values of ``observation explanation.json`` in file order, keys
  ignored (``Sample_zero-shot_Classification_CXR14/test.py:87-88``,
  ``Sample_Zero-Shot_Grounding_RSNA/test.py:72-73``) -- which is why that file's ``"eumonia"``
  key still gives the pneumonia query (position 20).
* descriptions, MAVL: looked up by entity name in ``original_class`` order
  (``Zero-shot_grounding/test.py:117-118``, ``Zero-shot_classification/test.py:277-278``);
  further entries (``covid19``) are ignored unless asked for.
* aspects, MAVL: the lists of ``gpt4_mimic.json`` looked up by entity name in the same order and
  concatenated (``Zero-shot_grounding/test.py:134-138``); the model then reshapes them to
  (entities, aspects) and puts each description before its aspects (``model_MAVL.py:85-90``).

Cache layout (``numpy.savez``):

* ``entities``     (E,) str
* ``disease_book`` (E, D) float32 -- CLS embedding of each entity description
* ``aspect_book``  (E, A, D) float32 -- optional, CLS embedding of each aspect sentence (MAVL)
* ``aspects``      (A,) str -- optional, aspect names ("border", ...)
* ``meta``         () str -- JSON: format ``version``, the tokenisation ``tokenizer`` recipe,
  pooling, how descriptions were read, file hashes, text encoder
"""
from __future__ import annotations

import json
import os
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from xbench.schemas.inputs import load_npz
from xbench.extract.models.errors import ModelConfigError
from xbench.extract.models.files import read_model_json
from xbench.extract.models.crossattn import bert_tokenize
from xbench.extract.models.crossattn.bert_tokenize import ClsOnlyBertTokenizer
from xbench.extract.models.crossattn.entities import ENTITIES

# 2: the authors' tokenisation ([CLS] without [SEP]) and their way of reading the description
# files. Version-1 caches came from a standard Hugging Face tokenizer and are refused.
CACHE_VERSION = 2
POOLING = "last_hidden_state[:, 0] (CLS), attention mask passed"
READ_MODES = ("position", "name")
CACHE_MAX_BYTES = 256 * 2**20  # 75 entities x 8 aspects x 768 floats is 2 MiB; room for larger text encoders


@dataclass(frozen=True)
class QueryCache:
    """In-memory view of a cache file; arrays are float32 numpy."""

    entities: tuple[str, ...]
    disease_book: np.ndarray
    aspect_book: np.ndarray | None = None
    aspects: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)


def _read_json_object(path: Path, what: str) -> dict:
    return read_model_json(path, what, expected="a JSON object keyed by entity name")


def _is_text(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def description_texts(descriptions: Mapping[str, object], entities: Sequence[str], *,
                      by: str = "position") -> tuple[list[str], dict[str, str], list[str]]:
    """One description per entity, read ``by`` position (MedKLIP) or by ``name`` (MAVL).

    Returns (texts, {entity: file key} where the key read for an entity is not its name, problems).
    By position the file must hold exactly one entry per entity, in entity order; keys are not
    looked at, as upstream does not look at them.
    """
    if by not in READ_MODES:
        raise ModelConfigError(f"descriptions: read mode must be one of {READ_MODES}, got {by!r}")
    problems, texts, renamed = [], [], {}
    if by == "position":
        items = list(descriptions.items())
        if len(items) != len(entities):
            problems.append(
                f"descriptions: the file has {len(items)} entries; read by position (as MedKLIP's test.py does) it "
                f"needs exactly {len(entities)}, one per entity in the order {', '.join(entities[:3])}, ... "
                f"(for a file keyed by entity name with other entries use --descriptions-by name)")
            return [], {}, problems
        for i, (e, (key, text)) in enumerate(zip(entities, items)):
            if not _is_text(text):
                problems.append(f"descriptions: entry {i} (key {key!r}, entity {e!r}) has no description text")
            if key != e:
                renamed[e] = key
            texts.append(text if isinstance(text, str) else "")
        return texts, renamed, problems
    for e in entities:
        text = descriptions.get(e)
        if not _is_text(text):
            problems.append(f"descriptions: entity {e!r} has no description text"
                            + ("" if e in descriptions else " (no such key; --descriptions-by position reads by order)"))
        texts.append(text if isinstance(text, str) else "")
    return texts, renamed, problems


def aspect_texts(aspects: Mapping[str, object], entities: Sequence[str]) -> tuple[list[list[str]], list[str]]:
    """Each entity's aspect sentences, looked up by name (MAVL's test.py); all lists must have the
    same length, since the model reshapes the flat list to (entities, aspects)."""
    problems, out = [], []
    for e in entities:
        items = aspects.get(e)
        if not isinstance(items, list) or not items or not all(isinstance(s, str) for s in items):
            problems.append(f"aspects: entity {e!r} needs a non-empty list of aspect sentences")
            items = []
        out.append(items)
    counts = {len(a) for a in out if a}
    if len(counts) > 1:
        problems.append(f"aspects: every entity needs the same number of aspect sentences, found {sorted(counts)}")
    return out, problems


def aspect_names(sentences: Sequence[str]) -> tuple[str, ...]:
    """'border: clear ...' -> 'border' (the text before the first colon)."""
    return tuple(s.split(":", 1)[0].strip() if ":" in s else f"aspect{i}" for i, s in enumerate(sentences))


def embed_cls(
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    model,
    *,
    batch_size: int = 32,
    device: str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """CLS token of the last hidden state for each row of token ids, with its attention mask
    (no token-type ids: upstream passes none, so BERT uses zeros)."""
    import torch

    model = model.to(device).eval()
    chunks = []
    with torch.no_grad():
        for start in range(0, len(input_ids), batch_size):
            ids = torch.from_numpy(input_ids[start:start + batch_size]).to(device)
            mask = torch.from_numpy(attention_mask[start:start + batch_size]).to(device)
            out = model(input_ids=ids, attention_mask=mask)
            chunks.append(out.last_hidden_state[:, 0, :].float().cpu().numpy())
            if progress:
                progress(len(ids))
    return np.concatenate(chunks, axis=0).astype(np.float32)


def build_query_cache(
    text_encoder: str | os.PathLike,
    descriptions_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    aspects_path: str | os.PathLike | None = None,
    entities: Sequence[str] = ENTITIES,
    extra_entities: Sequence[str] = (),
    descriptions_by: str | None = None,
    max_length: int = 64,
    lower_case: bool | None = None,
    device: str = "cpu",
    batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
) -> QueryCache:
    """Compute and atomically write a query cache. Raises ``ValueError`` listing every problem
    with the input files (one line each) before any model is loaded.

    ``descriptions_by``: ``"position"`` (MedKLIP's scripts) or ``"name"`` (MAVL's); by default
    by position without aspects and by name with them. ``lower_case=None`` follows the
    text-encoder folder (``tokenizer_config.json``; lower-casing when it does not say).
    """
    from xbench.extract.models.crossattn.common import file_sha256, load_pretrained_text_model

    entities = tuple(entities) + tuple(e for e in extra_entities if e not in entities)
    by = descriptions_by or ("name" if aspects_path is not None else "position")
    desc_path = Path(descriptions_path).expanduser()
    desc, renamed, problems = description_texts(_read_json_object(desc_path, "descriptions"), entities, by=by)
    asp = None
    if aspects_path is not None:
        asp, more = aspect_texts(_read_json_object(Path(aspects_path).expanduser(), "aspects"), entities)
        problems += more
    if problems:
        raise ModelConfigError(problems)

    enc = Path(text_encoder).expanduser()
    tokenizer = ClsOnlyBertTokenizer.from_folder(enc, lower_case=lower_case)
    model = load_pretrained_text_model(enc)
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not 1 <= max_length <= (limit or max_length):
        raise ModelConfigError(f"max_length must be between 1 and the text encoder's {limit} positions, got {max_length}")

    def embed(texts: Sequence[str]) -> np.ndarray:
        coded = tokenizer.encode(texts, max_length)
        return embed_cls(coded.input_ids, coded.attention_mask, model, batch_size=batch_size, device=device,
                         progress=progress)

    disease_book = embed(desc)
    aspect_book, names = None, ()
    if asp is not None:
        aspect_book = embed([s for items in asp for s in items]).reshape(len(entities), len(asp[0]), -1)
        names = aspect_names(asp[0])

    meta = {
        "version": CACHE_VERSION,
        "tokenizer": tokenizer.recipe(max_length),
        "pooling": POOLING,
        "text_encoder": str(enc),
        "text_encoder_config_sha256": file_sha256(enc / "config.json"),
        "vocab_sha256": file_sha256(enc / "vocab.txt"),
        "descriptions": str(desc_path),
        "descriptions_sha256": file_sha256(desc_path),
        "descriptions_by": by,
        "description_keys": renamed,
        "aspects": str(Path(aspects_path).expanduser()) if aspects_path else None,
        "aspects_sha256": file_sha256(Path(aspects_path).expanduser()) if aspects_path else None,
    }
    cache = QueryCache(entities, disease_book, aspect_book, names, meta)
    write_query_cache(cache, out_path)
    return cache


def write_query_cache(cache: QueryCache, out_path: str | os.PathLike) -> Path:
    """Write atomically (temporary file in the same folder, then rename). The meta's ``version``
    is always this writer's format."""
    out = Path(out_path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = {
        "entities": np.asarray(cache.entities, dtype=np.str_),
        "disease_book": np.asarray(cache.disease_book, dtype=np.float32),
        "meta": np.asarray(json.dumps({**cache.meta, "version": CACHE_VERSION}, sort_keys=True)),
    }
    if cache.aspect_book is not None:
        arrays["aspect_book"] = np.asarray(cache.aspect_book, dtype=np.float32)
        arrays["aspects"] = np.asarray(cache.aspects, dtype=np.str_)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def rebuild_command(path: Path, meta: Mapping, entities: Sequence[str]) -> str:
    """The ``xbench build-embeddings`` line that rebuilds the cache at ``path`` from the files
    its meta names (placeholders where an old cache did not record them)."""
    def arg(value, placeholder):
        return shlex.quote(str(value)) if value else placeholder

    parts = ["xbench build-embeddings",
             "--text-encoder", arg(meta.get("text_encoder"), "<Bio_ClinicalBERT folder>"),
             "--descriptions", arg(meta.get("descriptions"), "'<observation explanation.json>'")]
    if meta.get("aspects"):
        parts += ["--aspects", arg(meta["aspects"], "")]
    parts += [f"--extra-entity {shlex.quote(e)}" for e in entities if e not in ENTITIES]
    recipe = meta.get("tokenizer") if isinstance(meta.get("tokenizer"), dict) else {}
    if meta.get("lower_case") is False or recipe.get("lower_case") is False:
        parts.append("--cased")
    max_length = recipe.get("max_length", meta.get("max_length"))
    if max_length not in (None, 64):
        parts.append(f"--max-length {int(max_length)}")
    parts += ["--out", shlex.quote(str(path))]
    return " ".join(parts)


def _version_problem(p: Path, meta: Mapping, entities: Sequence[str]) -> str | None:
    """One line when the cache was written in another format, else None."""
    version = meta.get("version")
    recipe = meta.get("tokenizer")
    if version == CACHE_VERSION:
        # Caches written without a recipe (hand-made, tests) are taken as they are.
        if not isinstance(recipe, dict) or (recipe.get("name"), recipe.get("version")) == (bert_tokenize.NAME,
                                                                                           bert_tokenize.VERSION):
            return None
        why = (f"was tokenised by {recipe.get('name')} v{recipe.get('version')}, not "
               f"{bert_tokenize.NAME} v{bert_tokenize.VERSION}")
    elif isinstance(version, int) and version > CACHE_VERSION:
        why = f"was written by a newer XBench (cache format {version}; this one reads {CACHE_VERSION})"
    elif version == 1:
        why = (f"is cache format 1, built with a standard tokenizer that adds [SEP], not the authors' "
               f"[CLS]-only tokenisation (format {CACHE_VERSION})")
    else:
        why = f"records no cache format this XBench knows (version {version!r}; it reads {CACHE_VERSION})"
    return f"{p}: {why}; rebuild it: {rebuild_command(p, meta, entities)}"


def read_query_cache(path: str | os.PathLike, *, need_aspects: bool = False) -> QueryCache:
    """Read a cache written by ``write_query_cache``; refuses other cache formats (one line with
    the command that rebuilds it), checks shapes and, with ``need_aspects``, that the MAVL aspect
    embeddings are present."""
    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import CONFIG, parse_json

    p = Path(path).expanduser()
    if not p.is_file():
        raise ModelConfigError(
            f"query cache not found: {p}; build it with `xbench build-embeddings` (see docs/how-to/extract.md, 'Cross-attention models')"
        )
    not_cache = f"{p}: not a query cache written by `xbench build-embeddings`"
    try:  # bounded: members checked before they are inflated, no pickles, regular file only
        arrays = load_npz(p, max_bytes=CACHE_MAX_BYTES, max_members=16)
        meta = parse_json(str(arrays["meta"]), f"{p}: meta", CONFIG) if "meta" in arrays else {}
    except InputError as exc:
        raise ModelConfigError([f"{not_cache} ({pr})" for pr in exc.problems]) from None
    missing = [k for k in ("entities", "disease_book") if k not in arrays]
    if missing:
        raise ModelConfigError(f"{not_cache} (no array {', '.join(missing)})")
    if arrays["entities"].dtype.kind not in "US" or any(
            arrays[k].dtype.kind not in "fiu" for k in ("disease_book", "aspect_book") if k in arrays):
        raise ModelConfigError(f"{not_cache} (entities must be text and the embeddings numbers)")
    entities = tuple(str(e) for e in arrays["entities"].reshape(-1))
    book = arrays["disease_book"].astype(np.float32)
    meta = meta if isinstance(meta, dict) else {}
    stale = _version_problem(p, meta, entities)
    if stale:
        raise ModelConfigError(stale)
    aspect_book = arrays["aspect_book"].astype(np.float32) if "aspect_book" in arrays else None
    aspects = tuple(str(a) for a in arrays["aspects"]) if "aspects" in arrays else ()
    problems = []
    if book.ndim != 2 or book.shape[0] != len(entities):
        problems.append(f"{p}: disease_book shape {book.shape} does not match {len(entities)} entities")
    if aspect_book is not None and (aspect_book.ndim != 3 or aspect_book.shape[0] != len(entities)
                                    or aspect_book.shape[2] != book.shape[-1]):
        problems.append(f"{p}: aspect_book shape {aspect_book.shape} does not match disease_book {book.shape}")
    if need_aspects and aspect_book is None:
        problems.append(f"{p}: has no aspect embeddings; MAVL needs a cache built with --aspects")
    if problems:
        raise ModelConfigError(problems)
    return QueryCache(entities, book, aspect_book, aspects, meta)
