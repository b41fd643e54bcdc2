"""Moved to :mod:`xbench.schemas.registry` (the shared layer, so ``score`` uses the same one); kept so that
``from xbench.extract.registry import Registry, UnknownNameError`` goes on working."""
from __future__ import annotations

from ..schemas.registry import PluginError, Registry, UnknownNameError, import_target

__all__ = ["PluginError", "Registry", "UnknownNameError", "import_target"]
