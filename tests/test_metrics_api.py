"""xbench.metrics: doctests, a light import, and values equal to the brute-force definitions."""

from __future__ import annotations

import doctest
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import xbench.metrics as M

sys.path.insert(0, str(Path(__file__).parent / "score"))
import score_reference as ref  # noqa: E402  (the scorer tests' oracles)


def test_doctests_pass():
    res = doctest.testmod(M, optionflags=doctest.ELLIPSIS)
    assert res.attempted >= 20 and res.failed == 0


def test_import_needs_neither_torch_nor_pandas():
    code = ("import sys, numpy as np, xbench.metrics as M; "
            "M.pointing_game(np.ones((1, 2, 2), np.float32), np.ones((1, 2, 2), bool)); "
            "print(sorted(m for m in ('torch', 'pandas', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def pairs():
    rng = np.random.default_rng(3)
    maps = rng.standard_normal((12, 5, 6)).astype(np.float64)  # float64 input: rounded to float32
    maps[4] = 1.0  # constant map
    masks = np.zeros((12, 8, 7), bool)
    for i in range(12):
        y, x = rng.integers(0, 7), rng.integers(0, 6)
        masks[i, y:y + rng.integers(1, 4), x:x + rng.integers(1, 4)] = True
    masks[5] = True  # whole grid
    return maps, masks


def test_values_equal_brute_force(pairs):
    maps, masks = pairs
    hits, dice, iou, energy = [], [], [], []
    for m, r in zip(maps.astype(np.float32), masks):
        h, d, j = ref.pair_values(m, r)
        hits.append(h)
        dice.append(d)
        iou.append(j)
        mm = ref.normalise(ref.resize(m, r.shape))
        energy.append(mm[r].sum() / mm.sum() if mm.sum() > 0 else 0.0)
    dice, iou = np.array(dice), np.array(iou)
    assert M.pointing_game(maps, masks) == np.mean(hits)
    assert M.dice_score(maps, masks, threshold=0.37) == pytest.approx(dice[:, 37].mean(), rel=1e-15)
    assert M.iou_score(maps, masks) == pytest.approx(iou[:, 50].mean(), rel=1e-15)
    assert np.array_equal(M.dice_score(maps, masks, average=False), dice[:, 50])
    k = int(np.argmax(dice.mean(axis=0)))
    assert M.best_threshold(maps, masks) == (pytest.approx(k / 100), pytest.approx(dice[:, k].mean(), rel=1e-15))
    assert M.energy_pointing_game(maps, masks, average=False) == pytest.approx(energy, rel=1e-12)
    v = M.map_auroc(maps, masks, average=False)
    assert np.isnan(v[5]) and not np.isnan(np.delete(v, 5)).any()
    assert M.map_auroc(maps, masks) == pytest.approx(np.delete(v, 5).mean())
    assert M.tolerant_pointing_game(maps, masks, tolerance=0.0) == np.mean(hits)
    # every region within reach, but the constant map (row 4) has no peak: a miss at any tolerance
    assert M.tolerant_pointing_game(maps, masks, tolerance=100.0) == 11 / 12


def test_recognition_matches_scikit_learn():
    from sklearn.metrics import average_precision_score, roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 50)
    s = np.round(rng.random(50), 1)  # ties
    assert M.auroc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert M.auprc(y, s) == pytest.approx(average_precision_score(y, s), abs=1e-12)
    assert np.isnan(M.auroc([1, 1], [0.2, 0.3]))


def test_bad_input_says_what_to_fix():
    with pytest.raises(TypeError, match="floats"):
        M.pointing_game(np.ones((1, 2, 2), int), np.ones((1, 2, 2), bool))
    with pytest.raises(ValueError, match="at least one True"):
        M.pointing_game(np.ones((1, 2, 2), np.float32), np.zeros((1, 2, 2), bool))
    with pytest.raises(ValueError, match="grid"):
        M.dice_score(np.ones((1, 2, 2), np.float32), np.ones((1, 2, 2), bool), threshold=0.333)
    with pytest.raises(ValueError, match="metric"):
        M.best_threshold(np.ones((1, 2, 2), np.float32), np.ones((1, 2, 2), bool), metric="f1")
    assert np.isnan(M.pointing_game(np.zeros((0, 2, 2), np.float32), np.zeros((0, 3, 3), bool)))
