"""The schema's versions, one table: which minor version of which store (or of metrics.json) added what.

As zarr-python keeps its format versions in one place, every ``*_MINOR`` constant of the project reads this
table (:func:`minor`), and each row scope's ``minor`` too, so a minor is written once. Schema 1 throughout;
a minor adds only what older readers may ignore (docs/contract.md, "Versions", says what each one added).
"""
from __future__ import annotations

__all__ = ["MINORS", "SCHEMA", "minor"]

#: the major schema of every store and of metrics.json (``xbench.schema``)
SCHEMA = 1

#: {(kind, what it added): the minor version that added it}. kind: a store's ``xbench.kind`` ("images",
#: "ground-truth", "submission") or "metrics" (metrics.json); contract order within each kind.
MINORS: dict[tuple[str, str], int] = {
    ("images", "originals"): 1,              # the original-resolution images (orig_offset, orig_pixels)
    ("images", "phrases"): 2,                # phrase rows (schemas/queries.py)
    ("images", "perturbations"): 3,          # the robustness track's perturbed copies
    ("images", "faithfulness"): 5,           # a round-2 store (xbench.faithfulness)
    ("ground-truth", "phrases"): 2,
    ("ground-truth", "perturbations"): 3,    # the perturbation table
    ("ground-truth", "text_probes"): 4,      # query_probe_of, query_probe_kind
    ("ground-truth", "gaze"): 5,             # the gaze arrays (schemas/gaze.py)
    ("ground-truth", "attributes"): 6,       # case attributes (schemas/attributes.py)
    ("submission", "phrases"): 1,
    ("submission", "scores_only"): 2,        # a scores-only (round-2) submission (xbench.scores_only)
    ("metrics", "phrases"): 2,               # the sections: each row scope's minor (score/sections/plugins/)
    ("metrics", "partial"): 3,               # the partial keys of a run on part of the cases
    ("metrics", "robustness"): 4,
    ("metrics", "text_probes"): 5,
    ("metrics", "human"): 6,
    ("metrics", "faithfulness"): 7,
    ("metrics", "gaze"): 8,
    ("metrics", "subgroups"): 9,
}


def minor(kind: str, feature: str) -> int:
    """The minor version of ``kind`` that added ``feature`` (a KeyError names a pair the table lacks)."""
    return MINORS[(kind, feature)]
