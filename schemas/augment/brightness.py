"""``brightness:delta=16``: add ``delta`` grey levels to every pixel (then round half to even, clip to 0..255).
Brighter is denser in images.zarr's convention, so a positive delta is an under-exposed film."""
from __future__ import annotations

import numpy as np

from xbench.schemas.augment._base import Augmentation, Param


def image(img: np.ndarray, params, seed: int) -> np.ndarray:
    # per grey level (a 256-entry table): the same numbers as per pixel, without a float copy of a large original
    levels = np.arange(256, dtype=np.float64)
    return np.clip(np.rint(levels + params["delta"]), 0, 255).astype(np.uint8)[img]


AUGMENTATION = Augmentation(
    "brightness", "add a grey-level offset",
    params=(Param("delta", float, 16.0, -255.0, 255.0, "grey levels added"),),
    image=image)
