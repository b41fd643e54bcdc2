"""``noise:sigma=8``: add Gaussian noise of standard deviation ``sigma`` grey levels, independently per pixel
(rounded half to even, clipped to 0..255).

The draw is ``numpy.random.default_rng(seed).standard_normal((H, W))`` (float64, row-major), so one seed
gives one noise field. At extraction the seed of each case is derived from the run's seed, the dataset,
the case id and the view (docs/contract.md, "Augmentations"): the same case gets the same noise whatever the
batch size, the worker count or the ranks."""
from __future__ import annotations

import numpy as np

from xbench.schemas.augment._base import Augmentation, Param


#: pixels drawn at a time: the generator's stream is the same drawn in bands of rows or at once, and a large
#: original then needs no full-size float64 field
_BAND_PIXELS = 1 << 20


def image(img: np.ndarray, params, seed: int) -> np.ndarray:
    rng = np.random.default_rng(int(seed) & (2**64 - 1))
    h, w = img.shape
    out = np.empty_like(img)
    band = max(1, _BAND_PIXELS // w)
    for r0 in range(0, h, band):
        rows = slice(r0, min(h, r0 + band))
        z = rng.standard_normal((rows.stop - r0, w))
        out[rows] = np.clip(np.rint(img[rows].astype(np.float64) + params["sigma"] * z), 0, 255)
    return out


AUGMENTATION = Augmentation(
    "noise", "additive Gaussian noise (seeded)",
    params=(Param("sigma", float, 8.0, 0.0, 128.0, "standard deviation, grey levels"),),
    image=image, seeded=True)
