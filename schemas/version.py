"""The toolkit's version, stamped into every store and metrics.json it writes (``"xbench": {"version": ...}``).

It lives in the contract's layer because both sides stamp it (``xbench.extract`` into submission.zarr and
its environment record, ``xbench.score`` into metrics.json) and neither may import the umbrella; ``xbench``
itself re-exports it as ``xbench.__version__``.
"""
from importlib.metadata import PackageNotFoundError, version

try:  # the version lives in one place, pyproject.toml; every other place reads it from the installed metadata
    __version__ = version("xbench-cxr")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
