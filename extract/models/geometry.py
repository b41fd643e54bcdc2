"""Image geometry shared by every adapter: the model's preprocessing and its inverse for maps.

images.zarr holds each whole image stretched to S x S. A model sees a square R x R input made
from it in one of three ways (``resize`` mode):

* ``"squash"`` (default): the whole S x S image resized to R x R. The model frame is the whole
  image, so its maps need no undoing. This is the mode that loses nothing at the margins.
* ``"crop"`` (model-faithful for CLIP / BiomedCLIP): what the model's own transform does to the
  *original* image: resize the shorter side to R, centre-crop R x R. On the stretched S x S image
  that is the central square of the original image (a band of the long axis), resampled to R x R.
* ``"pad"`` (letterbox, CARZero style): the longer side resized to R, the other side padded with
  black to R x R.

Each mode is described by one box: the model frame's extent in **normalised whole-image
coordinates** (x to the right, y down, the image is [0, 1] x [0, 1]). ``crop`` gives a box inside
the image, ``pad`` a box larger than it, ``squash`` the unit box. The same box drives the forward
preprocessing and :func:`undo_box`, which resamples a map from the model frame back onto a grid
covering the whole image: every output cell takes the bilinear value of the model map at its
centre; cells whose centre the model never saw (the cropped-away margins) get the map's minimum,
so that they never win the pointing game nor pass a threshold the seen part does not.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from xbench.extract.models.errors import ModelConfigError

RESIZE_MODES = ("squash", "crop", "pad")


def frame_boxes(orig_size: torch.Tensor, mode: str, stored_size: int) -> torch.Tensor:
    """The model frame of every image as (x0, y0, x1, y1) in normalised whole-image coordinates.

    orig_size: (B, 2) int (height, width). stored_size: S of images.zarr. Returns (B, 4) float64.
    ``crop`` boxes are snapped to whole pixels of the S x S image so that the forward crop and
    :func:`undo_box` use exactly the same region. Images with a non-positive size are treated
    as square.
    """
    if mode not in RESIZE_MODES:
        raise ModelConfigError(f"resize mode must be one of {RESIZE_MODES}, got {mode!r}")
    size = orig_size.to(torch.float64).cpu().clamp_min(1)
    h, w = size[:, 0], size[:, 1]
    n = size.shape[0]
    box = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64).repeat(n, 1)
    if mode == "squash":
        return box
    short, long_ = torch.minimum(h, w), torch.maximum(h, w)
    if mode == "crop":
        # fraction of each axis inside the central square of side min(h, w), on S pixels
        fy = _snap_span(short / h, stored_size)
        fx = _snap_span(short / w, stored_size)
    else:
        fy = long_ / h
        fx = long_ / w
    box[:, 0], box[:, 2] = (1 - fx) / 2, (1 + fx) / 2
    box[:, 1], box[:, 3] = (1 - fy) / 2, (1 + fy) / 2
    return box


def _snap_span(frac: torch.Tensor, stored_size: int) -> torch.Tensor:
    """Round a centred span of the S-pixel axis to whole pixels, keeping equal margins on both sides."""
    px = torch.round(frac * stored_size).clamp(1, stored_size)
    px = torch.where((stored_size - px) % 2 == 1, px + 1, px).clamp(max=stored_size)
    return px / stored_size


def model_input(images: torch.Tensor, boxes: torch.Tensor, size: int | Sequence[int],
                mode: str, interpolation: str = "bicubic") -> torch.Tensor:
    """Build the model's input frames from stored images.

    images: (B, S, S) uint8 or float (any device); boxes from :func:`frame_boxes`;
    size: R or (R_h, R_w). Returns (B, 1, R_h, R_w) float32 in [0, 1] (channel replication and
    normalisation are the caller's). Resampling antialiases when shrinking, as PIL does.
    """
    rh, rw = (size, size) if isinstance(size, int) else tuple(size)
    x = images.to(torch.float32).unsqueeze(1) / 255.0
    S = x.shape[-1]
    if mode == "squash":
        return _resize(x, (rh, rw), interpolation)
    out = []
    for i in range(x.shape[0]):
        x0, y0, x1, y1 = boxes[i].tolist()
        if mode == "crop":
            r0, r1 = round(y0 * S), round(y1 * S)
            c0, c1 = round(x0 * S), round(x1 * S)
            out.append(_resize(x[i:i + 1, :, r0:r1, c0:c1], (rh, rw), interpolation))
        else:
            # inner image size in the frame, then centred zero padding to R x R
            ih = max(1, round(rh / (y1 - y0)))
            iw = max(1, round(rw / (x1 - x0)))
            inner = _resize(x[i:i + 1], (min(ih, rh), min(iw, rw)), interpolation)
            pt, pl = (rh - inner.shape[-2]) // 2, (rw - inner.shape[-1]) // 2
            out.append(F.pad(inner, (pl, rw - inner.shape[-1] - pl, pt, rh - inner.shape[-2] - pt)))
    return torch.cat(out, 0)


def _resize(x: torch.Tensor, size: tuple[int, int], interpolation: str) -> torch.Tensor:
    if tuple(x.shape[-2:]) == tuple(size):
        return x
    antialias = interpolation in ("bilinear", "bicubic")
    y = F.interpolate(x, size=size, mode=interpolation, antialias=antialias,
                      **({} if interpolation in ("nearest", "area") else {"align_corners": False}))
    return y.clamp(0, 1) if interpolation == "bicubic" else y


def undo_box(maps: torch.Tensor, boxes: torch.Tensor, out_shape: tuple[int, int] | None = None) -> torch.Tensor:
    """Resample maps from the model frame onto a grid covering the whole original image.

    maps: (B, C, h, w) on the model frame; boxes: (B, 4) model frame extents in normalised
    whole-image coordinates (see :func:`frame_boxes`); out_shape: output (H, W), default (h, w).
    Returns (B, C, H, W) float32. Output cell centres outside the model frame get the map's
    minimum (per case and class). With the unit box and out_shape == (h, w) the maps are
    returned unchanged.
    """
    B, C, h, w = maps.shape
    H, W = out_shape or (h, w)
    maps = maps.to(torch.float32)
    unit = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=boxes.dtype)
    if (H, W) == (h, w) and bool((boxes.cpu() == unit).all()):
        return maps
    dev = maps.device
    boxes = boxes.to(device=dev, dtype=torch.float64)
    # output cell centres in whole-image coordinates
    u = (torch.arange(W, device=dev, dtype=torch.float64) + 0.5) / W
    v = (torch.arange(H, device=dev, dtype=torch.float64) + 0.5) / H
    x0, y0, x1, y1 = (boxes[:, k].view(B, 1) for k in range(4))
    # same centres in the model frame's [-1, 1] sampling coordinates (align_corners=False)
    gx = ((u.view(1, W) - x0) / (x1 - x0)) * 2 - 1  # (B, W)
    gy = ((v.view(1, H) - y0) / (y1 - y0)) * 2 - 1  # (B, H)
    grid = torch.stack(torch.broadcast_tensors(gx.view(B, 1, W), gy.view(B, H, 1)), dim=-1)
    out = F.grid_sample(maps, grid.to(torch.float32), mode="bilinear", padding_mode="border",
                        align_corners=False)
    outside = (grid.abs() > 1).any(-1)  # (B, H, W)
    low = maps.amin(dim=(2, 3), keepdim=True).expand(B, C, H, W)
    return torch.where(outside.unsqueeze(1), low, out)


def to_model_grid(frame_map: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """Average-pool a per-pixel map (B, C, R_h, R_w) of the model frame onto the model's patch grid."""
    return F.adaptive_avg_pool2d(frame_map.to(torch.float32), grid)
