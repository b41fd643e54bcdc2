"""``attention``: a decoder VLM's attention from the answer position to the image tokens, heads and a stated
layer range averaged (issue 45). Only decoder VLMs run it: their adapter computes it in
:mod:`xbench.extract.models.decoder.maps` (the ``rollout``, ``chefer`` and ``gradcam`` names there are the
decoder forms of the methods of the same names, read at the answer position)."""
from __future__ import annotations

from xbench.extract.saliency import MapMethod


def run(adapter, pixels, text=None):
    """``adapter``: a decoder VLM's adapter (its model, prompts and layers), ``pixels`` its model inputs;
    returns (scores (B, C), maps (B, C, N)) over the vision tokens. ``text`` is unused (the prompts are the
    adapter's)."""
    from xbench.extract.models.decoder.maps import METHODS

    return METHODS["attention"](adapter, pixels)


METHOD = MapMethod(
    name="attention", run=run,
    description=("decoder VLMs: the answer position's attention over the image tokens, heads and stated layers "
                 "averaged (their rollout, chefer, gradcam are the decoder forms: extract/models/decoder/maps.py)"),
    reference="Abnar & Zuidema 2020 (attention as explanation); issue 45 of XBench (answer-position rows)",
    needs=frozenset({"decoder"}))
