"""Converter and submission messages a newcomer meets (issue 46 item 5): each names the thing to fix.

- maps of mixed sizes: the odd files are named, not the majority that differs from whichever file sorts first;
- probabilities that are logits: the source file is named, not a row of the store that was never written;
- a class left out with no similar name: how to declare it `unsupported`;
- a folder of .npz files (or its zip) handed in unconverted: "run xbench-convert first";
- a platform upload with no store in it: what it holds;
- two results of different ground truths compared: score both on one gt.zarr.
The oracle of each is what the test planted (which files, which class)."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from score_stores import make_gt, make_submission
from xbench.package import PlatformError, find_store
from xbench.schemas.cli import convert_main, validate_main

CLASSES = ["Cardiomegaly", "Nodule/Mass"]


def _npz_folder(folder: Path, sizes: dict[str, int], *, kind: str = "logit", scores=None, classes=CLASSES) -> Path:
    (folder / "phantom").mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"model": "m", "datasets": {"phantom": {
        "classes": list(classes), "score_kind": kind}}}))
    rng = np.random.default_rng(0)
    for cid, side in sizes.items():
        s = rng.random(len(classes)) if scores is None else np.asarray(scores.get(cid, rng.random(len(classes))))
        np.savez(folder / "phantom" / f"{cid}.npz", scores=s.astype(np.float32),
                 saliency=rng.random((len(classes), side, side)).astype(np.float32))
    return folder


def _run(main, args, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main([str(a) for a in args])
    err = capsys.readouterr().err
    return int(done.value.code or 0), [ln.split(": error: ", 1)[-1] for ln in err.strip().splitlines()]


def test_mixed_map_sizes_name_the_odd_files_not_the_majority(tmp_path, capsys):
    # 4 files at 4 x 4 sort first ("a-..."), 12 at 8 x 8: the 4 are wrong, whatever the order
    sizes = {f"a-{i}": 4 for i in range(4)} | {f"b-{i:02d}": 8 for i in range(12)}
    src = _npz_folder(tmp_path / "npz", sizes)
    code, lines = _run(convert_main, [src, "--out", tmp_path / "s.zarr", "-q"], capsys)
    assert code == 2 and not (tmp_path / "s.zarr").exists()
    blamed = sorted(Path(ln.split(": ", 1)[0]).stem for ln in lines if ".npz" in ln.split(": ", 1)[0])
    assert blamed == [f"a-{i}" for i in range(4)], lines
    assert all("(2, 8, 8) (the maps' size of 12 of the 16 files)" in ln for ln in lines if ".npz:" in ln)


def test_logits_declared_as_probabilities_name_the_source_files(tmp_path, capsys):
    sizes = {f"case-{i}": 4 for i in range(6)}
    src = _npz_folder(tmp_path / "npz", sizes, kind="probability",
                      scores={"case-2": [-1.25, 0.5], "case-4": [0.2, 3.0]})
    out = tmp_path / "s.zarr"
    code, lines = _run(convert_main, [src, "--out", out, "-q"], capsys)
    assert code == 2 and not out.exists()
    named = sorted(ln.split(": ", 1)[0] for ln in lines)
    assert named == [str(src / "phantom" / "case-2.npz"), str(src / "phantom" / "case-4.npz")], lines
    assert "-1.25 is outside [0, 1]" in lines[0] and "'logit'" in lines[0] and str(out) not in " ".join(lines)


def test_a_class_left_out_says_how_to_declare_it_unsupported(tmp_path, capsys):
    gt = tmp_path / "gt.zarr"
    make_gt(gt, datasets={"phantom": dict(n=4, classes=["Cardiomegaly", "Pneumothorax"], grid=(4, 4))})
    ids = [f"phantom-{i:03d}" for i in range(4)]
    src = _npz_folder(tmp_path / "npz", dict.fromkeys(ids, 4), classes=["Cardiomegaly"])
    code, lines = _run(convert_main, [src, "--out", tmp_path / "s.zarr", "--gt", gt, "-q"], capsys)
    assert code == 2
    line = next(ln for ln in lines if "Pneumothorax" in ln)
    assert "class 'Pneumothorax' is missing" in line and "'unsupported'" in line and "placeholder scores" in line


@pytest.mark.parametrize("zipped", [False, True])
def test_an_unconverted_npz_folder_is_recognised(tmp_path, capsys, zipped):
    src = _npz_folder(tmp_path / "npz", {"case-0": 4, "case-1": 4})
    given = src
    if zipped:
        given = tmp_path / "npz.zip"
        with zipfile.ZipFile(given, "w") as zf:
            for p in sorted(src.rglob("*")):
                zf.write(p, p.relative_to(src).as_posix())
    code, lines = _run(validate_main, [given], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert "per-case .npz files" in lines[0] and "run xbench-convert first" in lines[0]
    assert ("unzip it" in lines[0]) == zipped
    gt = tmp_path / "gt.zarr"
    make_gt(gt, datasets={"phantom": dict(n=2, classes=CLASSES, grid=(4, 4))})
    from xbench.score.cli import main as score_main

    code, lines = _run(score_main, [given, "--gt", gt, "--out", tmp_path / "out", "-q"], capsys)
    assert code == 2 and any("run xbench-convert first" in ln for ln in lines), lines


def test_an_upload_without_a_store_says_what_it_holds(tmp_path):
    res = tmp_path / "res"
    _npz_folder(res, {"case-0": 4})  # the contents of an npz folder, zipped and unzipped by the platform
    with pytest.raises(PlatformError) as err:
        find_store(res, "submission")
    assert "found 0" in str(err.value) and "meta.json and per-case .npz files" in str(err.value)
    assert "xbench-convert" in str(err.value)
    other = tmp_path / "other"
    (other / "notes").mkdir(parents=True)
    (other / "README.txt").write_text("x")
    with pytest.raises(PlatformError) as err:
        find_store(other, "submission")
    assert "nothing usable among 2 entries: README.txt, notes/" in str(err.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(PlatformError, match="the folder is empty"):
        find_store(tmp_path / "empty", "submission")


def test_comparing_results_of_two_ground_truths_says_to_score_both_on_one(tmp_path, capsys):
    from xbench.score.cli import main as score_main
    from xbench.score.report.cli import compare

    spec = {"phantom": dict(n=6, classes=CLASSES, grid=(6, 6))}
    for s, seed in (("a", 1), ("b", 2)):
        gt = make_gt(tmp_path / f"gt_{s}.zarr", datasets=spec, seed=seed)
        make_submission(tmp_path / f"{s}.zarr", gt, seed=seed)
        code, _ = _run(score_main, [tmp_path / f"{s}.zarr", "--gt", tmp_path / f"gt_{s}.zarr", "--out", tmp_path / s,
                                    "--bootstrap", "0", "-q"], capsys)
        assert code == 0
    res = CliRunner().invoke(compare, [str(tmp_path / "a"), str(tmp_path / "b"), "--bootstrap", "0"])
    assert res.exit_code == 2, res.output
    assert "different ground truths" in res.output and "same --gt gt.zarr" in res.output, res.output
