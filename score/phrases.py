"""Phrase grounding: scoring the phrase rows (free-text queries) of a dataset, e.g. MS-CXR.

Each phrase row is a positive pair whose "class" is its category, so the class machinery counts it
unchanged: :func:`phrase_counts` hands :func:`xbench.score.scoring.count_dataset` a view of the
ground truth in which the "cases" are the phrase rows, the classes are the categories and every row has
one region (its ``query_mask``), and a view of the submission whose single map column is
``query_saliency``. Pointing game, Dice and IoU at the fixed and at the searched threshold (searched
per category, as per class) come from those counts. The contrast-to-noise ratio comes from a small
kernel of its own over the same resized maps (:func:`cnr_of_pairs`).

CNR (contract §Phrase grounding). On the raw map resized to the region grid (M, float64, the
contract's step 1), with R the phrase's region and O the other grid cells:

    CNR_signed = (mu_R - mu_O) / sqrt(var_R + var_O),   CNR = |CNR_signed|

means and variances over the cells of each set, population variances (divided by the cell count, ddof
= 0). CNR is unchanged by M -> a M + b with a > 0, so it is the same on the min-max normalised map
(up to rounding). A constant map (max M == min M) has CNR 0. It is undefined (NaN in the arrays, left
out of every mean, counted as ``n_cnr_undefined``) when R covers the whole grid (O is empty) or when
both variances are 0 while the means differ (an infinite ratio). A region never covers no cell (the
ground truth forbids empty regions).

Recognition metrics do not apply to phrase rows (every phrase describes a finding that is present).
Bootstrap intervals resample *images* (the dataset's cases) with replacement, because one image carries
several phrases: a resample takes each drawn image with all its phrases; the best thresholds are chosen
again in each resample, per category.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from .counts import DatasetCounts
from .grounding import FIXED_THRESHOLD_INDEX, best_threshold, class_mean_curves, dice_from_counts, iou_from_counts
from .kernels import THRESHOLDS, _resize_into, numba, resize_plan

__all__ = ["PHRASE_KEYS", "PhraseCounts", "cnr_of_pairs", "phrase_counts", "phrase_metrics", "score_phrases"]

#: per-category and summary keys of metrics.json "phrases"
PHRASE_KEYS = ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best", "cnr", "cnr_signed")
#: keys of the pooled mean over every phrase (no searched threshold: that is chosen per category)
POOLED_KEYS = ("pointing_game", "dice_fixed", "iou_fixed", "cnr", "cnr_signed")
#: the phrase table's metric columns, (key, header), in the order of leaderboard.md and index.html
PHRASE_COLUMNS = (("cnr", "CNR"), ("cnr_signed", "CNR (signed)"), ("pointing_game", "pointing game"),
                  ("iou_fixed", "IoU@0.5"), ("iou_best", "IoU best"), ("dice_fixed", "Dice@0.5"), ("dice_best", "Dice best"))


# ---------------------------------------------------------------------------------------------- CNR
@numba.njit(cache=True, nogil=True)
def _cnr_one(m, mask):
    """Signed CNR of one resized float64 map ``m`` (H, W) against ``mask`` (H, W) bool (see module doc)."""
    H, W = m.shape
    n_in = 0
    s_in = 0.0
    s_out = 0.0
    mn = m[0, 0]
    mx = m[0, 0]
    for i in range(H):
        for j in range(W):
            v = m[i, j]
            if v < mn:
                mn = v
            if v > mx:
                mx = v
            if mask[i, j]:
                n_in += 1
                s_in += v
            else:
                s_out += v
    n_out = H * W - n_in
    if n_in == 0 or n_out == 0:
        return np.nan
    if mx == mn:
        return 0.0
    mu_in = s_in / n_in
    mu_out = s_out / n_out
    q_in = 0.0
    q_out = 0.0
    for i in range(H):  # second pass: squared deviations from the means (no cancellation)
        for j in range(W):
            if mask[i, j]:
                d = m[i, j] - mu_in
                q_in += d * d
            else:
                d = m[i, j] - mu_out
                q_out += d * d
    den = np.sqrt(q_in / n_in + q_out / n_out)
    if den == 0.0:
        return np.nan
    return (mu_in - mu_out) / den


@numba.njit(cache=True, nogil=True)
def _cnr_chunk(maps, masks, local, area, row_idx, row_w, col_idx, col_w, out):
    """``out[p]`` = signed CNR of map ``maps[p]`` (float32, h x w) resized to the grid, against ``masks[local[p]]``."""
    H = masks.shape[1]
    W = masks.shape[2]
    buf = np.empty((H, W), dtype=np.float64)
    tmp = np.empty((maps.shape[1], W), dtype=np.float64)
    for p in range(maps.shape[0]):
        _resize_into(maps[p], area, row_idx, row_w, col_idx, col_w, tmp, buf)
        out[p] = _cnr_one(buf, masks[local[p]])


def cnr_of_pairs(maps, masks, local=None) -> np.ndarray:
    """Signed CNR of each (map, region) pair: ``maps`` (P, h, w) float16/32 raw maps, ``masks`` (n, H, W)
    bool regions on the grid, ``local`` (P,) the region row of each map (default ``arange(P)``).
    Returns (P,) float64; NaN where CNR is undefined (module doc). ``abs()`` gives CNR."""
    maps = np.ascontiguousarray(maps, dtype=np.float32)
    masks = np.ascontiguousarray(masks, dtype=bool)
    local = np.arange(maps.shape[0], dtype=np.int64) if local is None else np.ascontiguousarray(local, dtype=np.int64)
    if maps.ndim != 3 or masks.ndim != 3 or local.shape != (maps.shape[0],):
        raise ValueError(f"maps (P, h, w), masks (n, H, W) and local (P,) expected; got {maps.shape}, {masks.shape}, {local.shape}")
    if local.size and (local.min() < 0 or local.max() >= masks.shape[0]):
        raise ValueError("local points outside the masks")
    out = np.empty(maps.shape[0], dtype=np.float64)
    if maps.shape[0]:
        plan = resize_plan(maps.shape[1:], masks.shape[1:])
        _cnr_chunk(maps, masks, local, plan.area, plan.row_idx, plan.row_w, plan.col_idx, plan.col_w, out)
    return out


# ------------------------------------------------------------------------------------------- counting
@dataclass(frozen=True)
class PhraseCounts:
    """Counts of the phrase rows of one dataset.

    ``counts``: a :class:`DatasetCounts` whose "cases" are the phrase rows (``case_id`` = query ids) and
    whose classes are the categories; its pair arrays run by category, then phrase row. ``image`` (P,):
    the dataset case row (image) of each pair, ``cnr`` (P,): its signed CNR, both in pair order.
    """

    counts: DatasetCounts
    image: np.ndarray
    cnr: np.ndarray
    n_images: int

    @property
    def name(self) -> str:
        return self.counts.name


def _views(sub_ds, gt_ds):
    """The ground truth and submission seen as a dataset of phrase rows (see the module doc)."""
    q = gt_ds.queries
    categories = tuple(gt_ds.classes)
    col = np.array([categories.index(c) for c in q.category.tolist()], dtype=np.int64)
    labels = np.full((len(q), len(categories)), -1, dtype=np.int8)
    labels[np.arange(len(q)), col] = 1
    gt_view = SimpleNamespace(name=gt_ds.name, classes=categories, case_id=q.id, labels=labels,
                              region_index=np.stack([np.arange(len(q)), col], axis=1), region_mask=gt_ds.query_mask,
                              grid=tuple(gt_ds.grid))
    sub_view = SimpleNamespace(name=sub_ds.name, unsupported=(), score_kind="logit",
                               scores=np.asarray(sub_ds.query_scores, np.float32).reshape(-1, 1),
                               saliency=sub_ds.query_saliency)
    return gt_view, sub_view


def phrase_counts(sub_ds, gt_ds, *, region_problems: list | None = None, where: str | None = None,
                  timings: dict | None = None) -> PhraseCounts:
    """Counts and CNR of every phrase row of one dataset (``gt_ds.queries`` must exist; the submission's
    phrase rows are matched by id)."""
    from xbench.schemas.store import iter_row_blocks, read_rows
    from xbench.schemas.submission import align_queries

    from .scoring import _gather_maps, count_dataset

    gt_view, sub_view = _views(sub_ds, gt_ds)
    rows = align_queries(sub_ds, gt_ds)
    n_cat = len(gt_view.classes)
    dc = count_dataset(sub_view, gt_view, case_rows=rows, class_cols=np.zeros(n_cat, np.int64),
                       region_problems=region_problems, where=where, timings=timings)
    # CNR, one stored chunk of phrase regions at a time, in phrase-row order
    cnr_rows = np.full(len(gt_ds.queries), np.nan)
    masks = gt_ds.query_mask
    sal = sub_ds.query_saliency
    problems: list = []
    for start, stop in iter_row_blocks(masks):
        block = read_rows(masks, start, stop, f"{where or gt_ds.name}/query_mask", problems)
        if block is None:
            continue
        maps = _gather_maps(sal, rows[start:stop], np.zeros(stop - start, np.int64))
        cnr_rows[start:stop] = cnr_of_pairs(maps, block)
    if problems:
        if region_problems is None:
            from xbench.schemas import InvalidStoreError

            raise InvalidStoreError(problems)
        region_problems.extend(problems)
    return PhraseCounts(counts=dc, image=np.asarray(gt_ds.queries.case, np.int64)[dc.pair_case],
                        cnr=cnr_rows[dc.pair_case], n_images=int(np.asarray(gt_ds.case_id).shape[0]))


# -------------------------------------------------------------------------------------------- metrics
def _pair_values(pc: PhraseCounts, idx: np.ndarray, kd: int | None = None, ki: int | None = None) -> dict:
    """Per-pair values (P_idx,) of the pooled keys, float64 (NaN where undefined)."""
    dc = pc.counts
    r = dc.region_pixels[idx]
    k = FIXED_THRESHOLD_INDEX
    out = {"pointing_game": dc.hit[idx].astype(np.float64),
           "dice_fixed": dice_from_counts(dc.b[idx, k:k + 1], dc.br[idx, k:k + 1], r)[:, 0],
           "iou_fixed": iou_from_counts(dc.b[idx, k:k + 1], dc.br[idx, k:k + 1], r)[:, 0],
           "cnr": np.abs(pc.cnr[idx]), "cnr_signed": pc.cnr[idx]}
    return out


def _mean(v: np.ndarray) -> float | None:
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else None


def _category_point(pc: PhraseCounts, c: int) -> dict:
    dc = pc.counts
    idx = dc.class_pairs(c)
    entry: dict = {"n_phrases": int(idx.size), "n_images": int(np.unique(pc.image[idx]).size)}
    if not idx.size:
        entry.update({k: None for k in PHRASE_KEYS})
        entry.update({"tau_dice": None, "tau_iou": None, "n_cnr_undefined": 0})
        return entry
    dmeans, imeans = class_mean_curves(dc.b, dc.br, dc.region_pixels, rows=idx)
    kd, ki = best_threshold(dmeans), best_threshold(imeans)
    vals = _pair_values(pc, idx)
    entry.update({
        "pointing_game": float(vals["pointing_game"].mean()),
        "dice_fixed": float(dmeans[FIXED_THRESHOLD_INDEX]), "iou_fixed": float(imeans[FIXED_THRESHOLD_INDEX]),
        "dice_best": float(dmeans[kd]), "iou_best": float(imeans[ki]),
        "tau_dice": float(THRESHOLDS[kd]), "tau_iou": float(THRESHOLDS[ki]),
        "cnr": _mean(vals["cnr"]), "cnr_signed": _mean(vals["cnr_signed"]),
        "n_cnr_undefined": int(np.isnan(vals["cnr"]).sum()),
    })
    return entry


def _weighted(w: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Row-weighted means of ``v`` (P,) or (P, T) under weights ``w`` (B, P), NaN values left out; NaN
    where a row has no weight on a defined value."""
    defined = ~np.isnan(v) if v.ndim == 1 else np.ones(v.shape[0], bool)
    wd = w * defined
    tot = wd.sum(axis=1)
    num = wd @ np.where(np.isnan(v), 0.0, v) if v.ndim == 1 else wd @ v
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / (tot if v.ndim == 1 else tot[:, None])


def _replicates(pc: PhraseCounts, n_resamples: int, rng: np.random.Generator, chunk: int = 250) -> dict:
    """Bootstrap replicates, (B,) float64 each: per category (PHRASE_KEYS), summary, pooled.

    Each resample draws the dataset's images with replacement; a phrase enters with the multiplicity of
    its image. Best thresholds are chosen again per category in each resample.
    """
    dc = pc.counts
    n = pc.n_images
    cats = [c for c in range(len(dc.classes)) if dc.class_pairs(c).size]
    per_cat = {dc.classes[c]: {k: [] for k in PHRASE_KEYS} for c in cats}
    pooled = {k: [] for k in POOLED_KEYS}
    all_idx = np.arange(dc.pair_case.size)
    all_vals = _pair_values(pc, all_idx)
    curves = {}
    for c in cats:
        idx = dc.class_pairs(c)
        r = dc.region_pixels[idx]
        curves[c] = (idx, dice_from_counts(dc.b[idx], dc.br[idx], r), iou_from_counts(dc.b[idx], dc.br[idx], r))
    for b0 in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - b0)
        draws = rng.multinomial(n, np.full(n, 1.0 / n), size=b).astype(np.float64)  # (b, N) image counts
        w_all = draws[:, pc.image]
        for k in POOLED_KEYS:
            pooled[k].append(_weighted(w_all, all_vals[k]))
        for c in cats:
            idx, dice, iou = curves[c]
            w = w_all[:, idx]
            dm, im = _weighted(w, dice), _weighted(w, iou)
            stats = per_cat[dc.classes[c]]
            for k in ("pointing_game", "cnr", "cnr_signed"):
                stats[k].append(_weighted(w, all_vals[k][idx]))
            stats["dice_fixed"].append(dm[:, FIXED_THRESHOLD_INDEX])
            stats["iou_fixed"].append(im[:, FIXED_THRESHOLD_INDEX])
            stats["dice_best"].append(dm.max(axis=1))  # NaN rows (category not drawn) stay NaN
            stats["iou_best"].append(im.max(axis=1))
    per_cat = {c: {k: np.concatenate(v) for k, v in s.items()} for c, s in per_cat.items()}
    with warnings.catch_warnings():  # a resample may draw no phrase of any category: all-NaN is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        summary = {k: np.nanmean(np.stack([per_cat[c][k] for c in per_cat]), axis=0) if per_cat
                   else np.full(n_resamples, np.nan) for k in PHRASE_KEYS}
    return {"categories": per_cat, "summary": summary, "pooled": {k: np.concatenate(v) for k, v in pooled.items()}}


def phrase_metrics(pc: PhraseCounts, *, bootstrap: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """The metrics.json "phrases" entry of one dataset (contract §metrics.json): per category, the
    summary (unweighted mean over categories with a phrase) and the pooled mean over every phrase."""
    from .bootstrap import percentile_interval

    dc = pc.counts
    categories = {name: _category_point(pc, c) for c, name in enumerate(dc.classes)}
    defined = [e for e in categories.values() if e["n_phrases"]]
    summary = {k: _mean(np.array([np.nan if e[k] is None else e[k] for e in defined], dtype=np.float64))
               for k in PHRASE_KEYS}
    vals = _pair_values(pc, np.arange(dc.pair_case.size))
    pooled = {k: _mean(vals[k]) for k in POOLED_KEYS}
    entry = {"n_phrases": int(dc.pair_case.size), "n_images": int(np.unique(pc.image).size),
             "n_cnr_undefined": int(np.isnan(pc.cnr).sum()), "summary": summary, "all_phrases": pooled,
             "categories": categories}
    if bootstrap > 0 and dc.pair_case.size:
        reps = _replicates(pc, bootstrap, np.random.default_rng(seed))
        for name, stats in reps["categories"].items():
            categories[name]["ci95"] = {k: percentile_interval(v, level) for k, v in stats.items()}
        entry["ci95"] = {k: percentile_interval(v, level) for k, v in reps["summary"].items()}
        entry["all_phrases"]["ci95"] = {k: percentile_interval(v, level) for k, v in reps["pooled"].items()}
    return entry


def score_phrases(sub, gt, names, *, bootstrap: int = 1000, seed: int = 0, where: str = "",
                  region_problems: list | None = None, timings: dict | None = None) -> tuple[dict, dict]:
    """The metrics.json "phrases" section for the datasets ``names`` whose ground truth has phrase rows,
    and their :class:`PhraseCounts`. A submission that declares its model cannot take free text
    (``phrases_unsupported``) gets null metrics with the reason. Returns ({} , {}) when no dataset has any."""
    from xbench.schemas.queries import UNSUPPORTED_ATTR

    section: dict = {}
    counts: dict[str, PhraseCounts] = {}
    for name in sorted(names):
        gt_ds, sub_ds = gt.datasets[name], sub.datasets[name]
        if getattr(gt_ds, "queries", None) is None:
            continue
        reason = sub_ds.attrs.get(UNSUPPORTED_ATTR)
        if reason is not None or sub_ds.query_id is None:
            section[name] = {"n_phrases": len(gt_ds.queries), "unsupported": True,
                             "reason": str(reason or "the submission has no phrase rows"),
                             "summary": {k: None for k in PHRASE_KEYS}}
            continue
        pc = counts[name] = phrase_counts(sub_ds, gt_ds, region_problems=region_problems,
                                          where=f"{where}/{name}" if where else name, timings=timings)
        section[name] = phrase_metrics(pc, bootstrap=bootstrap, seed=seed)
    if section:
        section = {"overall": {k: _mean(np.array([np.nan if d["summary"][k] is None else d["summary"][k]
                                                  for d in section.values()], dtype=np.float64))
                               for k in PHRASE_KEYS},
                   "datasets": section}
    return section, counts


# --------------------------------------------------------------------------------------------- report
def phrase_rows(results) -> list[dict]:
    """One row per (model, dataset, category or "all categories") of the metrics.json "phrases" sections
    of score results (objects with ``name`` and ``metrics``): CNR and pointing game beside IoU/Dice, and the
    95 % intervals (``ci95``, {key: [lo, hi]}; empty without a bootstrap)."""
    rows = []
    for r in results:
        section = (r.metrics.get("phrases") or {}).get("datasets", {})
        for d, entry in sorted(section.items()):
            scopes = [("all categories", entry.get("summary", {}), entry.get("n_phrases"))]
            scopes += [(c, e, e.get("n_phrases")) for c, e in sorted((entry.get("categories") or {}).items())]
            for scope, vals, n in scopes:
                rows.append({"model": r.name, "dataset": d, "category": scope, "n_phrases": n,
                             **{k: vals.get(k) for k in PHRASE_KEYS},
                             "ci95": dict((entry if scope == "all categories" else vals).get("ci95") or {}),
                             "note": entry.get("reason", "") if entry.get("unsupported") else ""})
    return rows


def phrase_markdown(rows: list[dict]) -> str:
    """The phrase-grounding table of the leaderboard (Markdown; fractions as %, CNR as a ratio)."""
    from .tables import md_cell

    def cell(k, v):
        if v is None:
            return "n/a"
        return f"{v:.2f}" if k.startswith("cnr") else f"{100 * v:.1f}"

    head = ["model", "dataset", "category", "phrases"] + [t for _, t in PHRASE_COLUMNS]
    keys = [k for k, _ in PHRASE_COLUMNS]
    out = ["## Phrase grounding (per category; CNR = |mu_in - mu_out| / sqrt(var_in + var_out))", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        out.append("| " + " | ".join([md_cell(row["model"]), md_cell(row["dataset"]), md_cell(row["category"]),
                                      str(row["n_phrases"])] + [cell(k, row[k]) for k in keys]) + " |")
    return "\n".join(out) + "\n"


def phrase_csv(rows: list[dict]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["model", "dataset", "category", "n_phrases", *PHRASE_KEYS, "note"],
                       extrasaction="ignore")  # the intervals are the report's (index.html), not this file's
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()
