"""Case attributes in gt.zarr (schemas/attributes.py): written and read back exactly; forged values refused one
line each, before writing and by the validator; a store without them unchanged."""
from __future__ import annotations

import numpy as np
import pytest
import zarr

from xbench.schemas import validate_ground_truth, write_ground_truth
from xbench.schemas.attributes import Attribute, category, number, read_attributes
from xbench.schemas.errors import InvalidStoreError

N = 4


def write(path, attributes):
    labels = np.zeros((N, 2), np.int8)
    write_ground_truth(path, "phantom", case_ids=[f"c{i}" for i in range(N)], classes=["A", "B"], labels=labels,
                       region_index=np.zeros((0, 2), np.int32), region_mask=np.zeros((0, 8, 8), bool),
                       orig_size=np.full((N, 2), 64, np.int32), grid=(8, 8), attributes=attributes)
    return path


def test_round_trip(tmp_path):
    attrs = {"sex": category(["F", "M", None, "F"], "PatientSex"), "age": number([57, 0.5, None, 130], "PatientAge"),
             "view": category(["PA", "AP", "LL", ""], "ViewPosition")}
    gt = write(tmp_path / "gt.zarr", attrs)
    assert validate_ground_truth(gt) == []
    got = read_attributes(zarr.open_group(str(gt / "phantom")))
    assert list(got["sex"].values) == ["F", "M", "", "F"] and got["sex"].source == "PatientSex"
    np.testing.assert_array_equal(got["age"].values, np.array([57, 0.5, np.nan, 130], np.float32))
    assert zarr.open_group(str(gt)).attrs["xbench"]["schema_minor"] >= 6


@pytest.mark.parametrize("attrs,expect", [
    ({"sex": category(["F", "M"])}, "has shape (2,), expected (4,)"),
    ({"age": number([30, 200, 40, 50])}, "ages must lie in 0..130 years"),
    ({"age": number([30, -1, 40, 50])}, "ages must lie in 0..130 years"),
    ({"Sex": category(["F"] * 4)}, "is not [a-z][a-z0-9_]{0,31}"),
    ({"site": category(["x" * 65] * 4)}, "longer than 64 characters"),
    ({"site": category(["a\nb"] * 4)}, "control characters"),
    ({"sex": Attribute(np.array(["F"] * 4), "colour")}, "is not category or number"),
    ({f"f{i}": category(["a"] * 4) for i in range(33)}, "the limit is 32"),
    ({"age": category(["-3", "500", "40", ""])}, "its kind must be number, not category"),
    ({"sex": number([1, 2, 1, 2])}, "its kind must be category, not number"),
    ({"view": number([1, 2, 1, 2])}, "its kind must be category, not number"),
    ({"sex": category(["F", "M", "X", ""])}, "sex is coded F, M or O"),
    ({"view": category(["PA", "ap", "", "LL"])}, "views are upper-cased"),
])
def test_forged_attributes_are_refused_before_writing(tmp_path, attrs, expect):
    with pytest.raises(InvalidStoreError) as exc:
        write(tmp_path / "gt.zarr", attrs)
    lines = [str(p) for p in exc.value.problems]
    assert len(lines) == 1 and expect in lines[0], lines
    assert not (tmp_path / "gt.zarr" / "phantom").exists()


def test_validator_refuses_forged_stores(tmp_path):
    gt = write(tmp_path / "gt.zarr", {"sex": category(["F", "M", "F", "M"])})
    sub = zarr.open_group(str(gt / "phantom" / "attributes"), mode="r+")
    sub.create_array("age", data=np.array([1, 2, 3, 500], np.float32))
    problems = [str(p) for p in validate_ground_truth(gt)]
    assert any("is not listed in the group's 'fields'" in p for p in problems), problems
    sub.attrs["fields"] = {"sex": {"kind": "category"}, "age": {"kind": "number"}}
    problems = [str(p) for p in validate_ground_truth(gt)]
    assert len(problems) == 1 and "ages must lie in 0..130" in problems[0], problems
    del sub["sex"]
    sub.create_array("sex", data=np.array(list("FMFMF")))  # 5 values for 4 cases, categories of 1000+? no: shape
    problems = [str(p) for p in validate_ground_truth(gt)]
    assert any("has shape (5,), expected (4,)" in p for p in problems), problems
    root = zarr.open_group(str(gt), mode="r+")
    root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": 2}
    assert any("need schema_minor >= 6" in str(p) for p in validate_ground_truth(gt))


def test_too_many_categories(tmp_path):
    n = 1001
    with pytest.raises(InvalidStoreError) as exc:
        write_ground_truth(tmp_path / "gt.zarr", "phantom", case_ids=[f"c{i}" for i in range(n)], classes=["A"],
                           labels=np.zeros((n, 1), np.int8), region_index=np.zeros((0, 2), np.int32),
                           region_mask=np.zeros((0, 4, 4), bool), orig_size=np.full((n, 2), 8, np.int32), grid=(4, 4),
                           attributes={"site": category([f"s{i}" for i in range(n)])})
    assert "at most 1,000" in str(exc.value.problems[0])


def test_without_attributes_nothing_is_written(tmp_path):
    gt = write(tmp_path / "gt.zarr", None)
    assert "attributes" not in zarr.open_group(str(gt / "phantom"))
    assert read_attributes(zarr.open_group(str(gt / "phantom"))) == {}


def test_an_attribute_array_is_checked_from_metadata_before_it_is_read(tmp_path):
    """As every array a stranger's store holds (issue 44): its chunk count (and codecs, chunk size, declared bytes
    against stored bytes) from metadata alone, before it is read."""
    from xbench.schemas.budget import limits, set_limits

    gt = write(tmp_path / "gt.zarr", {"site": category(["a", "b", "a", "b"])})
    sub = zarr.open_group(str(gt / "phantom" / "attributes"), mode="r+")
    del sub["site"]
    sub.create_array("site", shape=(N,), dtype=str, chunks=(1,), dimension_names=("case",))[:] = ["a", "b", "a", "b"]
    assert validate_ground_truth(gt) == []
    old = limits()
    set_limits(max_chunks=2)
    try:
        problems = [str(p) for p in validate_ground_truth(gt)]
    finally:
        set_limits(old)
    assert len(problems) == 1 and "attributes/site" in problems[0] and "declares 4 chunks" in problems[0], problems
