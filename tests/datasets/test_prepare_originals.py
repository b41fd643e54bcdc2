"""xbench-prepare --keep-original: every case also at its original resolution."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from xbench.extract.datasets.prepare import prepare_dataset
from xbench.extract.prepare_cli import main as cli
from xbench.schemas import read_images, store_sha256, validate_images

from test_prepare import SMALL, FakeReader, _Crash, good_case


class VarReader(FakeReader):
    """FakeReader whose images all differ in size (and shape: tall, wide, square)."""

    @staticmethod
    def size_of(i):
        return (30 + i, 45 - i % 20) if i % 2 else (40 + i, 40 + i)

    def load_image(self, record):
        i = int(record.case_id.split("-")[1])
        if record.case_id == self.crash_at:
            raise _Crash(record.case_id)
        if record.image_ref == "missing":
            raise FileNotFoundError(f"{record.case_id}.png")
        return np.random.default_rng(i).integers(0, 256, self.size_of(i), dtype=np.uint8)


def cases(n):
    return [good_case(i, orig_size=None) for i in range(n)]


def test_originals_are_the_reader_pixels_and_the_square_images_do_not_change(tmp_path):
    prepare_dataset(VarReader(cases=cases(13)), tmp_path / "k", workers=1, keep_original=True, **SMALL)
    prepare_dataset(VarReader(cases=cases(13)), tmp_path / "n", workers=1, **SMALL)
    k = read_images(tmp_path / "k" / "images.zarr").datasets["chestx_det10"]
    n = read_images(tmp_path / "n" / "images.zarr").datasets["chestx_det10"]
    assert k.has_originals and not n.has_originals
    np.testing.assert_array_equal(np.asarray(k.image[:]), np.asarray(n.image[:]))
    reader = VarReader(cases=cases(13))
    for row, rec in enumerate(reader.records()):
        np.testing.assert_array_equal(k.original(row), reader.load_image(rec))
        assert tuple(k.orig_size[row]) == VarReader.size_of(row)
    assert validate_images(tmp_path / "k" / "images.zarr") == []
    assert store_sha256(tmp_path / "k" / "gt.zarr") == store_sha256(tmp_path / "n" / "gt.zarr")


def test_originals_same_bytes_for_any_worker_count_and_after_a_crash(tmp_path):
    prepare_dataset(VarReader(cases=cases(30)), tmp_path / "a", workers=1, keep_original=True, **SMALL)
    prepare_dataset(VarReader(cases=cases(30)), tmp_path / "b", workers=2, keep_original=True, **SMALL)
    with pytest.raises(_Crash):
        prepare_dataset(VarReader(cases=cases(30), crash_at="case-20"), tmp_path / "c", workers=1,
                        keep_original=True, **SMALL)
    summary = prepare_dataset(VarReader(cases=cases(30)), tmp_path / "c", workers=1, keep_original=True, **SMALL)
    assert summary.n_resumed_blocks == 2
    for other in ("b", "c"):
        assert store_sha256(tmp_path / "a" / "images.zarr") == store_sha256(tmp_path / other / "images.zarr")


def test_a_case_failing_late_is_dropped_with_its_original(tmp_path):
    cs = cases(11)
    cs[4] = good_case(4, orig_size=None, image_ref="missing")
    summary = prepare_dataset(VarReader(cases=cs), tmp_path, workers=1, keep_original=True,
                              max_skip_fraction=1.0, **SMALL)
    assert summary.n_written == 10
    ds = read_images(tmp_path / "images.zarr").datasets["chestx_det10"]
    reader = VarReader(cases=cases(11))
    kept = [r for r in reader.records() if r.case_id != "case-4"]
    assert list(ds.case_id) == [r.case_id for r in kept]
    for row, rec in enumerate(kept):
        np.testing.assert_array_equal(ds.original(row), reader.load_image(rec))
    assert validate_images(tmp_path / "images.zarr") == []


def test_cli_keep_original(tmp_path):
    res = CliRunner().invoke(cli, ["phantom", "--out", str(tmp_path), "--n-cases", "5", "--grid", "16",
                                   "--image-size", "32", "--workers", "1", "--keep-original", "--quiet"])
    assert res.exit_code == 0, res.output
    ds = read_images(tmp_path / "images.zarr").datasets["phantom"]
    assert ds.has_originals and ds.original(4).shape == tuple(ds.orig_size[4])
