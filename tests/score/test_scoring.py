"""End to end: every value of metrics.json equals the brute-force definition."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import score_reference as ref
from score_stores import make_gt, make_submission
from xbench.score.metrics.grounding import UndefinedMetricWarning
from xbench.score.scoring import score_submission, thresholds_from_metrics

GROUNDING = ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best", "tau_dice", "tau_iou")
RECOGNITION = ("auroc", "auprc", "f1", "accuracy")


def expected_metrics(gt, sub, taus=None):
    """Brute-force metrics of every supported class, by case id and class name."""
    out = {}
    for name, g in gt.items():
        s = sub[name]
        row = {cid: i for i, cid in enumerate(s.case_ids)}
        col = {c: j for j, c in enumerate(s.classes)}
        classes = {}
        for ci, cname in enumerate(g.classes):
            if cname in s.unsupported:
                classes[cname] = None
                continue
            j = col[cname]
            pairs = [(s.saliency[row[g.case_ids[i]], j], g.masks[k])
                     for k, (i, c) in enumerate(g.region_index) if c == ci]
            entry = {}
            if pairs:
                entry.update(ref.class_grounding(pairs))
                if taus is not None:
                    vals = [ref.pair_values(m, r) for m, r in pairs]
                    kd, ki = round(taus[name][cname][0] * 100), round(taus[name][cname][1] * 100)
                    entry["dice_best"] = np.mean([v[1][kd] for v in vals])
                    entry["iou_best"] = np.mean([v[2][ki] for v in vals])
                    entry["tau_dice"], entry["tau_iou"] = taus[name][cname]
            else:
                entry.update({k: None for k in GROUNDING})
            labelled = [i for i in range(len(g.case_ids)) if g.labels[i, ci] != -1]
            y = [int(g.labels[i, ci]) for i in labelled]
            raw = [s.scores[row[g.case_ids[i]], j] for i in labelled]
            p = raw if s.score_kind == "probability" else [ref.sigmoid(v) for v in raw]
            entry.update(ref.class_recognition(y, np.array(p, dtype=np.float64)))
            classes[cname] = entry
        out[name] = classes
    return out


def assert_close(actual, expected, where):
    if expected is None:
        assert actual is None, where
    else:
        assert actual is not None, where
        assert abs(actual - expected) <= 1e-12, f"{where}: {actual} != {expected}"


def check_all(metrics, gt, sub, taus=None):
    exp = expected_metrics(gt, sub, taus)
    for name, classes in exp.items():
        got = metrics["datasets"][name]
        for cname, e in classes.items():
            entry = got["classes"][cname]
            if e is None:
                assert entry["unsupported"] and entry["reason"]
                assert all(entry[k] is None for k in GROUNDING + RECOGNITION)
                continue
            for k in GROUNDING:
                # grounding is computed the same way in float64: equal to the last bit
                assert entry[k] == (None if e[k] is None else pytest.approx(e[k], abs=0, rel=0)), (name, cname, k)
            for k in RECOGNITION:
                assert_close(entry[k], e[k], f"{name}/{cname}/{k}")
        for k in GROUNDING[:5] + RECOGNITION:
            vals = [e[k] for e in classes.values() if e is not None and e[k] is not None]
            assert_close(got["summary"][k], float(np.mean(vals)) if vals else None, f"{name}/summary/{k}")
    for k in GROUNDING[:5] + RECOGNITION:
        vals = [metrics["datasets"][d]["summary"][k] for d in exp if metrics["datasets"][d]["summary"][k] is not None]
        assert_close(metrics["overall"][k], float(np.mean(vals)) if vals else None, f"overall/{k}")


def hamming(gt, sub, name, unsupported=()):
    g, s = gt[name], sub[name]
    row = {cid: i for i, cid in enumerate(s.case_ids)}
    ok = total = 0
    for i, cid in enumerate(g.case_ids):
        for ci, cname in enumerate(g.classes):
            if g.labels[i, ci] == -1 or cname in unsupported:
                continue
            v = s.scores[row[cid], s.classes.index(cname)]
            p = v if s.score_kind == "probability" else ref.sigmoid(v)
            ok += int((p >= 0.5) == (g.labels[i, ci] == 1))
            total += 1
    return ok / total


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("stores")
    gt = make_gt(d / "gt.zarr")
    sub = make_submission(d / "sub.zarr", gt)
    return d, gt, sub


def test_random_submission_equals_brute_force(stores):
    d, gt, sub = stores
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        res = score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=0)
    check_all(res.metrics, gt, sub)
    for name in gt:
        assert res.metrics["datasets"][name]["summary"]["hamming_accuracy"] == pytest.approx(hamming(gt, sub, name), abs=1e-15)
        assert res.metrics["datasets"][name]["n_cases"] == len(gt[name].case_ids)
    assert res.metrics["xbench"]["gt_sha256"] and res.metrics["xbench"]["submission"]["model"] == "test-model"


@pytest.mark.parametrize("kw", [
    dict(score_kind="probability", map_dtype="float32", map_shape=(24, 20), quantise=True),  # maps larger than grids
    dict(map_shape=(12, 16), shuffle=False, reverse_classes=False, quantise=True),  # identity resize, on-threshold values
    dict(map_shape=(1, 1)),  # constant maps everywhere
])
def test_variants_equal_brute_force(tmp_path, kw):
    gt = make_gt(tmp_path / "gt.zarr", seed=3)
    sub = make_submission(tmp_path / "sub.zarr", gt, seed=4, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        res = score_submission(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=0)
    check_all(res.metrics, gt, sub)


def test_unsupported_class_is_null_with_reason(tmp_path):
    gt = make_gt(tmp_path / "gt.zarr", seed=5)
    sub = make_submission(tmp_path / "sub.zarr", gt, unsupported={"phantom": ["Nodule/Mass"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        res = score_submission(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=20)
    check_all(res.metrics, gt, sub)
    assert "Nodule/Mass" not in set(res.pairs["class"])
    assert res.metrics["datasets"]["phantom"]["summary"]["hamming_accuracy"] == pytest.approx(
        hamming(gt, sub, "phantom", ("Nodule/Mass",)), abs=1e-15)


def test_single_label_class_and_no_region_class_are_null_and_counted_without_a_warning(tmp_path):
    labels = np.array([[1, 0], [1, 0], [1, 0], [1, 0]])
    gt = make_gt(tmp_path / "gt.zarr", datasets={"phantom": dict(n=4, classes=["Effusion", "Mass"], grid=(6, 6),
                                                                 labels=labels)})
    make_submission(tmp_path / "sub.zarr", gt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no Python warning of any kind: undefined metrics are counted notes
        res = score_submission(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=10)
    assert res.notes == [
        "phantom: grounding metrics undefined for 1 class (no positive case with a region: Mass); "
        "reported as null and left out of the means",
        "phantom: AUROC and AUPRC undefined for 2 classes (one label value only: Effusion, Mass); "
        "reported as null and left out of the means"]
    cls = res.metrics["datasets"]["phantom"]["classes"]
    assert cls["Effusion"]["auroc"] is None and cls["Effusion"]["auprc"] is None
    assert cls["Mass"]["pointing_game"] is None and cls["Mass"]["tau_dice"] is None
    # undefined values are left out of the means, not counted as 0
    assert res.metrics["datasets"]["phantom"]["summary"]["pointing_game"] == cls["Effusion"]["pointing_game"]
    assert res.metrics["datasets"]["phantom"]["summary"]["auroc"] is None


def test_threshold_transfer(stores, tmp_path):
    d, gt, sub = stores
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        first = score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=0)
        # an earlier run's thresholds, shifted so they differ from the best ones here
        earlier = thresholds_from_metrics(first.metrics)
        shifted = {ds: {c: (None if t[0] is None else round(min(t[0] + 0.07, 1.0), 2),
                            None if t[1] is None else round(max(t[1] - 0.03, 0.0), 2)) for c, t in cls.items()}
                   for ds, cls in earlier.items()}
        res = score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=10, thresholds=shifted)
    check_all(res.metrics, gt, sub, taus=shifted)
    assert res.metrics["xbench"]["thresholds"] == "transferred"


def test_threshold_transfer_off_grid_or_missing_is_refused(stores):
    d, gt, _ = stores
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        bad = {"phantom": {c: (0.333, 0.5) for c in gt["phantom"].classes}}
        with pytest.raises(ValueError, match="grid"):
            score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=0, thresholds=bad, datasets=["phantom"])
        with pytest.raises(ValueError, match="lack tau"):
            score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=0, thresholds={"phantom": {}})


def test_dataset_subset_and_pairs_table(stores):
    d, gt, sub = stores
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        res = score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=0, datasets=["chexlocalize"])
    assert list(res.metrics["datasets"]) == ["chexlocalize"]
    g = gt["chexlocalize"]
    pairs = res.pairs
    assert len(pairs) == int((g.labels != -1).sum())
    # the table recomputes the class figures
    for cname, grp in pairs[pairs.has_region].groupby("class"):
        entry = res.metrics["datasets"]["chexlocalize"]["classes"][cname]
        assert grp["hit"].astype(float).mean() == pytest.approx(entry["pointing_game"], abs=1e-15)
        assert grp["dice_best"].mean() == pytest.approx(entry["dice_best"], abs=1e-12)
        assert grp["iou_fixed"].mean() == pytest.approx(entry["iou_fixed"], abs=1e-12)
        assert (grp["region_pixels"] >= 1).all()


def test_memory_bounded_batches_give_the_same_counts(stores, monkeypatch):
    from xbench.score import counting

    d, gt, sub = stores
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        a = score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=0, validate=False)
        monkeypatch.setattr(counting, "MAP_BATCH_BYTES", 1)  # one mask chunk of maps at a time
        from xbench.schemas import read_ground_truth, read_submission

        g, s = read_ground_truth(d / "gt.zarr"), read_submission(d / "sub.zarr")
        for name in gt:
            dc = counting.count_dataset(s.datasets[name], g.datasets[name], mask_chunk=2)
            np.testing.assert_array_equal(dc.b, a.counts[name].b)
            np.testing.assert_array_equal(dc.br, a.counts[name].br)
            np.testing.assert_array_equal(dc.hit, a.counts[name].hit)
