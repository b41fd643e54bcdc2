"""Run ``xbench-extract`` as a program and measure it: exit code, seconds, peak resident memory of the command's
own process, stdout and stderr. ``no_torch=True`` puts a ``torch`` package first on the path whose import
exits 99, so a run that imports torch before it refuses the input is caught.

The command is started by a small driver process, not by pytest: a child's peak resident size counts the
pages of the process it was forked from until it execs, and a pytest process that has imported torch holds
a gigabyte."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

FAKE_TORCH = "import sys\nsys.stderr.write('TORCH WAS IMPORTED\\n')\nsys.stderr.flush()\nimport os\nos._exit(99)\n"

DRIVER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    job = json.loads(sys.argv[1])
    with open(job["out"], "wb") as fo, open(job["err"], "wb") as fe:
        t0 = time.monotonic()
        proc = subprocess.Popen(job["argv"], stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, cwd=job["cwd"])
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > job["cap"]:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
    print(json.dumps({"rc": proc.returncode, "seconds": time.monotonic() - t0, "maxrss_mib": usage.ru_maxrss / 1024}))
""")


@dataclass
class Run:
    rc: int
    seconds: float
    maxrss_mib: float
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stderr.strip().splitlines()


def run_extract(args, tmp_path: Path, *, no_torch: bool = False, cap_s: float = 120.0) -> Run:
    """``python -m xbench.extract.cli ARGS`` in ``tmp_path``; killed after ``cap_s`` seconds (rc -9)."""
    environ = dict(os.environ)
    if no_torch:
        fake = tmp_path / "_fake_torch"
        (fake / "torch").mkdir(parents=True, exist_ok=True)
        (fake / "torch" / "__init__.py").write_text(FAKE_TORCH)
        environ["PYTHONPATH"] = os.pathsep.join([str(fake), environ.get("PYTHONPATH", "")])
    out, err = tmp_path / "_stdout", tmp_path / "_stderr"
    job = {"argv": [sys.executable, "-m", "xbench.extract.cli", *map(str, args)], "out": str(out), "err": str(err),
           "cwd": str(tmp_path), "cap": cap_s}
    driver = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(job)], capture_output=True, text=True,
                            env=environ, timeout=cap_s + 60)
    assert driver.returncode == 0, driver.stderr[-2000:]
    res = json.loads(driver.stdout.strip().splitlines()[-1])
    return Run(res["rc"], res["seconds"], res["maxrss_mib"], out.read_text(errors="replace"),
               err.read_text(errors="replace"))


