"""``translate:x=16,y=0,side=512``: shift the image right by ``x`` and down by ``y`` pixels of an image whose
side is ``side`` pixels (default 512, xbench-prepare's default stored size S).

The shift is the fraction ``x / side`` of the width and ``y / side`` of the height, so it is the same part of
the picture at every resolution: on the S x S stored image it moves ``x * S / side`` pixels, on an original
of W x H pixels ``x * W / side`` across and ``y * H / side`` down. For pixels of your own stored images,
give ``side`` the store's image size."""
from __future__ import annotations

import numpy as np

from xbench.schemas.augment._base import Augmentation, Param


def forward(params) -> np.ndarray:
    side = float(params["side"])
    return np.array([[1.0, 0.0, params["x"] / side], [0.0, 1.0, params["y"] / side]])


def check(params) -> list[str]:
    side = params["side"]
    return [f"{k}={params[k]:g} moves the image out of view entirely (|{k}| must be below side={side})"
            for k in ("x", "y") if abs(params[k]) >= side]


AUGMENTATION = Augmentation(
    "translate", "shift right by x and down by y pixels of a side-pixel image",
    params=(Param("x", float, 16.0, -65536.0, 65536.0, "rightward shift, pixels of a side x side image"),
            Param("y", float, 0.0, -65536.0, 65536.0, "downward shift, pixels of a side x side image"),
            Param("side", int, 512, 1, 65536, "the side the pixel shifts are counted in")),
    forward=forward, check=check)
