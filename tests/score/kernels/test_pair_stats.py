"""A metric that needs a new per-pair statistic is one declaration plus the metric (issue 28).

The throw-away statistic is something an oracle computes from the stores alone, with no scorer code: the
raw map's largest value; its metric is the class mean of it. The oracle reads the submission's arrays
(score_stores), not the scorer's counts.
"""
from __future__ import annotations

import numpy as np
import pytest

from score_stores import make_gt, make_submission
from xbench.score.kernels import pair_stats as PS
from xbench.score.metrics import registry as R
from xbench.score.scoring import score_submission


def _raw_max(chunk: PS.Chunk, out: np.ndarray) -> None:
    out[:] = chunk.maps.reshape(chunk.maps.shape[0], -1).max(axis=1)


RAW_MAX = PS.PairStat("raw_max", np.float64, _raw_max, scopes=("class",), doc="largest value of the raw map")
METRIC = R.Metric("mean_raw_max", "Mean raw map maximum", "RawMax", "grounding", PS.column("raw_max", np.float64),
                  pairs=PS.present("raw_max"), fmt="number", minor=1, needs=("raw_max",),
                  doc="throw-away: the class mean of the raw maximum")


@pytest.fixture()
def stores(tmp_path):
    gt = make_gt(tmp_path / "gt.zarr")
    sub = make_submission(tmp_path / "sub.zarr", gt, map_shape=(7, 5))
    return tmp_path, gt, sub


def test_a_declared_statistic_is_counted_only_when_a_registered_metric_reads_it(stores):
    d, gt, sub = stores
    with PS.declared(RAW_MAX):
        plain = score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=0)
        assert all("raw_max" not in dc.extra for dc in plain.counts.values())  # declared, not read: not allocated
        with R.registered(METRIC):
            res = score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=20)
    checked = 0
    for name, g in gt.items():
        s = sub[name]
        row = {cid: i for i, cid in enumerate(s.case_ids)}
        col = {c: j for j, c in enumerate(s.classes)}
        dc = res.counts[name]
        want = np.array([float(s.saliency[row[g.case_ids[i]], col[g.classes[c]]].astype(np.float32).max())
                         for i, c in zip(dc.pair_case, dc.pair_class)])
        np.testing.assert_array_equal(dc.extra["raw_max"], want)
        for ci, cname in enumerate(g.classes):
            vals = [float(s.saliency[row[g.case_ids[i]], col[cname]].astype(np.float32).max())
                    for i, c in g.region_index if c == ci]
            entry = res.metrics["datasets"][name]["classes"][cname]
            if vals:
                assert entry["mean_raw_max"] == pytest.approx(np.mean(vals), rel=1e-12)
                checked += 1
            else:
                assert entry["mean_raw_max"] is None
        # the statistics the built-in metrics read are still there, the phrase-only CNR is not
        assert list(dc.extra) == ["energy_share", "hit_tolerant", "raw_max"]
    assert checked >= 4
    # the declaration is gone with the block: nothing is left behind
    assert "raw_max" not in PS.PAIR_STATS


def test_needed_follows_the_metrics_scopes_and_the_ground_truths_sizes():
    ms = R.metrics(kind=None, scope=None)
    assert [s.name for s in PS.needed(ms, "class", orig_size=True)] == ["energy_share", "hit_tolerant"]
    assert [s.name for s in PS.needed(ms, "class", orig_size=False)] == ["energy_share"]
    assert [s.name for s in PS.needed(ms, "phrase", orig_size=False)] == ["energy_share", "cnr"]
    assert PS.needed([m for m in ms if m.key == "pointing_game"], "class", orig_size=True) == []


def test_a_name_is_declared_once():
    with pytest.raises(ValueError, match="already declared"):
        PS.declare(PS.PairStat("energy_share", np.float64, lambda chunk, out: None))


def test_a_metric_declares_the_statistics_it_needs():
    assert R.metric("energy_pointing_game").needs == ("energy_share",)
    assert R.metric("cnr").needs == R.metric("cnr_signed").needs == ("cnr",)
    assert R.metric("dice_best").needs == ()
    # built on column/present without saying so: refused (the column would never be counted)
    with pytest.raises(ValueError, match="declare them in needs"):
        R.Metric("m", "m", "m", "grounding", PS.column("raw_max", np.float64), pairs=PS.present("raw_max"))
    with pytest.raises(ValueError, match="tuple of per-pair statistic names"):
        R.Metric("m", "m", "m", "grounding", PS.column("raw_max", np.float64), needs="raw_max")
    # a statistic nobody declared cannot be needed
    with pytest.raises(ValueError, match="not declared"):
        with R.registered(METRIC):
            pass
    assert "mean_raw_max" not in R.REGISTRY
    # the needs field, not the functions, decides what is counted
    hand = R.Metric("hand_raw_max", "h", "h", "grounding", lambda v: v.extra["raw_max"], needs=("raw_max",))
    with PS.declared(RAW_MAX), R.registered(hand):
        assert "raw_max" in [s.name for s in PS.needed(R.metrics(kind=None, scope=None), "class", orig_size=False)]
