"""Build a submission.zarr from the layouts teams already have.

Two layouts are read (documented in the README, section "Converting existing outputs"):

HDF5, one file::

    /                 attrs: model, method (and any other provenance, copied as is)
    /<dataset>/       attrs: classes (list of str), score_kind ("logit"|"probability"),
                             unsupported (optional list of str)
        case_id   (N,)          strings (bytes or str)
        scores    (N, C)        float
        saliency  (N, C, h, w)  float

A folder of per-case .npz files::

    DIR/meta.json     {"model": ..., "method": ..., "provenance": {...},
                       "datasets": {"<dataset>": {"classes": [...], "score_kind": "logit",
                                                  "unsupported": []}}}
    DIR/<dataset>/<case_id>.npz     arrays: scores (C,), saliency (C, h, w)

The output is written under a temporary name beside ``out`` and renamed only when it is complete
and valid, so a failed conversion never leaves a half-written submission.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from .errors import InvalidStoreError, Problem
from .paths import clean_leftovers, is_remote
from .submission import DatasetSpec, SubmissionWriter, validate_submission

ProgressFn = Callable[[int], None]


def convert_hdf5(src: str | Path, out: str | Path, *, cases_per_block: int = 64, map_dtype: str = "float16", progress: ProgressFn | None = None, gt=None) -> Path:
    """Convert one HDF5 file (layout in the module docstring) into a submission store."""
    import h5py

    src = Path(src)
    _refuse_out_in_inputs(out, src, gt)
    try:
        f = h5py.File(src, "r")
    except OSError as exc:
        raise InvalidStoreError(Problem(str(src), f"not a readable HDF5 file ({exc})")) from None
    with f:
        problems: list[Problem] = []
        specs: dict[str, DatasetSpec] = {}
        for name, g in f.items():
            where = f"{src}:/{name}"
            missing = [k for k in ("case_id", "scores", "saliency") if k not in g]
            if missing:
                problems.append(Problem(where, f"missing dataset(s): {', '.join(missing)}"))
                continue
            classes = [_text(c) for c in np.atleast_1d(g.attrs.get("classes", []))]
            if not classes:
                problems.append(Problem(where, "attribute 'classes' is missing"))
                continue
            sal = g["saliency"]
            if sal.ndim != 4:
                problems.append(Problem(f"{where}/saliency", f"must be (N, C, h, w), got shape {sal.shape}"))
                continue
            specs[name] = DatasetSpec(
                case_ids=[_text(c) for c in g["case_id"][...]],
                classes=classes,
                map_shape=(int(sal.shape[2]), int(sal.shape[3])),
                score_kind=_text(g.attrs.get("score_kind", "logit")),
                unsupported=[_text(c) for c in np.atleast_1d(g.attrs.get("unsupported", []))],
            )
        if problems:
            raise InvalidStoreError(problems)
        root_attrs = {k: _jsonable(v) for k, v in f.attrs.items()}
        model = str(root_attrs.pop("model", src.stem))
        method = str(root_attrs.pop("method", "unknown"))

        def blocks(name: str, start: int, stop: int):
            g = f[name]
            return g["scores"][start:stop], g["saliency"][start:stop]

        return _write(out, model, method, root_attrs, specs, blocks, cases_per_block, map_dtype, progress, gt)


def convert_npz_dir(src: str | Path, out: str | Path, *, cases_per_block: int = 64, map_dtype: str = "float16", progress: ProgressFn | None = None, gt=None) -> Path:
    """Convert a folder of per-case .npz files (layout in the module docstring)."""
    src = Path(src)
    _refuse_out_in_inputs(out, src, gt)
    meta_path = src / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise InvalidStoreError(Problem(str(meta_path), "missing; it names the model, the method and each dataset's classes")) from None
    except json.JSONDecodeError as exc:
        raise InvalidStoreError(Problem(str(meta_path), f"not valid JSON ({exc})")) from None
    problems: list[Problem] = []
    specs: dict[str, DatasetSpec] = {}
    files: dict[str, list[Path]] = {}
    for name, info in sorted(meta.get("datasets", {}).items()):
        folder = src / name
        paths = sorted(folder.glob("*.npz"))
        if not paths:
            problems.append(Problem(str(folder), "holds no .npz files"))
            continue
        first = _load_npz(paths[0], problems)
        if first is None:
            continue
        files[name] = paths
        specs[name] = DatasetSpec(
            case_ids=[p.stem for p in paths],
            classes=list(info.get("classes", [])),
            map_shape=tuple(first["saliency"].shape[-2:]),
            score_kind=info.get("score_kind", "logit"),
            unsupported=list(info.get("unsupported", [])),
        )
    if not specs and not problems:
        problems.append(Problem(str(meta_path), "lists no datasets"))
    if problems:
        raise InvalidStoreError(problems)

    def blocks(name: str, start: int, stop: int):
        spec = specs[name]
        c, (h, w) = len(spec.classes), spec.map_shape
        scores = np.empty((stop - start, c), np.float32)
        maps = np.empty((stop - start, c, h, w), np.float32)
        bad: list[Problem] = []
        for i, path in enumerate(files[name][start:stop]):
            arrays = _load_npz(path, bad)
            if arrays is None:
                continue
            if arrays["scores"].shape != (c,) or arrays["saliency"].shape != (c, h, w):
                bad.append(Problem(str(path), f"expected scores {(c,)} and saliency {(c, h, w)}, got {arrays['scores'].shape} and {arrays['saliency'].shape}"))
                continue
            scores[i], maps[i] = arrays["scores"], arrays["saliency"]
        if bad:
            raise InvalidStoreError(bad)
        return scores, maps

    return _write(out, meta.get("model", src.name), meta.get("method", "unknown"), meta.get("provenance", {}), specs, blocks, cases_per_block, map_dtype, progress, gt)


def _refuse_out_in_inputs(out, src: Path, gt) -> None:
    """The new store may not go into what is converted nor into the ground truth (inputs are only read)."""
    inputs = {"the source": src, "the ground truth": getattr(gt, "path", gt)}
    real = Path(os.path.realpath(out))
    problems = [Problem(str(out), f"lies inside {what} ({path}); choose another --out")
                for what, path in inputs.items()
                if path is not None and not is_remote(path) and Path(os.path.realpath(path)) in (real, *real.parents)]
    if problems:
        raise InvalidStoreError(problems)


def _write(out, model, method, provenance, specs, blocks, cases_per_block, map_dtype, progress, gt) -> Path:
    out = Path(out)
    if out.exists():
        raise InvalidStoreError(Problem(str(out), "already exists; remove it or choose another --out"))
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(out)  # what killed conversions left (the .partial- folders)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent)) / out.name
    try:
        writer = SubmissionWriter.create(
            tmp, model=model, method=method, provenance={"converted_by": "xbench-convert", **provenance},
            datasets=specs, cases_per_block=cases_per_block, map_dtype=map_dtype,
        )
        for name in specs:
            for b in writer.blocks_todo(name):
                start, stop = writer.block_rows(name, b)
                scores, maps = blocks(name, start, stop)
                writer.write_block(name, b, np.asarray(scores, np.float32), np.asarray(maps))
                if progress:
                    progress(stop - start)
        writer.finish()
        problems = validate_submission(tmp, gt)
        if problems:
            raise InvalidStoreError(problems)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)
    return out


def _load_npz(path: Path, problems: list[Problem]) -> dict | None:
    try:
        with np.load(path) as z:
            lacking = [k for k in ("scores", "saliency") if k not in z.files]
            if lacking:
                problems.append(Problem(str(path), f"lacks array(s) {', '.join(map(repr, lacking))} (needs scores and saliency)"))
                return None
            arrays = {k: z[k] for k in ("scores", "saliency")}
    except Exception as exc:
        problems.append(Problem(str(path), f"unreadable ({type(exc).__name__}: {exc})"))
        return None
    return arrays


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _jsonable(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def count_cases(src: Path) -> int:
    """Total number of cases a conversion will write (for the progress bar)."""
    if src.is_dir():
        return sum(1 for _ in src.glob("*/*.npz"))
    import h5py

    try:
        with h5py.File(src, "r") as f:
            return sum(int(g["case_id"].shape[0]) for g in f.values() if "case_id" in g)
    except OSError:
        return 0

