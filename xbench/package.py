"""Scoring on challenge platforms: the grand-challenge evaluation container and the Codabench scoring program.

Both score one submitted store against a private ground truth with ``xbench-score`` and follow the platform's
folder conventions:

- **grand-challenge** (``platforms/grand-challenge/``): the container reads the submission from ``/input``
  (a ``*.zarr`` folder, a ``*.zarr.zip`` or ``*.zip`` file), the ground truth from ``$XBENCH_GT``, else the
  platform's ground-truth folder ``/opt/ml/input/data/ground_truth``, else the copy baked into the image at
  ``/opt/xbench/gt.zarr.zip``, and writes ``/output/metrics.json`` (with ``aggregates`` for the leaderboard).
- **Codabench**: ``xbench package codabench --gt gt.zarr --out scoring_program.zip`` writes a scoring program:
  ``metadata.yaml`` (the command Codabench runs), ``score.py`` (calls :func:`codabench_main`) and the ground
  truth as ``gt.zarr.zip``. Codabench runs ``score.py INPUT OUTPUT``: the submission is in ``INPUT/res``, a
  ground truth in ``INPUT/ref`` (reference data) wins over the packaged one, and ``OUTPUT/scores.json`` is the
  leaderboard file. The competition's Docker image needs ``pip install xbench-cxr`` (the scorer alone, no torch).

On failure both exit non-zero and the last line on stderr is the reason, which is what the platforms show a
participant. Submissions are only ever read: a zip is opened as a store, never extracted.
"""
from __future__ import annotations

from .schemas.errors import InputError

import contextlib
import io
import json
import os
import sys
import zipfile
from pathlib import Path

import click

from xbench.schemas._cli import CONTEXT, Command, UserError

__all__ = ["codabench_main", "find_store", "grand_challenge_main", "package", "score_for_platform",
           "write_codabench_bundle", "zip_store"]

GC_GROUND_TRUTH = ("/opt/ml/input/data/ground_truth", "/opt/xbench")
STORE_SUFFIXES = (".zarr", ".zarr.zip", ".zip")

CODABENCH_METADATA = """\
# Codabench scoring program written by `xbench package codabench`.
command: python3 $program/score.py $input $output
description: XBench recognition and grounding scores (metrics.json, scores.json)
"""

CODABENCH_SCORE = """\
\"\"\"Codabench entry: score INPUT/res against INPUT/ref or the packaged gt.zarr.zip; write OUTPUT/scores.json.\"\"\"
import os
import sys

from xbench.package import codabench_main

sys.exit(codabench_main(sys.argv[1], sys.argv[2], program=os.path.dirname(os.path.abspath(__file__))))
"""


class PlatformError(InputError):
    """A reason to fail that the participant should read (the last stderr line)."""


def _is_store(path: Path) -> bool:
    name = path.name
    if name.startswith("."):
        return False
    return (path.is_dir() and name.endswith(".zarr")) or (path.is_file() and name.endswith((".zarr.zip", ".zip")))


def find_store(folder: str | os.PathLike, what: str) -> Path:
    """The one store (``*.zarr`` folder, ``*.zarr.zip``/``*.zip`` file) in ``folder``, or the folder itself when
    it is a Zarr store (holds ``zarr.json``). Raises :class:`PlatformError` for none or several."""
    folder = Path(folder)
    if not folder.is_dir():
        if folder.is_file() and folder.name.endswith(STORE_SUFFIXES[1:]):
            return folder
        raise PlatformError(f"no {what}: {folder} does not exist")
    if (folder / "zarr.json").is_file():
        return folder
    found = sorted(p for p in folder.iterdir() if _is_store(p))
    if len(found) != 1:
        listed = ", ".join(p.name for p in found[:5]) or "nothing usable"
        raise PlatformError(f"expected exactly one {what} (a .zarr folder or .zarr.zip file) in {folder}; "
                            f"found {len(found)}: {listed}")
    return found[0]


def _reason(code: int, captured: str) -> str:
    """The participant-facing summary of a failed ``xbench-score`` run, from what it printed."""
    lines = [ln for ln in captured.splitlines() if ln.strip()]
    if code == 2:  # problem lines read "xbench-score: error: ..."; the summary line has no "error:"
        tag = "xbench-score: error: "
        problems = [ln[len(tag):] for ln in lines if ln.startswith(tag)]
        if problems:
            more = f" (and {len(problems) - 1} more problem(s) above)" if len(problems) > 1 else ""
            return f"invalid submission: {problems[0]}{more}"
    return lines[-1] if lines else f"scoring failed (exit {code})"


def score_for_platform(submission: Path, gt: Path, out: Path, fmt: str) -> int:
    """Run ``xbench-score`` in this process; on failure print the reason as the last stderr line."""
    from xbench.score.cli import main as score_main

    err = io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err):
        try:
            score_main([str(submission), "--gt", str(gt), "--out", str(out), "--format", fmt, "--bootstrap",
                        os.environ.get("XBENCH_BOOTSTRAP", "1000"), "--quiet"])
        except SystemExit as exc:
            code = int(exc.code or 0)
    sys.stderr.write(err.getvalue())
    if code:
        sys.stderr.write(_reason(code, err.getvalue()).rstrip("\n") + "\n")
    return code


def _fail(message: str) -> int:
    sys.stderr.write(message.rstrip("\n").replace("\n", " ") + "\n")
    return 2


def _gc_ground_truth() -> Path:
    if os.environ.get("XBENCH_GT"):
        return Path(os.environ["XBENCH_GT"])
    for place in GC_GROUND_TRUTH:
        try:
            return find_store(place, "ground truth")
        except PlatformError:
            continue
    raise PlatformError("no ground truth: set XBENCH_GT, mount it at /opt/ml/input/data/ground_truth "
                        "or bake it into the image at /opt/xbench/gt.zarr.zip")


def grand_challenge_main(input_dir: str | None = None, output_dir: str | None = None) -> int:
    """The grand-challenge evaluation entry point (``platforms/grand-challenge/evaluate.py``)."""
    input_dir = input_dir or os.environ.get("XBENCH_INPUT", "/input")
    output_dir = output_dir or os.environ.get("XBENCH_OUTPUT", "/output")
    try:
        submission = find_store(input_dir, "submission")
        gt = _gc_ground_truth()
    except PlatformError as exc:
        return _fail(str(exc))
    return score_for_platform(submission, gt, Path(output_dir), "grand-challenge")


def codabench_main(input_dir: str, output_dir: str, *, program: str | None = None) -> int:
    """The Codabench scoring program: submission in INPUT/res, ground truth in INPUT/ref or PROGRAM."""
    try:
        submission = find_store(Path(input_dir) / "res", "submission")
        try:
            gt = find_store(Path(input_dir) / "ref", "ground truth")
        except PlatformError:
            if program is None:
                raise
            gt = find_store(Path(program), "ground truth")
    except PlatformError as exc:
        return _fail(str(exc))
    return score_for_platform(submission, gt, Path(output_dir), "codabench")


def zip_store(store: str | os.PathLike, zf: zipfile.ZipFile, arcname: str) -> None:
    """Add a ``.zarr`` folder to ``zf`` as the stored (uncompressed: chunks are compressed already) zip file
    ``arcname``, itself a ``.zarr.zip`` store. A ``.zarr.zip`` is added as it is."""
    store = Path(store)
    if store.is_file():
        zf.write(store, arcname)
        return
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as inner:
        for path in sorted(store.rglob("*")):
            if path.is_file() and not path.is_symlink():
                inner.write(path, path.relative_to(store).as_posix())
    zf.writestr(zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0)), buf.getvalue(), zipfile.ZIP_STORED)


def write_codabench_bundle(gt: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the Codabench scoring program zip (metadata.yaml, score.py, gt.zarr.zip) atomically."""
    import tempfile

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            fixed = (1980, 1, 1, 0, 0, 0)  # byte-stable bundles for the same ground truth
            zf.writestr(zipfile.ZipInfo("metadata.yaml", fixed), CODABENCH_METADATA)
            zf.writestr(zipfile.ZipInfo("score.py", fixed), CODABENCH_SCORE)
            zip_store(gt, zf, "gt.zarr.zip")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


@click.group("package", context_settings=dict(CONTEXT))
@click.option("--debug", is_flag=True, expose_value=False, help="Show the traceback of an unexpected error.")
def package() -> None:
    """Bundles for scoring on challenge platforms."""


@package.command("codabench", cls=Command)
@click.option("--gt", "gt_path", required=True, type=click.Path(path_type=Path),
              help="Ground-truth store (gt.zarr or gt.zarr.zip) to package with the scoring program.")
@click.option("--out", "out_path", default=Path("scoring_program.zip"), show_default=True,
              type=click.Path(path_type=Path), help="The scoring program zip to write.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def codabench(gt_path: Path, out_path: Path, quiet: bool, as_json: bool) -> None:
    """Write a Codabench scoring program: metadata.yaml, score.py and the ground truth.

    \b
    Example:
      xbench package codabench --gt data/gt.zarr --out scoring_program.zip
    """
    from xbench.schemas import validate_ground_truth

    problems = [str(p) for p in validate_ground_truth(gt_path)]
    gt_real, out_real = Path(os.path.realpath(gt_path)), Path(os.path.realpath(out_path))
    if out_real == gt_real or gt_real in out_real.parents:
        problems.append(f"--out {out_path}: is or lies inside the ground truth ({gt_path}); nothing may be written there")
    if problems:
        raise UserError(problems, f"invalid input ({len(problems)} problem(s) above); nothing was written")
    write_codabench_bundle(gt_path, out_path)
    if as_json:
        click.echo(json.dumps({"ok": True, "scoring_program": str(out_path)}))
    elif not quiet:
        click.echo(f"scoring program -> {out_path}")
