"""``xbench-validate`` and ``xbench-convert``.

Exit codes: 0 valid / converted; 2 invalid input (every problem listed, one a line, on stderr);
1 anything else (one line, no traceback).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .errors import InvalidStoreError, Problem
from .store import open_store_group

EXIT_INVALID = 2


def _fail(problems: list[Problem], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"valid": False, "problems": [str(p) for p in problems]}, indent=2))
    for p in problems:
        click.echo(str(p), err=True)
    sys.exit(EXIT_INVALID)


def _store_kind(path: Path) -> str | None:
    from . import budget

    try:
        if budget.inspect_store(path)[1]:  # the validator reports these; Zarr must not parse the store
            return None
        meta = open_store_group(path).attrs.get("xbench", {})
    except Exception:
        return None
    return meta.get("kind") if isinstance(meta, dict) else None


def budget_options(command):
    """``--max-memory`` and ``--timeout``, shared by every command that reads untrusted stores."""
    from .budget import Limits

    command = click.option("--timeout", type=click.FloatRange(min=0), default=Limits.timeout, show_default=True,
                           help="Stop with exit 2 after this many seconds (0: no limit).")(command)
    return click.option("--max-memory", default="2GiB", show_default=True, metavar="SIZE",
                        help="Resident memory budget, e.g. 1GiB or 512MiB: stores that declare more are refused "
                             "before decoding, and the run stops with exit 2 beyond it.")(command)


def apply_budget(prog: str, max_memory: str, timeout: float):
    """Set the process's limits from the flags and start the watchdog, stopped when the command ends."""
    from . import budget

    try:
        size = budget.parse_size(max_memory)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-memory") from None
    dog = budget.Watchdog(prog, budget.set_limits(max_memory=size, timeout=timeout))
    click.get_current_context().call_on_close(dog.stop)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--gt", "gt_path", type=click.Path(path_type=Path), help="Ground-truth store: also check every case and class of it is present.")
@click.option("--kind", type=click.Choice(["auto", "submission", "images", "ground-truth"]), default="auto", show_default=True,
              help="Which contract to check against; auto reads the store's root attribute xbench.kind.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing when valid.")
@budget_options
def validate_cmd(store: Path, gt_path: Path | None, kind: str, as_json: bool, quiet: bool, max_memory: str,
                 timeout: float) -> None:
    """Check STORE (a .zarr directory or .zarr.zip) against the XBench contract.

    Every problem is printed on its own line on stderr and the exit code is 2; a valid store
    exits 0. Files and metadata are checked before any data is read, and no chunk may decode to
    more than it declares, so a broken, huge or hostile store is rejected quickly.

    \b
    Examples:
      xbench-validate submission.zarr
      xbench-validate submission.zarr.zip --gt gt.zarr --json
    """
    from .ground_truth import validate_ground_truth
    from .images import validate_images
    from .submission import validate_submission

    apply_budget("xbench-validate", max_memory, timeout)
    try:
        if kind == "auto":
            kind = _store_kind(store) or "submission"
        if gt_path is not None and kind != "submission":
            problems = [Problem(str(store), f"is {'an' if kind[0] in 'aeiou' else 'a'} {kind} store; --gt checks a submission against the ground truth")]
        elif kind == "submission":
            problems = validate_submission(store, gt_path) if gt_path is None else _with_gt(store, gt_path)
        elif kind == "images":
            problems = validate_images(store)
        else:
            problems = validate_ground_truth(store)
    except InvalidStoreError as exc:
        problems = exc.problems
    except MemoryError:
        problems = [Problem(str(store), "reading it needs more memory than the budget allows (--max-memory)")]
    except Exception as exc:  # an unexpected failure is still one line, exit 1
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
    if problems:
        _fail(problems, as_json)
    if as_json:
        click.echo(json.dumps({"valid": True, "kind": kind, "problems": []}, indent=2))
    elif not quiet:
        click.echo(f"{store}: valid {kind} store")


def _with_gt(store: Path, gt_path: Path) -> list[Problem]:
    from .ground_truth import validate_ground_truth
    from .submission import validate_submission

    gt_problems = validate_ground_truth(gt_path)
    if gt_problems:
        return gt_problems
    return validate_submission(store, gt_path)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="The submission.zarr to write (must not exist).")
@click.option("--gt", "gt_path", type=click.Path(exists=True, path_type=Path), help="Also validate the result against this ground truth before renaming it into place.")
@click.option("--cases-per-block", default=64, show_default=True, help="Rows per stored chunk.")
@click.option("--map-dtype", type=click.Choice(["float16", "float32"]), default="float16", show_default=True)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def convert_cmd(source: Path, out: Path, gt_path: Path | None, cases_per_block: int, map_dtype: str, quiet: bool) -> None:
    """Build a submission.zarr from SOURCE: one HDF5 file, or a folder of per-case .npz files.

    The layouts are described in the README ("Converting existing outputs"). The store is
    written under a temporary name and renamed to OUT only once it is complete and valid.

    \b
    Examples:
      xbench-convert outputs.h5 --out submission.zarr
      xbench-convert npz_outputs/ --out submission.zarr --gt gt.zarr
    """
    from tqdm import tqdm

    from .convert import convert_hdf5, convert_npz_dir, count_cases

    convert = convert_npz_dir if source.is_dir() else convert_hdf5
    try:
        with tqdm(total=count_cases(source), unit="case", disable=quiet, desc="convert") as bar:
            convert(source, out, cases_per_block=cases_per_block, map_dtype=map_dtype, progress=bar.update, gt=gt_path)
    except InvalidStoreError as exc:
        _fail(exc.problems, False)
    except Exception as exc:
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
    if not quiet:
        click.echo(f"wrote {out}")


def validate_main() -> None:
    validate_cmd(prog_name="xbench-validate")


def convert_main() -> None:
    convert_cmd(prog_name="xbench-convert")
