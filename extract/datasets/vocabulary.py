"""Moved to :mod:`xbench.schemas.vocabulary` (with ``findings.toml``), which readers and models both import;
this name stays so that existing ``from xbench.extract.datasets.vocabulary import ...`` keeps working."""
from xbench.schemas.vocabulary import *  # noqa: F401,F403
from xbench.schemas.vocabulary import __all__  # noqa: F401
