"""``scale:factor=1.1``: zoom about the centre; factor > 1 enlarges (the borders leave the view), < 1 shrinks
(the border fills in black), in normalised coordinates (the same on the stored and the original image)."""
from __future__ import annotations

import numpy as np

from xbench.schemas.augment._base import Augmentation, Param
from xbench.schemas.augment._warp import about_centre


def forward(params) -> np.ndarray:
    f = params["factor"]
    return about_centre(np.array([[f, 0.0], [0.0, f]]))


AUGMENTATION = Augmentation(
    "scale", "zoom about the centre (factor > 1 zooms in)",
    params=(Param("factor", float, 1.1, 0.25, 4.0, "magnification about the centre"),),
    forward=forward)
