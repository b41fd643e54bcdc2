"""Extraction throughput: images/s and device utilisation of the whole block loop, per model and method.

    python benchmarks/extract_throughput.py --model dog --device cpu --cases 512
    python benchmarks/extract_throughput.py --preset paper-random --device cuda --precision bf16 --batch-size 64
    python benchmarks/extract_throughput.py --model open_clip --model-option model=ViT-B-16 \
        --model-option weights=random --method similarity --method maskclip --device cuda --precision bf16

For each model and method it writes a synthetic ``images.zarr`` once (``--cases`` S x S images in
blocks of ``--cases-per-block``) and measures, after a warm-up batch:

* ``compute``: the adapter alone on one block already on the device, micro-batch after micro-batch,
  synchronised once at the end: the most the device can do (an upper bound for the loops);
* ``plain``: the loop before extract/pipeline.py: read blocks with a DataLoader, ``.cpu()`` after every
  micro-batch, write each block on the main thread;
* ``pipeline``: the runner's loop now: blocks read by the workers straight into a ring of shared
  (on CUDA page-locked) buffers, copied to the device once per block on a side stream, outputs kept
  on the device, one pinned non-blocking copy back per block, blocks written on a background thread
  (extract/pipeline.py);
* optional (``--loops``): ``pipeline-noring`` (the same, read through the DataLoader's own tensors:
  the runner before the ring), ``pipeline-nowrite`` (blocks dropped instead of written) and
  ``pipeline-memory`` (blocks read and pinned before the timer starts, no ring) split what reading
  and writing cost the loop.

Each loop reads the store with ``--workers`` DataLoader processes and writes a real submission store.
Reported: images/s, host time per block (the loop's wall time outside the model calls, per block:
reading, waiting for copies, writing, on the main thread) and the part of it spent waiting for the
DataLoader's next block, and on CUDA the mean utilisation sampled every 0.1 s with NVML
(``torch.cuda.utilization``: the share of time a kernel was running) and the peak memory.

``--preset paper-random`` benchmarks the paper's architectures with random weights (no download):
open_clip ViT-B-16 with similarity, MaskCLIP and Grad-CAM, and MedKLIP, MAVL, KAD, CARZero and
DeViDe at their official sizes, with BERT-base-shaped text encoders built from a config and a random
768-d query cache.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import click
import numpy as np
import torch

DATASET = "phantom"  # any key of the contract; the images are synthetic


# --------------------------------------------------------------------------------------- inputs
def synthetic_images(path: Path, n: int, size: int, cpb: int, classes) -> Path:
    """images.zarr with ``n`` smooth-plus-noise S x S images (compressible like radiographs, unlike noise)."""
    from xbench.schemas import ImagesWriter

    w = ImagesWriter(path, DATASET, case_ids=[f"c{i:06d}" for i in range(n)], classes=list(classes), image_size=size,
                     cases_per_block=cpb, attrs={})
    yy, xx = np.mgrid[0:size, 0:size]
    base = (96 + 64 * np.sin(xx / 37.0) * np.cos(yy / 53.0)).astype(np.float32)
    rng = np.random.default_rng(0)
    block = np.clip(base[None] + rng.normal(0, 8, (cpb, size, size)), 0, 255).astype(np.uint8)  # drawn once, reused
    for b in range(w.n_blocks):
        lo, hi = w.block_rows(b)
        w.write_block(b, np.roll(block[: hi - lo], b, axis=0), np.tile(np.array([[2048, 2500]], np.int64), (hi - lo, 1)))
    w.finish()
    return path


def paper_random_models(folder: Path) -> list[tuple[str, str, dict]]:
    """(label, model, overrides) of the paper's architectures with random weights, offline."""
    from transformers import BertConfig

    from xbench.extract.models.crossattn.cache import QueryCache, write_query_cache
    from xbench.extract.models.crossattn.entities import ENTITIES, MAVL_ASPECTS

    bert = folder / "bert-base-config"
    bert.mkdir(parents=True, exist_ok=True)
    words = "there is no pleural effusion pneumothorax lung opacity cardiomegaly atelectasis consolidation nodule mass".split()
    (bert / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    (bert / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True}))
    BertConfig().to_json_file(bert / "config.json")  # BERT-base sizes; weights are random (weights: random)
    rng = np.random.default_rng(0)
    cache = folder / "queries-768.npz"
    write_query_cache(QueryCache(ENTITIES, rng.normal(size=(len(ENTITIES), 768)).astype("f4"),
                                 rng.normal(size=(len(ENTITIES), len(MAVL_ASPECTS), 768)).astype("f4"), MAVL_ASPECTS,
                                 {"benchmark": "random"}), cache)
    clip = {"model": "ViT-B-16", "weights": "random"}
    out = [(f"ViT-B/16 {m}", "open_clip", {**clip, "method": m}) for m in ("similarity", "maskclip", "gradcam")]
    out += [("MedKLIP", "medklip", {"weights": "random", "embeddings_cache": str(cache)}),
            ("MAVL", "mavl", {"weights": "random", "embeddings_cache": str(cache)}),
            ("KAD-512", "kad", {"weights": "random", "text_encoder": str(bert)}),
            ("CARZero", "carzero", {"weights": "random", "text_encoder": str(bert)}),
            ("DeViDe", "devide", {"weights": "random", "text_encoder": str(bert)})]
    return out


# ------------------------------------------------------------------------------------ the loops
class UtilSampler:
    """Mean GPU utilisation (NVML, every ``period`` s) while the ``with`` block runs; None off CUDA."""

    def __init__(self, device: torch.device, period: float = 0.1) -> None:
        self.device, self.period, self.samples = device, period, []
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.samples.append(torch.cuda.utilization(self.device))
            except Exception:  # noqa: BLE001 - no NVML: no figure, not a failure
                return

    def __enter__(self):
        if self.device.type == "cuda":
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.device.type == "cuda":
            self._thread.join()

    @property
    def mean(self) -> float | None:
        return round(statistics.mean(self.samples), 1) if self.samples else None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_loop(adapter, loader, writer, batch: int, device, precision: str) -> None:
    """The loop as it was before extract/pipeline.py (kept here as the baseline being measured)."""
    from xbench.extract.pipeline import autocast

    for b, images, sizes in loader:
        scores, maps = [], []
        for i in range(0, images.shape[0], batch):
            x = images[i:i + batch].to(device, non_blocking=True)
            with autocast(device, precision):
                out = adapter(x, sizes[i:i + batch])
            scores.append(out.scores.float().cpu())
            maps.append(out.maps.float().cpu())
        writer.write_block(DATASET, int(b), torch.cat(scores).numpy(), torch.cat(maps).numpy())


def pipeline_loop(adapter, loader, writer, batch: int, device, precision: str) -> None:
    """The runner's loop (extract/runner.py): blocks read into the input ring, compute_block with a
    side-stream copy, BlockWriter. ``loader.ring`` is the ring (see measure)."""
    from xbench.extract.pipeline import BlockWriter, compute_block

    ring = loader.ring
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    with BlockWriter(writer.write_block) as w:
        for b, item, sizes in loader:
            pending = compute_block(adapter, ring.view(item, sizes.shape[0]), sizes, batch, device, precision, stream)
            ring.consumed(item, pending.input_event)
            w.submit(DATASET, int(b), pending)


class _NoStore:
    """A writer that drops blocks (``pipeline-nowrite``: what writing costs the loop)."""

    def write_block(self, *args) -> None:
        pass


def pipeline_nowrite_loop(adapter, loader, writer, batch: int, device, precision: str) -> None:
    pipeline_loop(adapter, loader, _NoStore(), batch, device, precision)


def pipeline_noring_loop(adapter, loader, writer, batch: int, device, precision: str) -> None:
    """compute_block + BlockWriter fed by the DataLoader's own tensors (a shared-memory segment per block,
    pinned by its pin thread): the runner before the input ring. As ``pipeline-memory`` it is fed
    from blocks already in pinned memory, loaded before the timer starts (what reading costs the loop)."""
    from xbench.extract.pipeline import BlockWriter, compute_block

    with BlockWriter(writer.write_block) as w:
        for b, images, sizes in loader:
            w.submit(DATASET, int(b), compute_block(adapter, images, sizes, batch, device, precision))


LOOPS = {"plain": plain_loop, "pipeline": pipeline_loop, "pipeline-nowrite": pipeline_nowrite_loop,
         "pipeline-noring": pipeline_noring_loop, "pipeline-memory": pipeline_noring_loop}
RING_LOOPS = ("pipeline", "pipeline-nowrite")  # read through the runner's input ring


class _TimedIter:
    """The DataLoader, timing how long the loop waits for each next block."""

    def __init__(self, loader) -> None:
        self._loader, self.seconds = loader, 0.0

    def __iter__(self):
        it = iter(self._loader)
        while True:
            t = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                self.seconds += time.perf_counter() - t
            yield item


class _Timed:
    """The adapter, timing its calls: the loop's time outside them is its host-side overhead."""

    def __init__(self, adapter) -> None:
        self._adapter, self.seconds = adapter, 0.0

    def __call__(self, *args):
        t = time.perf_counter()
        try:
            return self._adapter(*args)
        finally:
            self.seconds += time.perf_counter() - t

    def __getattr__(self, name):
        return getattr(self._adapter, name)


def measure(adapter, images_path: Path, work: Path, *, batch: int, cpb: int, device, precision: str, workers: int,
            loops=("plain", "pipeline")) -> dict:
    """compute-only and loop figures for one adapter (see the module doc)."""
    from torch.utils.data import DataLoader

    from xbench.extract.pipeline import autocast
    from xbench.extract.pipeline import InputRing
    from xbench.extract.runner import _Blocks, ring_slots
    from xbench.schemas import DatasetSpec, SubmissionWriter, read_images

    ds = read_images(images_path).datasets[DATASET]
    adapter.set_classes(ds.classes)
    n = len(ds.case_id)
    blocks = [(b, lo, min(lo + cpb, n)) for b, lo in enumerate(range(0, n, cpb))]
    first = torch.from_numpy(np.ascontiguousarray(ds.image[0:cpb])).to(device)
    sizes = torch.from_numpy(np.asarray(ds.orig_size[0:cpb], dtype=np.int64))

    def compute_once():
        outs = []
        for i in range(0, first.shape[0], batch):
            with autocast(device, precision):
                out = adapter(first[i:i + batch], sizes[i:i + batch])
            outs.append((out.scores, out.maps))
        return outs

    compute_once()  # warm-up (cuDNN autotuning, lazy initialisation)
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    reps = max(3, len(blocks))
    t = time.perf_counter()
    with UtilSampler(device) as util:
        for _ in range(reps):
            compute_once()
        _sync(device)
    compute_s = (time.perf_counter() - t) / reps
    res = {"cases": n, "blocks": len(blocks), "cases_per_block": cpb, "batch_size": batch,
           "compute": {"images_per_second": round(first.shape[0] / compute_s, 1), "seconds_per_block": round(compute_s, 4),
                       "gpu_utilisation_percent": util.mean}}
    spec = DatasetSpec([str(c) for c in ds.case_id], tuple(ds.classes), tuple(adapter.map_shape), adapter.score_kind,
                       tuple(adapter.unsupported))
    for name in loops:
        writer = SubmissionWriter.create(work / f"{name}.zarr", model="bench", method=str(adapter.method), provenance={},
                                         datasets={DATASET: spec}, cases_per_block=cpb, map_dtype="float16", overwrite=True)
        reader = _Blocks(str(images_path), DATASET, blocks)
        ring = None
        if name in RING_LOOPS:
            shape, dtype = reader.case_layout()
            ring = reader.ring = InputRing(ring_slots(workers), cpb, shape, dtype, device, shared=workers > 0)
        loader = DataLoader(reader, batch_size=None, shuffle=False, num_workers=workers,
                            pin_memory=device.type == "cuda" and ring is None)
        if name == "pipeline-memory":
            loader = list(loader)  # read and pinned before the timer starts
        timed, feed = _Timed(adapter), _TimedIter(loader)
        feed.ring = ring
        t = time.perf_counter()
        with UtilSampler(device) as util:
            LOOPS[name](timed, feed, writer, batch, device, precision)
            _sync(device)
        seconds = time.perf_counter() - t
        if ring is not None:
            ring.close()
        res[name] = {"images_per_second": round(n / seconds, 1),
                     "host_ms_per_block": round(1000 * (seconds - timed.seconds) / len(blocks), 1),
                     "loader_wait_ms_per_block": round(1000 * feed.seconds / len(blocks), 1),
                     "gpu_utilisation_percent": util.mean}
    if device.type == "cuda":
        res["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return res


def markdown(rows: list[dict]) -> str:
    head = ("| model / method | compute img/s | plain img/s | plain util % | plain host ms/block | pipeline img/s "
            "| pipeline util % | pipeline host ms/block |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        p, q = r.get("plain", {}), r.get("pipeline", {})
        lines.append(f"| {r['label']} | {r['compute']['images_per_second']} | {p.get('images_per_second')} | "
                     f"{p.get('gpu_utilisation_percent')} | {p.get('host_ms_per_block')} | "
                     f"{q.get('images_per_second')} | {q.get('gpu_utilisation_percent')} | {q.get('host_ms_per_block')} |")
    return "\n".join(lines)


@click.command()
@click.option("--model", default=None, help="Registered name or config file (default: dog, unless --preset).")
@click.option("--model-option", "model_options", multiple=True, metavar="KEY=VALUE")
@click.option("--method", "methods", multiple=True, help="Saliency method(s) of --model.")
@click.option("--preset", type=click.Choice(["paper-random"]), default=None, help="The paper's architectures, random weights.")
@click.option("--only", "only", multiple=True, help="With --preset: labels to run (substring match).")
@click.option("--batch-size", default=64, show_default=True)
@click.option("--cases", default=4096, show_default=True, help="Images in the synthetic store.")
@click.option("--cases-per-block", default=256, show_default=True)
@click.option("--image-size", default=512, show_default=True, help="S of the stored images.")
@click.option("--workers", default=4, show_default=True, help="DataLoader processes reading the store.")
@click.option("--device", default=None, help="Default: cuda when available, else cpu.")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True)
@click.option("--threads", default=None, type=int, help="torch CPU threads.")
@click.option("--loops", default="plain,pipeline", show_default=True, help="Which loops to time.")
@click.option("--out", "out_json", type=click.Path(), default=None, help="Also write the results as JSON here.")
def main(model, model_options, methods, preset, only, batch_size, cases, cases_per_block, image_size, workers, device,
         precision, threads, loops, out_json):
    from xbench.extract.options import _model_options
    from xbench.extract.datasets import DATASETS
    from xbench.extract.models import create_adapter

    if threads:
        torch.set_num_threads(threads)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    work = Path(tempfile.mkdtemp(prefix="xbench-throughput-"))
    classes = DATASETS.get("chestx_det10").classes  # ten real findings, so every model maps them
    t = time.perf_counter()
    images = synthetic_images(work / "images.zarr", cases, image_size, cases_per_block, classes)
    print(json.dumps({"synthetic_store_seconds": round(time.perf_counter() - t, 1), "device": str(device),
                      "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
                      "torch": torch.__version__}), flush=True)
    if preset:
        runs = [r for r in paper_random_models(work / "models") if not only or any(o in r[0] for o in only)]
    else:
        overrides = _model_options(model_options)
        runs = [(f"{model or 'dog'} {m or ''}".strip(), model or "dog", {**overrides, **({"method": m} if m else {})})
                for m in (methods or (None,))]
    rows = []
    for label, name, overrides in runs:
        adapter = None
        try:
            adapter = create_adapter(name, **overrides).to(device)
            r = {"label": label, "model": name, "device": str(device), "precision": precision,
                 **measure(adapter, images, work, batch=batch_size, cpb=cases_per_block, device=device, precision=precision, workers=workers,
                           loops=tuple(x for x in loops.split(",") if x))}
        except Exception as e:  # noqa: BLE001 - one model failing does not stop the others
            r = {"label": label, "model": name, "error": f"{type(e).__name__}: {e}"}
        rows.append(r)
        print(json.dumps(r), flush=True)
        del adapter
        if device.type == "cuda":
            torch.cuda.empty_cache()
    ok = [r for r in rows if "error" not in r]
    if ok:
        print(markdown(ok), flush=True)
    if out_json:
        Path(out_json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
