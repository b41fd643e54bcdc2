"""Faithful preprocessing: histogram equalisation, the official per-model transforms, and the
runner handing each adapter original or stored pixels."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xbench.extract.models.crossattn import carzero, kad, mavl, medklip  # noqa: E402
from xbench.extract.models.crossattn.common import AdapterConfigError  # noqa: E402
from xbench.extract.models.pixels import PILResize, equalize_hist  # noqa: E402

CLASSES = ("Pleural effusion", "Pneumothorax", "Lung cavity", "Cardiomegaly")


def sample_images(seed=0):
    """Originals of several shapes and contents, constant and two-level images included."""
    rng = np.random.default_rng(seed)
    out = [rng.integers(0, 256, (h, w), dtype=np.uint8) for h, w in [(37, 51), (64, 29), (40, 40)]]
    out.append(np.full((9, 13), 77, np.uint8))
    out.append(rng.choice(np.array([3, 200], np.uint8), (21, 17)))
    out.append(rng.normal(100, 4, (30, 33)).clip(0, 255).astype(np.uint8))
    return out


# --------------------------------------------------------------------------------------------
# histogram equalisation
# --------------------------------------------------------------------------------------------
def brute_force_equalize(image: np.ndarray) -> np.ndarray:
    """Equalisation spelled out pixel by pixel from the documented rule (no np.histogram/np.interp)."""
    x = image.astype(np.float64) / 255.0
    lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    width = (hi - lo) / 256
    counts = [0] * 256
    for v in x.ravel():
        k = min(int((v - lo) / width), 255)
        # a value on an inner edge belongs to the upper bin, the maximum to the last
        if k < 255 and v >= lo + (k + 1) * width:
            k += 1
        counts[k] += 1
    cdf = np.cumsum(counts) / x.size
    centres = [lo + (k + 0.5) * width for k in range(256)]
    out = np.empty_like(x)
    for idx, v in np.ndenumerate(x):
        if v <= centres[0]:
            y = cdf[0]
        elif v >= centres[-1]:
            y = cdf[-1]
        else:
            k = int((v - centres[0]) / width)
            k = min(max(k, 0), 254)
            while v > centres[k + 1]:
                k += 1
            while v < centres[k]:
                k -= 1
            t = (v - centres[k]) / (centres[k + 1] - centres[k])
            y = cdf[k] + t * (cdf[k + 1] - cdf[k])
        out[idx] = y
    return (255 * out).astype(np.uint8)


@pytest.mark.parametrize("k", range(6))
def test_equalize_matches_a_brute_force_computation(k):
    im = sample_images()[k]
    ref = brute_force_equalize(im)
    got = equalize_hist(im)
    # float rounding at a bin edge or in the interpolation may move a value by one grey level
    assert np.abs(got.astype(int) - ref).max() <= 1 and (got == ref).mean() > 0.98


@pytest.mark.parametrize("k", range(6))
def test_equalize_is_skimage_exactly(k):
    exposure = pytest.importorskip("skimage.exposure")
    im = sample_images()[k]
    ref = (255 * exposure.equalize_hist(im.astype(float) / 255.0)).astype(np.uint8)
    np.testing.assert_array_equal(equalize_hist(im), ref)


def test_equalize_refuses_other_inputs():
    with pytest.raises(ValueError, match="2-D uint8"):
        equalize_hist(np.zeros((3, 3), np.float32))


# --------------------------------------------------------------------------------------------
# per-model transforms against upstream-style compositions written here
# --------------------------------------------------------------------------------------------
def upstream_pil(image, size, mode, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)):
    from PIL import Image
    from torchvision import transforms

    t = transforms.Compose([transforms.Resize([size, size], interpolation=mode), transforms.ToTensor(),
                            transforms.Normalize(mean, std)])
    return t(Image.fromarray(image).convert("RGB"))


def test_medklip_mavl_kad_transforms_are_the_official_compositions(tiny_bert, tiny_cache, tiny_config):
    from torchvision.transforms import InterpolationMode as M

    for build, name, mode in [(medklip.build, "medklip", M.BILINEAR), (mavl.build, "mavl", M.BILINEAR),
                              (kad.build, "kad", M.BICUBIC)]:
        a = build(tiny_config(name, tiny_bert, tiny_cache))
        t = a.image_transform("chestxray14")
        assert not t.equalize and t.wants_original
        for im in sample_images():
            torch.testing.assert_close(t(im, im.shape), upstream_pil(im, 64, mode), rtol=0, atol=0)


def test_equalize_auto_follows_the_official_rsna_loaders(tiny_bert, tiny_cache, tiny_config):
    from torchvision.transforms import InterpolationMode as M

    m = medklip.build(tiny_config("medklip", tiny_bert, tiny_cache))
    assert m.image_transform("rsna_pneumonia").equalize and not m.image_transform("siim_acr").equalize
    assert not m.image_transform().equalize  # an unnamed dataset: off
    assert mavl.build(tiny_config("mavl", tiny_bert, tiny_cache)).image_transform("rsna_pneumonia").equalize
    for name in ("kad", "carzero"):
        a = {"kad": kad, "carzero": carzero}[name].build(tiny_config(name, tiny_bert, tiny_cache))
        assert not a.image_transform("rsna_pneumonia").equalize
    im = sample_images()[0]
    # the RSNA loader: equalise the original, then the usual transform
    torch.testing.assert_close(m.image_transform("rsna_pneumonia")(im, im.shape),
                               upstream_pil(equalize_hist(im), 64, M.BILINEAR), rtol=0, atol=0)
    cfg = tiny_config("medklip", tiny_bert, tiny_cache)
    on = medklip.build({**cfg, "options": {**cfg["options"], "equalize": True}})
    assert on.image_transform("siim_acr").equalize
    with pytest.raises(AdapterConfigError, match="equalize"):
        medklip.build({**cfg, "options": {**cfg["options"], "equalize": "yes"}})


def upstream_carzero(image, scale=72, crop=64):
    """``_resize_img`` + test transform, with upstream's arithmetic written out independently."""
    import cv2
    from PIL import Image
    from torchvision import transforms

    h, w = image.shape
    if h >= w:
        nh, nw = scale, int(w * scale / h)
    else:
        nh, nw = int(h * scale / w), scale
    resized = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA)
    ph, pw = scale - nh, scale - nw
    padded = np.pad(resized, [(ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2)])
    t = transforms.Compose([transforms.CenterCrop(crop), transforms.ToTensor(), transforms.Normalize([0.4978], [0.2449])])
    return t(Image.fromarray(padded).convert("RGB"))


def test_carzero_transform_is_process_img(tiny_bert, tiny_cache, tiny_config):
    pytest.importorskip("cv2")
    a = carzero.build(tiny_config("carzero", tiny_bert, tiny_cache))
    t = a.image_transform("chexlocalize")
    for im in sample_images():
        torch.testing.assert_close(t(im, im.shape), upstream_carzero(im), rtol=0, atol=0)


def test_carzero_on_a_stored_image_undoes_the_stretch():
    """The stored stretched image goes to the same letterbox as the original (up to resampling)."""
    pytest.importorskip("cv2")
    from PIL import Image

    yy, xx = np.mgrid[0:600, 0:300]
    original = ((np.sin(yy / 40) + np.cos(xx / 25)) * 60 + 128).clip(0, 255).astype(np.uint8)
    stored = np.asarray(Image.fromarray(original).resize((128, 128), Image.Resampling.BILINEAR))
    t = carzero.CARZeroTransform(scale=72, crop=64)
    a, b = t.canvas(original, (600, 300)), t.canvas(stored, (600, 300))
    assert a.shape == b.shape == (72, 72)
    assert (a[:, :18] == 0).all() and (b[:, :18] == 0).all()  # the same zero padding: nw = 36, left = 18
    assert np.abs(a.astype(int) - b).mean() < 4


def test_direct_call_on_stored_images_equals_runner_inputs(tiny_bert, tiny_cache, tiny_config):
    """An adapter called on stored uint8 images gives what it gives on the runner's prepared inputs."""
    a = kad.build(tiny_config("kad", tiny_bert, tiny_cache))
    a.set_classes(CLASSES)
    imgs = torch.randint(0, 256, (2, 80, 80), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    sizes = torch.tensor([[1000, 800], [700, 900]])
    prepared = torch.stack([a.image_transform()(imgs[i].numpy(), sizes[i].tolist()) for i in range(2)])
    direct, via = a(imgs, sizes), a(prepared, sizes)
    torch.testing.assert_close(direct.scores, via.scores, rtol=0, atol=0)
    torch.testing.assert_close(direct.maps, via.maps, rtol=0, atol=0)


def test_pil_filter_is_checked():
    with pytest.raises(ValueError, match="filter"):
        PILResize(filter="lanczos")


# --------------------------------------------------------------------------------------------
# the runner: original pixels when the store keeps them
# --------------------------------------------------------------------------------------------
PHANTOM_CLASSES = ("Pleural effusion", "Pneumothorax")
ORIG_SIZES = [(90, 70), (64, 100), (80, 80), (120, 60), (70, 90)]


def write_store(path, keep_original: bool):
    from PIL import Image

    from xbench.schemas import ImagesWriter

    rng = np.random.default_rng(3)
    originals = [rng.integers(0, 256, hw, dtype=np.uint8) for hw in ORIG_SIZES]
    w = ImagesWriter(path, "phantom", case_ids=[f"c{i}" for i in range(5)], classes=PHANTOM_CLASSES, image_size=48,
                     cases_per_block=2, keep_original=keep_original)
    for b in w.blocks_todo():
        a, z = w.block_rows(b)
        stored = np.stack([np.asarray(Image.fromarray(o).resize((48, 48), Image.Resampling.BILINEAR)) for o in originals[a:z]])
        w.write_block(b, stored, np.array(ORIG_SIZES[a:z]), originals[a:z] if keep_original else None)
    w.finish()
    return originals


@pytest.mark.parametrize("model", ["medklip", "carzero"])
def test_runner_gives_the_adapter_the_original_pixels(model, tmp_path, tiny_bert, tiny_cache, tiny_config):
    from xbench.extract import runner
    from xbench.schemas import read_images, read_submission, validate_submission

    if model == "carzero":
        pytest.importorskip("cv2")
    originals = write_store(tmp_path / "k.zarr", keep_original=True)
    write_store(tmp_path / "n.zarr", keep_original=False)
    cfg = tiny_config(model, tiny_bert, tiny_cache)
    torch.manual_seed(0)  # the run below builds its own adapter: the same random weights
    adapter = {"medklip": medklip, "carzero": carzero}[model].build(cfg)
    transform = adapter.image_transform("phantom")

    # the DataLoader items: the transform of each original, or of each stored image
    item = runner._Blocks(tmp_path / "k.zarr", "phantom", [(1, 2, 4)], transform, originals=True)[0]
    expected = torch.stack([transform(originals[r], ORIG_SIZES[r]) for r in (2, 3)])
    torch.testing.assert_close(item[1], expected, rtol=0, atol=0)
    stored = np.asarray(read_images(tmp_path / "n.zarr").datasets["phantom"].image[2:4])
    item = runner._Blocks(tmp_path / "n.zarr", "phantom", [(1, 2, 4)], transform, originals=False)[0]
    torch.testing.assert_close(item[1], torch.stack([transform(stored[k], ORIG_SIZES[2 + k]) for k in range(2)]))
    assert runner.input_pixels(adapter, "phantom", True)["source"] == "original"
    assert runner.input_pixels(adapter, "phantom", False)["source"] == "stored"

    # a whole run: scores are those of the adapter on the transformed originals
    out = tmp_path / "sub.zarr"
    torch.manual_seed(0)
    runner.run_extraction(runner.ExtractOptions(model=model, images=tmp_path / "k.zarr", out=out, overrides=cfg,
                                                batch_size=2, device="cpu", workers=0, quiet=True))
    assert validate_submission(out) == []
    sub = read_submission(out)
    assert sub.attrs["input_pixels"]["phantom"]["source"] == "original"
    adapter.set_classes(PHANTOM_CLASSES)
    ref = adapter(torch.stack([transform(o, o.shape) for o in originals]), torch.tensor(ORIG_SIZES))
    np.testing.assert_allclose(np.asarray(sub.datasets["phantom"].scores[:]), ref.scores.numpy(), rtol=1e-5, atol=1e-6)


def test_resumed_extraction_on_originals_is_byte_identical(tmp_path, tiny_bert, tiny_cache, tiny_config, monkeypatch):
    from xbench.extract import runner
    from xbench.schemas import SubmissionWriter, store_sha256

    write_store(tmp_path / "k.zarr", keep_original=True)
    cfg = tiny_config("kad", tiny_bert, tiny_cache)

    def run(out):
        torch.manual_seed(0)
        return runner.run_extraction(runner.ExtractOptions(model="kad", images=tmp_path / "k.zarr", out=out, overrides=cfg,
                                                    batch_size=2, cases_per_block=2, device="cpu", workers=0,
                                                    quiet=True))

    run(tmp_path / "clean.zarr")
    original_write = SubmissionWriter.write_block
    calls = []

    def crash_on_second(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated kill")
        return original_write(self, *args, **kwargs)

    monkeypatch.setattr(SubmissionWriter, "write_block", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed.zarr")
    monkeypatch.setattr(SubmissionWriter, "write_block", original_write)
    assert run(tmp_path / "resumed.zarr")["blocks_written"] == 2  # of 3: the first was kept
    assert store_sha256(tmp_path / "clean.zarr") == store_sha256(tmp_path / "resumed.zarr")
