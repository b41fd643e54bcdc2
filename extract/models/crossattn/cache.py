"""Entity (MedKLIP) and entity + aspect (MAVL) query embeddings, computed once and cached.

MedKLIP and MAVL build their queries in ``__init__`` from a text encoder
(Bio_ClinicalBERT, ``last_hidden_state[:, 0]`` of each description tokenised to 64 tokens);
the embeddings are not part of the checkpoints. This module computes them once from the user's
local text-encoder folder and the official description files and stores them in a small
``.npz`` (no pickle) that the adapters read.

Cache layout (``numpy.savez``):

* ``entities``     (E,) str
* ``disease_book`` (E, D) float32 — CLS embedding of each entity description
* ``aspect_book``  (E, A, D) float32 — optional, CLS embedding of each aspect sentence (MAVL)
* ``aspects``      (A,) str — optional, aspect names ("border", ...)
* ``meta``         () str — JSON provenance (file hashes, encoder, max_length, lower-casing)
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from .entities import ENTITIES

CACHE_VERSION = 1


@dataclass(frozen=True)
class QueryCache:
    """In-memory view of a cache file; arrays are float32 numpy."""

    entities: tuple[str, ...]
    disease_book: np.ndarray
    aspect_book: np.ndarray | None = None
    aspects: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)


def _read_json_object(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{what}: file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what}: {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what}: {path} must hold a JSON object keyed by entity name")
    return data


def collect_texts(
    descriptions: Mapping[str, object],
    aspects: Mapping[str, object] | None,
    entities: Sequence[str],
) -> tuple[list[str], list[list[str]] | None, list[str]]:
    """Check and order the description (and aspect) texts by ``entities``.

    Returns (description per entity, aspect sentences per entity or None, problems). Every
    entity needs a string description; with aspects every entity needs a list of strings of the
    same length.
    """
    problems, desc, asp = [], [], []
    for e in entities:
        text = descriptions.get(e)
        if not isinstance(text, str) or not text.strip():
            problems.append(f"descriptions: entity {e!r} has no description text")
            text = ""
        desc.append(text)
        if aspects is not None:
            items = aspects.get(e)
            if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
                problems.append(f"aspects: entity {e!r} needs a list of aspect sentences")
                items = []
            asp.append(items)
    if aspects is not None:
        counts = {len(a) for a in asp if a}
        if len(counts) > 1:
            problems.append(f"aspects: every entity needs the same number of aspect sentences, found {sorted(counts)}")
    return desc, (asp if aspects is not None else None), problems


def aspect_names(sentences: Sequence[str]) -> tuple[str, ...]:
    """'border: clear ...' -> 'border' (the text before the first colon)."""
    return tuple(s.split(":", 1)[0].strip() if ":" in s else f"aspect{i}" for i, s in enumerate(sentences))


def embed_cls(
    texts: Sequence[str],
    tokenizer,
    model,
    *,
    max_length: int = 64,
    batch_size: int = 32,
    device: str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """CLS token of the last hidden state for each text, padded/truncated to ``max_length``
    exactly as the official scripts tokenise (``padding='max_length', truncation=True``)."""
    import torch

    model = model.to(device).eval()
    chunks = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            batch = list(texts[start:start + batch_size])
            tok = tokenizer(batch, padding="max_length", truncation=True, max_length=max_length, return_tensors="pt")
            out = model(input_ids=tok["input_ids"].to(device), attention_mask=tok["attention_mask"].to(device))
            chunks.append(out.last_hidden_state[:, 0, :].float().cpu().numpy())
            if progress:
                progress(len(batch))
    return np.concatenate(chunks, axis=0).astype(np.float32)


def build_query_cache(
    text_encoder: str | os.PathLike,
    descriptions_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    aspects_path: str | os.PathLike | None = None,
    entities: Sequence[str] = ENTITIES,
    extra_entities: Sequence[str] = (),
    max_length: int = 64,
    lower_case: bool = True,
    device: str = "cpu",
    batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
) -> QueryCache:
    """Compute and atomically write a query cache. Raises ``ValueError`` listing every problem
    with the input files (one line each) before any model is loaded."""
    from .common import file_sha256, load_pretrained_text_model, load_tokenizer

    entities = tuple(entities) + tuple(e for e in extra_entities if e not in entities)
    desc_path = Path(descriptions_path).expanduser()
    descriptions = _read_json_object(desc_path, "descriptions")
    aspects = None
    if aspects_path is not None:
        aspects = _read_json_object(Path(aspects_path).expanduser(), "aspects")
    desc, asp, problems = collect_texts(descriptions, aspects, entities)
    if problems:
        raise ValueError("\n".join(problems))

    tokenizer = load_tokenizer(text_encoder, do_lower_case=lower_case)
    model = load_pretrained_text_model(text_encoder)
    disease_book = embed_cls(desc, tokenizer, model, max_length=max_length, batch_size=batch_size,
                             device=device, progress=progress)
    aspect_book, names = None, ()
    if asp is not None:
        flat = [s for items in asp for s in items]
        per = len(asp[0])
        aspect_book = embed_cls(flat, tokenizer, model, max_length=max_length, batch_size=batch_size,
                                device=device, progress=progress).reshape(len(entities), per, -1)
        names = aspect_names(asp[0])

    enc = Path(text_encoder).expanduser()
    meta = {
        "version": CACHE_VERSION,
        "text_encoder": str(enc),
        "text_encoder_config_sha256": file_sha256(enc / "config.json"),
        "descriptions": str(desc_path),
        "descriptions_sha256": file_sha256(desc_path),
        "aspects": str(Path(aspects_path).expanduser()) if aspects_path else None,
        "aspects_sha256": file_sha256(Path(aspects_path).expanduser()) if aspects_path else None,
        "max_length": max_length,
        "lower_case": lower_case,
        "pooling": "last_hidden_state[:, 0]",
    }
    cache = QueryCache(entities, disease_book, aspect_book, names, meta)
    write_query_cache(cache, out_path)
    return cache


def write_query_cache(cache: QueryCache, out_path: str | os.PathLike) -> Path:
    """Write atomically (temporary file in the same folder, then rename)."""
    out = Path(out_path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = {
        "entities": np.asarray(cache.entities, dtype=np.str_),
        "disease_book": np.asarray(cache.disease_book, dtype=np.float32),
        "meta": np.asarray(json.dumps(cache.meta, sort_keys=True)),
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


def read_query_cache(path: str | os.PathLike, *, need_aspects: bool = False) -> QueryCache:
    """Read a cache written by ``write_query_cache``; checks shapes and, with ``need_aspects``,
    that the MAVL aspect embeddings are present."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(
            f"query cache not found: {p}; build it with `xbench build-embeddings` (see docs/readme/crossattn.md)"
        )
    with np.load(p, allow_pickle=False) as z:
        entities = tuple(str(e) for e in z["entities"])
        book = z["disease_book"].astype(np.float32)
        aspect_book = z["aspect_book"].astype(np.float32) if "aspect_book" in z else None
        aspects = tuple(str(a) for a in z["aspects"]) if "aspects" in z else ()
        meta = json.loads(str(z["meta"])) if "meta" in z else {}
    problems = []
    if book.ndim != 2 or book.shape[0] != len(entities):
        problems.append(f"{p}: disease_book shape {book.shape} does not match {len(entities)} entities")
    if aspect_book is not None and (aspect_book.ndim != 3 or aspect_book.shape[0] != len(entities)
                                    or aspect_book.shape[2] != book.shape[-1]):
        problems.append(f"{p}: aspect_book shape {aspect_book.shape} does not match disease_book {book.shape}")
    if need_aspects and aspect_book is None:
        problems.append(f"{p}: has no aspect embeddings; MAVL needs a cache built with --aspects")
    if problems:
        raise ValueError("\n".join(problems))
    return QueryCache(entities, book, aspect_book, aspects, meta)
