"""Gaze in gt.zarr (schemas/gaze.py): the density map against a brute force, the arrays written and read back by
the scorer, hostile arrays refused one line each by the validator, and the phantom's opt-in simulated gaze."""
from __future__ import annotations


import numpy as np
import pytest
import zarr

from gaze_brute import brute_density
from xbench.schemas import validate_ground_truth, write_ground_truth
from xbench.schemas.errors import InvalidStoreError
from xbench.schemas.gaze import GT_MINOR, Gaze, Reading, default_sigma, density_map

GRID = (12, 10)
ORIG = np.array([[300, 200], [120, 160], [64, 64]], np.int32)


def test_density_map_equals_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(20):
        h, w = (int(v) for v in rng.integers(20, 300, 2))
        n = int(rng.integers(0, 30))
        fix = np.column_stack([rng.uniform(-20, w + 20, n), rng.uniform(-20, h + 20, n), rng.uniform(0.05, 1, n)])
        if n:
            fix[0, :2] = [0.0, h - 1e-3]  # on the border: inside
        grid = tuple(int(v) for v in rng.integers(2, 25, 2))
        sigma = float(rng.uniform(2, 60))
        np.testing.assert_allclose(density_map(fix, (h, w), grid, sigma), brute_density(fix, (h, w), grid, sigma),
                                   rtol=1e-10, atol=1e-15)


def test_density_map_edges():
    assert not density_map(np.array([[-1.0, 5, 1], [10, 200, 1]]), (100, 100), (4, 4), 5).any()  # none inside
    assert not density_map(np.zeros((0, 3)), (100, 100), (4, 4), 5).any()
    one = density_map(np.array([[50.0, 50.0, 0.3]]), (100, 100), (4, 4), 10)
    assert one.sum() == pytest.approx(1.0) and one.argmax() in (5, 6, 9, 10)
    with pytest.raises(ValueError):
        density_map(np.array([[1.0, 1, 1]]), (10, 10), (2, 2), 0)
    assert default_sigma((2000, 2500)) == pytest.approx(75.0)


def readings():
    rng = np.random.default_rng(1)
    out = []
    for case, reader in ((0, "R1"), (0, "R2"), (1, "R1"), (2, "R3")):
        h, w = ORIG[case]
        fix = np.column_stack([rng.uniform(0, w, 5), rng.uniform(0, h, 5), rng.uniform(0.1, 0.5, 5)])
        region = np.zeros(GRID, bool)
        region[2:5, 3:6] = True
        out.append(Reading(case, reader, fix, np.array([1, 0, -1], np.int8), default_sigma((h, w)), {0: region}))
    return out


def write(tmp_path, gaze):
    gt = tmp_path / "gt.zarr"
    labels = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0]], np.int8)
    masks = np.zeros((2, *GRID), bool)
    masks[:, 1:3, 1:3] = True
    write_ground_truth(gt, "phantom", case_ids=["a", "b", "c"], classes=["A", "B", "C"], labels=labels,
                       region_index=np.array([[0, 0], [1, 1]], np.int32), region_mask=masks, orig_size=ORIG,
                       grid=GRID, gaze=gaze)
    return gt


def test_written_arrays_are_what_the_scorer_reads(tmp_path):
    from xbench.schemas import read_ground_truth
    from xbench.score.sections.gaze import read_gaze

    rs = readings()
    gaze = Gaze.from_readings(rs, ORIG, GRID, 3)
    gt = write(tmp_path, gaze)
    assert validate_ground_truth(gt) == []
    assert zarr.open_group(str(gt)).attrs["xbench"]["schema_minor"] >= GT_MINOR
    got = read_gaze(read_ground_truth(gt), "phantom")
    assert got is not None
    np.testing.assert_array_equal(np.asarray(got.gaze_map[...]), gaze.gaze_map)
    for k, r in enumerate(rs):
        np.testing.assert_allclose(gaze.gaze_map[k], brute_density(r.fixations.astype(np.float32), ORIG[r.case], GRID, np.float32(r.sigma)), rtol=1e-5, atol=1e-9)
        f = gaze.fixations[gaze.offset[k]:gaze.offset[k + 1]]
        np.testing.assert_allclose(f, r.fixations.astype(np.float32))


def test_without_gaze_the_store_is_unchanged(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write(a, None)
    gt = write(b, Gaze.from_readings(readings(), ORIG, GRID, 3))
    assert not any(k.startswith("gaze") or k == "fixations" for k in zarr.open_group(str(a / "gt.zarr/phantom")).array_keys())
    assert "gaze_map" in zarr.open_group(str(gt / "phantom")).array_keys()


@pytest.mark.parametrize("forge,expect", [
    (lambda g: g.offset.__setitem__(-1, 999), "gaze_offset: must start at 0"),
    (lambda g: g.fixations.__setitem__((0, 0), np.nan), "fixations: holds non-finite"),
    (lambda g: g.fixations.__setitem__((1, 2), -0.2), "durations (column 3) must be positive"),
    (lambda g: g.case.__setitem__(0, 7), "gaze_case: case rows must lie in 0..2"),
    (lambda g: g.labels.__setitem__((0, 0), 3), "gaze_labels: values other than -1, 0, 1"),
    (lambda g: g.sigma.__setitem__(0, 0.0), "gaze_sigma: must be positive"),
    # float32 subnormals: positive, but not values a sigma or a duration is checked as (issue 44, class 1)
    (lambda g: g.sigma.__setitem__(0, np.float32(1e-40)), "gaze_sigma: must be positive"),
    (lambda g: g.fixations.__setitem__((1, 2), np.float32(1e-40)), "durations (column 3) must be positive"),
    (lambda g: g.gaze_map.__setitem__((0, 0, 0), np.inf), "gaze_map: must hold finite non-negative"),
    (lambda g: g.region_index.__setitem__((0, 1), 9), "gaze_region_index: (reading, class) must lie"),
])
def test_check_refuses_forged_arrays_before_writing(tmp_path, forge, expect):
    gaze = Gaze.from_readings(readings(), ORIG, GRID, 3)
    forge(gaze)
    with pytest.raises(InvalidStoreError) as exc:
        write(tmp_path, gaze)
    lines = [str(p) for p in exc.value.problems]
    assert len(lines) == 1 and expect in lines[0], lines
    assert not (tmp_path / "gt.zarr" / "phantom").exists()


def test_reader_names_are_checked(tmp_path):
    gaze = Gaze.from_readings(readings(), ORIG, GRID, 3)
    gaze.reader = np.asarray(["R1", "../evil", "R1", "R3"])
    with pytest.raises(InvalidStoreError) as exc:
        write(tmp_path, gaze)
    assert "'../evil'" in str(exc.value.problems[0])


def test_validator_refuses_hostile_stores_one_line_each(tmp_path):
    gt = write(tmp_path, Gaze.from_readings(readings(), ORIG, GRID, 3))
    g = zarr.open_group(str(gt / "phantom"), mode="r+")
    # a declared size past the bounds is refused from metadata alone (nothing is read)
    del g["fixations"]
    g.create_array("fixations", shape=(60_000_000, 3), dtype="float32", chunks=(1_000_000, 3))
    problems = [str(p) for p in validate_ground_truth(gt)]
    assert len(problems) >= 1 and any("60,000,000 fixations; the limit" in p for p in problems), problems
    del g["fixations"]
    g.create_array("fixations", data=np.ones((20, 3), np.float32))
    del g["gaze_map"]  # all or none
    problems = [str(p) for p in validate_ground_truth(gt)]
    assert problems == [f"{gt}/phantom: gaze arrays are all or none; missing gaze_map"] or \
        any("missing gaze_map" in p for p in problems)
    # an old store that holds gaze without declaring the minor
    root = zarr.open_group(str(gt), mode="r+")
    root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": 4}
    problems = [str(p) for p in validate_ground_truth(gt)]
    assert any("need >= 5" in p for p in problems), problems


def test_phantom_gaze_is_opt_in_and_deterministic(tmp_path):
    from xbench.extract.datasets.phantom import PhantomReader

    plain = PhantomReader(None, "test", n_cases=6)
    assert plain.gaze_readings(plain.records(), (16, 16)) is None and "gaze" not in plain.describe()
    r = PhantomReader(None, "test", n_cases=6, gaze="true")
    a, b = r.gaze_readings(r.records(), (16, 16)), r.gaze_readings(r.records(), (16, 16))
    assert r.describe()["gaze"] is True
    np.testing.assert_array_equal(a.fixations, b.fixations)
    # R1 reads all six; R2 and R3 the cases 0 and 3
    assert list(a.reader) == ["R1", "R2", "R3", "R1", "R1", "R1", "R2", "R3", "R1", "R1"]
    assert list(a.case) == [0, 0, 0, 1, 2, 3, 3, 3, 4, 5]
    assert np.allclose(a.gaze_map.reshape(len(a.case), -1).sum(1), 1, atol=1e-5)
    assert check_ok(a, 6)


def check_ok(gaze, n):
    from xbench.schemas.gaze import check

    return check(gaze, n, 5, (16, 16), "x") == []


def test_gaze_attribute_states_the_sigma_rule_and_is_checked(tmp_path):
    gaze = Gaze.from_readings(readings(), ORIG, GRID, 3)
    gaze.sigma_rule = "one degree of visual angle"
    gt = write(tmp_path, gaze)
    g = zarr.open_group(str(gt / "phantom"), mode="r+")
    assert g.attrs["gaze"] == {"sigma_rule": "one degree of visual angle", "version": 1}
    assert validate_ground_truth(gt) == []
    del g.attrs["gaze"]  # a store written before the attribute: still valid
    assert validate_ground_truth(gt) == []
    for bad in ({"sigma_rule": 3, "version": 1}, {"sigma_rule": "x" * 1001, "version": 1}, {"version": 2, "sigma_rule": ""},
                "text", {"sigma_rule": "", "version": True}):
        g.attrs["gaze"] = bad
        problems = [str(p) for p in validate_ground_truth(gt)]
        assert len(problems) == 1 and "attrs['gaze']" in problems[0], (bad, problems)


def test_a_gaze_map_bomb_is_refused_from_metadata(tmp_path):
    """Issue 44: a 4 GB gaze_map stored in ~100 KB (every chunk the same few bytes of zstd zeros) is refused from
    its metadata and the store's listing with one line, exit 2, before a chunk is decoded; under 1 GiB."""
    import shutil
    import subprocess
    import sys

    grid, r = (224, 224), 20_000  # 20,000 readings of 224 x 224 float32: 4.0 GB declared
    gt = tmp_path / "gt.zarr"
    masks = np.zeros((2, *grid), bool)
    masks[:, 1:3, 1:3] = True
    write_ground_truth(gt, "phantom", case_ids=["a", "b", "c"], classes=["A", "B", "C"],
                       labels=np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0]], np.int8),
                       region_index=np.array([[0, 0], [1, 1]], np.int32), region_mask=masks, orig_size=ORIG, grid=grid,
                       gaze=Gaze.from_readings([Reading(x.case, x.reader, x.fixations, x.labels, x.sigma)
                                                for x in readings()], ORIG, grid, 3))
    g = zarr.open_group(str(gt / "phantom"), mode="r+")
    for name in ("gaze_case", "gaze_reader", "gaze_offset", "fixations", "gaze_sigma", "gaze_map", "gaze_labels"):
        del g[name]
    g.create_array("gaze_case", data=np.zeros(r, np.int32))
    g.create_array("gaze_reader", shape=(r,), dtype=str)[:] = np.full(r, "R1")
    g.create_array("gaze_offset", data=np.zeros(r + 1, np.int64))
    g.create_array("fixations", data=np.zeros((0, 3), np.float32))
    g.create_array("gaze_sigma", data=np.ones(r, np.float32))
    g.create_array("gaze_labels", data=np.zeros((r, 3), np.int8))
    gm = g.create_array("gaze_map", shape=(r, *grid), dtype="float32", chunks=(32, *grid),
                        config={"write_empty_chunks": True})
    gm[:32] = 0.0  # one real chunk of zeros, then copied to every other chunk's key
    first = gt / "phantom" / "gaze_map" / "c" / "0" / "0" / "0"
    for k in range(1, -(-r // 32)):
        (first.parent.parent.parent / str(k) / "0").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(first, first.parent.parent.parent / str(k) / "0" / "0")
    stored = sum(f.stat().st_size for f in (gt / "phantom" / "gaze_map").rglob("*") if f.is_file())
    assert stored < 2**20 and r * grid[0] * grid[1] * 4 > 4 * 10**9
    code = "import sys; from xbench.schemas.cli import validate_main; sys.argv[0] = 'xbench-validate'; validate_main()"
    res = subprocess.run([sys.executable, "-c", code, str(gt), "--max-memory", "1GiB", "--timeout", "60"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and "gaze_map" in lines[0] and "decompression bomb" in lines[0], res.stderr


def test_readings_of_one_case_are_bounded(tmp_path):
    """Issue 44, class 4: the readers' leave-one-out ceiling compares each reading of a case with the others (work
    that grows with the square of their number): more than MAX_READINGS_PER_CASE readings of a case are refused,
    one line, before writing and by the validator."""
    from xbench.schemas.gaze import MAX_READINGS_PER_CASE

    rs = readings()
    many = [Reading(0, f"R{k}", rs[0].fixations, rs[0].labels, rs[0].sigma) for k in range(MAX_READINGS_PER_CASE + 1)]
    with pytest.raises(InvalidStoreError) as exc:
        write(tmp_path, Gaze.from_readings(many, ORIG, GRID, 3))
    lines = [str(p) for p in exc.value.problems]
    assert len(lines) == 1 and f"case row 0 has {MAX_READINGS_PER_CASE + 1} readings; at most" in lines[0], lines
    at_bound = [*many[:-1], Reading(1, "R1", rs[0].fixations, rs[0].labels, rs[0].sigma)]
    gt = write(tmp_path, Gaze.from_readings(at_bound, ORIG, GRID, 3))  # 64 readings of case 0: written and valid
    assert validate_ground_truth(gt) == []
    g = zarr.open_group(str(gt / "phantom"), mode="r+")
    case = g["gaze_case"][...]
    case[-1] = 0  # the last reading (case 1's) moved onto case 0
    g["gaze_case"][...] = case
    problems = [str(p) for p in validate_ground_truth(gt)]
    assert len(problems) == 1 and "readings; at most" in problems[0], problems
