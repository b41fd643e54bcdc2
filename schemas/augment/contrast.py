"""``contrast:factor=1.2``: stretch grey levels about the image's mean m: ``m + factor * (I - m)`` (rounded half to
even, clipped to 0..255); factor < 1 flattens, 0 leaves a uniform grey at the mean."""
from __future__ import annotations

import numpy as np

from xbench.schemas.augment._base import Augmentation, Param


def image(img: np.ndarray, params, seed: int) -> np.ndarray:
    m = img.mean(dtype=np.float64)
    levels = np.arange(256, dtype=np.float64)  # per grey level, as brightness does
    return np.clip(np.rint(m + params["factor"] * (levels - m)), 0, 255).astype(np.uint8)[img]


AUGMENTATION = Augmentation(
    "contrast", "stretch grey levels about the image mean",
    params=(Param("factor", float, 1.2, 0.0, 10.0, "contrast multiplier"),),
    image=image)
