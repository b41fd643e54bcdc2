"""``xbench-prepare``: turn a dataset, as downloaded, into images.zarr (public) and gt.zarr (private).

Exit status: 0 prepared; 2 bad input (unknown dataset or option, missing files, too many skipped
cases: every problem on its own line); 1 anything else. Never a traceback.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .datasets import DATASETS
from .registry import UnknownNameError

_MAX_LINES = 50
_PHANTOM_ONLY = ("n_cases", "seed")


class _Grid(click.ParamType):
    name = "H[xW]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        text = str(value).lower().replace(",", "x")
        try:
            parts = [int(p) for p in text.split("x")]
        except ValueError:
            self.fail(f"{value!r} is not a grid size; give H or HxW, e.g. 224 or 224x224", param, ctx)
        if len(parts) == 1:
            parts = parts * 2
        if len(parts) != 2 or min(parts) < 1 or max(parts) > 4096:
            self.fail(f"{value!r}: the grid needs 1 or 2 sizes between 1 and 4096", param, ctx)
        return tuple(parts)


def _parse_options(pairs) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--option")
        out[key.strip().replace("-", "_")] = value.strip()
    return out


def _fail(message: str, problems=(), *, as_json: bool, code: int = 2, summary=None) -> None:
    if as_json:
        click.echo(json.dumps({"ok": False, "error": message, "problems": list(problems),
                               "summary": summary.to_dict() if summary else None}, indent=2))
    click.echo(f"error: {message}", err=True)
    problems = list(problems)
    for line in problems[:_MAX_LINES]:
        click.echo(f"  {line}", err=True)
    if len(problems) > _MAX_LINES:
        click.echo(f"  ... and {len(problems) - _MAX_LINES} more", err=True)
    sys.exit(code)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("dataset", required=False)
@click.option("--root", type=click.Path(path_type=Path), help="Folder holding the dataset exactly as downloaded (see data_cards/<dataset>.md). Not needed for phantom.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), help="Output folder; images.zarr and gt.zarr are created or updated in it.")
@click.option("--split", default=None, help="Which split to prepare; default: the dataset's first (see --list).")
@click.option("--grid", type=_Grid(), default="224", show_default=True, help="Evaluation grid of the ground truth, H or HxW.")
@click.option("--image-size", type=click.IntRange(16, 4096), default=512, show_default=True, help="Side S of the stored S x S images.")
@click.option("--workers", type=click.IntRange(1, 1024), default=None, help="Decoding processes; default: every core.")
@click.option("--cases-per-block", type=click.IntRange(1, 4096), default=32, show_default=True, help="Cases per image block (the unit of resuming).")
@click.option("--max-skip-fraction", type=click.FloatRange(0, 1), default=0.01, show_default=True, help="Fail (exit 2) when more than this fraction of cases must be skipped for bad input.")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE", help="Reader option, repeatable (see the dataset's data card), e.g. --option negatives=data_entry.")
@click.option("--n-cases", type=click.IntRange(1), default=None, help="phantom only: number of cases (default 200).")
@click.option("--seed", type=click.IntRange(0), default=None, help="phantom only: random seed (default 0).")
@click.option("--list", "list_only", is_flag=True, help="List the datasets and exit.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no summary (errors are still printed).")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON on stdout.")
def main(dataset, root, out_dir, split, grid, image_size, workers, cases_per_block, max_skip_fraction, options,
         n_cases, seed, list_only, quiet, as_json):
    """Prepare DATASET from its native files into OUT/images.zarr and OUT/gt.zarr.

    \b
    Examples:
      xbench-prepare --list
      xbench-prepare phantom --out prepared --n-cases 200
      xbench-prepare siim_acr --root ~/data/siim --out prepared --workers 16
      xbench-prepare vindr_cxr --root ~/data/vindr --out prepared --split test

    Several datasets share one pair of stores; preparing one again replaces only its own group.
    An interrupted run resumes where it stopped when started again with the same options.
    """
    if list_only:
        names = DATASETS.names()
        click.echo(json.dumps({"datasets": names}) if as_json else "\n".join(names))
        return
    if not dataset:
        _fail("name a DATASET (xbench-prepare --list shows them) or pass --list", as_json=as_json)
    try:
        reader_cls = DATASETS.get(dataset)
    except UnknownNameError as exc:
        _fail(str(exc), as_json=as_json)
    except ImportError as exc:
        _fail(f"the reader for {dataset!r} cannot be imported ({exc}); install the extract extra: pip install 'xbench[extract]'", as_json=as_json, code=1)
    if out_dir is None:
        _fail("--out is required", as_json=as_json)
    try:
        opts = _parse_options(options)
    except click.BadParameter as exc:
        _fail(exc.format_message(), as_json=as_json)
    for key, value in (("n_cases", n_cases), ("seed", seed)):
        if value is not None:
            opts[key] = value
    if dataset != "phantom":
        wrong = [k for k in _PHANTOM_ONLY if k in opts]
        if wrong:
            _fail(f"--{wrong[0].replace('_', '-')} applies to phantom only", as_json=as_json)
        if root is None:
            _fail(f"--root is required for {dataset} (the folder holding the files as downloaded)", as_json=as_json)
        if not root.is_dir():
            _fail(f"--root {root}: no such folder", as_json=as_json)

    from .datasets.base import ReaderError
    from .datasets.prepare import PrepareError, TooManySkippedError, prepare_dataset

    try:
        try:
            reader = reader_cls(root, split, **opts)
        except TypeError as exc:
            _fail(f"bad option for {dataset}: {exc}", as_json=as_json)
        except (ValueError, ReaderError) as exc:
            _fail(str(exc), as_json=as_json)
        summary = prepare_dataset(
            reader, out_dir, grid=grid, image_size=image_size, workers=workers, cases_per_block=cases_per_block,
            max_skip_fraction=max_skip_fraction, progress=not quiet and not as_json,
        )
    except TooManySkippedError as exc:
        _fail(f"{exc} (the ground truth was not written; rerun with a higher --max-skip-fraction to accept them)",
              exc.problems, as_json=as_json, summary=exc.summary)
    except PrepareError as exc:
        _fail(str(exc), exc.problems, as_json=as_json)
    except KeyboardInterrupt:
        _fail("interrupted; run the same command again to resume", as_json=as_json, code=130)
    except Exception as exc:  # the contract: one line, no traceback
        from xbench.schemas import InvalidStoreError

        if isinstance(exc, InvalidStoreError):
            _fail(f"cannot write the stores in {out_dir}", [str(p) for p in exc.problems], as_json=as_json)
        _fail(f"unexpected {type(exc).__name__}: {exc}", as_json=as_json, code=1)

    if as_json:
        click.echo(json.dumps({"ok": True, "summary": summary.to_dict()}, indent=2))
    elif not quiet:
        s = summary
        click.echo(
            f"{s.dataset} ({s.split}): {s.n_written} case(s) written, {s.n_skipped} skipped; {s.n_regions} region(s), "
            f"{s.n_fallback_regions} lesion(s) kept by the centroid rule, {s.n_clipped_boxes} box(es) clipped; "
            f"{s.seconds:.1f} s -> {s.images}, {s.gt}"
        )
        for item in s.skipped[:_MAX_LINES]:
            click.echo(f"  skipped {item['case_id']}: {item['source']}: {item['reason']}", err=True)
        if len(s.skipped) > _MAX_LINES:
            click.echo(f"  ... and {len(s.skipped) - _MAX_LINES} more (listed in the stores' 'skipped' attribute)", err=True)


if __name__ == "__main__":  # pragma: no cover
    main()
