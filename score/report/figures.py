"""The report's figures (matplotlib, object API on the Agg canvas; each saved as PNG and SVG).

- ``auroc_vs_pointing``: overall AUROC against overall pointing game per model, with the
  least-squares line and R² (paper Fig. 3); the line needs >= 3 models with distinct AUROC.
- ``dice_fixed_vs_best``: overall Dice at tau = 0.5 and at the best tau per model, ΔDice labelled
  (paper Fig. 4).
- ``pointing_heatmap``: pointing game per class (columns, grouped by dataset) and model (rows).
- ``region_size``: pointing game and best-threshold Dice by lesion size (small / medium / large).
  Size = region pixels / grid pixels. With the fixed bins (< 1 %, 1-5 %, >= 5 %; ``SIZE_EDGES``) the bars
  are the very numbers of the "Grounding by lesion size" table (metrics.json: mean over the classes with
  such a region, then over datasets) with its 95 % intervals; with terciles of all positive pairs
  (``bins="tercile"``), which no table has, they are means pooled over the pairs of the bin, with a 95 %
  percentile bootstrap over cases (within datasets), and the figure says "pooled over pairs".

Bars carry their 95 % intervals wherever the tables have them (metrics.json, or the intervals the report
computed from pair_counts.npz).

Every function takes the loaded results and an output stem (without suffix), writes
``stem.png`` and ``stem.svg``, and returns a dict describing what was drawn (or why nothing was).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from xbench.score.metrics import registry as R
from xbench.score.outputs.tables import ci_of, dataset_order, value_of
from xbench.score.table import DATASET_TITLES

from xbench.score.report._load import Result

__all__ = [
    "SIZE_EDGES",
    "save_figure",
    "auroc_vs_pointing",
    "dice_fixed_vs_best",
    "pointing_heatmap",
    "region_size",
    "size_bins",
    "linear_fit",
    "plain",
]

SIZE_EDGES = tuple(lo for _, lo, _ in R.LESION_SIZES[1:])  # the lesion-size strata of metrics.json
SIZE_LABELS = ("small", "medium", "large")


def save_figure(fig: Figure, stem: Path, *, dpi: int = 150, formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    """Write ``stem.<format>`` atomically for each of ``formats``; returns the paths. ``dpi`` also sets the
    resolution of raster images embedded in an SVG."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for ext in formats:
        final = stem.with_name(f"{stem.name}.{ext}")  # appended: a dot in a model name is not a suffix to replace
        tmp = final.with_name(f".{final.name}.tmp")
        # fixed metadata keeps SVG output byte-stable between runs
        extra = {"metadata": {"Date": None}} if ext == "svg" else {"pil_kwargs": {"compress_level": 3}}
        fig.savefig(tmp, format=ext, dpi=dpi, bbox_inches="tight", **extra)
        tmp.replace(final)
        out.append(final)
    return out


def _pct(x):
    return None if x is None else 100.0 * x


def plain(text) -> str:
    """``text`` drawn as written: Matplotlib reads ``$…$`` as mathtext (a model named ``$\\frac$`` crashed the
    report), and an escaped dollar sign is its documented literal. Every data-derived label goes through here."""
    return str(text).replace("$", r"\$")


def linear_fit(x, y) -> dict | None:
    """Least-squares line y = a x + b and R² = 1 - SS_res / SS_tot; None when < 3 points or x constant."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0:
        return None
    a, b = np.polyfit(x, y, 1)
    ss_res = float(np.sum((y - (a * x + b)) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return {"slope": float(a), "intercept": float(b), "r2": r2}


def auroc_vs_pointing(results: list[Result], stem: Path) -> dict:
    """Fig. 3: overall AUROC (x) vs overall pointing game (y), percent, with fitted line and R²: every model of the
    leaderboard that has both (the CLIP-style ones and the generative ones alike); ``left_out`` names the others
    and what they lack (a model scored only where AUROC is null by design, e.g. MS-CXR alone)."""
    pts = [(r.name, _pct(value_of(r.metrics, "overall", "auroc")), _pct(value_of(r.metrics, "overall", "pointing_game")))
           for r in results]
    left_out = [(p[0], "no overall AUROC" if p[1] is None else "no overall pointing game")
                for p in pts if p[1] is None or p[2] is None]
    pts = [p for p in pts if p[1] is not None and p[2] is not None]
    fig = Figure(figsize=(5.2, 4.2))
    ax = fig.add_subplot()
    fit = linear_fit([p[1] for p in pts], [p[2] for p in pts]) if pts else None
    for k, (name, x, y) in enumerate(pts):
        ax.scatter([x], [y], s=40, color=f"C{k % 10}", zorder=3)
        ax.annotate(plain(name), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.margins(x=0.12, y=0.08)  # room for the labels of the extreme points
    if fit:
        xs = np.linspace(min(p[1] for p in pts), max(p[1] for p in pts), 50)
        ax.plot(xs, fit["slope"] * xs + fit["intercept"], "k--", lw=1,
                label=f"fit: y = {fit['slope']:.2f}x {fit['intercept']:+.1f}, $R^2$ = {fit['r2']:.2f}")
        ax.legend(loc="best", fontsize=8, framealpha=0.8)
    elif not pts:
        ax.text(0.5, 0.5, "no model has both AUROC and pointing game", ha="center", transform=ax.transAxes)
    ax.set_xlabel("AUROC (%), mean over datasets")
    ax.set_ylabel("Pointing game (%), mean over datasets")
    ax.set_title("Recognition vs grounding")
    ax.grid(alpha=0.3)
    files = save_figure(fig, stem)
    return {"files": files, "points": pts, "fit": fit, "left_out": left_out}


def _ci_pct(r: Result, scope: str, key: str, computed: dict | None, cls: str | None = None):
    """The 95 % interval in percent (metrics.json, else the report's computed one), or None."""
    ci = ci_of(r.metrics, scope, key, cls, (computed or {}).get(r.name))
    if not ci or ci[0] is None or ci[1] is None:
        return None
    return 100.0 * float(ci[0]), 100.0 * float(ci[1])


def _yerr(values, cis):
    """Matplotlib's asymmetric error array (2, n) from values and intervals; 0 where either is missing."""
    lo, hi = [], []
    for v, ci in zip(values, cis):
        ok = v is not None and not np.isnan(v) and ci is not None
        lo.append(max(0.0, v - ci[0]) if ok else 0.0)
        hi.append(max(0.0, ci[1] - v) if ok else 0.0)
    return np.array([lo, hi])


def dice_fixed_vs_best(results: list[Result], stem: Path, computed: dict | None = None) -> dict:
    """Fig. 4: overall Dice at tau = 0.5 and at the best tau per model, with ΔDice = best - fixed, and the
    95 % intervals of both (error bars)."""
    names = [r.name for r in results]
    fixed = [_pct(value_of(r.metrics, "overall", "dice_fixed")) for r in results]
    best = [_pct(value_of(r.metrics, "overall", "dice_best")) for r in results]
    ci_fixed = [_ci_pct(r, "overall", "dice_fixed", computed) for r in results]
    ci_best = [_ci_pct(r, "overall", "dice_best", computed) for r in results]
    fig = Figure(figsize=(max(4.5, 1.0 + 0.9 * len(names)), 4.0))
    ax = fig.add_subplot()
    x = np.arange(len(names))
    f0 = [v if v is not None else 0.0 for v in fixed]
    b0 = [v if v is not None else 0.0 for v in best]
    err = {"ecolor": "0.2", "capsize": 3, "error_kw": {"lw": 1}}
    ax.bar(x - 0.2, f0, 0.4, label="Dice at τ = 0.5", color="C0", yerr=_yerr(f0, ci_fixed), **err)
    ax.bar(x + 0.2, b0, 0.4, label="Dice at best τ", color="C1", yerr=_yerr(b0, ci_best), **err)
    deltas = []
    for i, (f, b) in enumerate(zip(fixed, best)):
        d = None if f is None or b is None else b - f
        deltas.append(d)
        if d is not None:  # above the interval's top, so the label never sits on the error bar
            top = max(b, ci_best[i][1]) if ci_best[i] is not None else b
            ax.annotate(f"Δ{d:.1f}", (i + 0.2, top), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=8)
    ax.set_xticks(x, [plain(n) for n in names], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("Dice (%), mean over datasets")
    ax.set_title("Fixed vs best threshold (bars: 95% interval)" if any(ci_fixed + ci_best) else "Fixed vs best threshold")
    ax.legend(fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    files = save_figure(fig, stem)
    return {"files": files, "delta_dice": dict(zip(names, deltas)), "intervals": any(ci_fixed + ci_best)}


def pointing_heatmap(results: list[Result], stem: Path) -> dict:
    """Per-class pointing game: models (rows) by classes (columns, grouped by dataset), percent."""
    cols: list[tuple[str, str]] = []
    for d in dataset_order(results):
        for r in results:
            for c in r.metrics["datasets"].get(d, {}).get("classes", {}):
                if (d, c) not in cols:
                    cols.append((d, c))
    M = np.full((len(results), len(cols)), np.nan)
    for i, r in enumerate(results):
        for j, (d, c) in enumerate(cols):
            v = value_of(r.metrics, d, "pointing_game", c)
            if v is not None:
                M[i, j] = 100 * v
    fig = Figure(figsize=(max(4.5, 1.8 + 0.42 * len(cols)), max(2.5, 1.2 + 0.45 * len(results))))
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(M), aspect="auto", cmap="viridis", vmin=0, vmax=100)
    ax.set_facecolor("0.85")  # undefined cells (no positive pair) show grey
    ax.set_yticks(range(len(results)), [plain(r.name) for r in results], fontsize=8)
    multi = len({d for d, _ in cols}) > 1
    labels = [f"{DATASET_TITLES.get(d, d)}: {c}" if multi else c for d, c in cols]
    ax.set_xticks(range(len(cols)), [plain(t) for t in labels], rotation=60, ha="right", fontsize=7)
    if M.size <= 400:
        for i in range(M.shape[0]):
            for j in range(M.shape[1]):
                if not np.isnan(M[i, j]):
                    ax.text(j, i, f"{M[i, j]:.0f}", ha="center", va="center", fontsize=6,
                            color="white" if M[i, j] < 50 else "black")
    fig.colorbar(im, ax=ax, label="Pointing game (%)", shrink=0.8)
    ax.set_title("Pointing game per class")
    files = save_figure(fig, stem)
    return {"files": files, "columns": cols, "values": M}


def size_bins(fraction: np.ndarray, bins: str = "fixed") -> tuple[np.ndarray, tuple[float, float]]:
    """Bin index (0 small, 1 medium, 2 large) per pair and the two edges used (fractions of the grid).

    ``bins="fixed"`` uses SIZE_EDGES; ``"tercile"`` the 1/3 and 2/3 quantiles of ``fraction``.
    A value equal to an edge goes to the larger bin.
    """
    if bins == "fixed":
        edges = SIZE_EDGES
    elif bins == "tercile":
        if len(fraction) == 0:
            edges = SIZE_EDGES
        else:
            q = np.quantile(fraction, [1 / 3, 2 / 3])
            edges = (float(q[0]), float(q[1]))
    else:
        raise ValueError(f"bins must be 'fixed' or 'tercile'; got {bins!r}")
    return np.searchsorted(np.asarray(edges), fraction, side="right"), tuple(edges)


def _region_frame(r: Result):
    p = r.pairs
    p = p[p["has_region"].astype(bool)].copy()
    area = np.array([np.prod(r.grid(d)) for d in p["dataset"]], dtype=float) if len(p) else np.zeros(0)
    p["fraction"] = p["region_pixels"].to_numpy(dtype=float) / np.maximum(area, 1)
    return p


def _pooled_intervals(f, idx, metric: str, case_ids, bootstrap: int, seed: int) -> list:
    """95 % percentile bootstrap of the pooled mean of ``metric`` in each bin: cases resampled within each dataset
    (the unit the scorer resamples), each pair weighted by how often its case was drawn. [(lo, hi) or None] * 3."""
    if bootstrap <= 0 or len(f) == 0:
        return [None] * 3
    from xbench.score.resampling.engine import draw_indices, stream

    rng = stream(seed)
    x = f[metric].to_numpy(dtype=float, na_value=np.nan)
    num = np.zeros((bootstrap, 3))
    den = np.zeros((bootstrap, 3))
    for d, sub in f.groupby("dataset", sort=True, observed=True):
        rows = np.flatnonzero((f["dataset"] == d).to_numpy())
        ids = case_ids.get(str(d))
        universe = np.asarray(ids, dtype=str) if ids is not None and len(ids) else np.unique(sub["case_id"].astype(str))
        pos = {c: k for k, c in enumerate(universe)}
        case = np.array([pos.get(c, -1) for c in sub["case_id"].astype(str)])
        keep = (case >= 0) & ~np.isnan(x[rows])
        n = len(universe)
        draws = draw_indices(rng, n, bootstrap)
        counts = np.zeros((bootstrap, n), np.int32)
        np.add.at(counts, (np.repeat(np.arange(bootstrap), n), draws.ravel()), 1)
        w = counts[:, case[keep]]
        for b in range(3):
            sel = idx[rows][keep] == b
            num[:, b] += w[:, sel] @ x[rows][keep][sel]
            den[:, b] += w[:, sel].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = 100 * num / den
    out = []
    for b in range(3):
        ok = means[:, b][~np.isnan(means[:, b])]
        out.append((float(np.percentile(ok, 2.5)), float(np.percentile(ok, 97.5))) if ok.size else None)
    return out


def region_size(results: list[Result], stem: Path, *, bins: str = "fixed", computed: dict | None = None,
                bootstrap: int = 0, seed: int = 0) -> dict:
    """Pointing game and best-threshold Dice per lesion-size bin and model (bars with 95 % intervals), percent.

    ``bins="fixed"``: the metrics.json lesion-size metrics (``pointing_game_small`` ...; the table's numbers:
    mean over classes, then datasets) and their intervals (``computed``: the report's, where metrics.json has
    none); a result without them (scored before they existed) falls back to the pooled means below.
    ``bins="tercile"``: means pooled over the positive pairs of each bin (pairs.parquet), intervals from
    ``bootstrap`` case resamples (:func:`_pooled_intervals`). ``quantity`` in the result says which was drawn.
    The pair counts under the ticks come from pairs.parquet (results without it are left out of the pooled
    bars, listed under "skipped").
    """
    sizes = [s for s, _, _ in R.LESION_SIZES]
    table_keys = {m: [f"{m}_{sz}" for sz in sizes] for m in ("pointing_game", "dice_best")}
    from_table = bins == "fixed" and all(table_keys["pointing_game"][0] in r.metrics.get("overall", {}) for r in results)
    usable = results if from_table else [r for r in results if r.pairs is not None]
    skipped = [] if from_table else [r.name for r in results if r.pairs is None]
    frames = {r.name: _region_frame(r) for r in results if r.pairs is not None}
    pooled = np.concatenate([f["fraction"].to_numpy() for f in frames.values()]) if frames else np.zeros(0)
    _, edges = size_bins(pooled, bins)
    fig = Figure(figsize=(max(7.0, 2.0 + 1.2 * len(usable)), 4.0))
    axes = [fig.add_subplot(1, 2, k + 1) for k in range(2)]
    table: dict = {}
    width = 0.8 / max(1, len(usable))
    counts = np.zeros(3, int)
    err = {"ecolor": "0.2", "capsize": 2, "error_kw": {"lw": 0.8}}
    for k, r in enumerate(usable):
        f = frames.get(r.name)
        idx = np.searchsorted(np.asarray(edges), f["fraction"].to_numpy(), side="right") if f is not None else None
        vals, cis = {}, {}
        for metric, ax in zip(("pointing_game", "dice_best"), axes):
            if from_table:
                ys = [_pct(value_of(r.metrics, "overall", key)) for key in table_keys[metric]]
                ys = [np.nan if y is None else y for y in ys]
                ci = [_ci_pct(r, "overall", key, computed) for key in table_keys[metric]]
            else:
                column = "hit" if metric == "pointing_game" else "dice_best"
                x = f[column].to_numpy(dtype=float, na_value=np.nan)
                ys = []
                for b in range(3):
                    sel = x[(idx == b) & ~np.isnan(x)]
                    ys.append(100 * float(np.mean(sel)) if len(sel) else np.nan)
                ci = _pooled_intervals(f, idx, column, r.case_ids, min(bootstrap, 1000), seed)
            vals[metric], cis[metric] = ys, ci
            ax.bar(np.arange(3) + (k - (len(usable) - 1) / 2) * width, np.nan_to_num(ys), width,
                   label=plain(r.name), color=f"C{k % 10}", yerr=_yerr(ys, ci), **err)
        if idx is not None:
            counts = np.bincount(idx, minlength=3)[:3]
        table[r.name] = {"pointing_game": vals["pointing_game"], "dice_best": vals["dice_best"],
                         "ci95": cis, "n_pairs": counts.tolist()}
    lo, hi = edges
    ticks = [f"small\n< {100 * lo:.2g}%", f"medium\n{100 * lo:.2g}–{100 * hi:.2g}%", f"large\n≥ {100 * hi:.2g}%"]
    if frames:
        ticks = [f"{t}\n(n={n} pairs)" for t, n in zip(ticks, counts)]
    quantity = "mean over classes" if from_table else "pooled over pairs"
    for ax, title in zip(axes, ("Pointing game (%)", "Dice at best τ (%)")):
        ax.set_xticks(range(3), ticks, fontsize=8)
        ax.set_title(f"{title}, {quantity}", fontsize=10)
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
    if usable:
        axes[1].legend(fontsize=7, frameon=False, loc="upper left")
    fig.suptitle("Grounding by lesion size (region area / image area); bars: 95% interval")
    files = save_figure(fig, stem)
    return {"files": files, "edges": edges, "bins": bins, "values": table, "skipped": skipped,
            "quantity": quantity}
