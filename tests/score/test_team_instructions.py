"""A team follows the competition bundle's own pages literally (issue 46 item 2).

The overview and the Data page name a command; run exactly as written, in a folder holding the team's
submission.zarr and the phase's public images store as images.zarr, it must stop a submission with a misnamed
class or a missing case before upload, with the same words the platform's scoring program would answer after it.
The platform never advises --allow-missing (a flag a team cannot pass). Plain `xbench-validate` says it checked
the contract only."""
from __future__ import annotations

import re
import shlex
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from score_stores import make_gt
from xbench.package import TEAM_CHECK, codabench_main, package
from xbench.schemas import DatasetSpec, ImagesWriter, SubmissionWriter
from xbench.schemas.cli import validate_main

CLASSES = ["Cardiomegaly", "Nodule/Mass", "Pneumothorax"]
DATES = ["--validation-start", "2027-01-04", "--test-start", "2027-03-01"]


def _images_for(path: Path, g) -> Path:
    w = ImagesWriter(path, "phantom", case_ids=g.case_ids, classes=g.classes, image_size=8, cases_per_block=8)
    for b in w.blocks_todo():
        s, e = w.block_rows(b)
        w.write_block(b, np.zeros((e - s, 8, 8), np.uint8), np.full((e - s, 2), 64, np.int32))
    w.finish()
    return path


def _submission(path: Path, cases, classes) -> Path:
    rng = np.random.default_rng(0)
    w = SubmissionWriter.create(path, model="team", method="x", cases_per_block=8,
                                datasets={"phantom": DatasetSpec(list(cases), list(classes), (4, 4))})
    for b in w.blocks_todo("phantom"):
        s, e = w.block_rows("phantom", b)
        w.write_block("phantom", b, rng.normal(size=(e - s, len(classes))), rng.random((e - s, len(classes), 4, 4)))
    w.finish()
    return path


@pytest.fixture(scope="module")
def phase(tmp_path_factory):
    """The organiser's two ground truths and images stores (different cases), and the competition bundle."""
    d = tmp_path_factory.mktemp("team")
    val = make_gt(d / "gt_val.zarr", datasets={"phantom": dict(n=10, classes=CLASSES, grid=(8, 8))}, seed=1)["phantom"]
    make_gt(d / "gt_test.zarr", datasets={"phantom": dict(n=6, classes=CLASSES, grid=(8, 8))}, seed=2)
    _images_for(d / "images_val.zarr", val)
    out = d / "competition.zip"
    res = CliRunner().invoke(package, ["codabench-competition", "--gt-validation", str(d / "gt_val.zarr"),
                                       "--gt-test", str(d / "gt_test.zarr"), "--docker-image", "docker.io/t/x:1",
                                       "--images-validation", "https://example.org/xbench/images_val.zarr.zip",
                                       "--images-test", "https://example.org/xbench/images_test.zarr.zip",
                                       "--out", str(out), *DATES])
    assert res.exit_code == 0, res.output
    with zipfile.ZipFile(out) as zf:
        pages = {n: zf.read(n).decode() for n in zf.namelist() if n.startswith("pages/")}
        zf.extract("reference_data_validation.zip", d)
    return d, val, pages


def _commands(page: str) -> list[str]:
    """The xbench-validate lines of a page's fenced bash blocks, as a team would paste them."""
    blocks = re.findall(r"```bash\n(.*?)```", page, flags=re.S)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip().startswith("xbench-validate")]


def _team_folder(d: Path, name: str, cases, classes) -> Path:
    team = d / name
    team.mkdir()
    _submission(team / "submission.zarr", cases, classes)
    (team / "images.zarr").symlink_to(d / "images_val.zarr", target_is_directory=True)  # the phase's store, named as the page names it
    return team


def _platform(d: Path, team: Path, capsys) -> tuple[int, list[str]]:
    """The validation phase's scoring program on the team's upload (Codabench's layout: res/ and ref/)."""
    inp = d / f"input_{team.name}"
    zipfile.ZipFile(d / "reference_data_validation.zip").extractall(inp / "ref")
    (inp / "res").mkdir(parents=True)
    (inp / "res" / "submission.zarr").symlink_to(team / "submission.zarr", target_is_directory=True)
    (d / f"output_{team.name}").mkdir()
    capsys.readouterr()
    code = codabench_main(str(inp), str(d / f"output_{team.name}"))
    return code, capsys.readouterr().err.strip().splitlines()


def _validate(team: Path, line: str, monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.chdir(team)
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        validate_main(shlex.split(line)[1:])
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err


def test_the_pages_name_the_coverage_check_and_each_phases_images_store(phase):
    _, _, pages = phase
    overview, data = pages["pages/overview.md"], pages["pages/data.md"]
    assert _commands(overview) == [TEAM_CHECK] and _commands(data) == [TEAM_CHECK]
    assert "--images" in TEAM_CHECK
    assert "images_val.zarr.zip" in data and "images_test.zarr.zip" in data and "different splits" in data
    assert "contract only" in overview  # what the check without --images does not catch


def test_following_the_pages_literally_stops_a_misnamed_class_with_the_platforms_words(phase, monkeypatch, capsys):
    d, val, pages = phase
    team = _team_folder(d, "misnamed", val.case_ids, ["Cardiomegaly", "Nodule-Mass", "Pneumothorax"])
    for line in _commands(pages["pages/overview.md"]) + _commands(pages["pages/data.md"]):
        code, _, err = _validate(team, line, monkeypatch, capsys)
        assert code == 2, (line, err)
        local = [ln.removeprefix("xbench-validate: error: ") for ln in err.splitlines() if "error:" in ln]
        assert local == ["submission.zarr/phantom: class 'Nodule/Mass' is missing "
                         "(the submission has 'Nodule-Mass': misnamed?)"]
    code, platform = _platform(d, team, capsys)
    assert code == 2
    # the platform's reason (its last line) is the local line, the store's path aside
    assert platform[-1].startswith("invalid submission: ") and platform[-1].endswith(local[0].removeprefix("submission.zarr"))
    assert not any("--allow-missing" in ln for ln in platform)


def test_missing_cases_are_caught_locally_and_the_platform_advises_no_flag(phase, monkeypatch, capsys):
    d, val, pages = phase
    team = _team_folder(d, "short", val.case_ids[:7], CLASSES)
    code, _, err = _validate(team, TEAM_CHECK, monkeypatch, capsys)
    assert code == 2 and err.count("is missing") == 3, err
    code, platform = _platform(d, team, capsys)
    assert code == 2 and not any("--allow-missing" in ln for ln in platform), platform
    assert any(TEAM_CHECK in ln for ln in platform), platform  # the check the team can run, instead of the flag


def test_plain_validate_says_it_checked_the_contract_only(phase, monkeypatch, capsys):
    d, val, _ = phase
    team = _team_folder(d, "plain", val.case_ids, ["Cardiomegaly", "Nodule-Mass", "Pneumothorax"])
    code, out, _ = _validate(team, "xbench-validate submission.zarr", monkeypatch, capsys)
    assert code == 0 and out.strip() == ("submission.zarr: valid submission store "
                                         "(contract only; add --images images.zarr to check coverage)")
    code, _, err = _validate(team, "xbench-validate submission.zarr --images images.zarr", monkeypatch, capsys)
    assert code == 2 and "misnamed?" in err


def test_a_class_left_out_without_a_similar_name_says_how_to_declare_it_unsupported(phase, monkeypatch, capsys):
    d, val, _ = phase
    team = _team_folder(d, "unsupported", val.case_ids, ["Cardiomegaly", "Pneumothorax"])
    code, _, err = _validate(team, TEAM_CHECK, monkeypatch, capsys)
    assert code == 2 and "class 'Nodule/Mass' is missing" in err and "'unsupported'" in err, err
    assert "placeholder scores" in err
