"""MAIRA-2 on a tiny random folder of the real architecture (tests/models/decoder_tiny.py): the attention map and
score against brute force from the full eager attention, phrase rows as the findings' machinery asks them (a
phrase row is the class row whose question is the phrase's), ``xbench-extract --model maira-2`` to a valid,
scored submission with phrase rows, and the weights folder as hostile input."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from click.testing import CliRunner  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import decoder_tiny  # noqa: E402

CLASSES = ("Pneumonia", "Pleural Effusion")
SIZES = torch.tensor([[64, 64], [80, 60]])


@pytest.fixture(scope="module")
def folder(tiny_maira_folder):
    return tiny_maira_folder


def _adapter(folder, **over):
    from xbench.extract.models import create_adapter

    a = create_adapter("maira-2", model=str(folder), **over)
    a.set_classes(CLASSES)
    return a


def _images(n=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 64, 64), generator=g, dtype=torch.uint8)


def test_attention_and_score_equal_brute_force(folder):
    """Every layer's full attention (eager, output_attentions), one sequence at a time: the answer row over the
    image tokens averaged over heads and layers, and log P(Yes) - log P(No) from the log-softmax."""
    a = _adapter(folder)
    pixels, _ = a.pixels(_images(1), SIZES[:1])
    from xbench.extract.models.decoder import maps

    with torch.no_grad():
        feats = a.model.vision_features(pixels)
        scores, rows = maps._attention(a, feats[0])
        tokens = a.model.project(feats)[0]
        lm = a.model.language_model
        yes, no = a._answers
        for c in range(len(CLASSES)):
            b = a.sequences(tokens, [c])
            old, lm.config._attn_implementation = lm.config._attn_implementation, "eager"
            try:
                out = lm.model(inputs_embeds=b.embeds, output_attentions=True, use_cache=False)
            finally:
                lm.config._attn_implementation = old
            pos, (s0, s1) = int(b.positions[0]), b.image
            logp = lm.lm_head(out.last_hidden_state)[0, pos].double().log_softmax(-1)
            want = torch.stack([att[0, :, pos, s0:s1].mean(0) for att in out.attentions]).mean(0)
            torch.testing.assert_close(rows[c], want.float(), atol=1e-6, rtol=0)
            torch.testing.assert_close(scores[c], (logp[yes] - logp[no]).float(), atol=1e-5, rtol=0)
            assert want.std() > 0


def test_stretch_is_the_processors(folder):
    """Grey values stretched to 0..255 per image as numpy does it in the authors' processor (float64, truncated)."""
    from xbench.extract.models.decoder.common import stretch_grey

    img = np.random.default_rng(2).integers(30, 180, (3, 20, 20)).astype(np.uint8)
    img[2] = 77  # constant: theirs gives NaN; ours all zero
    want = []
    for x in img[:2]:
        f = x.astype(float)
        f -= f.min()
        f /= f.max()
        want.append((f * 255).astype(np.uint8))
    got = stretch_grey(torch.as_tensor(img)).numpy()
    assert np.array_equal(got[:2], np.stack(want)) and not got[2].any()


@pytest.mark.parametrize("method", ["attention", "rollout", "chefer", "gradcam"])
def test_a_phrase_row_is_the_class_row_of_its_question(folder, method):
    """phrase_outputs for phrase t about image r equals __call__ on image r with a class whose question is the
    phrase question of t; phrases of one image asked together do not touch each other."""
    phrases = ["Small left effusion", "Right opacity", "large pneumonia"]
    rows = torch.tensor([0, 0, 1])
    a = _adapter(folder, method=method)
    scores, maps = a.phrase_outputs(_images(), SIZES, phrases, rows)
    assert scores.shape == (3,) and maps.shape == (3, *a.map_shape)
    assert a.classes == CLASSES  # the findings' set is restored
    ref = _adapter(folder, method=method, prompts={"classes": {f"p{i}": a.template.phrase_text(t)
                                                                for i, t in enumerate(phrases)}})
    ref.set_classes([f"p{i}" for i in range(3)])
    out = ref(_images(), SIZES)
    for q, r in enumerate(rows.tolist()):
        torch.testing.assert_close(scores[q], out.scores[r, q], atol=1e-5, rtol=0)
        torch.testing.assert_close(maps[q], out.maps[r, q], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(scores[0], scores[1])  # the phrase is really asked


@pytest.fixture(scope="module")
def phrase_stores(tiny_phrase_stores):
    return tiny_phrase_stores


def test_extract_cli_writes_a_valid_scored_submission_with_phrase_rows(folder, phrase_stores, tmp_path):
    from xbench.extract.cli import main
    from xbench.schemas import read_images, read_submission, validate_submission
    from xbench.score.scoring import score_submission

    sub = tmp_path / "maira.zarr"
    r = CliRunner().invoke(main, ["--model", "maira-2", "--model-option", f"model={folder}", "--images",
                                  str(phrase_stores / "images.zarr"), "--out", str(sub), "--batch-size", "2",
                                  "--cases-per-block", "2", "--workers", "0", "--device", "cpu", "--quiet"])
    assert r.exit_code == 0, r.output
    assert validate_submission(sub, phrase_stores / "gt.zarr") == []
    s = read_submission(sub)
    ds = s.datasets["phantom"]
    assert ds.score_kind == "logit" and s.attrs["method"] == "attention"
    q = read_images(phrase_stores / "images.zarr").datasets["phantom"].queries
    assert ds.query_id.tolist() == q.id.tolist() and np.isfinite(np.asarray(ds.query_saliency[:])).all()
    res = score_submission(sub, phrase_stores / "gt.zarr", bootstrap=0).metrics
    ph = res["phrases"]["datasets"]["phantom"]
    assert not ph.get("unsupported") and ph["n_phrases"] == len(q) and ph["summary"]["pointing_game"] is not None


def _edit(path, **keys):
    """Set (None: remove) keys of a JSON side file."""
    d = json.loads(path.read_text())
    for k, v in keys.items():
        d.pop(k, None) if v is None else d.__setitem__(k, v)
    path.write_text(json.dumps(d))


def _run(folder, images, tmp_path):
    from xbench.extract.cli import main

    return CliRunner().invoke(main, ["--model", "maira-2", "--model-option", f"model={folder}", "--images",
                                     str(images), "--out", str(tmp_path / "o.zarr"), "--device", "cpu", "--quiet",
                                     "--workers", "0"])


@pytest.mark.parametrize("plant, words", [
    (lambda f: (f / "modeling_maira2.py").write_text("raise SystemExit('MARKER-RAN')\n"), "modeling_maira2.py: refused"),
    (lambda f: (f / "pytorch_model.bin").write_bytes(b"\x80\x04N."), "pytorch_model.bin: refused"),
    (lambda f: (f / "config.json").write_text(json.dumps({**decoder_tiny.maira_config(), "model_type": "llava"})),
     "is not maira2"),
    (lambda f: (f / "preprocessor_config.json").write_text(json.dumps({**decoder_tiny.MAIRA_PRE, "crop_size": {
        "height": 40, "width": 56}})), "centre-crop"),
    (lambda f: (f / "model.safetensors").write_bytes(b"not a safetensors file"), "not a readable safetensors"),
    (lambda f: _edit(f / "tokenizer_config.json", chat_template=None), "no chat template"),
    (lambda f: _edit(f / "processor_config.json", image_token="<img>"), "no image token"),
    (lambda f: _edit(f / "config.json", vision_config={"model_type": "dinov2", "patch_size": "14"}), "vision_config"),
    (lambda f: _edit(f / "config.json", text_config={"model_type": "llama", "hidden_size": [1]}), "text_config"),
], ids=["python", "pickle", "model-type", "crop", "weights", "no-template", "image-token", "vision-config", "text-config"])
def test_hostile_folder_is_one_line_exit_2(folder, tiny_decoder_images, tmp_path, plant, words):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    plant(bad)
    r = _run(bad, tiny_decoder_images, tmp_path)
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output and "MARKER-RAN" not in r.output
    assert not (tmp_path / "o.zarr").exists()


def test_the_phrase_question_is_overridable_and_checked(folder):
    from xbench.extract.models.errors import ModelConfigError

    assert _adapter(folder).template.phrase_text(" Left effusion ") == "Is there Left effusion in this chest X-ray?"
    a = _adapter(folder, prompts={"phrase": "Does the image show {}?"})
    assert a.template.phrase_text("left effusion") == "Does the image show left effusion?"
    with pytest.raises(ModelConfigError, match="prompts.phrase"):
        _adapter(folder, prompts={"phrase": "no place for the phrase"})
