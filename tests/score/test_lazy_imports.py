"""pandas and pyarrow are imported only when something is written (they cost 0.3-1 s of start-up)."""

from __future__ import annotations

import subprocess
import sys


def test_scorer_modules_do_not_import_pandas_or_pyarrow():
    code = ("import sys\n"
            "import xbench.score.cli, xbench.score.scoring, xbench.score.outputs, xbench.score.bootstrap, xbench.score.tables\n"
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
            "from xbench.score.tables import write_tables\n"
            "m = {'overall': {'pointing_game': 0.5}, 'datasets': {'phantom': {'summary': {'pointing_game': 0.5}}}}\n"
            f"paths = write_tables({{'A': m}}, {str(tmp_path)!r})\n"
            "assert all(__import__(\"os\").path.getsize(p) > 0 for p in paths)\n"
            "print(len(paths), 'pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    n, pandas = out.stdout.split()
    assert int(n) >= 4 and pandas == "False"


def test_prefetch_writers_imports_them_on_a_thread_only_when_called():
    code = ("import sys, threading\n"
            "from xbench.score.outputs import prefetch_writers\n"
            "before = sorted(m for m in ('pandas', 'pyarrow.parquet') if m in sys.modules)\n"
            "t = prefetch_writers()\n"
            "assert t is not threading.current_thread() and t.daemon\n"
            "t.join()\n"
            "print(before, sorted(m for m in ('pandas', 'pyarrow.parquet') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] ['pandas', 'pyarrow.parquet']"
