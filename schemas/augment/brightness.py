"""``brightness:delta=16``: add ``delta`` grey levels to every pixel (then round half to even, clip to 0..255).
Brighter is denser in images.zarr's convention, so a positive delta is an under-exposed film."""
from __future__ import annotations

import numpy as np

from ._base import Augmentation, Param


def image(img: np.ndarray, params, seed: int) -> np.ndarray:
    return np.clip(np.rint(img.astype(np.float64) + params["delta"]), 0, 255).astype(np.uint8)


AUGMENTATION = Augmentation(
    "brightness", "add a grey-level offset",
    params=(Param("delta", float, 16.0, -255.0, 255.0, "grey levels added"),),
    image=image)
