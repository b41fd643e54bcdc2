"""REFLACX reader on fixtures in the release's exact formats (gaze_fixtures.py): readings, labels at the certainty
option, ellipses as regions (against a per-pixel brute force), fixations and durations exactly, the gaze arrays
prepared into gt.zarr (maps against a brute-force double loop), and hostile files refused one line each."""
from __future__ import annotations


import numpy as np
import pytest
from gaze_brute import brute_density
from gaze_fixtures import IMAGES, READINGS, write_reflacx

from xbench.extract.datasets import DATASETS, ReaderError, ReaderOptionError
from xbench.extract.datasets._gaze_io import ellipse_mask
from xbench.extract.datasets.prepare import prepare_dataset
from xbench.extract.datasets.rasterise import rasterise_region
from xbench.extract.datasets.reflacx import REFLACXReader
from xbench.schemas.vocabulary import classes_for

D1, D2, D3 = IMAGES


def brute_ellipse(box, size):
    x0, y0, x1, y1 = box
    out = np.zeros(size, bool)
    for r in range(size[0]):
        for c in range(size[1]):
            u, v = c + 0.5, r + 0.5
            out[r, c] = ((u - (x0 + x1) / 2) / ((x1 - x0) / 2)) ** 2 + ((v - (y0 + y1) / 2) / ((y1 - y0) / 2)) ** 2 <= 1
    return out


def test_ellipse_mask_equals_brute_force():
    for box, size in [((5, 30, 30, 58), (60, 80)), ((-10, -4, 12.5, 9.5), (20, 30)), ((0.2, 0.3, 1.1, 0.9), (4, 4)),
                      ((70, 40, 95, 70), (60, 80))]:
        np.testing.assert_array_equal(ellipse_mask(box, size), brute_ellipse(box, size))


def test_registered_with_its_vocabulary():
    assert DATASETS.get("reflacx") is REFLACXReader
    assert REFLACXReader.classes == classes_for("reflacx") and REFLACXReader.splits[0] == "all"


def test_reads_readings_labels_ellipses_and_fixations_exactly(tmp_path):
    write_reflacx(tmp_path)
    reader = REFLACXReader(tmp_path)
    recs = {r.case_id: r for r in reader.records()}
    assert reader.problems == [] and list(recs) == [D1, D2, D3]
    r1 = recs[D1]
    assert r1.orig_size == (60, 80) and str(r1.image_ref).endswith(f"files/p10/p10000032/s50414267/{D1}.jpg")
    on = {k for k, v in r1.labels.items() if v == 1}
    # certainty >= 3: effusion (4, 3), atelectasis (5, discarded reading still labels), pneumothorax; cardiac 2: no
    assert on == {"Pleural effusion", "Atelectasis", "Pneumothorax", "Support devices"}
    assert r1.labels["Cardiomegaly"] == 0 and r1.labels["Fracture"] == 0
    assert r1.labels["Nodule/Mass"] == -1 and r1.labels["Hiatal hernia"] == -1  # phase 1 does not label them
    # the case's effusion region: the union of both readers' ellipses at certainty >= 3 (3 ellipses)
    eff = [s.load() for s in r1.regions["Pleural effusion"]]
    want = [brute_ellipse(b, (60, 80)) for b in [(5, 30, 30, 58), (50, 35, 78, 57), (10, 35, 40, 55)]]
    assert len(eff) == 3 and all((a == b).all() for a, b in zip(eff, want))
    assert "Cardiomegaly" not in r1.regions and "Support devices" not in r1.regions
    r2 = recs[D2]
    assert r2.labels["Nodule/Mass"] == 1 and r2.labels["Fracture"] == 0 and r2.labels["Nodule"] == -1
    assert list(r2.regions) == ["Nodule/Mass"]
    # the readings: the discarded one gives no gaze
    got = {cid: [(nr.reader, nr.fixations.tolist(), nr.sigma) for nr in rs] for cid, rs in reader._readings.items()}
    for cid, rs in got.items():
        want = [(rid, [[x, y, t1 - t0] for t0, t1, x, y, _a, _b in fix],
                 float(np.median([(a + b) / 2 for *_, a, b in fix])))
                for rid, (_ph, did, disc, _lab, fix, _e) in READINGS.items() if did == cid and not disc]
        assert [(a, b) for a, b, _ in rs] == [(a, b) for a, b, _ in want]
        np.testing.assert_allclose([s for *_, s in rs], [s for *_, s in want])
    assert [r for r, *_ in got[D1]] == ["P101R000001", "P101R000003"]


def test_options_certainty_split_phases_sigma(tmp_path):
    write_reflacx(tmp_path)
    strict = {r.case_id: r for r in REFLACXReader(tmp_path, certainty="5").records()}
    assert {k for k, v in strict[D1].labels.items() if v == 1} == {"Atelectasis", "Pneumothorax", "Support devices"}
    loose = {r.case_id: r for r in REFLACXReader(tmp_path, certainty="1").records()}
    assert loose[D1].labels["Cardiomegaly"] == 1 and len(loose[D1].regions["Cardiomegaly"]) == 1
    assert loose[D2].labels["Fracture"] == 1
    assert [r.case_id for r in REFLACXReader(tmp_path, split="test").records()] == [D3]
    assert [r.case_id for r in REFLACXReader(tmp_path, phases="3").records()] == [D2, D3]
    r = REFLACXReader(tmp_path, sigma="7.5")
    r.records()
    assert {nr.sigma for rs in r._readings.values() for nr in rs} == {7.5}
    for bad in ({"certainty": "0"}, {"certainty": "x"}, {"phases": "4"}, {"sigma": "-1"}, {"sigma": "nan"},
                {"sigma": "1e-300"}, {"sigma": "1e-40"}, {"colour": "red"}):  # float32 stores 1e-300 as 0
        with pytest.raises(ReaderOptionError):
            REFLACXReader(tmp_path, **bad)
    with pytest.raises(ReaderError, match="no REFLACX metadata"):
        REFLACXReader(tmp_path / "nothing").records()


def test_prepared_gaze_arrays_are_exactly_the_fixture(tmp_path):
    import zarr

    from xbench.schemas import read_ground_truth, validate_ground_truth, validate_images

    write_reflacx(tmp_path / "raw")
    out, grid = tmp_path / "out", (12, 16)
    prepare_dataset(REFLACXReader(tmp_path / "raw"), out, grid=grid, image_size=32, workers=1, progress=False)
    assert validate_images(out / "images.zarr") == [] and validate_ground_truth(out / "gt.zarr") == []
    g = zarr.open_group(str(out / "gt.zarr" / "reflacx"))
    gt = read_ground_truth(out / "gt.zarr").datasets["reflacx"]
    assert list(gt.case_id) == [D1, D2, D3]
    assert g.attrs["gaze"]["sigma_rule"].startswith("one degree of visual angle")
    classes = list(classes_for("reflacx"))
    readers = [rid for rid, r in READINGS.items() if not r[2]]
    assert list(g["gaze_reader"][...]) == readers
    assert g["gaze_case"][...].tolist() == [list(IMAGES).index(READINGS[r][1]) for r in readers]
    off, fix, sig = g["gaze_offset"][...], g["fixations"][...], g["gaze_sigma"][...]
    maps, labels = g["gaze_map"][...], g["gaze_labels"][...]
    ridx, rmask = g["gaze_region_index"][...], g["gaze_region_mask"][...]
    for k, rid in enumerate(readers):
        phase, did, _disc, lab, fx, ell = READINGS[rid]
        want = np.array([[x, y, t1 - t0] for t0, t1, x, y, _a, _b in fx], np.float32)
        np.testing.assert_array_equal(fix[off[k]:off[k + 1]], want)
        assert sig[k] == np.float32(np.median([(a + b) / 2 for *_, a, b in fx]))
        size = IMAGES[did][2]
        np.testing.assert_allclose(maps[k], brute_density(want, size, grid, sig[k]), rtol=1e-5, atol=1e-8)
        assert abs(maps[k].sum() - 1) < 1e-5
        present = {c for c, v in zip(classes, labels[k]) if v == 1}
        assert present == {REFLACXReader(tmp_path / "raw")._labels[n] for n, v in lab.items()
                           if (v is True) or (not isinstance(v, bool) and v >= 3)}
        drawn = {classes[c]: rmask[q] for q, (r, c) in enumerate(ridx) if r == k}
        for cls in present:
            boxes = [e[:4] for e in ell if e[4] >= 3 and any(REFLACXReader(tmp_path / "raw")._labels[n] == cls
                                                            for n in e[5])]
            if not boxes:
                assert cls not in drawn
                continue
            from xbench.extract.datasets import Mask
            shapes = [Mask(lambda b=b, s=size: brute_ellipse(b, s)) for b in boxes]
            np.testing.assert_array_equal(drawn[cls], rasterise_region(shapes, size, grid).mask)
    # the off-image fixation of the first reading is kept (x = -4) and lies on no map
    assert fix[3, 0] == -4


@pytest.mark.parametrize("edit,expect", [
    (lambda rs: rs["P300R000004"][4].__setitem__(1, (0.5, 0.62, float("nan"), 22, 27, 25)), "not a finite number"),
    (lambda rs: rs["P300R000004"][4].__setitem__(1, (0.62, 0.5, 31, 22, 27, 25)), "not after its start"),
    (lambda rs: rs["P300R000004"][4].__setitem__(1, (0.5, 0.62, 31, 22, 0, 25)), "angular resolution"),
    # checked as float32, as stored (issue 44, class 1): a duration or a resolution of 1e-300 is 0 there
    (lambda rs: rs["P300R000004"][4].__setitem__(1, (0, 1e-300, 31, 22, 27, 25)), "a duration float32 holds"),
    (lambda rs: rs["P300R000004"][4].__setitem__(1, (-1e300, 1e300, 31, 22, 27, 25)), "a duration float32 holds"),
    (lambda rs: rs["P300R000004"][4].__setitem__(1, (0.5, 0.62, 31, 22, 1e-300, 1e-300)), "(as float32)"),
    (lambda rs: rs["P300R000004"][5].__setitem__(0, (24, 14, 20, 26, 5, ["Lung nodule or mass"])), "empty or inverted"),
    (lambda rs: rs["P300R000004"][5].__setitem__(0, (240, 140, 360, 260, 5, ["Lung nodule or mass"])), "outside"),
])
def test_bad_reading_files_skip_their_case_with_one_problem(tmp_path, edit, expect):
    rs = {k: (v[0], v[1], v[2], dict(v[3]), list(v[4]), list(v[5])) for k, v in READINGS.items()}
    edit(rs)
    write_reflacx(tmp_path, rs)
    reader = REFLACXReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [D1, D3]
    assert len(reader.problems) == 1 and expect in str(reader.problems[0]), reader.problems
    assert D2 not in reader._readings


def test_hostile_ids_paths_and_sizes(tmp_path):
    from xbench.extract.datasets import reflacx

    rs = {k: (v[0], v[1], v[2], dict(v[3]), list(v[4]), list(v[5])) for k, v in READINGS.items()}
    write_reflacx(tmp_path, rs)
    meta = tmp_path / "main_data" / "metadata_phase_3.csv"
    text = meta.read_text()
    meta.write_text(text.replace("P300R000005", "../../../etc"))  # path traversal in a reading id
    reader = REFLACXReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [D1, D2]
    assert "reading id '../../../etc'" in str(reader.problems[0])
    meta.write_text(text.replace(f"s55000001/{D3}.dcm", f"s55000001/../../../{D3}.dcm"))
    reader = REFLACXReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [D1, D2] and "does not end in files/" in str(reader.problems[0])
    meta.write_text(text.replace(",70,50,", ",70,5000000,"))  # an absurd image size
    reader = REFLACXReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [D1, D2] and "image_size_y" in str(reader.problems[0])
    meta.write_text(text.replace("Pulmonary edema", "Pulmonary oedema"))  # an unknown label column
    with pytest.raises(ReaderError, match="unknown label column"):
        REFLACXReader(tmp_path).records()
    meta.write_text(text)
    # a fixations file longer than any reading: refused within its row bound, one problem
    fx = tmp_path / "main_data" / "P300R000005" / "fixations.csv"
    lines = fx.read_bytes().decode().split("\r\n")
    old = reflacx.MAX_FIXATIONS
    reflacx.MAX_FIXATIONS = 50
    try:
        fx.write_text("\r\n".join([lines[0]] + [lines[1]] * 51) + "\r\n")
        reader = REFLACXReader(tmp_path)
        assert [r.case_id for r in reader.records()] == [D1, D2]
        assert "more than 50 rows" in str(reader.problems[0])
    finally:
        reflacx.MAX_FIXATIONS = old
    fx.write_text(lines[0] + "\r\n" + "1" * 200_000 + "\r\n")  # one field past the CSV field limit
    reader = REFLACXReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [D1, D2] and "not a valid CSV row" in str(reader.problems[0])


def test_cli_refuses_a_hostile_gaze_file_with_exit_2_one_line(tmp_path):
    from click.testing import CliRunner

    from xbench.extract.prepare_cli import main

    write_reflacx(tmp_path / "raw")
    fx = tmp_path / "raw" / "main_data" / "P300R000004" / "fixations.csv"
    fx.write_text(fx.read_text().replace("0.45,30,20", "-0.45,30,20"))  # a negative duration
    res = CliRunner().invoke(main, ["reflacx", "--root", str(tmp_path / "raw"), "--out", str(tmp_path / "out"),
                                    "--workers", "1", "--quiet", "--grid", "8", "--image-size", "16"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if "P300R000004" in ln]
    assert len(lines) == 1 and "not after its start" in lines[0], res.output
    assert "Traceback" not in res.output and not (tmp_path / "out" / "gt.zarr" / "reflacx").exists()


def test_cli_sigma_checked_as_float32_exit_2_one_line(tmp_path):
    """Issue 44, class 1: --option sigma=1e-300 passed a float64 check, was 0 in float32: unexpected ValueError."""
    from click.testing import CliRunner

    from xbench.extract.prepare_cli import main

    write_reflacx(tmp_path / "raw")
    res = CliRunner().invoke(main, ["reflacx", "--root", str(tmp_path / "raw"), "--out", str(tmp_path / "out"),
                                    "--workers", "1", "--quiet", "--grid", "8", "--image-size", "16",
                                    "--option", "sigma=1e-300"])
    assert res.exit_code == 2 and "Traceback" not in res.output and "unexpected" not in res.output, res.output
    assert len([ln for ln in res.output.splitlines() if "error" in ln and "a normal float32" in ln]) == 1, res.output
    assert not (tmp_path / "out").exists() or not (tmp_path / "out" / "gt.zarr" / "reflacx").exists()


def test_too_many_readings_of_one_image_skip_it(tmp_path, monkeypatch):
    """Issue 44, class 4: each reading's gaze map is built and compared with the others'; an image read more than
    MAX_READINGS_PER_CASE times is skipped with one problem before any map is built."""
    import xbench.schemas.gaze as GZ

    write_reflacx(tmp_path)
    monkeypatch.setattr(GZ, "MAX_READINGS_PER_CASE", 2)  # D1 is read three times in phase 1
    reader = REFLACXReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [D2, D3]
    assert len(reader.problems) == 1 and "3 readings of one image; at most 2" in str(reader.problems[0])
    assert D1 not in reader._readings
