"""Fill Numba's cache with the scorer's kernels before the first run needs them.

The scorer's kernels take ~6 s (counting) and ~2 s (ranking) of one core to compile, once per install and
machine (:mod:`._numba_cache` says where the cache lives). Two ways to pay that early, on several cores:

* ``xbench warm`` (run by ``make install`` and the evaluation image's build): compiles every kernel ``xbench-score``
  uses, one child process per kernel, so the first real run finds them all cached;
* :func:`start_background_warm`, called by the scorer itself: when the ranking kernel is not cached yet,
  a child process compiles it while the scorer validates, reads and compiles the counting kernel.

The children compile by calling the public wrappers on tiny inputs with the scorer's own dtypes and
layouts, so the cached signatures are exactly the ones a run asks for.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

import click

from xbench.schemas._cli import command
from xbench.schemas.options import Flag, click_options, opt, parse
from xbench.score.metrics.params import POINTING_TOLERANCE

__all__ = ["JOBS", "cache_folder", "compile_job", "warm_cache", "start_background_warm", "warm"]

#: What each child compiles: the counting kernel of each resize path, the ranking kernel, and the gaze
#: section's two AUC kernels (kernels/saliency.py).
JOBS = ("bilinear", "rank", "area", "gaze")


def compile_job(job: str) -> None:
    """Compile one kernel (see :data:`JOBS`) in this process, for the signatures the scorer uses."""
    import numpy as np

    from xbench.score.kernels import maps as K
    from xbench.score.kernels.counts import count_dtype

    if job == "rank":
        K.weighted_auroc_ap(np.ones((2, 4)), np.array([0, 1, 0, 1]), np.array([0.1, 0.4, 0.4, 0.9]))
        return
    if job == "gaze":  # through the measures, with the dtypes the gaze section passes
        from xbench.score.metrics import gaze as G

        m = np.linspace(0.0, 1.0, 16).reshape(4, 4)
        G.auc_judd(m, np.array([1]), np.array([2]))
        G.auc_shuffled(m, np.array([1]), np.array([2]), np.ones((4, 4), np.int64))
        return
    if job not in ("bilinear", "area"):
        raise ValueError(f"unknown job {job!r}; expected one of {', '.join(JOBS)}")
    grid = (224, 224)
    shape = (14, 14) if job == "bilinear" else (448, 448)
    dtype = count_dtype(grid)  # what the scorer stores (uint16 on grids of up to 65,535 cells)
    P = 2
    maps = np.zeros((P, *shape), np.float32)
    maps[:, 0, 0] = 1.0
    masks = np.zeros((P, *grid), bool)
    masks[:, 0, 0] = True
    out = K.GroundingCounts(np.empty((P, K.N_THRESHOLDS), dtype), np.empty((P, K.N_THRESHOLDS), dtype),
                            np.empty(P, bool), np.empty(P, np.int32), np.empty(P), np.empty(P, np.int32),
                            np.empty(P, bool))  # the scorer's full set, so the tolerant kernel compiles too
    K.count_pairs_into(maps, masks, np.arange(P, dtype=np.int64), K.resize_plan(shape, grid), out,
                       cell=np.ones((P, 2)), tolerance=POINTING_TOLERANCE.default)


def _child(job: str) -> list[str]:
    return [sys.executable, "-c", f"from xbench.score.warm import compile_job; compile_job({job!r})"]


def warm_cache(jobs: tuple[str, ...] = JOBS, processes: int | None = None) -> float:
    """Compile ``jobs`` in child processes, at most ``processes`` at a time (default: the usable cores).

    Returns the wall seconds. Raises ``RuntimeError`` naming the job whose child failed.
    """
    if processes is None:
        processes = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    from xbench.score.kernels import maps as kernels  # noqa: F401  (chooses the cache directory and exports it to the children)

    t0 = time.perf_counter()
    todo, running = list(jobs), []
    while todo or running:
        while todo and len(running) < max(1, processes):
            job = todo.pop(0)
            running.append((job, subprocess.Popen(_child(job), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
        job, proc = running.pop(0)
        _, err = proc.communicate()
        if proc.returncode != 0:
            for _, other in running:
                other.kill()
            raise RuntimeError(f"compiling the {job} kernel failed: {err.decode(errors='replace').strip()}")
    return time.perf_counter() - t0


def _is_cached(dispatcher) -> bool:
    """Whether Numba's cache holds any entry for ``dispatcher``'s current source (private API, fenced:
    on any surprise answer True, so that nothing is started)."""
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except Exception:
        return True


def start_background_warm() -> subprocess.Popen | None:
    """When the ranking kernel is not cached, compile it in a child process and return that process.

    The scorer calls this first thing: the ranking kernel is needed only after every map has been counted,
    so the child (one core, ~2 s) is long done by then and the scorer loads its result from the cache
    instead of compiling it after the counting kernel. Returns None when there is nothing to do.
    """
    from xbench.score.kernels import maps as K

    if os.environ.get("NUMBA_DISABLE_JIT") == "1" or _is_cached(K._ranked_replicates):
        return None
    try:
        return subprocess.Popen(_child("rank"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None  # the scorer then compiles it itself when needed


def cache_folder() -> str:
    """Where the kernels are cached: ``$NUMBA_CACHE_DIR`` (or the per-user folder when the install cannot be
    written), else Numba's default, a ``__pycache__`` beside the kernels' sources (``score/kernels/``, not this
    module's folder)."""
    from xbench.score import kernels
    from xbench.score.kernels._numba_cache import choose_cache_dir

    sources = os.path.dirname(os.path.abspath(kernels.__file__))
    where = choose_cache_dir(sources)
    return str(where) if where is not None else os.path.join(sources, "__pycache__")


@dataclass(kw_only=True)
class WarmOptions:
    """What ``xbench warm [KERNEL...]`` takes besides the kernels (the fields are its options)."""

    quiet: bool = opt(False, check=Flag(), short="-q", help="Print nothing.")
    as_json: bool = opt(False, check=Flag(), flag="--json",
                        help="Print the kernels compiled, the seconds and the cache folder as JSON.")


@command("warm")
@click.argument("kernels", nargs=-1, type=click.Choice(JOBS))
@click_options(WarmOptions)
def warm(kernels, **params):
    """Compile the scorer's Numba kernels into Numba's cache now, so no scoring run pays for it.

    Each KERNEL (default: all of them) compiles in its own child process, on the usable cores. Run it once
    after installing: `make install` runs it, and so does the evaluation image's build
    (platforms/grand-challenge/Dockerfile), where NUMBA_CPU_NAME=generic keys the cache to any x86-64 CPU.

    \b
    Examples:
      xbench warm                 # every kernel xbench-score uses
      xbench warm rank --json     # one kernel; the result as JSON
    """
    o = parse(WarmOptions, params)
    import json

    jobs = tuple(dict.fromkeys(kernels)) or JOBS
    try:
        seconds = warm_cache(jobs)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    where = cache_folder()
    if o.as_json:
        click.echo(json.dumps({"compiled": list(jobs), "seconds": round(seconds, 3), "cache": where}))
    elif not o.quiet:
        click.echo(f"compiled {', '.join(jobs)} in {seconds:.1f} s; the kernels are cached in {where}")
