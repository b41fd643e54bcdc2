"""``xbench-extract``: run a model over images.zarr and write submission.zarr.

Exit status (the contract's, through xbench.schemas._cli): 0 done (or already complete); 2 invalid input
(wrong store kind, unknown model, missing weights: one line each); 1 anything else; 130 interrupted
("run the same command again to resume"). The cheap checks run before torch is imported.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # extraction never downloads: set before transformers loads

import click

from xbench.extract.options import ExtractOptions
from xbench.schemas._cli import RESUME_HINT, UserError, command, progress, warn
from xbench.schemas.errors import InputError, escape_text
from xbench.schemas.options import Flag, click_options, from_params, opt

EXAMPLES = """
\b
Examples:
  xbench-extract --model dog --images images.zarr --out dog.zarr
  xbench-extract --model biomedclip.yaml --images images.zarr --out bmc.zarr \\
      --method maskclip --precision bf16 --batch-size 64 --workers 8
  xbench-extract --model clip --model-option weights=/models/ViT-B-16.pt ...
  xbench-extract ... --nproc-per-node 4          # 4 local GPUs (re-launches via torchrun)
  torchrun --nnodes 2 --nproc-per-node 8 -m xbench.extract.cli ...   # several nodes
  xbench-extract --list-models              # what each model needs (weights, text encoder, nothing)
  xbench-extract --list-methods             # the map methods, what they need, their papers
  xbench-extract --model dog --images images.zarr --out smoke.zarr --limit 8   # a smoke test
  xbench-extract --model dog --images images.zarr --out tta.zarr \\
      --augment hflip --augment rotate:degrees=5     # test-time augmentation (docs/how-to/augmentations.md)
  xbench-extract --model dog --images round2.zarr --out round2-sub.zarr --scores-only   # faithfulness round 2
  xbench-extract --model dog --images images.zarr --out dog.zarr --faithfulness faith/   # both rounds at once

A killed run is resumed by running the same command again.
"""


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


def _check(model: str, overrides: dict, method, device, precision, images: str, out: str, *,
           overwrite: bool = False) -> None:
    """Every check that needs no torch, all problems at once: the model request (names, config keys and
    values, weights paths: extract/models/request.py) and the kinds of --images and --out.

    Runs before the heavy imports (torch, open_clip, transformers: seconds) and the model load (up to a
    minute), so a typo costs a second."""
    from xbench.schemas._cli import store_kind_problem

    from xbench.extract.models.request import check_request

    problems = []
    try:
        check_request(model, overrides, method=method, device=device, precision=precision)
    except InputError as exc:
        problems += exc.problems
    images_problem = store_kind_problem(images, "images", "--images")
    if images_problem:
        problems.append(images_problem)
    if Path(out).exists():  # refuse to resume into (or overwrite) a store of another kind
        out_problem = store_kind_problem(out, "submission", "--out", unfinished_ok=True)
        if out_problem:
            problems.append(out_problem)
        elif overwrite:  # --overwrite deletes only a submission store XBench wrote, never a folder of the user's
            from xbench.schemas.submission_writer import replace_problem

            not_ours = replace_problem(out)
            if not_ours:
                problems.append(f"--out {out}: {not_ours}")
    if problems:
        raise InputError(problems)


def _preflight(model: str, overrides: dict) -> None:
    """The model request's torch-free checks alone (kept for callers such as ``xbench run --dry-run``)."""
    from xbench.extract.models.request import check_request

    check_request(model, overrides)


def _list_methods(as_json: bool) -> None:
    """One line per map method: what it computes, what it needs, which registered models run it, its paper."""
    from xbench.extract.models import catalog
    from xbench.extract.saliency import METHODS

    rows = []
    for name in METHODS.names():
        m = METHODS.get(name)  # the method modules import torch only when a map is computed
        needs = [catalog.NEEDS_MODELS[n] for n in sorted(m.needs) if catalog.NEEDS_MODELS.get(n)]
        if len(needs) > 1:  # gradients are implied by the others' towers
            needs = [catalog.NEEDS_MODELS[n] for n in sorted(m.needs) if n != "gradients" and catalog.NEEDS_MODELS.get(n)]
        rows.append({"name": name, "description": m.description, "reference": m.reference,
                     "needs": sorted(m.needs), "needs_text": "; ".join(needs) or "nothing beyond a dual encoder",
                     "models": catalog.models_for_method(name), "selectable": True,
                     "text_independent": m.class_agnostic})
    for name, (description, reference) in catalog.OWN_METHODS.items():
        rows.append({"name": name, "description": description, "reference": reference, "needs": [],
                     "needs_text": "the model's own decoder (used automatically; not chosen with --method)",
                     "models": catalog.models_for_method(name), "selectable": False, "text_independent": False})
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        click.echo(f"{r['name']:<{width}}  {r['description']}. Needs: {r['needs_text']}. "
                   f"Models: {', '.join(r['models'])}. Reference: {r['reference']}")


def _list_models(as_json: bool) -> None:
    """One line per registered model: what it is, what it needs (weights, text encoder, or nothing), its methods."""
    from xbench.extract.models import catalog, list_models

    rows = []
    for name in list_models():
        info = catalog.info(name)
        rows.append(info.as_dict() if info is not None else
                    {"name": name, "kind": "plugin", "summary": "installed by a package (entry point xbench.models)",
                     "needs": "see the plugin's documentation", "methods": [], "method_selectable": None})
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        methods = ", ".join(r["methods"]) if r.get("method_selectable") else (r["methods"] or ["its own"])[0] + " (its own)"
        trust = "; checkpoint needs options.trust_checkpoint: true" if r.get("trust_checkpoint") else ""
        click.echo(f"{r['name']:<{width}}  {r['kind']}: {r['summary']}. Needs {r['needs']}{trust}. Maps: {methods}")


def _method_ignored_early(model: str, overrides: dict, requested: str | None) -> str | None:
    """The warning for a --method the model will not use (it has one method of its own), known before the run:
    from the model's catalog entry, without torch (issue 35: it came only after the whole extraction)."""
    if not requested:
        return None
    from xbench.extract.models import catalog, load_config

    info = catalog.info(str(load_config(model, **dict(overrides)).get("adapter")))
    if info is not None and not info.methods and info.own_method and requested != info.own_method:
        return f"--method {requested} will be ignored: model {info.name!r} uses its own method ({info.own_method})"
    return None


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


@dataclass(kw_only=True)
class ExtractOutput:
    """What ``xbench extract`` prints (the command's own options beside :class:`ExtractOptions`, which a suite's
    ``extract:`` section and the ranks of a run share)."""

    as_json: bool = opt(False, check=Flag(), flag="--json", help="Print the run summary as JSON.")
    list_models: bool = opt(False, check=Flag(),
                            help="List the registered models, what each needs (weights, a text encoder, nothing) and "
                                 "its map methods, and exit (with --json: as JSON).")
    list_methods: bool = opt(False, check=Flag(),
                             help="List the map methods (what each computes, the models it needs, its reference) and "
                                  "exit (with --json: as JSON).")


@command(epilog=EXAMPLES, on_interrupt=RESUME_HINT)
@click_options(ExtractOptions)
@click_options(ExtractOutput)
def main(as_json, list_models, list_methods, **params):
    """Extract per-class scores and whole-image saliency maps from a vision-language model.

    Reads images.zarr, applies the model's own preprocessing, and writes a submission.zarr that
    xbench-validate and xbench-score accept. Weights are read from local files or the offline
    Hugging Face cache only.
    """
    if list_methods:
        _list_methods(as_json)
        return
    if list_models:
        _list_models(as_json)
        return
    missing = [f"--{n}" for n in ("model", "images", "out") if not params[n]]
    if missing:
        raise click.UsageError(f"missing {', '.join(missing)}")
    opts = ExtractOptions(**from_params(ExtractOptions, params))
    if opts.faithfulness and opts.scores_only:
        raise click.UsageError("--faithfulness needs round 1's maps; it cannot be combined with --scores-only")
    if opts.faithfulness and ((opts.nproc_per_node or 1) > 1 or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1):
        raise click.UsageError("--faithfulness runs on one process; with several ranks run round 1, then xbench perturb "
                               "and xbench-extract --scores-only (docs/how-to/faithfulness.md)")
    if opts.faithfulness:
        from xbench.extract.faithfulness import folder_problems

        problems = folder_problems(opts)
        if problems:
            raise UserError(problems, "nothing was written")
    _check(opts.model, opts.overrides, opts.method, opts.device, opts.precision, opts.images, opts.out,
           overwrite=opts.overwrite)
    early = _method_ignored_early(opts.model, opts.overrides, opts.method)
    if early and int(os.environ.get("RANK", 0)) == 0:
        warn("xbench-extract", early)
    from xbench.extract.noop import nothing_to_do

    done = nothing_to_do(opts)  # a finished --out is known before torch is imported and the model built
    if done is not None:
        _say_summary(done, opts.method, as_json, opts.quiet, early)
        return
    if opts.nproc_per_node and opts.nproc_per_node > 1 and "WORLD_SIZE" not in os.environ:
        from xbench.extract.distributed import relaunch

        sys.exit(relaunch(opts.nproc_per_node, _strip_nproc(sys.argv[1:])))

    from xbench.extract.runner import run_extraction

    quiet, method = opts.quiet, opts.method
    rank = int(os.environ.get("RANK", 0))
    callback, close = _bar_callback(not quiet and not as_json and rank == 0)
    try:
        summary = run_extraction(opts, progress=callback)
        if opts.faithfulness and rank == 0:
            from xbench.extract.faithfulness import run_faithfulness

            summary["faithfulness"] = run_faithfulness(
                opts, progress=callback, say=None if (quiet or as_json) else lambda line: click.echo(escape_text(line), err=True))
    finally:
        close()
    if rank != 0:
        return
    _say_summary(summary, method, as_json, quiet, early)


def _say_summary(summary: dict, method, as_json: bool, quiet: bool, early: str | None = None) -> None:
    """What a finished run prints (rank 0): the summary as JSON, or one line (and the faithfulness line).
    ``early``: the ignored-method warning already printed before the run (said once, reported in --json)."""
    ignored = early or _method_ignored(method, summary)
    if ignored and not early:  # a model whose method the catalog could not tell (a plug-in): said after the run
        warn("xbench-extract", ignored)
    if as_json:
        click.echo(json.dumps({"ok": True, **summary, "warnings": [ignored] if ignored else []}))
    elif not quiet:
        if summary["blocks_written"] == 0 and all(v["blocks_todo"] == 0 for v in summary["datasets"].values()):
            click.echo(f"{summary['out']}: already complete, nothing to do ({summary['cases']} cases)")
        else:
            click.echo(f"wrote {summary['out']} ({summary['cases']} cases, {summary['blocks_written']} blocks "
                       f"on rank 0 of {summary['world_size']}, {summary['seconds']} s)")
        if summary.get("faithfulness"):
            f = summary["faithfulness"]
            click.echo(escape_text(f"faithfulness: round 2 {f['round2']} ({f['round2_cases']} images), scores "
                                   f"{f['round2_submission']}, key {f['key']}"))


if __name__ == "__main__":
    main()
