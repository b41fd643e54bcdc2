"""schemas/paths.py: safe names from data, --out checks, and all-or-nothing output folders."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xbench.schemas import paths as P

SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._~-]*")


@given(st.text(max_size=400))
@settings(max_examples=300, deadline=None)
def test_safe_name_is_a_plain_bounded_file_name(original):
    name = P.safe_name(original)
    assert SAFE.fullmatch(name) and len(name) <= P.MAX_NAME
    assert name not in (".", "..") and "/" not in name and "\\" not in name
    assert name.split(".")[0].lower() not in {"con", "nul", "aux", "prn", "com1", "lpt1"}
    # a name already safe stays as it is; any other gets the hash of the original
    if SAFE.fullmatch(original) and "~" not in original and len(original) <= P.MAX_NAME and original[0] != "-" \
            and original.split(".")[0].lower() not in P._WINDOWS_DEVICES:
        assert name == original
    else:
        assert name.endswith("~" + __import__("hashlib").sha256(original.encode("utf-8", "surrogatepass"))
                             .hexdigest()[:10])


@given(st.lists(st.text(max_size=120), min_size=2, max_size=30, unique=True))
@settings(max_examples=200, deadline=None)
def test_name_table_never_maps_two_originals_to_one_file(originals):
    table = P.NameTable()
    names = [table.name(o) for o in originals]
    assert len({n.casefold() for n in names}) == len(names)  # unique even on a case-insensitive file system
    assert table.mapping == dict(zip(originals, names))
    assert [table.name(o) for o in originals] == names  # stable


@pytest.mark.parametrize("original", ["../x", "..", ".", "a/b", "a\\b", "x" * 300, "CON", "aux.txt", "", "-rf",
                                      ".hidden", "a b", "é", "\0"])
def test_hostile_names_stay_inside_the_folder(tmp_path, original):
    name = P.safe_name(original)
    target = (tmp_path / name).resolve()
    assert target.parent == tmp_path.resolve()
    target.write_text("ok")  # and the file system accepts it (no ENAMETOOLONG)
    assert name != original


def test_names_that_sanitise_alike_stay_apart():
    table = P.NameTable()
    assert len({table.name("a b"), table.name("a/b"), table.name("a-b"), table.name("A-B")}) == 4


def test_out_refused_when_equal_inside_or_holding_an_input(tmp_path):
    gt = tmp_path / "gt.zarr"
    gt.mkdir()
    sub = tmp_path / "s" / "sub.zarr"
    sub.mkdir(parents=True)
    inputs = {"the ground truth": gt, "the submission": sub}
    assert P.output_problems(tmp_path / "out", inputs) == []
    assert "is the ground truth" in P.output_problems(gt, inputs)[0]
    assert "inside the ground truth" in P.output_problems(gt / "x" / "y", inputs)[0]
    assert "holds the submission" in P.output_problems(tmp_path / "s", inputs)[0]
    link = tmp_path / "link"
    link.symlink_to(gt)
    assert "is the ground truth" in P.output_problems(link, inputs)[0]  # links are followed
    assert P.output_problems(gt, {"remote": "https://127.0.0.1/gt.zarr", "none": None}) == []


def test_out_refused_when_it_is_or_holds_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert "current folder" in P.output_problems(".", {})[0]
    assert "current folder" in P.output_problems("..", {})[0]
    assert P.output_problems("out", {}) == []
    with P.PublishedDir("out/") as work:  # relative, with a trailing slash: still beside "out", not inside
        (work / "metrics.json").write_text("1")
    assert sorted(os.listdir(".")) == ["out"] and (tmp_path / "work" / "out" / "metrics.json").is_file()


def test_out_refused_when_a_foreign_folder_or_a_file(tmp_path):
    mine = tmp_path / "home"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    assert "files XBench did not write" in P.output_problems(mine, {})[0]
    (tmp_path / "f").write_text("x")
    assert "not a folder" in P.output_problems(tmp_path / "f", {})[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert P.output_problems(empty, {}) == []


def test_out_refused_when_nothing_on_the_way_is_writable(tmp_path, monkeypatch):
    monkeypatch.setattr(P.os, "access", lambda path, mode: False)  # tests run as root, where chmod is no barrier
    problems = P.output_problems(tmp_path / "a" / "b", {})
    assert len(problems) == 1 and "permission denied" in problems[0] and str(tmp_path) in problems[0]


def _fill(folder: Path, files: dict) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_published_dir_replaces_the_whole_folder_and_keeps_user_files(tmp_path):
    out = tmp_path / "out"
    with P.PublishedDir(out) as work:
        _fill(work, {"metrics.json": "1", "table_a.csv": "a", "sub/x": "x"})
        P.write_marker(work, "test")
    assert json.loads((out / P.MARKER).read_text())["files"] == ["metrics.json", "sub", "table_a.csv", P.MARKER]
    (out / "notes.txt").write_text("mine")
    with P.PublishedDir(out) as work:
        _fill(work, {"metrics.json": "2"})
        P.write_marker(work, "test")
    tree = _tree(out)
    assert tree["metrics.json"] == "2" and tree["notes.txt"] == "mine"
    assert "table_a.csv" not in tree and "sub/x" not in tree  # the previous run's files do not linger
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no work folder left


def test_published_dir_leaves_the_old_folder_on_error(tmp_path):
    out = tmp_path / "out"
    with P.PublishedDir(out) as work:
        _fill(work, {"metrics.json": "1", "t.csv": "old"})
        P.write_marker(work, "test")
    before = _tree(out)
    with pytest.raises(RuntimeError):
        with P.PublishedDir(out) as work:
            _fill(work, {"metrics.json": "2"})
            raise RuntimeError("scoring failed")
    assert _tree(out) == before and sorted(os.listdir(tmp_path)) == ["out"]


def test_published_dir_in_place_for_a_mount_point(tmp_path, monkeypatch):
    out = tmp_path / "output"
    out.mkdir()
    monkeypatch.setattr(P, "_swappable", lambda target: False)  # e.g. a container's /output
    with P.PublishedDir(out) as work:
        assert work.parent == out
        _fill(work, {"metrics.json": "1", "old.csv": "o"})
        P.write_marker(work, "test")
    (out / "notes.txt").write_text("mine")
    with P.PublishedDir(out) as work:
        _fill(work, {"metrics.json": "2"})
        P.write_marker(work, "test")
    assert sorted(os.listdir(out)) == ["metrics.json", "notes.txt", P.MARKER]
    assert (out / "metrics.json").read_text() == "2"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_killed_run_leaves_the_old_folder_and_the_next_run_cleans_up(tmp_path):
    out = tmp_path / "out"
    with P.PublishedDir(out) as work:
        _fill(work, {"metrics.json": "old"})
        P.write_marker(work, "test")
    code = (f"import os, sys; sys.path[:0] = {sys.path!r}\n"
            "from xbench.schemas.paths import PublishedDir\n"
            f"with PublishedDir({str(out)!r}) as work:\n"
            "    (work / 'metrics.json').write_text('new')\n"
            "    os.kill(os.getpid(), 9)\n")
    assert subprocess.run([sys.executable, "-c", code]).returncode == -9
    assert (out / "metrics.json").read_text() == "old"
    assert any(".xbench-new-" in n for n in os.listdir(tmp_path))  # what the kill left
    with P.PublishedDir(out) as work:
        _fill(work, {"metrics.json": "third"})
    assert sorted(os.listdir(tmp_path)) == ["out"] and (out / "metrics.json").read_text() == "third"


def test_leftovers_of_live_processes_and_other_names_are_kept(tmp_path):
    live = tmp_path / f".out.xbench-new-{os.getpid()}-abc"
    other = tmp_path / f".other.xbench-new-{_dead_pid()}-abc"
    legacy = tmp_path / ".out.tmp-xyz"
    for d in (live, other, legacy):
        d.mkdir()
    removed = P.clean_leftovers(tmp_path / "out")
    assert removed == [legacy] and live.exists() and other.exists()


def test_a_kill_between_the_two_renames_brings_the_old_folder_back(tmp_path):
    aside = tmp_path / f".out.xbench-old-{_dead_pid()}-abc"
    aside.mkdir()
    (aside / "metrics.json").write_text("previous")
    P.clean_leftovers(tmp_path / "out")
    assert (tmp_path / "out" / "metrics.json").read_text() == "previous" and not aside.exists()


def test_swap_without_renameat2(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "_exchange", lambda a, b: False)  # macOS, old kernels: the two-rename fallback
    out = tmp_path / "out"
    for value in ("1", "2"):
        with P.PublishedDir(out) as work:
            _fill(work, {"metrics.json": value})
    assert (out / "metrics.json").read_text() == "2" and sorted(os.listdir(tmp_path)) == ["out"]


def test_written_before_names_only_what_an_old_version_provably_wrote(tmp_path):
    from old_outputs import old_version_folder
    from xbench.schemas.paths import written_before

    mine = old_version_folder(tmp_path / "results")
    got = written_before(tmp_path / "results")
    assert got == {"a", "b", "per_class", "figures", "index.html", "report.json", "leaderboard.csv", "leaderboard.md",
                   "comparisons.csv"}
    assert not got & set(mine) and "mine_results" not in got
    assert written_before(tmp_path / "results" / "a") == {
        "metrics.json", "pairs.parquet", "pair_counts.npz", "table1_grounding.csv", "table1_grounding.md",
        "table_pointing_chexlocalize.csv", "table_pointing_vindr cxr.md", "table_recognition.csv"}


def test_an_old_table_of_an_unlisted_dataset_is_no_proof(tmp_path):
    """A pointing table is proven by its dataset in the old metrics.json; without that it is kept, never guessed."""
    import json

    from xbench.schemas.paths import written_before

    (tmp_path / "metrics.json").write_text(json.dumps({"datasets": {"vindr": {}}}))
    (tmp_path / "table_pointing_vindr.csv").write_text("old")
    (tmp_path / "table_pointing_mimic.csv").write_text("mine?")
    assert written_before(tmp_path) == {"metrics.json", "table_pointing_vindr.csv"}
    (tmp_path / "metrics.json").write_text("[" * 100_000)  # a hostile old metrics.json proves nothing more
    assert written_before(tmp_path) == {"metrics.json"}
