"""Map methods for dual encoders (CLIP family) as plug-ins: one module per method in this package.

Each public module here (a name without a leading underscore) defines ``METHOD``, a
:class:`MapMethod` carrying its function, a one-line description (provenance, model cards,
``--help``), its reference and its needs (what the vision tower must expose). Modules are found
by listing the package, so adding a method is one file (plus its test) and listing the names
imports neither torch nor the methods. Installed packages add methods through the ``xbench.methods``
entry point group (an entry names a :class:`MapMethod`; docs/explanation/architecture.md).

Every method works on a :class:`~xbench.extract.saliency._tower.VisionTower` (see that module
for the interface adapters implement) and returns ``(image_embedding (B, E), maps (B, C, h, w))``;
maps are raw (not normalised) and on the model frame's patch grid, row 0 = top; undoing
crop/padding is the adapter's job.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from xbench.schemas.registry import ENTRY_POINT_GROUPS, Registry

#: What a method may need from a tower (or its adapter), with the words an error message uses.
NEEDS = {
    "gradients": "gradients through the image tower",
    "value_path": "the value path of the last block (last_block_value)",
    "blocks": "per-block attention views of every block (embed + blocks)",
    "class_token": "a class token that pools the image",
    "empty_prompt": "the embedding of the empty prompt",
    "decoder": "a decoder VLM's answer position over its image tokens (extract/models/decoder)",
}


@dataclass(frozen=True)
class MapMethod:
    """A registered map method. ``run(tower, pixels, text, **extra)``; ``text`` (C, E) normalised."""

    name: str
    run: Callable[..., Any]
    description: str
    reference: str
    needs: frozenset = field(default_factory=frozenset)
    class_agnostic: bool = False  # the same map for every class

    def __post_init__(self) -> None:
        unknown = set(self.needs) - set(NEEDS)
        if unknown:
            raise ValueError(f"method {self.name!r}: unknown needs {sorted(unknown)}; known: {sorted(NEEDS)}")

    def __call__(self, tower, pixels, text, **extra):
        return self.run(tower, pixels, text, **extra)

    def missing(self, capabilities) -> list[str]:
        """The needs ``capabilities`` lacks, in words (empty when the method is supported)."""
        return [NEEDS[n] for n in sorted(self.needs) if n not in capabilities]


METHODS: Registry[MapMethod] = Registry("saliency method", check=MapMethod,
                                         entry_point_group=ENTRY_POINT_GROUPS["method"])
METHODS.discover(__name__, __path__, attr="METHOD")  # every public module here is a method


def method_names() -> list[str]:
    """Registered method names (no import of torch or of any method)."""
    return METHODS.names()


def __getattr__(name: str):  # the tower interface and helpers import torch: load on first use
    if name in ("VisionTower", "AttentionBlock", "capabilities", "patch_text_similarity"):
        from xbench.extract.saliency import _tower

        return getattr(_tower, name)
    if name in ("similarity", "maskclip", "gradcam"):
        return METHODS.get(name)
    raise AttributeError(name)


__all__ = ["METHODS", "NEEDS", "MapMethod", "method_names"]
