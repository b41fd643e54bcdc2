"""Peak memory per image of a 7B decoder VLM in bf16, per map method: measured on the CPU with a few decoder
layers at LLaVA-Rad's real widths, then extrapolated to 32 layers. NOT a GPU measurement.

    python benchmarks/decoder_memory.py                      # layers 1 2 3, every method, 2 findings
    python benchmarks/decoder_memory.py --layers 1 2 --method attention --classes 4
    python benchmarks/decoder_memory.py --model chexagent --layers 1 2   # CheXagent-2-3b's widths

The model: XBench's LLaVA-Rad class (extract/models/decoder/llava_rad.py) with random bf16 weights at the
real widths (Llama hidden 4096, 32 heads, MLP 11008, vocabulary 32000; a ViT-B/14 tower, timm's
``vit_base_patch14_dinov2`` shape, at 518 px: 37 x 37 = 1,369 image tokens, the grid of the LLaVA-Rad card)
and ``--layers`` decoder layers (``--model chexagent``: CheXagent-2-3b's widths, a Phi-2 decoder and a SigLIP
ViT-L/16 at 512 px). Each layer count runs in a fresh Python process: the model is built once
(bf16 from the start); per method, freed heap is returned to the system (``malloc_trim``), the kernel's
high-water mark of the resident set is reset (``/proc/self/clear_refs``, 5), one image with ``--classes``
findings runs through the adapter, and the new high-water mark (VmHWM) minus the resident set before the run
is that image's working memory above the model. Per method the
working memory is fitted linearly in the number of layers (least squares over the measured layer counts)
and extrapolated to 32 layers; the total adds the 32-layer model's own bytes (its parameters in bf16,
counted, not measured). What this cannot see: a GPU's allocator and kernels (SDPA's CUDA kernels, cuBLAS
workspaces, fragmentation) differ from the CPU's; the CPU figures are a model of the GPU's, not a
measurement of it.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METHODS = ("attention", "rollout", "gradcam", "chefer")
CLASSES = ("Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Effusion", "Emphysema", "Fibrosis", "Hernia")
LLAMA_7B = dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_key_value_heads=32,
                vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=2, eos_token_id=3,
                pad_token_id=0, tie_word_embeddings=False)
VISION_518 = {"embed_dim": 512, "vision_cfg": {"timm_model_name": "vit_base_patch14_dinov2", "timm_model_pretrained": False,
                                               "timm_pool": "", "timm_proj": "linear", "image_size": 518},
              "text_cfg": {"context_length": 16, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1}}
FULL_LAYERS = 32


def _status(key: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def _trim() -> None:
    """Return freed heap pages to the system (glibc), so that the next method's high-water mark starts from what
    is really held; tensors above malloc's mmap threshold are returned on free anyway."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _llava_rad(layers: int):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))
    import decoder_tiny

    from xbench.extract.models.decoder.folder import tokenizer
    from xbench.extract.models.decoder.llava_rad import LlavaRad

    with tempfile.TemporaryDirectory() as tmp:
        decoder_tiny.word_tokenizer(Path(tmp))
        tok = tokenizer(Path(tmp), "bench")
    cfg = dict(LLAMA_7B, num_hidden_layers=layers, architectures=["LlavaLlamaForCausalLM"], model_type="llava",
               mm_projector_type="mlp2x_gelu", mm_vision_select_layer=-2, mm_vision_select_feature="patch",
               mm_use_im_start_end=False)
    return LlavaRad(cfg, VISION_518, tok)


def _chexagent(layers: int):
    """CheXagent-2-3b's widths: Phi-2 (2560 wide, 32 heads, MLP 10240, vocabulary 51200), a SigLIP ViT-L/16 at
    512 px (1024 wide, 24 blocks, 16 heads): 32 x 32 = 1,024 image tokens."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))
    import chexagent_tiny

    from xbench.extract.models.decoder.chexagent import CheXagent, tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        chexagent_tiny.bpe_files(Path(tmp))
        tok = tokenizer(Path(tmp))
    phi = dict(chexagent_tiny.PHI, vocab_size=51200, hidden_size=2560, intermediate_size=10240, num_hidden_layers=layers,
               num_attention_heads=32, num_key_value_heads=32, partial_rotary_factor=0.4, max_position_embeddings=2048)
    vision = dict(image_size=512, patch_size=16, hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                  num_attention_heads=16, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh")
    return CheXagent(dict(phi, visual={"image_size": 512, "output_dim": 2560}), vision, tok)


def one(methods: list[str], layers: int, classes: int, name: str = "llava-rad") -> list[dict]:
    """In this (fresh) process: build once; per method: reset the high-water mark, run one image, report."""
    import gc

    import torch

    from xbench.extract.models.decoder.common import DecoderVLMAdapter, QuestionTemplate

    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # parameters born in bf16: no float32 copy in the high-water mark
    model = (_chexagent if name == "chexagent" else _llava_rad)(layers).eval().requires_grad_(False)
    torch.set_default_dtype(torch.float32)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    side = model.input_size
    images = torch.randint(0, 256, (1, side, side), dtype=torch.uint8)
    sizes = torch.tensor([[side, side]])
    rows = []
    for method in methods:
        adapter = DecoderVLMAdapter(name=name, model=model, method=method,
                                    template=QuestionTemplate.from_config(name, None))
        adapter.set_classes(CLASSES[:classes])
        gc.collect()
        _trim()
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident set
        before = _status("VmRSS")
        t0 = time.perf_counter()
        out = adapter(images, sizes)
        seconds = time.perf_counter() - t0
        peak = _status("VmHWM")
        assert torch.isfinite(out.maps).all()
        tokens = len(adapter._prompts[0][0]) + model.grid[0] * model.grid[1] + len(adapter._prompts[0][1])
        rows.append({"model": name, "method": method, "layers": layers, "classes": classes, "tokens": tokens,
                     "grid": list(model.grid), "weights_bytes": weights, "rss_before": before,
                     "above_model_bytes": peak - before, "seconds": round(seconds, 1)})
        del out, adapter
    return rows


def full_weights_bytes(rows: list[dict]) -> float:
    """The 32-layer model's parameter bytes, from the measured models' counted bytes (linear in layers)."""
    (l1, w1), (l2, w2) = sorted({(r["layers"], r["weights_bytes"]) for r in rows})[:2]
    per_layer = (w2 - w1) / (l2 - l1)
    return w1 + per_layer * (FULL_LAYERS - l1)


def fit(points: list[tuple[int, int]]) -> tuple[float, float]:
    """Least-squares line bytes = a + b * layers."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - b * mx, b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--method", action="append", choices=METHODS)
    ap.add_argument("--classes", type=int, default=2)
    ap.add_argument("--model", default="llava-rad", choices=("llava-rad", "chexagent"))
    ap.add_argument("--chefer-max-layers", type=int, default=2,
                    help="chefer's working memory grows by about 1 GiB per layer at these widths: keep the run "
                         "under ~6 GB of RAM (default 2)")
    ap.add_argument("--one", type=int, metavar="LAYERS", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    methods = args.method or list(METHODS)
    if args.one:
        print(json.dumps(one(methods, args.one, args.classes, args.model)))
        return 0
    rows = []
    for n in args.layers:
        run = [m for m in methods if m != "chefer" or n <= args.chefer_max_layers]
        if not run:
            continue
        cmd = [sys.executable, __file__, "--one", str(n), "--classes", str(args.classes), "--model", args.model]
        for m in run:
            cmd += ["--method", m]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            print(r.stderr[-2000:], file=sys.stderr)
            return 1
        for g in json.loads(r.stdout.strip().splitlines()[-1]):
            rows.append(g)
            print(f"{g['method']:<10} layers {n}: {g['above_model_bytes'] / 2**30:6.2f} GiB above the model "
                  f"({g['weights_bytes'] / 2**30:.2f} GiB of weights), {g['seconds']} s", flush=True)
    summary = {}
    total_w = full_weights_bytes(rows) if len(set(args.layers)) > 1 else None
    for method in methods:
        pts = [(r["layers"], r["above_model_bytes"]) for r in rows if r["method"] == method]
        if len({x for x, _ in pts}) < 2:
            summary[method] = {"note": "fewer than two layer counts measured: no slope"}
            continue
        a, b = fit(pts)
        work = a + b * FULL_LAYERS
        summary[method] = {"per_layer_gib": round(b / 2**30, 3), "intercept_gib": round(a / 2**30, 3),
                           "working_32_layers_gib": round(work / 2**30, 2),
                           "total_32_layers_gib": round((work + total_w) / 2**30, 2) if total_w else None,
                           "layers_measured": sorted({x for x, _ in pts})}
    print(json.dumps({"measured": "CPU, VmHWM above the resident set before one image; extrapolated to 32 layers",
                      "machine": platform.processor() or platform.machine(), "classes": args.classes,
                      "weights_32_layers_gib": round(total_w / 2**30, 2) if total_w else None,
                      "rows": rows, "summary": summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
