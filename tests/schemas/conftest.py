import pytest

from schema_stores import make_gt, write_submission


@pytest.fixture
def gt_path(tmp_path):
    return make_gt(tmp_path)


@pytest.fixture
def sub_path(tmp_path):
    return write_submission(tmp_path / "sub.zarr")
