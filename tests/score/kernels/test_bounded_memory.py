"""The scorer's memory-bounded paths give the numbers of the plain ones.

- class_mean_curves (thresholds a block at a time) equals class_means of the full Dice/IoU matrices, bit
  for bit;
- the bootstrap's class chunks and its bounded cache of Dice/IoU matrices give the single-product replicates;
- the pairs table's categorical columns hold the right strings when case ids repeat across datasets.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from xbench.score.resampling import bootstrap as BS

from xbench.score.resampling import engine as RS
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.metrics.grounding import (UndefinedMetricWarning, class_mean_curves, class_means, dice_from_counts,
                                    iou_from_counts)
from xbench.score.kernels.maps import grounding_counts


def _counts(rng, P, grid=(9, 11)):
    masks = rng.random((P, *grid)) < 0.3
    masks[:, 0, 0] = True
    maps = rng.standard_normal((P, 4, 5)).astype(np.float32)
    maps[: P // 10] = 1.0  # some constant maps (all of B_0, nothing above)
    return grounding_counts(maps, masks)


@pytest.mark.parametrize("P", [0, 1, 7, 129, 1000])  # above 128 NumPy's pairwise summation splits the sum
@pytest.mark.parametrize("block", [1, 16, 101])
def test_class_mean_curves_equal_class_means_bit_for_bit(P, block):
    rng = np.random.default_rng(P)
    res = _counts(rng, max(P, 1) + 5)
    rows = np.sort(rng.choice(res.b.shape[0], size=P, replace=False))
    d, i = class_mean_curves(res.b, res.br, res.region_pixels, rows=rows, block=block)
    sel = (res.b[rows], res.br[rows], res.region_pixels[rows])
    np.testing.assert_array_equal(d, class_means(dice_from_counts(*sel)))
    np.testing.assert_array_equal(i, class_means(iou_from_counts(*sel)))
    if P == 0:
        assert np.isnan(d).all() and np.isnan(i).all()
    whole = class_mean_curves(res.b, res.br, res.region_pixels, block=block)
    np.testing.assert_array_equal(whole[0], class_means(dice_from_counts(res.b, res.br, res.region_pixels)))


def _dataset(seed=0, n=300, C=2):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=(n, C)).astype(np.int8)
    pairs = np.argwhere(labels == 1)
    order = np.lexsort((pairs[:, 0], pairs[:, 1]))
    pairs = pairs[order]
    res = _counts(rng, len(pairs))
    return DatasetCounts(name="phantom", classes=tuple(f"c{j}" for j in range(C)), supported=np.ones(C, bool),
                         case_id=np.array([f"case{i}" for i in range(n)]), labels=labels, prob=rng.random((n, C)),
                         pair_case=pairs[:, 0], pair_class=pairs[:, 1], region_pixels=res.region_pixels,
                         hit=res.hit, b=res.b, br=res.br, grid=(9, 11))


@pytest.mark.parametrize("pair_chunk,budget", [(17, 0), (17, 40_000), (64, 10**9), (100_000, 0)])
def test_chunked_bootstrap_equals_one_product(pair_chunk, budget):
    dc = _dataset()
    w = np.concatenate(list(RS.resample_weights(dc.n_cases, 30, np.random.default_rng(4))))
    plain, plain_summary = BS.dataset_replicates(dc, w)  # every class in one chunk, all cached
    cache = {"pair_chunk": pair_chunk, "budget": budget}
    chunked, chunked_summary = BS.dataset_replicates(dc, w, per_pair=cache)
    again, _ = BS.dataset_replicates(dc, w, per_pair=cache)  # a second block reuses what was cached
    assert cache["bytes"] <= budget
    if 0 < budget < 10**9:
        assert 0 < cache["bytes"]  # part of the matrices cached, the rest recomputed
    for name, stats in plain.items():
        for key, v in stats.items():
            if key in ("pointing_game",):  # integer sums: exact whatever the chunking
                np.testing.assert_array_equal(chunked[name][key], v)
            np.testing.assert_allclose(chunked[name][key], v, rtol=0, atol=1e-12, err_msg=f"{name}/{key}")
            np.testing.assert_array_equal(again[name][key], chunked[name][key])
    for key, v in plain_summary.items():
        np.testing.assert_allclose(chunked_summary[key], v, rtol=0, atol=1e-12)


def test_chunked_bootstrap_matches_grounding_replicates_with_transferred_thresholds():
    dc = _dataset(seed=3)
    w = np.concatenate(list(RS.resample_weights(dc.n_cases, 12, np.random.default_rng(1))))
    classes, _ = BS.dataset_replicates(dc, w, taus={"c0": (20, 70)}, per_pair={"pair_chunk": 9, "budget": 0})
    idx = dc.class_pairs(0)
    # grounding_replicates (removed: the registry's metrics are bootstrapped by dataset_replicates) written out:
    # weighted class means over the class's pairs, at the transferred indices
    wp = w[:, dc.pair_case[idx]]
    dice = dice_from_counts(dc.b[idx], dc.br[idx], dc.region_pixels[idx])
    iou = iou_from_counts(dc.b[idx], dc.br[idx], dc.region_pixels[idx])
    n = wp.sum(axis=1)
    direct = {"pointing_game": wp @ dc.hit[idx] / n, "dice_fixed": wp @ dice[:, 50] / n,
              "iou_fixed": wp @ iou[:, 50] / n, "dice_best": wp @ dice[:, 20] / n, "iou_best": wp @ iou[:, 70] / n}
    for key, v in direct.items():
        np.testing.assert_allclose(classes["c0"][key], v, rtol=0, atol=1e-12)


def test_pairs_table_categoricals_with_case_ids_shared_across_datasets():
    from xbench.score.scoring import metrics_from_counts, pairs_table

    a = _dataset(seed=5, n=40)
    b = DatasetCounts(**{**_dataset(seed=6, n=30).__dict__, "name": "covid_rural",
                         "classes": ("c1", "other")})  # same case ids as `a` for its first 30 cases
    counts = {"phantom": a, "covid_rural": b}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        _, per_pair = metrics_from_counts(counts, bootstrap=0)
    table = pairs_table(counts, per_pair)
    assert str(table["case_id"].dtype) == "category" and str(table["class"].dtype) == "category"
    for name, dc in counts.items():
        sub = table[table["dataset"] == name]
        r, c = np.nonzero(dc.labels != -1)
        assert list(sub["case_id"].astype(str)) == list(dc.case_id[r])
        assert list(sub["class"].astype(str)) == [dc.classes[j] for j in c]
        np.testing.assert_array_equal(sub["probability"].to_numpy(), dc.prob[r, c])
        has = sub["has_region"].to_numpy()
        assert has.sum() == dc.pair_case.size
        assert sub["hit"][~has].isna().all() and sub["dice_best"][~has].isna().all()
        # each region's values sit on its own (case, class) row
        k = {(i, j): p for p, (i, j) in enumerate(zip(dc.pair_case, dc.pair_class))}
        rows = [k[(i, j)] for i, j in zip(r[has], c[has])]
        np.testing.assert_array_equal(sub["region_pixels"].to_numpy()[has], dc.region_pixels[rows])
        np.testing.assert_array_equal(sub["hit"].to_numpy()[has].astype(bool), dc.hit[rows])


def test_kernels_import_without_scipy_linalg_and_jitted_linear_algebra_still_works():
    code = (
        "import sys, numpy as np, numba\n"
        "from xbench.score.kernels.maps import threshold_bins\n"
        "threshold_bins(np.zeros(3))  # Numba's first dispatch: without the skipped probe it imports scipy.linalg\n"
        "assert 'scipy.linalg' not in sys.modules, 'the BLAS probe imported scipy.linalg'\n"
        "f = numba.njit(lambda a, b: (np.dot(a, b), np.correlate(a[0], b[0])))\n"
        "a = np.arange(6.0).reshape(2, 3)\n"
        "d, c = f(a, a.T.copy())\n"
        "assert np.allclose(d, a @ a.T) and np.allclose(c, np.correlate(a[0], a.T.copy()[0]))\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_count_dtype_holds_every_count_of_the_grid():
    from xbench.score.kernels.counts import count_dtype

    assert count_dtype((224, 224)) == np.uint16 and count_dtype((255, 257)) == np.uint16  # 65,535 cells
    assert count_dtype((256, 256)) == np.int32 and count_dtype((1024, 1024)) == np.int32


@pytest.mark.parametrize("grid", [(224, 224), (256, 256)])
def test_scorer_counts_in_the_grid_dtype_equal_the_int32_kernel(grid):
    from xbench.score.scoring import count_dataset

    rng = np.random.default_rng(11)
    n, C = 6, 2
    labels = np.ones((n, C), np.int8)
    ri = np.argwhere(labels == 1)
    masks = np.zeros((len(ri), *grid), bool)
    masks[:, 10:200, 20:240] = True  # |R| and |B| up to the whole grid
    masks[0] = True
    maps = rng.standard_normal((n, C, 7, 7)).astype(np.float32)
    maps[1, 0] = 0.0  # constant: |B_0| = every cell

    sub = SimpleNamespace(scores=rng.standard_normal((n, C)), saliency=maps, score_kind="logit", classes=["a", "b"])
    gt = SimpleNamespace(name="phantom", classes=["a", "b"], labels=labels, region_index=ri, region_mask=masks,
                         case_id=np.array([f"c{i}" for i in range(n)]), grid=grid)
    dc = count_dataset(sub, gt, case_rows=np.arange(n), class_cols=np.arange(C))
    want = grounding_counts(maps[ri[:, 0], ri[:, 1]], masks)
    assert dc.b.dtype == (np.uint16 if grid == (224, 224) else np.int32)
    order = np.lexsort((ri[:, 0], ri[:, 1]))  # the scorer keeps pairs by class, then case
    np.testing.assert_array_equal(dc.b, want.b[order])
    np.testing.assert_array_equal(dc.br, want.br[order])
    assert dc.b.max() == grid[0] * grid[1]


@pytest.mark.parametrize("max_rows", [1, 7, 1 << 16])
def test_streamed_pairs_parquet_equals_the_in_memory_table(tmp_path, max_rows):
    import pandas as pd
    import pyarrow.parquet as pq

    from xbench.score.scoring import metrics_from_counts, pairs_table, write_pairs_parquet

    a = _dataset(seed=5, n=40)
    b = DatasetCounts(**{**_dataset(seed=6, n=30).__dict__, "name": "covid_rural", "classes": ("c1", "other")})
    counts = {"phantom": a, "covid_rural": b}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        _, per_pair = metrics_from_counts(counts, bootstrap=0)
    write_pairs_parquet(tmp_path / "p.parquet", counts, per_pair, max_rows=max_rows)
    if max_rows == 7:
        assert pq.ParquetFile(tmp_path / "p.parquet").metadata.num_row_groups > 10
    got = pd.read_parquet(tmp_path / "p.parquet")
    want = pairs_table(counts, per_pair)
    assert list(got.columns) == list(want.columns) and len(got) == len(want)
    for col in want.columns:
        if str(want[col].dtype) == "category":
            assert str(got[col].dtype) == "category"
            assert list(got[col].astype(str)) == list(want[col].astype(str)), col
        else:
            assert got[col].dtype == want[col].dtype, col
            pd.testing.assert_series_equal(got[col], want[col], check_names=False)


def test_streamed_pairs_parquet_of_nothing_has_the_columns(tmp_path):
    import pandas as pd

    from xbench.score.scoring import PAIR_COLUMNS, pair_table_columns, write_pairs_parquet

    write_pairs_parquet(tmp_path / "p.parquet", {}, {})
    got = pd.read_parquet(tmp_path / "p.parquet")
    # the contract's columns first, then one per metric registered since (schema minor 1 and later)
    assert list(got.columns) == pair_table_columns() and len(got) == 0
    assert list(got.columns)[:len(PAIR_COLUMNS)] == PAIR_COLUMNS


def test_in_place_dice_and_iou_round_like_the_formulas():
    rng = np.random.default_rng(3)
    res = _counts(rng, 300)
    b, br, r = res.b, res.br, res.region_pixels
    bf, brf, rf = b.astype(np.float64), br.astype(np.float64), r[:, None].astype(np.float64)
    np.testing.assert_array_equal(dice_from_counts(b, br, r), 2.0 * brf / (bf + rf))
    np.testing.assert_array_equal(iou_from_counts(b, br, r), brf / (bf + rf - brf))
    for dtype in (np.uint16, np.int32, np.int64):
        np.testing.assert_array_equal(dice_from_counts(b.astype(dtype), br.astype(dtype), r), 2.0 * brf / (bf + rf))


def test_allocator_hygiene_is_callable_anywhere():
    from xbench.score.kernels._allocator import _LIBC, limit_malloc_arenas, release_freed_memory

    release_freed_memory()
    # glibc accepts the arena limit (and returns 1); elsewhere it is a no-op that says so
    assert limit_malloc_arenas(2) is (_LIBC is not None)


def test_scoring_an_opened_ground_truth_equals_scoring_its_path(tmp_path):
    from score_stores import make_gt, make_submission

    from xbench.schemas import read_ground_truth
    from xbench.score.scoring import score_submission

    gt = make_gt(tmp_path / "gt.zarr")
    make_submission(tmp_path / "sub.zarr", gt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        by_path = score_submission(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=20)
        opened = score_submission(tmp_path / "sub.zarr", read_ground_truth(tmp_path / "gt.zarr"), bootstrap=20)
    assert opened.metrics == by_path.metrics
