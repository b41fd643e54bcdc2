"""EGD-CXR reader on fixtures in the release's exact formats (gaze_fixtures.py): the master sheet's CheXpert labels,
the fixations exactly (valid flag, repeated fixation ids, calibration images, off-image fixations), the gaze arrays
prepared into gt.zarr (maps against a brute force, the default sigma), and hostile files refused one line each."""
from __future__ import annotations

import numpy as np
import pytest
from gaze_fixtures import EGD_FIXATIONS, EGD_IMAGES, write_egd
from gaze_brute import brute_density

from xbench.extract.datasets import DATASETS, ReaderError, ReaderOptionError
from xbench.extract.datasets.egd_cxr import EGDCXRReader
from xbench.extract.datasets.prepare import prepare_dataset
from xbench.schemas.vocabulary import classes_for

E1, E2 = EGD_IMAGES
WANT = {E1: [(40, 30, 0.24), (11, 21, 0.31), (-1, -1, 0.40)], E2: [(30, 36, 0.22), (50, 10, 0.18)]}


def test_reads_labels_and_fixations_exactly(tmp_path):
    write_egd(tmp_path)
    assert DATASETS.get("egd_cxr") is EGDCXRReader and EGDCXRReader.classes == classes_for("egd_cxr")
    reader = EGDCXRReader(tmp_path)
    recs = {r.case_id: r for r in reader.records()}
    assert reader.problems == [] and list(recs) == [E1, E2]
    r1 = recs[E1]
    assert r1.labels["Cardiomegaly"] == 1 and r1.labels["Edema"] == -1 and r1.labels["Pleural effusion"] == 0
    assert r1.labels["Pneumonia"] == -1 and r1.regions == {} and r1.orig_size is None
    assert recs[E2].labels["Pneumonia"] == 1
    assert str(r1.image_ref).endswith(f"files/p10/p10039272/s50384423/{E1}.jpg")
    for cid, want in WANT.items():
        np.testing.assert_array_equal(reader._fixations[cid], np.asarray(want, float))


def test_prepared_gaze_arrays(tmp_path):
    import zarr

    from xbench.schemas import validate_ground_truth
    from xbench.schemas.gaze import default_sigma

    write_egd(tmp_path / "raw")
    out, grid = tmp_path / "out", (10, 12)
    prepare_dataset(EGDCXRReader(tmp_path / "raw"), out, grid=grid, image_size=32, workers=1, progress=False)
    assert validate_ground_truth(out / "gt.zarr") == []
    g = zarr.open_group(str(out / "gt.zarr" / "egd_cxr"))
    assert list(g["gaze_reader"][...]) == ["R1", "R1"] and g["gaze_case"][...].tolist() == [0, 1]
    assert "gaze_region_index" not in g and "3% of the image" in g.attrs["gaze"]["sigma_rule"]
    off, fix = g["gaze_offset"][...], g["fixations"][...]
    classes = list(classes_for("egd_cxr"))
    for k, cid in enumerate([E1, E2]):
        want = np.asarray(WANT[cid], np.float32)
        np.testing.assert_array_equal(fix[off[k]:off[k + 1]], want)
        size = EGD_IMAGES[cid][2]
        assert g["gaze_sigma"][k] == np.float32(default_sigma(size))
        np.testing.assert_allclose(g["gaze_map"][k], brute_density(want, size, grid, g["gaze_sigma"][k]),
                                   rtol=1e-5, atol=1e-8)
        assert g["gaze_labels"][k].tolist() == g["labels"][k].tolist()
    assert g["gaze_labels"][0][classes.index("Cardiomegaly")] == 1


def test_sigma_option(tmp_path):
    write_egd(tmp_path)
    r = EGDCXRReader(tmp_path, sigma="12")
    recs = r.records()
    import dataclasses

    gaze = r.gaze_readings([dataclasses.replace(x, orig_size=EGD_IMAGES[x.case_id][2]) for x in recs], (8, 8))
    assert gaze.sigma.tolist() == [12.0, 12.0] and "12 original pixels" in gaze.sigma_rule
    for bad in ("0", "inf", "x", "1e-300", "1e-40"):  # 1e-300 and 1e-40 pass "> 0" in float64; float32 stores 0
        with pytest.raises(ReaderOptionError):
            EGDCXRReader(tmp_path, sigma=bad)
    with pytest.raises(ReaderError, match="no EGD-CXR master_sheet.csv"):
        EGDCXRReader(tmp_path / "nothing").records()


@pytest.mark.parametrize("row,expect", [
    ((E1, -0.2, 30, 1, 5, 5), "negative duration"),
    ((E1, 0.2, 30, 1, "nan", 5), "not a finite number"),
    ((E1, 0.2, 30, 1, 5, 1e9), "lies on no image"),
    ((E1, "", 30, 1, 5, 5), "could not convert"),
    ((E1, 1e-300, 30, 1, 5, 5), "not a duration float32 holds"),  # float32 would store 0 (issue 44, class 1)
    ((E1, 1e300, 30, 1, 5, 5), "not a duration float32 holds"),  # float32 would store inf
])
def test_hostile_fixation_rows_skip_their_case(tmp_path, row, expect):
    write_egd(tmp_path, fixations=[*EGD_FIXATIONS, row])
    reader = EGDCXRReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [E2]
    assert len(reader.problems) == 1 and expect in str(reader.problems[0]) and E1 in str(reader.problems[0])


def test_hostile_sheet_rows_and_bounds(tmp_path, monkeypatch):
    images = dict(EGD_IMAGES)
    images["../../etc/passwd"] = ("10000001", "50000001", (8, 8), {})
    write_egd(tmp_path, images=images, jpgs=False)
    write_egd(tmp_path / "x", jpgs=True)  # the real images for the two good cases
    for did in EGD_IMAGES:
        subject, study, *_ = EGD_IMAGES[did]
        rel = f"files/p{subject[:2]}/p{subject}/s{study}/{did}.jpg"
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((tmp_path / "x" / rel).read_bytes())
    reader = EGDCXRReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [E1, E2]
    assert len(reader.problems) == 1 and "is not a MIMIC-CXR dicom_id" in str(reader.problems[0])
    sheet = tmp_path / "master_sheet.csv"
    sheet.write_bytes(sheet.read_bytes().replace(b",1.0,", b",yes,", 1))
    reader = EGDCXRReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [E2]
    assert sorted(str(p).split(": ", 1)[1][:16] for p in reader.problems) == ["cardiomegaly__ch", "dicom_id '../../"]
    import xbench.schemas.gaze as GZ

    write_egd(tmp_path)
    monkeypatch.setattr(GZ, "MAX_FIXATIONS_PER_READING", 2)
    reader = EGDCXRReader(tmp_path)
    assert [r.case_id for r in reader.records()] == [E2]
    assert "more than 2 fixations on one image" in str(reader.problems[0])


def test_cli_exit_2_one_line(tmp_path):
    from click.testing import CliRunner

    from xbench.extract.prepare_cli import main

    write_egd(tmp_path / "raw", fixations=[*EGD_FIXATIONS, (E2, 0.3, 99, 1, "inf", 3)])
    res = CliRunner().invoke(main, ["egd_cxr", "--root", str(tmp_path / "raw"), "--out", str(tmp_path / "out"),
                                    "--workers", "1", "--quiet", "--grid", "8", "--image-size", "16"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert len([ln for ln in res.output.splitlines() if "fixations.csv:11: not a finite number" in ln]) == 1, res.output
    assert not (tmp_path / "out" / "gt.zarr" / "egd_cxr").exists()


@pytest.mark.parametrize("args, row, text", [
    (["--option", "sigma=1e-300"], None, "sigma must lie in (0, 10000] pixels (a normal float32"),
    ([], (E2, 1e-300, 99, 1, 5, 3), "not a duration float32 holds"),
])
def test_cli_values_checked_as_float32_exit_2_one_line(tmp_path, args, row, text):
    """Issue 44, class 1: a value that passes a float64 check and is 0 in float32 was an unexpected ValueError."""
    from click.testing import CliRunner

    from xbench.extract.prepare_cli import main

    write_egd(tmp_path / "raw", fixations=[*EGD_FIXATIONS, *([row] if row else [])])
    res = CliRunner().invoke(main, ["egd_cxr", "--root", str(tmp_path / "raw"), "--out", str(tmp_path / "out"),
                                    "--workers", "1", "--quiet", "--grid", "8", "--image-size", "16", *args])
    assert res.exit_code == 2 and "Traceback" not in res.output and "unexpected" not in res.output, res.output
    assert len([ln for ln in res.output.splitlines() if text in ln]) == 1, res.output
    assert not (tmp_path / "out" / "gt.zarr" / "egd_cxr").exists()
