"""The MedKLIP / MAVL entity vocabulary and MAVL's aspect layout (public facts, no description text).

The order of ``ENTITIES`` is the query order the released checkpoints were trained with
(``original_class`` in the official test scripts); the per-query classifier is shared, so the
order only matters for reading results back, but caches are always written in this order.
"""
from __future__ import annotations

ENTITIES: tuple[str, ...] = (
    "normal", "clear", "sharp", "sharply", "unremarkable", "intact", "stable", "free",
    "effusion", "opacity", "pneumothorax", "edema", "atelectasis", "tube", "consolidation",
    "process", "abnormality", "enlarge", "tip", "low", "pneumonia", "line", "congestion",
    "catheter", "cardiomegaly", "fracture", "air", "tortuous", "lead", "disease", "calcification",
    "prominence", "device", "engorgement", "picc", "clip", "elevation", "expand", "nodule", "wire",
    "fluid", "degenerative", "pacemaker", "thicken", "marking", "scar", "hyperinflate", "blunt",
    "loss", "widen", "collapse", "density", "emphysema", "aerate", "mass", "crowd", "infiltrate",
    "obscure", "deformity", "hernia", "drainage", "distention", "shift", "stent", "pressure",
    "lesion", "finding", "borderline", "hardware", "dilation", "chf", "redistribution",
    "aspiration", "tail_abnorm_obs", "excluded_obs",
)
assert len(ENTITIES) == 75

# MAVL's LLM-generated visual aspects per entity, in the order of its concept JSON
# (Pretrain/concept_gen/gpt4_mimic.json); query 0 of each entity is the entity description.
MAVL_ASPECTS: tuple[str, ...] = (
    "border", "fluid", "location", "opacity", "other", "patterns", "shape", "texture",
)
# Zero-shot grounding averages the maps of the description, patterns, shape and texture queries
# (Zero-shot_grounding/test.py, mode "avg": `[:, :, [0, 6, 7, 8]]`).
MAVL_GROUNDING_QUERIES: tuple[int, ...] = (0, 6, 7, 8)
