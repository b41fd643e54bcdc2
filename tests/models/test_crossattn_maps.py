"""Scores and maps as each model defines them, checked against direct computations on the tiny
networks, plus CARZero's crop geometry with synthetic blobs."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xbench.extract.models.crossattn import carzero, devide, kad, mavl, medklip  # noqa: E402
from xbench.extract.models.crossattn.common import (  # noqa: E402
    QueryDecoder,
    QueryDecoderLayer,
    tokens_to_grid,
)
from xbench.extract.models.crossattn.entities import ENTITIES  # noqa: E402

CLASSES = ("Pleural effusion", "Pneumothorax", "Lung cavity", "Cardiomegaly")


def images(n=2, size=80, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, size, size), generator=g, dtype=torch.uint8)


SIZES = torch.tensor([[1000, 800], [700, 900]])


def official_transform(imgs, size, mode="bilinear"):
    """The upstream test transform, composed here from torchvision directly."""
    from PIL import Image
    from torchvision import transforms

    t = transforms.Compose([transforms.Resize([size, size], interpolation=getattr(transforms.InterpolationMode, mode.upper())),
                            transforms.ToTensor(), transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    return torch.stack([t(Image.fromarray(im.numpy()).convert("RGB")) for im in imgs])


@pytest.mark.parametrize("self_attention", [True, False])
def test_decoder_attention_rows_sum_to_one(self_attention):
    torch.manual_seed(0)
    dec = QueryDecoder(QueryDecoderLayer(16, 2, 32, self_attention=self_attention), 3, torch.nn.LayerNorm(16)).eval()
    out, attn = dec(torch.randn(5, 2, 16), torch.randn(9, 2, 16))
    assert out.shape == (5, 2, 16) and len(attn) == 3
    for a in attn:
        assert a.shape == (2, 5, 9)
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 5))


def test_tokens_to_grid_is_row_major():
    t = torch.arange(12.0).reshape(1, 1, 12)
    with pytest.raises(ValueError):
        tokens_to_grid(t)
    g = tokens_to_grid(torch.arange(9.0).reshape(1, 1, 9))
    assert g[0, 0, 1, 0] == 3 and g[0, 0, 0, 2] == 2


def test_medklip_scores_and_maps_match_the_network(tiny_bert, tiny_cache, tiny_config):
    a = medklip.build(tiny_config("medklip", tiny_bert, tiny_cache))
    a.set_classes(CLASSES)
    assert a.unsupported == ("Lung cavity",)
    out = a(images(), SIZES)
    x = official_transform(images(), 64)
    with torch.no_grad():
        logits, ws = a.net(x, a.book)
    probs = torch.softmax(logits, -1)[..., 1]
    ref_map = ((ws[-4] + ws[-3] + ws[-2] + ws[-1]) / 4).reshape(2, 75, 4, 4)
    e = ENTITIES.index("effusion")
    torch.testing.assert_close(out.scores[:, 0], probs[:, e])
    torch.testing.assert_close(out.maps[:, 0], ref_map[:, e])
    torch.testing.assert_close(out.maps[:, 3], ref_map[:, ENTITIES.index("cardiomegaly")])
    assert out.maps.shape == (2, 4, *a.map_shape)
    torch.testing.assert_close(out.maps[:, [0, 1, 3]].sum((-1, -2)), torch.ones(2, 3))  # rows summed to 1
    assert torch.all(out.scores[:, 2] == 0) and torch.all(out.maps[:, 2] == 0)  # unsupported: finite filler
    assert ((out.scores >= 0) & (out.scores <= 1)).all()


def test_medklip_entity_map_override(tiny_bert, tiny_cache, tiny_config):
    cfg = tiny_config("medklip", tiny_bert, tiny_cache)
    cfg["options"] = {**cfg["options"], "entity_map": {"lung cavity": "lesion", "Cardiomegaly": None}}
    a = medklip.build(cfg)
    a.set_classes(CLASSES)
    assert a.unsupported == ("Cardiomegaly",)
    assert a.provenance()["entity_map"]["Lung cavity"] == "lesion"


def test_mavl_aspect_averaging(tiny_bert, tiny_cache, tiny_config):
    a = mavl.build(tiny_config("mavl", tiny_bert, tiny_cache))
    a.set_classes(CLASSES)
    out = a(images(), SIZES)
    x = a.preprocess(images())
    with torch.no_grad():
        logits, ws = a.net(x, a.book)
    assert a.book.shape == (75 * 9, 32) and logits.shape == (2, 75, 2)
    w = ((ws[-4] + ws[-3] + ws[-2] + ws[-1]) / 4).view(2, 75, 9, -1)[:, :, [0, 6, 7, 8]].mean(2)
    e = ENTITIES.index("pneumothorax")
    torch.testing.assert_close(out.maps[:, 1], w[:, e].reshape(2, 4, 4))
    torch.testing.assert_close(out.scores[:, 1], torch.softmax(logits, -1)[:, e, 1])
    # query 0 of each entity is its description, then its aspects in JSON order
    torch.testing.assert_close(a.book[9 * e], torch.from_numpy(a.cache.disease_book[e]))
    torch.testing.assert_close(a.book[9 * e + 6], torch.from_numpy(a.cache.aspect_book[e, 5]))
    assert "6 (patterns)" in a.provenance()["map"]


def test_kad_uses_last_layer_only(tiny_bert, tiny_cache, tiny_config):
    a = kad.build(tiny_config("kad", tiny_bert, tiny_cache))
    a.set_classes(CLASSES)
    out = a(images(), SIZES)
    with torch.no_grad():
        logits, ws = a.fusion(a.image_encoder(a.preprocess(images())), a.text_features)
    torch.testing.assert_close(out.maps, ws[-1].reshape(2, 4, 4, 4))
    assert not torch.allclose(ws[-1], ws[-2])  # the choice of layer matters
    torch.testing.assert_close(out.scores, torch.softmax(logits, -1)[..., 1])
    assert a.prompts[0] == "Pleural effusion" and a.unsupported == ()
    assert out.maps.shape == (2, 4, *a.map_shape)


def test_kad_grid_follows_resnet_stages():
    assert medklip.resnet_grid(224, 3) == 14
    assert medklip.resnet_grid(512, 4) == 16
    assert medklip.resnet_grid(1024, 4) == 32


def test_carzero_score_is_mean_of_both_directions(tiny_bert, tiny_cache, tiny_config):
    a = carzero.build(tiny_config("carzero", tiny_bert, tiny_cache))
    a.set_classes(CLASSES)
    assert a.prompts[0] == "there is Pleural effusion" and a.score_kind == "logit"
    out = a(images(), SIZES)
    x = a.preprocess(images(), SIZES)
    net = a.net
    with torch.no_grad():
        g, loc = net.img_encoder.model(x)
        i2t_all, attn = net.fusion_module(torch.cat([g[:, None], loc], 1), a.text_sentence)
        # one image at a time, as upstream (get_dqn_similarities loops over images)
        t2i = torch.stack([net.fusion_module(torch.cat([a.text_sentence[:, None], a.text_words], 1), g[i:i + 1])[0]
                           .squeeze(-1).T[0] for i in range(2)])
    torch.testing.assert_close(out.scores, (i2t_all.squeeze(-1) + t2i) / 2)
    for w in attn:  # rows include the global token before it is dropped
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4))


def test_carzero_text_cleaning_and_word_pieces(tiny_bert):
    assert carzero.clean_prompt("There is pleural effusion.") == "there is pleural effusion"
    assert carzero.clean_prompt("Effusion") == ""  # one-word sentences are dropped upstream
    assert carzero.clean_prompt("1. No pneumothorax. 2. Cardiomegaly is present") == "no pneumothorax cardiomegaly is present"
    words = {0: "[PAD]", 2: "[CLS]", 3: "[SEP]", 5: "cardio", 6: "##megaly", 7: "is"}
    emb = torch.arange(7 * 2, dtype=torch.float32).reshape(7, 1, 2)
    out = carzero.aggregate_word_pieces(emb, [2, 7, 5, 6, 3, 0, 0], words)
    torch.testing.assert_close(out[:, 0], torch.tensor([[0., 1], [2, 3], [4 + 6, 5 + 7], [8, 9], [0, 0], [0, 0], [0, 0]]))


def test_carzero_one_word_prompt_is_an_error(tiny_bert, tiny_cache, tiny_config):
    cfg = tiny_config("carzero", tiny_bert, tiny_cache, prompts={"positive": "{}"})
    a = carzero.build(cfg)
    with pytest.raises(ValueError, match="one-word"):
        a.set_classes(["Pneumothorax"])


def test_devide_outputs(tiny_bert, tiny_cache, tiny_config):
    a = devide.build(tiny_config("devide", tiny_bert, tiny_cache))
    a.set_classes(CLASSES)
    out = a(images(), SIZES)
    assert out.maps.shape == (2, 4, 4, 4) and a.map_shape == (4, 4)
    torch.testing.assert_close(out.maps.sum((-1, -2)), torch.ones(2, 4))
    assert a.provenance()["verified"] is False


# ---------------------------------------------------------------------------------------------
# CARZero geometry
# ---------------------------------------------------------------------------------------------
def test_letterbox_matches_upstream_arithmetic():
    assert carzero.letterbox(1000, 500) == (256, 128, 0, 64)
    assert carzero.letterbox(500, 1000) == (128, 256, 64, 0)
    assert carzero.letterbox(300, 300) == (256, 256, 0, 0)
    assert carzero.letterbox(1000, 333) == (256, 85, 0, 85)  # int() truncation, floor left pad
    assert carzero.crop_offset(256, 224) == 16


def blob_image(h, w, cy, cx, size=256, radius=0.06):
    """A stretched S x S uint8 image of an (h, w) original with a bright disc at (cy, cx)
    (fractions of the original height/width)."""
    yy, xx = np.mgrid[0:size, 0:size] + 0.5
    dy, dx = (yy / size - cy) * h, (xx / size - cx) * w
    img = (np.hypot(dy, dx) < radius * max(h, w)).astype(np.uint8) * 255
    return torch.from_numpy(img)[None]


@pytest.mark.parametrize("h,w,cy,cx", [(1000, 600, 0.3, 0.7), (600, 1000, 0.6, 0.25), (800, 800, 0.5, 0.4)])
def test_carzero_uncrop_puts_blob_back(h, w, cy, cx):
    """Preprocess a blob image exactly as CARZero does, pool it to the 14 x 14 token grid (what a
    perfectly localised attention map would be), undo the geometry and find the blob again."""
    img, size = blob_image(h, w, cy, cx), torch.tensor([[h, w]])
    t = carzero.CARZeroTransform()
    x = (t(img[0].numpy(), (h, w))[:1] * 0.2449 + 0.4978)[None]  # (1, 1, 224, 224) back in [0, 1]
    tokens = torch.nn.functional.avg_pool2d(x, 16)[:, :1]  # (1, 1, 14, 14)
    out = carzero.uncrop_maps(tokens, size, scale=256, crop=224, patch=16, out_size=(56, 56))[0, 0]
    nh, nw, top, left = carzero.letterbox(h, w)
    rows, cols = torch.nonzero(out == out.max(), as_tuple=True)  # the hottest token's cells
    r, c = (rows.double().mean() + 0.5) / 56, (cols.double().mean() + 0.5) / 56
    # within about half a token (a token spans 16 / nh of the image height)
    assert abs(r - cy) < 0.6 * 16 / nh + 1 / 56 and abs(c - cx) < 0.6 * 16 / nw + 1 / 56
    # blob centre in crop coordinates lands where the letterbox arithmetic says
    ys, xs = torch.nonzero(x[0, 0] > 0.5, as_tuple=True)
    assert abs(ys.float().mean() - (top + cy * nh - 16)) < 3 and abs(xs.float().mean() - (left + cx * nw - 16)) < 3


def test_carzero_uncrop_single_token():
    """A one-hot token map covers exactly the image cells whose centres fall in that token."""
    maps = torch.zeros(1, 1, 14, 14)
    maps[0, 0, 3, 10] = 1
    h, w = 1000, 500  # nh 256, nw 128, left 64
    out = carzero.uncrop_maps(maps, torch.tensor([[h, w]]), scale=256, crop=224, patch=16, out_size=(64, 32))[0, 0]
    rows, cols = torch.nonzero(out, as_tuple=True)
    # token row 3 = crop rows [48, 64) = canvas rows [64, 80) = image fraction [0.25, 0.3125)
    assert set(rows.tolist()) == {r for r in range(64) if 0.25 <= (r + 0.5) / 64 < 0.3125}
    # token col 10 = crop cols [160, 176) = canvas [176, 192) -> image [(176-64)/128, (192-64)/128) = [0.875, 1)
    assert set(cols.tolist()) == {c for c in range(32) if 0.875 <= (c + 0.5) / 32 < 1.0}


def test_carzero_maps_cover_whole_image(tiny_bert, tiny_cache, tiny_config):
    a = carzero.build(tiny_config("carzero", tiny_bert, tiny_cache))
    a.set_classes(CLASSES)
    out = a(images(), SIZES)
    assert out.maps.shape == (2, 4, 12, 12) and torch.isfinite(out.maps).all()
    assert a.provenance()["layers"] == [-4, -3, -2, -1]
