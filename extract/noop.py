"""Is an extraction already done? Decided before torch is imported and the model is built (seconds saved).

``xbench-extract`` run again over a finished store has nothing to do; the runner would learn that only after
importing torch and building the model (7 s for a baseline, 16 s for a CLIP). :func:`nothing_to_do` answers
from what needs no torch: the model's config (``load_config``, the same one the runner builds the adapter
from), the images store and the finished submission store's root attributes.

It says "nothing to do" only when the runner would say so and write nothing, i.e. when all of these hold;
otherwise it returns None and the runner decides as before:

- the store at ``--out`` is a finished submission store (``complete``), not asked to be overwritten;
- its recorded config hash is the hash of the config this request resolves to, and its recorded precision,
  images store (file name and root attributes) and model name are this request's;
- the specification digest the writer resumes by (:meth:`SubmissionWriter.spec_hash`: model, method, case
  ids, classes, phrase ids, block size, map dtype) recomputed from this request equals the recorded one. What
  only the built adapter knows (its map shape, score kind, unsupported classes, whether it takes phrases) is
  read from the store: those follow from the config, which the hash above pins;
- a plain run: no ``--augment``, ``--faithfulness``, ``--scores-only`` or several ranks (those keep the runner's
  path).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["jsonable", "nothing_to_do"]


def jsonable(obj: Any) -> Any:
    """Config values as plain JSON types (paths and tuples become strings and lists)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    return str(obj)


def nothing_to_do(opts) -> dict | None:
    """The run summary of a request whose ``--out`` is already finished (module doc), else None.

    Never raises for a store it cannot judge: any doubt returns None (the runner then checks as before)."""
    if opts.overwrite or opts.augment or opts.faithfulness or opts.scores_only:
        return None
    if (opts.nproc_per_node or 1) > 1 or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        return None
    try:
        return _judge(opts)
    except Exception:  # noqa: BLE001 - a store or config it cannot read: the runner reports it properly
        return None


def _judge(opts) -> dict | None:
    from xbench.schemas import DatasetSpec, SubmissionWriter, read_images
    from xbench.schemas._blocks import SPEC_ATTR, is_incomplete, n_blocks
    from xbench.schemas.queries import QUERY_LEDGER, UNSUPPORTED_ATTR
    from xbench.schemas.store import open_store_group, read_strings

    from xbench.extract.models import config_hash, load_config

    out = Path(opts.out)
    if not out.is_dir():
        return None
    root = open_store_group(out, mode="r")
    meta = dict(root.attrs.get("xbench", {}))
    if meta.get("kind") != "submission" or meta.get("complete") is not True or meta.get("scores_only"):
        return None
    if meta.get("augment") is not None:
        return None
    config = load_config(opts.model, **opts.model_overrides())
    if meta.get("config_hash") != config_hash(config):
        return None
    precision = opts.precision or config.get("precision") or "fp32"
    model_name = str(config.get("name") or opts.model)
    if meta.get("precision") != precision or meta.get("model") != model_name:
        return None
    store = read_images(opts.images)
    if meta.get("images") != {"path": Path(opts.images).name, "attrs": jsonable(store.attrs)}:
        return None
    names = list(opts.datasets) if opts.datasets else sorted(store.datasets)
    if any(n not in store.datasets for n in names) or sorted(names) != sorted(g for g, _ in root.groups()):
        return None
    specs, summary = {}, {}
    for name in names:
        ds, g = store.datasets[name], root[name]
        if is_incomplete(g) or QUERY_LEDGER in g:
            return None
        sal = g["saliency"]
        phrase = {}
        q = ds.queries
        if q is not None:
            keep = q.case < (opts.limit if opts.limit is not None else len(ds.case_id))
            ids = [str(x) for x in q.id[keep]]
            if ids:
                reason = g.attrs.get(UNSUPPORTED_ATTR)
                phrase = {"query_ids": ids, "phrases_unsupported": None if reason is None else str(reason)}
        specs[name] = DatasetSpec([str(c) for c in ds.case_id[:opts.limit]], tuple(ds.classes), tuple(sal.shape[2:]),
                                  g.attrs.get("score_kind"), tuple(g.attrs.get("unsupported", ())), **phrase)
        n = len(specs[name].case_ids)
        if list(read_strings(g["case_id"])) != specs[name].case_ids:
            return None
        summary[name] = {"cases": n, "blocks": n_blocks(n, int(g["scores"].chunks[0])), "blocks_todo": 0, "blocks_this_rank": 0}
        map_dtype = str(sal.dtype)
    want_cpb = opts.cases_per_block or max(64, opts.batch_size)
    if map_dtype != opts.map_dtype:
        return None
    spec = SubmissionWriter.spec_hash(model=model_name, method=str(meta.get("method")), datasets=specs,
                                      cases_per_block=want_cpb, map_dtype=opts.map_dtype)
    if spec != meta.get(SPEC_ATTR):
        return None
    return {"out": str(opts.out), "model": model_name, "method": str(meta.get("method")), "device": None,
            "precision": precision, "rank": 0, "world_size": 1, "blocks_written": 0, "datasets": summary,
            "seconds": 0.0, "cases": sum(v["cases"] for v in summary.values())}
