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
    try:
        meta = open_store_group(path).attrs.get("xbench", {})
    except Exception:
        return None
    return meta.get("kind") if isinstance(meta, dict) else None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--gt", "gt_path", type=click.Path(path_type=Path), help="Ground-truth store: also check every case and class of it is present.")
@click.option("--kind", type=click.Choice(["auto", "submission", "images", "ground-truth"]), default="auto", show_default=True,
              help="Which contract to check against; auto reads the store's root attribute xbench.kind.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing when valid.")
def validate_cmd(store: Path, gt_path: Path | None, kind: str, as_json: bool, quiet: bool) -> None:
    """Check STORE (a .zarr directory or .zarr.zip) against the XBench contract.

    Every problem is printed on its own line on stderr and the exit code is 2; a valid store
    exits 0. Metadata is checked before any data is read, so a broken or huge store is
    rejected quickly.

    \b
    Examples:
      xbench-validate submission.zarr
      xbench-validate submission.zarr.zip --gt gt.zarr --json
    """
    from .ground_truth import validate_ground_truth
    from .images import validate_images
    from .submission import validate_submission

    try:
        if kind == "auto":
            kind = _store_kind(store) or "submission"
        if kind == "submission":
            problems = validate_submission(store, gt_path) if gt_path is None else _with_gt(store, gt_path)
        elif kind == "images":
            problems = validate_images(store)
        else:
            problems = validate_ground_truth(store)
    except InvalidStoreError as exc:
        problems = exc.problems
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
