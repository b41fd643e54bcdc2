"""Dual encoders on original images: open_clip's own evaluation transform, and maps put back."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xbench.extract import runner
from xbench.extract.models import create_adapter
from xbench.extract.models.geometry import frame_boxes
from xbench.extract.models.pixels import DualEncoderTransform

CLASSES = ("Pneumothorax", "Pleural effusion")
ORIGINALS = [(90, 70), (64, 100), (80, 80)]


def grey(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w), dtype=np.uint8)


@pytest.mark.parametrize("mode, open_clip_mode", [("crop", "shortest"), ("squash", "squash")])
@pytest.mark.parametrize("hw", ORIGINALS)
def test_host_transform_is_open_clips_eval_transform(mode, open_clip_mode, hw):
    from open_clip.transform import image_transform
    from PIL import Image

    t = DualEncoderTransform(size=(32, 32), mode=mode)
    ref = image_transform(32, is_train=False, resize_mode=open_clip_mode)
    im = grey(*hw)
    torch.testing.assert_close(t(im, hw), ref(Image.fromarray(im)), rtol=0, atol=0)


@pytest.mark.parametrize("hw", ORIGINALS + [(1000, 333)])
def test_crop_boxes_are_the_cropped_region(hw):
    """The box covers exactly the original pixels that survive resize + centre crop, and agrees
    with the device path's box (snapped to stored pixels) to within a stored pixel."""
    t = DualEncoderTransform(size=(32, 32), mode="crop")
    nh, nw, top, left = t.frame(hw)
    box = t.boxes(torch.tensor([hw]))[0].tolist()
    assert box == [left / nw, top / nh, (left + 32) / nw, (top + 32) / nh]
    assert min(nh, nw) == 32 and (box[2] - box[0]) * nw == pytest.approx(32)
    device = frame_boxes(torch.tensor([hw]), "crop", 512)[0].tolist()
    assert np.allclose(box, device, atol=2 / 512 + 1 / 32)
    floor = DualEncoderTransform(size=(32, 32), mode="crop", crop_offset="floor").frame(hw)
    assert floor[2] == (nh - 32) // 2 and floor[3] == (nw - 32) // 2


def test_open_clip_adapter_uses_originals_only_when_the_store_has_them(tiny_open_clip, tmp_path):
    from xbench.schemas import ImagesWriter, read_submission, validate_submission

    path = tmp_path / "k.zarr"
    w = ImagesWriter(path, "phantom", case_ids=["a", "b", "c"], classes=CLASSES, image_size=48, cases_per_block=2,
                     keep_original=True)
    originals = [grey(*hw, seed=i) for i, hw in enumerate(ORIGINALS)]
    for b in w.blocks_todo():
        s, e = w.block_rows(b)
        w.write_block(b, np.zeros((e - s, 48, 48), np.uint8), np.array(ORIGINALS[s:e]), originals[s:e])
    w.finish()
    kw = dict(model=f"local-dir:{tiny_open_clip}", weights="random", preprocess={"resize": "crop"})
    a = create_adapter("open_clip", **kw)
    assert runner.input_pixels(a, "phantom", False)["transform"] is None  # stored image: device path
    assert runner.input_pixels(a, "phantom", True)["source"] == "original"
    assert runner.input_pixels(create_adapter("open_clip", **{**kw, "preprocess": {"resize": "pad"}}),
                               "phantom", True)["transform"] is None

    out = tmp_path / "sub.zarr"
    torch.manual_seed(0)
    runner.run_extraction(runner.ExtractOptions(model="open_clip", images=path, out=out, overrides=kw,
                                                batch_size=2, device="cpu", workers=0, quiet=True))
    assert validate_submission(out) == []
    sub = read_submission(out)
    assert sub.attrs["input_pixels"]["phantom"]["source"] == "original"
    # the same numbers as the adapter on open_clip's transform of each original
    torch.manual_seed(0)
    a = create_adapter("open_clip", **kw)
    a.set_classes(CLASSES)
    t = a.image_transform("phantom")
    ref = a(torch.stack([t(o, o.shape) for o in originals]), torch.tensor(ORIGINALS))
    np.testing.assert_allclose(np.asarray(sub.datasets["phantom"].scores[:]), ref.scores.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(sub.datasets["phantom"].saliency[:], dtype=np.float32), ref.maps.numpy(),
                               rtol=1e-2, atol=1e-3)
