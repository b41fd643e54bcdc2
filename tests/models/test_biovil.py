"""BioViL / BioViL-T adapters on tiny random checkpoints in the released layouts (ResNet-18 image
model, 2-layer CXR-BERT): transform, smoothing, crop-aware upsampling, scores, phrases. When
hi-ml-multimodal is installed, one test also compares with its ImageTextInferenceEngine."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("scipy")

from xbench.extract.models import create_adapter, list_models  # noqa: E402
from xbench.extract.models.biovil import (  # noqa: E402
    BioViLImageModel, BioViLTransform, CXRBertText, crop_extent, gaussian_smooth, remap_to_uint8,
    resized_size, whole_image_maps)
from xbench.extract.models.errors import WeightsNotFoundError  # noqa: E402

WORDS = "findings consistent with there is no small left apical pneumothorax effusion pleural atelectasis".split()
CLASSES = ("Pneumothorax", "Pleural effusion", "Atelectasis")


def _perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))


def _image_state(temporal: bool) -> dict:
    """A state dict with the released key names (encoder.encoder.*, projector.model.*), ResNet-18 sized."""
    from torchvision.models.resnet import resnet18

    torch.manual_seed(0)
    net = resnet18()
    state = {f"encoder.encoder.{k}": v for k, v in net.state_dict().items()}
    d = 512
    if temporal:
        state["encoder.backbone_to_vit.weight"] = 0.05 * torch.randn(8, 512, 1, 1)
        state["encoder.missing_previous_emb"] = 0.1 * torch.randn(1, 8, 1, 1)
        state["encoder.vit_pooler.norm_post.weight"] = torch.ones(8)  # ignored: prior-image pooler
        d = 16
    # the authors' projector: hidden size = joint size (model.py:50-55), here 8
    state["projector.model.0.weight"] = 0.05 * torch.randn(8, d, 1, 1)
    state["projector.model.1.weight"] = 1 + 0.1 * torch.randn(8)
    state["projector.model.1.bias"] = 0.1 * torch.randn(8)
    state["projector.model.1.running_mean"] = 0.1 * torch.randn(8)
    state["projector.model.1.running_var"] = 0.5 + torch.rand(8)
    state["projector.model.1.num_batches_tracked"] = torch.tensor(0)
    state["projector.model.3.weight"] = 0.2 * torch.randn(8, 8, 1, 1)
    state["projector.model.3.bias"] = 0.1 * torch.randn(8)
    return state


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from transformers import BertConfig

    root = tmp_path_factory.mktemp("biovil")
    paths = {}
    for name, temporal in (("biovil", False), ("biovil_t", True)):
        model = BioViLImageModel(_image_state(temporal))
        model.load_state_dict(_image_state(temporal) | {}, strict=False)
        _perturb(model, 1)
        state = model.state_dict()
        if temporal:
            state["encoder.vit_pooler.norm_post.weight"] = torch.ones(8)
        paths[name] = root / f"{name}.pt"
        torch.save(state, paths[name])
    text = root / "cxrbert"
    text.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *"abcdefghijklmnopqrstuvwxyz",
             *[f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]]
    (text / "vocab.txt").write_text("\n".join(vocab) + "\n")
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=40)
    cfg.projection_size = 8
    torch.manual_seed(2)
    tm = CXRBertText(cfg)
    _perturb(tm, 3)
    state = {k: v for k, v in tm.state_dict().items()}
    state["cls.predictions.bias"] = torch.zeros(len(vocab))  # the MLM head is ignored
    torch.save(state, text / "pytorch_model.bin")
    (text / "config.json").write_text(json.dumps({**cfg.to_dict(), "model_type": "cxr-bert", "projection_size": 8}))
    paths["text"] = text
    paths["text_module"] = tm.eval()
    return paths


def make(files, variant="biovil", **kw):
    """Small resize / crop (192 / 160, a 5 x 5 grid) keep the CPU tests fast; same code path."""
    kw = {"resize": 192, "crop": 160, **kw}
    return create_adapter(variant, weights=str(files[variant]), text_encoder=str(files["text"]),
                          prompts={"vocabulary": False}, **kw)


def test_registered_and_weights_required(monkeypatch, tmp_path):
    assert {"biovil", "biovil_t"} <= set(list_models())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path), raising=False)
    with pytest.raises(WeightsNotFoundError, match="BioViL"):
        create_adapter("biovil")
    with pytest.raises(WeightsNotFoundError, match="BioViL-T"):
        create_adapter("biovil_t", weights=str(tmp_path / "missing.pt"))


def test_remap_and_geometry_by_hand():
    img = np.array([[10, 20], [30, 110]], np.uint8)
    # (v - 10) / 100 * 255, truncated
    assert remap_to_uint8(img).tolist() == [[0, 25], [51, 255]]
    assert remap_to_uint8(np.full((3, 3), 7, np.uint8)).max() == 0  # constant: zeros, not NaN
    assert resized_size((410, 300), 512) == (int(512 * 410 / 300), 512) == (699, 512)
    assert resized_size((256, 512), 512) == (512, 1024)
    top, left, side = crop_extent((410, 300), 512, 480)
    assert side == int(480 * 300 / 512) == 281 and (left, top) == ((300 - 281) // 2, (410 - 281) // 2)


def test_transform_matches_torchvision_pipeline():
    """Independent: torchvision Compose(Resize(512), CenterCrop(480), ToTensor) on the stretched PIL image."""
    from PIL import Image
    from torchvision import transforms

    rng = np.random.default_rng(0)
    img = rng.integers(20, 200, (300, 410), dtype=np.uint8)
    x = BioViLTransform(crop=480)(img, img.shape)
    a = img.astype(np.float64)
    stretched = ((a - a.min()) / (a.max() - a.min()) * 255).astype(np.uint8)
    ref = transforms.Compose([transforms.Resize(512), transforms.CenterCrop(480), transforms.ToTensor()])(
        Image.fromarray(stretched))
    assert x.shape == (3, 480, 480)
    torch.testing.assert_close(x, ref.repeat(3, 1, 1), atol=0, rtol=0)


def test_upsampling_equals_full_resolution_interpolate_and_nan_fill():
    """whole_image_maps at the original size == F.interpolate onto the crop's extent, padded (NaN -> min)."""
    import torch.nn.functional as F

    g = torch.randn(2, 5, 5)
    h, w = 37, 23
    top, left, side = crop_extent((h, w), 32, 30)
    for mode in ("nearest", "bilinear", "bicubic"):
        got = whole_image_maps(g, (h, w), (h, w), resize=32, crop=30, interpolation=mode)
        kw = {} if mode == "nearest" else {"align_corners": False}
        up = F.interpolate(g[:, None], size=(side, side), mode=mode, **kw)[:, 0]
        ref = g.amin(dim=(1, 2)).view(2, 1, 1).expand(2, h, w).clone()
        ref[:, top:top + side, left:left + side] = up
        torch.testing.assert_close(got, ref, atol=1e-6, rtol=0)
    # a coarser output grid samples the cells' centre pixels
    small = whole_image_maps(g, (h, w), (4, 3), resize=32, crop=30, interpolation="nearest")
    full = whole_image_maps(g, (h, w), (h, w), resize=32, crop=30, interpolation="nearest")
    rows, cols = [(2 * i + 1) * h // 8 for i in range(4)], [(2 * j + 1) * w // 6 for j in range(3)]
    torch.testing.assert_close(small, full[:, rows][:, :, cols])


def test_gaussian_is_scipy_reflect():
    from scipy import ndimage

    m = torch.randn(1, 2, 6, 7)
    got = gaussian_smooth(m, 1.5)
    ref = ndimage.gaussian_filter(m[0, 1].numpy().astype(np.float64), 1.5, mode="reflect")
    np.testing.assert_allclose(got[0, 1].numpy(), ref, atol=1e-6)
    assert torch.equal(gaussian_smooth(m, 0), m)


@pytest.mark.parametrize("variant,official", [("biovil", (480, 15)), ("biovil_t", (448, 14))])
def test_scores_maps_and_phrases(files, variant, official):
    import torch.nn.functional as F

    default = make(files, variant, resize=None, crop=None)  # the authors' 512 / 480 or 448
    assert (default.host.resize, default.host.crop) == (512, official[0])
    assert default.map_shape == (official[1], official[1])
    ad = make(files, variant)
    grid = 5
    ad.set_classes(CLASSES)
    assert ad.map_shape == (grid, grid)
    rng = np.random.default_rng(1)
    origs = [rng.integers(0, 256, hw, dtype=np.uint8) for hw in [(60, 45), (40, 80)]]
    tf = ad.image_transform()
    x = torch.stack([tf(o, o.shape) for o in origs])
    osz = torch.tensor([o.shape for o in origs])
    out = ad(x, osz)
    assert out.scores.shape == (2, 3) and out.maps.shape == (2, 3, grid, grid)
    assert torch.isfinite(out.maps).all() and out.maps.std() > 0
    # independent: the checkpoint's modules by hand (ResNet -> [temporal] -> projector, mean, cosines)
    state = torch.load(files[variant])
    net = BioViLImageModel({k: v for k, v in state.items() if not k.startswith("encoder.vit_pooler.")})
    net.load_state_dict({k: v for k, v in state.items() if not k.startswith("encoder.vit_pooler.")})
    net.eval()
    with torch.no_grad():
        proj = net.projector(net.features(x))  # (B, E, g, g)
        img = F.normalize(proj.mean(dim=(2, 3)), dim=-1)
        tok = __import__("transformers").BertTokenizer.from_pretrained(str(files["text"]))

        def emb(texts):
            t = tok(texts, padding="longest", return_tensors="pt")
            return F.normalize(files["text_module"](t["input_ids"], t["attention_mask"]), dim=-1)

        pos = emb([f"Findings consistent with {c}" for c in CLASSES])
        neg = emb([f"There is no {c}" for c in CLASSES])
        torch.testing.assert_close(out.scores, img @ pos.T - img @ neg.T, atol=1e-5, rtol=0)
        # phrase: trailing punctuation dropped, score cos(image, phrase), map of that phrase
        scores, maps = ad.phrase_outputs(x, osz, ["small left apical pneumothorax.", "pleural effusion"],
                                         torch.tensor([1, 0]))
        ph = emb(["small left apical pneumothorax", "pleural effusion"])
        torch.testing.assert_close(scores, torch.stack([img[1] @ ph[0], img[0] @ ph[1]]), atol=1e-5, rtol=0)
        sim = torch.einsum("behw,qe->bqhw", F.normalize(proj, dim=1), ph)
        sm = gaussian_smooth(sim, 1.5)
        ref = whole_image_maps(sm[1, :1], (40, 80), (grid, grid), resize=192, crop=160,
                               interpolation="bilinear")[0]
        torch.testing.assert_close(maps[0], ref, atol=1e-5, rtol=0)
    # stored uint8 images go through the same transform inside the adapter
    stored = torch.from_numpy(np.stack([np.asarray(__import__("PIL.Image").Image.fromarray(o).resize((64, 64)))
                                        for o in origs]))
    assert torch.isfinite(ad(stored, osz).scores).all()
    prov = ad.provenance()
    assert prov["prompts"]["negative"]["Atelectasis"] == "There is no Atelectasis" and prov["logit_scale"] == 1.0


def test_methods_on_a_cnn(files):
    from xbench.extract.models.errors import ModelConfigError

    ad = make(files, method="gradcam")
    ad.set_classes(CLASSES)
    img = np.random.default_rng(2).integers(0, 256, (50, 70), dtype=np.uint8)
    out = ad(ad.image_transform()(img, img.shape)[None], torch.tensor([img.shape]))
    assert out.maps.shape == (1, 3, 5, 5) and torch.isfinite(out.maps).all() and out.maps.std() > 0
    with pytest.raises(ModelConfigError, match="Methods for this model: gradcam, similarity"):
        make(files, method="maskclip")


def test_special_tokens_are_refused(files):
    ad = make(files)
    with pytest.raises(ValueError, match="special token"):
        ad.encode_text(["pleural [SEP] effusion"])


def test_side_by_side_with_hi_ml_multimodal(files, tmp_path):
    """The authors' engine on the same files (needs the optional package; everything above does not)."""
    pytest.importorskip("health_multimodal")
    from PIL import Image

    from health_multimodal.image import ImageInferenceEngine
    from health_multimodal.image.data.transforms import create_chest_xray_transform_for_inference
    from health_multimodal.image.model.model import ImageModel
    from health_multimodal.text import TextInferenceEngine
    from health_multimodal.text.model import CXRBertModel, CXRBertTokenizer
    from health_multimodal.vlp import ImageTextInferenceEngine

    tok = CXRBertTokenizer.from_pretrained(str(files["text"]))
    if not hasattr(tok, "batch_encode_plus"):  # removed in transformers 5; __call__ is the same call
        CXRBertTokenizer.batch_encode_plus = lambda self, batch_text_or_text_pairs, **kw: self(
            batch_text_or_text_pairs, **kw)
    theirs = CXRBertModel.from_pretrained(str(files["text"])).eval()
    im = ImageModel(img_encoder_type="resnet18", joint_feature_size=8)
    im.load_state_dict(torch.load(files["biovil"]))
    eng = ImageTextInferenceEngine(ImageInferenceEngine(im, create_chest_xray_transform_for_inference(512, 480)),
                                   TextInferenceEngine(tok, theirs))
    arr = np.random.default_rng(3).integers(15, 230, (90, 70), dtype=np.uint8)
    path = tmp_path / "x.png"
    Image.fromarray(arr).save(path)
    ad = make(files, map_size=[90, 70], resize=None, crop=None)  # the official 512 / 480
    x = ad.image_transform()(arr, arr.shape)[None]
    up = eng.get_similarity_map_from_raw_data(path, "small left pneumothorax", interpolation="bilinear")
    score, mine = ad.phrase_outputs(x, torch.tensor([[90, 70]]), ["small left pneumothorax"], torch.tensor([0]))
    nan = np.isnan(up)
    assert nan.any() and np.abs(mine[0].numpy()[~nan] - up[~nan]).max() <= 1e-5
    assert abs(float(score[0]) - eng.get_similarity_score_from_raw_data(path, "small left pneumothorax")) <= 1e-5


def test_cli_without_weights_fails_before_torch(tmp_path):
    """`xbench-extract --model biovil_t` with nothing cached: exit 2, one line, torch never imported."""
    import os
    import subprocess
    import sys

    argv = ["--model", "biovil_t", "--images", str(tmp_path), "--out", str(tmp_path / "b.zarr")]
    code = ("import sys\nfrom xbench.extract.cli import main\ntry:\n    main(%r)\nexcept SystemExit as e:\n"
            "    print('exit', e.code, 'torch' in sys.modules)\n" % argv)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.strip().splitlines()[-1] == "exit 2 False", out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "BioViL-T image weights" in out.stderr


def test_extract_validate_and_score_with_phrase_rows(files, tmp_path):
    """xbench's runner end to end on the phantom's phrase variant: class and phrase maps, valid, scored."""
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset
    from xbench.extract.runner import ExtractOptions, run_extraction
    from xbench.schemas import validate_submission
    from xbench.score.scoring import score_submission

    prepare_dataset(PhantomReader(n_cases=3, size=64, phrases="true"), tmp_path, grid=(16, 16), image_size=64,
                    workers=1, progress=False, cases_per_block=4)
    sub = tmp_path / "biovil.zarr"
    run_extraction(ExtractOptions(model="biovil", images=tmp_path / "images.zarr", out=sub, workers=0, quiet=True,
                                  batch_size=4, cases_per_block=4, device="cpu",
                                  overrides={"weights": str(files["biovil"]), "text_encoder": str(files["text"]),
                                             "resize": 192, "crop": 160}))
    assert validate_submission(sub, tmp_path / "gt.zarr") == []
    m = score_submission(sub, tmp_path / "gt.zarr", bootstrap=5).metrics
    assert m["phrases"]["datasets"]["phantom"]["n_phrases"] >= 1
