"""Bootstrap: weighted replicates equal the metrics recomputed on explicitly resampled data."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from xbench.score.resampling import bootstrap as BS
from xbench.score.sections.paired import paired_bootstrap

from xbench.score.resampling import engine as RS
from xbench.score.kernels.counts import DatasetCounts, load_pair_counts
from xbench.score.sections.pair_counts import save_pair_counts
from xbench.score.metrics.grounding import dice_from_counts, iou_from_counts
from xbench.score.kernels.maps import grounding_counts


def _dataset(seed=0, n=30, classes=("A", "B", "C"), grid=(8, 9)):
    rng = np.random.default_rng(seed)
    C = len(classes)
    labels = rng.integers(0, 2, size=(n, C)).astype(np.int8)
    labels[rng.random((n, C)) < 0.1] = -1
    labels[:, 2] = np.where(labels[:, 2] == -1, -1, 0)  # class C: a single label value, no region
    pairs = np.argwhere(labels == 1)
    masks = rng.random((len(pairs), *grid)) < 0.3
    masks[:, 0, 0] = True
    res = grounding_counts(rng.standard_normal((len(pairs), 5, 5)).astype(np.float32), masks)
    order = np.lexsort((pairs[:, 0], pairs[:, 1]))
    return DatasetCounts(name="phantom", classes=tuple(classes), supported=np.ones(C, bool),
                         case_id=np.array([f"c{i}" for i in range(n)]), labels=labels,
                         prob=np.round(rng.random((n, C)) * 10) / 10, pair_case=pairs[order, 0],
                         pair_class=pairs[order, 1], region_pixels=res.region_pixels[order], hit=res.hit[order],
                         b=res.b[order], br=res.br[order], grid=grid)


def test_resample_weights_are_exact_and_reproducible():
    blocks = list(RS.resample_weights(17, 301, np.random.default_rng(5)))
    w = np.concatenate(blocks)
    assert w.shape == (301, 17) and (w.sum(axis=1) == 17).all()
    w2 = np.concatenate(list(RS.resample_weights(17, 301, np.random.default_rng(5))))
    np.testing.assert_array_equal(w, w2)
    w3 = np.concatenate(list(RS.resample_weights(17, 301, np.random.default_rng(5), chunk=7)))
    np.testing.assert_array_equal(w, w3)  # the block size does not change the resamples


def test_replicates_equal_explicit_resamples():
    dc = _dataset()
    rng = np.random.default_rng(1)
    draws = rng.integers(0, dc.n_cases, size=(25, dc.n_cases))
    w = np.stack([np.bincount(d, minlength=dc.n_cases) for d in draws]).astype(np.float64)
    classes, summary = BS.dataset_replicates(dc, w)
    for r, d in enumerate(draws):
        per_class = {}
        for c, name in enumerate(dc.classes):
            idx = dc.class_pairs(c)
            # explicit resample: every pair of a drawn case, once per draw
            rows = [j for case in d for j in idx[dc.pair_case[idx] == case]]
            expect = {}
            if rows:
                dice = dice_from_counts(dc.b[rows], dc.br[rows], dc.region_pixels[rows])
                iou = iou_from_counts(dc.b[rows], dc.br[rows], dc.region_pixels[rows])
                dm, im = dice.mean(axis=0), iou.mean(axis=0)
                expect = {"pointing_game": dc.hit[rows].mean(), "dice_fixed": dm[50], "iou_fixed": im[50],
                          "dice_best": dm.max(), "iou_best": im.max()}
            lab = [case for case in d if dc.labels[case, c] != -1]
            y = dc.labels[lab, c]
            p = dc.prob[lab, c]
            if len(set(y.tolist())) == 2:
                expect["auroc"] = roc_auc_score(y, p)
                expect["auprc"] = average_precision_score(y, p)
            yhat = p >= 0.5
            expect["accuracy"] = np.mean(yhat == (y == 1))
            tp, fp, fn = np.sum(yhat & (y == 1)), np.sum(yhat & (y == 0)), np.sum(~yhat & (y == 1))
            expect["f1"] = 0.0 if 2 * tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
            for k in BS.GROUNDING_KEYS + BS.RECOGNITION_KEYS:
                got = classes[name][k][r]
                if k in expect:
                    assert got == pytest.approx(expect[k], abs=1e-12), (r, name, k)
                else:
                    assert np.isnan(got), (r, name, k)
            per_class[name] = expect
        for k in BS.GROUNDING_KEYS + BS.RECOGNITION_KEYS:
            vals = [e[k] for e in per_class.values() if k in e]
            assert summary[k][r] == pytest.approx(np.mean(vals), abs=1e-12)


def test_transferred_thresholds_are_not_rechosen():
    dc = _dataset(2)
    w = np.ones((1, dc.n_cases))
    classes, _ = BS.dataset_replicates(dc, w, taus={"A": (10, 90)})
    idx = dc.class_pairs(0)
    dice = dice_from_counts(dc.b[idx], dc.br[idx], dc.region_pixels[idx])
    assert classes["A"]["dice_best"][0] == pytest.approx(dice[:, 10].mean(), abs=1e-12)


def test_percentile_interval():
    assert BS.percentile_interval(np.arange(101.0)) == pytest.approx([2.5, 97.5], abs=1e-12)
    assert BS.percentile_interval(np.array([np.nan, np.nan])) is None


def test_paired_bootstrap_same_submission_has_zero_difference(tmp_path):
    dc = _dataset(3)
    save_pair_counts(tmp_path / "pc.npz", {"phantom": dc})
    loaded = load_pair_counts(tmp_path / "pc.npz")
    assert loaded["phantom"].same_ground_truth(dc) and loaded["phantom"].grid == (8, 9)
    df = paired_bootstrap(loaded, {"phantom": dc}, bootstrap=50, seed=0)
    ok = df.dropna(subset=["diff_lo"])
    assert len(ok) > 0 and (ok.diff_lo == 0).all() and (ok.diff_hi == 0).all()


def test_paired_bootstrap_detects_a_better_submission():
    a = _dataset(4)
    better_hit = np.ones_like(a.hit)
    b = DatasetCounts(**{**a.__dict__, "hit": better_hit})
    df = paired_bootstrap({"phantom": b}, {"phantom": a}, bootstrap=200, seed=1)  # b - a
    row = df[(df["class"].isna()) & (df.metric == "pointing_game")].iloc[0]
    assert row.diff_lo > 0 and row.p_value < 0.05


def test_paired_bootstrap_refuses_different_ground_truth():
    a = _dataset(5)
    b = _dataset(6)
    with pytest.raises(ValueError, match="different ground truth"):
        paired_bootstrap({"phantom": a}, {"phantom": b}, bootstrap=5)


def test_bootstrap_replicates_are_the_metrics_json_resamples():
    """Two datasets of different sizes: the replicates' intervals are metrics_from_counts' ci95, bit for bit."""
    import warnings

    from xbench.score.scoring import metrics_from_counts

    a = _dataset(7, n=23)
    b = DatasetCounts(**{**_dataset(8, n=31).__dict__, "name": "covid_rural"})
    counts = {"phantom": a, "covid_rural": b}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m, _ = metrics_from_counts(counts, bootstrap=40, seed=3)
    reps = BS.bootstrap_replicates(counts, bootstrap=40, seed=3)
    for d, r in reps.items():
        assert {k: BS.percentile_interval(v) for k, v in r.summary.items()} == m["datasets"][d]["ci95"]
        for c, stats in r.classes.items():
            assert {k: BS.percentile_interval(v) for k, v in stats.items()} == m["datasets"][d]["classes"][c]["ci95"]
    assert {k: BS.percentile_interval(v) for k, v in BS.overall_replicates(reps).items()} == m["ci95"]
    point = BS.identity_replicates(counts)
    for d, p in point.items():
        for k, v in p.summary.items():
            want = m["datasets"][d]["summary"][k]
            assert (np.isnan(v[0]) and want is None) or v[0] == pytest.approx(want, abs=1e-12), (d, k)
    empty = BS.bootstrap_replicates(counts, bootstrap=0, seed=3)
    assert all(v.shape == (0,) for r in empty.values() for v in r.summary.values())
    df = BS.paired_differences(empty, empty, point, point)
    assert (df.n_valid == 0).all() and df.diff_lo.isna().all()
    assert (df.dropna(subset=["diff"])["diff"] == 0).all() and df["dataset"].isna().sum() == len(m["ci95"])


def test_resample_weights_rows_count_the_generators_draws():
    # the rows are the bincounts of exactly the draws rng.integers(0, n, (b, n)) makes, block after block
    got = np.concatenate(list(RS.resample_weights(13, 20, np.random.default_rng(9), chunk=8)))
    rng = np.random.default_rng(9)
    draws = np.concatenate([rng.integers(0, 13, size=(b, 13)) for b in (8, 8, 4)])
    np.testing.assert_array_equal(got, np.stack([np.bincount(d, minlength=13) for d in draws]))
    assert got.dtype == np.float64
    assert [b.shape for b in RS.resample_weights(0, 3, np.random.default_rng(0))] == [(3, 0)]


def test_serial_blas_runs_blas_on_one_thread_and_restores_it():
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    before = blas_threads()
    with BS.serial_blas():
        assert all(n == 1 for n in blas_threads())
    assert blas_threads() == before


def test_bootstrap_replicates_do_not_depend_on_the_callers_blas_threads():
    from threadpoolctl import threadpool_limits

    counts = {"phantom": _dataset(seed=4, n=400)}
    with threadpool_limits(limits=2, user_api="blas"):
        a = BS.bootstrap_replicates(counts, bootstrap=60, seed=2)
    with threadpool_limits(limits=1, user_api="blas"):
        b = BS.bootstrap_replicates(counts, bootstrap=60, seed=2)
    for name, stats in a["phantom"].classes.items():
        for k, v in stats.items():
            np.testing.assert_array_equal(v, b["phantom"].classes[name][k])


def test_count_rows_are_reordered_in_place_like_fancy_indexing():
    # scoring._take_rows_inplace (the count arrays' reorder without a second full copy)
    from xbench.score.scoring import _take_rows_inplace

    rng = np.random.default_rng(0)
    for K, T in ((0, 101), (1, 101), (37, 101), (50, 3)):
        a = rng.integers(0, 1000, size=(K, T)).astype(np.int32)
        order = rng.permutation(K)
        expect = a[order]
        out = _take_rows_inplace(a, order)
        assert out is a
        np.testing.assert_array_equal(a, expect)
    a = np.arange(12, dtype=np.int32).reshape(4, 3)
    assert _take_rows_inplace(a, slice(None)) is a


def _serial_reference(counts, bootstrap, seed):
    """The serial definition: one generator consumed dataset after dataset in sorted order."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(counts):
        blocks = [BS.Replicates(*BS.dataset_replicates(counts[name], w, per_pair={}))
                  for w in RS.resample_weights(counts[name].n_cases, bootstrap, rng)]
        out[name] = BS._concat(blocks)
    return out


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_bootstrap_on_threads_equals_the_serial_loop_bit_for_bit(monkeypatch, workers):
    # datasets of different sizes (one larger than a resample block's weight budget, so it takes several
    # blocks), run on `workers` threads in another order than the sorted one
    monkeypatch.setattr(BS, "_workers", lambda: workers)
    monkeypatch.setattr(RS, "_BLOCK_WEIGHTS", 400)
    counts = {name: DatasetCounts(**{**_dataset(s, n=n).__dict__, "name": name})
              for name, s, n in (("b_small", 1, 9), ("a_mid", 2, 37), ("c_big", 3, 120), ("d_one", 4, 1))}
    got = BS.bootstrap_replicates(counts, bootstrap=45, seed=11)
    want = _serial_reference(counts, 45, 11)
    assert list(got) == sorted(counts)
    for name in counts:
        for c, stats in want[name].classes.items():
            assert list(got[name].classes[c]) == list(stats)
            for k, v in stats.items():
                np.testing.assert_array_equal(got[name].classes[c][k], v, err_msg=f"{name}/{c}/{k}")
        for k, v in want[name].summary.items():
            np.testing.assert_array_equal(got[name].summary[k], v, err_msg=f"{name}/{k}")


def test_skip_resamples_advances_the_generator_like_the_draws():
    for n, b in ((0, 5), (1, 7), (13, 300), (5000, 130)):
        a, c = np.random.default_rng(3), np.random.default_rng(3)
        for _ in RS.resample_weights(n, b, a):
            pass
        RS.skip_resamples(n, b, c)
        assert a.integers(0, 1 << 30) == c.integers(0, 1 << 30)


def test_nanmean_rows_is_numpys_nanmean_without_warnings_or_filter_changes():
    import warnings

    rng = np.random.default_rng(0)
    stack = rng.random((5, 200)) * 1e3
    stack[rng.random(stack.shape) < 0.4] = np.nan
    stack[:, :7] = np.nan  # all-NaN columns: NaN, silently
    filters = list(warnings.filters)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.nanmean(stack, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = BS._nanmean_rows(stack)
    np.testing.assert_array_equal(got, want)  # bit for bit, NaN where numpy gives NaN
    assert np.array_equal(np.isnan(got), np.isnan(stack).all(axis=0)) and np.isnan(got[:7]).all()
    assert BS._nanmean_rows(np.zeros((0, 3))).shape == (3,) and np.isnan(BS._nanmean_rows(np.zeros((0, 3)))).all()
    assert warnings.filters == filters
