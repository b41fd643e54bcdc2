"""CheXagent-2 on a tiny random folder of the real architecture (tests/models/chexagent_tiny.py): the prompt in the
authors' conversation, the four map methods against brute force (the decoder tests' own checks, run on this
model), ``xbench-extract --model chexagent`` writing a valid submission, and the weights folder as hostile input.
The fidelity against the authors' code is tests/models/test_chexagent_fidelity.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("open_clip")
pytest.importorskip("transformers")
from click.testing import CliRunner  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import chexagent_tiny  # noqa: E402
import decoder_tiny  # noqa: E402
from test_decoder_maps import (  # noqa: E402,F401 - the decoder tests' brute-force checks, run on this model
    test_attention_and_scores_equal_brute_force, test_chefer_equals_brute_force, test_gradcam_equals_brute_force,
    test_padding_does_not_change_a_finding, test_rollout_equals_brute_force)

CLASSES = ("Pneumonia", "Pleural Effusion")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """(path, model): the fixture the imported brute-force tests take."""
    from xbench.extract.models.decoder.chexagent import load

    path = chexagent_tiny.make_folder(tmp_path_factory.mktemp("chexagent") / "tiny-chexagent")
    return path, load(path)


@pytest.fixture(scope="module")
def pixels():
    torch.manual_seed(5)
    return torch.randn(1, 3, 64, 64)


@pytest.fixture(scope="module")
def adapter(folder):
    from xbench.extract.models import create_adapter

    a = create_adapter("chexagent", model=str(folder[0]))
    a.set_classes(CLASSES)
    return a


def test_prompt_is_the_authors_conversation(adapter):
    tok = adapter.model.tok
    before, after = adapter._prompts[0]
    text = tok.decode(before) + "<IMAGE>" + tok.decode(after)
    assert text == ("<|system|>\nYou are a helpful assistant.<|endoftext|>\n<|user|>\nPicture 1:<|img|><IMAGE>"
                    "<|/img|>\nDoes this chest X-ray contain a pneumonia?<|endoftext|>\n<|assistant|>\n")
    assert before[-1] == tok.convert_tokens_to_ids("<|img|>") and after[0] == tok.convert_tokens_to_ids("<|/img|>")
    assert adapter._answers == tuple(tok(a, add_special_tokens=False).input_ids[0] for a in ("Yes", "No"))
    assert adapter.provenance()["prompts"]["questions"]["Pleural Effusion"] == \
        "Does this chest X-ray contain a pleural effusion?"


def test_tokenizer_follows_the_authors_added_token_rule(folder):
    """Tags after the BPE vocabulary in the authors' order, then <|coord_0..9|>, then <|extra_i|> to a multiple
    of 64; a tokenizer_config.json that lists other ids is refused."""
    from xbench.extract.models.decoder.chexagent import TAGS, tokenizer
    from xbench.extract.models.errors import ModelConfigError

    tok = folder[1].tok
    n = len(json.loads((folder[0] / "vocab.json").read_text()))
    added = list(TAGS) + [f"<|coord_{i}|>" for i in range(10)]
    assert tok.convert_tokens_to_ids(added) == list(range(n, n + len(added)))
    size = len(tok.get_vocab())
    assert size % 64 == 0 and tok.convert_tokens_to_ids(f"<|extra_{size - n - len(added) - 1}|>") == size - 1
    assert tok("a<|box|>(1,2),(3,4)<|/box|>", add_special_tokens=False).input_ids.count(tok.convert_tokens_to_ids(
        "<|box|>")) == 1
    bad = folder[0].parent / "bad-tok"
    bad.mkdir()
    for f in ("vocab.json", "merges.txt"):
        (bad / f).write_bytes((folder[0] / f).read_bytes())
    (bad / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {str(n + 5): {"content": "<|img|>"}}}))
    with pytest.raises(ModelConfigError, match="<|img|>"):
        tokenizer(bad)


def test_resampler_keeps_the_patch_grid(adapter, pixels):
    """One image token per patch: the token at grid cell (i, j) depends on that patch only through the tower
    (the resampler is per token), so the maps live on the 8 x 8 patch grid."""
    m = adapter.model
    feats = m.vision_features(pixels)
    tokens = m.project(feats)
    assert feats.shape[1] == tokens.shape[1] == 64 and m.grid == (8, 8)
    changed = feats.clone()
    changed[0, 10] += 1.0
    diff = (m.project(changed) - tokens).abs().amax(-1)[0]
    assert diff[10] > 0 and torch.count_nonzero(diff) == 1


def test_adapter_maps_and_scores_on_the_whole_image(adapter):
    from xbench.extract.models.decoder import maps

    images = torch.randint(0, 256, (2, 48, 48), dtype=torch.uint8)
    out = adapter(images, torch.tensor([[300, 200], [200, 200]]))
    assert out.scores.shape == (2, 2) and out.maps.shape == (2, 2, 8, 8)
    pixels, _ = adapter.pixels(images[:1], torch.tensor([[200, 200]]))
    s, rows = maps._attention(adapter, adapter.model.vision_features(pixels)[0])
    assert torch.allclose(out.maps[0], rows.view(2, 8, 8), atol=1e-6)  # squash: the model frame is the image
    assert torch.allclose(out.scores[0], s, atol=1e-5)


def test_bf16_runs_every_method(folder):
    """The model in bf16 (the position table built in float32 follows the tokens' dtype)."""
    from xbench.extract.models.decoder.chexagent import load
    from xbench.extract.models.decoder.common import DecoderVLMAdapter, QuestionTemplate

    torch.set_default_dtype(torch.bfloat16)
    try:
        model = load(folder[0])
    finally:
        torch.set_default_dtype(torch.float32)
    assert model.resampler.pos_embed.dtype == torch.float32 and model.resampler.proj.dtype == torch.bfloat16
    for method in ("attention", "rollout", "chefer", "gradcam"):
        a = DecoderVLMAdapter(name="chexagent", model=model, method=method,
                              template=QuestionTemplate.from_config("chexagent", None))
        a.set_classes(CLASSES)
        out = a(torch.randint(0, 256, (1, 48, 48), dtype=torch.uint8), torch.tensor([[200, 200]]))
        assert torch.isfinite(out.scores).all() and torch.isfinite(out.maps).all()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return decoder_tiny.make_images(tmp_path_factory.mktemp("imgs") / "images.zarr", n=3, classes=CLASSES)


@pytest.mark.parametrize("method", ["attention", "gradcam"])
def test_extract_writes_a_valid_submission(folder, images, tmp_path, method):
    from xbench.extract.cli import main
    from xbench.schemas import read_submission, validate_submission

    out = tmp_path / "sub.zarr"
    r = CliRunner().invoke(main, ["--model", "chexagent", "--model-option", f"model={folder[0]}", "--method", method,
                                  "--images", str(images), "--out", str(out), "--batch-size", "2",
                                  "--cases-per-block", "2", "--workers", "0", "--device", "cpu", "--quiet"])
    assert r.exit_code == 0, r.output
    assert validate_submission(out) == []
    sub = read_submission(out)
    ds = sub.datasets["phantom"]
    assert ds.score_kind == "logit" and sub.attrs["method"] == method
    assert np.isfinite(np.asarray(ds.scores)).all() and np.asarray(ds.saliency[:]).shape[:2] == (3, 2)


def _copy(folder: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in folder.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


@pytest.mark.parametrize("case, expect", [
    ("python", "refused"),
    ("no vision config", "vision_config.json"),
    ("vision config without sizes", "image_size and patch_size"),
    ("tower size", "position embeddings"),
    ("bad mean", "image_mean and image_std"),
    ("wrong shapes", "weights of"),
    ("no merges", "merges.txt"),
])
def test_hostile_folders_are_one_line_exit_2(folder, images, tmp_path, case, expect):
    from xbench.extract.cli import main

    d = _copy(folder[0], tmp_path / "m")
    marker = tmp_path / "ran"
    if case == "python":
        (d / "modeling_chexagent.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    elif case == "no vision config":
        (d / "vision_config.json").unlink()
    elif case == "vision config without sizes":
        (d / "vision_config.json").write_text(json.dumps({"vision_config": {"hidden_size": 32}}))
    elif case == "tower size":
        (d / "vision_config.json").write_text(json.dumps({"vision_config": dict(chexagent_tiny.VISION, image_size=32)}))
    elif case == "bad mean":
        (d / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.5, "x", 0.5], "image_std": [1, 1, 1]}))
    elif case == "wrong shapes":
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps(dict(cfg, intermediate_size=40)))
    elif case == "no merges":
        (d / "merges.txt").unlink()
    r = CliRunner().invoke(main, ["--model", "chexagent", "--model-option", f"model={d}", "--images",
                                  str(images), "--out", str(tmp_path / "o.zarr"), "--device", "cpu"])
    assert r.exit_code == 2, r.output
    assert expect in r.output and "Traceback" not in r.output
    assert not marker.exists() and not (tmp_path / "o.zarr").exists()
