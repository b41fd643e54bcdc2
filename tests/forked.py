"""Run many command lines, each in its own process forked from one driver, and measure each: exit code,
seconds, peak resident memory, stdout and stderr. The hostile-input tests of every command use it.

The driver imports the command's modules once, so forty runs cost seconds, not forty interpreter starts.
It is its own small process, not the pytest worker: a child's peak resident size counts the pages of the
process it was forked from, and a worker that has imported torch holds a gigabyte. Each child runs the
command as its program does (arguments from ``sys.argv``: ``--max-memory`` bounds the whole process) and
is killed when it outlives its time cap.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

DRIVER = textwrap.dedent("""
    import importlib, json, os, sys, time

    spec = json.loads(sys.argv[1])
    for name in spec["preload"]:
        importlib.import_module(name)


    def entry(path):
        module, _, attr = path.partition(":")
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


    def child(job):
        fd_out, fd_err = os.open(job["out"], os.O_WRONLY | os.O_CREAT), os.open(job["err"], os.O_WRONLY | os.O_CREAT)
        os.dup2(fd_out, 1)
        os.dup2(fd_err, 2)
        code = 1
        try:
            sys.argv = [job["prog"], *job["argv"]]
            entry(job["entry"]).main(prog_name=job["prog"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


    results = []
    for job in spec["jobs"]:
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            child(job)
        killed = False
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - t0 > job["cap"]:
                os.kill(pid, 9)
                killed = True
                _, status, usage = os.wait4(pid, 0)
                break
            time.sleep(0.01)
        results.append({"rc": os.waitstatus_to_exitcode(status), "seconds": time.monotonic() - t0,
                        "maxrss_mib": usage.ru_maxrss / 1024, "killed": killed})
    print(json.dumps(results))
""")


def run_forked(jobs: list[dict], tmp_path: Path, *, entry: str, prog: str, preload: tuple[str, ...] = (),
               cap: float = 60, timeout: float = 900) -> list[dict]:
    """Run each job (``{"argv": [...]}``, optionally its own ``entry``, ``prog`` and ``cap``) and return one
    result per job: ``rc``, ``seconds``, ``maxrss_mib``, ``killed``, ``stdout``, ``stderr``.

    ``entry``: ``"module:command"``, a click command of XBench's CLI layer (its ``main(prog_name=...)``);
    ``preload``: modules the driver imports before it forks."""
    for i, job in enumerate(jobs):
        job["out"], job["err"] = str(tmp_path / f"{i}.out"), str(tmp_path / f"{i}.err")
        job.setdefault("cap", cap)
        job.setdefault("entry", entry)
        job.setdefault("prog", prog)
    spec = {"preload": list(preload), "jobs": jobs}
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(spec)], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for job, res in zip(jobs, results):
        res["stdout"] = Path(job["out"]).read_text()
        res["stderr"] = Path(job["err"]).read_text()
    return results
