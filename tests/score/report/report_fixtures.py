"""Synthetic score outputs for the report tests (metrics.json, pairs.parquet, pair_counts.npz).

Each synthetic submission simulates saliency maps on a small grid (a Gaussian bump near the region,
plus noise, its strength set by ``skill``) and scores (logistic in the label, scaled by ``skill``).
From the maps it derives the per-pair threshold counts exactly as the contract defines them, and it
computes metrics.json by a deliberately plain, loop-based reference (scikit-learn for recognition),
independent of the report's vectorised bootstrap engine.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.sections.pair_counts import save_pair_counts
from sklearn.metrics import accuracy_score, average_precision_score, f1_score, roc_auc_score

TAUS = np.arange(101) / 100.0
GRID = (16, 16)
DEFAULT_DATASETS = {"phantom": ("disc", "square", "ring"), "siim_acr": ("Pneumothorax",)}


def make_truth(seed: int = 0, *, datasets=None, n_cases: int = 24, grid=GRID) -> dict:
    """Ground truth shared by all synthetic submissions: labels and region masks per dataset.

    Returns {dataset: {"case_id", "classes", "labels" (N,C) int8, "regions": {(i,c): (H,W) bool}}}.
    """
    rng = np.random.default_rng(seed)
    datasets = datasets or DEFAULT_DATASETS
    truth = {}
    for d, classes in datasets.items():
        C = len(classes)
        labels = rng.choice(np.array([1, 0, -1], np.int8), size=(n_cases, C), p=[0.5, 0.4, 0.1])
        labels[0, :] = 1  # every class has a positive and a negative
        labels[1, :] = 0
        regions = {}
        H, W = grid
        for i in range(n_cases):
            for c in range(C):
                if labels[i, c] == 1 and rng.random() < 0.85:
                    h, w = rng.integers(1, H // 2 + 1), rng.integers(1, W // 2 + 1)
                    y0, x0 = rng.integers(0, H - h + 1), rng.integers(0, W - w + 1)
                    m = np.zeros(grid, bool)
                    m[y0:y0 + h, x0:x0 + w] = True
                    regions[(i, c)] = m
        labels[0, :] = 1
        for c in range(C):
            if (0, c) not in regions:
                m = np.zeros(grid, bool)
                m[2:5, 3:7] = True
                regions[(0, c)] = m
        truth[d] = {"case_id": np.array([f"{d}-{i:03d}" for i in range(n_cases)]), "classes": tuple(classes),
                    "labels": labels, "regions": regions, "grid": grid}
    return truth


def simulate_maps(truth: dict, skill: float, seed: int) -> dict:
    """{dataset: (N, C, H, W) float64 maps}: a bump at each region centre (weight ``skill``) plus noise."""
    rng = np.random.default_rng(seed)
    out = {}
    for d, t in truth.items():
        H, W = t["grid"]
        N, C = t["labels"].shape
        yy, xx = np.mgrid[0:H, 0:W]
        maps = rng.random((N, C, H, W))
        for (i, c), m in t["regions"].items():
            cy, cx = np.argwhere(m).mean(axis=0)
            maps[i, c] += skill * 3 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 8.0)
        out[d] = maps
    return out


def _normalise(m):
    lo, hi = m.min(), m.max()
    return np.zeros_like(m) if hi == lo else (m - lo) / (hi - lo)


def reference_metrics(truth, maps, probs, *, model="model", method="similarity", gt_sha256="f" * 64):
    """metrics.json of a synthetic submission, by plain loops; also returns the pairs rows and counts."""
    out = {"xbench": {"schema": 1, "version": "test", "gt_sha256": gt_sha256,
                      "submission": {"kind": "submission", "schema": 1, "model": model, "method": method}},
           "datasets": {}}
    pair_rows = []
    counts = {}
    for d, t in truth.items():
        H, W = t["grid"]
        N, C = t["labels"].shape
        dc = {"pair_case": [], "pair_class": [], "region_pixels": [], "hit": [], "b": [], "br": []}
        cls_out = {}
        for c, cname in enumerate(t["classes"]):
            pos = sorted(i for (i, cc) in t["regions"] if cc == c)
            dice = np.zeros((len(pos), 101))
            iou = np.zeros((len(pos), 101))
            hits = []
            b_all, i_all, r_all = [], [], []
            for k, i in enumerate(pos):
                R = t["regions"][(i, c)]
                m = _normalise(maps[d][i, c])
                hits.append(float(R.ravel()[int(np.argmax(m.ravel()))]))
                bs, ins = [], []
                for j, tau in enumerate(TAUS):
                    Bt = m >= tau
                    inter = int((Bt & R).sum())
                    bs.append(int(Bt.sum()))
                    ins.append(inter)
                    dice[k, j] = 2 * inter / (Bt.sum() + R.sum())
                    iou[k, j] = inter / (Bt | R).sum()
                b_all.append(bs)
                i_all.append(ins)
                r_all.append(int(R.sum()))
            dc["pair_case"] += pos
            dc["pair_class"] += [c] * len(pos)
            dc["region_pixels"] += r_all
            dc["hit"] += [bool(h) for h in hits]
            dc["b"] += b_all
            dc["br"] += i_all
            entry = {"n_positive": int((t["labels"][:, c] == 1).sum()), "n_regions": len(pos)}
            if pos:
                md, mi = dice.mean(axis=0), iou.mean(axis=0)
                kd, ki = int(np.argmax(md)), int(np.argmax(mi))
                entry.update(pointing_game=float(np.mean(hits)), dice_fixed=float(md[50]), iou_fixed=float(mi[50]),
                             dice_best=float(md[kd]), iou_best=float(mi[ki]),
                             tau_dice=float(TAUS[kd]), tau_iou=float(TAUS[ki]))
            else:
                entry.update({k: None for k in ("pointing_game", "dice_fixed", "iou_fixed", "dice_best",
                                                "iou_best", "tau_dice", "tau_iou")})
                kd = ki = 50
            lab = t["labels"][:, c]
            keep = lab != -1
            y, p = lab[keep], probs[d][keep, c]
            yhat = (p >= 0.5).astype(int)
            both = len(set(y.tolist())) == 2
            entry["auroc"] = float(roc_auc_score(y, p)) if both else None
            entry["auprc"] = float(average_precision_score(y, p)) if both else None
            entry["f1"] = float(f1_score(y, yhat, zero_division=0)) if keep.any() else None
            entry["accuracy"] = float(accuracy_score(y, yhat)) if keep.any() else None
            entry["ci95"] = {k: [max(0.0, v - 0.05), min(1.0, v + 0.05)] for k, v in entry.items()
                             if k in ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best",
                                      "auroc", "auprc", "f1", "accuracy") and v is not None}
            cls_out[cname] = entry
            pos_index = {i: k for k, i in enumerate(pos)}
            for i in range(N):
                has = (i, c) in t["regions"]
                k = pos_index.get(i)
                pair_rows.append({"dataset": d, "case_id": str(t["case_id"][i]), "class": cname,
                                  "label": int(lab[i]), "probability": float(probs[d][i, c]),
                                  "has_region": has,
                                  "region_pixels": int(t["regions"][(i, c)].sum()) if has else 0,
                                  "hit": hits[k] if has else np.nan,
                                  "dice_fixed": dice[k, 50] if has else np.nan,
                                  "iou_fixed": iou[k, 50] if has else np.nan,
                                  "dice_best": dice[k, kd] if has else np.nan,
                                  "iou_best": iou[k, ki] if has else np.nan})
        keys = ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best", "auroc", "auprc", "f1", "accuracy")
        summ = {}
        for k in keys:
            vals = [e[k] for e in cls_out.values() if e[k] is not None]
            summ[k] = float(np.mean(vals)) if vals else None
        lab = t["labels"]
        keep = lab != -1
        yhat = np.stack([probs[d][:, c] >= 0.5 for c in range(C)], axis=1)
        summ["hamming_accuracy"] = float(np.mean((yhat == (lab == 1))[keep]))
        counts[d] = DatasetCounts(
            name=d, classes=t["classes"], supported=np.ones(C, bool), case_id=np.asarray(t["case_id"], str),
            labels=t["labels"].astype(np.int8), prob=probs[d].astype(np.float64),
            pair_case=np.array(dc["pair_case"], np.int64), pair_class=np.array(dc["pair_class"], np.int64),
            region_pixels=np.array(dc["region_pixels"], np.int32), hit=np.array(dc["hit"], bool),
            b=np.array(dc["b"], np.int32).reshape(-1, 101), br=np.array(dc["br"], np.int32).reshape(-1, 101),
            grid=tuple(t["grid"]))
        out["datasets"][d] = {"n_cases": N, "grid": list(t["grid"]), "summary": summ, "classes": cls_out}
    overall = {}
    for k in ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best", "auroc", "auprc", "f1", "accuracy"):
        vals = [v["summary"][k] for v in out["datasets"].values() if v["summary"][k] is not None]
        overall[k] = float(np.mean(vals)) if vals else None
    out["overall"] = overall
    return out, pd.DataFrame(pair_rows), counts


def write_stores(root, truth, *, image_size: int = 32) -> tuple[Path, Path]:
    """images.zarr and gt.zarr for the synthetic truth (images: a blurred copy of the regions)."""
    from xbench.schemas import ImagesWriter, write_ground_truth

    root = Path(root)
    images, gt = root / "images.zarr", root / "gt.zarr"
    for d, t in truth.items():
        N, C = t["labels"].shape
        H, W = t["grid"]
        keys = sorted(t["regions"])
        region_index = np.array(keys, np.int32).reshape(-1, 2)
        region_mask = np.stack([t["regions"][k] for k in keys]) if keys else np.zeros((0, H, W), bool)
        orig = np.full((N, 2), 64, np.int32)
        write_ground_truth(gt, d, case_ids=t["case_id"], classes=t["classes"], labels=t["labels"],
                           region_index=region_index, region_mask=region_mask, orig_size=orig, grid=(H, W))
        w = ImagesWriter(images, d, case_ids=t["case_id"], classes=t["classes"], image_size=image_size,
                         cases_per_block=N)
        img = np.full((N, H, W), 60.0)
        for (i, c), m in t["regions"].items():
            img[i][m] += 60
        rep = image_size // H
        img = np.kron(img, np.ones((1, rep, rep))).clip(0, 255).astype(np.uint8)
        for b in w.blocks_todo():
            s, e = w.block_rows(b)
            w.write_block(b, img[s:e], orig[s:e])
        w.finish()
    return images, gt


def write_submission(path, truth, maps, probs, *, model: str, method: str = "similarity") -> Path:
    """A submission store holding the simulated maps and probabilities."""
    from xbench.schemas import DatasetSpec, SubmissionWriter

    specs = {d: DatasetSpec(list(t["case_id"]), t["classes"], t["grid"], score_kind="probability")
             for d, t in truth.items()}
    w = SubmissionWriter.create(path, model=model, method=method, provenance={}, datasets=specs,
                                cases_per_block=1000, map_dtype="float32")
    for d in truth:
        for b in w.blocks_todo(d):
            s, e = w.block_rows(d, b)
            w.write_block(d, b, probs[d][s:e].astype(np.float32), maps[d][s:e].astype(np.float32))
    w.finish()
    return Path(path)


def write_result(out_dir, truth, *, model: str, skill: float, seed: int, method="similarity",
                 stores: dict | None = None) -> Path:
    """Write one synthetic score output directory (metrics.json, pairs.parquet, pair_counts.npz).

    ``stores`` = {"images": path, "gt": path, "submission": path}: also write the submission store
    there and record the three paths in metrics.json (``xbench.inputs``) as the scorer does.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed + 1000)
    maps = simulate_maps(truth, skill, seed)
    probs = {}
    for d, t in truth.items():
        y = (t["labels"] == 1).astype(float)
        z = skill * 3 * (2 * y - 1) + rng.normal(size=y.shape)
        p = 1 / (1 + np.exp(-z))
        probs[d] = np.round(p, 2)  # rounding makes ties, which the AUROC code must handle
    metrics, pairs, counts = reference_metrics(truth, maps, probs, model=model, method=method)
    # as the scorer writes it: a nullable boolean, empty for pairs without a region
    pairs["hit"] = pd.array([None if np.isnan(h) else bool(h) for h in pairs["hit"]], dtype="boolean")
    if stores:
        write_submission(stores["submission"], truth, maps, probs, model=model, method=method)
        metrics["xbench"]["inputs"] = {k: str(v) for k, v in stores.items()}
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=1))
    pairs.to_parquet(out_dir / "pairs.parquet")
    save_pair_counts(out_dir / "pair_counts.npz", counts)
    return out_dir


def make_results(root, *, n_cases: int = 24, skills=(("strong", 0.9), ("medium", 0.5), ("weak", 0.0)),
                 datasets=None, seed: int = 0, stores: bool = False) -> list[Path]:
    """Several synthetic submissions on one shared ground truth; returns their directories.

    ``stores=True`` also writes images.zarr, gt.zarr and one submission store per model under
    ``root/stores`` and records their paths in each metrics.json.
    """
    root = Path(root)
    truth = make_truth(seed, datasets=datasets, n_cases=n_cases)
    paths = None
    if stores:
        images, gt = write_stores(root / "stores", truth)
        paths = {"images": images, "gt": gt}
    return [write_result(root / name, truth, model=name, skill=s, seed=seed + 7 * k,
                         stores=dict(paths, submission=root / "stores" / f"{name}.zarr") if paths else None)
            for k, (name, s) in enumerate(skills)]
