"""The robustness track (contract §Robustness track): how a submission's maps and scores hold up on the perturbed
copies that ``xbench-prepare --perturb`` added to the images store.

For every scored dataset whose ground truth has a perturbation table (:mod:`xbench.schemas.perturbations`) and
every SPEC of it, on the copies that SPEC made:

* ``metrics``: every registered metric (recognition and grounding), computed exactly as for the clean cases by
  the same counting pass and estimates, on a view in which each copy is a case with its clean case's labels,
  regions and original size, and its maps are the submission's maps warped back to the original frame by the
  augmentation's ``invert_map`` with the private parameters. Thresholds: searched on the copies as on clean
  cases, or the transferred ones when the run transfers them. Intervals: the cluster bootstrap over clean cases
  (a resample draws clean cases with replacement and takes all copies of each drawn case: copies of one case are
  not independent draws); with one copy per case it is the case bootstrap over the copies, bit for bit. Its
  draws are those of the stability intervals (one ``numpy.random.default_rng(--seed)`` per SPEC).
* ``stability``: per (clean case, supported class) pair and its K_s copies (K, or one for a SPEC whose copies
  cannot differ: :meth:`xbench.schemas.perturbations.Template.copies`),
  - map stability: Spearman's rho between the clean map and each copy's warped-back map, both resized to the
    evaluation grid (the contract's resize); ties get average ranks; a pair of constant maps has rho 1 (no
    ranking to lose), exactly one constant map rho 0; per pair the mean over its copies and the worst
    (smallest) one;
  - score stability: the prediction at 0.5 is ``p >= 0.5`` on probabilities (logits go through the sigmoid
    first, as everywhere in the scorer: ``p >= 0.5`` is ``logit >= 0``); a copy flips when its prediction
    differs from the clean case's; per pair the share of its K copies that flip, and whether any does;
  then per class the mean over the pairs (every case of the class, whatever its label: stability needs no
  label) with a percentile bootstrap interval over clean cases, and the summary the mean over classes.

A submission without the copies' rows scores its clean metrics as usual; this section then says why there are
no robustness numbers (``"available": false`` with a reason). Memory: one batch of clean cases' maps and their
copies' maps at a time.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from xbench.score.metrics.average_ranks import average_ranks

#: the stability keys of a class entry and of the summary
STABILITY_KEYS = ("map_spearman_mean", "map_spearman_worst", "flip_rate", "flip_any")
_BATCH_BYTES = 64 * 2**20


# ------------------------------------------------------------------------------------------ definitions
def unit_ranks(m: np.ndarray) -> np.ndarray | None:
    """A map's average ranks, centred and scaled to unit length (so rho is one dot product); None for a
    constant map."""
    x = np.asarray(m, dtype=np.float64).ravel()
    if x.min() == x.max():
        return None
    r = average_ranks(x)
    r -= r.mean()
    return r / np.sqrt(np.dot(r, r))


def rho_of(ua: np.ndarray | None, ub: np.ndarray | None) -> float:
    """Spearman's rho from two :func:`unit_ranks` (the constant-map rule for None)."""
    if ua is None or ub is None:
        return 1.0 if (ua is None and ub is None) else 0.0
    return float(np.dot(ua, ub))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho of two maps of one shape (module doc: average ranks; the constant-map rule)."""
    return rho_of(unit_ranks(a), unit_ranks(b))


# ---------------------------------------------------------------------------------------------- views
class _RegionView:
    """region_mask of the copies' view: virtual region i is the clean region ``source[i]`` (sorted)."""

    def __init__(self, masks, source: np.ndarray) -> None:
        self.masks, self.source = masks, np.asarray(source, np.int64)
        self.shape = (len(self.source), *masks.shape[1:])
        self.dtype = np.dtype(bool)
        self.chunks = (256, *masks.shape[1:])
        self.ndim = 3

    def __getitem__(self, key):
        rows = self.source[key]
        if rows.size == 0:
            return np.zeros((0, *self.shape[1:]), bool)
        lo, hi = int(rows.min()), int(rows.max()) + 1
        block = np.asarray(self.masks[lo:hi], dtype=bool)
        return block[rows - lo]


class _WarpedMaps:
    """saliency of the copies' view: row r is the submission's row ``rows[r]`` warped back by ``specs[r]``."""

    def __init__(self, saliency, rows: np.ndarray, specs: list) -> None:
        self.saliency, self.rows, self.specs = saliency, np.asarray(rows, np.int64), specs
        self.shape = (len(self.rows), *saliency.shape[1:])
        self.dtype = np.dtype(np.float32)
        step = max(1, _BATCH_BYTES // max(1, int(np.prod(saliency.shape[1:])) * 4))
        self.chunks = (min(step, 256), *saliency.shape[1:])
        self.ndim = 4

    def rows_of(self, lo: int, hi: int) -> np.ndarray:
        from xbench.score.counting import gather_maps

        want = self.rows[lo:hi]
        c = self.shape[1]
        raw = gather_maps(self.saliency, np.repeat(want, c), np.tile(np.arange(c), want.size), dtype=np.float32)
        raw = raw.reshape(want.size, c, *self.shape[2:])
        return np.stack([np.asarray(self.specs[lo + i].invert_map(raw[i]), dtype=np.float32) for i in range(want.size)]) \
            if want.size else raw

    def __getitem__(self, key):
        if not isinstance(key, slice):
            raise TypeError("the warped view is read by row slices")
        lo, hi, _ = key.indices(self.shape[0])
        return self.rows_of(lo, hi)


# ---------------------------------------------------------------------------------------------- scoring
def _copies_present(sub_ds, table) -> tuple[np.ndarray, int]:
    row_of = {cid: i for i, cid in enumerate(sub_ds.case_id.tolist())}
    rows = np.fromiter((row_of.get(c, -1) for c in table.id.tolist()), dtype=np.int64, count=len(table))
    return rows, int(np.count_nonzero(rows >= 0))


def _view(name, gt_ds, sub_ds, table, sel: np.ndarray, sub_rows: np.ndarray, specs: list):
    """The copies ``sel`` (indices into the table, ordered by clean case) as a ground truth and a submission."""
    case = table.case[sel]
    ri = np.asarray(gt_ds.region_index, np.int64).reshape(-1, 2)
    # each clean region repeated for every copy of its case; copies sorted by clean case keep the source rising
    by_case: dict[int, list[int]] = {}
    for r, c in enumerate(ri[:, 0].tolist()):
        by_case.setdefault(c, []).append(r)
    idx, src = [], []
    for v, c in enumerate(case.tolist()):
        for r in by_case.get(c, ()):
            idx.append((v, int(ri[r, 1])))
            src.append(r)
    region_index = np.asarray(idx, np.int64).reshape(-1, 2)
    source = np.asarray(src, np.int64)
    vgt = SimpleNamespace(name=name, classes=tuple(gt_ds.classes), grid=tuple(gt_ds.grid), case_id=table.id[sel],
                          labels=np.asarray(gt_ds.labels)[case], region_index=region_index,
                          region_mask=_RegionView(gt_ds.region_mask, source), orig_size=np.asarray(gt_ds.orig_size)[case])
    vsub = SimpleNamespace(name=name, classes=tuple(sub_ds.classes), score_kind=sub_ds.score_kind,
                           unsupported=tuple(sub_ds.unsupported), case_id=table.id[sel],
                           scores=np.asarray(sub_ds.scores)[sub_rows[sel]],
                           saliency=_WarpedMaps(sub_ds.saliency, sub_rows[sel], [specs[j] for j in sel.tolist()]))
    return vgt, vsub


def _phrases(name, gt_ds, sub_ds, table, s: int, specs: list, *, phrase_metrics, bootstrap: int, seed: int,
             where: str, metric_params) -> dict | None:
    """The phrase grounding of SPEC s's copies (module doc, "phrases"); None when the copies have no phrase rows."""
    from xbench.schemas.queries import UNSUPPORTED_ATTR

    from xbench.score.counting import count_dataset
    from xbench.score.kernels.counts import PhraseCounts

    if table.query_id is None or getattr(gt_ds, "queries", None) is None:
        return None
    mine = np.flatnonzero(table.group[table.query_copy] == s)
    copy = table.query_copy[mine]
    # by clean case, then copy id, then phrase row: the clean rows each view reads rise within a case
    mine = mine[np.lexsort((table.query_of[mine], table.id[copy], table.case[copy]))]
    copy, of = table.query_copy[mine], table.query_of[mine]
    entry: dict = {"n_phrases": int(mine.size)}
    reason = sub_ds.attrs.get(UNSUPPORTED_ATTR)
    if reason is not None or sub_ds.query_id is None:
        return {**entry, "unsupported": True, "reason": str(reason or "the submission has no phrase rows")}
    row_of = {qid: i for i, qid in enumerate(sub_ds.query_id.tolist())}
    rows = np.fromiter((row_of.get(q, -1) for q in table.query_id[mine].tolist()), np.int64, count=mine.size)
    if (rows < 0).any():
        return {**entry, "available": False,
                "reason": f"the submission holds {int((rows >= 0).sum())} of the copies' {mine.size} phrase rows"}
    categories = tuple(gt_ds.classes)
    col = np.array([categories.index(c) for c in np.asarray(gt_ds.queries.category)[of].tolist()], np.int64)
    labels = np.full((mine.size, len(categories)), -1, np.int8)
    labels[np.arange(mine.size), col] = 1
    vgt = SimpleNamespace(name=name, classes=categories, case_id=table.query_id[mine], labels=labels,
                          region_index=np.stack([np.arange(mine.size), col], axis=1),
                          region_mask=_RegionView(gt_ds.query_mask, of), grid=tuple(gt_ds.grid))
    vsub = SimpleNamespace(name=name, unsupported=(), score_kind="logit",
                           scores=np.asarray(sub_ds.query_scores, np.float32)[rows].reshape(-1, 1),
                           saliency=_WarpedMaps(sub_ds.query_saliency, rows, [specs[j] for j in copy.tolist()]))
    dc = count_dataset(vsub, vgt, case_rows=np.arange(mine.size, dtype=np.int64),
                       class_cols=np.zeros(len(categories), np.int64), where=where, scope="phrase",
                       metric_params=metric_params)
    # the phrase scope's bootstrap resamples images: here the clean cases, each with every copy's phrase rows
    pc = PhraseCounts(counts=dc, image=table.case[copy][dc.pair_case], n_images=int(len(gt_ds.case_id)))
    return phrase_metrics(pc, bootstrap=bootstrap, seed=seed)


def _stability(gt_ds, sub_ds, clean_rows, class_cols, table, sel, sub_rows, specs, copies: int):
    """Per (clean case, class): mean and worst rho over the K copies, flip share and any-flip (module doc).
    Arrays (N, C) float64 (NaN for unsupported classes)."""
    from xbench.score.counting import gather_maps
    from xbench.score.kernels.maps import resize_map
    from xbench.score.metrics.recognition_sums import probabilities

    n, c = len(gt_ds.case_id), len(gt_ds.classes)
    grid = tuple(int(g) for g in gt_ds.grid)
    unsupported = set(sub_ds.unsupported)
    supported = np.array([cl not in unsupported for cl in gt_ds.classes], bool)
    scores = np.asarray(sub_ds.scores)
    p_clean = probabilities(scores[clean_rows][:, class_cols], sub_ds.score_kind)
    p_copy = probabilities(scores[sub_rows[sel]][:, class_cols], sub_ds.score_kind)
    flips = (p_copy >= 0.5) != (p_clean[table.case[sel]] >= 0.5)  # (P_s, C)
    out = {k: np.full((n, c), np.nan) for k in STABILITY_KEYS}
    case = table.case[sel]
    starts = np.searchsorted(case, np.arange(n + 1))  # copies of case i: sel positions starts[i]..starts[i+1]-1
    for i in range(n):  # flips need no map
        f = flips[starts[i]:starts[i + 1]]
        out["flip_rate"][i] = f.mean(axis=0)
        out["flip_any"][i] = f.any(axis=0)
    sal = sub_ds.saliency
    map_bytes = int(np.prod(sal.shape[2:])) * 4 * c * (1 + copies)
    batch = max(1, _BATCH_BYTES // max(1, map_bytes))
    cols = class_cols[supported]
    warped = _WarpedMaps(sal, sub_rows[sel], [specs[j] for j in sel.tolist()])
    from concurrent.futures import ThreadPoolExecutor

    import numba

    def pair(task):  # numpy's sorts release the GIL: pairs run on several threads
        i, k, col, ref_map, copy_maps = task
        ref = unit_ranks(resize_map(ref_map, grid))  # once per pair, not per copy
        rhos = [rho_of(ref, unit_ranks(resize_map(m, grid))) for m in copy_maps]
        out["map_spearman_mean"][i, col] = float(np.mean(rhos))
        out["map_spearman_worst"][i, col] = float(np.min(rhos))

    with ThreadPoolExecutor(max(1, int(numba.get_num_threads()))) as pool:
        for b0 in range(0, n, batch):
            b1 = min(n, b0 + batch)
            clean = gather_maps(sal, np.repeat(clean_rows[b0:b1], cols.size), np.tile(cols, b1 - b0), dtype=np.float32)
            clean = clean.reshape(b1 - b0, cols.size, *sal.shape[2:])
            moved = warped.rows_of(int(starts[b0]), int(starts[b1]))[:, cols]
            tasks = [(i, k, col, clean[i - b0, k], moved[starts[i] - starts[b0]:starts[i + 1] - starts[b0], k])
                     for i in range(b0, b1) for k, col in enumerate(np.flatnonzero(supported))]
            list(pool.map(pair, tasks))
    for key in ("flip_rate", "flip_any"):
        out[key][:, ~supported] = np.nan
    return out, supported


def _stability_entry(values: dict, classes, supported, *, bootstrap: int, seed: int, level: float = 0.95) -> dict:
    """Per class: n_pairs, the four means and (bootstrap > 0) their percentile intervals over clean cases;
    summary: the mean over supported classes."""
    from xbench.score.resampling.intervals import mean_defined, percentile_interval

    n = next(iter(values.values())).shape[0]
    from xbench.score.resampling.engine import case_indices

    draws = case_indices(n, bootstrap, seed) if bootstrap > 0 and n else None
    entry: dict = {"summary": {}, "classes": {}}
    for c, name in enumerate(classes):
        if not supported[c]:
            entry["classes"][name] = {"n_pairs": 0, **{k: None for k in STABILITY_KEYS}, "unsupported": True}
            continue
        e: dict = {"n_pairs": int(n)}
        for k in STABILITY_KEYS:
            e[k] = float(np.mean(values[k][:, c])) if n else None
        if draws is not None:
            e["ci95"] = {k: percentile_interval(values[k][:, c][draws].mean(axis=1), level) for k in STABILITY_KEYS}
        entry["classes"][name] = e
    for k in STABILITY_KEYS:
        entry["summary"][k] = mean_defined(np.array([np.nan if e[k] is None else e[k]
                                                     for e in entry["classes"].values()], dtype=np.float64))
    return entry


def score_robustness(sub, gt, names, aligned: dict, *, partial: dict, metrics_from_counts, bootstrap: int = 1000,
                     seed: int = 0, thresholds=None, metric_params=None,
                     timings: dict | None = None, phrase_metrics=None) -> dict:
    """The metrics.json "robustness" section for the datasets ``names`` whose ground truth has perturbed copies
    ({} when none has: metrics.json is then unchanged). ``metrics_from_counts``: the scorer's
    (:func:`xbench.score.scoring.metrics_from_counts`, handed in so this module sits below the orchestration)."""
    import time

    from xbench.schemas.augment import parse_spec
    from xbench.schemas.perturbations import copies_per_spec

    from xbench.score.counting import count_dataset

    t0 = time.perf_counter()
    section: dict = {}
    for name in sorted(names):
        gt_ds, sub_ds = gt.datasets[name], sub.datasets[name]
        table = getattr(gt_ds, "perturbations", None)
        if table is None:
            continue
        rows, present = _copies_present(sub_ds, table)
        entry: dict = {"n_cases": int(len(gt_ds.case_id)), "copies": int(table.copies), "n_copies": int(len(table))}
        if name in partial:
            section[name] = {**entry, "available": False, "reason": "the run scores part of the cases only"}
            continue
        if present < len(table):
            why = ("the submission holds none of the perturbed copies (extract on the whole images store)"
                   if present == 0 else f"the submission holds {present} of the {len(table)} perturbed copies; "
                                         "robustness needs all of them")
            section[name] = {**entry, "available": False, "reason": why}
            continue
        clean_rows, class_cols = aligned[name]
        parsed: dict = {}
        specs = [parsed.setdefault(t, parse_spec(t)) for t in table.spec.tolist()]
        per_case = copies_per_spec(table.specs, table.copies)
        per_spec: dict = {}
        for s, text in enumerate(table.specs):
            sel = np.flatnonzero(table.group == s)
            sel = sel[np.lexsort((table.id[sel], table.case[sel]))]  # by clean case, then copy id
            vgt, vsub = _view(name, gt_ds, sub_ds, table, sel, rows, specs)
            counts = count_dataset(vsub, vgt, case_rows=np.arange(sel.size, dtype=np.int64), class_cols=class_cols,
                                   where=f"{gt.path}/{name} (copies of {text})",
                                   metric_params=metric_params)
            # the cluster bootstrap: a resample draws clean cases and takes all copies of each (copies sorted by
            # clean case); the same draws as the stability intervals below (one default_rng(seed) per SPEC)
            metrics, _ = metrics_from_counts({name: counts}, bootstrap=bootstrap, seed=seed, thresholds=thresholds,
                                             clusters={name: np.asarray(table.case[sel], np.int64)})
            values, supported = _stability(gt_ds, sub_ds, clean_rows, class_cols, table, sel, rows, specs,
                                           per_case[s])
            per_spec[text] = {"n_copies": int(sel.size), "metrics": metrics["datasets"][name],
                              "stability": _stability_entry(values, gt_ds.classes, supported, bootstrap=bootstrap,
                                                            seed=seed)}
            phrases = None if phrase_metrics is None else _phrases(
                name, gt_ds, sub_ds, table, s, specs, phrase_metrics=phrase_metrics, bootstrap=bootstrap, seed=seed,
                where=f"{gt.path}/{name} (phrase rows of the copies of {text})",
                metric_params=None)  # as the clean phrase rows are counted (score_phrases: the defaults)
            if phrases is not None:  # only on a dataset whose copies have phrase rows: the section is as before
                per_spec[text]["phrases"] = phrases
        section[name] = {**entry, "available": True, "specs": per_spec}
    if timings is not None and section:
        timings["robustness"] = time.perf_counter() - t0
    return {"datasets": section} if section else {}
