"""The model-frame geometry of extract/models/geometry.py in NumPy, for the adapters that need no torch.

The weight-free baselines (extract/models/baselines.py) compute their maps with these functions whether the
runner gives them NumPy arrays (the torch-free extraction path) or torch tensors, so both paths write the same
bytes. Each function follows its torch counterpart in geometry.py step by step (same boxes, same rounding, the
same antialiased bilinear resampling as ``F.interpolate(..., antialias=True)``, the same bilinear
``grid_sample`` with border padding, the same adaptive average pooling); tests/extract/test_frame_numpy.py checks
them against geometry.py to float32 rounding.
"""
from __future__ import annotations

import numpy as np

from xbench.extract.models.errors import ModelConfigError

RESIZE_MODES = ("squash", "crop", "pad")


def frame_boxes(orig_size: np.ndarray, mode: str, stored_size: int) -> np.ndarray:
    """(B, 4) float64 model-frame boxes (x0, y0, x1, y1) in normalised whole-image coordinates
    (geometry.frame_boxes): orig_size is (B, 2) (height, width), stored_size the S of images.zarr."""
    if mode not in RESIZE_MODES:
        raise ModelConfigError(f"resize mode must be one of {RESIZE_MODES}, got {mode!r}")
    size = np.maximum(np.asarray(orig_size, dtype=np.float64).reshape(-1, 2), 1)
    h, w = size[:, 0], size[:, 1]
    box = np.tile(np.array([0.0, 0.0, 1.0, 1.0]), (size.shape[0], 1))
    if mode == "squash":
        return box
    short, long_ = np.minimum(h, w), np.maximum(h, w)
    if mode == "crop":
        fy, fx = _snap_span(short / h, stored_size), _snap_span(short / w, stored_size)
    else:
        fy, fx = long_ / h, long_ / w
    box[:, 0], box[:, 2] = (1 - fx) / 2, (1 + fx) / 2
    box[:, 1], box[:, 3] = (1 - fy) / 2, (1 + fy) / 2
    return box


def _snap_span(frac: np.ndarray, stored_size: int) -> np.ndarray:
    # np.round rounds half to even, as torch.round does
    px = np.clip(np.round(frac * stored_size), 1, stored_size)
    px = np.minimum(np.where((stored_size - px) % 2 == 1, px + 1, px), stored_size)
    return px / stored_size


def _aa_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) weights of antialiased bilinear resampling (align_corners=False): a triangle filter
    widened by the shrink factor, normalised per output sample; torch's and PIL's scheme."""
    scale = n_in / n_out
    support = scale if scale >= 1.0 else 1.0
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    out = np.zeros((n_out, n_in), dtype=np.float64)
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)  # int() truncates toward zero, as the C++ cast does
        hi = min(int(center + support + 0.5), n_in)
        x = (np.arange(lo, hi) - center + 0.5) * inv
        wts = np.clip(1.0 - np.abs(x), 0.0, None)
        total = wts.sum()
        out[i, lo:hi] = wts / total if total > 0 else 0.0
    return out


def resize_bilinear(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(..., H, W) float -> (..., R_h, R_w) float32, antialiased bilinear (geometry._resize 'bilinear')."""
    if tuple(x.shape[-2:]) == tuple(size):
        return x.astype(np.float32, copy=False)
    wy = _aa_weights(x.shape[-2], size[0]).astype(np.float32)
    wx = _aa_weights(x.shape[-1], size[1]).astype(np.float32)
    return np.einsum("rh,...hw,cw->...rc", wy, x.astype(np.float32, copy=False), wx, optimize=True)


def model_input(images: np.ndarray, boxes: np.ndarray, size: int, mode: str) -> np.ndarray:
    """(B, S, S) uint8 -> (B, 1, R, R) float32 in [0, 1]: the model frame of each image (geometry.model_input
    with bilinear interpolation)."""
    x = images.astype(np.float32)[:, None] / np.float32(255.0)
    S, r = x.shape[-1], int(size)
    if mode == "squash":
        return resize_bilinear(x, (r, r))
    out = []
    for i in range(x.shape[0]):
        x0, y0, x1, y1 = (float(v) for v in boxes[i])
        if mode == "crop":
            r0, r1, c0, c1 = round(y0 * S), round(y1 * S), round(x0 * S), round(x1 * S)
            out.append(resize_bilinear(x[i:i + 1, :, r0:r1, c0:c1], (r, r)))
        else:  # pad: the inner image, then centred zero padding to R x R
            ih, iw = max(1, round(r / (y1 - y0))), max(1, round(r / (x1 - x0)))
            inner = resize_bilinear(x[i:i + 1], (min(ih, r), min(iw, r)))
            pt, pl = (r - inner.shape[-2]) // 2, (r - inner.shape[-1]) // 2
            frame = np.zeros((1, 1, r, r), dtype=np.float32)
            frame[..., pt:pt + inner.shape[-2], pl:pl + inner.shape[-1]] = inner
            out.append(frame)
    return np.concatenate(out, 0)


def gaussian_blur(x: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur of (B, 1, H, W) float32, kernel radius 3 sigma, reflect padding
    (the radius shrinks, renormalised, when the image is too small to reflect it)."""
    radius = max(1, int(round(3 * sigma)))
    t = np.arange(-radius, radius + 1, dtype=np.float32)
    k = np.exp(-t**2 / np.float32(2 * sigma**2))
    k = k / k.sum()
    r = min(radius, x.shape[-1] - 1, x.shape[-2] - 1)
    if r < radius:
        k, radius = k[radius - r: radius + r + 1] / k[radius - r: radius + r + 1].sum(), r
    pad = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(radius, radius)], mode="reflect")
    W = x.shape[-1]
    y = sum(k[j] * pad[..., j:j + W] for j in range(len(k)))
    pad = np.pad(y, [(0, 0)] * (x.ndim - 2) + [(radius, radius), (0, 0)], mode="reflect")
    H = x.shape[-2]
    return sum(k[j] * pad[..., j:j + H, :] for j in range(len(k))).astype(np.float32)


def _pool_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) adaptive average pooling: output i averages inputs floor(i n/m) .. ceil((i+1) n/m)."""
    out = np.zeros((n_out, n_in), dtype=np.float32)
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        out[i, lo:hi] = 1.0 / (hi - lo)
    return out


def to_model_grid(frame_map: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """Average-pool (B, C, R_h, R_w) onto the (h, w) grid (geometry.to_model_grid)."""
    py, px = _pool_matrix(frame_map.shape[-2], grid[0]), _pool_matrix(frame_map.shape[-1], grid[1])
    return np.einsum("ih,bchw,jw->bcij", py, frame_map.astype(np.float32, copy=False), px, optimize=True)


def undo_box(maps: np.ndarray, boxes: np.ndarray, out_shape: tuple[int, int] | None = None) -> np.ndarray:
    """Maps (B, C, h, w) on the model frame -> (B, C, H, W) float32 on the whole image (geometry.undo_box):
    the bilinear value at each output cell centre (border padding), the map's minimum outside the frame."""
    B, C, h, w = maps.shape
    H, W = out_shape or (h, w)
    maps = maps.astype(np.float32, copy=False)
    boxes = np.asarray(boxes, dtype=np.float64)
    if (H, W) == (h, w) and bool((boxes == np.array([0.0, 0.0, 1.0, 1.0])).all()):
        return maps
    u, v = (np.arange(W) + 0.5) / W, (np.arange(H) + 0.5) / H
    out = np.empty((B, C, H, W), dtype=np.float32)
    for b in range(B):
        x0, y0, x1, y1 = boxes[b]
        # sampling coordinates in [-1, 1] rounded to float32 as grid_sample receives them
        gx = (((u - x0) / (x1 - x0)) * 2 - 1).astype(np.float32)
        gy = (((v - y0) / (y1 - y0)) * 2 - 1).astype(np.float32)
        ix = np.clip(((gx.astype(np.float64) + 1) * w - 1) / 2, 0, w - 1)
        iy = np.clip(((gy.astype(np.float64) + 1) * h - 1) / 2, 0, h - 1)
        jx, jy = np.floor(ix).astype(int), np.floor(iy).astype(int)
        fx, fy = (ix - jx).astype(np.float32), (iy - jy).astype(np.float32)
        jx1, jy1 = np.minimum(jx + 1, w - 1), np.minimum(jy + 1, h - 1)
        m = maps[b]
        top = m[:, jy][:, :, jx] * (1 - fx) + m[:, jy][:, :, jx1] * fx
        bot = m[:, jy1][:, :, jx] * (1 - fx) + m[:, jy1][:, :, jx1] * fx
        val = top * (1 - fy)[:, None] + bot * fy[:, None]
        outside = (np.abs(gy)[:, None] > 1) | (np.abs(gx)[None, :] > 1)
        out[b] = np.where(outside[None], m.min(axis=(1, 2))[:, None, None], val)
    return out
