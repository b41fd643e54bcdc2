"""``xbench-prepare`` never replaces a prepared dataset silently (issue 35 item 5).

``xbench-prepare phantom --out data --n-cases 50`` over a 100-case set used to replace it without a word. A
dataset that OUT holds prepared with other options is now refused without ``--overwrite`` (one line per option
that differs), and replaced with it, saying what was replaced. The same command again (same options) still
runs, as do a resumed run and a suite (``xbench run``), whose own bookkeeping decides what to prepare again.
The oracle: the case counts and options the test prepared with, read back from the stores.
"""
from __future__ import annotations

from click.testing import CliRunner

from xbench.extract.prepare_cli import main as cli
from xbench.schemas import read_ground_truth, store_sha256

SMALL = ["--grid", "16", "--image-size", "32", "--workers", "1", "-q"]


def prepare(out, *args):
    return CliRunner().invoke(cli, ["phantom", "--out", str(out), *args, *SMALL], prog_name="xbench-prepare")


def n_cases(out) -> int:
    return len(read_ground_truth(out / "gt.zarr").datasets["phantom"].case_id)


def test_other_options_are_refused_and_nothing_is_touched(tmp_path):
    assert prepare(tmp_path, "--n-cases", "10").exit_code == 0
    before = store_sha256(tmp_path / "gt.zarr"), store_sha256(tmp_path / "images.zarr")
    res = prepare(tmp_path, "--n-cases", "6")
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert lines == [f"xbench-prepare: error: {tmp_path}: already holds phantom prepared with other options (10 cases); "
                     "this run would replace it: pass --overwrite to replace it, or choose another --out",
                     "xbench-prepare: error: n_cases: 10 there, 6 in this run"]
    assert (store_sha256(tmp_path / "gt.zarr"), store_sha256(tmp_path / "images.zarr")) == before
    assert n_cases(tmp_path) == 10


def test_every_differing_option_is_one_line(tmp_path):
    assert prepare(tmp_path, "--n-cases", "8").exit_code == 0
    res = CliRunner().invoke(cli, ["phantom", "--out", str(tmp_path), "--n-cases", "8", "--seed", "3", "--grid", "8",
                                   "--image-size", "32", "--workers", "1", "-q"], prog_name="xbench-prepare")
    assert res.exit_code == 2
    assert sorted(res.stderr.strip().splitlines()[1:]) == ["xbench-prepare: error: grid: 16x16 there, 8x8 in this run",
                                                           "xbench-prepare: error: seed: 0 there, 3 in this run"]


def test_overwrite_replaces_and_says_what_it_replaced(tmp_path):
    assert prepare(tmp_path, "--n-cases", "10").exit_code == 0
    res = prepare(tmp_path, "--n-cases", "6", "--overwrite")
    assert res.exit_code == 0, res.output
    assert res.stderr.strip() == (f"xbench-prepare: warning: replaced phantom in {tmp_path} (10 cases, prepared with "
                                  "other options: n_cases: 10 there, 6 in this run)")
    assert n_cases(tmp_path) == 6


def test_the_same_command_again_runs_and_gives_the_same_stores(tmp_path):
    assert prepare(tmp_path, "--n-cases", "6").exit_code == 0
    before = store_sha256(tmp_path / "gt.zarr")
    res = prepare(tmp_path, "--n-cases", "6")
    assert res.exit_code == 0 and res.stderr == "", res.output
    assert store_sha256(tmp_path / "gt.zarr") == before


def test_another_dataset_in_the_same_out_is_not_a_replacement(tmp_path):
    assert prepare(tmp_path, "--n-cases", "6").exit_code == 0
    res = CliRunner().invoke(cli, ["phantom", "--out", str(tmp_path / "other"), "--n-cases", "4", *SMALL],
                             prog_name="xbench-prepare")
    assert res.exit_code == 0 and n_cases(tmp_path) == 6 and n_cases(tmp_path / "other") == 4


def test_a_folder_of_the_users_named_like_the_stores_is_never_deleted(tmp_path):
    """Issue 44, class 5: OUT/images.zarr/phantom/ that no XBench run wrote (no images store around it) is the
    user's: with or without --overwrite the run is refused (exit 2, one line) and the folder stays as it was."""
    mine = tmp_path / "images.zarr" / "phantom"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        res = prepare(tmp_path, "--n-cases", "6", *extra)
        assert res.exit_code == 2, res.output
        errors = [ln for ln in res.stderr.splitlines() if "error:" in ln]
        assert len(errors) == 1 and "images.zarr" in errors[0] and "Traceback" not in res.output
        assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"] and (mine / "notes.txt").read_text() == "mine"
