"""Metric functions against hand-worked values, scikit-learn and the brute-force references."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, average_precision_score, f1_score, roc_auc_score

import score_reference as ref
from xbench.score.metrics import grounding as G
from xbench.score.metrics import recognition as R
from xbench.score.kernels.maps import grounding_counts


def test_dice_iou_hand_worked():
    # |B| = 4, |B∩R| = 2, |R| = 2 -> Dice 2*2/(4+2) = 2/3, IoU 2/4
    assert G.dice_from_counts([[4]], [[2]], [2])[0, 0] == pytest.approx(2 / 3)
    assert G.iou_from_counts([[4]], [[2]], [2])[0, 0] == 0.5
    # empty B: Dice and IoU 0 (R is never empty for a positive pair)
    assert G.dice_from_counts([[0]], [[0]], [3])[0, 0] == 0.0
    with pytest.raises(ValueError, match="region_pixels"):
        G.dice_from_counts([[1]], [[0]], [0])


def test_best_threshold_ties_go_to_smallest_tau():
    means = np.zeros(101)
    means[[30, 31, 70]] = 0.8
    assert G.best_threshold(means) == 30


def test_class_means_equal_column_means_bit_for_bit():
    m = np.random.default_rng(0).random((37, 101))
    np.testing.assert_array_equal(G.class_means(m), [np.mean(m[:, k]) for k in range(101)])


def test_threshold_index():
    assert G.threshold_index(0.37) == 37 and G.threshold_index(1.0) == 100 and G.threshold_index(0) == 0
    with pytest.raises(ValueError, match="grid"):
        G.threshold_index(0.375)


def test_pointing_game_score_and_undefined():
    assert G.pointing_game_score([1, 0, 1, 1]) == 0.75
    with pytest.warns(G.UndefinedMetricWarning, match="Nodule"):
        assert G.pointing_game_score([], name="Nodule") is None


def test_counts_to_metrics_match_brute_force_per_threshold():
    rng = np.random.default_rng(1)
    maps = rng.standard_normal((4, 5, 6)).astype(np.float32)
    masks = rng.random((4, 9, 8)) < 0.4
    masks[:, 4, 4] = True
    res = grounding_counts(maps, masks)
    dice = G.dice_from_counts(res.b, res.br, res.region_pixels)
    iou = G.iou_from_counts(res.b, res.br, res.region_pixels)
    for p in range(4):
        hit, d, i = ref.pair_values(maps[p], masks[p])
        np.testing.assert_array_equal(dice[p], d)
        np.testing.assert_array_equal(iou[p], i)
        assert res.hit[p] == hit


@pytest.mark.parametrize("seed", range(8))
def test_recognition_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    y = rng.integers(0, 2, n)
    y[0], y[-1] = 0, 1
    p = rng.random(n)
    if seed % 2:
        p = np.round(p * 4) / 4  # heavy ties, including exactly 0.5
    out = R.recognition_scores(y, p)
    assert abs(out["auroc"] - roc_auc_score(y, p)) <= 1e-12
    assert abs(out["auprc"] - average_precision_score(y, p)) <= 1e-12
    yhat = (p >= 0.5).astype(int)
    assert out["f1"] == pytest.approx(f1_score(y, yhat, zero_division=0), abs=1e-15)
    assert out["accuracy"] == pytest.approx(accuracy_score(y, yhat), abs=1e-15)


def test_probability_exactly_one_half_is_positive():
    out = R.recognition_scores([1, 0], [0.5, 0.49])
    assert out["accuracy"] == 1.0 and out["f1"] == 1.0
    assert R.probabilities(np.float32([0.0]), "logit")[0] == 0.5


def test_sigmoid_is_float64_and_saturates_without_warning():
    p = R.probabilities(np.float32([-1000, 1000, 1.5]), "logit")
    assert p.dtype == np.float64 and p[0] == 0.0 and p[1] == 1.0
    assert p[2] == ref.sigmoid(np.float32(1.5))


def test_single_label_class_is_null_and_names_the_class():
    with pytest.warns(G.UndefinedMetricWarning, match="VinDr/Lung cyst"):
        out = R.recognition_scores([0, 0, 0], [0.1, 0.7, 0.2], name="VinDr/Lung cyst")
    assert out["auroc"] is None and out["auprc"] is None
    assert out["f1"] == 0.0  # no true positive and one false positive: 2*0 / (0 + 1 + 0)
    assert out["accuracy"] == pytest.approx(2 / 3)
    with pytest.warns(G.UndefinedMetricWarning):
        none = R.recognition_scores([], [], name="x")
    assert all(v is None for v in none.values())


def test_f1_is_zero_when_undefined():
    assert R.f1_from_counts(0, 0, 0) == 0.0
    assert R.recognition_scores([0, 0, 1], [0.1, 0.2, 0.3], name="c")["f1"] == 0.0


def test_hamming_accuracy_ignores_unlabelled():
    labels = np.array([[1, -1], [0, 1]])
    p = np.array([[0.9, 0.9], [0.6, 0.2]])
    assert R.hamming_accuracy_score(labels, p) == pytest.approx(1 / 3)
    assert R.hamming_accuracy_score(np.full((2, 2), -1), p) is None


def test_bad_inputs_are_explained():
    with pytest.raises(ValueError, match="-1"):
        R.recognition_scores([1, -1], [0.2, 0.3])
    with pytest.raises(ValueError, match="score_kind"):
        R.probabilities([0.1], "softmax")
