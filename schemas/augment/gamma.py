"""``gamma:gamma=0.8``: ``255 * (I / 255) ** gamma`` per pixel (rounded half to even); gamma < 1 lifts the darks,
> 1 deepens them. 0 and 255 stay where they are."""
from __future__ import annotations

import numpy as np

from xbench.schemas.augment._base import Augmentation, Param


def table(gamma: float) -> np.ndarray:
    """The 256 output grey levels (the curve is evaluated once per level)."""
    levels = np.arange(256, dtype=np.float64) / 255.0
    return np.clip(np.rint(255.0 * levels ** gamma), 0, 255).astype(np.uint8)


def image(img: np.ndarray, params, seed: int) -> np.ndarray:
    return table(params["gamma"])[img]


AUGMENTATION = Augmentation(
    "gamma", "power-law grey-level curve",
    params=(Param("gamma", float, 0.8, 0.0, 20.0, "exponent of the curve", open_low=True),),
    image=image)
