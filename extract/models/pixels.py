"""Per-case image preprocessing on the host, with the libraries the official loaders use.

An adapter whose model has an official loader exposes an :class:`ImageTransform`: a small,
picklable object that turns one case's uint8 (H, W) brighter-is-denser pixels into the model's
input tensor with the same calls as that loader (PIL resize through torchvision ``Resize``,
OpenCV ``cv2.resize``, ``ToTensor``, ``Normalize``). The extraction runner calls it in its
DataLoader workers, on the original image when the images store keeps originals
(``xbench-prepare --keep-original``) and the transform asks for it, otherwise on the stored
S x S stretched image; ``orig_size`` always gives the original (height, width), so geometry that
depends on the aspect ratio (CARZero's letterbox) is rebuilt either way.

Histogram equalisation (:func:`equalize_hist`) reproduces what the official RSNA grounding loaders
of MedKLIP and MAVL apply before resizing (``dataset_RSNA.py``: ``exposure.equalize_hist`` on
``pixel_array / 255``, then ``(255 * img).astype(np.uint8)``); adapters expose it as
``options.equalize``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from xbench.extract.models.errors import ModelConfigError

#: torchvision InterpolationMode names accepted by :class:`PILResize`
PIL_FILTERS = ("bilinear", "bicubic")


def equalize_hist(image: np.ndarray, nbins: int = 256) -> np.ndarray:
    """Histogram equalisation of a uint8 (H, W) image, as the official RSNA grounding loaders do it.

    The image is scaled to [0, 1] floats; a histogram of ``nbins`` equal bins spans its own
    minimum to maximum (numpy's rule widens a constant image by 0.5 on each side); every pixel is
    mapped to the normalised cumulative count, interpolated linearly between bin centres
    (clamped outside them); the result times 255 is truncated to uint8. This is
    ``(255 * skimage.exposure.equalize_hist(image / 255.)).astype(np.uint8)``, written without
    scikit-image (tests compare the two when scikit-image is installed).
    """
    if image.dtype != np.uint8 or image.ndim != 2:
        raise ValueError(f"equalize_hist needs a 2-D uint8 image, got {image.dtype} {image.shape}")
    x = image.astype(np.float64) / 255.0
    hist, edges = np.histogram(x, bins=nbins)
    centres = (edges[:-1] + edges[1:]) / 2
    cdf = np.cumsum(hist) / float(hist.sum())
    out = np.interp(x.ravel(), centres, cdf).reshape(x.shape)
    return (255 * out).astype(np.uint8)


def to_normalised_tensor(rgb, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """torchvision ``ToTensor`` then ``Normalize(mean, std)`` of a PIL image: (3, H, W) float32."""
    from torchvision import transforms

    return transforms.Normalize(tuple(mean), tuple(std))(transforms.ToTensor()(rgb))


@dataclass(frozen=True)
class ImageTransform:
    """Base of the host-side transforms: optional equalisation, then the model's own steps.

    ``wants_original``: run on the original image when the store keeps it (every official loader
    starts from the original file). Subclasses implement :meth:`apply`.
    """

    equalize: bool = False
    wants_original = True

    def __call__(self, image: np.ndarray, orig_size: Sequence[int]) -> torch.Tensor:
        """image: (H, W) uint8 (the original, or the stored S x S image); orig_size: original (h, w)."""
        image = np.ascontiguousarray(image)
        if self.equalize:
            image = equalize_hist(image)
        return self.apply(image, (int(orig_size[0]), int(orig_size[1])))

    def apply(self, image: np.ndarray, orig_size: tuple[int, int]) -> torch.Tensor:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def batch(self, images: torch.Tensor, orig_size: torch.Tensor) -> torch.Tensor:
        """Apply to a (B, S, S) uint8 batch of stored images (adapters called directly, tests)."""
        arr = images.detach().cpu().numpy()
        return torch.stack([self(arr[i], orig_size[i].tolist()) for i in range(arr.shape[0])])


@dataclass(frozen=True)
class PILResize(ImageTransform):
    """``Image.fromarray(img).convert('RGB')`` -> ``transforms.Resize([h, w], filter)`` ->
    ``ToTensor`` -> ``Normalize``: the official test transform of MedKLIP, MAVL and KAD."""

    size: tuple[int, int] = (224, 224)
    filter: str = "bilinear"
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)

    def __post_init__(self) -> None:
        if self.filter not in PIL_FILTERS:
            raise ModelConfigError(f"filter must be one of {PIL_FILTERS}, got {self.filter!r}")

    def apply(self, image: np.ndarray, orig_size: tuple[int, int]) -> torch.Tensor:
        from PIL import Image
        from torchvision import transforms
        from torchvision.transforms import InterpolationMode

        mode = InterpolationMode.BICUBIC if self.filter == "bicubic" else InterpolationMode.BILINEAR
        rgb = transforms.Resize(list(self.size), interpolation=mode)(Image.fromarray(image).convert("RGB"))
        return to_normalised_tensor(rgb, self.mean, self.std)

    def describe(self) -> str:
        eq = "skimage-style equalize_hist, " if self.equalize else ""
        return (f"{eq}PIL grey -> RGB, torchvision Resize({list(self.size)}, {self.filter.upper()}) on the PIL image, "
                f"ToTensor, Normalize(mean={list(self.mean)}, std={list(self.std)})")


@dataclass(frozen=True)
class DualEncoderTransform(ImageTransform):
    """open_clip's evaluation transform (``open_clip.transform.image_transform``), run on the
    original image: ``squash`` = ``Resize([h, w], filter)``; ``crop`` (open_clip's default
    ``shortest`` mode, square sizes) = ``Resize(R)`` of the shorter side then ``CenterCrop(R)``;
    then grey -> RGB, ``ToTensor``, ``Normalize``. ``crop_offset`` "round" is torchvision's
    ``CenterCrop``; "floor" is transformers' ``center_crop`` (CLIPImageProcessor).

    Only for originals (``only_original``): on the stored stretched image a shorter-side resize
    would not see the original's aspect ratio, so the adapter's device path (``geometry``) is used
    there instead. :meth:`boxes` gives the model frame in whole-image coordinates, for the maps.
    """

    size: tuple[int, int] = (224, 224)
    mode: str = "squash"
    filter: str = "bicubic"
    mean: tuple[float, ...] = (0.48145466, 0.4578275, 0.40821073)
    std: tuple[float, ...] = (0.26862954, 0.26130258, 0.27577711)
    crop_offset: str = "round"
    only_original = True

    def __post_init__(self) -> None:
        if self.filter not in PIL_FILTERS or self.mode not in ("squash", "crop") or self.crop_offset not in ("round", "floor"):
            raise ValueError(f"unsupported host transform: filter {self.filter!r}, mode {self.mode!r}, crop_offset {self.crop_offset!r}")
        if self.mode == "crop" and self.size[0] != self.size[1]:
            raise ValueError(f"crop needs a square size, got {self.size}")

    def frame(self, orig_size: tuple[int, int]) -> tuple[int, int, int, int]:
        """(resized h, resized w, crop top, crop left) of the ``crop`` mode for an original (h, w)."""
        h, w, r = orig_size[0], orig_size[1], self.size[0]
        # torchvision Resize(int): the shorter side becomes r, the longer int(r * long / short)
        nh, nw = (r, int(r * w / h)) if h <= w else (int(r * h / w), r)
        if self.crop_offset == "round":
            return nh, nw, int(round((nh - r) / 2.0)), int(round((nw - r) / 2.0))
        return nh, nw, (nh - r) // 2, (nw - r) // 2

    def apply(self, image: np.ndarray, orig_size: tuple[int, int]) -> torch.Tensor:
        from PIL import Image
        from torchvision import transforms
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as TF

        mode = InterpolationMode.BICUBIC if self.filter == "bicubic" else InterpolationMode.BILINEAR
        rgb = Image.fromarray(image).convert("RGB")
        if self.mode == "squash":
            rgb = transforms.Resize(list(self.size), interpolation=mode)(rgb)
        else:
            nh, nw, top, left = self.frame(image.shape)
            rgb = TF.crop(transforms.Resize([nh, nw], interpolation=mode)(rgb), top, left, self.size[0], self.size[1])
        return to_normalised_tensor(rgb, self.mean, self.std)

    def boxes(self, orig_size: torch.Tensor) -> torch.Tensor:
        """(B, 4) model frames (x0, y0, x1, y1) in normalised whole-image coordinates (see geometry)."""
        out = torch.tensor([[0.0, 0.0, 1.0, 1.0]], dtype=torch.float64).repeat(orig_size.shape[0], 1)
        if self.mode == "crop":
            r = self.size[0]
            for i, (h, w) in enumerate(orig_size.tolist()):
                nh, nw, top, left = self.frame((int(h), int(w)))
                out[i] = torch.tensor([left / nw, top / nh, (left + r) / nw, (top + r) / nh], dtype=torch.float64)
        return out

    def describe(self) -> str:
        geo = (f"Resize({list(self.size)}, {self.filter.upper()})" if self.mode == "squash" else
               f"Resize({self.size[0]}, {self.filter.upper()}) of the shorter side, CenterCrop({self.size[0]}) "
               f"(offset {self.crop_offset})")
        return (f"on the original: PIL grey -> RGB, {geo}, ToTensor, Normalize(mean={list(self.mean)}, "
                f"std={list(self.std)})")
