"""Text probes (metrics.json minor 5, section ``text_probes``): does a phrase map change when the phrase is
negated, its side swapped or its words shuffled? (contract §Text probes; docs/how-to/text-probes.md)

The ground truth marks some phrase rows as probes of an original row (:mod:`xbench.schemas.probes`). The
phrase metrics never see them: :func:`originals_only` gives the phrase scorer a view of the ground truth
with the original rows alone, so those score exactly as against a ground truth prepared without probes.
Here, each probe's map is compared with its original's map, both resized to the grid as every map is
(contract §Metrics step 1, R = the resized map, M~ = R min-max normalised):

* ``rank_change`` = 1 - Spearman's rho of R_orig and R_probe over the H W cells (Pearson's correlation of
  their average ranks; ties share the mean rank); in [0, 2], 0 for the same ordering. Undefined (left out
  of means, counted in ``n_rank_undefined``) when either map is constant.
* ``mass_change`` = 1/2 sum_u |p(u) - q(u)|, p = M~_orig / sum M~_orig, q likewise (the total variation
  distance of the two maps read as distributions; a constant map is the even distribution 1 / (H W)); in
  [0, 1), 0 for maps equal up to a positive scale and shift.
* Laterality, on image columns (not the patient's sides): a cell of column j is in the left half when
  2 j + 1 < W and in the right half when 2 j + 1 > W (the middle column of an odd W in neither); the left
  share s = A_left / (A_left + A_right), A the sum of M~ over a half. The dominant side is the left when
  s > 1/2, the right when s < 1/2, none at 1/2. For a laterality probe whose original has a dominant side
  and both shares are defined: ``moved`` = 1 when the probe's dominant side is the other one, else 0; and
  ``side_shift`` = (s_orig - s_probe), signed so that it is positive when mass moves towards the other
  half (times +1 when the original is left-dominant, -1 when right-dominant); in [-1, 1]. The other
  laterality probes are counted in ``n_side_undefined``.

Per dataset, per kind (and per category and kind): the mean over the probes (rank_change over those where
it is defined), and a 95 % percentile bootstrap interval over images, as for the phrase metrics: ``B``
resamples of the dataset's images with replacement (its images are its scored cases: the dataset's own draws
in the run's one stream, docs/contract.md "Resampling"; ``numpy.random.default_rng(seed).integers(0, n_images,
(B, n_images))`` for the first dataset in sorted order), each drawn image with all its probes, the mean re-taken in each resample (a resample
without a probe of the group is left out). Overall: per kind, the unweighted mean over datasets.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from xbench.schemas.schema_versions import minor
from xbench.score.resampling.intervals import mean_defined
from xbench.score.metrics.average_ranks import average_ranks

__all__ = ["PROBES_METRICS_MINOR", "KEYS", "SIDE_KEYS", "originals_only", "probe_values", "score_probes",
           "rank_change", "mass_change", "left_share", "probe_rows", "COLUMNS"]

#: metrics.json minor version that adds the "text_probes" section (contract §Versions)
PROBES_METRICS_MINOR = minor("metrics", "text_probes")
KEYS = ("rank_change", "mass_change")
SIDE_KEYS = ("moved", "side_shift")
_BATCH = 512  # probe rows whose maps (and their originals') are held at once


# --------------------------------------------------------------------------------- the original rows alone
class _Rows:
    """Rows ``rows`` (sorted) of a lazy (Q, H, W) array, read a slice at a time: the phrase scorer reads the
    masks of the original rows through this, never the probes' (which are their originals' anyway)."""

    def __init__(self, arr, rows: np.ndarray):
        self._arr, self._rows = arr, np.asarray(rows, np.int64)
        self.shape = (len(self._rows), *arr.shape[1:])
        self.dtype = arr.dtype
        self.chunks = (int(arr.chunks[0]) if hasattr(arr, "chunks") else 256, *arr.shape[1:])
        self.ndim = len(self.shape)

    def __getitem__(self, key):
        if not isinstance(key, slice):
            raise TypeError("row slices only")
        rows = self._rows[key]
        if not rows.size:
            return np.zeros((0, *self.shape[1:]), self.dtype)
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        return np.asarray(self._arr[lo:hi])[rows - lo]


def originals_only(gt_ds):
    """``gt_ds`` with its original phrase rows only (itself when it has no probes)."""
    probes = getattr(gt_ds, "query_probes", None)
    if probes is None or gt_ds.queries is None:
        return gt_ds
    keep = ~probes.is_probe
    rows = np.flatnonzero(keep)
    q = gt_ds.queries
    def strings(a):  # as wide as the longest kept string, as a store without the probes would read
        return np.asarray(a[keep].tolist(), dtype=str)

    queries = dataclasses.replace(q, id=strings(q.id), case=q.case[keep], category=strings(q.category),
                                  text=None if q.text is None else strings(q.text))
    return dataclasses.replace(gt_ds, queries=queries, query_mask=_Rows(gt_ds.query_mask, rows), query_probes=None)


# --------------------------------------------------------------------------------------- the definitions
def rank_change(a: np.ndarray, b: np.ndarray) -> float:
    """1 - Spearman's rho of two resized maps (NaN when either is constant)."""
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    if a.min() == a.max() or b.min() == b.max():
        return float("nan")
    ra, rb = average_ranks(a), average_ranks(b)
    ra -= ra.mean()
    rb -= rb.mean()
    return float(1.0 - (ra @ rb) / np.sqrt((ra @ ra) * (rb @ rb)))


def _distribution(m: np.ndarray) -> np.ndarray:
    m = np.ravel(m).astype(np.float64)
    mn, mx = m.min(), m.max()
    if mn == mx:
        return np.full(m.size, 1.0 / m.size)
    v = (m - mn) / (mx - mn)
    return v / v.sum()


def mass_change(a: np.ndarray, b: np.ndarray) -> float:
    """Total variation distance of two resized maps read as distributions (after min-max normalisation)."""
    return float(0.5 * np.abs(_distribution(a) - _distribution(b)).sum())


def left_share(m: np.ndarray) -> float:
    """Share of the normalised map's side mass in the image's left half (NaN when there is none)."""
    m = np.asarray(m, np.float64)
    mn, mx = m.min(), m.max()
    if mn == mx:
        return float("nan")
    v = (m - mn) / (mx - mn)
    W = m.shape[1]
    j = np.arange(W)
    left, right = v[:, 2 * j + 1 < W].sum(), v[:, 2 * j + 1 > W].sum()
    return float(left / (left + right)) if left + right > 0 else float("nan")


def probe_values(orig: np.ndarray, probe: np.ndarray, kind: str) -> dict[str, float]:
    """Every per-probe value of one (original, probe) pair of resized maps (NaN where undefined)."""
    out = {"rank_change": rank_change(orig, probe), "mass_change": mass_change(orig, probe)}
    if kind == "laterality":
        so, sp = left_share(orig), left_share(probe)
        side = 0.0 if np.isnan(so) else float(np.sign(so - 0.5))
        if side == 0.0 or np.isnan(sp):
            out["moved"] = out["side_shift"] = float("nan")
        else:
            out["moved"] = float(np.sign(sp - 0.5) == -side)
            out["side_shift"] = float(side * (so - sp))
    return out


# ---------------------------------------------------------------------------------------------- scoring
def _per_probe(sub_ds, gt_ds, present_cases: np.ndarray | None):
    """(kind, category, image, values dict) per probe row of the images present, in row order."""
    from xbench.schemas.submission import align_queries

    from xbench.score.counting import gather_maps
    from xbench.score.kernels.maps import resize_map

    q, probes = gt_ds.queries, gt_ds.query_probes
    rows = align_queries(sub_ds, gt_ds, present_cases)  # submission row per ground-truth phrase row
    row_of = {qid: r for r, qid in enumerate(q.id.tolist())}
    mine = np.flatnonzero(probes.is_probe & (rows >= 0))
    src = np.array([row_of[str(probes.of[r])] for r in mine], np.int64)
    grid = tuple(int(g) for g in gt_ds.grid)
    sal = sub_ds.query_saliency
    values: list[dict] = []
    for a in range(0, mine.size, _BATCH):
        p, o = mine[a:a + _BATCH], src[a:a + _BATCH]
        zero = np.zeros(p.size, np.int64)
        maps_p, maps_o = gather_maps(sal, rows[p], zero), gather_maps(sal, rows[o], zero)
        for k in range(p.size):
            values.append(probe_values(resize_map(maps_o[k], grid), resize_map(maps_p[k], grid),
                                       str(probes.kind[p[k]])))
    image = np.asarray(q.case, np.int64)[mine]
    if present_cases is not None:  # images numbered among those present, as for the phrase bootstrap
        image = (np.cumsum(present_cases) - 1)[image]
    return probes.kind[mine], q.category[mine], image, values


def _group_entry(vals: list[dict], image: np.ndarray, n_images: int, kind: str, draws: np.ndarray | None,
                 level: float) -> dict:
    """One kind's (or category and kind's) entry: counts, means and intervals."""
    from xbench.score.resampling.intervals import percentile_interval

    keys = KEYS + (SIDE_KEYS if kind == "laterality" else ())
    entry: dict = {"n_probes": len(vals)}
    table = {k: np.array([v.get(k, np.nan) for v in vals], np.float64) for k in keys}
    entry["n_rank_undefined"] = int(np.isnan(table["rank_change"]).sum())
    if kind == "laterality":
        entry["n_side_undefined"] = int(np.isnan(table["moved"]).sum())
    for k in keys:
        entry[k] = mean_defined(table[k])
    if draws is not None and len(vals):
        w = draws  # (B, n_images): how often each image is drawn in each resample
        ci = {}
        for k in keys:
            ok = ~np.isnan(table[k])
            sums = np.bincount(image[ok], weights=table[k][ok], minlength=n_images)
            counts = np.bincount(image[ok], minlength=n_images).astype(np.float64)
            den = w @ counts
            with np.errstate(invalid="ignore", divide="ignore"):
                reps = np.where(den > 0, (w @ sums) / np.where(den > 0, den, 1.0), np.nan)
            ci[k] = percentile_interval(reps, level)
        entry["ci95"] = ci
    return entry


def dataset_probes(sub_ds, gt_ds, *, bootstrap: int = 1000, seed: int = 0, level: float = 0.95,
                   cases: np.ndarray | None = None, prior=()) -> dict:
    """The "text_probes" entry of one dataset (its ground truth has probes)."""
    from xbench.schemas.probes import KINDS

    kind, category, image, values = _per_probe(sub_ds, gt_ds, cases)
    n_images = int(np.count_nonzero(cases)) if cases is not None else int(len(gt_ds.case_id))
    draws = None
    if bootstrap > 0 and n_images:
        from xbench.score.resampling.engine import positioned_stream, resample_weights

        # the dataset's own resamples in the one stream (its images are its scored cases, in case order)
        draws = np.concatenate(list(resample_weights(n_images, bootstrap, positioned_stream(prior, bootstrap, seed))))

    def block(sel: np.ndarray) -> dict:
        return {k: _group_entry([values[i] for i in np.flatnonzero(sel & (kind == k))], image[sel & (kind == k)],
                                n_images, k, draws, level)
                for k in KINDS if (sel & (kind == k)).any()}

    everything = np.ones(len(values), bool)
    entry = {"n_probes": len(values), "kinds": block(everything)}
    entry["categories"] = {c: {"n_probes": int((category == c).sum()), "kinds": block(category == c)}
                           for c in sorted(set(category.tolist()))}
    return entry


def score_probes(sub, gt, names, *, bootstrap: int = 1000, seed: int = 0,
                 cases: Mapping[str, np.ndarray] | None = None, units: Mapping[str, int] | None = None) -> dict:
    """The metrics.json "text_probes" section for the datasets ``names`` whose ground truth has probes ({} when
    none has). A submission that declares ``phrases_unsupported`` gets ``unsupported`` with the reason."""
    from xbench.schemas.probes import KINDS
    from xbench.schemas.queries import UNSUPPORTED_ATTR
    from xbench.score.resampling.engine import prior_units

    datasets: dict = {}
    for name in sorted(names):
        gt_ds, sub_ds = gt.datasets[name], sub.datasets[name]
        if getattr(gt_ds, "query_probes", None) is None:
            continue
        present = (cases or {}).get(name)
        reason = sub_ds.attrs.get(UNSUPPORTED_ATTR)
        if reason is not None or sub_ds.query_id is None:
            datasets[name] = {"n_probes": int(gt_ds.query_probes.is_probe.sum()), "unsupported": True,
                              "reason": str(reason or "the submission has no phrase rows")}
            continue
        datasets[name] = dataset_probes(sub_ds, gt_ds, bootstrap=bootstrap, seed=seed, cases=present,
                                        prior=prior_units(units or {}, name))
    if not datasets:
        return {}
    overall = {}
    for k in KINDS:
        entries = [d["kinds"][k] for d in datasets.values() if k in d.get("kinds", {})]
        if entries:
            keys = KEYS + (SIDE_KEYS if k == "laterality" else ())
            overall[k] = {key: mean_defined(np.array([np.nan if e[key] is None else e[key] for e in entries]))
                          for key in keys}
    return {"overall": overall, "datasets": datasets}


# ---------------------------------------------------------------------------------------------- tables
COLUMNS = (("rank_change", "1 - Spearman"), ("mass_change", "TV distance"), ("moved", "Moved side"),
            ("side_shift", "Side shift"))


def probe_rows(results) -> list[dict]:
    """One row per (model, dataset, category or "all categories", kind) of the "text_probes" sections."""
    rows = []
    for model, metrics in (results.items() if isinstance(results, Mapping) else results):
        section = (metrics.get("text_probes") or {}).get("datasets", {})
        for d, entry in sorted(section.items()):
            scopes = [("all categories", entry)] + sorted((entry.get("categories") or {}).items())
            for scope, e in scopes:
                for kind, v in (e.get("kinds") or {}).items():
                    rows.append({"model": model, "dataset": d, "category": scope, "kind": kind,
                                 "n_probes": v["n_probes"], **{k: v.get(k) for k, _ in COLUMNS},
                                 "ci95": dict(v.get("ci95") or {})})
            if entry.get("unsupported"):
                rows.append({"model": model, "dataset": d, "category": "all categories", "kind": "",
                             "n_probes": entry["n_probes"], **{k: None for k, _ in COLUMNS}, "ci95": {}})
    return rows


def run_section(run, *, bootstrap: int, seed: int, metric_params=None, timings=None) -> dict:
    """The "text_probes" track's section from an opened scoring run (:mod:`xbench.score.sections.plugins`)."""
    return score_probes(run.sub, run.gt, run.scored, bootstrap=bootstrap, seed=seed,
                        cases={d: run.aligned[d][0] >= 0 for d in run.partial},
                        units={d: int(np.count_nonzero(run.aligned[d][0] >= 0)) for d in run.scored})
