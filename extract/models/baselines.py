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
import torch
import torch.nn.functional as F

from xbench.extract.models.base import AdapterOutput, ModelAdapter
from xbench.extract.models.errors import ModelConfigError
from xbench.extract.models.geometry import RESIZE_MODES, frame_boxes, model_input, to_model_grid, undo_box


def _grid(config: Mapping[str, Any], default: int = 14) -> tuple[int, int]:
    g = config.get("map_size") or config.get("grid") or default
    return (int(g), int(g)) if isinstance(g, (int, float)) else (int(g[0]), int(g[1]))


def image_seeds(images: torch.Tensor, seed: int) -> list[int]:
    """One 32-bit seed per image from its bytes: independent of batch composition and order."""
    arr = images.detach().cpu().numpy()
    return [zlib.crc32(np.ascontiguousarray(a).tobytes(), seed & 0xFFFFFFFF) for a in arr]


class _Baseline(ModelAdapter):
    def __init__(self, name: str, grid: tuple[int, int]) -> None:
        super().__init__()
        self.name = name
        self.method = name
        self._grid = grid
        self.device = torch.device("cpu")

    @property
    def map_shape(self) -> tuple[int, int]:
        return self._grid

    def set_classes(self, classes: Sequence[str]) -> None:
        self.classes = tuple(classes)

    supports_phrases = True

    def phrase_outputs(self, images, orig_size, texts, rows):
        """Baselines read no text: every phrase of an image gets the image's own (single-class) map and score."""
        saved = self.classes
        self.classes = ("phrase",)
        try:
            out = self(images, orig_size)
        finally:
            self.classes = saved
        rows = torch.as_tensor(rows, dtype=torch.long, device=out.maps.device)
        return out.scores[rows, 0], out.maps[rows, 0]

    def to(self, device, dtype=None):
        self.device = torch.device(device)
        return self


class RandomBaseline(_Baseline):
    score_kind = "probability"

    @classmethod
    def from_config(cls, config):
        return build_random(config)

    def __init__(self, grid: tuple[int, int] = (14, 14), seed: int = 0) -> None:
        super().__init__("random", grid)
        self.seed = int(seed)

    def __call__(self, images, orig_size):
        C, (h, w) = len(self.classes), self._grid
        scores, maps = [], []
        for s in image_seeds(images, self.seed):
            rng = np.random.default_rng(s)
            scores.append(rng.random(C, dtype=np.float32))
            maps.append(rng.random((C, h, w), dtype=np.float32))
        dev = images.device
        return AdapterOutput(torch.from_numpy(np.stack(scores)).to(dev), torch.from_numpy(np.stack(maps)).to(dev))

    def provenance(self) -> dict:
        return {"adapter": "RandomBaseline", "seed": self.seed, "map_shape": list(self._grid),
                "score": "uniform [0,1) probability, seeded by (seed, crc32(image))"}


def center_prior(grid: tuple[int, int], sigma: float = 0.25) -> torch.Tensor:
    """(h, w) float32 Gaussian exp(-r^2 / 2 sigma^2) at the grid cell centres, r in image-side units."""
    h, w = grid
    v = (torch.arange(h, dtype=torch.float64) + 0.5) / h - 0.5
    u = (torch.arange(w, dtype=torch.float64) + 0.5) / w - 0.5
    r2 = v.view(h, 1) ** 2 + u.view(1, w) ** 2
    return torch.exp(-r2 / (2 * sigma**2)).to(torch.float32)


class CenterBaseline(_Baseline):
    score_kind = "probability"

    @classmethod
    def from_config(cls, config):
        return build_center(config)

    def __init__(self, grid: tuple[int, int] = (14, 14), sigma: float = 0.25) -> None:
        super().__init__("center", grid)
        self.sigma = float(sigma)
        self._map = center_prior(grid, sigma)

    def __call__(self, images, orig_size):
        B, C = images.shape[0], len(self.classes)
        maps = self._map.to(images.device).expand(B, C, *self._grid).clone()
        return AdapterOutput(torch.full((B, C), 0.5, device=images.device), maps)

    def provenance(self) -> dict:
        return {"adapter": "CenterBaseline", "sigma": self.sigma, "map_shape": list(self._grid),
                "score": "constant probability 0.5"}


#: DoG sigmas (inner, outer) as fractions of the model frame's side: lesion scale (see the module doc).
DOG_SIGMA = (0.015, 0.06)


def gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of (B, 1, H, W) float, kernel radius 3 sigma, reflect padding."""
    radius = max(1, int(round(3 * sigma)))
    t = torch.arange(-radius, radius + 1, dtype=torch.float32, device=x.device)
    k = torch.exp(-t**2 / (2 * sigma**2))
    k = k / k.sum()
    r = min(radius, x.shape[-1] - 1, x.shape[-2] - 1)
    if r < radius:  # reflect padding needs a pad smaller than the image side
        k, radius = k[radius - r: radius + r + 1] / k[radius - r: radius + r + 1].sum(), r
    x = F.conv2d(F.pad(x, (radius, radius, 0, 0), mode="reflect"), k.view(1, 1, 1, -1))
    return F.conv2d(F.pad(x, (0, 0, radius, radius), mode="reflect"), k.view(1, 1, -1, 1))


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

    def frame_maps(self, images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """(B, 1, h, w) DoG response pooled onto the grid of the model frame."""
        x = model_input(images, boxes, self.size, self.resize, "bilinear")
        dog = gaussian_blur(x, self.sigma[0]) - gaussian_blur(x, self.sigma[1])
        return to_model_grid(dog, self._grid)

    def __call__(self, images, orig_size):
        boxes = frame_boxes(orig_size, self.resize, images.shape[-1])
        maps = undo_box(self.frame_maps(images, boxes), boxes, self._grid)  # (B, 1, h, w)
        flat = maps.flatten(1)
        z = (flat.amax(1) - flat.mean(1)) / (flat.std(1) + 1e-6) - 3.0
        C = len(self.classes)
        return AdapterOutput(z.view(-1, 1).expand(-1, C).contiguous(), maps.expand(-1, C, -1, -1).contiguous())

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


def build_dog(config: Mapping[str, Any]) -> DoGBaseline:
    pre = dict(config.get("preprocess") or {})
    try:
        return DoGBaseline(_grid(config), size=int(pre.get("size", 224)), resize=pre.get("resize", "squash"),
                           sigma=config.get("sigma", DOG_SIGMA), sigma_px=config.get("sigma_px"))
    except ValueError as e:
        raise ModelConfigError(f"dog: {e}") from None
