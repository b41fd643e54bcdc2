"""Reading earlier score outputs (one directory per submission) for the report.

A score output directory holds ``metrics.json`` (the contract layout), and usually
``pairs.parquet`` (one row per case and class) and ``pair_counts.npz`` (per-pair threshold counts).
Only ``metrics.json`` is required: tables need nothing else; figures and comparisons that need the
per-pair files are skipped, with the reason recorded, when those files are absent.
"""
from __future__ import annotations

from ...schemas.errors import InputError

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "Result",
    "ReportInputError",
    "load_result",
    "load_results",
    "read_pair_counts",
    "read_phrase_counts",
]


#: submission methods of xbench-convert's boxes and points (schemas/convert_boxes.py): labelled on the leaderboard
MARK_METHODS = ("boxes", "points")


class ReportInputError(InputError, ValueError):
    """A score output cannot be used; ``problems`` lists one message per problem."""


@dataclass
class Result:
    """One scored submission.

    name: display name (the model, made unique); path: the score output directory;
    metrics: the parsed metrics.json; pairs: pandas DataFrame or None; counts: {dataset:
    xbench.score.counts.DatasetCounts} from pair_counts.npz, or None; case_ids: dataset -> (N,) case ids
    (from pair_counts.npz, else from pairs.parquet in first-seen order), used to pair cases.
    """

    name: str
    path: Path
    metrics: dict
    pairs: object = None
    counts: dict | None = None
    case_ids: dict = field(default_factory=dict)
    #: {dataset: xbench.score.counts.PhraseCounts} from pair_counts.npz ({} when it holds no phrase rows)
    phrase_counts: dict = field(default_factory=dict)

    @property
    def datasets(self) -> list[str]:
        return list(self.metrics.get("datasets", {}))

    @property
    def gt_sha256(self) -> str | None:
        return self.metrics.get("xbench", {}).get("gt_sha256")

    @property
    def submission_attrs(self) -> dict:
        sub = self.metrics.get("xbench", {}).get("submission", {})
        return sub if isinstance(sub, dict) else {}

    def inputs(self) -> dict:
        """Input paths recorded by the scorer (``xbench.inputs``), or {}."""
        x = self.metrics.get("xbench", {})
        found = dict(x.get("inputs", {}) or {})
        for key in ("submission_path", "gt_path", "images_path"):
            if key in x and key.split("_")[0] not in found:
                found[key.split("_")[0]] = x[key]
        return found

    def grid(self, dataset: str) -> tuple[int, int]:
        """The ground-truth grid (H, W) of a dataset; 224 x 224 when metrics.json does not say."""
        g = self.metrics["datasets"][dataset].get("grid")
        return (int(g[0]), int(g[1])) if g else (224, 224)


def read_pair_counts(path: Path) -> dict:
    """Read pair_counts.npz (the scorer's layout, see xbench.score.counts) into {dataset: DatasetCounts}."""
    from xbench.score.counts import load_pair_counts

    try:
        return load_pair_counts(path)
    except (KeyError, ValueError, OSError) as err:
        raise ReportInputError([f"{path}: not a readable pair_counts.npz ({err})"]) from None


def read_phrase_counts(path: Path) -> dict:
    """The phrase counts of pair_counts.npz ({dataset: PhraseCounts}; {} in a file without phrase rows)."""
    from xbench.score.counts import load_phrase_counts

    try:
        return load_phrase_counts(path)
    except (KeyError, ValueError, OSError) as err:
        raise ReportInputError([f"{path}: not a readable pair_counts.npz ({err})"]) from None


def load_result(path: str | Path, *, name: str | None = None) -> Result:
    """Load one score output directory. Raises ReportInputError (one message per problem)."""
    path = Path(path)
    problems: list[str] = []
    mpath = path / "metrics.json"
    if not path.is_dir():
        raise ReportInputError([f"{path}: not a directory (expected a score output with metrics.json)"])
    if not mpath.is_file():
        raise ReportInputError([f"{path}: no metrics.json (is this a score output directory?)"])
    try:
        metrics = json.loads(mpath.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ReportInputError([f"{mpath}: cannot read JSON ({err})"]) from None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("datasets"), dict):
        problems.append(f"{mpath}: no 'datasets' object (not an XBench metrics.json)")
    elif metrics.get("xbench", {}).get("schema") not in (None, 1):
        problems.append(f"{mpath}: schema {metrics['xbench']['schema']!r} is not supported (expected 1)")
    if problems:
        raise ReportInputError(problems)
    pairs = None
    ppath = path / "pairs.parquet"
    if ppath.is_file():
        import pandas as pd

        pairs = pd.read_parquet(ppath)
    counts, case_ids, phrase_counts = None, {}, {}
    cpath = path / "pair_counts.npz"
    if cpath.is_file():
        counts = read_pair_counts(cpath)
        phrase_counts = read_phrase_counts(cpath)
        case_ids = {d: np.asarray(dc.case_id, dtype=str) for d, dc in counts.items()}
    if pairs is not None:
        for d, sub in pairs.groupby("dataset", sort=False):
            case_ids.setdefault(str(d), np.asarray(sub["case_id"].drop_duplicates(), dtype=str))
    if name is None:
        attrs = metrics.get("xbench", {}).get("submission", {}) or {}
        name = str(attrs.get("model") or path.name)
        if attrs.get("method") in MARK_METHODS:  # converted boxes/points, not maps: the leaderboard says so
            name = f"{name} ({attrs['method']})"
    return Result(name=name, path=path, metrics=metrics, pairs=pairs, counts=counts, case_ids=case_ids,
                  phrase_counts=phrase_counts)


def load_results(paths) -> list[Result]:
    """Load several score outputs; display names are made unique (model, then model [dir])."""
    results: list[Result] = []
    problems: list[str] = []
    for p in paths:
        try:
            results.append(load_result(p))
        except ReportInputError as err:
            problems.extend(err.problems)
    if problems:
        raise ReportInputError(problems)
    if not results:
        raise ReportInputError(["no score outputs given"])
    names = [r.name for r in results]
    for r in results:
        if names.count(r.name) > 1:
            method = r.submission_attrs.get("method")
            r.name = f"{r.name} ({method})" if method else r.name
    names = [r.name for r in results]
    for r in results:
        if names.count(r.name) > 1:
            r.name = f"{r.name} [{r.path.name}]"
    return results
