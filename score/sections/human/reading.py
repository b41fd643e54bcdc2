"""The human ceiling's files: ``human.json``, each reader's ``reading.npz``, and a human folder (the output of
``xbench human``, possibly from elsewhere) read and checked as untrusted input."""
from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xbench.schemas.errors import InputError, Problem
from xbench.schemas.paths import is_reader_name

from xbench.score.sections.human.ceiling import ReaderPairs, ReaderReading, reader_pairs, with_hits

#: what ``xbench human`` writes at the top of its output folder
HUMAN_FILE = "human.json"


#: human.json's schema: 2 adds each reader's reading (READING_FILE) and the "chexlocalize" block
HUMAN_SCHEMA = 2


#: each reader's own pairs as CheXlocalize's eval.py scores them, beside its pair_counts.npz
READING_FILE = "reading.npz"


#: (CheXlocalize, masks) the reader's rows at the images' full resolution, against the ground truth's own file
NATIVE_READING_FILE = "reading_native.npz"


_READING_ARRAYS = ("case_id", "cls", "gt", "seg", "iou", "hit", "cases")


def save_reading(path: str | os.PathLike, r: ReaderReading) -> None:
    np.savez_compressed(path, **{k: getattr(r, k) for k in _READING_ARRAYS})


def _reading_problems(z: Mapping[str, np.ndarray], where: str) -> list[str]:
    missing = [k for k in _READING_ARRAYS if k not in z]
    if missing:
        return [f"missing array(s) {', '.join(missing)}"]
    a = {k: z[k] for k in _READING_ARRAYS}
    if any(v.ndim != 1 for v in a.values()):
        return ["every array must be one-dimensional"]
    n = len(a["case_id"])
    if any(len(a[k]) != n for k in ("cls", "gt", "seg", "iou", "hit")):
        return ["case_id, cls, gt, seg, iou and hit must have one length"]
    kinds = {"case_id": "U", "cls": "U", "cases": "U", "gt": "b", "seg": "b", "iou": "f", "hit": "f"}
    bad = [k for k, kind in kinds.items() if a[k].dtype.kind != kind]
    if bad:
        return [f"array(s) {', '.join(bad)} of the wrong type"]
    out = []
    if not np.all(a["gt"] | a["seg"]):
        out.append("a row where neither the ground truth nor the reader has a region")
    iou, hit, gt = a["iou"], a["hit"], a["gt"]
    if not np.all((iou >= 0) & (iou <= 1)) or np.any(iou[~(gt & a["seg"])] != 0):
        out.append("iou must be in [0, 1], and 0 where one of the two regions is empty")
    if np.any(np.isnan(hit) != ~gt) or not np.all((hit[gt] == 0) | (hit[gt] == 1)):
        out.append("hit must be 0 or 1 on the ground truth's rows and NaN elsewhere")
    cases = a["cases"]
    if cases.size and (np.any(cases[1:] <= cases[:-1])):
        out.append("cases must be sorted and unique")
    if n and not np.all(np.isin(a["case_id"], cases)):
        out.append("a row's case is not among the reader's cases")
    keys = np.char.add(np.char.add(a["case_id"], "\0"), a["cls"])
    if np.unique(keys).size != n:
        out.append("a (case, class) pair is listed twice")
    return out


def load_reading(path: str | os.PathLike, *, max_bytes: int = 1024 * 2**20) -> ReaderReading:
    """Read and check a reader's ``reading.npz`` (untrusted: :func:`xbench.schemas.inputs.load_npz`, bounded
    before inflating, no pickle). Raises InputError."""
    from xbench.schemas.inputs import load_npz

    z = load_npz(path, where=str(path), max_bytes=max_bytes)
    arrays = {k: np.asarray(v) for k, v in z.items() if k in _READING_ARRAYS}
    problems = _reading_problems(arrays, str(path))
    if problems:
        raise InputError([Problem(str(path), m) for m in problems])
    return ReaderReading(**{k: arrays[k] for k in _READING_ARRAYS})


# -- reading a human folder (untrusted: the output of xbench human, possibly from elsewhere) ------------------
@dataclass
class HumanSource:
    """A human folder read and checked: {dataset: {reader: ReaderPairs}} and what human.json says."""

    folder: Path
    sha256: str
    info: dict
    readers: dict[str, dict[str, ReaderPairs]]
    classes: dict[str, list[str]]
    readings: dict[str, dict[str, ReaderReading]] | None = None
    natives: dict[str, dict[str, ReaderReading]] | None = None


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
        return True
    except ValueError:
        return False


def load_human(folder: str | os.PathLike) -> HumanSource:
    """Read ``FOLDER/human.json`` and each reader's ``pair_counts.npz`` it lists (``readers/<name>/pair_counts.npz``).

    Raises :class:`InputError` (one problem a line) for a missing or malformed file, a reader name that is not a
    plain folder name, a file outside the folder (a link leaving it), or counts that do not hold the dataset."""
    from xbench.schemas.inputs import DEFAULT, parse_json, read_bytes

    from xbench.score.sections.pair_counts import read_counts_file

    folder = Path(folder)
    path = folder / HUMAN_FILE
    if not folder.is_dir():
        raise InputError([Problem(str(folder), "--human must be the output folder of `xbench human` (no such folder)")])
    if not path.is_file() or not _inside(path, folder):
        raise InputError([Problem(str(path), "no human.json here; --human takes the output folder of `xbench human`")])
    raw = read_bytes(path, max_bytes=DEFAULT.max_bytes)  # once: the bytes parsed are the bytes hashed
    data = parse_json(raw, str(path))
    problems: list[Problem] = []
    info = data.get("xbench") if isinstance(data, dict) else None
    datasets = data.get("datasets") if isinstance(data, dict) else None
    if not isinstance(info, dict) or info.get("kind") != "human-ceiling" or not isinstance(datasets, dict) or not datasets:
        raise InputError([Problem(str(path), 'not a human.json of `xbench human` (expected {"xbench": {"kind": '
                                             '"human-ceiling", ...}, "datasets": {...}})')])
    if info.get("schema") != HUMAN_SCHEMA:
        raise InputError([Problem(str(path), f"written by another version of `xbench human` (schema "
                                             f"{info.get('schema')!r}, this one reads {HUMAN_SCHEMA}: each reader's "
                                             f"{READING_FILE}); run xbench human again")])
    readers: dict[str, dict[str, ReaderPairs]] = {}
    readings: dict[str, dict[str, ReaderReading]] = {}
    natives: dict[str, dict[str, ReaderReading]] = {}
    classes: dict[str, list[str]] = {}
    for name, entry in datasets.items():
        names = entry.get("readers") if isinstance(entry, dict) else None
        if not isinstance(names, list) or not names or len(names) > 10_000:
            problems.append(Problem(f"{path}: {name}", "readers must be a non-empty list of names"))
            continue
        if len(set(map(str, names))) != len(names):
            problems.append(Problem(f"{path}: {name}", "a reader is listed twice"))
            continue
        got = {}
        for r in names:
            if not is_reader_name(r):  # the definition xbench human writes by
                problems.append(Problem(f"{path}: {name}", f"reader name {r!r} is not a plain folder name "
                                                           "(letters, digits, _ . -)"))
                continue
            counts_path = folder / "readers" / r / "pair_counts.npz"
            if not counts_path.is_file() or not _inside(counts_path, folder):
                problems.append(Problem(str(counts_path), "missing (or a link leaving the human folder)"))
                continue
            try:
                counts, _ = read_counts_file(counts_path)
            except InputError as exc:
                problems.extend(exc.problems)
                continue
            if name not in counts:
                problems.append(Problem(str(counts_path), f"holds no counts of dataset {name!r}"))
                continue
            reading_path = folder / "readers" / r / READING_FILE
            if not reading_path.is_file() or not _inside(reading_path, folder):
                problems.append(Problem(str(reading_path), "missing (or a link leaving the human folder)"))
                continue
            try:
                reading = load_reading(reading_path)
                got[r] = with_hits(reader_pairs(counts[name]), reading, str(reading_path))
            except InputError as exc:
                problems.extend(exc.problems)
                continue
            native_path = folder / "readers" / r / NATIVE_READING_FILE
            if native_path.exists() or native_path.is_symlink():
                if not native_path.is_file() or not _inside(native_path, folder):
                    problems.append(Problem(str(native_path), "not a file inside the human folder"))
                    continue
                try:
                    natives.setdefault(str(name), {})[r] = load_reading(native_path)
                except InputError as exc:
                    problems.extend(exc.problems)
                    continue
            readings.setdefault(str(name), {})[r] = reading
            classes.setdefault(name, list(counts[name].classes))
        readers[str(name)] = got
    if problems:
        raise InputError(problems)
    for name, got in natives.items():
        if set(got) != set(readings.get(name, {})):
            problems.append(Problem(str(folder), f"{NATIVE_READING_FILE} is there for some readers of {name} only"))
    if problems:
        raise InputError(problems)
    return HumanSource(folder, hashlib.sha256(raw).hexdigest(), info, readers, classes, readings,
                       natives)
