"""``xbench demo``: the whole pipeline on the synthetic phantom set, offline, on a CPU.

Steps (each in this process, through the same Python APIs the commands use)::

    prepare   phantom -> OUT/data/images.zarr + OUT/data/gt.zarr
    extract   random, center, dog (baselines) and clip-tiny (an untrained open_clip ViT,
              built from a config, no weights) -> OUT/submissions/<model>.zarr
    score     each submission against gt.zarr -> OUT/scores/<model>/
    report    leaderboard, figures, paired gaps -> OUT/report/index.html

The demo checks the benchmark itself: the image-based ``dog`` baseline must beat uniformly
random maps on the phantom's pointing game (the phantom's findings are brighter blobs).
A re-run reuses nothing but replaces every output (stores are overwritten).
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import click

from xbench.schemas._cli import UserError, command

__all__ = ["run_demo", "demo", "DEMO_MODELS"]

DEMO_MODELS = ("random", "center", "dog", "clip-tiny")

def _say(progress: bool, msg: str) -> None:
    if progress:
        click.echo(msg, err=True)


def run_demo(out_dir, *, n_cases: int = 200, quick: bool = False, progress: bool = True,
             models=DEMO_MODELS, n_boot: int | None = None, seed: int = 0) -> Path:
    """Prepare, extract, score and report on the phantom set; returns the report's index.html.

    n_cases: phantom cases (``quick`` uses 24 and 100 bootstrap resamples, for CI).
    models: which of DEMO_MODELS to run. n_boot: resamples (default 200; 100 when quick).
    Writes OUT/data, OUT/submissions, OUT/scores, OUT/report and OUT/demo.json (timings).
    """
    import torch

    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset
    from xbench.extract.runner import ExtractOptions, run_extraction
    from xbench.score.outputs import write_outputs
    from xbench.score.report import build_report
    from xbench.score.scoring import score_submission

    unknown = [m for m in models if m not in DEMO_MODELS]
    if unknown:
        raise UserError(f"--models: unknown demo model(s) {', '.join(unknown)}; choose from {', '.join(DEMO_MODELS)}")
    if quick:
        n_cases = min(n_cases, 24)
    n_boot = (100 if quick else 200) if n_boot is None else n_boot
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t_all = time.perf_counter()
    torch.manual_seed(seed)  # the untrained CLIP's weights
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 4)))

    t0 = time.perf_counter()
    data = out / "data"
    for name in ("images.zarr", "gt.zarr"):
        shutil.rmtree(data / name, ignore_errors=True)
    _say(progress, f"[1/4] preparing {n_cases} phantom cases -> {data}")
    reader = PhantomReader(None, "test", n_cases=n_cases, seed=seed, size=256)
    prepare_dataset(reader, data, grid=(224, 224), image_size=256, workers=1, progress=False)
    timings["prepare"] = time.perf_counter() - t0

    subs = out / "submissions"
    scores = out / "scores"
    result_dirs = []
    for k, model in enumerate(models):
        t0 = time.perf_counter()
        _say(progress, f"[2/4] extracting {model} ({k + 1}/{len(models)})")
        sub = subs / f"{model}.zarr"
        run_extraction(ExtractOptions(model=model, images=data / "images.zarr", out=sub,
                                      batch_size=16, device="cpu", workers=0, map_dtype="float32",
                                      overwrite=True, quiet=True))
        timings[f"extract_{model}"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        _say(progress, f"[3/4] scoring {model}")
        res = score_submission(sub, data / "gt.zarr", bootstrap=n_boot, seed=seed)
        res.metrics["xbench"].setdefault("inputs", {})["images"] = str((data / "images.zarr").resolve())
        write_outputs(res, scores / model)
        result_dirs.append(scores / model)
        timings[f"score_{model}"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    _say(progress, "[4/4] writing the report")
    index = build_report(out / "report", result_dirs, images=data / "images.zarr", gt=data / "gt.zarr",
                         submissions={m: subs / f"{m}.zarr" for m in models}, n_boot=n_boot, seed=seed,
                         progress=False,
                         # the demo's settings differ from the commands' defaults: say so where the numbers are
                         title=f"XBench demo (phantom; {n_boot} bootstrap resamples, 256 px images, float32 maps)")
    timings["report"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_all
    summary = {"n_cases": n_cases, "models": list(models), "n_boot": n_boot,
               "timings_s": {k: round(v, 2) for k, v in timings.items()}, "report": str(index)}
    (out / "demo.json").write_text(json.dumps(summary, indent=1))
    return index


@command("demo", on_interrupt="interrupted; run the same command again (it starts over)")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("demo-out"), show_default=True,
              help="Folder for the data, submissions, scores and report.")
@click.option("--n-cases", type=click.IntRange(4), default=200, show_default=True, help="Phantom cases.")
@click.option("--quick", is_flag=True, help="A small run for CI: 24 cases, 100 bootstrap resamples.")
@click.option("--models", default=",".join(DEMO_MODELS), show_default=True,
              help="Comma-separated subset of the demo models.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the report path.")
@click.option("--json", "as_json", is_flag=True, help="Print demo.json (cases, models, resamples, timings, report) on stdout.")
def demo(out_dir, n_cases, quick, models, quiet, as_json):
    """Run the whole pipeline on the synthetic phantom set and write a report.

    Prepares the phantom cases, extracts maps with three baselines (random, center, dog) and an
    untrained tiny CLIP, scores all four and writes the report, all offline on the CPU
    (about a minute on two cores). Open the printed index.html in a browser. The demo's settings
    differ from the commands' defaults (256 px images, float32 maps, 200 resamples); the page says so.

    \b
    Example:
      xbench demo --out demo-out
      xbench demo --quick            # about 30 s, for CI
    """
    index = run_demo(out_dir, n_cases=n_cases, quick=quick, progress=not (quiet or as_json),
                     models=tuple(m.strip() for m in models.split(",") if m.strip()))
    if as_json:
        click.echo((Path(out_dir) / "demo.json").read_text())
        return
    if not quiet:
        info = json.loads((Path(out_dir) / "demo.json").read_text())
        click.echo(f"demo finished in {info['timings_s']['total']:.0f} s")
    click.echo(f"report: {index.resolve()}")
