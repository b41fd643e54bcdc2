"""The report's "does a model's map agree with what it says?" section (issue 45 item 4).

:func:`agreement` against a cell-by-cell brute force (grids of different sizes, ties, NaN, maps without positive
mass); then a whole run: a model's attention and gradient maps and its own boxes (read from CheXagent-format
answers) scored by the real scorer, and the report's table holding exactly the brute force's numbers over the
stores, for findings and phrase rows.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xbench.score.report.own_boxes import agreement, support_on

sys.path.insert(0, str(Path(__file__).parents[2] / "score"))
import score_reference as ref  # noqa: E402  (the pointing game's peak in exact fractions)

BIN = Path(sys.executable).parent


def brute(smap, box_map):
    """Cell by cell, from the definitions in docs/contract.md ("A model's own boxes")."""
    smap = np.asarray(smap, np.float64)  # stored float16 maps are summed at full precision
    h, w = smap.shape
    bh, bw = box_map.shape
    cover = np.zeros((h, w), bool)
    for i in range(h):
        for j in range(w):
            cy, cx = (i + 0.5) / h, (j + 0.5) / w  # the map cell's centre, as fractions
            cover[i, j] = box_map[min(int(cy * bh), bh - 1), min(int(cx * bw), bw - 1)] != 0
    k = int(cover.sum())
    if k == 0:
        return None
    vals = [(-np.inf if np.isnan(smap[i, j]) else smap[i, j], i, j) for i in range(h) for j in range(w)]
    peak = ref.peak(np.array([[v for v, i, j in vals if i == r] for r in range(h)]))  # the pointing game's peak
    order = sorted(vals, key=lambda t: (-t[0], t[1], t[2]))[:k]  # highest first, ties in row-major order
    top = np.zeros((h, w), bool)
    for _, i, j in order:
        top[i, j] = True
    iou = (top & cover).sum() / (top | cover).sum()
    pos = np.nan_to_num(np.where(smap > 0, smap, 0.0))
    inside = pos[cover].sum() / pos.sum() if pos.sum() > 0 else math.nan
    return peak is not None and bool(cover[peak]), float(iou), float(inside)


def test_agreement_matches_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(200):
        shape = tuple(int(v) for v in rng.integers(1, 12, 2))
        bshape = tuple(int(v) for v in rng.integers(1, 20, 2))
        smap = rng.normal(size=shape)
        if trial % 5 == 0:
            smap = np.round(smap)  # ties
        if trial % 7 == 0:
            smap[rng.random(shape) < 0.2] = np.nan
        if trial % 11 == 0:
            smap = -np.abs(smap)  # no positive mass
        box = np.zeros(bshape)
        r0, c0 = int(rng.integers(0, bshape[0])), int(rng.integers(0, bshape[1]))
        box[r0:r0 + int(rng.integers(1, 6)), c0:c0 + int(rng.integers(1, 6))] = 1.0
        got, want = agreement(smap, box), brute(smap, box)
        if want is None:
            assert got is None
            continue
        assert got[0] == want[0] and got[1] == pytest.approx(want[1])
        assert (math.isnan(got[2]) and math.isnan(want[2])) or got[2] == pytest.approx(want[2]), trial


def test_agreement_edges():
    box = np.zeros((4, 4))
    box[1:3, 1:3] = 1
    perfect = np.zeros((8, 8))
    perfect[2:6, 2:6] = 1.0
    assert agreement(perfect, box) == (True, 1.0, 1.0)
    elsewhere = np.zeros((8, 8))
    elsewhere[0, 7] = 5.0
    hit, iou, inside = agreement(elsewhere, box)
    assert not hit and inside == 0.0 and iou == 0.0  # top-16: the peak, then rows 0-1 (ties in row-major order)
    elsewhere[5, 5] = 4.0
    assert agreement(elsewhere, box)[1] == pytest.approx(1 / 31)
    assert agreement(np.ones((8, 8)), np.zeros((4, 4))) is None  # no box: no row
    assert agreement(np.ones((8, 8)), box)[0] is False  # a constant map points nowhere (as the pointing game)
    mask = np.zeros((8, 8))
    mask[1:6, 1:6] = 1.0  # its first cell (1, 1) lies outside the boxes' cells 2..5, its middle (3, 3) inside
    assert agreement(mask, box)[0] is True
    assert support_on(np.ones((1, 1)), (3, 5)).all()


# -- a whole run ---------------------------------------------------------------------------------------------
def xb(tool: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *map(str, args)], capture_output=True, text=True, timeout=600)


def _npz_maps(folder: Path, images, method: str, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    (folder / "phantom" / "phrases").mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"model": "toy-vlm", "method": method,
                                                  "datasets": {"phantom": {"classes": list(images.classes)}}}))
    for case in images.case_id:
        np.savez(folder / "phantom" / f"{case}.npz", scores=rng.normal(size=len(images.classes)),
                 saliency=rng.random((len(images.classes), 14, 14)))
    for qid in images.queries.id:
        np.savez(folder / "phantom" / "phrases" / f"{qid}.npz", scores=np.array([0.5]), saliency=rng.random((1, 14, 14)))
    return folder


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from xbench.schemas import read_images

    d = tmp_path_factory.mktemp("own-boxes")
    res = xb("xbench-prepare", "phantom", "--out", d / "data", "--n-cases", 12, "--option", "phrases=true", "-q")
    assert res.returncode == 0, res.stderr
    images = read_images(d / "data/images.zarr").datasets["phantom"]
    rng = np.random.default_rng(5)
    rows = []
    for k, case in enumerate(images.case_id):
        for finding in ("Nodule", "Pleural effusion"):
            a, b = (int(v) for v in rng.integers(0, 50, 2))
            text = f"<|box|>({a},{b}),({a + 30},{b + 25})<|/box|>" if (k + len(finding)) % 3 else "Not seen."
            rows.append({"case_id": str(case), "finding": finding, "text": text})
    for q in images.queries.id:
        rows.append({"query_id": str(q), "text": "<|box|>(20,30),(60,70)<|/box|>"})
    (d / "answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "model.toml").write_text('model = "toy-vlm"\n')
    gt, img = d / "data/gt.zarr", d / "data/images.zarr"
    subs = {"boxes": d / "boxes.zarr", "attention": d / "attention.zarr", "chefer": d / "chefer.zarr"}
    res = xb("xbench-convert", d / "answers.jsonl", "--answers", "chexagent", "--mapping", d / "model.toml",
             "--images", img, "--out", subs["boxes"], "-q")
    assert res.returncode == 0, res.stderr
    for seed, method in enumerate(("attention", "chefer")):
        res = xb("xbench-convert", _npz_maps(d / f"npz_{method}", images, method, seed), "--out", subs[method], "-q")
        assert res.returncode == 0, res.stderr
    scores = []
    for method, sub in subs.items():
        res = xb("xbench-score", sub, "--gt", gt, "--out", d / "scores" / method, "--bootstrap", 0, "-q")
        assert res.returncode == 0, res.stderr
        scores.append(d / "scores" / method)
    res = xb("xbench", "report", *scores, "--out", d / "report", "--bootstrap", 0, "--images", img, "--gt", gt)
    assert res.returncode == 0, res.stderr
    return d, subs


def expected(maps_path, boxes_path):
    """The brute force over the two stores, row by row."""
    from xbench.schemas import read_submission

    m, b = read_submission(maps_path).datasets["phantom"], read_submission(boxes_path).datasets["phantom"]
    out = {}
    for scope in ("findings", "phrases"):
        got = []
        if scope == "findings":
            for i in range(len(b.case_id)):
                for j, c in enumerate(b.classes):
                    if c in b.unsupported or not np.asarray(b.saliency[i, j]).any():
                        continue
                    got.append(brute(np.asarray(m.saliency[i, list(m.classes).index(c)]), np.asarray(b.saliency[i, j])))
        else:
            at = {q: k for k, q in enumerate(m.query_id.tolist())}
            for k, q in enumerate(b.query_id.tolist()):
                bm = np.asarray(b.query_saliency[k]).reshape(64, 64)
                if bm.any():
                    got.append(brute(np.asarray(m.query_saliency[at[q]]).reshape(14, 14), bm))
        got = [g for g in got if g is not None]
        out[scope] = {"rows": len(got), "peak_in_boxes": np.mean([g[0] for g in got]),
                      "iou_topk": np.mean([g[1] for g in got]), "mass_inside": np.mean([g[2] for g in got])}
    return out


def test_the_report_puts_each_map_beside_the_models_own_boxes(run):
    import csv

    d, subs = run
    page = (d / "report/index.html").read_text()
    assert "Does a model&#x27;s map agree with what it says?" in page and 'id="own-boxes"' in page
    assert "Does a model's map agree" in (d / "report/leaderboard.md").read_text()
    rows = list(csv.DictReader((d / "report/own_boxes.csv").open()))
    assert {(r["model"], r["method"]) for r in rows} == {("toy-vlm", m) for m in ("boxes (its own)", "attention",
                                                                                  "chefer")}
    for method in ("attention", "chefer"):
        want = expected(subs[method], subs["boxes"])
        for scope in ("findings", "phrases"):
            (row,) = [r for r in rows if r["method"] == method and r["scope"] == scope]
            assert int(row["rows"]) == want[scope]["rows"] > 0
            for key in ("peak_in_boxes", "iou_topk", "mass_inside"):
                assert float(row[key]) == pytest.approx(want[scope][key], abs=1e-12), (method, scope, key)
    report = json.loads((d / "report/report.json").read_text())
    assert "own_boxes.csv" in report["files"]["tables"]


def test_no_section_without_a_models_boxes_and_maps(run, tmp_path):
    d, _ = run
    res = xb("xbench", "report", d / "scores/attention", d / "scores/chefer", "--out", tmp_path / "r", "--bootstrap", 0)
    assert res.returncode == 0, res.stderr
    assert 'id="own-boxes"' not in (tmp_path / "r/index.html").read_text()
    assert not (tmp_path / "r/own_boxes.csv").exists()


def test_recognition_vs_grounding_holds_every_model_generative_ones_included(run, tmp_path):
    """The paper's third finding (AUROC against pointing game) is fitted over every model of the leaderboard: the
    boxes read from a generative model's answers are one more point; a model without one of the two is named."""
    import shutil

    from xbench.score.report import figures as F
    from xbench.score.report._load import load_results

    d, _ = run
    folders = [d / "scores" / m for m in ("boxes", "attention", "chefer")]
    results = load_results(folders)
    info = F.auroc_vs_pointing(results, tmp_path / "fig")
    assert sorted(p[0] for p in info["points"]) == sorted(r.name for r in results) and info["left_out"] == []
    assert info["fit"] is not None  # three points: a line and its R²
    # a result whose metrics.json holds no overall AUROC (e.g. scored on MS-CXR only) is named, not dropped silently
    shutil.copytree(d / "scores" / "chefer", tmp_path / "no-auroc")
    m = json.loads((tmp_path / "no-auroc" / "metrics.json").read_text())
    m["overall"]["auroc"] = None
    (tmp_path / "no-auroc" / "metrics.json").write_text(json.dumps(m))
    res = xb("xbench", "report", *folders[:2], tmp_path / "no-auroc", "--out", tmp_path / "r", "--bootstrap", 0)
    assert res.returncode == 0, res.stderr
    skipped = json.loads((tmp_path / "r" / "report.json").read_text())["skipped"]
    assert any("no overall AUROC, left out of the recognition-vs-grounding figure" in s for s in skipped), skipped
