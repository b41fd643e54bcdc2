"""Where Numba keeps its compiled kernels.

Numba's ``cache=True`` writes next to the source file (``__pycache__``). When the installed package is
read-only (a system site-packages, a container image), every run would recompile, so we point Numba at a
per-user cache directory instead: ``$NUMBA_CACHE_DIR`` when the user set it, otherwise
``$XDG_CACHE_HOME/xbench/numba`` (``~/.cache/xbench/numba``). This module must be imported before any
``@numba.njit(cache=True)`` decorator runs, because Numba picks the cache location at decoration time.

It also trims Numba's start-up (:func:`import_numba_without_blas_probe`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["choose_cache_dir", "configure_numba_cache", "disable_numba_caching", "import_numba_without_blas_probe"]


def _user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xbench" / "numba"


def choose_cache_dir(package_dir: str | os.PathLike, *, writable: bool | None = None) -> Path | None:
    """Return the directory Numba should cache into, or ``None`` to keep Numba's in-tree default.

    Parameters
    ----------
    package_dir : path
        The folder holding the kernel sources.
    writable : bool, optional
        Whether ``package_dir`` is writable; probed with :func:`os.access` when omitted (tests pass it).
    """
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"])
    if writable is None:
        pycache = Path(package_dir) / "__pycache__"
        probe = pycache if pycache.exists() else Path(package_dir)
        writable = os.access(probe, os.W_OK)
    return None if writable else _user_cache_dir()


def configure_numba_cache(package_dir: str | os.PathLike) -> Path | None:
    """Point Numba at :func:`choose_cache_dir` (env var and live config); return the directory used.

    When that directory cannot be written (a read-only home, a bad ``$NUMBA_CACHE_DIR``), a per-user folder
    under the system's temp directory is used; when nothing at all is writable, caching is turned off for
    this process, so kernels compile in memory on each run instead of failing with "cannot cache function".
    """
    chosen = choose_cache_dir(package_dir)
    if chosen is None:
        return None
    for candidate in (chosen, _temp_cache_dir()):
        if _usable(candidate):
            os.environ["NUMBA_CACHE_DIR"] = str(candidate)
            import numba.core.config as numba_config  # already imported by numba itself; reading env is too late

            numba_config.CACHE_DIR = str(candidate)
            return candidate
    disable_numba_caching()
    return None


def _temp_cache_dir() -> Path:
    import tempfile

    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"xbench-numba-{uid}"


def _usable(folder: Path) -> bool:
    """Whether ``folder`` can be created and written (tried, as Numba does: access() misleads for root)."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def disable_numba_caching() -> None:
    """Make ``cache=True`` a no-op in this process: Numba then keeps its compiled code in memory only.

    Numba decides at decoration time, in ``Dispatcher.enable_caching``; without it the dispatcher keeps the
    null cache it starts with.
    """
    from numba.core import dispatcher

    dispatcher.Dispatcher.enable_caching = lambda self: None


_BLAS_PROBE = "scipy.linalg.cython_blas"


def import_numba_without_blas_probe() -> bool:
    """Import ``numba.np.arraymath`` while the SciPy BLAS probe in its module body fails; return whether it did.

    Numba imports that module on its first compilation or cache load, and the module body imports all of
    ``scipy.linalg`` (60-110 ms measured here, about half of Numba's start-up and the largest single part
    of the scorer's first kernel call) only to decide whether ``np.correlate``/``np.convolve`` inside jitted
    code may call BLAS. Our kernels use neither, nor any BLAS. With the probe failed those two fall back to
    Numba's own loop in this process; everything else, ``np.dot`` and ``np.linalg`` included, still imports
    SciPy when first compiled, so no feature is lost. Does nothing when SciPy's linalg or the module is
    already imported (then there is nothing to save, or it is too late).
    """
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules or _BLAS_PROBE in sys.modules:
        return False
    sys.modules[_BLAS_PROBE] = None  # type: ignore[assignment]  # makes `import` raise ImportError at once
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules[_BLAS_PROBE]
    return True
