"""Fixtures for the extraction tests: a small phantom images store and tiny random models.

Everything is built locally from configs (no downloads): an open_clip folder with
``open_clip_config.json`` and no weights, and transformers CLIP / SigLIP folders written with
``save_pretrained`` plus a word-level tokenizer.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")

TINY_OPEN_CLIP = {
    "model_cfg": {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 64, "patch_size": 16, "layers": 2, "width": 64, "head_width": 32},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
    },
    "preprocess_cfg": {},
}
WORDS = ["no", "there", "is", "a", "an", "of", "photo", "this", "pneumonia", "cardiomegaly", "pleural",
         "effusion", "consolidation", "nodule", "pneumothorax", "atelectasis", "mass", "opacity"]


@pytest.fixture(scope="session")
def phantom_images(tmp_path_factory) -> Path:
    """images.zarr (+ gt.zarr) of 20 phantom cases, S = 64, 8 cases per block."""
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset

    out = tmp_path_factory.mktemp("phantom")
    prepare_dataset(PhantomReader(n_cases=20, size=64), out, grid=(32, 32), image_size=64, workers=1,
                    cases_per_block=8, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_open_clip(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("oc") / "tiny-clip"
    d.mkdir()
    (d / "open_clip_config.json").write_text(json.dumps(TINY_OPEN_CLIP))
    return d


def _word_tokenizer(folder: Path, pad: str = "[PAD]") -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, normalizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[BOS]", "[EOS]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token=pad, bos_token="[BOS]",
                                   eos_token="[EOS]")
    fast.save_pretrained(folder)


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory) -> dict[str, Path]:
    """{'clip': folder, 'siglip': folder} of tiny random transformers models with a tokenizer."""
    from transformers import CLIPConfig, CLIPModel, SiglipConfig, SiglipModel

    base = tmp_path_factory.mktemp("hf")
    text = dict(vocab_size=32, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=16, bos_token_id=2, eos_token_id=3, pad_token_id=0)
    vision = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                  num_attention_heads=4)
    torch.manual_seed(0)
    out = {}
    for name, cfg, cls in (("clip", CLIPConfig(text_config=text, vision_config=vision, projection_dim=16), CLIPModel),
                           ("siglip", SiglipConfig(text_config=text, vision_config=vision), SiglipModel)):
        folder = base / name
        cls(cfg).save_pretrained(folder)
        _word_tokenizer(folder)
        out[name] = folder
    return out


@pytest.fixture(scope="session")
def blobs():
    """The :func:`make_blob_images` helper."""
    return make_blob_images


def make_blob_images(n: int, size: int, blobs: list[tuple[float, float]], radius: float = 0.06) -> np.ndarray:
    """(n, size, size) uint8 dark images with one bright Gaussian blob at normalised (x, y) each."""
    v, u = np.mgrid[0:size, 0:size]
    u, v = (u + 0.5) / size, (v + 0.5) / size
    out = np.zeros((n, size, size), np.uint8)
    for i, (x, y) in enumerate(blobs):
        g = np.exp(-((u - x) ** 2 + (v - y) ** 2) / (2 * radius**2))
        out[i] = np.round(20 + 220 * g).astype(np.uint8)
    return out


@pytest.fixture(scope="session")
def tiny_biomedclip(tmp_path_factory) -> dict[str, Path]:
    """A BiomedCLIP-shaped open_clip folder (timm ``test_vit`` trunk + HF BERT text tower whose config
    names the real hub id) and a local tiny BERT folder to stand in for that hub id."""
    from transformers import BertConfig, BertModel

    base = tmp_path_factory.mktemp("bmc")
    bert = base / "bert"
    BertModel(BertConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64)).save_pretrained(bert)
    _word_tokenizer(bert)
    hub = "microsoft/BiomedNLP-BiomedBERT-base-uncased-abstract"
    model = base / "bmc"
    model.mkdir()
    (model / "open_clip_config.json").write_text(json.dumps({"model_cfg": {
        "embed_dim": 16,
        "vision_cfg": {"timm_model_name": "test_vit", "timm_model_pretrained": False, "timm_pool": "",
                       "timm_proj": "linear", "image_size": 160},
        "text_cfg": {"hf_model_name": hub, "hf_tokenizer_name": hub, "hf_proj_type": "mlp",
                     "hf_pooler_type": "cls_last_hidden_state_pooler", "context_length": 32}}}))
    return {"model": model, "text_encoder": bert}
