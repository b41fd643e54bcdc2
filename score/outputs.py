"""Write a :class:`~xbench.score.scoring.ScoreResult` to a folder, atomically.

The whole folder is built under a hidden name beside ``out_dir`` and swapped in at the end in one step
(:class:`xbench.schemas.paths.PublishedDir`), so a reader sees the previous run's files or this run's, never a
mix, and a failed or killed run leaves the previous folder as it was (its work folder is removed by the next
run). Files::

    xbench-output.json    marks the folder as XBench's (an existing folder without it is not replaced)

    metrics.json          the contract's layout (plus "ci95", "tau_*"; "aggregates" with grand-challenge)
    pairs.parquet         one row per labelled (case, class) pair (see scoring.pairs_table), streamed
    pair_counts.npz       per-pair count arrays (see xbench.score.counts)
    table*.csv / *.md     the paper's tables (see xbench.score.tables)
    scores.json           with format "codabench": a flat {key: number} mapping

Formats: ``"xbench"`` (always), ``"grand-challenge"`` (adds ``aggregates``: a flat mapping of the overall
and per-dataset summary values, for a leaderboard jsonpath such as ``aggregates.pointing_game``, each with
its 95 % bootstrap interval as ``<key>_ci_low``/``<key>_ci_high`` and the interval's half-width as
``<key>_error``, for the platform's ``score_error_jsonpath``; and ``case``: the per-case values, see
:func:`case_scores`) and ``"codabench"`` (``scores.json`` with the same flat keys). Null values are left
out of those flat mappings, because both platforms expect numbers.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from xbench.schemas.paths import PublishedDir, check_output, write_marker

from .counts import save_pair_counts
from .scoring import write_pairs_parquet

__all__ = ["FORMATS", "case_scores", "flat_scores", "prefetch_writers", "write_into", "write_outputs"]

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


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def flat_scores(metrics: dict, *, intervals: bool = False) -> dict[str, float]:
    """{"<key>": overall value, "<dataset>_<key>": dataset value} for every defined summary value.

    With ``intervals``, each value that has a 95 % bootstrap interval is followed by ``<key>_ci_low``,
    ``<key>_ci_high`` and ``<key>_error``, the interval's half-width: the platforms show one error number
    beside a score (grand-challenge's ``score_error_jsonpath``), and the percentile interval need not be
    symmetric about the point, so the half-width is the honest single number; the bounds are there too.
    """
    scopes = [("", metrics.get("overall", {}), metrics.get("ci95") or {})]
    scopes += [(f"{d}_", ds.get("summary", {}), ds.get("ci95") or {}) for d, ds in metrics.get("datasets", {}).items()]
    out: dict[str, float] = {}
    for prefix, values, cis in scopes:
        for k, v in values.items():
            if not _number(v):
                continue
            out[prefix + k] = v
            ci = cis.get(k) if intervals else None
            if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_number(x) for x in ci):
                lo, hi = ci
                out[f"{prefix}{k}_ci_low"], out[f"{prefix}{k}_ci_high"] = lo, hi
                out[f"{prefix}{k}_error"] = (hi - lo) / 2
    return out


def case_scores(counts, per_pair) -> dict[str, dict[str, dict[str, float | int | bool]]]:
    """grand-challenge's per-case layout: {"<dataset>/<case id>": {"<class>": values}} for every labelled or
    localised (case, class) pair (the rows of pairs.parquet), where values holds ``label`` (1/0/-1),
    ``probability`` and, for a pair with a region, ``hit`` and the per-pair value of each metric with a
    pairs-table column at its threshold (``dice_fixed``, ``dice_best`` ...); undefined values are left out.
    About 100 bytes of JSON per pair."""
    from .scoring import _DatasetPairs

    out: dict[str, dict] = {}
    for name in sorted(counts):
        dc = counts[name]
        rows, cols, values = _DatasetPairs(dc, per_pair.get(name, {})).rows()
        ids, classes = [str(c) for c in dc.case_id], [str(c) for c in dc.classes]
        metric_keys = [k for k in values if k not in ("label", "probability", "predicted", "has_region",
                                                       "region_pixels", "hit")]
        for j, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
            entry = {"label": int(values["label"][j])}
            p = float(values["probability"][j])
            if math.isfinite(p):
                entry["probability"] = p
            if values["has_region"][j]:
                entry["hit"] = bool(values["hit"][j])
                for k in metric_keys:
                    v = float(values[k][j])
                    if math.isfinite(v):
                        entry[k] = v
            out.setdefault(f"{name}/{ids[r]}", {})[classes[c]] = entry
    return out


def prefetch_writers() -> threading.Thread:
    """Import pyarrow's Parquet writer (what writing pairs.parquet needs, ~0.15 s of one core) on a daemon
    thread, for a caller that is about to score and then write: the import then overlaps scoring instead of
    delaying the writing. Nothing the scorer writes needs pandas (the pairs file is built with pyarrow
    alone, the tables with the standard library). A failed import is left to the writer, which imports it
    again and reports it."""

    def run():
        try:
            import pyarrow.parquet  # noqa: F401
        except Exception:  # pragma: no cover - the writer's own import raises it
            pass

    t = threading.Thread(target=run, name="xbench-prefetch-writers", daemon=True)
    t.start()
    return t


def write_outputs(result, out_dir: str | os.PathLike, *, formats: Iterable[str] = ("xbench",),
                  label: str | None = None) -> list[Path]:
    """Write ``result`` into ``out_dir`` (replacing the folder as a whole); returns the final paths.

    ``label`` names the row of the tables (default: the submission's model name). Raises
    :class:`~xbench.schemas.paths.UnsafeOutputError` when ``out_dir`` is, holds or lies inside the
    submission or ground truth the result records, or is a folder XBench did not write.
    """
    out = Path(out_dir)
    check_output(out, _recorded_inputs(result.metrics))
    with PublishedDir(out) as tmp:
        names = [p.name for p in write_into(result, tmp, formats=formats, label=label)]
        write_marker(tmp, "xbench-score")
    return [out / n for n in names]


def _recorded_inputs(metrics: dict) -> dict:
    inputs = metrics.get("xbench", {}).get("inputs", {}) or {}
    return {"the submission": inputs.get("submission"), "the ground truth": inputs.get("gt"),
            "the images store": inputs.get("images")}


def write_into(result, folder: str | os.PathLike, *, formats: Iterable[str] = ("xbench",),
               label: str | None = None) -> list[Path]:
    """Write the files of ``result`` into the existing (new, empty) ``folder``; returns their paths.

    Not atomic by itself: callers build in a work folder and publish it (see :func:`write_outputs`).
    """
    formats = tuple(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        from .errors import ScoreInputError

        raise ScoreInputError(f"unknown output format(s) {', '.join(map(str, bad))}; choose from {', '.join(FORMATS)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    metrics = _jsonable(result.metrics)
    if "grand-challenge" in formats:
        metrics["aggregates"] = flat_scores(metrics, intervals=True)
        metrics["case"] = case_scores(result.counts, result.per_pair)
    if label is None:
        label = str(metrics.get("xbench", {}).get("submission", {}).get("model") or "submission")
    paths = [folder / "metrics.json"]
    paths[0].write_text(json.dumps(metrics, indent=2, allow_nan=False) + "\n")
    write_pairs_parquet(folder / "pairs.parquet", result.counts, result.per_pair)
    save_pair_counts(folder / "pair_counts.npz", result.counts, getattr(result, "phrase_counts", None))
    paths += [folder / "pairs.parquet", folder / "pair_counts.npz"]
    from .tables import write_tables

    paths += write_tables({label: metrics}, folder)
    if "codabench" in formats:
        paths.append(folder / "scores.json")
        paths[-1].write_text(json.dumps(flat_scores(metrics, intervals=True), indent=2, allow_nan=False) + "\n")
    return paths
