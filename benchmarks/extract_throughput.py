"""Extraction throughput: images per second of a model adapter at a given batch size.

    python benchmarks/extract_throughput.py --model dog --batch-size 32
    python benchmarks/extract_throughput.py --model open_clip --model-option model=ViT-B-16 \
        --model-option weights=random --method maskclip --device cuda --precision bf16

Times the adapter alone (preprocessing + forward + saliency + undoing the crop) on random
S x S uint8 images already on the device, after warm-up batches, and reports images/s for each
method given. On CUDA it also samples GPU utilisation (torch.cuda.utilization, needs pynvml) and
peak memory. The first method listed is the baseline the others are compared against (ratio).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import click
import torch


def _measure(adapter, images, sizes, batches: int, device, precision) -> dict:
    from xbench.extract.runner import _autocast

    def step():
        with torch.no_grad(), _autocast(device, precision):
            out = adapter(images, sizes)
        out.maps.float().cpu()  # include the device->host copy the runner does
    for _ in range(2):
        step()
    util = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(batches):
        t = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            try:
                util.append(torch.cuda.utilization(device))
            except Exception:
                pass
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    out = {"images_per_second": round(images.shape[0] / med, 2), "median_batch_seconds": round(med, 4)}
    if device.type == "cuda":
        out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
        if util:
            out["gpu_utilisation_percent"] = round(statistics.mean(util), 1)
    return out


@click.command()
@click.option("--model", default="dog", show_default=True, help="Registered name or config file.")
@click.option("--model-option", "model_options", multiple=True, metavar="KEY=VALUE")
@click.option("--method", "methods", multiple=True, help="Saliency method(s); the first is the baseline.")
@click.option("--batch-size", default=16, show_default=True)
@click.option("--image-size", default=512, show_default=True, help="S of the stored images.")
@click.option("--classes", default=8, show_default=True, help="Number of classes (text prompts).")
@click.option("--batches", default=5, show_default=True, help="Timed batches (after 2 warm-up batches).")
@click.option("--device", default=None, help="Default: cuda when available, else cpu.")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True)
@click.option("--threads", default=None, type=int, help="torch CPU threads.")
def main(model, model_options, methods, batch_size, image_size, classes, batches, device, precision, threads):
    from xbench.extract.cli import _parse_options
    from xbench.extract.models import create_adapter

    if threads:
        torch.set_num_threads(threads)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    overrides = _parse_options(model_options)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch_size, image_size, image_size), dtype=torch.uint8, generator=g).to(device)
    sizes = torch.tensor([[2048, 2500]] * batch_size)
    results = []
    for method in methods or (None,):
        kw = dict(overrides)
        if method:
            kw["method"] = method
        adapter = create_adapter(model, **kw).to(device)
        adapter.set_classes([f"finding {i}" for i in range(classes)])
        r = {"model": model, "method": method or getattr(adapter, "method", None), "device": str(device),
             "precision": precision, "batch_size": batch_size, "threads": torch.get_num_threads(),
             **_measure(adapter, images, sizes, batches, device, precision)}
        if results:
            r["ratio_vs_first"] = round(r["images_per_second"] / results[0]["images_per_second"], 3)
        results.append(r)
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
