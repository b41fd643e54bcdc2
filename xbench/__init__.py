"""XBench: zero-shot recognition and grounding benchmark for chest X-ray VLMs."""
from xbench.schemas.version import __version__  # noqa: F401  (read from the installed metadata, one definition)
