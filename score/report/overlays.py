"""Saliency maps drawn over the images, with the ground-truth outline, for the best and worst
positive pair of each class (by best-threshold Dice, ties broken by the pointing-game hit, then by
case order).

One figure per (model, dataset): rows are classes, the two columns the best and the worst case.
The image is images.zarr's S x S picture; the raw map (min-max normalised, as the scorer does) and
the ground-truth region (grid H x W) are both stretched over the whole image, since maps and
regions cover the whole original image by contract. Needs the model's pairs.parquet and the
paths of images.zarr, gt.zarr and the submission store.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from xbench.schemas.paths import NameTable
from xbench.score.table import DATASET_TITLES

from xbench.score.report._load import Result
from xbench.score.report.figures import plain, save_figure

__all__ = ["pick_cases", "draw_panel", "map_peak", "overlay_figure", "overlay_figures", "pointing_peak"]

MAX_CLASSES = 24  # rows per figure; a larger dataset is cut (the figure says so)


def pick_cases(pairs, dataset: str, cls: str) -> tuple[dict | None, dict | None]:
    """(best, worst) rows (as dicts) among the positive pairs of one class; (None, None) if none."""
    sub = pairs[(pairs["dataset"] == dataset) & (pairs["class"] == cls) & pairs["has_region"].astype(bool)]
    if len(sub) == 0:
        return None, None
    dice = sub["dice_best"].to_numpy(dtype=float, na_value=-1.0)
    key = dice + 1e-9 * sub["hit"].to_numpy(dtype=float, na_value=0.0)
    order = np.argsort(-key, kind="stable")
    rows = sub.iloc[order].to_dict("records")
    return rows[0], rows[-1]


def _normalise(m: np.ndarray) -> np.ndarray:
    m = m.astype(np.float64)
    lo, hi = float(m.min()), float(m.max())
    return np.zeros_like(m) if hi == lo else (m - lo) / (hi - lo)


#: the region's outline: white with a black halo, visible on the jet map's blues and reds and on grey alike
#: (cyan vanished where the map is cyan or light blue)
OUTLINE = {"colors": "white", "linewidths": 1.6}
HALO = 3.6
#: the pointing-game peak: a white cross with a black halo
PEAK = {"marker": "x", "color": "white", "markersize": 11, "markeredgewidth": 2.2}


def pointing_peak(saliency: np.ndarray, grid: tuple[int, int]) -> tuple[int, int] | None:
    """(row, col) on the grid of the pointing-game peak of the map resized as the scorer does (the centroid of
    its maximum's cells, :func:`xbench.schemas.pointing.peak_cell`); None for a constant map."""
    from xbench.score.kernels.maps import peak_cell, resize_map

    return peak_cell(resize_map(np.asarray(saliency), grid))


def map_peak(smap: np.ndarray) -> tuple[int, int] | None:
    """(row, col) of the map's peak on its own grid, by the pointing game's rule
    (:func:`xbench.schemas.pointing.peak_cell`: the centroid of its maximum's cells); a NaN cell is lower than any
    number; None for a constant map."""
    from xbench.schemas.pointing import peak_cell

    return peak_cell(smap, nan_lowest=True)


def draw_panel(ax, image: np.ndarray, smap: np.ndarray, mask: np.ndarray | None, *, peak=None):
    """One overlay: the S x S image, the min-max normalised map stretched over it (jet, 40 %), the region's
    outline (white, black halo) and the pointing-game peak as a white cross (black halo): ``peak`` (row, col) on
    the region's grid, by default the scorer's (the peak of the map resized to that grid, none for a constant map; without a
    region the map's own peak, :func:`map_peak`); ``peak=False`` draws none. Returns the map's image
    artist (for a colour bar)."""
    from matplotlib import patheffects
    S = image.shape[-1]
    ext = (0, S, S, 0)
    ax.imshow(image, cmap="gray", extent=ext, vmin=0, vmax=255)
    im = ax.imshow(_normalise(smap), cmap="jet", alpha=0.4, extent=ext, interpolation="bilinear", vmin=0, vmax=1)
    if mask is not None and mask.any():
        H, W = mask.shape
        # contour coordinates are cell centres mapped to image pixels; a zero border keeps
        # the outline closed where the region touches the image edge
        ys = (np.arange(-1, H + 1) + 0.5) * S / H
        xs = (np.arange(-1, W + 1) + 0.5) * S / W
        cs = ax.contour(xs, ys, np.pad(mask.astype(float), 1), levels=[0.5], **OUTLINE)
        cs.set_path_effects([patheffects.withStroke(linewidth=HALO, foreground="black")])
    if peak is None:  # the scorer's rule: the peak of the map resized to the region's grid (none: constant)
        peak = pointing_peak(smap, mask.shape) if mask is not None else map_peak(smap)
    if peak is not False and peak is not None:
        h, w = mask.shape if mask is not None else np.shape(smap)[-2:]
        ax.plot((peak[1] + 0.5) * S / w, (peak[0] + 0.5) * S / h, **PEAK,
                path_effects=[patheffects.withStroke(linewidth=4.5, foreground="black")])
    ax.set_xlim(0, S)
    ax.set_ylim(S, 0)
    ax.set_xticks([])
    ax.set_yticks([])
    return im


def overlay_figure(result: Result, dataset: str, stem: Path, *, images, gt, submission) -> dict:
    """Draw one model's best/worst overlays for one dataset. ``images``/``gt``/``submission`` are the
    read stores (xbench.schemas.read_images / read_ground_truth / read_submission)."""
    img_ds = images.datasets[dataset]
    gt_ds = gt.datasets[dataset]
    sub_ds = submission.datasets[dataset]
    img_row = {str(c): i for i, c in enumerate(img_ds.case_id)}
    gt_row = {str(c): i for i, c in enumerate(gt_ds.case_id)}
    sub_row = {str(c): i for i, c in enumerate(sub_ds.case_id)}
    region_of = {(int(i), int(c)): k for k, (i, c) in enumerate(np.asarray(gt_ds.region_index))}
    classes = [c for c in gt_ds.classes if c not in sub_ds.unsupported][:MAX_CLASSES]
    picks = [(c, *pick_cases(result.pairs, dataset, c)) for c in classes if c in sub_ds.classes]
    # pairs.parquet comes from outside: a case the stores do not hold is left out, never looked up
    held = lambda row: all(str(row["case_id"]) in rows for rows in (img_row, gt_row, sub_row))  # noqa: E731
    picks = [p for p in picks if p[1] is not None and held(p[1]) and held(p[2])]
    if not picks:
        return {"files": [], "skipped": f"{dataset}: no positive pairs"}
    # sized so that the 10 pt panel titles (three short lines: class and which, case id, verdict) fit a 3.5 in panel
    fig = Figure(figsize=(7.4, 4.0 * len(picks) + 0.6), layout="constrained")
    shown = []
    for r, (cls, best, worst) in enumerate(picks):
        for col, (which, row) in enumerate((("best", best), ("worst", worst))):
            ax = fig.add_subplot(len(picks), 2, 2 * r + col + 1)
            cid = str(row["case_id"])
            image = np.asarray(img_ds.image[img_row[cid]])
            cmap_col = gt_ds.classes.index(cls)
            smap = np.asarray(sub_ds.saliency[sub_row[cid], sub_ds.classes.index(cls)])
            k = region_of.get((gt_row[cid], cmap_col))
            mask = np.asarray(gt_ds.region_mask[k]) if k is not None else None
            im = draw_panel(ax, image, smap, mask)
            hit = row.get("hit")
            mark = "hit" if hit == 1 else "miss"
            ax.set_title(f"{plain(cls)}: {which} case\n{plain(cid)}\n{mark}, Dice {100 * float(row['dice_best']):.1f}%",
                         fontsize=10)
            if col == 0:
                ax.set_ylabel(plain(cls), fontsize=10)
            shown.append({"class": cls, "which": which, "case_id": cid, "dice_best": float(row["dice_best"])})
    bar = fig.colorbar(im, ax=fig.axes, shrink=0.5)
    bar.set_label("saliency (min-max normalised)", fontsize=10)
    cut = len(gt_ds.classes) > MAX_CLASSES
    caption = (f"{result.name} on {DATASET_TITLES.get(dataset, dataset)}: best and worst case of each class by "
               "best-threshold Dice" + (f" (first {MAX_CLASSES} classes)" if cut else ""))
    fig.suptitle(plain(caption), fontsize=12)
    # raster panels only: an SVG would embed the same pixels again (it doubled the report's size), so PNG alone
    files = save_figure(fig, stem, dpi=90, formats=("png",))
    return {"files": files, "cases": shown, "caption": caption}


def overlay_figures(results: list[Result], out_dir: Path, *, images_path, gt_path, submissions: dict,
                    names: NameTable | None = None) -> dict:
    """Overlay figures for every result with a known submission path. Returns
    {"files": [...], "skipped": [reasons]}; nothing raises for a missing input, it is skipped.

    ``names`` hands out the file names (model name and dataset key come from data: sanitised, unique, and
    mapped in the caller's manifest); a fresh table when omitted.
    """
    names = NameTable() if names is None else names
    from xbench.schemas import read_ground_truth, read_images, read_submission

    files: list[Path] = []
    skipped: list[str] = []
    captions: dict[str, str] = {}  # file name -> what it shows, in the model's label (never the file's stem)
    owner: dict[str, tuple[str, str]] = {}  # name key -> (model, dataset): "a_b"+"c" and "a"+"b_c" read alike
    if images_path is None or gt_path is None:
        return {"files": [], "skipped": ["overlays need --images and --gt (or paths recorded by the scorer)"],
                "captions": {}}
    from xbench.schemas.paths import is_remote

    from xbench.score.report._stores import store_problems

    def unsafe(path, kind) -> str | None:
        """The stores may be named by a metrics.json from outside: held to the scorer's budget before reading."""
        if is_remote(path):
            return None
        problems = store_problems(path, kind)
        return f"overlays: {path} is not a usable {kind} store ({problems[0]})" if problems else None

    why = unsafe(images_path, "images") or unsafe(gt_path, "ground-truth")
    if why:
        return {"files": [], "skipped": [why], "captions": {}}
    images = read_images(images_path)
    gt = read_ground_truth(gt_path)
    for r in results:
        sub_path = submissions.get(r.name)
        if sub_path is None or r.pairs is None:
            skipped.append(f"{r.name}: no submission path or pairs.parquet")
            continue
        why = unsafe(sub_path, "submission")
        if why:
            skipped.append(f"{r.name}: {why}")
            continue
        sub = read_submission(sub_path)
        for d in r.datasets:
            if d not in images.datasets or d not in gt.datasets or d not in sub.datasets:
                skipped.append(f"{r.name}: {d} is missing from images, ground truth or submission")
                continue
            key = f"overlay_{r.name}_{d}"
            while owner.setdefault(key, (r.name, d)) != (r.name, d):
                key += "~"  # taken by another (model, dataset): a different key, hence its own file name
            stem = Path(out_dir) / names.name(key)
            info = overlay_figure(r, d, stem, images=images, gt=gt, submission=sub)
            files += info["files"]
            captions.update({Path(f).name: info["caption"] for f in info["files"]})
            if "skipped" in info:
                skipped.append(f"{r.name}: {info['skipped']}")
    return {"files": files, "skipped": skipped, "captions": captions}

