"""Property-based round trips (hypothesis): any valid submission written in any case and class order
validates against the ground truth and aligns back to it by value."""
import tempfile
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from xbench.schemas import (  # noqa: E402
    DatasetSpec,
    SubmissionWriter,
    align,
    read_ground_truth,
    read_submission,
    validate_submission,
    write_ground_truth,
)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 23),
    n_classes=st.integers(1, 4),
    block=st.integers(1, 9),
    map_shape=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    seed=st.integers(0, 2**16),
)
def test_any_order_round_trips_and_aligns(n, n_classes, block, map_shape, seed):
    rng = np.random.default_rng(seed)
    ids = [f"id/{i}-{rng.integers(1e6)}" for i in range(n)]
    ids = list(dict.fromkeys(ids))
    classes = [f"Finding {c}" for c in range(n_classes)]
    labels = rng.integers(-1, 2, size=(len(ids), n_classes)).astype(np.int8)
    pairs = np.argwhere(labels == 1).astype(np.int32)
    masks = np.zeros((len(pairs), 4, 4), bool)
    masks[:, rng.integers(4), rng.integers(4)] = True
    with tempfile.TemporaryDirectory() as tmp:
        gt_path, sub_path = Path(tmp) / "gt.zarr", Path(tmp) / "sub.zarr"
        write_ground_truth(gt_path, "phantom", case_ids=ids, classes=classes, labels=labels, region_index=pairs,
                           region_mask=masks, orig_size=np.full((len(ids), 2), 8), grid=(4, 4))
        order = rng.permutation(len(ids))
        class_order = rng.permutation(n_classes)
        sub_ids = [ids[i] for i in order]
        sub_classes = [classes[c] for c in class_order]
        scores = rng.normal(size=(len(ids), n_classes)).astype(np.float32)
        w = SubmissionWriter.create(sub_path, model="m", method="similarity", cases_per_block=block,
                                    datasets={"phantom": DatasetSpec(sub_ids, sub_classes, map_shape)})
        for b in w.blocks_todo("phantom"):
            s, e = w.block_rows("phantom", b)
            w.write_block("phantom", b, scores[s:e], rng.random((e - s, n_classes, *map_shape)))
        w.finish()
        assert validate_submission(sub_path, gt_path) == []
        sub, gt = read_submission(sub_path).datasets["phantom"], read_ground_truth(gt_path).datasets["phantom"]
        rows, cols = align(sub, gt)
        assert [sub.case_id[r] for r in rows] == ids
        assert [sub.classes[c] for c in cols] == classes
        np.testing.assert_array_equal(sub.scores[rows][:, cols], scores[np.argsort(order)][:, np.argsort(class_order)])
