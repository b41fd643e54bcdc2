"""The paired bootstrap against direct computations: identity resample, scikit-learn, brute force."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

import report_fixtures
from xbench.score.resampling import bootstrap as BS
from xbench.score.resampling import engine as RS
from xbench.score.metrics.grounding import dice_from_counts
from xbench.score.kernels.maps import weighted_auroc_ap
from xbench.score.report import ReportInputError, load_results
from xbench.score.report.paired import compare_results as paired_bootstrap


def resample_weights(n_cases, bootstrap, seed):
    """All ``bootstrap`` resamples of the engine at once, (B, n_cases)."""
    return np.concatenate(list(RS.resample_weights(n_cases, bootstrap, np.random.default_rng(seed))))


def weighted_auroc(y, p, W):
    return weighted_auroc_ap(W, y, p)[0]


def weighted_average_precision(y, p, W):
    return weighted_auroc_ap(W, y, p)[1]


def _metric(metrics, row_scope, cls, key):
    if row_scope == "overall":
        return metrics["overall"].get(key)
    ds = metrics["datasets"][row_scope]
    return ds["summary"].get(key) if cls is None else ds["classes"][cls].get(key)


def test_identity_resample_equals_difference_of_metrics_json(result_dirs):
    a, _, b = load_results(result_dirs)
    rows = paired_bootstrap(a, b, bootstrap=0, per_class=True)
    assert len(rows) > 20
    for r in rows:
        ea, eb = _metric(a.metrics, r.scope, r.cls, r.metric), _metric(b.metrics, r.scope, r.cls, r.metric)
        if ea is None or eb is None:
            assert r.diff is None or r.scope == "overall"
            continue
        assert r.a == pytest.approx(ea, abs=1e-12), r
        assert r.b == pytest.approx(eb, abs=1e-12), r
        assert r.diff == pytest.approx(ea - eb, abs=1e-12), r
        assert r.ci_lo is None and r.n_valid == 0  # no resamples asked for


def test_self_comparison_has_zero_interval(result_dirs):
    a = load_results(result_dirs[:1])[0]
    rows = paired_bootstrap(a, a, bootstrap=50, per_class=False)
    for r in rows:
        if r.diff is not None:
            assert r.diff == 0 and r.ci_lo == 0 and r.ci_hi == 0 and not r.significant


def test_different_ground_truth_is_refused(result_dirs, tmp_path):
    other = report_fixtures.make_results(tmp_path, n_cases=12, skills=(("x", 0.5),), seed=5)[0]
    import json

    m = json.loads((other / "metrics.json").read_text())
    m["xbench"]["gt_sha256"] = "0" * 64
    (other / "metrics.json").write_text(json.dumps(m))
    a, b = load_results([result_dirs[0], other])
    with pytest.raises(ReportInputError, match="different ground truths"):
        paired_bootstrap(a, b, bootstrap=10)


def test_weights_are_multiplicities_and_reproducible():
    W = resample_weights(7, 30, seed=1)
    assert W.shape == (30, 7) and (W.sum(axis=1) == 7).all() and (W >= 0).all()
    assert np.array_equal(W, resample_weights(7, 30, seed=1))
    assert not np.array_equal(W, resample_weights(7, 30, seed=2))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weighted_auroc_and_ap_match_sklearn_on_expanded_sample(seed):
    rng = np.random.default_rng(seed)
    m = 15
    y = rng.integers(0, 2, m)
    y[:2] = [0, 1]
    p = np.round(rng.random(m), 1)  # many ties
    W = resample_weights(m, 8, seed)
    auc, ap = weighted_auroc(y, p, W), weighted_average_precision(y, p, W)
    for k in range(len(W)):
        idx = np.repeat(np.arange(m), W[k].astype(int))
        if len(set(y[idx])) < 2:
            assert np.isnan(auc[k]) and np.isnan(ap[k])
            continue
        assert auc[k] == pytest.approx(roc_auc_score(y[idx], p[idx]), abs=1e-12)
        assert ap[k] == pytest.approx(average_precision_score(y[idx], p[idx]), abs=1e-12)


def test_one_label_value_is_undefined():
    y = np.array([1, 1, 1])
    p = np.array([0.2, 0.5, 0.9])
    assert np.isnan(weighted_auroc(y, p, np.ones((1, 3))))[0]
    assert np.isnan(weighted_average_precision(y, p, np.ones((1, 3))))[0]


def _brute_force(dc, idx):
    """Metrics of the resample ``idx`` (case rows, with repeats) by plain loops over the expanded pairs."""
    out = {}
    for c, name in enumerate(dc.classes):
        res = {}
        pairs = dc.class_pairs(c)
        sel = [k for i in idx for k in pairs[dc.pair_case[pairs] == i]]
        if sel:
            md = np.mean(dice_from_counts(dc.b[sel], dc.br[sel], dc.region_pixels[sel]), axis=0)
            res["pointing_game"] = float(np.mean(dc.hit[sel]))
            res["dice_fixed"] = md[50]
            res["dice_best"] = md.max()
        sel = [i for i in idx if dc.labels[i, c] != -1]
        y, p = dc.labels[sel, c], dc.prob[sel, c]
        if len(set(y.tolist())) == 2:
            res["auroc"] = roc_auc_score(y, p)
        out[name] = res
    return out


def test_replicates_and_interval_match_brute_force(result_dirs):
    a, _, b = load_results(result_dirs)
    d = "phantom"
    bootstrap, seed = 12, 4
    rng = np.random.default_rng(seed)  # the engine draws each dataset's resamples in sorted order
    draws = {name: rng.integers(0, a.counts[name].n_cases, size=(bootstrap, a.counts[name].n_cases))
             for name in sorted(a.counts)}[d]
    reps = BS.bootstrap_replicates(a.counts, bootstrap=bootstrap, seed=seed)[d]
    wa = {"classes": reps.classes}
    diffs = {k: [] for k in ("pointing_game", "dice_best", "auroc")}
    for k in range(bootstrap):
        ba, bb = _brute_force(a.counts[d], draws[k]), _brute_force(b.counts[d], draws[k])
        for c in a.counts[d].classes:
            for key, val in ba[c].items():
                assert wa["classes"][c][key][k] == pytest.approx(val, abs=1e-12), (k, c, key)
        for key in diffs:
            va = np.mean([ba[c][key] for c in a.counts[d].classes if key in ba[c]])
            vb = np.mean([bb[c][key] for c in b.counts[d].classes if key in bb[c]])
            diffs[key].append(va - vb)
    rows = {r.metric: r for r in paired_bootstrap(a, b, bootstrap=bootstrap, seed=seed, per_class=False) if r.scope == d}
    for key, vals in diffs.items():
        lo, hi = np.percentile(vals, [2.5, 97.5])
        assert rows[key].ci_lo == pytest.approx(lo, abs=1e-12)
        assert rows[key].ci_hi == pytest.approx(hi, abs=1e-12)


def test_strong_beats_weak_significantly(result_dirs):
    from xbench.score.report.paired import with_holm

    a, _, b = load_results(result_dirs)
    unadjusted = {(r.scope, r.metric): r for r in paired_bootstrap(a, b, bootstrap=1000, per_class=False)}
    assert not unadjusted[("overall", "pointing_game")].significant  # no verdict before the Holm adjustment
    rows = {(r.scope, r.metric): r for r in with_holm(list(unadjusted.values()))}
    assert rows[("overall", "pointing_game")].significant and rows[("overall", "pointing_game")].p_holm < 0.05
    assert rows[("overall", "pointing_game")].ci_lo > 0


def test_cache_reuses_replicates_without_changing_them(result_dirs):
    a, m, b = load_results(result_dirs)
    cache: dict = {}
    first = paired_bootstrap(a, m, bootstrap=30, seed=2, per_class=False, cache=cache)
    n_cached = len(cache)
    again = paired_bootstrap(m, b, bootstrap=30, seed=2, per_class=False, cache=cache)
    assert len(cache) == n_cached + 2 * len(m.datasets)  # only b's identity and replicates are new
    plain = paired_bootstrap(m, b, bootstrap=30, seed=2, per_class=False)
    assert [(r.diff, r.ci_lo, r.ci_hi) for r in again] == [(r.diff, r.ci_lo, r.ci_hi) for r in plain]
    assert first != again
