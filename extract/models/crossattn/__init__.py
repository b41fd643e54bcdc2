"""Knowledge-enhanced query-decoder models whose grounding map is the decoder's cross-attention.

One module per model (``medklip``, ``kad``, ``mavl``, ``carzero``, ``devide``), each exposing
``build(config) -> ModelAdapter``; shared building blocks live in ``common``. Modules are
imported lazily by the model registry, so importing this package costs nothing.

The networks are written in this project; their module and parameter names follow the official
repositories exactly so that the released checkpoints load with ``strict=True`` once the
documented prefixes are stripped (see each model card under ``model_cards/``).
"""
