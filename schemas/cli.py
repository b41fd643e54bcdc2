"""``xbench-validate`` and ``xbench-convert``.

Exit codes (the contract's, through :mod:`xbench.schemas._cli`): 0 valid / converted; 2 invalid input
(every problem listed, one a line, on stderr); 1 anything else (one line, no traceback); 130 interrupted.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas._cli import (NOT_WRITTEN_HINT, UserError, apply_budget, budget_options, command, progress, store_kind,
                   store_kind_problem, warn)
from xbench.schemas.answers import FRAMES
from xbench.schemas.errors import Problem
from xbench.schemas.options import Choice, Flag, Int, Text, click_options, opt, parse

#: what xbench-convert reads as SOURCE, in the order it tells them apart (``source_kind``): kind -> what it is.
#: The one list: the converter dispatches on these kinds and ``xbench --help`` names them.
CONVERT_SOURCES: dict[str, str] = {
    "answers": "model answers (a .jsonl file, --answers FORMAT)",
    "masks": "PNG masks (a folder with masks.json)",
    "json": "COCO results, boxes or masks, or a marks JSON of boxes and points (a .json file)",
    "npz": "per-case .npz files (a folder with meta.json)",
    "hdf5": "HDF5 (one file)",
}


def source_kind(source: Path, answers: str | None = None) -> str:
    """Which of :data:`CONVERT_SOURCES` ``source`` is, from its name and folder entries alone (nothing parsed)."""
    from xbench.schemas.convert_boxes import is_marks_source
    from xbench.schemas.convert_masks import is_masks_folder

    if answers is not None or source.suffix.lower() == ".jsonl":
        return "answers"
    if is_masks_folder(source):
        return "masks"
    if is_marks_source(source):
        return "json"
    return "npz" if source.is_dir() else "hdf5"


@dataclass
class ValidateOptions:
    """What ``xbench validate STORE`` takes besides STORE (the fields are its options)."""

    gt_path: str | None = opt(None, check=Text(click.Path(path_type=str)), flag="--gt",
                              help="Ground-truth store (a folder, a .zarr.zip or a URL): also check every case and "
                                   "class of it is present.")
    images_path: str | None = opt(None, check=Text(click.Path(path_type=str)), flag="--images",
                                  help="The public images store (a folder, a .zarr.zip or a URL) the submission was "
                                       "made from: also check that it holds every case id, class and phrase row id "
                                       "of it, each one missing on its own line (a check a team can run before "
                                       "submitting, without the private ground truth).")
    kind: str = opt("auto", check=Choice(("auto", "submission", "images", "ground-truth")),
                    help="Which contract to check against; auto reads the store's root attribute xbench.kind.")
    as_json: bool = opt(False, check=Flag(), flag="--json", help="Print the result as JSON on stdout.")
    quiet: bool = opt(False, check=Flag(), short="-q", help="Print nothing when valid.")


@command()
@click.argument("store", type=click.Path(path_type=str))
@click_options(ValidateOptions)
@budget_options
def validate_cmd(store: str, max_memory: str, timeout: float, **params) -> None:
    """Check STORE (a .zarr directory, a .zarr.zip, or an https://, http:// or s3:// URL of a .zarr folder)
    against the XBench contract.

    Every problem is printed on its own line on stderr and the exit code is 2; a valid store
    exits 0. Files and metadata are checked before any data is read, and no chunk may decode to
    more than it declares, so a broken, huge or hostile store is rejected quickly. A URL is read as
    xbench-score reads it: the same limits, plus a deadline on every request.

    \b
    Examples:
      xbench-validate submission.zarr
      xbench-validate submission.zarr.zip --gt gt.zarr --json
      xbench-validate submission.zarr --images images.zarr
      xbench-validate http://127.0.0.1:8000/submission.zarr --gt gt.zarr --timeout 600
    """
    from xbench.schemas.ground_truth import validate_ground_truth
    from xbench.schemas.images import validate_images
    from xbench.schemas.paths import store_path
    from xbench.schemas.submission import validate_submission

    apply_budget("xbench-validate", max_memory, timeout)
    o = parse(ValidateOptions, params)
    gt_path, images_path, kind, as_json, quiet = o.gt_path, o.images_path, o.kind, o.as_json, o.quiet
    store = store_path(store)  # a URL stays a string: Path would fold its "//"
    gt_path = None if gt_path is None else store_path(gt_path)
    images_path = None if images_path is None else store_path(images_path)
    if kind == "auto":
        kind = store_kind(store)[0] or "submission"
    # a store of another kind, a zipped folder, an unfinished extraction: one line saying so, not every
    # check of the wrong contract
    _require(store, kind, f"STORE (--kind {kind})")
    if gt_path is not None and kind != "submission":
        raise UserError(f"{store}: is {'an' if kind[0] in 'aeiou' else 'a'} {kind} store; --gt checks a submission "
                        "against the ground truth", data={"valid": False})
    if images_path is not None and kind != "submission":
        raise UserError(f"{store}: is {'an' if kind[0] in 'aeiou' else 'a'} {kind} store; --images checks a "
                        "submission's coverage of the images store", data={"valid": False})
    if gt_path is not None:
        _require(gt_path, "ground-truth", "--gt")
    if images_path is not None:
        _require(images_path, "images", "--images")
    notes: list[str] = []
    try:
        if kind == "submission":
            # alone, a scores-only submission (round 2 of faithfulness) is checked as one; against a ground truth,
            # whose scoring needs maps, it is refused with the reason
            problems = validate_submission(store, scores_only=True) if gt_path is None else _with_gt(store, gt_path)
            if images_path is not None:
                more, notes = _with_images(store, images_path, problems)
                problems = problems + more
        elif kind == "images":
            problems = validate_images(store)
        else:
            problems = validate_ground_truth(store)
    except MemoryError:
        problems = [f"{store}: reading it needs more memory than the budget allows (--max-memory)"]
    if problems:
        raise UserError(problems, data={"valid": False, **({"notes": notes} if notes else {})})
    for note in notes:  # cases the images store lacks: valid, but they would not be scored
        warn("xbench-validate", note)
    if as_json:
        click.echo(json.dumps({"ok": True, "valid": True, "kind": kind, "problems": [],
                               **({"notes": notes} if notes else {})}, indent=2))
    elif not quiet:
        covered = f", holding every case, class and phrase row of {images_path}" if images_path is not None else ""
        if kind == "submission" and images_path is None and gt_path is None:
            # the contract alone passes a misnamed class or a missing case; the platform would refuse either
            covered = " (contract only; add --images images.zarr to check coverage)"
        click.echo(f"{store}: valid {kind} store{covered}")


def _require(path: Path | str, kind: str, role: str) -> None:
    problem = store_kind_problem(path, kind, role)
    if problem:
        raise UserError(problem, data={"valid": False})


def _with_gt(store: Path | str, gt_path: Path | str) -> list[Problem]:
    from xbench.schemas.ground_truth import validate_ground_truth
    from xbench.schemas.submission import validate_submission

    gt_problems = validate_ground_truth(gt_path)
    if gt_problems:
        return gt_problems
    return validate_submission(store, gt_path)


def _with_images(store: Path | str, images_path: Path | str, problems: list[Problem]) -> tuple[list[Problem], list[str]]:
    """The coverage problems and notes of ``store`` against the images store (its own problems first: an images
    store that breaks its contract is listed instead)."""
    from xbench.schemas.images import validate_images
    from xbench.schemas.submission import coverage_problems

    image_problems = validate_images(images_path)
    if image_problems:
        return image_problems, []
    return coverage_problems(store, images_path, skip=problems)


@dataclass
class ConvertOptions:
    """What ``xbench convert SOURCE`` takes besides SOURCE (the fields are its options)."""

    out: Path = opt(check=Text(click.Path(path_type=Path)), required=True,
                    help="The submission.zarr to write (must not exist).")
    gt_path: Path | None = opt(None, check=Text(click.Path(exists=True, path_type=Path)), flag="--gt",
                               help="Also validate the result against this ground truth before renaming it into "
                                    "place.")
    cases_per_block: int = opt(64, check=Int(1, 65536), help="Rows per stored chunk.")
    map_dtype: str | None = opt(None, check=Choice(("float16", "float32")),
                                help="Dtype of the stored maps [default: float16; float32 for boxes and points, whose "
                                     "maps are exact sums of scores].")
    images: Path | None = opt(None, check=Text(click.Path(exists=True, path_type=Path)),
                              help="Boxes and points (a .json SOURCE): the images.zarr giving each case's original "
                                   "size, the case list and the phrase rows; required for them.")
    mapping: Path | None = opt(None, check=Text(click.Path(exists=True, dir_okay=False, path_type=Path)),
                               help="Boxes and points: a .json or .toml file naming categories (or free-text "
                                    "findings) -> XBench findings, and the model.")
    coco_images: Path | None = opt(None, check=Text(click.Path(exists=True, dir_okay=False, path_type=Path)),
                                   help="COCO results: a COCO dataset JSON whose images' file names are the case ids "
                                        "(default: image_id is the case id).")
    dataset: str | None = opt(None, check=Text(),
                              help="COCO results: the dataset they are of; model answers: the dataset of rows that "
                                   "name none (default: the images store's only one).")
    answers: str | None = opt(None, check=Text(), metavar="FORMAT",
                              help="SOURCE is a model's answers, one JSON object a line ({case_id, finding, text} or "
                                   "{query_id, text}): read the boxes in their text in this model's format "
                                   "(chexagent, maira-2); needs --images.")
    answers_frame: str = opt("original", check=Choice(FRAMES),
                             help="Model answers: the frame the model saw, the case's original image or a square copy "
                                  "of it (the images store's); a format that crops to a square undoes its crop on the "
                                  "original frame only.")
    grid: int | None = opt(None, check=Int(1, 1024),
                           help="Boxes, points and masks: cells per side of the written maps [default: 64 for boxes "
                                "and points; for masks each dataset's grid in --gt, else 224].")
    require_phrases: bool = opt(False, check=Flag(),
                                help="Refuse a dataset whose source holds no phrase rows (by default it is written "
                                     "with phrases_unsupported, so it scores with null phrase metrics).")
    phrases_reason: str | None = opt(None, check=Text(), metavar="TEXT",
                                     help="The reason recorded as phrases_unsupported for a dataset whose source holds "
                                          "no phrase rows and gives no reason of its own [default: \"the converted "
                                          "source holds no phrase rows\"].")
    quiet: bool = opt(False, check=Flag(), short="-q", help="No progress bar and no summary line.")
    as_json: bool = opt(False, check=Flag(), flag="--json", help="Print the result as JSON on stdout.")


@command(on_interrupt=NOT_WRITTEN_HINT)
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click_options(ConvertOptions)
@budget_options
def convert_cmd(source: Path, max_memory: str, timeout: float, **params) -> None:
    """Build a submission.zarr from SOURCE: one HDF5 file, a folder of per-case .npz files, boxes
    and points in a .json file (COCO results, or a marks JSON; needs --images), masks (COCO results
    with segmentations, or a folder of PNG masks with masks.json; needs --images), or a generative
    model's answers in a .jsonl file, its own boxes read from its text (--answers FORMAT; needs --images).

    The layouts, phrase rows included, are described in docs/how-to/convert.md (and the README, "Converting
    existing outputs"). A dataset whose source holds no phrase rows is declared phrases_unsupported
    (--require-phrases refuses it instead). Nothing outside SOURCE is read: links, external HDF5
    storage and virtual datasets are refused. The store is written under a hidden name and renamed
    to OUT only once it is complete and valid; Ctrl-C, SIGTERM or a refusal leaves nothing behind.

    \b
    Examples:
      xbench-convert outputs.h5 --out submission.zarr
      xbench-convert npz_outputs/ --out submission.zarr --gt gt.zarr
      xbench-convert detections.json --images images.zarr --mapping categories.toml --out boxes.zarr
      xbench-convert png_masks/ --images images.zarr --gt gt.zarr --out masks.zarr
      xbench-convert answers.jsonl --answers chexagent --images images.zarr --out chexagent.zarr
    """
    from xbench.schemas.convert import convert_hdf5, convert_npz_dir, terminate_as_interrupt
    from xbench.schemas.convert_masks import convert_json, convert_masks

    apply_budget("xbench-convert", max_memory, timeout)
    o = parse(ConvertOptions, params)
    out, gt_path, cases_per_block, map_dtype, grid = o.out, o.gt_path, o.cases_per_block, o.map_dtype, o.grid
    images, mapping, coco_images, dataset, quiet, as_json = o.images, o.mapping, o.coco_images, o.dataset, o.quiet, \
        o.as_json
    require_phrases, phrases_reason = o.require_phrases, o.phrases_reason
    if gt_path is not None:
        _require(gt_path, "ground-truth", "--gt")
    kind = source_kind(source, o.answers)
    if kind == "answers":
        return _convert_answers(source, o)
    if o.answers_frame != "original":
        raise UserError("--answers-frame: only for a model's answers (--answers FORMAT)")
    masks = kind == "masks"
    marks = kind in ("json", "masks")
    given = [o for o, v in (("--images", images), ("--mapping", mapping), ("--coco-images", coco_images),
                            ("--dataset", dataset)) if v is not None]
    if marks and images is None:
        raise UserError(f"{source}: {'masks' if masks else 'boxes and points'} need --images images.zarr (each "
                        "case's original size)")
    if not marks and (given or grid is not None):
        raise UserError(f"{', '.join(given) or '--grid'}: only for boxes and points (a .json SOURCE) or masks (a "
                        f"folder with masks.json); {source} is not one")
    if images is not None:
        _require(images, "images", "--images")
    if phrases_reason is not None and not phrases_reason.strip():
        raise click.BadParameter("give a reason (a few words)", param_hint="--phrases-reason")
    map_dtype = map_dtype or ("float32" if marks else "float16")
    bar = progress(None, desc="convert", unit="case", enabled=not (quiet or as_json))
    phrases = {"require_phrases": require_phrases, "phrases_reason": phrases_reason}
    try:
        with terminate_as_interrupt():
            if masks:
                convert_masks(source, out, images=images, mapping=mapping, coco_images=coco_images, dataset=dataset,
                              grid=grid, cases_per_block=cases_per_block, map_dtype=map_dtype, progress=bar.update,
                              total=bar.set_total, gt=gt_path, **phrases)
            elif marks:
                convert_json(source, out, images=images, mapping=mapping, coco_images=coco_images, dataset=dataset,
                              grid=grid, cases_per_block=cases_per_block, map_dtype=map_dtype, progress=bar.update,
                              total=bar.set_total, gt=gt_path, **phrases)
            else:
                convert = convert_npz_dir if kind == "npz" else convert_hdf5
                convert(source, out, cases_per_block=cases_per_block, map_dtype=map_dtype, progress=bar.update,
                        total=bar.set_total, gt=gt_path, **phrases)
    finally:
        bar.close()
    if as_json:
        click.echo(json.dumps({"ok": True, "out": str(out)}, indent=2))
    elif not quiet:
        click.echo(f"wrote {out}")


def _convert_answers(source: Path, o: ConvertOptions) -> None:
    """``xbench-convert answers.jsonl --answers FORMAT``: a model's answers, its boxes read from its text."""
    from xbench.schemas.convert import terminate_as_interrupt
    from xbench.schemas.convert_answers import convert_answers

    if o.answers is None:
        raise UserError(f"{source}: a .jsonl SOURCE is a model's answers; name their format with --answers "
                        "(chexagent, maira-2)")
    if o.images is None:
        raise UserError(f"{source}: model answers need --images images.zarr (each case's original size)")
    if o.coco_images is not None:
        raise UserError("--coco-images: only for COCO results; model answers name their cases themselves")
    if o.gt_path is not None:
        _require(o.gt_path, "ground-truth", "--gt")
    _require(o.images, "images", "--images")
    if o.phrases_reason is not None and not o.phrases_reason.strip():
        raise click.BadParameter("give a reason (a few words)", param_hint="--phrases-reason")
    bar = progress(None, desc="convert", unit="case", enabled=not (o.quiet or o.as_json))
    try:
        with terminate_as_interrupt():
            _, notes = convert_answers(source, o.out, images=o.images, answers=o.answers, frame=o.answers_frame,
                                       mapping=o.mapping, dataset=o.dataset, grid=o.grid,
                                       cases_per_block=o.cases_per_block, map_dtype=o.map_dtype or "float32",
                                       progress=bar.update, total=bar.set_total, gt=o.gt_path,
                                       require_phrases=o.require_phrases, phrases_reason=o.phrases_reason)
    finally:
        bar.close()
    if o.as_json:
        click.echo(json.dumps({"ok": True, "out": str(o.out), "answers": notes.as_dict()}, indent=2))
    elif not o.quiet:
        click.echo(f"wrote {o.out}: {notes.summary()}")


def validate_main(argv: list[str] | None = None) -> None:
    validate_cmd.run_program(argv, "xbench-validate")  # no teardown when run as a program: nothing left to write


def convert_main(argv: list[str] | None = None) -> None:
    convert_cmd.main(argv, prog_name="xbench-convert")
