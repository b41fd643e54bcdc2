"""``xbench-prepare``: turn a dataset, as downloaded, into images.zarr (public) and gt.zarr (private).

Exit status (the contract's, through xbench.schemas._cli): 0 prepared; 2 bad input (unknown dataset or
option, missing files, too many skipped cases: every problem on its own line); 1 anything else; 130
interrupted ("run the same command again to resume"). Never a traceback.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas._cli import RESUME_HINT, UserError, command, warn
from xbench.schemas.errors import InputError, escape_text
from xbench.schemas.options import Flag, click_options, from_params, opt

from xbench.extract.datasets import DATASETS
from xbench.extract.options import PrepareOptions

_MAX_LINES = 50
_PHANTOM_ONLY = ("n_cases", "seed")


def _fail(message: str, problems=(), *, summary=None) -> None:
    """Stop with exit 2: the message, then at most _MAX_LINES problems (the rest counted)."""
    problems = [str(p) for p in problems]
    shown = problems[:_MAX_LINES] + ([f"... and {len(problems) - _MAX_LINES} more"] if len(problems) > _MAX_LINES else [])
    raise UserError([message, *shown], data={"summary": summary.to_dict() if summary else None})


def _dataset_lines() -> list[dict]:
    """Each dataset's splits (the first is the default: its evaluation split)."""
    rows = []
    for name in DATASETS.names():
        try:
            splits = list(DATASETS.get(name).splits)
        except ImportError:  # a reader whose dependency is missing still has a name
            splits = []
        rows.append({"dataset": name, "splits": splits, "default_split": splits[0] if splits else None})
    return rows


def _link_targets(folders) -> list[Path]:
    """The folders of --allow-links-to, each an existing folder (a link to one counts as that folder) that is not
    the file system's root; refused otherwise (exit 2, one line each)."""
    problems = []
    for f in folders:
        f = Path(f)
        if not f.is_dir():
            problems.append(f"--allow-links-to {escape_text(str(f))}: no such folder")
        elif os.path.realpath(f) == os.path.realpath(os.sep):
            problems.append(f"--allow-links-to {escape_text(str(f))}: is the file system's root; name the folder "
                            "the links lead to")
    if problems:
        raise UserError(problems, "invalid input (problems above); nothing was written")
    return [Path(f) for f in folders]


@dataclass(kw_only=True)
class PrepareOutput:
    """What ``xbench prepare`` prints (the command's own options beside :class:`PrepareOptions`, which a suite's
    ``prepare:`` section shares)."""

    list_only: bool = opt(False, check=Flag(), flag="--list",
                          help="List the datasets, their splits and default split, and exit.")
    quiet: bool = opt(False, check=Flag(), short="-q", help="No progress bar, no summary (errors are still printed).")
    as_json: bool = opt(False, check=Flag(), flag="--json", help="Print the run summary as JSON on stdout.")


@command(on_interrupt=RESUME_HINT)
@click.argument("dataset", required=False)
@click_options(PrepareOptions)
@click_options(PrepareOutput)
def main(dataset, list_only, quiet, as_json, **params):
    """Prepare DATASET from its native files into OUT/images.zarr and OUT/gt.zarr.

    \b
    Examples:
      xbench-prepare --list
      xbench-prepare phantom --out prepared --n-cases 200
      xbench-prepare siim_acr --root ~/data/siim --out prepared --workers 16
      xbench-prepare vindr_cxr --root ~/data/vindr --out prepared --split test
      xbench-prepare phantom --out prepared --n-cases 20 --option phrases=true --text-probes
      xbench-prepare phantom --out prepared --perturb hflip,rotate:degrees=-10..10 --perturb-copies 2

    Several datasets share one pair of stores; preparing one again replaces only its own group.
    An interrupted run resumes where it stopped when started again with the same options.
    """
    if list_only:
        rows = _dataset_lines()
        if as_json:
            click.echo(json.dumps({"datasets": rows}, indent=2))
        else:
            for r in rows:
                others = r["splits"][1:]
                click.echo(f"{r['dataset']:<16} split {r['default_split']} (default)"
                           + (f"; also {', '.join(others)}" if others else ""))
        return
    if not dataset:
        _fail("name a DATASET (xbench-prepare --list shows them) or pass --list")
    reader_cls = DATASETS.get(dataset)  # an unknown name: exit 2 with close matches
    p = PrepareOptions(**from_params(PrepareOptions, params))
    root, out_dir = p.root, p.out
    if out_dir is None:
        _fail("--out is required")
    opts = dict(p.options)
    for key, value in (("n_cases", p.n_cases), ("seed", p.seed)):
        if value is not None:
            opts[key] = value
    if dataset != "phantom":
        if p.perturb and "seed" in opts:  # --seed keys the perturbed copies of any dataset
            opts.pop("seed")
        wrong = [k for k in _PHANTOM_ONLY if k in opts]
        if wrong:
            _fail(f"--{wrong[0].replace('_', '-')} applies to phantom only")
        if root is None:
            _fail(f"--root is required for {dataset} (the folder holding the files as downloaded)")
        if not root.is_dir():
            _fail(f"--root {root}: no such folder")

    from xbench.extract.datasets.prepare import TooManySkippedError, prepare_dataset

    try:
        reader = reader_cls(root, p.split, **opts)
    except InputError as exc:  # an unknown split or option, a bad option value (ReaderOptionError)
        _fail(str(exc))
    if p.allow_links_to:
        reader.allow_links_to(_link_targets(p.allow_links_to))
    earlier = _earlier_run(out_dir, reader.key)
    changed = [] if earlier is None else _differences(earlier, _this_run(reader, p))
    if changed and not p.overwrite:
        _fail(f"{out_dir}: already holds {reader.key} prepared with other options ({earlier['cases']} cases); this run "
              f"would replace it: pass --overwrite to replace it, or choose another --out", changed)
    try:
        summary = prepare_dataset(
            reader, out_dir, grid=p.grid, image_size=p.image_size, workers=p.workers, cases_per_block=p.cases_per_block,
            max_skip_fraction=p.max_skip_fraction, progress=not quiet and not as_json, keep_original=p.keep_original,
            text_probes=p.text_probes,
            perturb=p.perturb, perturb_copies=p.perturb_copies, perturb_seed=p.seed,
        )
    except TooManySkippedError as exc:
        _fail(f"{exc} (the ground truth was not written; rerun with a higher --max-skip-fraction to accept them)",
              exc.problems, summary=exc.summary)

    if changed:  # --overwrite: say what was replaced (shown even with --quiet and --json: data was deleted)
        warn("xbench-prepare", f"replaced {reader.key} in {out_dir} ({earlier['cases']} cases, prepared with other "
                               f"options: {'; '.join(changed)})")
    if as_json:
        click.echo(json.dumps({"ok": True, "summary": summary.to_dict()}, indent=2))
    elif not quiet:
        s = summary
        click.echo(
            f"{s.dataset} ({s.split}): {s.n_written} case(s) written, {s.n_skipped} skipped; {s.n_regions} region(s), "
            f"{s.n_fallback_regions} lesion(s) kept by the centroid rule, {s.n_clipped_boxes} box(es) clipped; "
            f"{s.seconds:.1f} s -> {s.images}, {s.gt}"
        )
        if p.perturb:  # the robustness track (extract/datasets/perturb.py): how many copies, never which
            from xbench.schemas.perturbations import parse_templates

            n_specs = len(parse_templates(p.perturb))
            click.echo(f"  + {s.n_written * n_specs * p.perturb_copies} perturbed copies ({n_specs} SPEC(s) x "
                       f"{p.perturb_copies}) in the images store; their mapping is in the ground truth only")
        for item in s.skipped[:_MAX_LINES]:
            click.echo(f"  skipped {item['case_id']}: {item['source']}: {item['reason']}", err=True)
        if len(s.skipped) > _MAX_LINES:
            click.echo(f"  ... and {len(s.skipped) - _MAX_LINES} more (listed in the stores' 'skipped' attribute)", err=True)


def _earlier_run(out_dir: Path, key: str) -> dict | None:
    """What a finished earlier run left of dataset ``key`` in ``out_dir``: its recorded options, or None when
    there is none (or an unfinished run that this one resumes or restarts: its work folder is there, or the
    ground truth, written last, is not). The stores' own attributes are the record, so nothing new is written."""
    from xbench.schemas.store import open_store_group

    from xbench.extract.datasets.prepare import WORK_DIR

    images, gt = out_dir / "images.zarr", out_dir / "gt.zarr"
    if (out_dir / WORK_DIR / key).exists() or not (gt / key).is_dir():
        return None
    try:
        ig, gg = open_store_group(images)[key], open_store_group(gt)[key]
        return {"reader": dict(ig.attrs.get("reader") or {}), "cases": int(gg["case_id"].shape[0]),
                "image size": int(ig["image"].shape[1]), "grid": "x".join(map(str, gg.attrs.get("grid") or ())),
                "originals kept": "orig_pixels" in ig, "perturbed copies": "perturbed_copies" in ig.attrs,
                "text probes": "query_probe_of" in gg}
    except Exception:  # noqa: BLE001 - a store this run cannot read: replacing it loses nothing readable
        return None


def _this_run(reader, p: PrepareOptions) -> dict:
    grid = p.grid if isinstance(p.grid, (tuple, list)) else (p.grid, p.grid)
    return {"reader": reader.describe(), "image size": int(p.image_size), "grid": "x".join(map(str, grid)),
            "originals kept": bool(p.keep_original), "perturbed copies": bool(p.perturb),
            "text probes": bool(p.text_probes)}


def _differences(earlier: dict, now: dict) -> list[str]:
    """One line per option that differs: "n_cases: 100 in OUT, 50 in this run"."""
    def flat(d: dict) -> dict:
        return {**{k: v for k, v in d.items() if k != "reader"}, **{k: v for k, v in d["reader"].items()}}

    was, will = flat({**earlier, "reader": earlier["reader"]}), flat(now)
    keys = [k for k in dict.fromkeys([*will, *was]) if k != "cases"]
    return [f"{k}: {was.get(k, '(not set)')} there, {will.get(k, '(not set)')} in this run"
            for k in keys if was.get(k) != will.get(k)]


if __name__ == "__main__":  # pragma: no cover
    main()
