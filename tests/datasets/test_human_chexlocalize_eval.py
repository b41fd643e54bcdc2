"""The CheXlocalize human ceiling equals CheXlocalize's own evaluation (rajpurkarlab/cheXlocalize, eval.py with
--if_human_benchmark True, and calculate_percentage_decrease.py's "Average") on the same files.

The fixture is a CheXlocalize test layout whose evaluation grid is the images' native size (48 x 64), so that a
grid cell is a pixel and XBench's regions are the files' masks. It holds each case the issue names: a salient
point outside the reader's region, a point with no region, a region with no point, several points of which only
the second lies in the ground truth, an unmarked finding whose ground-truth region holds the first pixel, and a
reader's mark where the ground truth has none.

The expected values are computed here by a brute force written from eval.py's rules (pycocotools decodes the
masks at full resolution; nothing of XBench is used): calculate_iou with true_pos_only True and False,
get_hb_hitrates (a hit when any listed point [x, y] has gt_mask[int(y), int(x)]; no point: a miss), and
bootstrap_metric / compute_cis (numpy.random.seed(seed), numpy.random.choice(n, n) per resample over the sorted
CXR ids, the pandas mean of the drawn rows where defined). With ``XBENCH_CHEXLOCALIZE_REPO`` naming a checkout of
their repository, the last test also runs their own functions on the same files (torch, which those functions
do not use, is stubbed when absent)."""
from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import fixtures as F

pytest.importorskip("pycocotools")

from pycocotools import mask as coco_mask  # noqa: E402

from test_human import _run  # noqa: E402

H, W = 48, 64
GRID = (H, W)
IDS = ["patient64601_study1_view1_frontal", "patient64602_study1_view1_frontal",
       "patient64603_study1_view1_frontal", "patient64604_study1_view1_frontal"]
SEED, B = 0, 200


def _box(y0, y1, x0, x1) -> np.ndarray:
    m = np.zeros((H, W), bool)
    m[y0:y1, x0:x1] = True
    return m


# ground truth and the reader (hb), per CXR and CheXlocalize task; a task not listed is an all-zero mask
GT = {IDS[0]: {"Cardiomegaly": _box(20, 40, 22, 44), "Airspace Opacity": _box(4, 16, 2, 14),
               "Edema": _box(30, 40, 2, 12)},
      IDS[1]: {"Support Devices": _box(0, 6, 0, 10), "Pleural Effusion": _box(36, 46, 40, 60)},
      IDS[2]: {"Atelectasis": _box(10, 20, 30, 50), "Cardiomegaly": _box(22, 40, 20, 40)},
      IDS[3]: {}}
HB = {IDS[0]: {"Cardiomegaly": _box(24, 44, 18, 40), "Airspace Opacity": _box(4, 12, 2, 10)},
      IDS[1]: {"Pleural Effusion": _box(30, 44, 44, 62), "Lung Lesion": _box(10, 14, 10, 14)},
      IDS[2]: {"Atelectasis": _box(12, 24, 28, 44), "Cardiomegaly": _box(0, 4, 0, 4)}}
POINTS = {IDS[0]: {"Cardiomegaly": [[42.5, 21.0]],       # outside the reader's region, inside the truth
                   "Edema": [[5.0, 35.0]]},              # a point with no region (inside the truth)
          # Airspace Opacity: a region with no point (its first pixel lies in the truth)
          # Support Devices: unmarked, the truth holds pixel (0, 0)
          IDS[1]: {"Pleural Effusion": [[62.0, 5.0], [50.0, 40.0]]},  # only the second point is in the truth
          IDS[2]: {"Atelectasis": [[35.0, 15.0]], "Cardiomegaly": [[2.0, 2.0]]}}


def write_layout(root: Path) -> None:
    """CheXpert/test_labels.csv, the JPGs, gt_segmentations_test.json and the three hb_*_test.json files."""
    zero = np.zeros((H, W), bool)
    names = {"Airspace Opacity": "Lung Opacity"}
    lines = []
    for cxr in IDS:
        p, s, v = cxr.split("_", 2)
        vals = {c: "0.0" for c in F.CHEXPERT_COLUMNS[5:]}
        for t in GT[cxr]:
            vals[names.get(t, t)] = "1.0"
        lines.append(",".join([f"CheXpert-v1.0/test/{p}/{s}/{v}.jpg", "Male", "60", "Frontal", "PA"]
                              + [vals[c] for c in F.CHEXPERT_COLUMNS[5:]]))
        F.write_jpg(root / "CheXpert" / "test" / p / s / f"{v}.jpg", F.gradient(H, W))
    (root / "CheXpert" / "test_labels.csv").write_text(",".join(F.CHEXPERT_COLUMNS) + "\n" + "\n".join(lines) + "\n")
    seg = root / "CheXlocalize"
    seg.mkdir(parents=True)
    for name, src in (("gt_segmentations_test.json", GT), ("hb_segmentations_test.json", HB)):
        doc = {cxr: {t: F.coco_rle(src.get(cxr, {}).get(t, zero)) for t in F.CHEXLOCALIZE_TASKS} for cxr in IDS}
        (seg / name).write_text(json.dumps(doc))
    (seg / "hb_salient_pt_test.json").write_text(json.dumps(POINTS))


# -- the brute force: eval.py's rules, from the files ------------------------------------------------------
def _decode(path: Path) -> dict:
    return {cxr: {t: coco_mask.decode(item).astype(bool) for t, item in tasks.items()}
            for cxr, tasks in json.loads(path.read_text()).items()}


def brute_force(root: Path, seed: int = SEED, bootstrap: int = B) -> dict:
    """{task: {key: (per-CXR values (NaN: undefined), point value, (lower, mean, upper))}}."""
    gt = _decode(root / "CheXlocalize/gt_segmentations_test.json")
    hb = _decode(root / "CheXlocalize/hb_segmentations_test.json")
    pts = json.loads((root / "CheXlocalize/hb_salient_pt_test.json").read_text())
    ids = sorted(gt)
    out = {}
    for task in F.CHEXLOCALIZE_TASKS:
        cols = {"miou_true_pos_only": [], "miou_all": [], "hit_rate": []}
        for cxr in ids:
            g, p = gt[cxr][task], hb[cxr][task]
            inter, union = int((g & p).sum()), int((g | p).sum())
            cols["miou_true_pos_only"].append(inter / union if g.sum() and p.sum() else np.nan)
            cols["miou_all"].append(inter / union if union else np.nan)
            if not g.sum():
                cols["hit_rate"].append(np.nan)
            else:
                listed = pts.get(cxr, {}).get(task, [])
                cols["hit_rate"].append(float(any(g[int(y), int(x)] for x, y in listed)))
        out[task] = {k: np.asarray(v, float) for k, v in cols.items()}
    # the bootstrap: one draw per resample shared by every task and key (eval.py draws once per replicate)
    rs = np.random.RandomState(seed)
    draws = [rs.choice(len(ids), size=len(ids), replace=True) for _ in range(bootstrap)]
    result = {}
    for task, cols in out.items():
        result[task] = {}
        for k, v in cols.items():
            reps = []
            for d in draws:
                x = v[d]
                x = x[~np.isnan(x)]
                reps.append(x.mean() if x.size else np.nan)
            reps = np.asarray(reps)
            if not bootstrap:
                defined = v[~np.isnan(v)]
                result[task][k] = (v, defined.mean() if defined.size else None, (None, None, None))
                continue
            ordered = np.concatenate([np.sort(reps[~np.isnan(reps)]), reps[np.isnan(reps)]])
            lo, hi = int(0.025 * bootstrap) - 1, int(0.975 * bootstrap) - 1
            defined = v[~np.isnan(v)]
            result[task][k] = (v, defined.mean() if defined.size else None,
                               (ordered[lo], np.nanmean(reps) if np.any(~np.isnan(reps)) else None, ordered[hi]))
    return result


@pytest.fixture(scope="module", params=[GRID, (12, 16)], ids=["native-grid", "coarse-grid"])
def layout(tmp_path_factory, request):
    """The human folder on an evaluation grid equal to the images (a cell is a pixel) and on a coarser one:
    CheXlocalize's own values (the "chexlocalize" block) are the files' at full resolution on both."""
    from xbench.extract.datasets.chexlocalize import CheXlocalizeReader
    from xbench.extract.datasets.prepare import prepare_dataset

    base = tmp_path_factory.mktemp(f"chexeval-{request.param[0]}x{request.param[1]}-")
    root = base / "download"
    write_layout(root)
    prepare_dataset(CheXlocalizeReader(root, split="test"), base / "data", grid=request.param, image_size=32,
                    workers=1, progress=False)
    out = base / "human"
    _run(["human", "chexlocalize", "--root", str(root), "--images", str(base / "data/images.zarr"),
          "--gt", str(base / "data/gt.zarr"), "--out", str(out), "--bootstrap", str(B), "--seed", str(SEED), "-q"])
    return base, root, json.loads((out / "human.json").read_text())["datasets"]["chexlocalize"]


def _cls(task: str) -> str:
    from xbench.schemas.vocabulary import canonical

    return canonical("chexlocalize", task)


def test_the_fixture_holds_every_case_of_the_issue(layout):
    base, root, _ = layout
    want = brute_force(root)
    hit = {t: want[t]["hit_rate"][0] for t in want}
    i0, i1 = 0, 1
    assert hit["Cardiomegaly"][i0] == 1 and hit["Edema"][i0] == 1  # point outside the region; point, no region
    assert hit["Airspace Opacity"][i0] == 0 and GT[IDS[0]]["Airspace Opacity"][4, 2]  # region's first pixel in truth
    assert hit["Support Devices"][i1] == 0 and GT[IDS[1]]["Support Devices"][0, 0]    # unmarked, truth at (0, 0)
    assert hit["Pleural Effusion"][i1] == 1  # the second point
    # the reader's mark where the truth has none: out of true_pos_only, an IoU of 0 without it
    assert np.isnan(want["Lung Lesion"]["miou_true_pos_only"][0]).all() and want["Lung Lesion"]["miou_all"][0][i1] == 0


def test_chexlocalize_block_equals_eval_py_rules(layout):
    """human.json's "chexlocalize" block: per class each key's value, n and eval.py's bootstrap summary."""
    _, root, entry = layout
    want = brute_force(root)
    block = entry["chexlocalize"]
    assert block["n_cases"] == len(IDS) and block["n_resamples"] == B and block["seed"] == SEED
    assert block["resolution"] == "native"
    averages = {k: [] for k in ("miou_true_pos_only", "miou_all", "hit_rate")}
    seen = set()
    for task, per in want.items():
        for k, (values, point, (lo, mean, hi)) in per.items():
            n = int((~np.isnan(values)).sum())
            if not n:
                assert _cls(task) not in block["classes"] or block["classes"][_cls(task)][k]["n"] == 0
                continue
            seen.add(_cls(task))
            got = block["classes"][_cls(task)][k]
            assert got["n"] == n, (task, k)
            assert got["value"] == pytest.approx(point, rel=1e-12, abs=1e-15), (task, k)
            for name, v in (("mean", mean), ("lower", lo), ("upper", hi)):
                if v is None or np.isnan(v):  # a NaN resample sorted into the percentile's position: null
                    assert got["bootstrap"][name] is None, (task, k, name)
                else:
                    assert got["bootstrap"][name] == pytest.approx(v, rel=1e-12, abs=1e-15), (task, k, name)
            averages[k].append(point)
    assert set(block["classes"]) == seen
    for k, v in averages.items():
        assert block["average"][k]["value"] == pytest.approx(sum(v) / len(v), rel=1e-12)


def test_ceiling_pointing_game_is_the_hit_rate_and_iou_the_readers_region(layout):
    """The ceiling's pointing game per class is eval.py's hit rate; its IoU at every tau <= 0.99 (iou_fixed) is
    the mean over the ground truth's regions of the reader's region's IoU, a miss 0 (XBench's definition: the
    model's; the reader's salient points never enter a thresholded set)."""
    base, root, entry = layout
    if not base.name.startswith(f"chexeval-{H}x{W}-"):
        pytest.skip("on a coarser grid the ceiling's regions are rasterised; the native grid checks the rule")
    want = brute_force(root)
    gt = _decode(root / "CheXlocalize/gt_segmentations_test.json")
    hb = _decode(root / "CheXlocalize/hb_segmentations_test.json")
    for task, per in want.items():
        values, point, _ = per["hit_rate"]
        if point is None:
            assert _cls(task) not in entry["classes"] or not entry["classes"][_cls(task)]["n_pairs"]
            continue
        got = entry["classes"][_cls(task)]
        assert got["pointing_game"] == pytest.approx(point, rel=1e-12), task
        ious = [(gt[c][task] & hb[c][task]).sum() / (gt[c][task] | hb[c][task]).sum()
                for c in sorted(gt) if gt[c][task].any()]
        assert got["iou_fixed"] == pytest.approx(float(np.mean(ious)), rel=1e-12), task
        dices = [2 * (gt[c][task] & hb[c][task]).sum() / (gt[c][task].sum() + hb[c][task].sum())
                 for c in sorted(gt) if gt[c][task].any()]
        assert got["dice_fixed"] == pytest.approx(float(np.mean(dices)), rel=1e-12), task
    # the point outside the reader's region leaves the IoU of the region alone (a point cell would add one)
    g, p = GT[IDS[0]]["Cardiomegaly"], HB[IDS[0]]["Cardiomegaly"]
    assert not p[21, 42] and g[21, 42]


@pytest.mark.parametrize("task, key, case", [
    ("Cardiomegaly", "iou_fixed", "a salient point outside the reader's region leaves the region's IoU alone"),
    ("Edema", "iou_fixed", "a salient point with no region: IoU 0, not > 0"),
    ("Airspace Opacity", "pointing_game", "a region without a point: a miss (not the region's first cell)"),
    ("Pleural Effusion", "pointing_game", "several points: a hit when any lies in the truth (not the first only)"),
    ("Support Devices", "pointing_game", "unmarked, the truth holding pixel (0, 0): never a hit"),
], ids=["point-outside-region", "point-without-region", "region-without-point", "several-points", "unmarked"])
def test_each_case_of_the_issue(layout, task, key, case):
    """One issue case each, on the native grid: the ceiling's class value equals the brute force's (one pair of
    the class carries the case; the class's other pairs agree with or without the fix)."""
    base, root, entry = layout
    if not base.name.startswith(f"chexeval-{H}x{W}-"):
        pytest.skip("the native grid checks the rule")
    gt = _decode(root / "CheXlocalize/gt_segmentations_test.json")
    hb = _decode(root / "CheXlocalize/hb_segmentations_test.json")
    ids = [c for c in sorted(gt) if gt[c][task].any()]
    if key == "pointing_game":
        want = float(np.mean(brute_force(root, bootstrap=0)[task]["hit_rate"][0][[sorted(gt).index(c) for c in ids]]))
    else:
        want = float(np.mean([(gt[c][task] & hb[c][task]).sum() / (gt[c][task] | hb[c][task]).sum() for c in ids]))
    assert entry["classes"][_cls(task)][key] == pytest.approx(want, rel=1e-12), case


def test_metrics_human_section_carries_the_block_and_the_hits(layout, tmp_path):
    """xbench-score --human: the section's ceiling uses the readers' hits and carries the same block."""
    base, root, entry = layout
    human = base / "human"
    doc = json.loads((human / "human.json").read_text())
    assert doc["xbench"]["schema"] == 2
    from xbench.score.sections.human.reading import load_human
    from xbench.score.sections.human.section import human_block
    from xbench.score.kernels.counts import load_pair_counts

    src = load_human(human)
    counts = load_pair_counts(human / "readers/hb/pair_counts.npz")
    metrics = json.loads((human / "readers/hb/metrics.json").read_text())
    block = human_block(metrics, counts, src, bootstrap=B, seed=SEED)["datasets"]["chexlocalize"]
    assert block["chexlocalize"] == json.loads(json.dumps(entry["chexlocalize"]))
    for k in ("pointing_game", "iou_fixed"):
        assert block["summary"][k]["human"] == pytest.approx(entry["summary"][k], rel=1e-12)


def test_a_human_folder_of_schema_1_is_refused(layout, tmp_path):
    import shutil

    base, _, _ = layout
    old = tmp_path / "old"
    shutil.copytree(base / "human", old)
    doc = json.loads((old / "human.json").read_text())
    doc["xbench"]["schema"] = 1
    (old / "human.json").write_text(json.dumps(doc))
    from xbench.schemas.errors import InputError
    from xbench.score.sections.human.reading import load_human

    with pytest.raises(InputError, match="run xbench human again"):
        load_human(old)
    shutil.rmtree(old)
    shutil.copytree(base / "human", old)
    (old / "readers/hb/reading.npz").write_bytes(b"not an npz")
    with pytest.raises(InputError, match="not a readable"):
        load_human(old)


def _their_eval(repo: Path):
    """Import eval.py of a cheXlocalize checkout (torch and utils' extras stubbed when absent: the functions
    used here need neither)."""
    for name in ("torch", "torch.nn", "torch.nn.functional"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = types.ModuleType(name)
    if "utils" not in sys.modules:
        stub = types.ModuleType("utils")
        stub.CPU_Unpickler = None
        sys.modules["utils"] = stub
    sys.path.insert(0, str(repo))
    try:
        import eval as their  # noqa: PLC0415
    finally:
        sys.path.remove(str(repo))
    return their


@pytest.mark.skipif(not os.environ.get("XBENCH_CHEXLOCALIZE_REPO"),
                    reason="XBENCH_CHEXLOCALIZE_REPO (a checkout of rajpurkarlab/cheXlocalize) not set")
def test_against_their_own_eval_py(layout, tmp_path):
    _, root, entry = layout
    their = _their_eval(Path(os.environ["XBENCH_CHEXLOCALIZE_REPO"]))
    gt_path = root / "CheXlocalize/gt_segmentations_test.json"
    block = entry["chexlocalize"]
    for key, kw in (("miou_true_pos_only", True), ("miou_all", False)):
        ious, _ = their.get_ious(str(gt_path), str(root / "CheXlocalize/hb_segmentations_test.json"), kw)
        for task, values in ious.items():
            values = np.asarray(values, float)
            if (~np.isnan(values)).any():
                assert block["classes"][_cls(task)][key]["value"] == pytest.approx(np.nanmean(values), rel=1e-12)
    hits, _ = their.get_hb_hitrates(str(gt_path), str(root / "CheXlocalize/hb_salient_pt_test.json"))
    for task in hits.columns:
        if hits[task].notna().any():
            assert block["classes"][_cls(task)]["hit_rate"]["value"] == pytest.approx(hits[task].mean(), rel=1e-12)
            assert entry["classes"][_cls(task)]["pointing_game"] == pytest.approx(hits[task].mean(), rel=1e-12)
    # their bootstrap and summary, one run (numpy's global seed, as their __main__ sets it) per metric
    import pandas as pd

    frames = {"hit_rate": hits.copy()}
    for key, kw in (("miou_true_pos_only", True), ("miou_all", False)):
        ious, cxr_ids = their.get_ious(str(gt_path), str(root / "CheXlocalize/hb_segmentations_test.json"), kw)
        frames[key] = pd.DataFrame.from_dict(ious)
        frames[key]["img_id"] = cxr_ids
    frames["hit_rate"]["img_id"] = sorted(hits.index)
    checked = 0
    for key, df in frames.items():
        np.random.seed(SEED)
        bs = their.bootstrap_metric(df.sort_values(by="img_id"), B)
        for task in bs.columns:
            if _cls(task) not in block["classes"] or not block["classes"][_cls(task)][key]["n"]:
                assert bs[task].isna().all(), (key, task)
                continue
            lo, mean, hi = their.compute_cis(bs[task], confidence_level=0.05)
            got = block["classes"][_cls(task)][key]["bootstrap"]
            mine = tuple(np.nan if got[n] is None else round(got[n], 3) for n in ("lower", "mean", "upper"))
            assert np.allclose(mine, (lo, mean, hi), rtol=0, atol=0, equal_nan=True), (key, task, mine, (lo, mean, hi))
            checked += 1
    assert checked >= 15
