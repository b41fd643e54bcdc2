"""REFLACX's readers for the readers' ceiling (extract/human_reflacx.py): each reading's ellipses as its marks and
the other readings of the same image as its truth, exactly as the native fixture draws them."""
from __future__ import annotations

import numpy as np
import pytest
from gaze_fixtures import IMAGES, write_reflacx
from test_reader_reflacx import brute_ellipse

from xbench.extract.human import truth_region
from xbench.extract.human_reflacx import read_reflacx
from xbench.schemas.errors import InputError
from xbench.schemas.vocabulary import classes_for

D1, D2, D3 = IMAGES


def test_each_reading_against_the_other_readings_of_its_image(tmp_path):
    write_reflacx(tmp_path)
    sizes = {d: v[2] for d, v in IMAGES.items()}
    classes = classes_for("reflacx")
    reading = read_reflacx(tmp_path, sizes, classes)
    readers = ["P101R000001", "P101R000002", "P101R000003"]  # phase 1: D1 read three times; phase 3 left out
    assert sorted(reading.cases) == readers and all(reading.cases[r] == [D1] for r in readers)
    m1 = reading.marks["P101R000001"][D1]
    assert sorted(m1) == ["Pleural effusion"]  # Support devices labelled but not drawn; cardiac below certainty
    got = [s.load() for s in m1["Pleural effusion"].shapes]
    assert [g.tolist() for g in got] == [brute_ellipse(b, (60, 80)).tolist() for b in [(5, 30, 30, 58), (50, 35, 78, 57)]]
    assert sorted(reading.marks["P101R000002"][D1]) == ["Atelectasis", "Pleural effusion"]  # discarded gaze, kept
    t3 = reading.truth["P101R000003"][D1]
    assert sorted(t3) == ["Atelectasis", "Pleural effusion"] and len(t3["Pleural effusion"]) == 2
    # union vs majority over the two other readings of P101R000003
    label, region = truth_region(t3["Pleural effusion"], (60, 80), (12, 16), "majority")
    from xbench.extract.datasets.rasterise import rasterise_region

    a = rasterise_region(t3["Pleural effusion"][0], (60, 80), (12, 16)).mask
    b = rasterise_region(t3["Pleural effusion"][1], (60, 80), (12, 16)).mask
    assert label == 1 and np.array_equal(region, a & b)
    assert truth_region(t3["Atelectasis"], (60, 80), (12, 16), "majority")[0] == 0  # one of two: no majority


def test_refused_without_two_readings_or_with_bad_files(tmp_path):
    write_reflacx(tmp_path)
    sizes = {d: v[2] for d, v in IMAGES.items()}
    with pytest.raises(InputError, match="two or more"):
        read_reflacx(tmp_path, sizes, classes_for("reflacx"), phases=(3,))
    fx = tmp_path / "main_data" / "P101R000003" / "fixations.csv"
    fx.write_bytes(fx.read_bytes().replace(b"0.25,60", b"-0.25,60"))
    with pytest.raises(InputError) as exc:
        read_reflacx(tmp_path, sizes, classes_for("reflacx"))
    assert len(exc.value.problems) == 1 and "P101R000003" in str(exc.value.problems[0])


# -- xbench human reflacx: the command end to end, against a brute force over the fixture's readings --------------
def _reflacx_data(base):
    from xbench.extract.datasets.prepare import prepare_dataset
    from xbench.extract.datasets.reflacx import REFLACXReader

    if not (base / "data/gt.zarr").is_dir():
        write_reflacx(base / "raw")
        prepare_dataset(REFLACXReader(base / "raw"), base / "data", grid=(12, 16), image_size=32, workers=1,
                        progress=False)
    return base / "raw", base / "data"


def _fixture_marks(certainty: int) -> dict:
    """reading -> class -> the reading's ellipse masks at certainty >= ``certainty`` on findings it labels
    present, read from the fixture's table (phase 1: the image D1, read three times)."""
    from gaze_fixtures import READINGS

    from xbench.extract.datasets.base import Mask
    from xbench.schemas.vocabulary import canonical

    marks = {}
    for rid, (phase, image, _disc, labels, _fix, ellipses) in READINGS.items():
        if phase == 3:
            continue
        present = {canonical("reflacx", k) for k, v in labels.items() if v is True or (v is not False and v >= certainty)}
        per = marks.setdefault(rid, {})
        for *box, cert, names in ellipses:
            for name in names:
                cls = canonical("reflacx", name)
                if cert >= certainty and cls in present:
                    mask = brute_ellipse(box, IMAGES[image][2])
                    per.setdefault(cls, []).append(Mask(load=lambda m=mask: m))
    return marks


def _reflacx_brute(rule: str, certainty: int) -> dict:
    """Per class: the mean over readings of each reading's pairs (its map against the other readings' ellipses
    combined by ``rule``), the contract's metrics cell by cell."""
    from test_human import KEYS, _class_values, _mean, _metrics, _reader_map

    from xbench.extract.datasets.rasterise import rasterise_region

    size, grid = IMAGES[D1][2], (12, 16)
    marks = _fixture_marks(certainty)
    pairs = {}
    for r in marks:
        others = [o for o in marks if o != r]
        need = 1 if rule == "union" else len(others) // 2 + 1
        for cls in sorted({c for o in others for c in marks[o]}):
            votes = np.zeros(grid, int)
            for o in others:
                if cls in marks[o]:
                    votes += rasterise_region(marks[o][cls], size, grid).mask
            if sum(cls in marks[o] for o in others) < need or not (votes >= need).any():
                continue
            m = _reader_map(marks[r].get(cls, []), size)
            pairs.setdefault(cls, {}).setdefault(r, []).append(_metrics(m, votes >= need))
    return {c: {k: _mean(_class_values(p)[k] for p in per.values()) for k in KEYS} for c, per in pairs.items()}


@pytest.mark.parametrize("rule,certainty", [("union", 3), ("majority", 3), ("union", 5)])
def test_xbench_human_reflacx_equals_brute_force(tmp_path_factory, rule, certainty):
    import json

    from click.testing import CliRunner
    from test_human import KEYS

    from xbench import cli

    root, data = _reflacx_data(tmp_path_factory.getbasetemp() / "reflacx_human")
    out = tmp_path_factory.mktemp("human") / "out"
    res = CliRunner().invoke(cli.main, ["human", "reflacx", "--root", str(root), "--images", str(data / "images.zarr"),
                                        "--gt", str(data / "gt.zarr"), "--out", str(out), "--rule", rule,
                                        "--certainty", str(certainty), "--bootstrap", "0", "-q"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "human.json").read_text())
    entry = doc["datasets"]["reflacx"]
    assert entry["readers"] == ["P101R000001", "P101R000002", "P101R000003"]
    assert doc["xbench"]["source"] == "ellipses" and f"certainty >= {certainty}" in doc["xbench"]["rule"]
    want = _reflacx_brute(rule, certainty)
    assert want, "the fixture must give pairs"
    got = {c: e for c, e in entry["classes"].items() if e["n_pairs"]}
    assert set(got) == set(want)
    for c in want:
        for k in KEYS:
            assert got[c][k] == pytest.approx(want[c][k], rel=1e-12), (rule, c, k)
    if certainty == 5:  # only the Pneumothorax ellipse is certain enough
        assert set(got) == {"Pneumothorax"}
    assert (out / "readers/P101R000001/gt.zarr").is_dir()
    # each reading scored as a model points where its reading does (the region's peak, one rule for both)
    from test_human import reader_as_model_vs_reading
    for (r, c), (as_model, reading) in reader_as_model_vs_reading(out, "reflacx").items():
        assert as_model == pytest.approx(reading, rel=1e-12), (rule, certainty, r, c)


@pytest.mark.parametrize("args,message", [
    (["--split", "train"], "--split"),
    (["--certainty", "0"], "--certainty"),
])
def test_xbench_human_reflacx_refuses_options_that_do_not_apply(tmp_path_factory, args, message):
    from click.testing import CliRunner

    from xbench import cli

    root, data = _reflacx_data(tmp_path_factory.getbasetemp() / "reflacx_human")
    out = tmp_path_factory.mktemp("human") / "out"
    res = CliRunner().invoke(cli.main, ["human", "reflacx", "--root", str(root), "--images", str(data / "images.zarr"),
                                        "--out", str(out), *args])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
    assert not out.exists()
    res = CliRunner().invoke(cli.main, ["human", "vindr_cxr", "--root", str(root), "--images",
                                        str(data / "images.zarr"), "--out", str(out), "--certainty", "3"])
    assert res.exit_code == 2 and "--certainty" in res.output and not out.exists()


def test_xbench_human_reflacx_refuses_a_hostile_reading_file_with_exit_2(tmp_path_factory):
    """A reading file the reader refuses (a negative fixation duration) stops the command: exit 2, the problem on
    one line naming the reading, no traceback, no output folder."""
    import shutil

    from click.testing import CliRunner

    from xbench import cli

    root, data = _reflacx_data(tmp_path_factory.getbasetemp() / "reflacx_human")
    bad = tmp_path_factory.mktemp("hostile") / "raw"
    shutil.copytree(root, bad)
    fx = bad / "main_data" / "P101R000003" / "fixations.csv"
    fx.write_bytes(fx.read_bytes().replace(b"0.25,60", b"-0.25,60"))
    out = bad.parent / "out"
    res = CliRunner().invoke(cli.main, ["human", "reflacx", "--root", str(bad), "--images", str(data / "images.zarr"),
                                        "--out", str(out), "--bootstrap", "0"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    lines = [ln for ln in res.output.splitlines() if "P101R000003" in ln]
    assert len(lines) == 1 and not out.exists()


def test_xbench_human_reflacx_checks_the_metadata_size_before_any_mask(tmp_path_factory):
    """Issue 44, class 3: a metadata size of 20,000 x 20,000 (within the reader's bound) against the images store's
    60 x 80 was built into ellipse masks at 20,000 x 20,000 before anything compared the sizes; now refused first,
    one line naming the image, exit 2, no output, under 1 GiB (the metadata size alone would cost 400 MB a mask)."""
    import shutil
    import subprocess
    import sys

    root, data = _reflacx_data(tmp_path_factory.getbasetemp() / "reflacx_human")
    bad = tmp_path_factory.mktemp("size") / "raw"
    shutil.copytree(root, bad)
    meta = bad / "main_data" / "metadata_phase_1.csv"
    text = meta.read_text()
    assert text.count(",80,60,") >= 1, text[:400]
    meta.write_text(text.replace(",80,60,", ",20000,20000,"))
    out = bad.parent / "out"
    code = "import sys; from xbench.cli import main; sys.argv[0] = 'xbench'; main()"
    res = subprocess.run([sys.executable, "-c", code, "human", "reflacx", "--root", str(bad), "--images",
                          str(data / "images.zarr"), "--out", str(out), "--bootstrap", "0", "--max-memory", "1GiB",
                          "--timeout", "60"], capture_output=True, text=True, timeout=180)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and "20000x20000, the images store as 80x60" in lines[0] and D1 in lines[0], res.stderr
    assert not out.exists()
