"""Tiny offline fixtures for the cross-attention adapters: a 4-layer 32-d BERT folder with a
word-piece vocabulary, and a query cache of random 32-d embeddings for the 75 entities."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

WORDS = ("there is pleural effusion pneumothorax lung opacity cardio ##megaly no finding atelectasis "
         "consolidation nodule mass edema fibrosis pulmonary abnormality covid 19 pneumonia support devices "
         "a the of").split()
TEXT_DIM = 32


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """Folder with config.json, weights and a BERT word-piece tokenizer (lower-casing)."""
    from transformers import BertConfig, BertModel

    d = tmp_path_factory.mktemp("tinybert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True}))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=TEXT_DIM, num_hidden_layers=4, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=300)
    BertModel(cfg).save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory):
    from xbench.extract.models.crossattn.cache import QueryCache, write_query_cache
    from xbench.extract.models.crossattn.entities import ENTITIES, MAVL_ASPECTS

    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("cache") / "queries.npz"
    write_query_cache(QueryCache(ENTITIES, rng.normal(size=(75, TEXT_DIM)).astype("f4"),
                                 rng.normal(size=(75, 8, TEXT_DIM)).astype("f4"), MAVL_ASPECTS, {"test": True}), path)
    return path


# Tiny architectures (widths, depths, image sizes); the defaults in the modules are the official ones.
MEDKLIP_ARCH = {"d_model": 16, "nhead": 2, "num_layers": 4, "dim_feedforward": 32, "text_dim": TEXT_DIM,
                "resnet_layers": [1, 1, 1, 1]}
MAVL_ARCH = {**MEDKLIP_ARCH, "location_dim": TEXT_DIM, "pool_grid": 4}
KAD_ARCH = {"embed_dim": TEXT_DIM, "nhead": 2, "num_layers": 4, "dim_feedforward": 64, "resnet_layers": [1, 1, 1, 1]}
CARZERO_ARCH = {"embed_dim": TEXT_DIM, "depth": 2, "num_heads": 2, "img_size": 64, "fusion_heads": 2,
                "fusion_layers": 4, "fusion_feedforward": 64, "mlp_hidden": [16, 8, 8]}
DEVIDE_ARCH = {"embed_dim": TEXT_DIM, "depth": 2, "num_heads": 2, "img_size": 64, "nhead": 2, "num_layers": 4,
               "dim_feedforward": 64}


def tiny_config(model: str, tiny_bert, tiny_cache, **extra) -> dict:
    """A config for ``<model>.build`` (and the registry) with random weights and tiny sizes."""
    base = {"device": "cpu", "weights": "random"}
    if model == "medklip":
        cfg = {**base, "embeddings_cache": str(tiny_cache), "options": {"image_size": 64, "arch": MEDKLIP_ARCH}}
    elif model == "mavl":
        cfg = {**base, "embeddings_cache": str(tiny_cache), "options": {"image_size": 64, "arch": MAVL_ARCH}}
    elif model == "kad":
        cfg = {**base, "text_encoder": str(tiny_bert), "options": {"image_size": 64, "arch": KAD_ARCH}}
    elif model == "carzero":
        cfg = {**base, "text_encoder": str(tiny_bert), "map_size": [12, 12],
               "options": {"imsize": 72, "arch": CARZERO_ARCH, "word_num": 16}}
    elif model == "devide":
        cfg = {**base, "text_encoder": str(tiny_bert), "options": {"arch": DEVIDE_ARCH, "max_length": 16}}
    else:  # pragma: no cover
        raise KeyError(model)
    cfg.update(extra)
    return cfg


@pytest.fixture(name="tiny_config")
def tiny_config_fixture():
    """The :func:`tiny_config` builder (tests call ``tiny_config(model, tiny_bert, tiny_cache, ...)``)."""
    return tiny_config


# -- the decoder VLMs' tiny folders and stores, built once per session (tests/models/decoder_tiny.py) ----------
def _decoder_tiny():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    import decoder_tiny

    return decoder_tiny


@pytest.fixture(scope="session")
def tiny_llava_folder(tmp_path_factory):
    """A tiny random LLaVA-Rad folder (seed 0)."""
    return _decoder_tiny().make_folder(tmp_path_factory.mktemp("llava") / "tiny-llava-rad")


@pytest.fixture(scope="session")
def tiny_gemma_folder(tmp_path_factory):
    """A tiny random MedGemma folder (seed 0)."""
    return _decoder_tiny().make_gemma_folder(tmp_path_factory.mktemp("gemma") / "tiny-medgemma")


@pytest.fixture(scope="session")
def tiny_maira_folder(tmp_path_factory):
    """A tiny random MAIRA-2 folder (seed 1) in the authors' key layout."""
    return _decoder_tiny().make_maira_folder(tmp_path_factory.mktemp("maira") / "tiny-maira-2", seed=1)


@pytest.fixture(scope="session")
def tiny_decoder_images(tmp_path_factory):
    """A phantom images store of 5 random 64 x 64 cases, two findings, blocks of 2 (no phrase rows)."""
    return _decoder_tiny().make_images(tmp_path_factory.mktemp("imgs") / "images.zarr")


@pytest.fixture(scope="session")
def tiny_phrase_stores(tmp_path_factory):
    """A prepared phantom dataset with phrase rows: images.zarr and gt.zarr in one folder."""
    return _decoder_tiny().make_phrase_stores(tmp_path_factory.mktemp("phantom-phrases"))
