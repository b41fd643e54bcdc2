"""The NumPy model-frame geometry (extract/models/frame.py) that the weight-free baselines run on, checked
against the torch geometry every real model uses (extract/models/geometry.py) on random images and odd sizes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xbench.extract.models import frame, geometry

SIZES = np.array([[256, 256], [300, 200], [180, 400], [1, 7]])


def _images(n=4, s=64, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, s, s), dtype=np.uint8)


@pytest.mark.parametrize("mode", ["squash", "crop", "pad"])
def test_boxes_equal_the_torch_boxes(mode):
    for stored in (64, 65, 256):
        want = geometry.frame_boxes(torch.from_numpy(SIZES), mode, stored).numpy()
        assert np.array_equal(frame.frame_boxes(SIZES, mode, stored), want)


@pytest.mark.parametrize("mode", ["squash", "crop", "pad"])
@pytest.mark.parametrize("size", [224, 48, 64, 37])
def test_model_input_matches_torch_bilinear_antialias(mode, size):
    imgs = _images()
    boxes = frame.frame_boxes(SIZES, mode, 64)
    want = geometry.model_input(torch.from_numpy(imgs), torch.from_numpy(boxes), size, mode, "bilinear").numpy()
    got = frame.model_input(imgs, boxes, size, mode)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-5)  # float32 rounding of the weights


@pytest.mark.parametrize("sigma", [0.7, 3.4, 13.4, 40.0])
def test_blur_matches_a_direct_convolution(sigma):
    """Brute force: the 2-D kernel outer(k, k) applied at every pixel of the reflect-padded image."""
    x = np.random.default_rng(1).random((2, 1, 20, 23)).astype(np.float32)
    radius = max(1, int(round(3 * sigma)))
    t = np.arange(-radius, radius + 1)
    k = np.exp(-t**2 / (2 * sigma**2))
    r = min(radius, 22, 19)
    k = k[radius - r: radius + r + 1]
    k = k / k.sum()
    pad = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (r, r), (r, r)], mode="reflect")
    want = np.zeros_like(x, dtype=np.float64)
    for i in range(20):
        for j in range(23):
            want[..., i, j] = (pad[..., i:i + 2 * r + 1, j:j + 2 * r + 1] * np.outer(k, k)).sum((-1, -2))
    np.testing.assert_allclose(frame.gaussian_blur(x, sigma), want, atol=2e-6)


@pytest.mark.parametrize("grid", [(14, 14), (7, 9), (1, 1), (64, 64)])
def test_pooling_matches_adaptive_avg_pool(grid):
    x = np.random.default_rng(2).random((2, 3, 64, 50)).astype(np.float32)
    want = geometry.to_model_grid(torch.from_numpy(x), grid).numpy()
    np.testing.assert_allclose(frame.to_model_grid(x, grid), want, atol=1e-6)


@pytest.mark.parametrize("mode", ["squash", "crop", "pad"])
@pytest.mark.parametrize("out", [(14, 14), (8, 11)])
def test_undo_box_matches_grid_sample(mode, out):
    maps = np.random.default_rng(3).random((4, 2, 14, 14)).astype(np.float32)
    boxes = frame.frame_boxes(SIZES, mode, 64)
    want = geometry.undo_box(torch.from_numpy(maps), torch.from_numpy(boxes), out).numpy()
    np.testing.assert_allclose(frame.undo_box(maps, boxes, out), want, atol=1e-6)


@pytest.mark.parametrize("mode", ["squash", "crop", "pad"])
def test_dog_equals_the_torch_geometry_computation(mode):
    """The dog baseline's maps and scores, recomputed here with the torch geometry (the adapter's former
    torch implementation): equal to float32 rounding."""
    from xbench.extract.models.baselines import DoGBaseline

    imgs, sizes = _images(4, 96), SIZES
    dog = DoGBaseline((14, 14), size=80, resize=mode)
    dog.set_classes(["A", "B"])
    scores, maps = dog.outputs(imgs, sizes)
    t_boxes = geometry.frame_boxes(torch.from_numpy(sizes), mode, 96)
    x = geometry.model_input(torch.from_numpy(imgs), t_boxes, 80, mode, "bilinear")
    blur = [torch.from_numpy(frame.gaussian_blur(x.numpy(), s)) for s in dog.sigma]
    want = geometry.undo_box(geometry.to_model_grid(blur[0] - blur[1], (14, 14)), t_boxes, (14, 14))
    flat = want.flatten(1)
    z = (flat.amax(1) - flat.mean(1)) / (flat.std(1) + 1e-6) - 3.0
    np.testing.assert_allclose(maps[:, 0], want[:, 0].numpy(), atol=1e-6)
    assert np.array_equal(maps[:, 0], maps[:, 1]) and np.array_equal(scores[:, 0], scores[:, 1])
    np.testing.assert_allclose(scores[:, 0], z.numpy(), atol=1e-4)
