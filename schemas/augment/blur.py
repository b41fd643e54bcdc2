"""``blur:sigma=1,side=512``: Gaussian blur of standard deviation ``sigma`` pixels of a ``side``-pixel image.

As for ``translate``, the width is normalised: on an H x W image the kernel's standard deviations are
``sigma * W / side`` across and ``sigma * H / side`` down, so the blur covers the same part of the picture at
every resolution. Per axis: weights ``exp(-k^2 / (2 s^2))`` for k = -r..r, r = ceil(4 s), divided by their
sum; the border mirrored with its edge pixel repeated (``d c b a | a b c d | d c b a``); the two axes one
after the other in float64, then rounded half to even. An axis whose r is 0 is left alone.

The mirrored image repeats with period 2n along an axis of n pixels, so a kernel longer than that adds the
same pixels again and again: when r exceeds 2n (a large ``sigma`` on a small ``side``) the weights are first
summed per offset modulo 2n (:func:`axis_weights`), which gives the same sum, up to float rounding, at a cost bounded
by the image's size rather than by ``sigma * side``. Kernels with r <= 2n take the unchanged path."""
from __future__ import annotations

import math

import numpy as np

from xbench.schemas.augment._base import Augmentation, Param

#: taps up to which the axis is summed directly; longer kernels go through an FFT (same sum, float rounding)
_DIRECT_TAPS = 25
_BAND_PIXELS = 1 << 20
#: offsets of a long kernel summed at a time when it is folded (axis_weights)
_FOLD_SLICE = 1 << 20


def kernel(s: float) -> np.ndarray:
    if not 2.0 * s * s > 0:  # s = 0, or so small (1e-300 passes the range check) that s^2 underflows: 0/0 below
        return np.ones(1)  # the Gaussian's limit as s -> 0, the identity
    r = math.ceil(4.0 * s)
    k = np.arange(-r, r + 1, dtype=np.float64)
    w = np.exp(-(k * k) / (2.0 * s * s)) if r else np.ones(1)
    return w / w.sum()


def axis_weights(s: float, n: int) -> np.ndarray:
    """The weights one axis of n pixels is convolved with: :func:`kernel` (offsets -r..r) when r <= 2n;
    otherwise the kernel summed per offset modulo 2n, the period of the axis mirrored as ``dcba|abcd|dcba``,
    as offsets -n..n (the mass of offset n = -n modulo 2n split evenly between the two ends, so the weights
    stay symmetric). The long kernel is summed in slices, never held whole."""
    r = math.ceil(4.0 * s) if s > 0 else 0
    if r <= 2 * n:
        return kernel(s)
    folded = np.zeros(2 * n)
    for k0 in range(-r, r + 1, _FOLD_SLICE):
        k = np.arange(k0, min(k0 + _FOLD_SLICE, r + 1), dtype=np.float64)
        folded += np.bincount(((k.astype(np.int64) + n) % (2 * n)), weights=np.exp(-(k * k) / (2.0 * s * s)),
                              minlength=2 * n)  # index m holds offset m - n
    out = np.empty(2 * n + 1)
    out[:2 * n] = folded
    out[0] = out[2 * n] = folded[0] / 2.0
    return out / out.sum()


def _blur_axis(x: np.ndarray, weights: np.ndarray, axis: int) -> np.ndarray:
    """``x`` (float64) convolved along ``axis`` with ``weights``, border mirrored (module doc)."""
    r = len(weights) // 2
    if r == 0:
        return x
    pad = [(0, 0), (0, 0)]
    pad[axis] = (r, r)
    padded = np.pad(x, pad, mode="symmetric")
    n = x.shape[axis]
    if len(weights) <= _DIRECT_TAPS:
        out = np.zeros(x.shape)
        for t, wt in enumerate(weights):
            out += wt * (padded[t:t + n] if axis == 0 else padded[:, t:t + n])
        return out
    size = padded.shape[axis] + len(weights) - 1
    spec = np.fft.rfft(padded, size, axis=axis) * \
        np.fft.rfft(weights[::-1], size).reshape((-1, 1) if axis == 0 else (1, -1))
    full = np.fft.irfft(spec, size, axis=axis)
    # full[m] = sum_t w[t] padded[m - (2r - t)]: the output at i needs m = i + 2r
    return full[2 * r:2 * r + n] if axis == 0 else full[:, 2 * r:2 * r + n]


def image(img: np.ndarray, params, seed: int) -> np.ndarray:
    h, w = img.shape
    down = axis_weights(params["sigma"] * h / params["side"], h)
    across = axis_weights(params["sigma"] * w / params["side"], w)
    # each pass in bands of the other axis: a large original needs one float64 copy, not several
    mid = np.empty((h, w))
    cols = max(1, _BAND_PIXELS // h)
    for c0 in range(0, w, cols):
        mid[:, c0:c0 + cols] = _blur_axis(img[:, c0:c0 + cols].astype(np.float64), down, 0)
    out = np.empty((h, w), dtype=np.uint8)
    rows = max(1, _BAND_PIXELS // w)
    for r0 in range(0, h, rows):
        out[r0:r0 + rows] = np.clip(np.rint(_blur_axis(mid[r0:r0 + rows], across, 1)), 0, 255)
    return out


AUGMENTATION = Augmentation(
    "blur", "Gaussian blur, sigma in pixels of a side-pixel image",
    params=(Param("sigma", float, 1.0, 0.0, 32.0, "standard deviation, pixels of a side x side image"),
            Param("side", int, 512, 1, 65536, "the side sigma is counted in")),
    image=image)
