"""Images stores that keep every case at its original resolution (schema_minor 1)."""
from __future__ import annotations

import numpy as np
import pytest
import zarr

from xbench.schemas import ImagesWriter, InvalidStoreError, read_images, validate_images

CLASSES = ["a", "b"]
SIZES = [(5, 7), (9, 3), (1, 1), (4, 4), (6, 2)]


def originals(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=hw, dtype=np.uint8) for hw in SIZES]


def write(path, *, cpb=2, stop_after=None, seed=0):
    ims = originals(seed)
    w = ImagesWriter(path, "phantom", case_ids=[f"c{i}" for i in range(len(SIZES))], classes=CLASSES,
                     image_size=8, cases_per_block=cpb, keep_original=True)
    for k, b in enumerate(w.blocks_todo()):
        if stop_after is not None and k >= stop_after:
            return w, ims
        a, z = w.block_rows(b)
        w.write_block(b, np.full((z - a, 8, 8), b, np.uint8), np.array(SIZES[a:z]), ims[a:z])
    w.finish()
    return w, ims


def test_originals_round_trip_and_layout(tmp_path):
    path = tmp_path / "im.zarr"
    _, ims = write(path)
    store = read_images(path)
    ds = store.datasets["phantom"]
    assert ds.has_originals and store.attrs["schema_minor"] == 1
    for i, im in enumerate(ims):
        np.testing.assert_array_equal(ds.original(i), im)
    # the documented layout, recomputed independently: back to back in case order
    sizes = [h * w for h, w in SIZES]
    assert ds.orig_offset.tolist() == [sum(sizes[:i]) for i in range(len(sizes))]
    flat = np.concatenate([im.ravel() for im in ims])
    np.testing.assert_array_equal(np.asarray(ds.orig_pixels[:]), flat)
    assert validate_images(path) == []


def test_store_without_originals_stays_valid_and_says_so(tmp_path):
    path = tmp_path / "im.zarr"
    w = ImagesWriter(path, "phantom", case_ids=["x"], classes=CLASSES, image_size=8)
    w.write_block(0, np.zeros((1, 8, 8), np.uint8), np.array([[3, 4]]))
    w.finish()
    ds = read_images(path).datasets["phantom"]
    assert not ds.has_originals and validate_images(path) == []
    with pytest.raises(InvalidStoreError, match="keeps no original"):
        ds.original(0)


def test_originals_resume_after_a_crash_is_identical(tmp_path):
    done, _ = write(tmp_path / "a.zarr")
    write(tmp_path / "b.zarr", stop_after=1)
    # simulate a crash after the buffer grew for block 1 but before its ledger entry
    g = zarr.open_group(tmp_path / "b.zarr" / "phantom", mode="r+")
    g["orig_pixels"].resize((g["orig_pixels"].shape[0] + 1000,))
    write(tmp_path / "b.zarr")
    a, b = (read_images(tmp_path / n).datasets["phantom"] for n in ("a.zarr", "b.zarr"))
    np.testing.assert_array_equal(np.asarray(a.orig_pixels[:]), np.asarray(b.orig_pixels[:]))
    np.testing.assert_array_equal(a.orig_offset, b.orig_offset)
    assert validate_images(tmp_path / "b.zarr") == []


def test_originals_must_be_written_in_order_and_match_sizes(tmp_path):
    w = ImagesWriter(tmp_path / "im.zarr", "phantom", case_ids=["x", "y", "z"], classes=CLASSES, image_size=8,
                     cases_per_block=1, keep_original=True)
    img = np.zeros((1, 8, 8), np.uint8)
    with pytest.raises(InvalidStoreError, match="out of order"):
        w.write_block(1, img, np.array([[2, 2]]), [np.zeros((2, 2), np.uint8)])
    with pytest.raises(InvalidStoreError, match="shape"):
        w.write_block(0, img, np.array([[2, 2]]), [np.zeros((2, 3), np.uint8)])
    with pytest.raises(InvalidStoreError, match="one original"):
        w.write_block(0, img, np.array([[2, 2]]), None)


@pytest.mark.parametrize("tamper, message", [
    (lambda g: g["orig_offset"].__setitem__(2, 1), "offset"),
    (lambda g: g["orig_size"].__setitem__(3, [4, 5]), "offset"),  # later offsets no longer follow
    (lambda g: g["orig_size"].__setitem__(4, [6, 3]), "orig_size adds up"),  # the last case: only the total
    (lambda g: g["orig_size"].__setitem__(1, [0, 3]), "side outside"),
    (lambda g: g["orig_pixels"].resize((10,)), "adds up"),
    (lambda g: g.__delitem__("orig_offset"), "orig_offset: array is missing"),
])
def test_validation_catches_inconsistent_originals(tmp_path, tamper, message):
    path = tmp_path / "im.zarr"
    write(path)
    g = zarr.open_group(path / "phantom", mode="r+")
    tamper(g)
    problems = [str(p) for p in validate_images(path)]
    assert any(message in p for p in problems), problems


def test_originals_need_schema_minor(tmp_path):
    path = tmp_path / "im.zarr"
    write(path)
    root = zarr.open_group(path, mode="r+")
    root.attrs["xbench"] = {k: v for k, v in root.attrs["xbench"].items() if k != "schema_minor"}
    assert any("schema_minor" in str(p) for p in validate_images(path))


def test_validation_reports_a_missing_pixel_chunk(tmp_path):
    path = tmp_path / "im.zarr"
    write(path)
    (path / "phantom" / "orig_pixels" / "c" / "0").unlink()
    assert any("orig_pixels" in str(p) and "never written" in str(p) for p in validate_images(path))
