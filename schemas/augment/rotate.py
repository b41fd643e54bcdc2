"""``rotate:degrees=10``: turn the image about its centre, positive degrees counter-clockwise as displayed.

The turn is of the normalised square (what the S x S stored image shows); on an original of another aspect
ratio the same normalised map is applied, so a point lands where it lands on the stored image. Multiples of
90 degrees use exact sines and cosines (a quarter turn of a square grid moves pixels onto pixels)."""
from __future__ import annotations

import math

import numpy as np

from xbench.schemas.augment._base import Augmentation, Param
from xbench.schemas.augment._warp import about_centre

_QUARTER = {0: (1.0, 0.0), 90: (0.0, 1.0), 180: (-1.0, 0.0), 270: (0.0, -1.0)}


def cos_sin(degrees: float) -> tuple[float, float]:
    """cos and sin of ``degrees``, exact at multiples of 90."""
    turned = degrees % 360.0
    if turned in _QUARTER:
        return _QUARTER[int(turned)]
    rad = math.radians(degrees)
    return math.cos(rad), math.sin(rad)


def forward(params) -> np.ndarray:
    c, s = cos_sin(params["degrees"])
    # v points down: counter-clockwise on screen takes the point right of the centre (du, dv) = (1, 0) up to (0, -1)
    return about_centre(np.array([[c, s], [-s, c]]))


AUGMENTATION = Augmentation(
    "rotate", "turn about the centre (counter-clockwise as displayed)",
    params=(Param("degrees", float, 10.0, -360.0, 360.0, "angle, positive counter-clockwise as displayed"),),
    forward=forward)
