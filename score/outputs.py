"""Write a :class:`~xbench.score.scoring.ScoreResult` to a folder, atomically.

Files (all built in a temporary folder beside ``out_dir``, then each moved into place with
:func:`os.replace`, so a reader never sees a half-written file and a failed run leaves the old ones)::

    metrics.json          the contract's layout (plus "ci95", "tau_*"; "aggregates" with grand-challenge)
    pairs.parquet         one row per labelled (case, class) pair (see scoring.pairs_table), streamed
    pair_counts.npz       per-pair count arrays (see xbench.score.counts)
    table*.csv / *.md     the paper's tables (see xbench.score.tables)
    scores.json           with format "codabench": a flat {key: number} mapping

Formats: ``"xbench"`` (always), ``"grand-challenge"`` (adds ``aggregates``: a flat mapping of the overall
and per-dataset summary values, for a leaderboard jsonpath such as ``aggregates.pointing_game``) and
``"codabench"`` (``scores.json`` with the same flat keys). Null values are left out of those flat
mappings, because both platforms expect numbers.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .counts import save_pair_counts
from .scoring import write_pairs_parquet

__all__ = ["FORMATS", "flat_scores", "write_outputs"]

FORMATS = ("xbench", "grand-challenge", "codabench")


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def flat_scores(metrics: dict) -> dict[str, float]:
    """{"<key>": overall value, "<dataset>_<key>": dataset value} for every defined summary value."""
    out = {k: v for k, v in metrics.get("overall", {}).items() if isinstance(v, (int, float))}
    for d, ds in metrics.get("datasets", {}).items():
        out.update({f"{d}_{k}": v for k, v in ds.get("summary", {}).items() if isinstance(v, (int, float))})
    return out


def write_outputs(result, out_dir: str | os.PathLike, *, formats: Iterable[str] = ("xbench",),
                  label: str | None = None) -> list[Path]:
    """Write ``result`` into ``out_dir`` (created if needed); returns the final paths.

    ``label`` names the row of the tables (default: the submission's model name).
    """
    formats = tuple(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"unknown output format(s) {bad}; choose from {', '.join(FORMATS)}.")
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    metrics = _jsonable(result.metrics)
    if "grand-challenge" in formats:
        metrics["aggregates"] = flat_scores(metrics)
    if label is None:
        label = str(metrics.get("xbench", {}).get("submission", {}).get("model") or "submission")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, allow_nan=False) + "\n")
        write_pairs_parquet(tmp / "pairs.parquet", result.counts, result.per_pair)
        save_pair_counts(tmp / "pair_counts.npz", result.counts)
        from .tables import write_tables  # pandas: imported only when writing

        write_tables({label: metrics}, tmp)
        if "codabench" in formats:
            (tmp / "scores.json").write_text(json.dumps(flat_scores(metrics), indent=2, allow_nan=False) + "\n")
        out.mkdir(parents=True, exist_ok=True)
        final = []
        for f in sorted(tmp.iterdir()):
            os.replace(f, out / f.name)
            final.append(out / f.name)
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
