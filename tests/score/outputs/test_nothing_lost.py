"""Nothing lost, nothing leaked (issue 34, item 4): xbench-score never replaces earlier results unasked, never
deletes what it did not write, gives every submission its own folder, checks every input against --out; a
report ranks results of one ground truth only; every way a run stops removes its hidden work folder.

Real runs of the commands (in-process through their ``main``, or the console scripts as processes for the
stops from outside); what is on disk afterwards is compared with a listing (names and bytes) taken before."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from score_stores import make_gt, make_submission, run_score_cli

SCORE = str(Path(sys.executable).parent / "xbench-score")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("lost")
    gt = make_gt(d / "gt.zarr", seed=3)
    make_submission(d / "a.zarr", gt, seed=4)
    make_submission(d / "b.zarr", gt, seed=5)
    gt2 = make_gt(d / "gt2.zarr", seed=8)  # another ground truth: other labels, another sha256
    make_submission(d / "c.zarr", gt2, seed=6)
    return d


def listing(folder: Path) -> dict[str, str]:
    """Every entry below ``folder`` (hidden ones too) with the sha256 of its bytes ("" for a folder)."""
    return {str(p.relative_to(folder)): "" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))}


def score(args, capsys):
    return run_score_cli([str(a) for a in args], capsys)


# -- an earlier run's results ------------------------------------------------------------------------------

@pytest.fixture
def earlier(stores, tmp_path, capsys):
    """A multi-submission run with its report in ``results/``."""
    out = tmp_path / "results"
    code, _, err = score([stores / "a.zarr", stores / "b.zarr", "--gt", stores / "gt.zarr", "--out", out,
                          "--bootstrap", "0", "-q"], capsys)
    assert code == 0, err
    assert (out / "index.html").is_file() and (out / "a" / "metrics.json").is_file()
    return out


def test_score_into_earlier_results_is_refused_and_they_stay(stores, earlier, capsys):
    before = listing(earlier.parent)
    code, out, err = score([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", earlier, "--bootstrap", "0"],
                           capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert lines[0] == (f"xbench-score: error: --out {earlier}: holds the results of an earlier run; pass "
                        "--overwrite to replace them (only what that run wrote), or choose a new or empty folder")
    assert lines[-1].endswith("nothing was written") and "Traceback" not in err and out == ""
    assert listing(earlier.parent) == before


def test_overwrite_replaces_only_what_the_earlier_run_wrote(stores, earlier, capsys):
    (earlier / "notes.txt").write_text("mine")
    (earlier / "mine").mkdir()
    (earlier / "mine" / "x.csv").write_text("1,2\n")
    code, _, err = score([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", earlier, "--bootstrap", "0", "-q",
                          "--overwrite"], capsys)
    assert code == 0, err
    marker = json.loads((earlier / "xbench-output.json").read_text())
    # the earlier run's folders a/, b/ and its report are gone; the new single-submission outputs and the user's
    # own files are there
    assert not (earlier / "a").exists() and not (earlier / "b").exists() and not (earlier / "index.html").exists()
    assert (earlier / "metrics.json").is_file() and marker["written_by"] == "xbench-score"
    assert (earlier / "notes.txt").read_text() == "mine" and (earlier / "mine" / "x.csv").read_text() == "1,2\n"
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["results"]  # no work folder left beside


def test_a_folder_another_command_wrote_is_refused_even_with_overwrite(stores, tmp_path, capsys):
    from xbench.score.report.cli import report

    runs = tmp_path / "runs"
    for s in ("a", "b"):
        assert score([stores / f"{s}.zarr", "--gt", stores / "gt.zarr", "--out", runs / s, "--bootstrap", "0", "-q"],
                     capsys)[0] == 0
    rep = tmp_path / "rep"
    res = CliRunner().invoke(report, [str(runs / "a"), str(runs / "b"), "--out", str(rep), "--bootstrap", "0", "-q"])
    assert res.exit_code == 0, res.output
    before = listing(rep)
    for extra in ([], ["--overwrite"]):
        code, _, err = score([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", rep, "--bootstrap", "0",
                              *extra], capsys)
        assert code == 2, err
        assert f"--out {rep}: holds the outputs of xbench report, which xbench-score does not replace" in err
        assert listing(rep) == before


def test_an_empty_folder_and_a_new_one_need_no_overwrite(stores, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new"):
        code, _, err = score([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", out, "--bootstrap", "0", "-q"],
                             capsys)
        assert code == 0, err


def test_results_of_a_version_without_the_marker_need_overwrite(stores, tmp_path, capsys):
    out = tmp_path / "old"
    assert score([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", out, "--bootstrap", "0", "-q"],
                 capsys)[0] == 0
    (out / "xbench-output.json").unlink()  # what an earlier version left: metrics.json and tables, no marker
    code, _, err = score([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", out, "--bootstrap", "0", "-q"],
                         capsys)
    assert code == 2 and "pass --overwrite" in err
    assert score([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", out, "--bootstrap", "0", "-q",
                  "--overwrite"], capsys)[0] == 0


# -- one folder per submission -------------------------------------------------------------------------------

def test_every_submission_gets_its_own_folder_and_row(stores, tmp_path, capsys):
    """a-2.zarr, a.zarr, a.zarr.zip: the stems a-2, a, a; the repeated a must not become a-2 (taken)."""
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copytree(stores / "a.zarr", subs / "a-2.zarr")
    shutil.copytree(stores / "b.zarr", subs / "a.zarr")
    zipped = shutil.make_archive(str(tmp_path / "c"), "zip", root_dir=stores / "a.zarr")
    shutil.move(zipped, subs / "a.zarr.zip")
    out = tmp_path / "res"
    code, stdout, err = score([subs / "a-2.zarr", subs / "a.zarr", subs / "a.zarr.zip", "--gt", stores / "gt.zarr",
                               "--out", out, "--bootstrap", "0"], capsys)
    assert code == 0, err
    folders = json.loads((out / "xbench-output.json").read_text())["names"]["submissions"]
    assert folders == {"a-2": "a-2", "a": "a", "a-3": "a-3"}
    for name, sub in (("a-2", "a-2.zarr"), ("a", "a.zarr"), ("a-3", "a.zarr.zip")):
        metrics = json.loads((out / name / "metrics.json").read_text())
        assert metrics["xbench"]["inputs"]["submission"].endswith(sub)
    models = json.loads((out / "report.json").read_text())["models"]
    assert sorted(m["path"] for m in models) == ["a", "a-2", "a-3"]  # the report: one row per submission
    assert len({m["name"] for m in models}) == 3
    board = stdout[stdout.index("overall (%) ranked"):].splitlines()
    rows = [ln for ln in board if re.match(r"\s*\d+\s", ln)]  # the terminal ranking: "rank  model  values"
    # three rows, each named (one model name thrice: with its folder)
    assert sorted(ln.split()[2] for ln in rows) == ["[a-2]", "[a-3]", "[a]"]


def test_unique_stems_rule():
    from xbench.score.cli import _unique_stems

    assert _unique_stems([Path("a-2.zarr"), Path("a.zarr"), Path("a.zarr.zip")]) == ["a-2", "a", "a-3"]
    assert _unique_stems([Path("x/a.zarr"), Path("y/a.zarr"), Path("a-2.zarr"), Path("a-3.zip")]) == \
        ["a", "a-4", "a-2", "a-3"]
    assert _unique_stems([Path("A.zarr"), Path("a.zarr")]) == ["A", "a"]  # folders: NameTable keeps them apart


# -- every input against --out ---------------------------------------------------------------------------------

def test_out_inside_the_human_folder_is_refused(stores, tmp_path, capsys):
    """--human H --out H/readers/R1 would replace the reader's own results."""
    human = tmp_path / "human"
    reader = human / "readers" / "R1"
    assert score([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", reader, "--bootstrap", "0", "-q",
                  "--datasets", "phantom"], capsys)[0] == 0
    (human / "human.json").write_text(json.dumps({"xbench": {"kind": "human-ceiling", "schema": 1, "rule": "test"},
                                                  "datasets": {"phantom": {"readers": ["R1"]}}}))
    before = listing(human)
    for extra in ([], ["--overwrite"]):
        code, _, err = score([stores / "b.zarr", "--gt", stores / "gt.zarr", "--out", reader, "--bootstrap", "0",
                              "--human", human, *extra], capsys)
        assert code == 2, err
        assert f"--out {reader}: is inside the --human folder ({human}); nothing may be written into an input" in err
        assert listing(human) == before


def test_every_option_that_names_a_path_is_an_input():
    """The one list of inputs (score/cli.py _input_paths) names every path option of xbench-score."""
    import click

    from xbench.score.cli import _input_paths, score_command

    listed = _input_paths([Path("s")], Path("g"), Path("t"), Path("i"), faithfulness="f", key="k", human_dir=Path("h"))
    path_options = {p.name for p in score_command.params
                    if isinstance(p, click.Option) and isinstance(p.type, click.Path) and p.name != "out_dir"}
    assert path_options == {"gt_path", "thresholds_from", "images_path", "faithfulness", "key", "human_dir"}
    assert {str(v) for v in listed.values()} == {"s", "g", "t", "i", "f", "k", "h"}


# -- a report ranks one ground truth -------------------------------------------------------------------------

def test_report_refuses_results_of_different_ground_truths(stores, tmp_path, capsys):
    from xbench.score.report.cli import report

    for s, gt in (("a", "gt"), ("c", "gt2")):
        assert score([stores / f"{s}.zarr", "--gt", stores / f"{gt}.zarr", "--out", tmp_path / s, "--bootstrap", "0",
                      "-q"], capsys)[0] == 0
    rep = tmp_path / "rep"
    res = CliRunner().invoke(report, [str(tmp_path / "a"), str(tmp_path / "c"), "--out", str(rep), "--bootstrap", "0",
                                      "-q"])
    assert res.exit_code == 2, res.output
    sha = {s: json.loads((tmp_path / s / "metrics.json").read_text())["xbench"]["gt_sha256"][:12] for s in "ac"}
    assert "scored against different ground truths" in res.output
    for s in "ac":
        assert f"gt_sha256 {sha[s]}: {tmp_path / s}" in res.output
    assert not rep.exists() and "Traceback" not in res.output
    # one ground truth: still one report
    res = CliRunner().invoke(report, [str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(rep), "--bootstrap", "0",
                                      "-q"])
    assert res.exit_code == 0, res.output


# -- every way a run stops removes its work folder ------------------------------------------------------------

def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _default_signals() -> None:
    # as a terminal starts a command: a test run started in the background (nohup, `bash -c ... &`) has
    # SIGINT ignored, the child would inherit that, and Python keeps an inherited SIG_IGN (Ctrl-C then
    # rightly does nothing: the run finishes and exits 0, which made this test fail on such runs)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start_and_wait_for_staging(args, folder: Path) -> tuple[subprocess.Popen, bool]:
    proc = subprocess.Popen([SCORE, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_signals)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if any(".xbench-new-" in n for n in hidden(folder)):
            return proc, True
        time.sleep(0.02)
    return proc, False


def test_a_memory_budget_stop_leaves_no_work_folder(stores, tmp_path):
    """The issue's case: the watchdog stops the scorer mid-bootstrap (os._exit from its thread)."""
    out = tmp_path / "res"
    proc, seen = _start_and_wait_for_staging([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", out,
                                              "--bootstrap", "200000", "--max-memory", "450MiB", "-q"], tmp_path)
    _, err = proc.communicate(timeout=300)
    assert seen, err  # the budget stopped it while the work folder existed (else this test tests nothing)
    lines = err.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "the memory budget of 450 MiB was exceeded" in lines[0], err
    assert hidden(tmp_path) == [] and not out.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_terminate_and_ctrl_c_leave_no_work_folder(stores, tmp_path, sig):
    out = tmp_path / "res"
    proc, seen = _start_and_wait_for_staging([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", out,
                                              "--bootstrap", "100000", "-q"], tmp_path)
    assert seen, proc.communicate()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["xbench-score: interrupted; nothing was written"]
    assert hidden(tmp_path) == [] and not out.exists()


@pytest.mark.parametrize("where", ["beside", "in place"])
def test_an_interrupt_the_moment_the_work_folder_appears_leaves_nothing(stores, tmp_path, where):
    """CI's flake, made certain: a SIGTERM that lands right after the work folder's mkdir, before its creator
    (PublishedDir.__enter__) has returned to a ``with``, so no ``finally`` of the creator runs. The folder is on
    the record before it exists, and every failing command removes what is on the record."""
    out = tmp_path / "res"
    script = textwrap.dedent(f"""
        import os, sys
        from xbench.schemas import paths
        if {where == "in place"!r}:
            paths._swappable = lambda target: False
            os.mkdir({str(out)!r})
        real = os.mkdir
        def mkdir(path, *a, **k):
            real(path, *a, **k)
            if ".xbench-new-" in str(path):
                raise KeyboardInterrupt  # the handler's interrupt (schemas/paths.py terminate_as_interrupt)
        paths.os.mkdir = mkdir
        from xbench.score.cli import main
        main({[str(stores / "a.zarr"), "--gt", str(stores / "gt.zarr"), "--out", str(out), "--bootstrap", "0",
              "-q"]!r})
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 130, res.stderr
    assert res.stderr.strip().splitlines() == ["xbench-score: interrupted; nothing was written"]
    assert hidden(tmp_path) == []
    assert not out.exists() if where == "beside" else [p.name for p in out.iterdir()] == []


STOPPERS = {
    # the watchdog's exit, inside each way an output is staged
    "published folder (score, report, human)": """
        from xbench.schemas.paths import PublishedDir
        with PublishedDir(OUT) as tmp:
            (tmp / "x").write_text("half")
            budget._stop("stopped")
    """,
    "store created beside (extract, images)": """
        from xbench.schemas._blocks import create_beside
        def build(folder):
            (folder / "x").write_text("half")
            budget._stop("stopped")
        create_beside(OUT, build)
    """,
    "published folder on a mount point (built inside it)": """
        from xbench.schemas import paths
        paths._swappable = lambda target: False
        OUT.mkdir()
        with paths.PublishedDir(OUT) as tmp:
            (tmp / "x").write_text("half")
            budget._stop("stopped")
    """,
}


@pytest.mark.parametrize("how", list(STOPPERS))
def test_the_watchdog_removes_every_kind_of_work_folder(tmp_path, how):
    out = tmp_path / "out"
    script = "from pathlib import Path\nfrom xbench.schemas import budget\nOUT = Path(%r)\n" % str(out)
    script += textwrap.dedent(STOPPERS[how])
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip() == "stopped", res.stderr
    assert hidden(tmp_path) == []
    assert not out.exists() or [p.name for p in out.iterdir()] == []


def test_overwrite_of_an_old_versions_folder_removes_only_what_it_provably_wrote(stores, tmp_path, capsys):
    """Issue 44, class 5: a results folder of a version before the marker. --overwrite removes the old run's
    files by their exact names (and those its metrics.json and report.json imply), never by a prefix: the user's
    table_of_my_patients.csv and the rest stay, byte for byte; no stale output of the old run survives."""
    from old_outputs import old_version_folder

    out = tmp_path / "results"
    mine = old_version_folder(out)
    kept = {**{n: (out / n).read_bytes() for n in mine}, "mine_results/my_notes.txt": b"mine",
            "mine_results/metrics.json": b"{}"}
    code, _, err = score([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", out, "--bootstrap", "0", "-q"],
                         capsys)
    assert code == 2 and "pass --overwrite" in err  # never without asking
    code, _, err = score([stores / "a.zarr", "--gt", stores / "gt.zarr", "--out", out, "--bootstrap", "0", "-q",
                          "--overwrite"], capsys)
    assert code == 0, err
    assert {n: (out / n).read_bytes() for n in kept} == kept
    for stale in ("a", "b", "per_class", "figures", "index.html", "report.json", "leaderboard.csv", "comparisons.csv"):
        assert not (out / stale).exists(), stale
    marker = json.loads((out / "xbench-output.json").read_text())
    assert (out / "metrics.json").is_file() and not set(marker["files"]) & set(kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
