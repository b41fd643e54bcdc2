"""Baselines that need no weights, registered as models: sanity checks and the demo.

``random``
    Maps: uniform [0, 1) noise on the grid. Scores: uniform [0, 1) probabilities. Both are drawn
    from a generator seeded by (seed, CRC-32 of the stored image bytes), so a case gets the same
    values whatever the batching, sharding or resuming. Expected metrics: chance.
``center``
    Maps: an isotropic Gaussian centred on the whole image (sigma = 0.25 of the image side by
    default), the same for every case and class. Scores: probability 0.5 for every pair (so
    AUROC is 0.5 and accuracy is the negative rate). It measures how far a centre bias goes.
``dog``
    Image-only saliency: difference of Gaussians on the preprocessed image (the model frame,
    ``preprocess.size`` px, 224 by default), average-pooled onto the grid, positive for blobs
    brighter than their surroundings (denser tissue in images.zarr's convention). The sigmas are
    fractions of the frame side, ``sigma: [0.015, 0.06]`` by default (3.4 and 13.4 px at 224 px):
    lesion scale, so a nodule (radius ~1-4 % of the side) or a consolidation (~4-8 %) responds
    strongly while smooth, soft-edged anatomy does not. ``sigma_px: [s1, s2]`` gives pixels instead.
    It goes through the same model-frame geometry as real models (``preprocess.resize``
    squash/crop/pad), which makes it the end-to-end check of crop/padding undoing. It knows no
    classes: every class gets the same map (the most salient dense blob of the image), so on a
    case with several findings it can point at only one of them. Scores (the same for every class,
    no class information): the standardised peak of the grid map minus 3, as a logit; recognition
    metrics of ``dog`` therefore measure only "how blob-like is the densest structure", not a finding.
"""
from __future__ import annotations

import zlib
from typing import Any, Mapping, Sequence

import numpy as np

from xbench.extract.models import frame
from xbench.extract.models.base import AdapterOutput, ModelAdapter
from xbench.extract.models.errors import ModelConfigError

RESIZE_MODES = frame.RESIZE_MODES


def _grid(config: Mapping[str, Any], default: int = 14) -> tuple[int, int]:
    g = config.get("map_size") or config.get("grid") or default
    return (int(g), int(g)) if isinstance(g, (int, float)) else (int(g[0]), int(g[1]))


def _numpy(x) -> np.ndarray:
    """A torch tensor (any device) or an array as a NumPy array."""
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def image_seeds(images, seed: int) -> list[int]:
    """One 32-bit seed per image from its bytes: independent of batch composition and order."""
    return [zlib.crc32(np.ascontiguousarray(a).tobytes(), seed & 0xFFFFFFFF) for a in _numpy(images)]


class _Baseline(ModelAdapter):
    """A weight-free baseline: :meth:`outputs` computes its scores and maps in NumPy (the one definition); the
    torch interface (``__call__``, ``phrase_outputs``) wraps it, so the torch runner and the torch-free one
    (the catalog's ``torch=False``, extract/runner.py) write the same arrays."""

    def __init__(self, name: str, grid: tuple[int, int]) -> None:
        super().__init__()
        self.name = name
        self.method = name
        self._grid = grid
        self.device = "cpu"

    @property
    def map_shape(self) -> tuple[int, int]:
        return self._grid

    def set_classes(self, classes: Sequence[str]) -> None:
        self.classes = tuple(classes)

    supports_phrases = True

    def outputs(self, images: np.ndarray, orig_size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """scores (B, C) float32 and maps (B, C, h, w) float32 from stored (B, S, S) uint8 images."""
        raise NotImplementedError

    def phrase_arrays(self, images: np.ndarray, orig_size: np.ndarray, rows: np.ndarray):
        """Baselines read no text: every phrase of an image gets the image's own (single-class) map and score."""
        saved = self.classes
        self.classes = ("phrase",)
        try:
            scores, maps = self.outputs(images, orig_size)
        finally:
            self.classes = saved
        rows = np.asarray(rows, dtype=np.int64)
        return scores[rows, 0], maps[rows, 0]

    def __call__(self, images, orig_size):
        import torch

        scores, maps = self.outputs(_numpy(images), _numpy(orig_size))
        dev = images.device
        return AdapterOutput(torch.from_numpy(scores).to(dev), torch.from_numpy(maps).to(dev))

    def phrase_outputs(self, images, orig_size, texts, rows):
        import torch

        scores, maps = self.phrase_arrays(_numpy(images), _numpy(orig_size), _numpy(rows))
        return torch.from_numpy(np.ascontiguousarray(scores)), torch.from_numpy(np.ascontiguousarray(maps))

    def to(self, device, dtype=None):
        self.device = device
        return self


class RandomBaseline(_Baseline):
    score_kind = "probability"

    @classmethod
    def from_config(cls, config):
        return build_random(config)

    def __init__(self, grid: tuple[int, int] = (14, 14), seed: int = 0) -> None:
        super().__init__("random", grid)
        self.seed = int(seed)

    def outputs(self, images, orig_size):
        C, (h, w) = len(self.classes), self._grid
        scores, maps = [], []
        for s in image_seeds(images, self.seed):
            rng = np.random.default_rng(s)
            scores.append(rng.random(C, dtype=np.float32))
            maps.append(rng.random((C, h, w), dtype=np.float32))
        return np.stack(scores), np.stack(maps)

    def provenance(self) -> dict:
        return {"adapter": "RandomBaseline", "seed": self.seed, "map_shape": list(self._grid),
                "score": "uniform [0,1) probability, seeded by (seed, crc32(image))"}


def center_prior(grid: tuple[int, int], sigma: float = 0.25) -> np.ndarray:
    """(h, w) float32 Gaussian exp(-r^2 / 2 sigma^2) at the grid cell centres, r in image-side units."""
    h, w = grid
    v = (np.arange(h, dtype=np.float64) + 0.5) / h - 0.5
    u = (np.arange(w, dtype=np.float64) + 0.5) / w - 0.5
    r2 = v.reshape(h, 1) ** 2 + u.reshape(1, w) ** 2
    return np.exp(-r2 / (2 * sigma**2)).astype(np.float32)


class CenterBaseline(_Baseline):
    score_kind = "probability"

    @classmethod
    def from_config(cls, config):
        return build_center(config)

    def __init__(self, grid: tuple[int, int] = (14, 14), sigma: float = 0.25) -> None:
        super().__init__("center", grid)
        self.sigma = float(sigma)
        self._map = center_prior(grid, sigma)

    def outputs(self, images, orig_size):
        B, C = images.shape[0], len(self.classes)
        maps = np.broadcast_to(self._map, (B, C, *self._grid)).copy()
        return np.full((B, C), 0.5, dtype=np.float32), maps

    def provenance(self) -> dict:
        return {"adapter": "CenterBaseline", "sigma": self.sigma, "map_shape": list(self._grid),
                "score": "constant probability 0.5"}


#: DoG sigmas (inner, outer) as fractions of the model frame's side: lesion scale (see the module doc).
DOG_SIGMA = (0.015, 0.06)

gaussian_blur = frame.gaussian_blur


class DoGBaseline(_Baseline):
    score_kind = "logit"

    @classmethod
    def from_config(cls, config):
        return build_dog(config)

    def __init__(self, grid: tuple[int, int] = (14, 14), size: int = 224, resize: str = "squash",
                 sigma: Sequence[float] = DOG_SIGMA, sigma_px: Sequence[float] | None = None) -> None:
        """``sigma``: (inner, outer) as fractions of the frame side; ``sigma_px`` (pixels) wins if given."""
        super().__init__("dog", grid)
        if resize not in RESIZE_MODES:
            raise ModelConfigError(f"preprocess.resize must be one of {RESIZE_MODES}, got {resize!r}")
        self.size, self.resize = int(size), resize
        if sigma_px is not None:
            px = (float(sigma_px[0]), float(sigma_px[1]))
        else:
            frac = (float(sigma[0]), float(sigma[1]))
            if not 0 < frac[0] < frac[1] < 0.5:
                raise ModelConfigError(f"dog sigma is a pair of fractions of the image side, 0 < inner < outer < 0.5 "
                                 f"(e.g. {list(DOG_SIGMA)}); got {list(frac)} (use sigma_px for pixels)")
            px = (frac[0] * self.size, frac[1] * self.size)
        if not 0 < px[0] < px[1]:
            raise ModelConfigError(f"dog sigmas must satisfy 0 < inner < outer; got {list(px)} px")
        self.sigma = px  # pixels of the model frame

    def frame_maps(self, images: np.ndarray, boxes: np.ndarray) -> np.ndarray:
        """(B, 1, h, w) DoG response pooled onto the grid of the model frame."""
        x = frame.model_input(_numpy(images), _numpy(boxes), self.size, self.resize)
        dog = frame.gaussian_blur(x, self.sigma[0]) - frame.gaussian_blur(x, self.sigma[1])
        return frame.to_model_grid(dog, self._grid)

    def outputs(self, images, orig_size):
        boxes = frame.frame_boxes(orig_size, self.resize, images.shape[-1])
        maps = frame.undo_box(self.frame_maps(images, boxes), boxes, self._grid)  # (B, 1, h, w)
        flat = maps.reshape(maps.shape[0], -1).astype(np.float32)
        # the sample standard deviation (n - 1), as torch.std gives
        z = (flat.max(1) - flat.mean(1)) / (flat.std(1, ddof=1) + np.float32(1e-6)) - np.float32(3.0)
        C = len(self.classes)
        return (np.repeat(z.astype(np.float32)[:, None], C, 1),
                np.repeat(maps.astype(np.float32), C, 1))

    def provenance(self) -> dict:
        return {"adapter": "DoGBaseline", "sigma_px": list(self.sigma),
                "sigma_frac": [self.sigma[0] / self.size, self.sigma[1] / self.size], "map_shape": list(self._grid),
                "preprocess": {"size": self.size, "resize": self.resize, "interpolation": "bilinear"},
                "score": "standardised peak of the DoG grid map minus 3 (logit), same for all classes"}


#: The model registry's entries for this module (name -> factory), read from the source without importing
#: it (see xbench.extract.models).
REGISTER = {"random": "build_random", "center": "build_center", "dog": "build_dog"}


def build_random(config: Mapping[str, Any]) -> RandomBaseline:
    return RandomBaseline(_grid(config), seed=int(config.get("seed", 0)))


def build_center(config: Mapping[str, Any]) -> CenterBaseline:
    return CenterBaseline(_grid(config), sigma=float(config.get("sigma", 0.25)))


def _pair(config: Mapping[str, Any], key: str):
    """``sigma``/``sigma_px`` as a pair of numbers, or a ModelConfigError naming the key (not a TypeError)."""
    value = config.get(key)
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 2
                         and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        return value
    raise ModelConfigError(f"dog: {key} must be a pair of numbers [inner, outer], got {value!r:.60}")


def build_dog(config: Mapping[str, Any]) -> DoGBaseline:
    pre = dict(config.get("preprocess") or {})
    sigma, sigma_px = _pair(config, "sigma"), _pair(config, "sigma_px")
    try:
        return DoGBaseline(_grid(config), size=int(pre.get("size", 224)), resize=pre.get("resize", "squash"),
                           sigma=DOG_SIGMA if sigma is None else sigma, sigma_px=sigma_px)
    except ValueError as e:
        raise ModelConfigError(f"dog: {e}") from None
