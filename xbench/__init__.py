"""XBench: zero-shot recognition and grounding benchmark for chest X-ray VLMs."""
from importlib.metadata import PackageNotFoundError, version

try:  # the version lives in one place, pyproject.toml; every other place reads it from the installed metadata
    __version__ = version("xbench-cxr")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
