"""``jpeg:quality=75``: encode the image as a greyscale baseline JPEG at ``quality`` with Pillow (no optimisation,
no progressive scan) and decode it again: the blocking and ringing of a re-compressed film."""
from __future__ import annotations

import io

import numpy as np

from xbench.schemas.errors import InputError
from xbench.schemas.augment._base import Augmentation, Param


def image(img: np.ndarray, params, seed: int) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:  # the scoring-only install has no Pillow; only the image side needs it
        raise InputError("augmentation jpeg needs Pillow: pip install '.[extract]' in a checkout of XBench "
                         "(pip install 'xbench-cxr[extract]' once it is released on PyPI)") from None
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(img), mode="L").save(buf, format="JPEG", quality=int(params["quality"]),
                                                              optimize=False, progressive=False)
    buf.seek(0)
    with Image.open(buf) as decoded:
        return np.asarray(decoded.convert("L"), dtype=np.uint8).copy()


AUGMENTATION = Augmentation(
    "jpeg", "JPEG re-compression (Pillow)",
    params=(Param("quality", int, 75, 1, 100, "JPEG quality"),),
    image=image)
