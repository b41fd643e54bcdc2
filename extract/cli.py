"""``xbench-extract``: run a model over images.zarr and write submission.zarr.

Exit status (the contract's, through xbench.schemas._cli): 0 done (or already complete); 2 invalid input
(wrong store kind, unknown model, missing weights: one line each); 1 anything else; 130 interrupted
("run the same command again to resume"). The cheap checks run before torch is imported.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # extraction never downloads: set before transformers loads

import click

from xbench.extract.saliency import method_names
from xbench.schemas._cli import RESUME_HINT, UserError, command, progress, require_kind, warn

EXAMPLES = """
\b
Examples:
  xbench-extract --model dog --images images.zarr --out dog.zarr
  xbench-extract --model biomedclip.yaml --images images.zarr --out bmc.zarr \\
      --method maskclip --precision bf16 --batch-size 64 --workers 8
  xbench-extract --model clip --model-option weights=/models/ViT-B-16.pt ...
  xbench-extract ... --nproc-per-node 4          # 4 local GPUs (re-launches via torchrun)
  torchrun --nnodes 2 --nproc-per-node 8 -m xbench.extract.cli ...   # several nodes
  xbench-extract --list-models
  xbench-extract --model dog --images images.zarr --out smoke.zarr --limit 8   # a smoke test

A killed run is resumed by running the same command again.
"""


def _parse_options(items: tuple[str, ...]) -> dict:
    """KEY=VALUE pairs (VALUE parsed as YAML: numbers, lists, true/false) into a nested dict."""
    import yaml

    out: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--model-option")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = parsed if parsed is not None else value
    return out


def _bar_callback(enabled: bool):
    """The runner's progress callback; the bar starts with the first announced work, so a run that
    fails while loading the model shows no empty bar. Returns (callback, close)."""
    state: dict = {"bar": None, "total": 0}

    def update(dataset: str, block: int, n: int) -> None:
        if state["bar"] is None:
            state["bar"] = progress(desc="extract", unit="img", enabled=enabled)
        if block < 0:  # announcement of the work this rank has: n cases
            state["total"] += n
            state["bar"].set_total(state["total"])
        else:
            state["bar"].update(n)

    def close() -> None:
        if state["bar"] is not None:
            state["bar"].close()

    return update, close


def _preflight(model: str, overrides: dict) -> None:
    """Checks that need no torch: a model config file that parses and names paths that exist.

    Runs before the heavy imports (torch, open_clip, transformers: seconds), so a wrong path fails at once.
    A registered name's own defaults (e.g. clip's pretrained tag) are checked by its adapter later.
    """
    from .models import PATH_KEYS, load_config
    from .models.presets import PREFLIGHTS

    config = load_config(model, **overrides)
    for key in PATH_KEYS:
        value = config.get(key)
        if not isinstance(value, str) or value in ("random", ""):
            continue
        local = value[len("local-dir:"):] if value.startswith("local-dir:") else value
        looks_like_path = value.startswith("local-dir:") or local.startswith(("/", "~", "./", "../")) \
            or Path(local).suffix in (".pt", ".pth", ".bin", ".safetensors", ".ckpt")
        if looks_like_path and not Path(local).expanduser().exists():
            raise UserError(f"{key}: {local}: no such file or folder (model {model!r}); check the path or "
                            "download the weights to it (extraction never downloads)")
    check = PREFLIGHTS.get(str(config.get("adapter")))
    if check is not None:
        check(config)


def _method_ignored(requested: str | None, summary: dict) -> str | None:
    if requested and summary.get("method") != requested:
        return (f"--method {requested} was ignored: model {summary['model']!r} uses its own method "
                f"({summary.get('method')})")
    return None


def _strip_nproc(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--nproc-per-node":
            skip = True
            continue
        if a.startswith("--nproc-per-node="):
            continue
        out.append(a)
    return out


@command(epilog=EXAMPLES, on_interrupt=RESUME_HINT)
@click.option("--model", "model", metavar="NAME_OR_CONFIG", help="Registered model name, a YAML/TOML/JSON model config, or module:attr.")
@click.option("--images", type=click.Path(exists=True, file_okay=True, dir_okay=True), help="images.zarr made by xbench-prepare.")
@click.option("--out", type=click.Path(), help="submission.zarr to write (resumed when it exists with the same spec).")
@click.option("--method", default=None, help=f"Map method for dual encoders: {', '.join(method_names())} (default similarity; "
              "docs/extract.md lists what each needs); cross-attention models use their own.")
@click.option("--datasets", default=None, help="Comma-separated dataset keys to extract (default: all in the images store).")
@click.option("--batch-size", default=32, show_default=True, type=int, help="Images per forward pass.")
@click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: this rank's GPU, else CPU).")
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default=None, help="Autocast precision (default fp32).")
@click.option("--workers", default=2, show_default=True, type=int, help="DataLoader worker processes reading images.zarr.")
@click.option("--cases-per-block", default=None, type=int, help="Rows per written block (default max(64, batch size)).")
@click.option("--map-dtype", type=click.Choice(["float16", "float32"]), default="float16", show_default=True)
@click.option("--writer", "writer", type=click.Choice(["thread", "process"]), default="thread", show_default=True,
              help="Write blocks on a background thread, or in a separate process (keeps zarr's encoding off "
                   "the GIL of the loop that feeds the GPU).")
@click.option("--model-option", "model_options", multiple=True, metavar="KEY=VALUE", help="Override a model config key (dots for nesting: preprocess.resize=crop). Repeatable.")
@click.option("--nproc-per-node", default=None, type=int, help="Launch this many local ranks through torch.distributed.run.")
@click.option("--overwrite", is_flag=True, help="Delete an existing store written with a different spec.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Only the first N cases of each dataset: a smoke test on real data (the store can be "
                   "validated, not scored against the full ground truth).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@click.option("--list-models", is_flag=True, help="List registered model names and exit.")
def main(model, images, out, method, datasets, batch_size, device, precision, workers, cases_per_block,
         map_dtype, writer, model_options, nproc_per_node, overwrite, limit, quiet, as_json, list_models):
    """Extract per-class scores and whole-image saliency maps from a vision-language model.

    Reads images.zarr, applies the model's own preprocessing, and writes a submission.zarr that
    xbench-validate and xbench-score accept. Weights are read from local files or the offline
    Hugging Face cache only.
    """
    from .models import list_models as _list

    if list_models:
        names = _list()
        click.echo(json.dumps(names) if as_json else "\n".join(names))
        return
    missing = [f"--{n}" for n, v in (("model", model), ("images", images), ("out", out)) if not v]
    if missing:
        raise click.UsageError(f"missing {', '.join(missing)}")
    if batch_size < 1:
        raise click.BadParameter("must be at least 1", param_hint="--batch-size")
    require_kind(images, "images", "--images")
    if Path(out).exists():
        require_kind(out, "submission", "--out", unfinished_ok=True)  # refuse to resume into (or overwrite) a store of another kind
    overrides = _parse_options(model_options)
    if method:
        overrides["method"] = method
    _preflight(model, overrides)
    if nproc_per_node and nproc_per_node > 1 and "WORLD_SIZE" not in os.environ:
        from .distributed import relaunch

        sys.exit(relaunch(nproc_per_node, _strip_nproc(sys.argv[1:])))

    from .runner import ExtractOptions, run_extraction

    opts = ExtractOptions(model=model, images=images, out=out, overrides=overrides,
                          datasets=[d.strip() for d in datasets.split(",") if d.strip()] if datasets else None,
                          batch_size=batch_size, device=device, precision=precision, workers=workers,
                          cases_per_block=cases_per_block, map_dtype=map_dtype, overwrite=overwrite, quiet=quiet,
                          limit=limit, writer=writer)
    rank = int(os.environ.get("RANK", 0))
    callback, close = _bar_callback(not quiet and not as_json and rank == 0)
    try:
        summary = run_extraction(opts, progress=callback)
    finally:
        close()
    if rank != 0:
        return
    ignored = _method_ignored(method, summary)
    if ignored:
        warn("xbench-extract", ignored)
    if as_json:
        click.echo(json.dumps({"ok": True, **summary, "warnings": [ignored] if ignored else []}))
    elif not quiet:
        if summary["blocks_written"] == 0 and all(v["blocks_todo"] == 0 for v in summary["datasets"].values()):
            click.echo(f"{summary['out']}: already complete, nothing to do ({summary['cases']} cases)")
        else:
            click.echo(f"wrote {summary['out']} ({summary['cases']} cases, {summary['blocks_written']} blocks "
                       f"on rank 0 of {summary['world_size']}, {summary['seconds']} s)")


if __name__ == "__main__":
    main()
