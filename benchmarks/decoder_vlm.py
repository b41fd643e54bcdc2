"""Decoder VLMs: images per second and peak memory per image, per model and map method.

    python benchmarks/decoder_vlm.py                                   # a tiny random LLaVA-Rad on the CPU
    python benchmarks/decoder_vlm.py --model maira-2                   # a tiny random MAIRA-2 on the CPU
    python benchmarks/decoder_vlm.py --folder /models/llava-rad-merged --device cuda --precision bf16 \
        --classes 14 --images 16

The adapter alone (no store): ``--images`` random S x S images in batches of ``--batch-size``, ``--classes``
findings each (one sequence per (image, finding)), after one warm-up batch; each method is timed separately.
Reported per method: images/s and the peak memory during the timed batches (CUDA: the allocator's peak above
what the model holds; CPU: the process's peak resident set, which includes the model and the interpreter).
Without ``--folder`` a tiny random model (tests/models/decoder_tiny.py; LLaVA-Rad: a 12-block ViT-tiny tower at
224 px, a 3-layer 32-wide Llama; MAIRA-2: a 2-layer Dinov2 at 56 px, the same Llama) is built in a temporary
folder: the plumbing's cost, not a 7B model's.
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

METHODS = ("attention", "rollout", "gradcam", "chefer")
MODELS = ("llava-rad", "maira-2")
CLASSES = ("Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Effusion", "Emphysema", "Fibrosis", "Hernia",
           "Infiltration", "Mass", "Nodule", "Pleural thickening", "Pneumonia", "Pneumothorax")


def _tiny_folder(tmp: Path, model: str) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))
    import decoder_tiny

    if model == "maira-2":
        return decoder_tiny.make_maira_folder(tmp / "tiny-maira-2")
    return decoder_tiny.make_folder(tmp / "tiny-llava-rad")


def _peak(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux -> GiB


def bench(adapter, device: str, n_images: int, batch: int, size: int = 256) -> dict:
    images = torch.randint(0, 256, (n_images, size, size), dtype=torch.uint8, device=device)
    sizes = torch.tensor([[1024, 900]] * n_images)
    adapter(images[:batch], sizes[:batch])  # warm-up
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(0, n_images, batch):
        adapter(images[i:i + batch], sizes[i:i + batch])
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    peak = _peak(device) - (base / 2**30 if device.startswith("cuda") else 0.0)
    return {"images_per_s": round(n_images / seconds, 3), "peak_gib": round(peak, 3),
            "peak_kind": "allocator above the model" if device.startswith("cuda") else "process RSS"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llava-rad", choices=MODELS)
    ap.add_argument("--folder", help="the model's weights folder (default: a tiny random one)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--method", action="append", choices=METHODS)
    args = ap.parse_args(argv)
    from xbench.extract.models import create_adapter

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or str(_tiny_folder(Path(tmp), args.model))
        rows = {}
        for method in args.method or METHODS:
            adapter = create_adapter(args.model, model=folder, method=method).to(args.device, dtype)
            adapter.set_classes(CLASSES[:args.classes])
            rows[method] = bench(adapter, args.device, args.images, args.batch_size)
            print(f"{method:<10} {rows[method]['images_per_s']:>8} img/s  peak {rows[method]['peak_gib']} GiB "
                  f"({rows[method]['peak_kind']})", flush=True)
    machine = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(json.dumps({"model": args.folder or f"tiny random {args.model}", "device": args.device, "machine": machine,
                      "precision": args.precision, "classes": args.classes, "methods": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
