"""Map geometry: the model frame's box, the forward crop/pad, and undoing it (hand-worked values),
then end to end with image-driven saliency (DoG baseline, and an image-driven fake tower through the
dual-encoder adapter) so that a wrong undo moves the peak to a different cell."""
from __future__ import annotations

import pytest
import torch

from xbench.extract.models.baselines import DoGBaseline
from xbench.extract.models.dual import DualEncoderAdapter
from xbench.extract.models.geometry import frame_boxes, model_input, undo_box


def test_frame_boxes_hand_values():
    sizes = torch.tensor([[100, 200], [200, 100], [50, 50], [100, 300]])
    sq = frame_boxes(sizes, "squash", 64)
    assert torch.equal(sq, torch.tensor([[0.0, 0, 1, 1]] * 4, dtype=torch.float64))
    crop = frame_boxes(sizes, "crop", 64)
    assert crop[0].tolist() == [0.25, 0.0, 0.75, 1.0]  # wide: central half of the columns
    assert crop[1].tolist() == [0.0, 0.25, 1.0, 0.75]  # tall: central half of the rows
    assert crop[2].tolist() == [0.0, 0.0, 1.0, 1.0]
    # 64/3 = 21.3 px -> 21, odd margin -> 22 px so the crop stays centred on whole pixels
    assert crop[3].tolist() == [21 / 64, 0.0, 43 / 64, 1.0]
    pad = frame_boxes(sizes, "pad", 64)
    assert pad[0].tolist() == [0.0, -0.5, 1.0, 1.5]
    assert pad[1].tolist() == [-0.5, 0.0, 1.5, 1.0]
    with pytest.raises(ValueError, match="resize mode"):
        frame_boxes(sizes, "stretch", 64)


def test_undo_crop_hand_values():
    maps = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    box = torch.tensor([[0.25, 0.0, 0.75, 1.0]], dtype=torch.float64)
    out = undo_box(maps, box, (2, 4))
    # outer columns were never seen: the map's minimum; inner centres land exactly on map pixels
    assert out[0, 0].tolist() == [[1.0, 1.0, 2.0, 1.0], [1.0, 3.0, 4.0, 1.0]]


def test_undo_pad_hand_values():
    frame = torch.arange(8, dtype=torch.float32).view(1, 1, 4, 2)  # rows 0..3 of the padded frame
    box = torch.tensor([[0.0, -0.5, 1.0, 1.5]], dtype=torch.float64)
    out = undo_box(frame, box, (2, 2))
    assert torch.equal(out, frame[:, :, 1:3])  # the image occupies the middle two rows


def test_undo_identity_for_unit_box():
    maps = torch.randn(3, 2, 5, 5)
    assert torch.equal(undo_box(maps, frame_boxes(torch.tensor([[10, 30]] * 3), "squash", 64)), maps)


def test_model_input_crop_and_pad():
    cols = torch.arange(64, dtype=torch.uint8).view(1, 1, 64).expand(1, 64, 64)
    box = frame_boxes(torch.tensor([[100, 200]]), "crop", 64)
    x = model_input(cols, box, 32, "crop")
    assert torch.allclose(x[0, 0, 0] * 255, torch.arange(16, 48, dtype=torch.float32), atol=1e-4)
    white = torch.full((1, 64, 64), 255, dtype=torch.uint8)
    box = frame_boxes(torch.tensor([[100, 200]]), "pad", 64)
    x = model_input(white, box, 32, "pad")[0, 0]
    assert x[:8].abs().max() == 0 and x[24:].abs().max() == 0 and torch.allclose(x[8:24], torch.ones(16, 32))


def _peak(m: torch.Tensor) -> tuple[int, int]:
    i = int(torch.argmax(m))
    return divmod(i, m.shape[-1])


@pytest.mark.parametrize("mode", ["squash", "crop", "pad"])
def test_dog_corner_blob_square_image(mode, blobs):
    img = torch.from_numpy(blobs(1, 64, [(0.08, 0.08)]))
    dog = DoGBaseline(grid=(8, 8), size=64, resize=mode)
    dog.set_classes(["A"])
    out = dog(img, torch.tensor([[300, 300]]))
    assert _peak(out.maps[0, 0]) == (0, 0)


@pytest.mark.parametrize("mode", ["squash", "crop"])
def test_dog_blob_tall_image_lands_in_its_cell(mode, blobs):
    # tall original (200 x 100): crop keeps rows y in [0.25, 0.75]. The blob at (x=0.15, y=0.33)
    # is cell (2, 1) of the whole-image 8x8 grid but cell (1, 1) of the cropped frame, so a
    # missing or wrong undo fails this test.
    img = torch.from_numpy(blobs(1, 64, [(0.15, 0.33)], radius=0.05))
    dog = DoGBaseline(grid=(8, 8), size=64, resize=mode)
    dog.set_classes(["A"])
    size = torch.tensor([[200, 100]])
    out = dog(img, size).maps[0, 0]
    assert _peak(out) == (2, 1)
    if mode == "crop":
        frame = torch.from_numpy(dog.frame_maps(img, frame_boxes(size, "crop", 64)))[0, 0]
        assert _peak(frame) == (1, 1)  # the raw model-frame map: a different cell
        assert torch.all(out[[0, 1, 6, 7]] == out.min())  # unseen rows hold the minimum


def test_dog_blob_wide_image_pad(blobs):
    # wide original (100 x 200) letterboxed: the image fills frame rows [0.25, 0.75]. The blob at
    # y = 0.2 is row 1 of the whole-image grid, row 2 of the frame (pad halves the row resolution).
    img = torch.from_numpy(blobs(1, 64, [(0.08, 0.2)], radius=0.05))
    # pixel sigmas: in a 64 px frame the default fractions give an inner sigma under 1 px, and the
    # letterboxed blob (1.6 px tall) then spreads evenly over rows 0 and 1; this test is about geometry
    dog = DoGBaseline(grid=(8, 8), size=64, resize="pad", sigma_px=(2.0, 8.0))
    dog.set_classes(["A"])
    size = torch.tensor([[100, 200]])
    assert _peak(dog(img, size).maps[0, 0]) == (1, 0)
    frame = torch.from_numpy(dog.frame_maps(img, frame_boxes(size, "pad", 64)))[0, 0]
    assert _peak(frame) == (2, 0)


class _BrightnessTower:
    """An image-driven stand-in for a ViT: patch token = (mean brightness of the patch, 1), so
    cos(token, (1, 0)) increases with brightness and the map peaks at the brightest patch."""

    grid, n_prefix = (8, 8), 1

    def tokens_before_last(self, pixels):
        p = torch.nn.functional.adaptive_avg_pool2d(pixels[:, :1], self.grid).flatten(1)
        tok = torch.stack([p, torch.ones_like(p)], -1)
        return torch.cat([tok.mean(1, keepdim=True), tok], 1)

    def last_block(self, x):
        return x

    last_block_value = last_block

    def pool(self, x):
        return x[:, 0]

    def patches(self, x):
        return x[:, 1:]


@pytest.mark.parametrize("method", ["similarity", "maskclip"])
def test_dual_adapter_undoes_centre_crop(method, blobs):
    adapter = DualEncoderAdapter(
        name="fake", tower=_BrightnessTower(), encode_text=lambda t: torch.tensor([[1.0, 0.0]] * len(t)),
        modules=[], logit_scale=10.0, preprocess={"size": 64, "mean": [0.0], "std": [1.0], "resize": "crop"},
        method=method)
    adapter.set_classes(["A", "B"])
    img = torch.from_numpy(blobs(1, 64, [(0.15, 0.33)], radius=0.05))
    out = adapter(img, torch.tensor([[200, 100]]))
    assert out.maps.shape == (1, 2, 8, 8)
    assert _peak(out.maps[0, 0]) == (2, 1)
    assert torch.all(out.maps[0, 0, [0, 1, 6, 7]] == out.maps[0, 0].min())
