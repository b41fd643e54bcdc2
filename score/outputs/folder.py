"""Write a :class:`~xbench.score.scoring.ScoreResult` to a folder, atomically.

The whole folder is built under a hidden name beside ``out_dir`` and swapped in at the end in one step
(:class:`xbench.schemas.paths.PublishedDir`), so a reader sees the previous run's files or this run's, never a
mix, and a failed or killed run leaves the previous folder as it was (its work folder is removed by the next
run). Files::

    xbench-output.json    marks the folder as XBench's (an existing folder without it is not replaced)

    metrics.json          the contract's layout (plus "ci95", "tau_*"; "aggregates" with grand-challenge)
    pairs.parquet         one row per labelled (case, class) pair (see :func:`pairs_table`), streamed
    pair_counts.npz       per-pair count arrays (see xbench.score.kernels.counts)
    table*.csv / *.md     the paper's tables (see xbench.score.outputs.tables)
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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from xbench.schemas.paths import PublishedDir, check_output, write_marker

from xbench.score.metrics import registry as R
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.sections.pair_counts import save_pair_counts

if TYPE_CHECKING:  # pandas is imported where a table is built: writing pairs.parquet never needs it (0.3-0.5 s)
    import pandas as pd

__all__ = ["FORMATS", "PAIR_COLUMNS", "case_scores", "flat_scores", "pair_table_columns", "pairs_table",
           "prefetch_writers", "write_into", "write_outputs", "write_pairs_parquet"]

FORMATS = ("xbench", "grand-challenge", "codabench")


# -------------------------------------------------------------------- the pairs table (pairs.parquet)
_PAIR_BASE = ["dataset", "case_id", "class", "label", "probability", "predicted", "has_region", "region_pixels", "hit"]
#: The pairs-table columns of the contract's metrics; :func:`pair_table_columns` adds any registered later.
PAIR_COLUMNS = _PAIR_BASE + ["dice_fixed", "iou_fixed", "dice_best", "iou_best"]


def pair_table_columns() -> list[str]:
    """The pairs-table columns: the pair's identity and counts, then one per registered metric with
    ``pair_column`` (its per-pair value at the metric's threshold; NaN where the metric does not select the pair)."""
    return _PAIR_BASE + list(R.pair_columns())


class _DatasetPairs:
    """The pairs-table rows of one dataset, built for any range of its cases (rows run by case, then class)."""

    def __init__(self, dc: DatasetCounts, per_pair: Mapping[int, dict]):
        self.dc = dc
        sel = np.zeros(dc.labels.shape, bool)
        cols = np.flatnonzero(dc.supported)
        sel[:, cols] = dc.labels[:, cols] != -1
        sel[dc.pair_case, dc.pair_class] |= dc.supported[dc.pair_class]
        self.selected = sel
        # the row in the pair arrays of each (case, class), -1 where it has no region
        self.pair_of = np.full(dc.labels.shape, -1, np.int64)
        self.pair_of[dc.pair_case, dc.pair_class] = np.arange(dc.pair_case.size)
        self.values = {key: np.full(dc.pair_case.size, np.nan) for key in R.pair_columns()}
        for pp in per_pair.values():
            if pp:
                for key in self.values:
                    self.values[key][pp["idx"]] = pp[key]

    def rows(self, lo: int = 0, hi: int | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """(case rows, class columns, numeric columns) of the selected pairs of cases ``lo..hi-1``."""
        dc = self.dc
        r, c = np.nonzero(self.selected[lo:hi])
        r += lo
        k = self.pair_of[r, c]
        has = k >= 0
        safe = np.where(has, k, 0)

        def pick(v, fill):  # a pair column where the row has a region; a dataset without any region has none
            return np.where(has, v[safe], fill) if v.size else np.full(r.size, fill, dtype=np.result_type(v, fill))

        cols = {"label": dc.labels[r, c].astype(np.int8), "probability": dc.prob[r, c],
                "predicted": dc.prob[r, c] >= 0.5, "has_region": has,
                "region_pixels": pick(dc.region_pixels, 0).astype(np.int64), "hit": has & pick(dc.hit, False)}
        cols.update({key: pick(v, np.nan) for key, v in self.values.items()})
        return r, c, cols


def _frame(data: dict) -> pd.DataFrame:
    import pandas as pd

    data["hit"] = pd.arrays.BooleanArray(data["hit"], ~data["has_region"])
    return pd.DataFrame(data, columns=pair_table_columns(), copy=False)


def pairs_table(counts: Mapping[str, DatasetCounts], per_pair: Mapping[str, Mapping[int, dict]]) -> pd.DataFrame:
    """One row per (case, class) pair of the supported classes that is labelled or has a region.

    Columns :data:`PAIR_COLUMNS`: dataset, case_id, class, label (1/0/-1), probability, predicted
    (p >= 0.5), has_region, region_pixels, hit, dice_fixed, iou_fixed, dice_best, iou_best (grounding
    columns are empty for pairs without a region; dice_best/iou_best use the class's chosen thresholds).
    ``dataset``, ``case_id`` and ``class`` are categoricals: a full benchmark has ~70,000 rows per 10,000
    cases, and string columns would cost ~90 B a row. :func:`write_pairs_parquet` writes the same rows
    without holding them all.
    """
    import pandas as pd

    names = sorted(counts)
    if not names:
        return pd.DataFrame(columns=pair_table_columns())
    parts = [(name, _DatasetPairs(counts[name], per_pair.get(name, {})).rows()) for name in names]
    data = {k: np.concatenate([cols[k] for _, (_, _, cols) in parts]) for k in parts[0][1][2]}
    # categories must be unique: case ids (and class names) may repeat across datasets
    ids = np.concatenate([np.asarray(counts[name].case_id, dtype=str)[r] for name, (r, _, _) in parts])
    classes = np.concatenate([np.asarray(counts[name].classes, dtype=str)[c] for name, (_, c, _) in parts])
    data["dataset"] = pd.Categorical.from_codes(np.repeat(np.arange(len(names)), [r.size for _, (r, _, _) in parts]),
                                                categories=names)
    data["case_id"] = pd.Categorical(ids)
    data["class"] = pd.Categorical(classes)
    return _frame(data)


#: NumPy dtypes of the pairs table's non-label columns (a registered metric's column is float64), read by the
#: Parquet schema, the pandas metadata and the column builder alike; "boolean" is pandas' nullable bool (bool
#: with nulls in Arrow), so ``hit`` (empty without a region) reads back as one.
_PAIR_DTYPES = {"label": "int8", "probability": "float64", "predicted": "bool", "has_region": "bool",
                "region_pixels": "int64", "hit": "boolean"}
#: The label columns, stored as dictionaries (int32 codes) and read back as categoricals.
_LABEL_COLUMNS = ("dataset", "case_id", "class")


def _pair_dtype(column: str) -> str:
    return _PAIR_DTYPES.get(column, "float64")


def _arrow_type(dtype: str):
    import pyarrow as pa

    return pa.bool_() if dtype == "boolean" else pa.from_numpy_dtype(np.dtype(dtype))


def _pandas_metadata(first_categories: Mapping[str, int]) -> bytes:
    """The ``pandas`` schema metadata pyarrow's ``Table.from_pandas`` writes for :func:`pairs_table`'s
    frames (no index; the label columns categorical, with the category counts of the first row group, as
    from_pandas records them), so ``pandas.read_parquet`` restores the same dtypes; built here so that writing
    needs no pandas import (0.3-0.5 s of one core)."""
    from importlib.metadata import PackageNotFoundError, version

    import pyarrow as pa

    cols = []
    for name in pair_table_columns():
        if name in _LABEL_COLUMNS:
            n = int(first_categories[name])
            codes = "int8" if n < 127 else "int16" if n < 32767 else "int32" if n < 2**31 - 1 else "int64"  # pandas' codes
            cols.append({"name": name, "field_name": name, "pandas_type": "categorical", "numpy_type": codes,
                         "metadata": {"num_categories": n, "ordered": False}})
        else:
            dtype = _pair_dtype(name)
            cols.append({"name": name, "field_name": name, "pandas_type": "bool" if dtype == "boolean" else dtype,
                         "numpy_type": dtype, "metadata": None})
    try:
        pandas_version = version("pandas")
    except PackageNotFoundError:  # pragma: no cover - pandas is a dependency of the scorer
        pandas_version = "2.0.0"
    meta = {"index_columns": [], "column_indexes": [], "columns": cols, "attributes": {},
            "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": pandas_version}
    return json.dumps(meta).encode()


def _pairs_schema(first_categories: Mapping[str, int]):
    import pyarrow as pa

    label = pa.dictionary(pa.int32(), pa.string())
    fields = [(k, label if k in _LABEL_COLUMNS else _arrow_type(_pair_dtype(k))) for k in pair_table_columns()]
    return pa.schema(fields, metadata={b"pandas": _pandas_metadata(first_categories)})


def _arrow_numbers(values: np.ndarray, dtype: str):
    """A pyarrow array of a 1-D numeric numpy array, wrapping its buffer. (``pyarrow.array`` would import
    pandas to check whether it was handed a pandas object: 0.3-0.5 s the scorer does not need.)"""
    values = np.ascontiguousarray(values, dtype=dtype)
    import pyarrow as pa

    return pa.Array.from_buffers(_arrow_type(dtype), values.size, [None, pa.py_buffer(values)])


def _arrow_bools(values: np.ndarray, valid: np.ndarray | None = None):
    """A pyarrow bool array (bit-packed, least significant bit first), null where ``valid`` is False."""
    import pyarrow as pa

    values = np.asarray(values, dtype=bool)
    bits = pa.py_buffer(np.packbits(values, bitorder="little"))
    if valid is None:
        return pa.Array.from_buffers(pa.bool_(), values.size, [None, bits])
    valid = np.asarray(valid, dtype=bool)
    mask = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), values.size, [mask, bits], null_count=int(values.size - valid.sum()))


def _arrow_strings(strings) -> object:
    """A pyarrow string array of Python strings (UTF-8 bytes and int32 offsets)."""
    import pyarrow as pa

    encoded = [str(x).encode("utf-8") for x in strings]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def _iter_pairs_arrow(counts: Mapping[str, DatasetCounts], per_pair: Mapping[str, Mapping[int, dict]], max_rows: int):
    """The rows of :func:`pairs_table`, in the same order, as pyarrow columns of about ``max_rows`` rows at a
    time (whole cases; each batch with its own categories): ({column: array}, {label column: categories})."""
    import pyarrow as pa

    for name in sorted(counts):
        dc = counts[name]
        ds = _DatasetPairs(dc, per_pair.get(name, {}))
        per_case = max(1, max_rows // max(1, dc.labels.shape[1]))
        for lo in range(0, max(dc.n_cases, 1), per_case):
            hi = min(dc.n_cases, lo + per_case)
            r, c, data = ds.rows(lo, hi)
            labels = {"dataset": (np.zeros(r.size, np.int32), [name]),
                      "case_id": (r - lo, np.asarray(dc.case_id[lo:hi], dtype=str).tolist()),
                      "class": (c, list(dc.classes))}
            cols = {k: pa.DictionaryArray.from_arrays(_arrow_numbers(codes, "int32"), _arrow_strings(cats))
                    for k, (codes, cats) in labels.items()}
            for k, v in data.items():
                dtype = _pair_dtype(k)
                if dtype == "boolean":  # null where the pair has no region
                    cols[k] = _arrow_bools(v, valid=data["has_region"])
                elif dtype == "bool":
                    cols[k] = _arrow_bools(v)
                else:
                    cols[k] = _arrow_numbers(v, dtype)
            yield cols, {k: len(cats) for k, (_, cats) in labels.items()}


def write_pairs_parquet(path: str | os.PathLike, counts: Mapping[str, DatasetCounts],
                        per_pair: Mapping[str, Mapping[int, dict]], *, max_rows: int = 1 << 16) -> None:
    """Write :func:`pairs_table` to a Parquet file one row group of ~``max_rows`` rows at a time.

    Memory holds one row group, not the table (about 80 B per labelled pair: ~55 MB at 10x the paper's
    scale). ``dataset``, ``case_id`` and ``class`` are dictionary columns, read back as categoricals, and
    ``pandas.read_parquet`` gives the dtypes of :func:`pairs_table` (the file carries pandas' metadata).
    Written with pyarrow alone: no pandas import.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = schema = None
    try:
        for cols, categories in _iter_pairs_arrow(counts, per_pair, max_rows):
            if writer is None:
                schema = _pairs_schema(categories)
                writer = pq.ParquetWriter(str(path), schema)
            writer.write_table(pa.Table.from_arrays([cols[k] for k in schema.names], schema=schema))
        if writer is None:  # no dataset: an empty table with the columns
            schema = _pairs_schema({"dataset": 0, "case_id": 0, "class": 0})
            pq.write_table(schema.empty_table(), str(path))
    finally:
        if writer is not None:
            writer.close()


# ------------------------------------------------------------------------------------------- the folder
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
    faith = metrics.get("faithfulness")  # a phase-2 leaderboard ranks by these (keys disjoint from the others)
    if isinstance(faith, dict):
        scopes += [("", faith.get("overall", {}), {})]
        scopes += [(f"{d}_", ds.get("summary", {}), ds.get("ci95") or {}) for d, ds in faith.get("datasets", {}).items()]
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
        from xbench.score.errors import ScoreInputError

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
    save_pair_counts(folder / "pair_counts.npz", result.counts, scopes=getattr(result, "scope_counts", None))
    paths += [folder / "pairs.parquet", folder / "pair_counts.npz"]
    from xbench.score.outputs.tables import write_tables

    paths += write_tables({label: metrics}, folder)
    from xbench.score.sections.plugins import sections

    for scope in sections(primary=False):  # each section's own files, only when metrics.json has the section
        if scope.section in metrics:
            paths += scope.write_tables(metrics, folder, label)
    if "codabench" in formats:
        paths.append(folder / "scores.json")
        paths[-1].write_text(json.dumps(flat_scores(metrics, intervals=True), indent=2, allow_nan=False) + "\n")
    return paths
