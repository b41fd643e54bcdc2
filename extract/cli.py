"""``xbench-extract``: run a model over images.zarr and write submission.zarr."""
from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # extraction never downloads: set before transformers loads

import click

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


def _bar_callback(bar):
    def update(dataset: str, block: int, n: int) -> None:
        if block < 0:  # announcement of the work this rank has: n cases
            bar.total = (bar.total or 0) + n
            bar.refresh()
        else:
            bar.update(n)

    return update


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


@click.command(epilog=EXAMPLES, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--model", "model", metavar="NAME_OR_CONFIG", help="Registered model name, a YAML/TOML/JSON model config, or module:attr.")
@click.option("--images", type=click.Path(exists=True, file_okay=True, dir_okay=True), help="images.zarr made by xbench-prepare.")
@click.option("--out", type=click.Path(), help="submission.zarr to write (resumed when it exists with the same spec).")
@click.option("--method", default=None, help="Saliency method: similarity (default), maskclip, gradcam; cross-attention models: their own.")
@click.option("--datasets", default=None, help="Comma-separated dataset keys to extract (default: all in the images store).")
@click.option("--batch-size", default=32, show_default=True, type=int, help="Images per forward pass.")
@click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: this rank's GPU, else CPU).")
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default=None, help="Autocast precision (default fp32).")
@click.option("--workers", default=2, show_default=True, type=int, help="DataLoader worker processes reading images.zarr.")
@click.option("--cases-per-block", default=None, type=int, help="Rows per written block (default max(64, batch size)).")
@click.option("--map-dtype", type=click.Choice(["float16", "float32"]), default="float16", show_default=True)
@click.option("--model-option", "model_options", multiple=True, metavar="KEY=VALUE", help="Override a model config key (dots for nesting: preprocess.resize=crop). Repeatable.")
@click.option("--nproc-per-node", default=None, type=int, help="Launch this many local ranks through torch.distributed.run.")
@click.option("--overwrite", is_flag=True, help="Delete an existing store written with a different spec.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@click.option("--list-models", is_flag=True, help="List registered model names and exit.")
def main(model, images, out, method, datasets, batch_size, device, precision, workers, cases_per_block,
         map_dtype, model_options, nproc_per_node, overwrite, quiet, as_json, list_models):
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
    if nproc_per_node and nproc_per_node > 1 and "WORLD_SIZE" not in os.environ:
        from .distributed import relaunch

        sys.exit(relaunch(nproc_per_node, _strip_nproc(sys.argv[1:])))

    from .models.errors import ModelConfigError, WeightsNotFoundError
    from .runner import ExtractError, ExtractOptions, run_extraction
    from xbench.schemas import InvalidStoreError
    from .registry import UnknownNameError

    overrides = _parse_options(model_options)
    if method:
        overrides["method"] = method
    opts = ExtractOptions(model=model, images=images, out=out, overrides=overrides,
                          datasets=[d.strip() for d in datasets.split(",") if d.strip()] if datasets else None,
                          batch_size=batch_size, device=device, precision=precision, workers=workers,
                          cases_per_block=cases_per_block, map_dtype=map_dtype, overwrite=overwrite, quiet=quiet)
    rank = int(os.environ.get("RANK", 0))
    bar = None
    if not quiet and rank == 0:
        from tqdm import tqdm

        bar = tqdm(unit="img", desc="extract", file=sys.stderr)
    try:
        summary = run_extraction(opts, progress=_bar_callback(bar) if bar is not None else None)
    except (ExtractError, ModelConfigError, WeightsNotFoundError, UnknownNameError, InvalidStoreError, ValueError) as e:
        if bar is not None:
            bar.close()
        problems = getattr(e, "problems", None)
        lines = [str(p) for p in problems] if problems else str(e).splitlines() or [type(e).__name__]
        for line in lines:
            click.echo(f"xbench-extract: {line}", err=True)
        sys.exit(2)
    if bar is not None:
        bar.close()
    if rank == 0:
        if as_json:
            click.echo(json.dumps(summary))
        elif not quiet:
            click.echo(f"wrote {summary['out']} ({summary['cases']} cases, {summary['blocks_written']} blocks "
                       f"on rank 0 of {summary['world_size']}, {summary['seconds']} s)")


if __name__ == "__main__":
    main()
