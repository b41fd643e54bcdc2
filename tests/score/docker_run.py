"""`docker run` with a bound (issue 35: the container tests ran past 25 minutes on a 2-core machine).

A `subprocess.run(["docker", "run", ...], timeout=...)` that times out kills the docker *client* only: the
container goes on scoring, holding the CPUs every later run then waits for, so one slow run made every
following one slower. Here each container has a name, and a run past its time is killed by that name
before the test fails with one line saying so.
"""
from __future__ import annotations

import itertools
import os
import subprocess
import time

# Seconds one container run may take: a scored run of the test fixture takes well under a minute with the
# image's cached kernels; XBENCH_CONTAINER_TIMEOUT raises it on a slow machine.
RUN_TIMEOUT = float(os.environ.get("XBENCH_CONTAINER_TIMEOUT", "300"))
_counter = itertools.count()


class ContainerTimeout(AssertionError):
    pass


def docker_run(argv: list[str], *, timeout: float | None = None, docker: str = "docker"):
    """Run `docker run ARGV...` under a name; returns (exit status, stdout, stderr, seconds). Past `timeout`
    seconds the container itself is killed (`docker kill NAME`) and ContainerTimeout is raised."""
    timeout = RUN_TIMEOUT if timeout is None else timeout
    name = f"xbench-test-{os.getpid()}-{next(_counter)}"
    t0 = time.monotonic()
    try:
        done = subprocess.run([docker, "run", "--name", name, *argv], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        subprocess.run([docker, "kill", name], capture_output=True, timeout=60)
        subprocess.run([docker, "rm", "-f", name], capture_output=True, timeout=60)
        raise ContainerTimeout(f"the container {name} ran past {timeout:.0f} s and was killed "
                               "(XBENCH_CONTAINER_TIMEOUT sets the bound)") from None
    return done.returncode, done.stdout, done.stderr, time.monotonic() - t0
