"""Build a submission.zarr from the layouts teams already have (docs/how-to/convert.md has every layout in full).

HDF5, one file (read through :mod:`xbench.schemas.hdf5_input`: nothing outside the file, no filter plugin,
bounded decoding)::

    /                 attrs: model, method (and any other provenance, copied as is)
    /<dataset>/       attrs: classes (list of str), score_kind ("logit"|"probability"),
                             unsupported (optional list of str), phrases_unsupported (optional str)
        case_id   (N,)          strings (bytes or str)
        scores    (N, C)        numbers
        saliency  (N, C, h, w)  numbers
      optional phrase rows (all three or none):
        query_id        (Q,)          strings
        query_scores    (Q,)          numbers
        query_saliency  (Q, h, w)     numbers (or (Q, 1, h, w))

A folder of per-case .npz files (regular files only: no links, pipes or devices)::

    DIR/meta.json     {"model": ..., "method": ..., "provenance": {...},
                       "datasets": {"<dataset>": {"classes": [...], "score_kind": "logit",
                                                  "unsupported": [], "phrases_unsupported": "<reason>"}}}
    DIR/<dataset>/<case_id>.npz             arrays: scores (C,), saliency (C, h, w)
    DIR/<dataset>/phrases/<query_id>.npz    optional phrase rows: scores (1,), saliency (1, h, w)

A dataset whose source holds no phrase rows is written with ``phrases_unsupported`` (the source's own
reason, else :data:`NO_PHRASES`), so it scores against a ground truth with phrase rows and its phrase
metrics are null; ``require_phrases`` makes such a dataset an error instead.

The output is built in a hidden folder beside ``out`` named after this process's id and renamed into place
only when it is complete and valid, so a failed conversion never leaves a half-written submission; what a
killed conversion left is removed by the next one. Every message names the user's source and ``out``,
never the hidden folder.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from xbench.schemas.errors import InputError, InputLimitError, InvalidStoreError, Problem
from xbench.schemas.paths import STOP, _pid_alive, check_stop, is_remote, terminate_as_interrupt  # noqa: F401 - the one stop, shared
from xbench.schemas.submission import SCORE_KINDS, DatasetSpec, _class_hint, _listed, validate_submission
from xbench.schemas.submission_writer import SubmissionWriter

ProgressFn = Callable[[int], None]
#: the reason recorded for a dataset whose source holds no phrase rows (docs/how-to/convert.md, "Phrase rows")
NO_PHRASES = "the converted source holds no phrase rows"
#: problems listed one a line before the rest are counted (a folder of 10^5 bad files stays readable)
MAX_LISTED = 20
#: entries of one dataset folder of an npz source (a folder of millions of names is refused, not listed)
MAX_FOLDER_ENTRIES = 1_000_000
#: a file in every hidden work folder of xbench-convert: the next run removes such folders of dead processes
WORK_MARKER = ".xbench-convert"


class Problems(list):
    """Problems, listed up to :data:`MAX_LISTED` and then counted."""

    def add(self, where: str, message: str) -> None:
        self.append(Problem(where, message))

    def raise_if_any(self, cls=InvalidStoreError) -> None:
        if not self:
            return
        shown = list(self[:MAX_LISTED])
        if len(self) > MAX_LISTED:
            shown.append(Problem("", f"... and {len(self) - MAX_LISTED} more problem(s) like these"))
        raise cls(shown)


class PartialBlock(InvalidStoreError):
    """Rows of a block that could not be read (``problems``), with the block itself (``block``: those rows
    zero-filled), so the other rows are still checked and every problem of the source is listed in one run."""

    def __init__(self, problems, block: tuple) -> None:
        super().__init__(problems)
        self.block = block


@dataclass
class Converted:
    """A source read and checked, ready to write: what the submission says and how to read its rows.

    ``blocks(name, start, stop)`` -> (scores (n, C), maps (n, C, h, w)); ``phrase_blocks(name, start, stop)``
    -> (scores (n,), maps (n, h, w)) for the rows of ``specs[name].query_ids``."""

    model: str
    method: str
    provenance: dict
    specs: dict[str, DatasetSpec]
    blocks: Callable
    phrase_blocks: Callable | None = None
    where: str = ""  # the source, as the user named it (for problems found while writing)
    #: ``row_where(name, phrase, row)``: what names row ``row`` of dataset ``name`` (a phrase row when ``phrase``)
    #: in a problem line: its file for a folder of .npz files; default "SOURCE: DATASET: case 'ID'"
    row_where: Callable | None = None

    def where_of(self, name: str, phrase: bool, row: int) -> str:
        if self.row_where is not None:
            return self.row_where(name, phrase, row)
        spec = self.specs[name]
        ids = spec.query_ids if phrase else spec.case_ids
        head = f"{self.where}: {name}" if self.where else name
        return f"{head}: {'phrase row' if phrase else 'case'} {str(ids[row])!r}"


def phrase_fields(where: str, query_ids, reason, *, require: bool, default_reason: str | None = None) -> dict:
    """The phrase part of a DatasetSpec: the source's phrase rows, its declared reason, or the default reason.

    ``require`` (``--require-phrases``): a dataset without phrase rows is a problem instead of unsupported."""
    if query_ids and reason:
        raise InputError(Problem(where, "holds phrase rows and also declares phrases_unsupported; give one or the other"))
    if query_ids:
        return {"query_ids": list(query_ids)}
    if reason:
        return {"phrases_unsupported": str(reason)}
    if require:
        raise InputError(Problem(where, "holds no phrase rows (--require-phrases); add them, or leave the option out "
                                        "to declare phrases_unsupported"))
    return {"phrases_unsupported": default_reason or NO_PHRASES}


# -- HDF5 -------------------------------------------------------------------------------------------
def convert_hdf5(src: str | Path, out: str | Path, *, cases_per_block: int = 64, map_dtype: str = "float16",
                 progress: ProgressFn | None = None, total: ProgressFn | None = None, gt=None,
                 require_phrases: bool = False, phrases_reason: str | None = None) -> Path:
    """Convert one HDF5 file (layout in the module docstring) into a submission store."""
    from xbench.schemas.hdf5_input import H5Source, _first_line

    src = Path(src)
    _refuse_out_in_inputs(out, src, gt)
    with H5Source(src) as h5:
        try:
            converted = read_hdf5(h5, src, cases_per_block, require_phrases, phrases_reason)
        except (OSError, RuntimeError) as exc:  # HDF5's own word on a corrupt file (a B-tree, a heap)
            raise InvalidStoreError(Problem(str(src), f"cannot be read as HDF5 ({_first_line(exc)})")) from None
        if total:
            total(sum(len(s.case_ids) for s in converted.specs.values()))
        return _write(out, converted, cases_per_block, map_dtype, progress, gt)


def _strings(value, where: str, problems: Problems, *, what: str) -> list[str] | None:
    """A list of strings from an attribute value (one string is a list of one); None and a problem otherwise."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    problems.add(where, f"attribute '{what}' must be a list of strings")
    return None


def _hdf5_query_problems(got: dict, sal: tuple, where: str, problems: Problems) -> list[str]:
    """The phrase arrays a dataset group holds (all three or none), their shapes and sizes checked."""
    from xbench.schemas.budget import limits

    query = [k for k in ("query_id", "query_scores", "query_saliency") if got[k] is not None]
    if query and len(query) < 3:
        problems.add(where, f"phrase rows need query_id, query_scores and query_saliency; it has only {', '.join(query)}")
    if len(query) == 3:
        q = got["query_id"].shape[0]
        qs = got["query_saliency"].shape
        want = [(q, sal[2], sal[3]), (q, 1, sal[2], sal[3])]
        if got["query_scores"].shape != (q,) or qs not in want:
            problems.add(where, f"phrase rows must be query_scores (Q,) and query_saliency (Q, h, w) = {want[0]} "
                                f"(the maps' size), got {got['query_scores'].shape} and {qs}")
        elif q == 0:
            problems.add(f"{where}/query_id", "is empty; leave the phrase arrays out instead")
        elif got["query_id"].dset.dtype.itemsize * q > limits().max_chunk_bytes:
            problems.add(f"{where}/query_id", "is larger than the memory budget allows (--max-memory)")
    return query


def read_hdf5(h5, src: Path, cases_per_block: int, require_phrases: bool, phrases_reason: str | None) -> Converted:
    """Check the whole file (links, types, layouts, sizes, attributes) and return how to read it."""
    from xbench.schemas.budget import limits
    from xbench.schemas.store import MAX_CASES, MAX_CLASSES, MAX_MAP_SIDE

    root = h5.file
    problems = Problems()
    specs: dict[str, DatasetSpec] = {}
    arrays: dict[str, dict] = {}
    names = h5.names(root, f"{src}:/")
    for name in names:
        where = f"{src}:/{name}"
        try:
            g = h5.group(root, name, where)
            attrs = h5.attrs(g, where)
            got = {k: h5.dataset(g, k, f"{where}/{k}", kind=kind, ndim=nd)
                   for k, kind, nd in (("case_id", "string", (1,)), ("scores", "number", (2,)),
                                       ("saliency", "number", (4,)), ("query_id", "string", (1,)),
                                       ("query_scores", "number", (1,)), ("query_saliency", "number", (3, 4)))}
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        missing = [k for k in ("case_id", "scores", "saliency") if got[k] is None]
        if missing:
            problems.add(where, f"missing dataset(s): {', '.join(missing)}")
            continue
        n_before = len(problems)
        classes = _strings(attrs.get("classes", []), where, problems, what="classes")
        unsupported = _strings(attrs.get("unsupported", []), where, problems, what="unsupported")
        score_kind = attrs.get("score_kind", "logit")
        if score_kind not in SCORE_KINDS:
            problems.add(where, f"attribute 'score_kind' must be 'logit' or 'probability', got {score_kind!r}")
        reason = attrs.get("phrases_unsupported")
        if reason is not None and not isinstance(reason, str):
            problems.add(where, "attribute 'phrases_unsupported' must be a string (the reason)")
        if classes is not None and not classes:
            problems.add(where, "attribute 'classes' is missing")
        if len(problems) > n_before:
            continue
        n, c = got["case_id"].shape[0], len(classes)
        sal = got["saliency"].shape
        if n > MAX_CASES or c > MAX_CLASSES:
            problems.add(where, f"declares {n:,} cases and {c:,} classes; the limits are {MAX_CASES:,} and {MAX_CLASSES:,}")
            continue
        if got["scores"].shape != (n, c):
            problems.add(f"{where}/scores", f"must be (N, C) = {(n, c)} (case_id and classes), got {got['scores'].shape}")
        if sal[:2] != (n, c):
            problems.add(f"{where}/saliency", f"must be (N, C, h, w) with (N, C) = {(n, c)}, got {sal}")
        if not all(1 <= s <= MAX_MAP_SIDE for s in sal[2:]):
            problems.add(f"{where}/saliency", f"map size {sal[2]}x{sal[3]} is outside 1..{MAX_MAP_SIDE} per side")
        if got["case_id"].dset.dtype.itemsize * n > limits().max_chunk_bytes:
            problems.add(f"{where}/case_id", "is larger than the memory budget allows (--max-memory)")
        row_bytes = c * sal[2] * sal[3] * 8
        if cases_per_block * row_bytes * 3 > limits().max_memory:
            problems.add(where, f"a block of {cases_per_block} cases needs {cases_per_block * row_bytes * 3 / 2**20:.0f} "
                                f"MiB, more than --max-memory; lower --cases-per-block")
        query = _hdf5_query_problems(got, sal, where, problems)
        query_ids: list[str] = []
        if len(problems) > n_before:
            continue
        try:
            ids = [str(v) for v in got["case_id"].read().tolist()]
            if len(query) == 3:
                query_ids = [str(v) for v in got["query_id"].read().tolist()]
            fields = phrase_fields(where, query_ids, reason, require=require_phrases, default_reason=phrases_reason)
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        specs[name] = DatasetSpec(case_ids=ids, classes=classes, map_shape=(int(sal[2]), int(sal[3])),
                                  score_kind=score_kind, unsupported=unsupported, **fields)
        arrays[name] = got
    try:
        root_attrs = h5.attrs(root, f"{src}:/")
    except InputError as exc:
        problems.extend(exc.problems)
        root_attrs = {}
    if not specs and not problems:
        problems.add(str(src), "holds no dataset group (one group per dataset key, see docs/how-to/convert.md)")
    problems.raise_if_any()
    model, method = root_attrs.pop("model", src.stem), root_attrs.pop("method", "unknown")

    def blocks(name: str, start: int, stop: int):
        return arrays[name]["scores"].rows(start, stop), arrays[name]["saliency"].rows(start, stop)

    def phrase_blocks(name: str, start: int, stop: int):
        maps = arrays[name]["query_saliency"].rows(start, stop)
        return arrays[name]["query_scores"].rows(start, stop), maps.reshape(maps.shape[0], *maps.shape[-2:])

    return Converted(str(model), str(method), {"source": {"format": "hdf5", "file": src.name}, **root_attrs},
                     specs, blocks, phrase_blocks, str(src))


# -- a folder of .npz files -------------------------------------------------------------------------
META_KEYS = ("model", "method", "provenance", "datasets")
DATASET_META_KEYS = ("classes", "score_kind", "unsupported", "phrases_unsupported")
PHRASES_FOLDER = "phrases"


def convert_npz_dir(src: str | Path, out: str | Path, *, cases_per_block: int = 64, map_dtype: str = "float16",
                    progress: ProgressFn | None = None, total: ProgressFn | None = None, gt=None,
                    require_phrases: bool = False, phrases_reason: str | None = None) -> Path:
    """Convert a folder of per-case .npz files (layout in the module docstring)."""
    src = Path(src)
    _refuse_out_in_inputs(out, src, gt)
    converted = read_npz_dir(src, cases_per_block, require_phrases, phrases_reason)
    if total:
        total(sum(len(s.case_ids) for s in converted.specs.values()))
    return _write(out, converted, cases_per_block, map_dtype, progress, gt)


def _entry_problem(path: Path) -> str | None:
    """Why ``path`` may not be read as a member of an npz source (links, pipes and devices are not), or None."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    import stat

    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link; members of the folder must be regular files (copy the file in)"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a pipe, socket or device)"
    return None


def _listing(folder: Path, problems: Problems) -> tuple[list[Path], Path | None] | None:
    """The .npz files of a dataset folder (sorted) and its phrases folder, each checked; None when unusable."""
    import stat

    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        problems.add(str(folder), "missing: meta.json lists this dataset")
        return None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        problems.add(str(folder), "must be a folder (not a link) holding one .npz file per case")
        return None
    files, phrases = [], None
    try:
        with os.scandir(folder) as it:
            for k, entry in enumerate(it):
                if k >= MAX_FOLDER_ENTRIES:
                    raise InputLimitError(Problem(str(folder), f"holds more than {MAX_FOLDER_ENTRIES:,} entries"))
                path = folder / entry.name
                if entry.name == PHRASES_FOLDER:
                    if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                        problems.add(str(path), "must be a folder (not a link) of one .npz file per phrase row")
                    else:
                        phrases = path
                    continue
                if not entry.name.endswith(".npz"):
                    continue  # not read (a README, a .DS_Store)
                why = _entry_problem(path)
                if why:
                    problems.add(str(path), why)
                    continue
                files.append(path)
    except OSError as exc:
        problems.add(str(folder), f"cannot be listed ({exc.strerror or exc})")
        return None
    return sorted(files), phrases


def _read_meta(src: Path) -> dict:
    """meta.json, bounded and type-checked, one problem a line."""
    from xbench.schemas.inputs import CONFIG, load_json

    meta_path = src / "meta.json"
    why = _entry_problem(meta_path) if os.path.lexists(meta_path) else None
    if not os.path.lexists(meta_path):
        raise InvalidStoreError(Problem(str(meta_path), "missing; it names the model, the method and each dataset's classes"))
    if why:
        raise InvalidStoreError(Problem(str(meta_path), why))
    meta = load_json(meta_path, limits=CONFIG)
    problems = Problems()
    if not isinstance(meta, dict):
        raise InvalidStoreError(Problem(str(meta_path), 'must be an object {"model", "method", "datasets": {...}}'))
    unknown = sorted(set(meta) - set(META_KEYS))
    if unknown:
        problems.add(str(meta_path), f"unknown key(s) {', '.join(map(repr, unknown))} (expected {', '.join(META_KEYS)})")
    for key in ("model", "method"):
        if key in meta and not isinstance(meta[key], str):
            problems.add(f"{meta_path}: {key}", "must be a string")
    if not isinstance(meta.get("provenance", {}), dict):
        problems.add(f"{meta_path}: provenance", "must be an object")
    datasets = meta.get("datasets")
    if not isinstance(datasets, dict) or not datasets:
        problems.add(f"{meta_path}: datasets", "must be an object naming each dataset's classes")
        problems.raise_if_any()
    for name, info in datasets.items():
        where = f"{meta_path}: datasets.{name}"
        if not isinstance(info, dict):
            problems.add(where, 'must be an object {"classes": [...], "score_kind": ...}')
            continue
        unknown = sorted(set(info) - set(DATASET_META_KEYS))
        if unknown:
            problems.add(where, f"unknown key(s) {', '.join(map(repr, unknown))} (expected {', '.join(DATASET_META_KEYS)})")
        classes = info.get("classes")
        if not (isinstance(classes, list) and classes and all(isinstance(c, str) for c in classes)):
            problems.add(f"{where}.classes", "must be a non-empty list of class names")
        if info.get("score_kind", "logit") not in SCORE_KINDS:
            problems.add(f"{where}.score_kind", f"must be 'logit' or 'probability', got {info.get('score_kind')!r}")
        unsupported = info.get("unsupported", [])
        if not (isinstance(unsupported, list) and all(isinstance(u, str) for u in unsupported)):
            problems.add(f"{where}.unsupported", "must be a list of class names")
        reason = info.get("phrases_unsupported")
        if reason is not None and not isinstance(reason, str):
            problems.add(f"{where}.phrases_unsupported", "must be a string (the reason)")
        if name in (".", "..") or "/" in name or "\\" in name or not name:
            problems.add(where, "is not a dataset key (a folder name inside the source)")
    problems.raise_if_any()
    return meta


def _npz_bound(c: int, h: int, w: int) -> int:
    """Bytes one case's (or phrase's) file may inflate to: its arrays in float64 and a little room for extras."""
    return (c + c * h * w) * 8 + (1 << 16)


def _load(path: Path, problems: Problems, max_bytes: int) -> dict | None:
    from xbench.schemas.inputs import load_npz

    try:
        arrays = load_npz(path, max_bytes=max_bytes)
    except InputError as exc:
        problems.extend(exc.problems)
        return None
    lacking = [k for k in ("scores", "saliency") if k not in arrays]
    if lacking:
        problems.add(str(path), f"lacks array(s) {', '.join(map(repr, lacking))} (needs scores and saliency)")
        return None
    for k in ("scores", "saliency"):
        if arrays[k].dtype.kind not in "fiu":
            problems.add(str(path), f"array {k!r} holds {arrays[k].dtype} values; numbers are expected")
            return None
    return arrays


def _majority_file(paths: list[Path]) -> tuple[Path, int]:
    """The file whose map size the dataset takes, and how many files share that size: the first of the largest group of files by ``saliency`` shape
    (read from the headers only; no data). The read that follows then names each file of another size on its own
    line ("expected ... got ..."), instead of blaming the majority for differing from whichever file sorts first
    (5 odd files sorting first among 60 used to make the 55 good ones the problem). Unreadable files are left to
    that read."""
    from xbench.schemas.inputs import npz_shape

    groups: dict[tuple[int, ...], list[Path]] = {}
    for p in paths:
        shape = npz_shape(p, "saliency")
        if shape is not None:
            groups.setdefault(shape, []).append(p)
    if not groups:
        return paths[0], 0
    group = min(groups.values(), key=lambda g: (-len(g), g[0]))
    return group[0], len(group)


def read_npz_dir(src: Path, cases_per_block: int, require_phrases: bool, phrases_reason: str | None) -> Converted:
    from xbench.schemas.budget import limits
    from xbench.schemas.store import MAX_MAP_SIDE

    meta = _read_meta(src)
    problems = Problems()
    specs: dict[str, DatasetSpec] = {}
    files: dict[str, list[Path]] = {}
    phrase_files: dict[str, list[Path]] = {}
    agreeing: dict[str, int] = {}  # per dataset, how many files have the maps' size the dataset takes
    for name, info in sorted(meta["datasets"].items()):
        folder = src / name
        listed = _listing(folder, problems)
        if listed is None:
            continue
        paths, phrases = listed
        if not paths:
            problems.add(str(folder), "holds no .npz files")
            continue
        classes = list(info["classes"])
        model_file, agreeing[name] = _majority_file(paths)
        first = _load(model_file, problems, min(limits().max_chunk_bytes, _npz_bound(len(classes), MAX_MAP_SIDE, MAX_MAP_SIDE)))
        if first is None:
            continue
        shape = first["saliency"].shape
        if len(shape) != 3 or first["scores"].shape != (len(classes),) or shape[0] != len(classes):
            problems.add(str(paths[0]), f"expected scores ({len(classes)},) and saliency ({len(classes)}, h, w) "
                                        f"(classes in meta.json), got {first['scores'].shape} and {shape}")
            continue
        if not all(1 <= s <= MAX_MAP_SIDE for s in shape[1:]):
            problems.add(str(paths[0]), f"map size {shape[1]}x{shape[2]} is outside 1..{MAX_MAP_SIDE} per side")
            continue
        query_ids: list[str] = []
        if phrases is not None:
            more = _listing(phrases, problems)
            if more is None:
                continue
            phrase_files[name] = more[0]
            query_ids = [p.stem for p in more[0]]
            if not query_ids:
                problems.add(str(phrases), "holds no .npz files; remove the folder or add one file per phrase row")
                continue
        try:
            fields = phrase_fields(str(folder), query_ids, info.get("phrases_unsupported"), require=require_phrases,
                                   default_reason=phrases_reason)
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        files[name] = paths
        specs[name] = DatasetSpec(case_ids=[p.stem for p in paths], classes=classes, map_shape=tuple(shape[1:]),
                                  score_kind=info.get("score_kind", "logit"), unsupported=list(info.get("unsupported", [])),
                                  **fields)
    problems.raise_if_any()

    def read_rows(paths: list[Path], c: int, h: int, w: int, flat: bool, majority: str = ""):
        scores = np.zeros((len(paths), c), np.float32)  # zeros: a bad file's row is finite, found by itself
        maps = np.zeros((len(paths), c, h, w), np.float32)
        bad = Problems()
        bound = _npz_bound(c, h, w)
        for i, path in enumerate(paths):
            why = _entry_problem(path)  # checked again: the folder may have changed since it was listed
            if why:
                bad.add(str(path), why)
                continue
            arrays = _load(path, bad, bound)
            if arrays is None:
                continue
            s, m = arrays["scores"], arrays["saliency"]
            if flat and s.shape in ((), (1,)) and m.shape in ((h, w), (1, h, w)):
                s, m = s.reshape(1), m.reshape(1, h, w)
            if s.shape != (c,) or m.shape != (c, h, w):
                want = "scores (1,) and saliency (1, h, w)" if flat else f"scores {(c,)} and saliency {(c, h, w)}"
                bad.add(str(path), f"expected {want}{f' = (1, {h}, {w})' if flat else ''}{majority}, got {s.shape} "
                                   f"and {m.shape}")
                continue
            scores[i], maps[i] = s, m
        if bad:  # every bad file of the block, and the block, whose other rows are checked too
            raise PartialBlock(list(bad), (scores, maps))
        return scores, maps

    def blocks(name: str, start: int, stop: int):
        spec = specs[name]
        n, of = agreeing.get(name, 0), len(files[name])
        return read_rows(files[name][start:stop], len(spec.classes), *spec.map_shape, flat=False,
                         majority=f" (the maps' size of {n} of the {of} files)" if 0 < n < of else "")

    def phrase_blocks(name: str, start: int, stop: int):
        try:
            scores, maps = read_rows(phrase_files[name][start:stop], 1, *specs[name].map_shape, flat=True)
        except PartialBlock as exc:
            raise PartialBlock(exc.problems, (exc.block[0][:, 0], exc.block[1][:, 0])) from None
        return scores[:, 0], maps[:, 0]

    def row_where(name: str, phrase: bool, row: int) -> str:
        return str((phrase_files if phrase else files)[name][row])

    return Converted(str(meta.get("model", src.name)), str(meta.get("method", "unknown")),
                     {"source": {"format": "npz-folder", "folder": src.name}, **meta.get("provenance", {})},
                     specs, blocks, phrase_blocks, str(src), row_where)


# -- writing ----------------------------------------------------------------------------------------
def _refuse_out_in_inputs(out, src: Path, gt) -> None:
    """The new store may not go into what is converted nor into the ground truth (inputs are only read)."""
    inputs = {"the source": src, "the ground truth": getattr(gt, "path", gt)}
    real = Path(os.path.realpath(out))
    problems = [Problem(str(out), f"lies inside {what} ({path}); choose another --out")
                for what, path in inputs.items()
                if path is not None and not is_remote(path) and Path(os.path.realpath(path)) in (real, *real.parents)]
    if problems:
        raise InvalidStoreError(problems)


_WORK = re.compile(r"^\..+\.xbench-new-(\d+)-[^/]*$")


def clean_dead_conversions(parent: Path) -> list[Path]:
    """Remove the hidden work folders that killed conversions left in ``parent`` (whatever their --out):
    only folders holding :data:`WORK_MARKER` whose writer's process id is no longer running."""
    removed = []
    try:
        entries = os.listdir(parent)
    except OSError:
        return removed
    for entry in entries:
        m = _WORK.match(entry)
        path = parent / entry
        if not m or _pid_alive(int(m.group(1))) or path.is_symlink() or not (path / WORK_MARKER).is_file():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _work_dir(out: Path) -> Path:
    """A new hidden folder beside ``out`` (named with this process's id) after cleaning dead runs' folders."""
    from xbench.schemas.paths import work_dir

    folder = work_dir(out)  # also removes what dead runs left for this very --out
    (folder / WORK_MARKER).write_text(f"xbench-convert, process {os.getpid()}\n")
    clean_dead_conversions(folder.parent)
    return folder


def _remove(folder: Path) -> None:
    # a write in flight on another thread (zarr's I/O loop) may recreate a file after the first pass
    for _ in range(5):
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.lexists(folder):
            return
        time.sleep(0.05)


def _user_terms(exc: InputError, tmp: Path, out: Path) -> InputError:
    """``exc`` with the hidden work folder's path replaced by ``out``, as the user named it."""
    hidden = (str(tmp), str(tmp.parent))

    def fix(text: str) -> str:
        for h in hidden:
            text = text.replace(h, str(out))
        return text

    problems = [Problem(fix(p.where), fix(p.message)) for p in exc.problems]
    return InvalidStoreError(problems, None if exc.headline is None else fix(exc.headline))


# SIGTERM and Ctrl-C during a conversion: the one mechanism every command shares (schemas/paths.py); the
# names stay importable from here
_STOP = STOP
_check_stop = check_stop


#: root attributes of the store that a source's own attributes may not set (they say what the store is)
RESERVED = ("kind", "schema", "schema_minor", "version", "complete", "model", "method", "converted_by")


def _provenance(attrs: dict) -> dict:
    """The source's attributes as provenance: those named like the store's own attributes are kept apart."""
    from xbench.schemas._blocks import SPEC_ATTR

    kept = {k: v for k, v in attrs.items() if k not in (*RESERVED, SPEC_ATTR)}
    apart = {k: v for k, v in attrs.items() if k not in kept}
    return {"converted_by": "xbench-convert", **kept, **({"source_attributes": apart} if apart else {})}


def _stored(scores, maps, map_dtype: str, where_of: Callable[[int], str], start: int,
            score_kind: str = "logit") -> tuple[list[Problem], tuple]:
    """A block as it will be stored (scores float32, maps in ``map_dtype``), or the problems that stop it: one
    line per row (``where_of(row)`` names its file or case id) holding a value that is not finite, or that the
    stored dtype cannot hold (it would become inf, with a NumPy warning), or, for ``score_kind`` "probability",
    a finite score outside [0, 1] (logits declared as probabilities: named in the source's terms, before the
    store is written, not as a row of the unwritten store)."""
    scores, maps = np.asarray(scores), np.asarray(maps)
    problems: list[Problem] = []
    if score_kind == "probability" and scores.dtype.kind in "fiu" and scores.size:
        flat = scores.reshape(scores.shape[0], -1).astype(np.float64)
        with np.errstate(invalid="ignore"):
            outside = (np.isfinite(flat) & ((flat < 0) | (flat > 1))).any(axis=1)
        for r in np.flatnonzero(outside):
            v = flat[r][np.isfinite(flat[r]) & ((flat[r] < 0) | (flat[r] > 1))][0]
            problems.append(Problem(where_of(start + int(r)), f"score {v:.6g} is outside [0, 1] but score_kind is "
                                    "'probability'; logits (unbounded scores) need score_kind 'logit'"))
    for label, values, dtype in (("scores", scores, np.dtype(np.float32)), ("maps", maps, np.dtype(map_dtype))):
        if values.dtype.kind != "f":
            continue
        top = np.finfo(dtype).max
        flat = values.reshape(values.shape[0], -1)
        with np.errstate(invalid="ignore"):
            finite = np.isfinite(flat)
            nonfinite, beyond = (~finite).any(axis=1), (finite & (np.abs(flat) > top)).any(axis=1)
        hint = "" if label == "scores" or map_dtype == "float32" else "; --map-dtype float32 holds up to 3.4e38"
        for r in np.flatnonzero(nonfinite | beyond):
            what = (["non-finite values (NaN, inf)"] if nonfinite[r] else []) + (
                [f"values beyond {dtype.name}'s range (±{top:.5g}){hint}"] if beyond[r] else [])
            problems.append(Problem(where_of(start + int(r)), f"{label} hold {' and '.join(what)}"))
    if problems:
        return problems, ()
    return [], (scores.astype(np.float32), maps.astype(map_dtype))


def _gt_problems(converted: Converted, gt, out: Path) -> list[Problem]:
    """What the source lacks of the ground truth (datasets, cases, classes, phrase rows), from its case and phrase
    ids alone, before any block is read, so it is listed with the problems of the blocks; worded as
    :func:`~xbench.schemas.submission.validate_submission` words them."""
    from xbench.schemas.ground_truth import GroundTruth, read_ground_truth
    from xbench.schemas.queries import UNSUPPORTED_ATTR
    from xbench.schemas.submission import no_match_text

    truth = gt if isinstance(gt, GroundTruth) else read_ground_truth(gt)
    problems: list[Problem] = []
    for name, ds in truth.datasets.items():
        w = f"{out}/{name}"
        spec = converted.specs.get(name)
        if spec is None:
            problems.append(Problem(w, "dataset of the ground truth is missing from the submission"))
            continue
        gt_ids = [str(c) for c in ds.case_id.tolist()]
        have = set(map(str, spec.case_ids))
        missing = sorted(c for c in gt_ids if c not in have)
        if missing and len(missing) == len(gt_ids):
            problems.append(Problem(f"{w}/case_id", no_match_text(len(have), min(have), missing[0], of=len(gt_ids))))
        elif missing:
            problems.append(Problem(f"{w}/case_id", f"{len(missing)} case(s) of the ground truth are missing, e.g. "
                                                    f"{', '.join(map(repr, missing[:3]))}"))
        lacking = [c for c in ds.classes if c not in spec.classes]
        problems += _listed(w, "class", lacking, _class_hint([c for c in spec.classes if c not in ds.classes]))
        if ds.queries is None or spec.phrases_unsupported:
            continue
        if not len(spec.query_ids):
            problems.append(Problem(w, f"the ground truth has {len(ds.queries.id)} phrase rows but the submission has "
                                       f"no query arrays (nor the attribute '{UNSUPPORTED_ATTR}')"))
            continue
        have_q = set(map(str, spec.query_ids))
        gone = sorted(q for q in map(str, ds.queries.id.tolist()) if q not in have_q)
        if gone:
            problems.append(Problem(f"{w}/query_id", f"{len(gone)} phrase row(s) of the ground truth are missing, e.g. "
                                                     f"{', '.join(map(repr, gone[:3]))}"))
    return problems


def _write(out, converted: Converted, cases_per_block, map_dtype, progress, gt) -> Path:
    """Write ``converted`` into a hidden folder, validate it (against ``gt`` when given), rename it to ``out``."""
    out = Path(out)
    if os.path.lexists(out):
        raise InvalidStoreError(Problem(str(out), "already exists; remove it or choose another --out"))
    out.parent.mkdir(parents=True, exist_ok=True)
    folder = _work_dir(out)
    tmp = folder / out.name
    try:
        writer = SubmissionWriter.create(
            tmp, model=converted.model, method=converted.method, provenance=_provenance(converted.provenance),
            datasets=converted.specs, cases_per_block=cases_per_block, map_dtype=map_dtype,
        )
        # Every block is read and checked even after a problem (then nothing more is written): every problem of
        # the source is listed in one run, the first MAX_LISTED one a line, the rest counted.
        problems = Problems(_gt_problems(converted, gt, out) if gt is not None else [])
        for name, spec in converted.specs.items():
            phrases = len(spec.query_ids) and not spec.phrases_unsupported
            for phrase, todo, rows, read, write in (
                    (False, writer.blocks_todo, writer.block_rows, converted.blocks, writer.write_block),
                    (True, writer.query_blocks_todo, writer.query_block_rows, converted.phrase_blocks,
                     writer.write_query_block)):
                if phrase and not phrases:
                    continue
                for b in todo(name):
                    start, stop = rows(name, b)
                    where_of = lambda r, name=name, phrase=phrase: converted.where_of(name, phrase, r)  # noqa: E731
                    kind = "logit" if phrase else converted.specs[name].score_kind  # phrase scores: recorded, unbounded
                    try:
                        bad, block = _stored(*read(name, start, stop), map_dtype, where_of, start, kind)
                    except PartialBlock as exc:  # files that cannot be read, each its own line; the others checked
                        bad = list(exc.problems) + _stored(*exc.block, map_dtype, where_of, start, kind)[0]
                        bad, block = sorted(bad, key=lambda p: p.where), ()  # in file order
                    except InputError as exc:  # a block that cannot be read
                        bad, block = list(exc.problems), ()
                    problems.extend(bad)
                    if not problems:
                        write(name, b, *block)
                    _check_stop()
                    if progress and not phrase:
                        progress(stop - start)
        problems.raise_if_any()
        writer.finish()
        problems = validate_submission(tmp, gt)
        if problems:
            raise InvalidStoreError(problems)
        _check_stop()  # the last word before publishing: a swallowed interrupt still publishes nothing
        if os.path.lexists(out):
            raise InvalidStoreError(Problem(str(out), "appeared while converting; remove it or choose another --out"))
        os.rename(tmp, out)
    except InputError as exc:
        raise _user_terms(exc, tmp, out) from None
    finally:  # the watchdog's exit (--timeout, --max-memory) and SIGTERM remove it too (schemas/paths.py)
        _remove(folder)
    return out
