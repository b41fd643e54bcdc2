"""The gaze section: models' maps scored against where radiologists looked (issue 37; contract §Gaze rows).

Declared as the row scope ``"gaze"`` (:mod:`xbench.score.sections.plugins`, metrics.json section ``"gaze"``), present
only when the ground truth holds gaze (gt.zarr ``gaze_*`` arrays, docs/how-to/gaze.md): a run without them gives the
outputs it always gave. Every behaviour is a standalone function referenced lazily by the declaration.

Rows, per dataset with gaze:

* finding rows: each (reading, class) the reading labels present (``gaze_labels == 1``): the model's map of
  the class (``M~``: resized to the grid and min-max normalised as for every region metric) against the
  reading's gaze map and fixations;
* image rows: each reading: the whole reading's gaze against the model's *image map*, the mean of ``M~`` over
  the classes the reading labels present, or over every class when it labels none;
* ceiling rows: each reading of an image that other readers read too: the mean of the *other* readers' gaze
  maps, min-max normalised like a model's map, against the held-out reading (leave-one-out), beside the
  model's image row on the same reading ("% of human");
* region rows: each (reading, class) with the reader's own region (``gaze_region_*``): the share of the
  reading's gaze density inside the region, beside the share of ``M~``'s mass inside it.

Classes the submission declares unsupported give no rows (and are left out of image maps). Means are over
the rows' defined values (:mod:`xbench.score.metrics.gaze`); a finding summary is the unweighted mean over classes.
95 % percentile intervals resample the dataset's cases (every row of a drawn case comes with it): the draws
are made in :func:`case_draws` alone.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from xbench.schemas.schema_versions import minor
from xbench.score.metrics import gaze as G
from xbench.score.sections._gaze_truth import ChunkRows, GazeTruth, _truth_map, read_gaze  # noqa: F401 (read_gaze, ChunkRows: the section's API)

SECTION = "gaze"
#: metrics.json schema minor that added the "gaze" section
GAZE_METRICS_MINOR = minor("metrics", "gaze")
IMAGE_MAP = ("the mean of the model's min-max normalised maps over the classes the reading labels present "
             "(over every supported class when it labels none)")
#: the region measures, in order
REGION_KEYS = ("gaze_share", "model_energy")
TITLES = {"nss": "NSS", "cc": "CC", "sim": "SIM", "kl": "KL", "auc_judd": "AUC-Judd", "auc_shuffled": "sAUC"}


# ------------------------------------------------------------------------------ counting: one value per row
@dataclass
class GazeCounts:
    """One dataset's gaze rows (values NaN where undefined); cases numbered 0..n_cases-1 among those scored."""

    name: str
    classes: tuple
    n_cases: int
    n_readings: int
    f_case: np.ndarray  # finding rows: case, class column, (K, len(MEASURES)) values
    f_class: np.ndarray
    f_values: np.ndarray
    i_case: np.ndarray  # image rows
    i_values: np.ndarray
    c_case: np.ndarray  # ceiling rows: the readers' leave-one-out values and the model's on the same readings
    c_human: np.ndarray
    c_model: np.ndarray
    q_case: np.ndarray  # region rows: case, class column, gaze share, model energy
    q_class: np.ndarray
    q_gaze: np.ndarray
    q_model: np.ndarray
    #: the scored case counts of the datasets sorted before this one: where its draws start in the one stream
    prior: tuple = ()


def _vec(d: dict) -> np.ndarray:
    return np.array([np.nan if d[k] is None else d[k] for k in G.MEASURES], dtype=np.float64)


def _mass_share(m: np.ndarray, mask: np.ndarray) -> float:
    s = float(m.sum())
    return float(m[mask].sum()) / s if s > 0 else np.nan


def model_maps(sub_ds, row: int, cols: np.ndarray, grid) -> list[np.ndarray | None]:
    """The model's min-max normalised maps ``M~`` on ``grid`` of one submission row, one per ground-truth
    class column (None for an unsupported class)."""
    return _normalised(np.asarray(sub_ds.saliency[int(row)]), sub_ds, cols, grid)


def _normalised(raw: np.ndarray, sub_ds, cols: np.ndarray, grid) -> list[np.ndarray | None]:
    """:func:`model_maps` of the row ``raw`` already read (C, h, w)."""
    from xbench.score.kernels.maps import normalize_map, resize_map

    unsupported = set(getattr(sub_ds, "unsupported", ()))
    return [None if sub_ds.classes[int(j)] in unsupported else normalize_map(resize_map(raw[int(j)], grid))
            for j in cols]


@dataclass
class _CaseInputs:
    """What one case's rows read (from the stores, on the calling thread): the model's maps, each reading's
    gaze map, fixation cells and labels, the readers' regions, and the other images' fixation counts."""

    case: int
    readings: list
    ms: object  # the model's maps, or a callable that makes them (on the worker: resizing is work)
    gmaps: dict
    cells: dict
    labels: dict
    readers: dict
    regions: dict  # reading -> [(class column, mask)]
    neg: np.ndarray


def _case_rows(x: _CaseInputs) -> tuple[list, list, list, list]:
    """One case's finding, image, ceiling and region rows from its inputs: pure computation (a worker thread)."""
    from xbench.score.kernels.maps import normalize_map

    ms = x.ms() if callable(x.ms) else x.ms
    f_rows, i_rows, c_rows, q_rows = [], [], [], []
    image_values = {}
    for r in x.readings:
        rows, cols = x.cells[r]
        gm = x.gmaps[r]
        pos = [k for k in np.flatnonzero(x.labels[r] == 1) if ms[k] is not None]
        for k in pos:
            f_rows.append((x.case, k, _vec(G.all_measures(ms[k], gm, rows, cols, x.neg))))
        chosen = pos or [k for k in range(len(ms)) if ms[k] is not None]
        if chosen:
            image_map = np.mean([ms[k] for k in chosen], axis=0)
            image_values[r] = _vec(G.all_measures(image_map, gm, rows, cols, x.neg))
            i_rows.append((x.case, image_values[r]))
        for k, mask in x.regions.get(r, []):
            if ms[k] is not None:
                q_rows.append((x.case, k, _mass_share(gm, mask), _mass_share(ms[k], mask)))
    for r in x.readings:  # leave-one-out: the other readers' mean gaze map as the "model"
        others = [o for o in x.readings if x.readers[o] != x.readers[r]]
        if not others or r not in image_values:
            continue
        human = normalize_map(np.mean([x.gmaps[o] for o in others], axis=0))
        rows, cols = x.cells[r]
        c_rows.append((x.case, _vec(G.all_measures(human, x.gmaps[r], rows, cols, x.neg)), image_values[r]))
    return f_rows, i_rows, c_rows, q_rows


def _workers() -> int:
    try:
        return max(1, min(8, len(os.sched_getaffinity(0))))
    except AttributeError:  # not on Linux
        return max(1, min(8, os.cpu_count() or 1))


def gaze_counts(sub_ds, gt_ds, truth: GazeTruth, *, case_rows: np.ndarray, class_cols: np.ndarray,
                where: str = "", maps=model_maps, workers: int | None = None) -> GazeCounts:
    """Every gaze row of one dataset (see the module docstring); ``case_rows``/``class_cols``: the submission's
    row of each ground-truth case (-1: not scored) and column of each class. ``maps(sub_ds, row, cols, grid)``
    gives the model's maps (tests pass their own). The stores are read case by case on this thread; the rows
    are computed on ``workers`` threads (default: the usable cores, at most 8; the measures' NumPy and Numba
    work releases the GIL), at most two cases a worker in flight, and gathered in case order, so the result
    is the same for any number of workers."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    grid = tuple(int(s) for s in gt_ds.grid)
    present = np.asarray(case_rows) >= 0
    compact = np.cumsum(present) - 1  # the scored cases numbered 0..n-1
    n_read = truth.case.size
    cells = []
    for r in range(n_read):
        fx = truth.fixations[truth.offset[r]:truth.offset[r + 1]]
        cells.append(G.fixation_cells(fx[:, :2], gt_ds.orig_size[truth.case[r]], grid))
    scored = [r for r in range(n_read) if present[truth.case[r]]]
    total = np.zeros(grid, np.int64)  # every scored reading's fixations: the shuffled AUC's negatives
    for r in scored:
        total += G.cell_counts(*cells[r], grid)
    by_case: dict[int, list[int]] = {}
    for r in scored:
        by_case.setdefault(int(truth.case[r]), []).append(r)
    regions: dict[int, list[tuple[int, int]]] = {}
    for q, (r, k) in enumerate(truth.region_index.tolist()):
        regions.setdefault(r, []).append((q, k))

    if maps is model_maps:  # the submission's rows read a stored chunk at a time, resized on the workers
        from functools import partial

        saliency = ChunkRows(sub_ds.saliency)

        def maps_of(c: int):
            return partial(_normalised, saliency[int(case_rows[c])], sub_ds, class_cols, grid)
    else:
        def maps_of(c: int):
            return maps(sub_ds, case_rows[c], class_cols, grid)

    def inputs(c: int, readings: list) -> _CaseInputs:
        ms = maps_of(c)
        own = np.zeros(grid, np.int64)
        for r in readings:
            own += G.cell_counts(*cells[r], grid)
        return _CaseInputs(
            case=int(compact[c]), readings=readings, ms=ms, gmaps={r: _truth_map(truth, r, where) for r in readings},
            cells={r: cells[r] for r in readings}, labels={r: truth.labels[r] for r in readings},
            readers={r: truth.reader[r] for r in readings},
            regions={r: [(k, np.asarray(truth.region_mask[q], dtype=bool)) for q, k in regions.get(r, [])]
                     for r in readings},
            neg=total - own)  # fixations on the dataset's other images

    out: tuple[list, list, list, list] = ([], [], [], [])

    def gather(got) -> None:
        for acc, part in zip(out, got):
            acc.extend(part)

    n_workers = _workers() if workers is None else max(1, int(workers))
    if n_workers == 1:
        for c, readings in sorted(by_case.items()):
            gather(_case_rows(inputs(c, readings)))
    else:
        with ThreadPoolExecutor(n_workers, thread_name_prefix="xbench-gaze") as pool:
            pending: deque = deque()
            for c, readings in sorted(by_case.items()):
                pending.append(pool.submit(_case_rows, inputs(c, readings)))
                while len(pending) >= 2 * n_workers:  # bounded: a few cases' maps in memory
                    gather(pending.popleft().result())
            while pending:
                gather(pending.popleft().result())
    f_rows, i_rows, c_rows, q_rows = out
    m = len(G.MEASURES)

    def col(rows, i, dtype):
        return np.array([t[i] for t in rows], dtype=dtype)

    return GazeCounts(
        name=gt_ds.name, classes=tuple(gt_ds.classes), n_cases=int(present.sum()), n_readings=len(scored),
        f_case=col(f_rows, 0, np.int64), f_class=col(f_rows, 1, np.int64),
        f_values=np.array([t[2] for t in f_rows], np.float64).reshape(-1, m),
        i_case=col(i_rows, 0, np.int64), i_values=np.array([t[1] for t in i_rows], np.float64).reshape(-1, m),
        c_case=col(c_rows, 0, np.int64), c_human=np.array([t[1] for t in c_rows], np.float64).reshape(-1, m),
        c_model=np.array([t[2] for t in c_rows], np.float64).reshape(-1, m),
        q_case=col(q_rows, 0, np.int64), q_class=col(q_rows, 1, np.int64), q_gaze=col(q_rows, 2, np.float64),
        q_model=col(q_rows, 3, np.float64))


# ------------------------------------------------------------------------------ estimates and intervals
def case_draws(n_cases: int, bootstrap: int, seed: int, prior=()) -> Iterator[np.ndarray]:
    """THE draws of the gaze section (its only one): blocks of case multiplicities (b, n_cases), the dataset's own
    resamples in the run's one stream (:func:`xbench.score.resampling.engine.positioned_stream`, past the
    ``prior`` datasets), so row r is the resample behind row r of the dataset's class intervals; two submissions
    of one ground truth get the same resamples (paired comparisons)."""
    from xbench.score.resampling.engine import positioned_stream, resample_weights

    return resample_weights(n_cases, bootstrap, positioned_stream(prior, bootstrap, seed))


def _wmean(w: np.ndarray, case: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The weighted mean of the defined values ``v`` (row k weighted by its case's multiplicity), per row of
    ``w``; NaN where no defined row is drawn."""
    ok = ~np.isnan(v)
    if not ok.any():
        return np.full(w.shape[0], np.nan)
    ww = w[:, case[ok]]
    den = ww.sum(axis=1)
    num = ww @ v[ok]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def estimates(gc: GazeCounts, w: np.ndarray) -> dict:
    """Every mean of the section for each row of case weights ``w`` (b, n_cases): the point values with
    ``w`` all ones, the bootstrap replicates with :func:`case_draws`'s blocks."""
    from xbench.score.resampling.intervals import nanmean_rows

    b = w.shape[0]
    out: dict = {"classes": {}, "regions": {}}
    for k in sorted(set(gc.f_class.tolist())):
        sel = gc.f_class == k
        out["classes"][gc.classes[k]] = {m: _wmean(w, gc.f_case[sel], gc.f_values[sel, j])
                                         for j, m in enumerate(G.MEASURES)}
    out["findings"] = {m: nanmean_rows(np.stack([e[m] for e in out["classes"].values()])) if out["classes"]
                       else np.full(b, np.nan) for m in G.MEASURES}
    out["images"] = {m: _wmean(w, gc.i_case, gc.i_values[:, j]) for j, m in enumerate(G.MEASURES)}
    out["ceiling"] = {who: {m: _wmean(w, gc.c_case, vals[:, j]) for j, m in enumerate(G.MEASURES)}
                      for who, vals in (("human", gc.c_human), ("model", gc.c_model))}
    for k in sorted(set(gc.q_class.tolist())):
        sel = gc.q_class == k
        out["regions"][gc.classes[k]] = {"gaze_share": _wmean(w, gc.q_case[sel], gc.q_gaze[sel]),
                                         "model_energy": _wmean(w, gc.q_case[sel], gc.q_model[sel])}
    return out


def _map_leaves(fn, *trees):
    if isinstance(trees[0], dict):
        return {k: _map_leaves(fn, *(t[k] for t in trees)) for k in trees[0]}
    return fn(*trees)


def replicates(gc: GazeCounts, bootstrap: int, seed: int) -> dict:
    """:func:`estimates` over ``bootstrap`` case resamples (:func:`case_draws`), (B,) per leaf."""
    blocks = [estimates(gc, w) for w in case_draws(gc.n_cases, bootstrap, seed, gc.prior)]
    if not blocks:
        return _map_leaves(lambda v: np.zeros(0), estimates(gc, np.ones((1, gc.n_cases))))
    return _map_leaves(lambda *vs: np.concatenate(vs), *blocks)


def points(gc: GazeCounts) -> dict:
    """The point values: :func:`estimates` with every case once (float or None per leaf)."""
    return _map_leaves(lambda v: None if np.isnan(v[0]) else float(v[0]), estimates(gc, np.ones((1, gc.n_cases))))


def percent_of_human(measure: str, model, human) -> float | None:
    """The model as a % of the readers' ceiling: model / human x 100, or human / model x 100 for KL (lower is
    better), so 100 % is "as good as a reader" for every measure; None when either is undefined or 0."""
    if measure in G.LOWER_IS_BETTER:
        model, human = human, model
    if model is None or human is None or human == 0:
        return None
    return float(model) / float(human) * 100.0


def dataset_entry(gc: GazeCounts, *, bootstrap: int, seed: int, level: float = 0.95) -> dict:
    """One dataset's metrics.json "gaze" entry (contract §metrics.json "gaze")."""
    from xbench.score.resampling.intervals import percentile_interval

    pts = points(gc)
    reps = replicates(gc, bootstrap, seed) if bootstrap > 0 else None

    def block(path: tuple, keys, extra=None) -> dict:
        p, rr = pts, reps
        for key in path:
            p = p[key]
            rr = rr[key] if rr is not None else None
        out = dict(extra or {})
        out.update({k: p[k] for k in keys})
        if rr is not None:
            out["ci95"] = {k: percentile_interval(rr[k], level) for k in keys}
        return out

    entry = {"n_readings": gc.n_readings, "n_cases": gc.n_cases, "n_finding_rows": int(gc.f_case.size),
             "n_image_rows": int(gc.i_case.size),
             "findings": block(("findings",), G.MEASURES), "images": block(("images",), G.MEASURES),
             "classes": {c: block(("classes", c), G.MEASURES,
                                  {"n_rows": int(np.count_nonzero(gc.f_class == gc.classes.index(c)))})
                         for c in pts["classes"]}}
    if gc.c_case.size:
        human, model = block(("ceiling", "human"), G.MEASURES), block(("ceiling", "model"), G.MEASURES)
        entry["ceiling"] = {"n_readings": int(gc.c_case.size), "n_cases": int(np.unique(gc.c_case).size),
                            "human": human, "model": model,
                            "percent_of_human": {m: percent_of_human(m, model[m], human[m]) for m in G.MEASURES}}
    if gc.q_case.size:
        entry["regions"] = {c: block(("regions", c), REGION_KEYS,
                                     {"n_rows": int(np.count_nonzero(gc.q_class == gc.classes.index(c)))})
                            for c in pts["regions"]}
    return entry


# ------------------------------------------------------------------------------ the row scope's behaviour
def gaze_keys() -> tuple[str, ...]:
    return G.MEASURES


def score_gaze(sub, gt, names, *, bootstrap: int = 1000, seed: int = 0, where: str = "",
               region_problems: list | None = None, timings: dict | None = None,
               cases: Mapping[str, np.ndarray] | None = None) -> tuple[dict, dict]:
    """The scope's ``score``: the metrics.json "gaze" section of the datasets ``names`` whose ground truth
    holds gaze, and their :class:`GazeCounts`; ({}, {}) when none does (outputs then unchanged)."""
    import time

    from xbench.schemas import align

    t0 = time.perf_counter()
    section: dict = {}
    counts: dict[str, GazeCounts] = {}
    cases = cases or {}
    from xbench.score.resampling.engine import prior_units

    from xbench.score.sections.units import scored_units

    units = scored_units(sub, gt, names, cases)
    for name in sorted(names):
        truth = read_gaze(gt, name, f"{where}/{name}" if where else name)
        if truth is None:
            continue
        sub_ds, gt_ds = sub.datasets[name], gt.datasets[name]
        if sub_ds.saliency is None:
            continue  # a scores-only submission has no map to compare
        case_rows, class_cols = align(sub_ds, gt_ds, allow_missing=True)
        present = cases.get(name)
        if present is not None:
            case_rows = np.where(np.asarray(present, bool), case_rows, -1)
        gc = gaze_counts(sub_ds, gt_ds, truth, case_rows=case_rows, class_cols=class_cols,
                         where=f"{where}/{name}" if where else name)
        gc.prior = prior_units(units, name)
        if not gc.n_readings:
            continue
        counts[name] = gc
        section[name] = dataset_entry(gc, bootstrap=bootstrap, seed=seed)
    if timings is not None and section:
        timings["gaze"] = time.perf_counter() - t0
    if not section:
        return {}, {}
    from xbench.score.resampling.intervals import mean_defined

    def over(part: str) -> dict:
        return {m: mean_defined(np.array([np.nan if e[part][m] is None else e[part][m] for e in section.values()],
                                         dtype=np.float64)) for m in G.MEASURES}

    # overall: the finding rows' means at the top (the keys a comparison looks up), the image rows' under "images"
    return {"image_map": IMAGE_MAP, "overall": {**over("findings"), "images": over("images")},
            "datasets": section}, counts


def ground_truth_problems(a: Mapping[str, GazeCounts], b: Mapping[str, GazeCounts]) -> list[str]:
    """One line per shared dataset whose gaze rows differ between two submissions' counts."""
    out = []
    for d in sorted(set(a) & set(b)):
        x, y = a[d], b[d]
        same = (x.classes == y.classes and x.n_cases == y.n_cases and np.array_equal(x.f_case, y.f_case)
                and np.array_equal(x.f_class, y.f_class) and np.array_equal(x.i_case, y.i_case)
                and np.array_equal(x.c_case, y.c_case))
        if not same:
            out.append(f"{SECTION}/{d}: the two submissions were scored against different gaze rows")
    return out


def paired_rows(a: Mapping[str, GazeCounts], b: Mapping[str, GazeCounts], *, bootstrap: int, seed: int,
                level: float = 0.95, per_group: bool = True, cache: dict | None = None,
                names: tuple[str, str] | None = None) -> list[dict]:
    """``a - b`` on the gaze measures of the datasets both hold, on the resamples of their own intervals
    (:func:`case_draws`): rows of :data:`xbench.score.resampling.bootstrap.PAIRED_COLUMNS`, ``dataset``
    ``"gaze/<dataset>"``, ``class`` "findings" / "images" (the summaries) then, with ``per_group``, each class;
    ``metric`` the measure."""
    from xbench.score.resampling.intervals import paired_row

    problems = ground_truth_problems(a, b)
    if problems:
        from xbench.score.errors import GroundTruthMismatchError

        raise GroundTruthMismatchError(problems)
    rows = []
    for d in sorted(set(a) & set(b)):
        if a[d].prior != b[d].prior:  # scored beside other datasets: both on A's draws, still paired
            import dataclasses

            b = {**b, d: dataclasses.replace(b[d], prior=a[d].prior)}
        pa, pb = points(a[d]), points(b[d])
        ra, rb = (replicates(x[d], bootstrap, seed) if bootstrap > 0 else
                  _map_leaves(lambda v: np.zeros(0), estimates(x[d], np.ones((1, x[d].n_cases)))) for x in (a, b))
        groups = [("findings", ("findings",)), ("images", ("images",))]
        if per_group:
            groups += [(c, ("classes", c)) for c in pa["classes"] if c in pb["classes"]]
        for label, path in groups:
            xa, xb, ya, yb = pa, pb, ra, rb
            for key in path:
                xa, xb, ya, yb = xa[key], xb[key], ya[key], yb[key]
            rows += [paired_row(f"{SECTION}/{d}", label, m, xa[m], xb[m], ya[m], yb[m], level) for m in G.MEASURES]
    return rows


# ------------------------------------------------------------------------------ tables
COLUMNS = ("model", "dataset", "rows", "scope", "n", *G.MEASURES, "human_or_share", "note")


def gaze_rows(results) -> list[dict]:
    """One row per (model, dataset, scope) of the metrics.json "gaze" sections of score results (objects
    with ``name`` and ``metrics``): the finding and image summaries, each class, the readers' ceiling with
    the model's % of it, and each class's share of gaze and of the model's map inside the readers' regions."""
    def d(x):
        return x if isinstance(x, dict) else {}

    out = []
    for r in results:
        for ds, e in sorted(d(d(d(r.metrics).get(SECTION)).get("datasets")).items()):
            e = d(e)
            base = {"model": r.name, "dataset": ds}
            out.append({**base, "rows": "findings", "scope": "all classes", "n": e.get("n_finding_rows"),
                        **{m: d(e.get("findings")).get(m) for m in G.MEASURES}, "ci95": d(d(e.get("findings")).get("ci95"))})
            out.append({**base, "rows": "images", "scope": "all readings", "n": e.get("n_image_rows"),
                        **{m: d(e.get("images")).get(m) for m in G.MEASURES}, "ci95": d(d(e.get("images")).get("ci95"))})
            for c, v in sorted(d(e.get("classes")).items()):
                out.append({**base, "rows": "findings", "scope": c, "n": d(v).get("n_rows"),
                            **{m: d(v).get(m) for m in G.MEASURES}, "ci95": d(d(v).get("ci95"))})
            ceil = d(e.get("ceiling"))
            if ceil:
                for who in ("human", "model"):
                    out.append({**base, "rows": "ceiling", "scope": who, "n": ceil.get("n_readings"),
                                **{m: d(ceil.get(who)).get(m) for m in G.MEASURES}, "ci95": d(d(ceil.get(who)).get("ci95"))})
                out.append({**base, "rows": "ceiling", "scope": "% of human", "n": ceil.get("n_readings"),
                            **{m: d(ceil.get("percent_of_human")).get(m) for m in G.MEASURES}, "ci95": {}})
            for c, v in sorted(d(e.get("regions")).items()):
                v = d(v)
                out.append({**base, "rows": "regions", "scope": c, "n": v.get("n_rows"),
                            "human_or_share": v.get("gaze_share"), "model_energy": v.get("model_energy"),
                            "ci95": d(v.get("ci95")),
                            "note": "gaze share inside the reader's region | model energy inside it"})
    return out


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def gaze_markdown(rows: list[dict]) -> str:
    """The gaze table (Markdown): the six measures per scope; region rows give the gaze share and the
    model's energy inside the readers' own regions; "% of human" = model / human x 100 (KL: human / model)."""
    regions = any(row["rows"] == "regions" for row in rows)
    # region rows' two shares get their own columns (under NSS and CC they read as an NSS and a CC)
    shares = ["gaze share in region", "model energy in region"] if regions else []
    head = ["model", "dataset", "rows", "scope", "n", *(TITLES[m] for m in G.MEASURES), *shares]
    out = ["## Gaze (the saliency benchmark's measures against radiologists' gaze)", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    from xbench.score.cells import md_cell

    for row in rows:
        if row["rows"] == "regions":
            vals = [""] * len(G.MEASURES) + [_fmt(row.get("human_or_share")), _fmt(row.get("model_energy"))]
        elif row["scope"] == "% of human":
            vals = ["n/a" if row.get(m) is None else f"{row[m]:.1f}%" for m in G.MEASURES] + [""] * len(shares)
        else:
            vals = [_fmt(row.get(m)) for m in G.MEASURES] + [""] * len(shares)
        out.append("| " + " | ".join([md_cell(str(row["model"])), md_cell(str(row["dataset"])), row["rows"],
                                      md_cell(str(row["scope"])), "" if row["n"] is None else str(row["n"])] + vals)
                   + " |")
    return "\n".join(out) + "\n"


def terminal_lines(metrics: Mapping) -> list[str]:
    """The scope's ``terminal``: per dataset, xbench-score's line of the finding rows' NSS, CC, AUC-Judd and
    sAUC with their 95 % intervals, and with a ceiling the model's % of the readers' on NSS and sAUC, naming the
    rows it compares (image rows) and the readers' own values (a % of a near-chance sAUC is said to be one)."""
    def d(x):
        return x if isinstance(x, dict) else {}

    def num(v) -> str:
        return "–" if not isinstance(v, (int, float)) else f"{v:.2f}"

    lines = []
    for name, e in sorted(d(d(metrics.get(SECTION)).get("datasets")).items()):
        e = d(e)
        f, ci = d(e.get("findings")), d(d(e.get("findings")).get("ci95"))
        parts = []
        for m in ("nss", "cc", "auc_judd", "auc_shuffled"):
            lo_hi = ci.get(m) if isinstance(ci.get(m), list) and len(ci.get(m)) == 2 else None
            parts.append(f"{TITLES[m]} {num(f.get(m))}" + (f" [{num(lo_hi[0])}, {num(lo_hi[1])}]" if lo_hi else ""))
        lines.append(f"gaze ({name}, {e.get('n_readings')} readings; finding rows): " + ", ".join(parts))
        pct = d(d(e.get("ceiling")).get("percent_of_human"))
        if pct:
            human = d(d(e.get("ceiling")).get("human"))
            shown = [f"{TITLES[m]} {num(pct.get(m))}% (readers' own {num(human.get(m))})" for m in ("nss", "auc_shuffled")]
            line = (f"gaze ceiling ({name}, {d(e.get('ceiling')).get('n_readings')} readings; image rows: the model's "
                    "mean map of a reading against the readers' leave-one-out gaze): model at " + ", ".join(shown)
                    + " of the readers'")
            level = human.get("auc_shuffled")
            if isinstance(level, (int, float)) and abs(level - 0.5) <= NEAR_CHANCE:
                line += (f"; the readers' own sAUC {level:.2f} is near chance (0.5), so a % of it says little "
                         "about the model")
            lines.append(line)
    return lines


#: a readers' ceiling sAUC within this of 0.5 is called near chance on the terminal line (a % of chance is no level)
NEAR_CHANCE = 0.05


def measures() -> dict:
    """The scope's ``measures``: the six saliency measures and the two region shares print as numbers (the
    saliency benchmark's units, never x100), KL lower-is-better, in every table and comparison."""
    from xbench.score.metrics.registry import Measure

    out = {m: Measure(m, TITLES[m], "number", m != "kl") for m in G.MEASURES}
    out.update({k: Measure(k, t, "number") for k, t in zip(REGION_KEYS, ("Gaze share", "Model energy"))})
    return out


def gaze_table(results) -> object | None:
    """The report's gaze table (index.html; leaderboard.md shows :func:`gaze_markdown`): a row per (model,
    dataset, rows, scope) of :func:`gaze_rows` with the six measures and their 95 % intervals, the region rows'
    two shares in columns of their own; None when no result has the section."""
    from xbench.score.table import Cell, Table

    rows = gaze_rows(list(results.values()) if isinstance(results, Mapping) else results)
    if not rows:
        return None
    keys = (*G.MEASURES, *REGION_KEYS)
    caption = ("Each model's map against the radiologists' gaze, the saliency benchmark's measures as numbers "
               "(higher is better except KL): finding rows (the class's map, readings that called the finding), "
               "image rows (the model's mean map, the whole reading), the readers' leave-one-out ceiling with the "
               "model's % of it (model / human x 100; KL human / model), and per class the share of the "
               "reading's gaze and of the model's map inside the reader's own region; 95% bootstrap interval "
               "over cases as low–high.")
    t = Table(title="Gaze", key=SECTION, columns=[(None, None, k) for k in keys], caption=caption,
              index=("Model", "Dataset", "Rows", "Scope", "n"), labels={k: m.short for k, m in measures().items()})
    for r in rows:
        label = (str(r["model"]), str(r["dataset"]), r["rows"], str(r["scope"]), "" if r["n"] is None else str(r["n"]))
        values = dict(r, gaze_share=r.get("human_or_share"))
        ci = r.get("ci95") or {}

        def interval(k):
            v = ci.get(k)
            return tuple(v) if isinstance(v, (list, tuple)) and len(v) == 2 and None not in v else None

        t.rows[label] = [Cell(values.get(k), interval(k)) for k in keys]
    return t


def gaze_csv(rows: list[dict]) -> str:
    import csv
    import io

    buf = io.StringIO()
    fields = ["model", "dataset", "rows", "scope", "n", *G.MEASURES, "gaze_share", "model_energy"]
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        row = {**row, "gaze_share": row.get("human_or_share")}
        w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in fields})
    return buf.getvalue()


def write_gaze_tables(metrics: Mapping, out_dir: str | os.PathLike, label: str = "submission") -> list[Path]:
    """``table_gaze.csv`` / ``.md`` beside the other tables, only when metrics.json has a "gaze" section."""
    if SECTION not in metrics:
        return []
    from types import SimpleNamespace

    rows = gaze_rows([SimpleNamespace(name=label, metrics=metrics)])
    out = Path(out_dir)
    (out / "table_gaze.csv").write_text(gaze_csv(rows))
    (out / "table_gaze.md").write_text(gaze_markdown(rows))
    return [out / "table_gaze.csv", out / "table_gaze.md"]


# ------------------------------------------------------------------------------ pair_counts.npz
_ARRAYS = {"f_case": "iu", "f_class": "iu", "f_values": "f", "i_case": "iu", "i_values": "f", "c_case": "iu",
           "c_human": "f", "c_model": "f", "q_case": "iu", "q_class": "iu", "q_gaze": "f", "q_model": "f"}


def save_counts(prefix: str, gc: GazeCounts) -> dict[str, np.ndarray]:
    arrays = {f"{prefix}.{k}": np.asarray(getattr(gc, k)) for k in _ARRAYS}
    arrays[f"{prefix}.classes"] = np.array(gc.classes, dtype=str)
    arrays[f"{prefix}.n_cases"] = np.asarray(gc.n_cases, np.int64)
    arrays[f"{prefix}.n_readings"] = np.asarray(gc.n_readings, np.int64)
    arrays[f"{prefix}.prior"] = np.asarray(gc.prior, np.int64).reshape(-1)
    return arrays


def counts_problems(z: Mapping[str, np.ndarray], prefix: str, where: str) -> list[str]:
    """What makes one dataset's gaze arrays of a pair_counts.npz from outside unusable, one line each."""
    p = []
    for k, kinds in {**_ARRAYS, "classes": "U", "n_cases": "iu", "n_readings": "iu"}.items():
        a = z.get(f"{prefix}.{k}")
        if a is None or a.dtype.kind not in kinds:
            p.append(f"{where}: {prefix}.{k} missing or of the wrong type")
    if p:
        return p
    n, nc = int(z[f"{prefix}.n_cases"]), z[f"{prefix}.classes"].size
    m = len(G.MEASURES)
    prior = z.get(f"{prefix}.prior")  # absent in files written before it: the stream's start
    if prior is not None and (prior.dtype.kind not in "iu" or prior.ndim != 1 or prior.size > 10_000 or (
            prior.size and not (int(prior.min()) >= 0 and int(prior.max()) < 2**31))):
        p.append(f"{where}: {prefix}.prior must list at most 10,000 case counts, each 0 to 2^31 - 1")
    for case, extra in (("f_case", ("f_class", "f_values")), ("i_case", ("i_values",)),
                        ("c_case", ("c_human", "c_model")), ("q_case", ("q_class", "q_gaze", "q_model"))):
        c = z[f"{prefix}.{case}"]
        if c.ndim != 1 or (c.size and (c.min() < 0 or c.max() >= n)):
            p.append(f"{where}: {prefix}.{case} refers to a case that does not exist")
        for e in extra:
            a = z[f"{prefix}.{e}"]
            want = (c.size, m) if e.endswith(("values", "human", "model")) and e != "q_model" else (c.size,)
            if a.shape != want:
                p.append(f"{where}: {prefix}.{e} has shape {a.shape}; expected {want}")
            elif e.endswith("class") and a.size and (a.min() < 0 or a.max() >= nc):
                p.append(f"{where}: {prefix}.{e} refers to a class that does not exist")
    return p


def load_counts(z: Mapping[str, np.ndarray], prefix: str, name: str) -> GazeCounts:
    return GazeCounts(name=name, classes=tuple(str(c) for c in z[f"{prefix}.classes"]),
                      n_cases=int(z[f"{prefix}.n_cases"]), n_readings=int(z[f"{prefix}.n_readings"]),
                      **{k: np.asarray(z[f"{prefix}.{k}"], np.float64 if _ARRAYS[k] == "f" else np.int64)
                         for k in _ARRAYS},
                      prior=tuple(int(x) for x in z.get(f"{prefix}.prior", np.zeros(0, np.int64))))
