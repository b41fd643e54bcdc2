"""The one library entry point, xbench.score.run (score/entry.py): its doctest, the same files and numbers as the
command, nothing written without an output folder, and its refusals as typed errors."""
from __future__ import annotations

import doctest
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from score_stores import make_gt, make_submission, run_score_cli  # noqa: E402


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("entry")
    gt = make_gt(d / "gt.zarr")
    make_submission(d / "dog.zarr", gt, seed=3)
    make_submission(d / "b.zarr", gt, seed=4)
    return d


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _flat(value, prefix=""):
    """{dotted key: leaf} of a metrics.json, without its wall-clock timings and its recorded paths."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k not in ("timings", "inputs"):
                out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix: value}


def test_the_doctest_runs(stores):
    from xbench.score import entry

    finder = doctest.DocTestFinder()
    [test] = [t for t in finder.find(entry.run, "run", globs={"tmp": stores}) if t.examples]
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    result = runner.run(test)
    assert result.attempted >= 4 and result.failed == 0


def test_run_writes_what_the_command_writes(stores, tmp_path, capsys):
    """One submission: the same files, and metrics.json the same to the last bit but for the timings."""
    from xbench.score import ScoreOptions, run

    code, _, err = run_score_cli([stores / "dog.zarr", "--gt", stores / "gt.zarr", "--out", tmp_path / "cli",
                                  "--bootstrap", "20", "--seed", "5", "-q"], capsys)
    assert code == 0, err
    [scored] = run(ScoreOptions(gt_path=str(stores / "gt.zarr"), out_dir=tmp_path / "lib", bootstrap=20, seed=5),
                   [stores / "dog.zarr"])
    assert _listing(tmp_path / "cli") == _listing(tmp_path / "lib")
    assert scored.folder == tmp_path / "lib" and scored.report is None and scored.name == "dog"
    assert sorted(p.name for p in scored.files) == sorted(p.name for p in (tmp_path / "lib").iterdir()
                                                          if p.name != "xbench-output.json")
    cli, lib = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("cli", "lib"))
    assert _flat(cli) == _flat(lib)
    assert _flat(scored.result.metrics).keys() == _flat(lib).keys()


def test_without_an_output_folder_nothing_is_written_and_the_numbers_are_the_same(stores, tmp_path):
    from xbench.score import ScoreOptions, run
    from xbench.score.scoring import score_submission

    before = _listing(stores)
    done = run(ScoreOptions(gt_path=str(stores / "gt.zarr"), out_dir=None, bootstrap=0),
               [stores / "dog.zarr", stores / "b.zarr"], labels=["first", "second"])
    assert _listing(stores) == before
    assert [s.label for s in done] == ["first", "second"] and [s.folder for s in done] == [None, None]
    for s, name in zip(done, ("dog", "b")):
        direct = score_submission(stores / f"{name}.zarr", stores / "gt.zarr", bootstrap=0)
        got, want = _flat(s.result.metrics), _flat(direct.metrics)
        assert got.keys() == want.keys()
        for k, v in want.items():
            if isinstance(v, float):
                assert np.isclose(got[k], v, rtol=0, atol=0, equal_nan=True), k
            else:
                assert got[k] == v, k


def test_several_submissions_get_folders_a_report_and_callbacks_in_order(stores, tmp_path):
    from xbench.score import ScoreOptions, run

    seen, bars = [], []

    class Bar:
        def __init__(self, name):
            self.name, self.done, self.total, self.closed = name, 0, None, False
            bars.append(self)

        def update(self, n=1):
            self.done += n

        def set_total(self, n):
            self.total = n

        def close(self):
            self.closed = True

    done = run(ScoreOptions(gt_path=str(stores / "gt.zarr"), out_dir=tmp_path / "out", bootstrap=0),
               [stores / "dog.zarr", stores / "b.zarr"], progress=Bar, on_scored=lambda s: seen.append(s.name),
               say=pytest.fail)
    assert seen == ["dog", "b"] and [b.name for b in bars] == ["dog", "b"]
    assert all(b.closed and b.total == b.done and b.total > 0 for b in bars)
    assert [s.folder for s in done] == [tmp_path / "out" / "dog", tmp_path / "out" / "b"]
    assert all(s.report == tmp_path / "out" for s in done) and (tmp_path / "out" / "report.json").is_file()


def test_refusals_are_typed_errors_before_anything_is_written(stores, tmp_path):
    from xbench.score import ScoreOptions, run
    from xbench.score.entry import ScoreRunError

    gt = str(stores / "gt.zarr")
    cases = [
        (ScoreOptions(gt_path=gt, out_dir=stores / "dog.zarr"), [stores / "dog.zarr"], "is submission", None),
        (ScoreOptions(gt_path=gt, out_dir=tmp_path / "o", thresholds_from=stores), [stores / "dog.zarr"],
         "a folder without metrics.json", None),
        (ScoreOptions(gt_path=str(stores / "dog.zarr"), out_dir=tmp_path / "o"), [stores / "gt.zarr"],
         "--gt", "nothing was written"),
        (ScoreOptions(gt_path=gt, out_dir=tmp_path / "o"), [], "no submission to score", None),
    ]
    for options, subs, needle, hint in cases:
        with pytest.raises(ScoreRunError) as err:
            run(options, subs)
        assert any(needle in str(p) for p in err.value.problems), err.value.problems
        if hint:
            assert err.value.hint == hint
    with pytest.raises(ScoreRunError, match="1 label"):
        run(ScoreOptions(gt_path=gt, out_dir=None), [stores / "dog.zarr", stores / "b.zarr"], labels=["x"])
    assert not (tmp_path / "o").exists()


def test_the_command_keeps_its_refusal_lines(stores, tmp_path, capsys):
    """The command turns the library's refusal into its own lines: the problem, then the hint."""
    code, _, err = run_score_cli([stores / "gt.zarr", "--gt", stores / "dog.zarr", "--out", tmp_path / "o"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[-1].endswith("nothing was written") and "--gt" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
