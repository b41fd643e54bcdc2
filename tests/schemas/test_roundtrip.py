import numpy as np
import pytest

from xbench.schemas import (
    DatasetSpec,
    ImagesWriter,
    InvalidStoreError,
    SubmissionWriter,
    align,
    read_ground_truth,
    read_images,
    read_submission,
    store_sha256,
    validate_ground_truth,
    validate_images,
    validate_submission,
    write_ground_truth,
)

from schema_stores import CLASSES, GRID, N, case_ids, write_submission


def test_ground_truth_round_trip(gt_path):
    assert validate_ground_truth(gt_path) == []
    gt = read_ground_truth(gt_path).datasets["phantom"]
    assert gt.classes == tuple(CLASSES) and gt.grid == GRID
    assert gt.case_id.tolist() == case_ids()
    assert gt.labels.dtype == np.int8 and gt.labels.shape == (N, 3)
    assert len(gt.region_index) == int((gt.labels == 1).sum())
    assert gt.region_mask.shape == (len(gt.region_index), *GRID)
    assert np.asarray(gt.region_mask[:]).reshape(len(gt.region_index), -1).any(axis=1).all()


def test_submission_round_trip_and_alignment(gt_path, sub_path):
    assert validate_submission(sub_path, gt_path) == []
    sub = read_submission(sub_path)
    assert sub.attrs["model"] == "test-model" and sub.attrs["kind"] == "submission"
    ds = sub.datasets["phantom"]
    gt = read_ground_truth(gt_path).datasets["phantom"]
    rows, cols = align(ds, gt)
    assert ds.case_id[rows].tolist() == gt.case_id.tolist()  # written in reverse order, matched by value
    assert [ds.classes[c] for c in cols] == list(gt.classes)
    assert ds.saliency.dtype == np.float16 and ds.saliency.shape == (N, 3, 7, 7)


def test_alignment_by_name_with_reordered_classes(gt_path, tmp_path):
    path = write_submission(tmp_path / "s.zarr", classes=CLASSES[::-1] + ["Extra"])
    assert validate_submission(path, gt_path) == []
    rows, cols = align(read_submission(path).datasets["phantom"], read_ground_truth(gt_path).datasets["phantom"])
    assert cols.tolist() == [2, 1, 0]


def test_images_round_trip(tmp_path):
    path = tmp_path / "images.zarr"
    ids = case_ids(7)
    w = ImagesWriter(path, "phantom", case_ids=ids, classes=CLASSES, image_size=32, cases_per_block=3)
    assert w.blocks_todo() == [0, 1, 2]
    imgs = np.random.default_rng(0).integers(0, 256, (7, 32, 32), dtype=np.uint8)
    imgs[:3] = 0  # an all-fill block must still be stored
    for b in w.blocks_todo():
        s, e = w.block_rows(b)
        w.write_block(b, imgs[s:e], np.tile([[100, 80]], (e - s, 1)))
    w.finish()
    assert validate_images(path) == []
    ds = read_images(path).datasets["phantom"]
    np.testing.assert_array_equal(ds.image[:], imgs)
    assert ds.orig_size.tolist() == [[100, 80]] * 7


def test_images_unfinished_group_is_refused_then_resumed(tmp_path):
    path = tmp_path / "images.zarr"
    kw = dict(case_ids=case_ids(6), classes=CLASSES, image_size=8, cases_per_block=2)
    w = ImagesWriter(path, "phantom", **kw)
    w.write_block(1, np.ones((2, 8, 8), np.uint8), np.ones((2, 2)))
    assert any("unfinished" in str(p) for p in validate_images(path))
    with pytest.raises(InvalidStoreError, match="unfinished"):
        read_images(path)
    w2 = ImagesWriter(path, "phantom", **kw)
    assert w2.blocks_todo() == [0, 2]


def test_preparing_one_dataset_again_replaces_only_its_group(tmp_path, gt_path):
    other = np.zeros((2, 3), np.int8)
    write_ground_truth(gt_path, "siim_acr", case_ids=["a", "b"], classes=["A", "B", "C"], labels=other,
                       region_index=np.zeros((0, 2)), region_mask=np.zeros((0, 8, 8), bool), orig_size=np.ones((2, 2)), grid=(8, 8))
    before = read_ground_truth(gt_path).datasets["phantom"].labels.copy()
    write_ground_truth(gt_path, "siim_acr", case_ids=["x"], classes=["A"], labels=np.ones((1, 1), np.int8),
                       region_index=[[0, 0]], region_mask=np.ones((1, 8, 8), bool), orig_size=np.ones((1, 2)), grid=(8, 8))
    gt = read_ground_truth(gt_path)
    assert gt.datasets["siim_acr"].case_id.tolist() == ["x"]
    np.testing.assert_array_equal(gt.datasets["phantom"].labels, before)
    assert validate_ground_truth(gt_path) == []
    assert not [p for p in gt_path.parent.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_write_ground_truth_refuses_inconsistent_arrays(tmp_path):
    with pytest.raises(InvalidStoreError) as err:
        write_ground_truth(tmp_path / "gt.zarr", "phantom", case_ids=["a", "a"], classes=["A"], labels=np.array([[0], [2]]),
                           region_index=[[0, 0]], region_mask=np.zeros((1, 4, 4), bool), orig_size=np.ones((2, 2)), grid=(4, 4))
    text = str(err.value)
    assert "case_ids repeat" in text and "values other than -1, 0, 1" in text
    assert not (tmp_path / "gt.zarr").exists()


def test_zip_store_reads_and_validates(gt_path, sub_path, tmp_path):
    import shutil

    zipped = shutil.make_archive(str(tmp_path / "sub"), "zip", root_dir=sub_path)
    zpath = tmp_path / "sub.zarr.zip"
    shutil.move(zipped, zpath)
    assert validate_submission(zpath, gt_path) == []
    assert read_submission(zpath).datasets["phantom"].scores.shape == (N, 3)
    assert store_sha256(zpath) == store_sha256(sub_path)


def test_store_hash_of_a_directory_reads_what_zarr_lists(gt_path, sub_path):
    """The directory fast path (plain file reads) hashes exactly the keys and bytes Zarr's store gives."""
    import hashlib

    from xbench.schemas import _zarr
    from xbench.schemas.store import open_store_group

    for path in (gt_path, sub_path):
        store = open_store_group(path).store
        digest = hashlib.sha256()
        for key in _zarr.list_keys(store):
            digest.update(key.encode() + b"\0" + hashlib.sha256(_zarr.get_buffer(store, key).to_bytes()).digest())
        assert store_sha256(path) == digest.hexdigest()


def test_zip_store_is_read_only(tmp_path):
    with pytest.raises(InvalidStoreError, match="read-only"):
        SubmissionWriter.open(tmp_path / "x.zarr.zip")


def test_writer_refuses_a_different_spec_at_the_same_path(tmp_path):
    path = write_submission(tmp_path / "s.zarr")
    with pytest.raises(InvalidStoreError, match="different specification"):
        SubmissionWriter.create(path, model="other", method="similarity", datasets={"phantom": DatasetSpec(case_ids(), CLASSES, (7, 7))})


def test_writer_rejects_wrong_block_shapes_and_non_finite_values(tmp_path):
    w = SubmissionWriter.create(tmp_path / "s.zarr", model="m", method="similarity",
                                datasets={"phantom": DatasetSpec(case_ids(4), CLASSES, (2, 2))}, cases_per_block=2)
    with pytest.raises(InvalidStoreError, match="needs shape"):
        w.write_block("phantom", 0, np.zeros((3, 3)), np.zeros((3, 3, 2, 2)))
    with pytest.raises(InvalidStoreError, match="non-finite"):
        w.write_block("phantom", 0, np.full((2, 3), np.nan), np.zeros((2, 3, 2, 2)))
    with pytest.raises(InvalidStoreError, match="not written yet"):
        w.finish()


def test_images_writer_restarts_when_attributes_change_and_finish_records_late_attrs(tmp_path):
    path = tmp_path / "images.zarr"
    kw = dict(case_ids=case_ids(4), classes=CLASSES, image_size=8, cases_per_block=2)
    w = ImagesWriter(path, "phantom", attrs={"voi": "on"}, **kw)
    w.write_block(0, np.ones((2, 8, 8), np.uint8), np.ones((2, 2)))
    assert ImagesWriter(path, "phantom", attrs={"voi": "on"}, **kw).blocks_todo() == [1]
    w = ImagesWriter(path, "phantom", attrs={"voi": "off"}, **kw)
    assert w.blocks_todo() == [0, 1]
    for b in w.blocks_todo():
        w.write_block(b, np.ones((2, 8, 8), np.uint8), np.ones((2, 2)))
    w.finish(attrs={"skipped": [{"case_id": "x", "reason": "unreadable"}]})
    ds = read_images(path).datasets["phantom"]
    assert ds.attrs["voi"] == "off" and ds.attrs["skipped"][0]["case_id"] == "x"


def test_writer_refuses_a_folder_it_did_not_start(tmp_path):
    import zarr

    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    g.create_array("theirs", shape=(2,), dtype="int8")  # someone else's data, no xbench attributes
    with pytest.raises(InvalidStoreError, match="not a store this writer started"):
        SubmissionWriter.create(tmp_path / "s.zarr", model="m", method="similarity",
                                datasets={"phantom": DatasetSpec(case_ids(), CLASSES, (7, 7))})


def test_a_store_an_older_version_left_half_created_is_started_again(tmp_path):
    import zarr

    # what the earlier writer left when killed before its last step (root attributes): groups with ledgers
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    root.create_group("phantom").create_array("_blocks_done", shape=(2,), dtype="bool")
    w = SubmissionWriter.create(tmp_path / "s.zarr", model="m", method="similarity",
                                datasets={"phantom": DatasetSpec(case_ids(), CLASSES, (7, 7))})
    assert w.blocks_todo("phantom") == list(range(w.n_blocks("phantom")))
    zarr.open_group(str(tmp_path / "e.zarr"), mode="w", zarr_format=3)  # killed right after the root group
    iw = ImagesWriter(tmp_path / "e.zarr", "phantom", case_ids=case_ids(4), classes=CLASSES, image_size=8,
                      cases_per_block=2)
    for b in iw.blocks_todo():
        iw.write_block(b, np.full((2, 8, 8), b, np.uint8), np.ones((2, 2)))
    iw.finish()
    assert len(read_images(tmp_path / "e.zarr").datasets["phantom"].case_id) == 4


