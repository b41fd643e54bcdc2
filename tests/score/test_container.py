"""The grand-challenge evaluation image run as the platform runs it: no network, /input read-only, a user id
the image does not know, every capability dropped; the ground truth baked into the image or mounted where the
platform puts it; valid and hostile submissions. Needs a Docker daemon and the image `make container` builds
($XBENCH_EVAL_IMAGE, default xbench-eval); skipped, with the reason, where either is missing."""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import zarr

from docker_run import docker_run
from score_stores import make_gt, make_submission

IMAGE = os.environ.get("XBENCH_EVAL_IMAGE", "xbench-eval")
USER = "54321:54321"  # not the image's own user: the platform may pick any


@functools.cache
def _docker_skip_reason() -> str | None:
    """Asked once per process (each xdist worker imports this module)."""
    if shutil.which("docker") is None:
        return "no docker command on this machine"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed ({exc})"
    if info.returncode != 0:
        return "no Docker daemon answers (start dockerd)"
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=30).returncode != 0:
        return f"the image {IMAGE} is not built (run `make container`)"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.skipif(_docker_skip_reason() is not None,
                                                   reason=str(_docker_skip_reason()))]


def _readable(path: Path) -> None:
    """Open to the container's unprivileged user (pytest's folders are private to their owner)."""
    for p in [path, *path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def _zip_contents(store: Path, dst: Path) -> None:
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zf:
        for p in sorted(store.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(store).as_posix())


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """gt.zarr (+ .zarr.zip), a derived image with that ground truth baked in, and one folder per case."""
    d = tmp_path_factory.mktemp("container")
    gt = make_gt(d / "gt.zarr", seed=31)
    make_submission(d / "sub.zarr", gt, seed=32)
    _zip_contents(d / "gt.zarr", d / "gt.zarr.zip")
    cases = d / "cases"

    def case(name):
        (cases / name).mkdir(parents=True)
        return cases / name

    shutil.copytree(d / "sub.zarr", case("valid-dir") / "team.zarr")
    _zip_contents(d / "sub.zarr", case("valid-zip") / "team.zarr.zip")
    shutil.copytree(d / "sub.zarr", case("extracted-zip"), dirs_exist_ok=True)  # the platform unzipped the upload
    shutil.copytree(d / "sub.zarr", case("nan-maps") / "team.zarr")
    g = zarr.open_group(str(cases / "nan-maps" / "team.zarr"), mode="r+")
    block = g["phantom/saliency"][0:2]
    block[0, 0, 0, 0] = np.nan
    g["phantom/saliency"][0:2] = block
    with zipfile.ZipFile(case("zip-slip") / "team.zarr.zip", "w") as zf:
        zf.writestr("../../escaped.txt", "should never be extracted")
        zf.writestr("zarr.json", "{not json")
    (case("not-a-zip") / "team.zarr.zip").write_bytes(b"PK\x03\x04 this is not a zip")
    case("empty")
    shutil.copytree(d / "sub.zarr", case("two") / "a.zarr")
    shutil.copytree(d / "sub.zarr", cases / "two" / "b.zarr")
    mounted = d / "ground_truth"
    mounted.mkdir()
    shutil.copytree(d / "gt.zarr", mounted / "gt.zarr")
    _readable(d)
    # the organiser's way of baking the ground truth in: one layer on top of the built image
    ctx = d / "bake"
    ctx.mkdir()
    shutil.copy(d / "gt.zarr.zip", ctx / "gt.zarr.zip")
    (ctx / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY gt.zarr.zip /opt/xbench/gt.zarr.zip\n")
    baked = f"{IMAGE}-test-gt:{os.getpid()}"
    built = subprocess.run(["docker", "build", "-q", "-t", baked, str(ctx)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    yield {"root": d, "cases": cases, "mounted": mounted, "baked": baked}
    subprocess.run(["docker", "rmi", "-f", baked], capture_output=True, timeout=120)


def run_container(image: str, inp: Path, out: Path, *, gt: Path | None = None, env: dict | None = None):
    """`docker run` as grand-challenge runs an evaluation; returns (exit status, stdout, stderr, seconds)."""
    out.mkdir()
    out.chmod(0o777)
    argv = ["--rm", "--network", "none", "--user", USER, "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--memory", "4g",
            "-v", f"{inp}:/input:ro", "-v", f"{out}:/output"]
    if gt is not None:
        argv += ["-v", f"{gt}:/opt/ml/input/data/ground_truth:ro"]
    for k, v in (env or {}).items():
        argv += ["-e", f"{k}={v}"]
    return docker_run([*argv, image])  # killed by name past XBENCH_CONTAINER_TIMEOUT (docker_run.py)


EXPECT = {  # case -> (exit status, text the last stderr line must hold; None = scored)
    "valid-dir": (0, None),
    "valid-zip": (0, None),
    "extracted-zip": (0, None),
    "nan-maps": (2, "invalid submission: "),
    "zip-slip": (2, "invalid submission: "),
    "not-a-zip": (2, "invalid submission: "),
    "empty": (2, "expected exactly one submission"),
    "two": (2, "expected exactly one submission"),
}


@pytest.mark.parametrize("name", list(EXPECT))
def test_the_image_scores_or_refuses_like_the_platform_expects(world, tmp_path, name):
    code, _, err, seconds = run_container(world["baked"], world["cases"] / name, tmp_path / "output",
                                          env={"XBENCH_BOOTSTRAP": "50"})
    want_code, want_reason = EXPECT[name]
    assert code == want_code, err[-3000:]
    out = tmp_path / "output"
    if want_reason is None:
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["xbench"]["gt_sha256"] and {"pointing_game", "pointing_game_error"} <= set(metrics["aggregates"])
        assert metrics["case"] and metrics["xbench"]["bootstrap"]["n_resamples"] == 50
    else:
        last = err.strip().splitlines()[-1]
        assert want_reason in last, err[-3000:]
        assert "Traceback" not in err and os.listdir(out) == []
    assert not (world["root"] / "escaped.txt").exists()
    print(f"{name}: exit {code} in {seconds:.1f} s")


def test_a_mounted_ground_truth_gives_the_baked_ones_scores_from_the_cached_kernels(world, tmp_path):
    """The same submission against the ground truth mounted where the platform puts it: same metrics; and the
    kernels come from the image's cache (NUMBA_DEBUG_CACHE reports loads, no compiled-and-saved kernel)."""
    inp = world["cases"] / "valid-dir"
    code, _, err, _ = run_container(world["baked"], inp, tmp_path / "baked", env={"XBENCH_BOOTSTRAP": "0"})
    assert code == 0, err[-3000:]
    code, stdout, err, seconds = run_container(IMAGE, inp, tmp_path / "mounted", gt=world["mounted"],
                                               env={"XBENCH_BOOTSTRAP": "0", "NUMBA_DEBUG_CACHE": "1"})
    assert code == 0, err[-3000:]
    baked = json.loads((tmp_path / "baked" / "metrics.json").read_text())
    mounted = json.loads((tmp_path / "mounted" / "metrics.json").read_text())
    assert baked["overall"] == mounted["overall"] and baked["xbench"]["gt_sha256"] == mounted["xbench"]["gt_sha256"]
    assert "data loaded" in stdout and "data saved" not in stdout, stdout[-3000:]
    print(f"mounted ground truth, no bootstrap: {seconds:.1f} s")


def test_without_a_ground_truth_the_last_line_says_where_to_put_it(world, tmp_path):
    probe = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "test", IMAGE, "-e",
                            "/opt/xbench/gt.zarr.zip"], capture_output=True, timeout=120)
    if probe.returncode == 0:
        pytest.skip(f"{IMAGE} has a ground truth baked in")
    code, _, err, _ = run_container(IMAGE, world["cases"] / "valid-dir", tmp_path / "output")
    assert code == 2 and err.strip().splitlines()[-1].startswith("no ground truth"), err[-2000:]


def test_the_codabench_image_runs_a_competitions_scoring_program_as_codabench_does(world, tmp_path):
    """`make container`'s TAG-codabench image, run as Codabench's compute worker runs a scoring step: the
    program, input (res + ref) and output folders mounted under /app, the worker's capabilities dropped,
    the command from the program's metadata.yaml with $program/$input/$output replaced."""
    from click.testing import CliRunner

    from xbench.package import package

    image = f"{IMAGE}-codabench"
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=30).returncode != 0:
        pytest.skip(f"the image {image} is not built (run `make container`)")
    make_gt(tmp_path / "val.zarr", seed=33)  # the validation phase's ground truth: not scored here
    bundle = tmp_path / "competition.zip"
    res = CliRunner().invoke(package, ["codabench-competition", "--gt-validation", str(tmp_path / "val.zarr"),
                                       "--gt-test", str(world["root"] / "gt.zarr"), "--docker-image", image,
                                       "--bootstrap", "40", "--validation-start", "2027-01-04",
                                       "--test-start", "2027-03-01", "--out", str(bundle)])
    assert res.exit_code == 0, res.output
    app = tmp_path / "app"
    with zipfile.ZipFile(bundle) as zf:
        zipfile.ZipFile(zf.open("scoring_program.zip")).extractall(app / "program")
        zipfile.ZipFile(zf.open("reference_data_test.zip")).extractall(app / "input" / "ref")
    shutil.copytree(world["cases"] / "valid-zip", app / "input" / "res")
    (app / "output").mkdir()
    command = (app / "program" / "metadata.yaml").read_text().split("command:", 1)[1].strip()
    for var, path in (("$program", "/app/program"), ("$input", "/app/input"), ("$output", "/app/output")):
        command = command.replace(var, path)
    drop = ["AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
            "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"]
    argv = ["--rm", "--network", "none", "--security-opt", "no-new-privileges", "-w", "/app/program",
            *(f"--cap-drop={c}" for c in drop), "-e", "PYTHONUNBUFFERED=1",
            "-v", f"{app / 'program'}:/app/program", "-v", f"{app / 'input'}:/app/input",
            "-v", f"{app / 'output'}:/app/output", image, *command.split()]
    code, _, err, _ = docker_run(argv)
    assert code == 0, err[-3000:]
    scores = json.loads((app / "output" / "scores.json").read_text())
    metrics = json.loads((app / "output" / "metrics.json").read_text())
    assert metrics["xbench"]["bootstrap"]["n_resamples"] == 40
    assert scores["pointing_game"] == metrics["overall"]["pointing_game"] and "pointing_game_ci_low" in scores
