"""The bound on container runs (docker_run.py), with a stand-in `docker` command: no daemon needed."""
from __future__ import annotations

import time

import pytest

from docker_run import ContainerTimeout, docker_run

FAKE = """#!/bin/sh
echo "$@" >> "{log}"
case "$1" in
  run) shift 3; if [ "$1" = slow ]; then sleep 30; fi; echo scored; exit 0 ;;
  kill|rm) exit 0 ;;
esac
"""


@pytest.fixture
def fake_docker(tmp_path):
    exe = tmp_path / "docker"
    exe.write_text(FAKE.format(log=tmp_path / "calls.log"))
    exe.chmod(0o755)
    return exe, tmp_path / "calls.log"


def test_a_run_within_its_time_returns_status_and_output(fake_docker):
    exe, log = fake_docker
    code, out, _, seconds = docker_run(["fast"], docker=str(exe), timeout=20)
    assert (code, out.strip()) == (0, "scored") and seconds < 20
    (call,) = log.read_text().splitlines()
    assert call.startswith("run --name xbench-test-") and call.endswith(" fast")


def test_a_run_past_its_time_kills_the_container_by_name(fake_docker):
    exe, log = fake_docker
    t0 = time.monotonic()
    with pytest.raises(ContainerTimeout, match="ran past 1 s and was killed"):
        docker_run(["slow"], docker=str(exe), timeout=1)
    assert time.monotonic() - t0 < 15
    run, kill, rm = log.read_text().splitlines()
    name = run.split()[2]
    assert kill == f"kill {name}" and rm == f"rm -f {name}"
