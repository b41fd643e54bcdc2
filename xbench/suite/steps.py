"""The executors: one per step kind, each calling the same Python functions as the single-step command."""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from xbench.extract.options import ExtractOptions
from xbench.schemas import options as _options
from xbench.suite.checks import make_reader
from xbench.suite.parse import Suite, SuiteError, _grid
from xbench.suite.plan import Step

@dataclass
class Context:
    suite: Suite
    run_dir: Path
    limit: int | None
    progress: bool
    say: Callable[[str], None]


def _run_prepare(step: Step, ctx: Context, resume: bool) -> None:
    from xbench.extract.datasets.prepare import WORK_DIR as PREP_WORK, PrepareError, prepare_dataset

    entry = next(d for d in ctx.suite.datasets if d.key == step.key)
    data = ctx.run_dir / "data"
    if not resume:
        for p in [data / o.split("/", 1)[1] for o in step.outputs] + [data / PREP_WORK / step.key]:
            shutil.rmtree(p, ignore_errors=True)
    reader = make_reader(entry, ctx.limit)
    p = entry.prepare
    try:
        prepare_dataset(reader, data, **{**p, "grid": _grid(p["grid"])}, progress=ctx.progress)  # keys: PrepareOptions
    except PrepareError as e:
        raise SuiteError([f"prepare/{step.key}: {e}", *(f"  {x}" for x in e.problems)]) from None


def extract_argv(opts: Mapping[str, Any], images: Path, out: Path) -> list[str]:
    """``xbench-extract`` arguments for one extraction step (used to launch several ranks): the step's options
    written as the command's flags (xbench/extract/options.py), quiet."""
    values = {k: v for k, v in opts.items() if k not in ("images", "out", "nproc_per_node")}
    return _options.to_argv(ExtractOptions, {**values, "images": str(images), "out": str(out), "quiet": True})


def _n_ranks(extract: Mapping) -> int:
    nproc = extract["nproc_per_node"]
    if nproc != "auto":
        return int(nproc)
    device = str(extract.get("device") or "cuda")
    import torch

    return torch.cuda.device_count() if device == "cuda" and torch.cuda.is_available() else 1


def _run_extract(step: Step, ctx: Context, resume: bool) -> None:
    from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError
    from xbench.schemas.registry import UnknownNameError
    from xbench.extract.runner import ExtractError, run_extraction
    from xbench.schemas import InvalidStoreError

    entry = next(m for m in ctx.suite.models if m.key == step.key)
    ext = entry.extract
    images, out = ctx.run_dir / "data" / "images.zarr", ctx.run_dir / step.outputs[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    if not resume:
        shutil.rmtree(out, ignore_errors=True)
    from xbench.extract.models import runs_on_torch

    on_torch = runs_on_torch(entry.model, **copy.deepcopy(dict(entry.options or {})))
    nproc = _n_ranks(ext) if on_torch else 1  # the torch-free path runs in this process
    if nproc > 1 and "WORLD_SIZE" not in os.environ:
        from xbench.extract.distributed import relaunch

        ctx.say(f"  {nproc} ranks through torchrun")
        code = relaunch(nproc, extract_argv({**step.options, "workers": ext["workers"]}, images, out))
        if code:
            raise RuntimeError(f"extract/{step.key}: the ranks exited with status {code}")
        return
    if on_torch:
        import torch

        if ext["threads"]:  # a cap: never more threads than torch would use anyway
            torch.set_num_threads(max(1, min(torch.get_num_threads(), int(ext["threads"]))))
        torch.manual_seed(ctx.suite.seed)
    # the section's keys are ExtractOptions fields (the runner ignores the launch ones: nproc_per_node, threads)
    opts = ExtractOptions(model=entry.model, images=images, out=out, overrides=copy.deepcopy(entry.options),
                          datasets=[d.key for d in ctx.suite.datasets], overwrite=not resume, quiet=True, **ext)
    try:
        run_extraction(opts)
    except (ExtractError, ModelConfigError, WeightsNotFoundError, UnknownNameError, InvalidStoreError) as e:
        lines = [str(p) for p in getattr(e, "problems", None) or []] or str(e).splitlines()
        raise SuiteError([f"extract/{step.key}: {line}" for line in lines]) from None


#: the :class:`~xbench.score.options.ScoreOptions` fields a suite sets itself (its data, its seed, the step's
#: folder); every other field is a key of the suite's ``score:`` section, passed through by :func:`_run_score`
SCORE_SET_BY_SUITE = ("gt_path", "out_dir", "images_path", "seed", "datasets", "quiet", "overwrite")


def _run_score(step: Step, ctx: Context, resume: bool) -> None:
    from xbench.schemas import InvalidStoreError
    from xbench.score.entry import ScoreRunError, run
    from xbench.score.options import ScoreOptions

    data = ctx.run_dir / "data"
    sub = Path(step.options.get("submission") or ctx.run_dir / f"submissions/{step.key}.zarr")  # precomputed: as given
    out = ctx.run_dir / step.outputs[0]
    shutil.rmtree(out, ignore_errors=True)  # scoring is one call: nothing to resume, no stale file may stay
    given = {k: tuple(v) if isinstance(v, list) else v  # the score: section's keys (lists in the fingerprint)
             for k, v in step.options.items() if k not in SCORE_SET_BY_SUITE and k != "submission"}
    options = ScoreOptions(**given, gt_path=str(data / "gt.zarr"), out_dir=out, images_path=data / "images.zarr",
                           seed=step.options["seed"], datasets=tuple(step.options["datasets"]), quiet=True)
    try:
        run(options, [sub], labels=[step.key])
    except ScoreRunError as e:
        raise SuiteError([f"score/{step.key}: {p}" for p in [*e.problems, *([e.hint] if e.hint else [])]]) from None
    except InvalidStoreError as e:
        raise SuiteError([f"score/{step.key}: {p}" for p in e.problems]) from None


def _run_report(step: Step, ctx: Context, resume: bool) -> None:
    from xbench.score.report import build_report

    keys = step.options["models"]
    data = ctx.run_dir / "data"
    given = {m.key: Path(m.submission) for m in ctx.suite.models if m.submission is not None}
    build_report(ctx.run_dir / "report", [ctx.run_dir / "scores" / k for k in keys], images=data / "images.zarr",
                 gt=data / "gt.zarr", submissions={k: given.get(k, ctx.run_dir / f"submissions/{k}.zarr") for k in keys},
                 bootstrap=step.options["bootstrap"], seed=step.options["seed"], size_bins=step.options["size_bins"],
                 overlays=bool(step.options["overlays"]), progress=False, title=step.options["title"])


#: one executor per step kind
EXECUTORS: dict[str, Callable[[Step, Context, bool], None]] = {
    "prepare": _run_prepare, "extract": _run_extract, "score": _run_score, "report": _run_report,
}
