"""Properties every reader must have, run over all seven readers on their fixtures, plus the path
through the shared pipeline (prepare_dataset) so that what the readers emit is what it accepts."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from fixtures import (write_chexlocalize, write_covid, write_det10, write_nih, write_rsna, write_siim,
                      write_vindr)

from xbench.extract.datasets import DATASETS, Box, DatasetReader, Mask, Polygon
from xbench.extract.datasets._io import check_box, check_points, edge_tolerance, read_json
from xbench.schemas.vocabulary import classes_for

WRITERS = {
    "rsna_pneumonia": write_rsna,
    "siim_acr": write_siim,
    "covid_rural": write_covid,
    "chestx_det10": write_det10,
    "chexlocalize": write_chexlocalize,
    "chestxray14": write_nih,
    "vindr_cxr": write_vindr,
}
#: the split each fixture writes, where it is not the reader's default
FIXTURE_SPLITS = {"chexlocalize": "val"}


@pytest.fixture(scope="module", params=sorted(WRITERS))
def dataset(request, tmp_path_factory):
    key = request.param
    root = tmp_path_factory.mktemp(key)
    WRITERS[key](root)
    reader = DATASETS.get(key)(root, FIXTURE_SPLITS.get(key))
    return key, root, reader, reader.records()


def test_reader_contract(dataset):
    key, _root, reader, records = dataset
    assert isinstance(reader, DatasetReader) and reader.key == key
    assert reader.classes == classes_for(key)
    assert reader.problems == [] and len(records) >= 2
    grounding = set(reader.grounding_classes or reader.classes)
    ids = [r.case_id for r in records]
    assert len(set(ids)) == len(ids) and all(isinstance(i, str) and i for i in ids)
    for r in records:
        assert set(r.labels) == set(reader.classes), r.case_id  # every class named explicitly
        assert set(r.labels.values()) <= {-1, 0, 1}
        for cls, shapes in r.regions.items():
            assert cls in grounding and r.labels[cls] == 1 and shapes
            assert all(isinstance(s, (Box, Polygon, Mask)) for s in shapes)
        assert r.source
    assert any(r.regions for r in records)


def test_images_match_orig_size(dataset):
    _key, _root, reader, records = dataset
    for r in records:
        img = reader.load_image(r)
        assert img.dtype == np.uint8 and img.ndim == 2
        if r.orig_size is not None:
            assert img.shape == tuple(r.orig_size)
        for shapes in r.regions.values():
            for s in shapes:
                if isinstance(s, Mask):
                    m = s.load()
                    assert m.dtype == bool and m.shape == img.shape and m.any()


def test_records_pickle(dataset):
    # Workers may be spawned rather than forked; records (and their mask loaders) must travel.
    _key, _root, _reader, records = dataset
    back = pickle.loads(pickle.dumps(records))
    for a, b in zip(records, back):
        for cls in a.regions:
            for sa, sb in zip(a.regions[cls], b.regions[cls]):
                if isinstance(sa, Mask):
                    np.testing.assert_array_equal(sa.load(), sb.load())


def test_through_the_pipeline(dataset, tmp_path):
    from xbench.extract.datasets.prepare import prepare_dataset
    from xbench.schemas import read_ground_truth

    key, root, _reader, records = dataset
    reader = DATASETS.get(key)(root, FIXTURE_SPLITS.get(key))  # a fresh reader: prepare calls records() itself
    summary = prepare_dataset(reader, tmp_path, grid=(16, 16), image_size=32, workers=1, progress=False)
    gt = read_ground_truth(tmp_path / "gt.zarr").datasets[key]
    assert list(gt.case_id) == [r.case_id for r in records], summary
    n_regions = sum(len(r.regions) for r in records)
    assert gt.region_index.shape[0] == n_regions
    expected = np.array([[r.labels[c] for c in gt.classes] for r in records], dtype=np.int8)
    np.testing.assert_array_equal(np.asarray(gt.labels), expected)
    masks = np.asarray(gt.region_mask[:])
    assert masks.shape == (n_regions, 16, 16) and masks.reshape(n_regions, -1).any(axis=1).all()


def test_edge_tolerance():
    assert edge_tolerance(64) == 1.0 and edge_tolerance(1024) == pytest.approx(10.24)
    assert check_box(Box(-1, 0, 65, 48), 48, 64) == Box(-1, 0, 65, 48)  # border slop kept as is
    with pytest.raises(ValueError, match="outside the 64x48 image"):
        check_box(Box(0, 0, 65.5, 10), 48, 64)
    with pytest.raises(ValueError, match="empty or inverted"):
        check_box(Box(5, 5, 5, 9), 48, 64)
    with pytest.raises(ValueError, match="non-finite"):
        check_box(Box(float("nan"), 5, 6, 9), None, None)
    assert check_points([[0, 0], [80.5, 0], [40, 60]], 60, 80) == ((0.0, 0.0), (80.5, 0.0), (40.0, 60.0))
    with pytest.raises(ValueError, match="not numeric"):
        check_points([[0, 0], ["a", 0], [4, 6]], 60, 80)


def test_read_json_names_the_file_and_what_was_expected(tmp_path):
    from xbench.extract.datasets.base import ReaderError

    good = tmp_path / "a.json"
    good.write_text('[{"file_name": "x.png"}]', encoding="utf-8")
    assert read_json(good, list, "a list") == [{"file_name": "x.png"}]
    with pytest.raises(ReaderError, match=r"a\.json: expected an object keyed by cxr_id"):
        read_json(good, dict, "an object keyed by cxr_id")
    broken = tmp_path / "b.json"
    broken.write_text('{"cut": ', encoding="utf-8")
    with pytest.raises(ReaderError, match=r"b\.json: is not valid JSON"):
        read_json(broken, dict, "an object")
    latin = tmp_path / "c.json"
    latin.write_bytes(b'["\xe9"]')
    with pytest.raises(ReaderError, match=r"c\.json: is not UTF-8"):
        read_json(latin, list, "a list")
