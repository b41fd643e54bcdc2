"""Residual preprocessing differences of the default images store, per cross-attention model.

    python benchmarks/preprocess_residuals.py            # Markdown table on stdout
    python benchmarks/preprocess_residuals.py --json

Each model's official loader starts from the original image. With ``xbench-prepare
--keep-original`` XBench runs the same calls on the same pixels; with the default store it runs
them on the stored S x S stretched image (S = 512, PIL bilinear), one resize more. This script
measures what that costs: for synthetic chest-like originals of typical sizes it builds each
model's input from the original and from the stored image (the adapter's own
``image_transform``), runs a tiny randomly initialised model of the official input size on both
and reports

* max |d input|: largest difference of the normalised input tensors, and the same in grey
  levels (times std x 255);
* max |d score| and max |d map| (maps on the adapter's whole-image grid), with the largest map
  value for scale;
* argmax flips: (case, class) pairs whose hottest map cell moves (a pointing-game hit can flip).

Random weights: the numbers bound how much the input moves and show that maps move; trained
weights give other magnitudes. Runs offline on the CPU in about a minute.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import click
import numpy as np
import torch

SIZES = [(1024, 1024), (2048, 1660), (1500, 1800), (2500, 2048)]
STORE_SIZE = 512
CLASSES = ("Pleural effusion", "Pneumothorax", "Consolidation", "Atelectasis")
TEXT_DIM = 32
WORDS = "there is pleural effusion pneumothorax consolidation atelectasis lung opacity no finding".split()


def synthetic_cxr(h: int, w: int, seed: int) -> np.ndarray:
    """Two bright lung-shaped ellipses on a darker body, ribs, fine noise: uint8 (h, w)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / np.array([h, w]).reshape(2, 1, 1)
    img = 90 + 40 * np.cos(np.pi * (xx - 0.5))
    for cx in (0.3, 0.7):
        lung = ((xx - cx) / 0.17) ** 2 + ((yy - 0.5) / 0.33) ** 2 < 1
        img = np.where(lung, img - 50 + 12 * np.sin(40 * yy), img)
    img = img + rng.normal(0, 6, (h, w))
    return img.clip(0, 255).astype(np.uint8)


def tiny_text_assets(folder: Path) -> tuple[Path, Path]:
    """A 32-d BERT folder (config, weights, word-piece vocabulary) and a random query cache."""
    from transformers import BertConfig, BertModel

    from xbench.extract.models.crossattn.cache import QueryCache, write_query_cache
    from xbench.extract.models.crossattn.entities import ENTITIES, MAVL_ASPECTS

    bert = folder / "bert"
    bert.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (bert / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (bert / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True}))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=TEXT_DIM, num_hidden_layers=4, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=300)).save_pretrained(bert)
    rng = np.random.default_rng(0)
    cache = folder / "queries.npz"
    write_query_cache(QueryCache(ENTITIES, rng.normal(size=(len(ENTITIES), TEXT_DIM)).astype("f4"),
                                 rng.normal(size=(len(ENTITIES), 8, TEXT_DIM)).astype("f4"), MAVL_ASPECTS,
                                 {"benchmark": True}), cache)
    return bert, cache


def configs(bert: Path, cache: Path) -> dict:
    """Tiny widths and depths, the official input sizes."""
    resnet = {"d_model": 16, "nhead": 2, "num_layers": 4, "dim_feedforward": 32, "text_dim": TEXT_DIM,
              "resnet_layers": [1, 1, 1, 1]}
    base = {"device": "cpu", "weights": "random"}
    return {
        "medklip": {**base, "embeddings_cache": str(cache), "options": {"arch": resnet}},
        "mavl": {**base, "embeddings_cache": str(cache), "options": {"arch": {**resnet, "location_dim": TEXT_DIM}}},
        "kad": {**base, "text_encoder": str(bert), "options": {"arch": {
            "embed_dim": TEXT_DIM, "nhead": 2, "num_layers": 4, "dim_feedforward": 64, "resnet_layers": [1, 1, 1, 1]}}},
        "carzero": {**base, "text_encoder": str(bert), "options": {"word_num": 16, "arch": {
            "embed_dim": TEXT_DIM, "depth": 2, "num_heads": 2, "fusion_heads": 2, "fusion_layers": 4,
            "fusion_feedforward": 64, "mlp_hidden": [16, 8, 8]}}},
        "devide": {**base, "text_encoder": str(bert), "options": {"max_length": 16, "arch": {
            "embed_dim": TEXT_DIM, "depth": 2, "num_heads": 2, "nhead": 2, "num_layers": 4, "dim_feedforward": 64}}},
    }


def measure(name: str, config: dict, originals: list[np.ndarray], dataset: str) -> dict:
    from xbench.extract.datasets.prepare import resize_image
    from xbench.extract.models import create_adapter

    torch.manual_seed(0)
    adapter = create_adapter(name, **config)
    adapter.set_classes(CLASSES)
    t = adapter.image_transform(dataset)
    sizes = torch.tensor([o.shape for o in originals])
    x_orig = torch.stack([t(o, o.shape) for o in originals])
    x_store = torch.stack([t(resize_image(o, STORE_SIZE), o.shape) for o in originals])
    with torch.no_grad():
        a, b = adapter(x_orig, sizes), adapter(x_store, sizes)
    d_in = (x_orig - x_store).abs().max().item()
    std = float(np.max(getattr(t, "std", (1.0,))))
    flat_a, flat_b = a.maps.flatten(2), b.maps.flatten(2)
    return {
        "model": name, "dataset": dataset, "input": f"{tuple(x_orig.shape[1:])}",
        "max_d_input": d_in, "max_d_input_grey": d_in * std * 255,
        "max_d_score": (a.scores - b.scores).abs().max().item(),
        "max_d_map": (a.maps - b.maps).abs().max().item(), "max_map": a.maps.abs().max().item(),
        "argmax_flips": int((flat_a.argmax(-1) != flat_b.argmax(-1)).sum().item()),
        "pairs": int(flat_a.shape[0] * flat_a.shape[1]),
        "steps": t.describe(),
    }


def markdown(rows: list[dict]) -> str:
    head = ("| model | dataset | input | max abs d input (normalised / grey levels) | max abs d score | "
            "max abs d map (max map) | argmax flips |\n|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        lines.append(f"| {r['model']} | {r['dataset']} | {r['input']} | {r['max_d_input']:.3f} / {r['max_d_input_grey']:.1f} | "
                     f"{r['max_d_score']:.1e} | {r['max_d_map']:.1e} ({r['max_map']:.1e}) | {r['argmax_flips']}/{r['pairs']} |")
    return "\n".join(lines)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON instead of a Markdown table.")
@click.option("--models", default="medklip,mavl,kad,carzero,devide", show_default=True)
def main(as_json: bool, models: str) -> None:
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    originals = [synthetic_cxr(h, w, seed=i) for i, (h, w) in enumerate(SIZES)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bert, cache = tiny_text_assets(Path(tmp))
        cfgs = configs(bert, cache)
        for name in models.split(","):
            datasets = ["chestxray14", "rsna_pneumonia"] if name in ("medklip", "mavl") else ["chestxray14"]
            for ds in datasets:  # rsna_pneumonia: equalised ("auto"), as the official RSNA loaders
                rows.append(measure(name, cfgs[name], originals, ds))
    if as_json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    else:
        print(f"originals {SIZES}, default store S = {STORE_SIZE} (PIL bilinear stretch), tiny random models\n")
        print(markdown(rows))


if __name__ == "__main__":
    main()
