"""What an augmentation is (:class:`Augmentation`, its :class:`Param` s) and one parsed use of it (:class:`AugmentSpec`).

An augmentation is photometric (it changes grey levels where they are) or geometric (it moves them by an
affine map of normalised coordinates, ``_warp``). A geometric one declares only ``forward(params)``, the
2 x 3 map taking a point of the original image to where it shows in the augmented one; the image warp and
the exact inverse on maps both follow from it, so the two cannot disagree.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from xbench.schemas.errors import InputError
from xbench.schemas.augment._warp import identity, in_view, invert, resample

#: a number as a spec may write it: decimal, optional fraction and exponent (no inf, nan, hex or underscores)
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,3})?")
_INTEGER = re.compile(r"[+-]?\d{1,9}")


@dataclass(frozen=True)
class Param:
    """One parameter: its type (int or float), default and inclusive range (``open_low``: the low end excluded)."""

    name: str
    kind: type
    default: float | int
    low: float | int
    high: float | int
    help: str
    open_low: bool = False

    def parse(self, text: str) -> tuple[Any, str | None]:
        """(value, None) from the text after ``=``, or (None, the problem in words)."""
        pattern = _INTEGER if self.kind is int else _NUMBER
        if not pattern.fullmatch(text):
            return None, f"must be {self.range_text()}, got {_shown(text)}"
        value = int(text) if self.kind is int else float(text)
        return self.check(value)

    def check(self, value: Any) -> tuple[Any, str | None]:
        if self.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            value = float(value) if ok else value
        if ok:
            ok = (value > self.low if self.open_low else value >= self.low) and value <= self.high
        return (value, None) if ok else (None, f"must be {self.range_text()}, got {_shown(value)}")

    def range_text(self) -> str:
        left = "(" if self.open_low else "["
        return f"{'an integer' if self.kind is int else 'a number'} in {left}{fmt(self.low)}, {fmt(self.high)}]"


def fmt(value: float | int) -> str:
    """A parameter value as the canonical spec writes it: integers and whole floats without a fraction."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def _shown(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass(frozen=True)
class Augmentation:
    """A registered augmentation (one module of this package each, ``AUGMENTATION = Augmentation(...)``).

    ``image(image, params, seed)``: photometric ones, uint8 (H, W) -> uint8 (H, W). ``forward(params)``:
    geometric ones, the 2 x 3 affine map of normalised coordinates from the original to the augmented
    image. ``seeded``: the result depends on ``seed`` (noise). ``check(params)``: problems the ranges of
    single parameters cannot see (one line each)."""

    name: str
    description: str
    params: tuple[Param, ...] = ()
    image: Callable[[np.ndarray, Mapping[str, Any], int], np.ndarray] | None = None
    forward: Callable[[Mapping[str, Any]], np.ndarray] | None = None
    seeded: bool = False
    check: Callable[[Mapping[str, Any]], list[str]] | None = None
    reference: str = ""

    def __post_init__(self) -> None:
        if (self.image is None) == (self.forward is None):
            raise ValueError(f"augmentation {self.name!r}: give exactly one of image (photometric) or forward (geometric)")

    @property
    def geometric(self) -> bool:
        return self.forward is not None

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}


def _check_image(image: Any) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 2 or min(image.shape) < 1:
        raise InputError(f"an augmentation takes a uint8 (H, W) image, got {image.dtype} {tuple(image.shape)}")
    return image


@dataclass(frozen=True)
class AugmentSpec:
    """One augmentation with its parameters (defaults filled); ``str()`` is its canonical spec."""

    name: str
    params: dict = field(hash=False, compare=True)
    augmentation: Augmentation = field(repr=False, compare=False)

    def __str__(self) -> str:
        order = [p.name for p in self.augmentation.params]
        if not order:
            return self.name
        return f"{self.name}:" + ",".join(f"{k}={fmt(self.params[k])}" for k in order)

    @property
    def geometric(self) -> bool:
        return self.augmentation.geometric

    @property
    def seeded(self) -> bool:
        return self.augmentation.seeded

    def forward(self) -> np.ndarray:
        """Geometric: the 2 x 3 map original -> augmented (normalised coordinates); the identity otherwise."""
        return np.asarray(self.augmentation.forward(self.params), dtype=np.float64) if self.geometric \
            else identity()

    def apply_image(self, image: np.ndarray, *, seed: int = 0) -> np.ndarray:
        """The augmented uint8 (H, W) image. Geometric: the image's pixel at normalised point p shows at
        forward(p); bilinear, out-of-view pixels 0 (black); rounded half to even and clipped to 0..255."""
        image = _check_image(image)
        if not self.geometric:
            out = self.augmentation.image(image, self.params, int(seed))
            return np.ascontiguousarray(out, dtype=np.uint8)
        return resample(image[None], invert(self.forward()), 0.0, to_uint8=True)[0]

    def invert_map(self, maps: np.ndarray, fill: float | None = None) -> np.ndarray:
        """Maps (..., h, w) over the augmented image -> float32 maps over the original frame: the value at
        original point p is the augmented map's at forward(p) (bilinear). Points whose image was moved out
        of view get ``fill``, by default each map's own minimum (no evidence there). Photometric: a copy."""
        maps = np.asarray(maps)
        if maps.ndim < 2 or min(maps.shape[-2:]) < 1:
            raise InputError(f"invert_map takes maps (..., h, w), got shape {tuple(maps.shape)}")
        if not self.geometric:
            return np.array(maps, dtype=np.float32, copy=True)
        flat = maps.reshape(-1, *maps.shape[-2:]).astype(np.float64)
        if fill is None:
            fills = flat.min(axis=(1, 2)) if flat.shape[0] else np.zeros(0)
        else:
            fills = np.full(flat.shape[0], float(fill))
        out = resample(flat, self.forward(), fills)
        return out.astype(np.float32).reshape(maps.shape)

    def coverage(self, shape: tuple[int, int]) -> np.ndarray:
        """(h, w) bool over the original frame: True where :meth:`invert_map` reads the augmented map
        (the point stayed in view), False where it wrote the fill. All True for photometric ones."""
        h, w = int(shape[0]), int(shape[1])
        if not self.geometric:
            return np.ones((h, w), dtype=bool)
        return in_view(self.forward(), (h, w))
