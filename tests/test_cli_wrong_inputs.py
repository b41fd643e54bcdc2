"""Issue 12's table: each command fed its typical wrong inputs answers with the contract's exit code and
one line naming the mistake and the fix, never a traceback.

Built on a real phantom set (xbench prepare, then xbench extract --model dog), the user's own flow.
"""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from xbench import cli  # noqa: E402
from xbench.schemas import _cli  # noqa: E402


def xb(*args, **kwargs):
    """Run `xbench ARGS` in-process; returns the click Result (exit_code, stdout, stderr)."""
    return CliRunner().invoke(cli.main, [str(a) for a in args], **kwargs)


def no_traceback(res) -> bool:
    return "Traceback" not in res.output and "Traceback" not in (res.stderr or "")


def error_lines(res) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def ph(tmp_path_factory):
    """data/images.zarr, data/gt.zarr (12 phantom cases), dog.zarr and a score folder."""
    d = tmp_path_factory.mktemp("phantom")
    res = xb("prepare", "phantom", "--out", d / "data", "--n-cases", "12", "--workers", "1", "--image-size", "64",
             "--grid", "32", "-q")
    assert res.exit_code == 0, res.output
    res = xb("extract", "--model", "dog", "--images", d / "data/images.zarr", "--out", d / "dog.zarr", "-q",
             "--workers", "0")
    assert res.exit_code == 0, res.output
    res = xb("score", d / "dog.zarr", "--gt", d / "data/gt.zarr", "--out", d / "scores/dog", "--bootstrap", "0", "-q")
    assert res.exit_code == 0, res.output
    return d


# -- xbench score through the umbrella (it crashed: the target did not exist) -----------------------------
def test_xbench_score_runs(ph, tmp_path):
    res = xb("score", ph / "dog.zarr", "--gt", ph / "data/gt.zarr", "--out", tmp_path / "r", "--bootstrap", "0")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "metrics.json").is_file() and "overall" in res.stdout


def test_score_default_out_is_results():
    from xbench.score.cli import score_command

    out = next(p for p in score_command.params if p.name == "out_dir")
    assert out.default == Path("results")  # not ./report/, the name `xbench report` uses


# -- usage and invalid input: exit 2, one line -------------------------------------------------------------
@pytest.mark.parametrize("args,needle", [
    (["{sub}"], "Missing option '--gt'"),
    (["{sub}", "--gt", "{gt}", "--bootstrap", "-1"], "--bootstrap"),
    (["{sub}", "--gt", "{gt}", "--format", "csv"], "--format"),
    (["{sub}", "--gt", "{gt}", "--datasets", "phantm"], "phantm not in the ground truth"),
    (["{sub}", "--gt", "{gt}", "--thresholds-from", "{nowhere}"], "no such metrics.json"),
    (["{sub}", "--gt", "{gt}", "--thresholds-from", "{empty_dir}"], "pass the metrics.json"),
])
def test_score_invalid_input_exits_2(ph, tmp_path, args, needle):
    (tmp_path / "empty").mkdir()
    subs = {"sub": ph / "dog.zarr", "gt": ph / "data/gt.zarr", "nowhere": tmp_path / "m.json",
            "empty_dir": tmp_path / "empty"}
    res = xb("score", *[a.format(**subs) for a in args], "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert needle in res.stderr and no_traceback(res)
    assert not (tmp_path / "o").exists()


def test_thresholds_from_a_score_folder(ph, tmp_path):
    res = xb("score", ph / "dog.zarr", "--gt", ph / "data/gt.zarr", "--out", tmp_path / "t", "--bootstrap", "0",
             "--thresholds-from", ph / "scores/dog", "-q")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "t/metrics.json").read_text())["xbench"]["thresholds"] == "transferred"


# -- store kinds: one line naming the real mistake ---------------------------------------------------------
def _zip_folder(src: Path, dst: Path) -> None:
    with zipfile.ZipFile(dst, "w") as zf:
        for p in src.rglob("*"):
            zf.write(p, p.relative_to(src.parent))


def _unfinished(src: Path, dst: Path) -> Path:
    """A copy of a submission marked as its extraction left it before finishing."""
    import zarr

    shutil.copytree(src, dst)
    g = zarr.open_group(str(dst), mode="r+")
    meta = dict(g.attrs["xbench"])
    meta["complete"] = False
    g.attrs["xbench"] = meta
    return dst


@pytest.mark.parametrize("case", ["images-as-submission", "swapped", "zipped-folder", "unfinished",
                                  "score-folder-as-gt"])
def test_score_names_the_store_mistake(ph, tmp_path, case):
    gt, sub = ph / "data/gt.zarr", ph / "dog.zarr"
    if case == "images-as-submission":
        args, needle = [ph / "data/images.zarr", "--gt", gt], "this is an images store"
    elif case == "swapped":
        args, needle = [gt, "--gt", sub], "did you swap"
    elif case == "zipped-folder":
        _zip_folder(sub, tmp_path / "dog.zarr.zip")
        args, needle = [tmp_path / "dog.zarr.zip", "--gt", gt], "zip the contents"
    elif case == "unfinished":
        args, needle = [_unfinished(sub, tmp_path / "half.zarr"), "--gt", gt], \
            "run the same xbench-extract command again"
    else:
        args, needle = [sub, "--gt", ph / "scores/dog"], "a folder of scores"
    res = xb("score", *args, "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    problems = [ln for ln in error_lines(res) if "nothing was written" not in ln]
    assert any(needle in ln for ln in problems), res.stderr
    assert len(problems) <= 2 and "write_empty_chunks" not in res.stderr and no_traceback(res)
    assert not (tmp_path / "o").exists()


def test_validate_names_the_store_mistake(ph, tmp_path):
    res = xb("validate", _unfinished(ph / "dog.zarr", tmp_path / "half.zarr"))
    assert res.exit_code == 2 and len(error_lines(res)) == 1 and "run the same xbench-extract" in res.stderr
    res = xb("validate", ph / "data/images.zarr", "--kind", "submission", "--json")
    assert res.exit_code == 2 and "this is an images store" in res.stderr
    shape = json.loads(res.stdout)
    assert shape["ok"] is False and shape["valid"] is False and shape["exit_code"] == 2 and shape["problems"]


def test_extract_with_a_gt_store(ph, tmp_path):
    res = xb("extract", "--model", "dog", "--images", ph / "data/gt.zarr", "--out", tmp_path / "d.zarr")
    assert res.exit_code == 2 and len(error_lines(res)) == 1
    assert "ground-truth store" in res.stderr and "--images needs images.zarr" in res.stderr and no_traceback(res)
    assert not (tmp_path / "d.zarr").exists()


# -- extract: warnings, nothing to do, fail fast, --limit ----------------------------------------------------
def test_extract_warns_on_ignored_method_and_says_nothing_to_do(ph, tmp_path):
    shutil.copytree(ph / "dog.zarr", tmp_path / "dog.zarr")
    res = xb("extract", "--model", "dog", "--images", ph / "data/images.zarr", "--out", tmp_path / "dog.zarr",
             "--workers", "0")
    assert res.exit_code == 0 and "already complete, nothing to do" in res.stdout
    res = xb("extract", "--model", "dog", "--images", ph / "data/images.zarr", "--out", tmp_path / "m.zarr",
             "--workers", "0", "--method", "maskclip", "-q")
    assert res.exit_code == 0 and "warning: --method maskclip will be ignored" in res.stderr


def test_extract_limit(ph, tmp_path):
    from xbench.schemas import read_submission, validate_submission

    res = xb("extract", "--model", "random", "--images", ph / "data/images.zarr", "--out", tmp_path / "s.zarr",
             "--workers", "0", "--limit", "5", "--json")
    assert res.exit_code == 0, res.output
    sub = read_submission(tmp_path / "s.zarr")
    assert [len(d.case_id) for d in sub.datasets.values()] == [5]
    from xbench.schemas import read_images

    first = [str(c) for c in read_images(ph / "data/images.zarr").datasets["phantom"].case_id[:5]]
    assert list(map(str, sub.datasets["phantom"].case_id)) == first  # the first N, in order
    assert validate_submission(tmp_path / "s.zarr") == []
    assert xb("extract", "--model", "random", "--images", ph / "data/images.zarr", "--out", tmp_path / "x.zarr",
              "--limit", "0").exit_code == 2


def _fresh(code: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_missing_weights_fail_before_torch_is_imported(ph, tmp_path):
    for extra in (["--model-option", f"weights={tmp_path}/nope/ViT-B-16.pt"], []):
        argv = ["--model", "clip", "--images", str(ph / "data/images.zarr"), "--out", str(tmp_path / "c.zarr"), *extra]
        code = ("import os, sys\nos.environ['HOME'] = %r\nfrom xbench.extract.cli import main\n"
                "try:\n    main(%r)\nexcept SystemExit as e:\n    print('exit', e.code, 'torch' in sys.modules)\n"
                % (str(tmp_path), argv))
        out = _fresh(code)
        assert out.stdout.strip().splitlines()[-1] == "exit 2 False", out.stdout + out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
        assert ("not found" if not extra else "no such file") in out.stderr


# -- the scorer-only install: commands of the extract side say which extra to install ------------------------
@pytest.mark.parametrize("argv,blocked,extra", [
    (["demo", "--quick", "--models", "dog,clip-tiny"], ("torch",), "extract"),  # the baselines need none: issue 46
    (["extract", "--model", "clip-tiny", "--images", "{images}", "--out", "{out}"], ("torch",), "extract")])
def test_scorer_only_install_says_which_extra(ph, tmp_path, argv, blocked, extra):
    argv = [a.format(images=ph / "data/images.zarr", out=tmp_path / "o.zarr") for a in argv]
    code = ("import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in blocked)  # as if not installed
            + "from xbench.cli import main\nmain(%r)" % argv)
    out = _fresh(code, cwd=tmp_path)  # `demo` writes to ./demo-out by default: not into the checkout
    assert out.returncode == 2, out.stderr
    assert f"needs the {extra} extra" in out.stderr and f"pip install '.[{extra}]' in a checkout" in out.stderr
    assert "Traceback" not in out.stderr
    assert f"'xbench-cxr[{extra}]' once it is released on PyPI" in out.stderr  # issue 35: nothing is published yet
    assert len(out.stderr.strip().splitlines()) == 1
    if argv[0] == "demo":
        assert not (tmp_path / "demo-out").exists()
        assert ("--models random,center,dog" in out.stderr) == (extra == "extract")


# -- Ctrl-C: 130 and the same line everywhere -----------------------------------------------------------
@pytest.mark.parametrize("argv,target,hint", [
    (["extract", "--model", "dog", "--images", "{images}", "--out", "{tmp}/i.zarr"], "xbench.extract.runner.run_extraction",
     "run the same command again to resume"),
    (["prepare", "phantom", "--out", "{tmp}/p", "--n-cases", "4"], "xbench.extract.datasets.prepare.prepare_dataset",
     "run the same command again to resume"),
    (["score", "{sub}", "--gt", "{gt}", "--out", "{tmp}/s"], "xbench.score.scoring.score_submission",
     "nothing was written"),
])
def test_ctrl_c_exits_130(ph, tmp_path, monkeypatch, argv, target, hint):
    module, _, name = target.rpartition(".")
    __import__(module)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sys.modules[module], name, interrupted)
    values = {"images": ph / "data/images.zarr", "tmp": tmp_path, "sub": ph / "dog.zarr", "gt": ph / "data/gt.zarr"}
    res = xb(*[a.format(**values) for a in argv])
    assert res.exit_code == 130, res.output
    assert error_lines(res) == [f"xbench {argv[0]}: interrupted; {hint}"]


# -- prepare --list ----------------------------------------------------------------------------------------
def test_prepare_list_shows_splits_and_defaults():
    res = xb("prepare", "--list")
    assert res.exit_code == 0
    rows = {ln.split()[0]: ln for ln in res.stdout.splitlines()}
    assert "split test (default); also val" in rows["chexlocalize"]
    listed = json.loads(xb("prepare", "--list", "--json").stdout)["datasets"]
    assert {r["dataset"]: r["default_split"] for r in listed}["chexlocalize"] == "test"


def test_prepare_wrong_inputs(tmp_path):
    res = xb("prepare", "phantm", "--out", tmp_path)
    assert res.exit_code == 2 and "phantom" in res.stderr and no_traceback(res)  # the close match is offered
    res = xb("prepare", "siim_acr", "--out", tmp_path, "--json")
    assert res.exit_code == 2 and json.loads(res.stdout)["error"].startswith("--root is required")


# -- the shared layer itself -------------------------------------------------------------------------------
def test_progress_on_a_log_is_lines_not_a_stuck_bar():
    log = io.StringIO()
    bar = _cli.progress(desc="dog", unit="pair", stream=log, interval=0)
    bar.set_total(4)
    for _ in range(4):
        bar.update(1)
    bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and lines[-1] == "dog: 4/4 pair (100%)" and len(lines) == 5
    quiet = io.StringIO()
    bar = _cli.progress(desc="dog", unit="pair", stream=quiet, interval=3600)
    bar.update(3)
    bar.close()
    assert quiet.getvalue() == "dog: 3 pair\n"  # nothing in between, one line at the end
    resumed = io.StringIO()
    bar = _cli.progress(10, desc="prepare", unit="case", stream=resumed, interval=3600, initial=6)
    bar.update(4)
    bar.close()
    bar.close()
    assert resumed.getvalue() == "prepare: 10/10 case (100%)\n"


def test_unexpected_errors_are_one_line_and_debug_shows_the_traceback(ph, tmp_path, monkeypatch):
    import xbench.score.scoring as scoring

    def boom(*a, **k):
        raise RuntimeError("kernel exploded\nsecond line")

    monkeypatch.setattr(scoring, "score_submission", boom)
    args = ["score", ph / "dog.zarr", "--gt", ph / "data/gt.zarr", "--out", tmp_path / "o"]
    res = xb(*args)
    assert res.exit_code == 1 and error_lines(res) == [
        "xbench score: error: unexpected RuntimeError: kernel exploded (run again with --debug for the traceback)"]
    res = xb(*args, "--debug")
    assert res.exit_code == 1 and "Traceback" in res.stderr
    res = xb(*args, "--json")
    assert json.loads(res.stdout) == {"ok": False, "exit_code": 1, "problems": [error_lines(res)[0].split(": error: ")[1]],
                                      "error": error_lines(res)[0].split(": error: ")[1]}
