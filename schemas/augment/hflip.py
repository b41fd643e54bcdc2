"""``hflip``: mirror left and right (a point at normalised (u, v) shows at (1 - u, v)). No parameters.

A chest radiograph flipped puts the heart on the right: a model reading laterality should notice, a
grounding map should follow the flip exactly."""
from __future__ import annotations

import numpy as np

from xbench.schemas.augment._base import Augmentation


def forward(params) -> np.ndarray:
    return np.array([[-1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])


AUGMENTATION = Augmentation("hflip", "mirror left and right", forward=forward)
