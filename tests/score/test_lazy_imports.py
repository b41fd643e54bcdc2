"""pandas and pyarrow are imported only when something is written (they cost 0.3-1 s of start-up), and a whole
xbench-score run writes everything without pandas."""

from __future__ import annotations

import subprocess
import sys


def test_scorer_modules_do_not_import_pandas_or_pyarrow():
    code = ("import sys\n"
            "import xbench.score.cli, xbench.score.scoring, xbench.score.outputs.folder, xbench.score.resampling.bootstrap, xbench.score.outputs.tables\n"
            "import xbench.score.warm\n"
            "print(sorted(m for m in ('pandas', 'pyarrow') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_building_a_table_still_imports_pandas():
    code = ("import sys\n"
            "from xbench.score.scoring import pairs_table\n"
            "t = pairs_table({}, {})\n"
            "print(type(t).__module__.split('.')[0], 'pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["pandas", "True"]


def test_writing_the_tables_needs_no_pandas(tmp_path):
    code = ("import sys\n"
            "from xbench.score.outputs.tables import write_tables\n"
            "m = {'overall': {'pointing_game': 0.5}, 'datasets': {'phantom': {'summary': {'pointing_game': 0.5}}}}\n"
            f"paths = write_tables({{'A': m}}, {str(tmp_path)!r})\n"
            "assert all(__import__(\"os\").path.getsize(p) > 0 for p in paths)\n"
            "print(len(paths), 'pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    n, pandas = out.stdout.split()
    assert int(n) >= 4 and pandas == "False"


def test_prefetch_writers_imports_the_parquet_writer_on_a_thread_only_when_called():
    code = ("import sys, threading\n"
            "from xbench.score.outputs.folder import prefetch_writers\n"
            "before = sorted(m for m in ('pandas', 'pyarrow.parquet') if m in sys.modules)\n"
            "t = prefetch_writers()\n"
            "assert t is not threading.current_thread() and t.daemon\n"
            "t.join()\n"
            "print(before, sorted(m for m in ('pandas', 'pyarrow.parquet') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] ['pyarrow.parquet']"


def test_a_whole_scoring_run_never_imports_pandas(tmp_path):
    """xbench-score writes metrics.json, pairs.parquet, pair_counts.npz and the tables with pyarrow and the
    standard library: pandas (0.3-0.5 s of one core) is never imported, and the pairs file still reads back
    with pandas' dtypes (see test_bounded_memory)."""
    from score_stores import make_gt, make_submission

    gt = make_gt(tmp_path / "gt.zarr", seed=7)
    make_submission(tmp_path / "a.zarr", gt, seed=8)
    code = ("import sys\n"
            "from xbench.score.cli import main\n"
            "try:\n"
            f"    main([{str(tmp_path / 'a.zarr')!r}, '--gt', {str(tmp_path / 'gt.zarr')!r}, '--out', "
            f"{str(tmp_path / 'res')!r}, '--bootstrap', '20', '--quiet'])\n"
            "except SystemExit as exc:\n"
            "    assert not exc.code, exc.code\n"
            "print(sorted(m for m in ('pandas', 'pyarrow.parquet') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(tmp_path))
    assert out.stdout.strip() == "['pyarrow.parquet']", out.stderr
    assert (tmp_path / "res" / "pairs.parquet").stat().st_size > 0
