"""``xbench perturb``: round 2 of the faithfulness flow (contract § Faithfulness, docs/how-to/faithfulness.md).

The organiser runs it on a team's round-1 submission: each case's image is deleted, inserted or ROAD-imputed
step by step in the order of the team's own map, and written as a public images store (every image under an
opaque id) with a private key beside it. The team scores the store with its own model (``xbench-extract
--scores-only``) and hands back the scores; ``xbench-score --faithfulness ... --key ...`` turns them into curves.
Weights never leave the team. Scorer-side only: numpy and scipy, no torch.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, apply_budget, budget_options, command, progress, require_kind
from xbench.schemas.options import MAX_CASES, MAX_CURVE_STEPS, MAX_SEED, Choice, Flag, Float, Int, Text, click_options, opt, parse
from xbench.schemas.errors import escape_text

EXAMPLES = """\b
Examples:
  xbench perturb sub.zarr --images images.zarr --out round2.zarr --key private/round2.key.npz --steps 8
  xbench perturb sub.zarr --images images.zarr --gt gt.zarr --out round2.zarr --key private/road.key.npz --curve road --steps 5
"""


def _csv(text: str | None) -> tuple[str, ...] | None:
    return tuple(t.strip() for t in text.split(",") if t.strip()) if text else None


@dataclass(kw_only=True)
class PerturbOptions:
    """What ``xbench perturb SUBMISSION`` takes besides SUBMISSION (the fields are its options)."""

    images_path: Path = opt(check=Text(click.Path(path_type=Path)), flag='--images', required=True,
                            help='The images store the submission was extracted from (only read).')
    out_path: Path = opt(check=Text(click.Path(path_type=Path)), flag='--out', required=True,
                         help='The round-2 images store to write (public: give it to the team). Must not exist.')
    key_path: Path | None = opt(None, check=Text(click.Path(path_type=Path)), flag='--key',
                                help='The private key to write (required; not inside OUT nor any input). Keep '
                                     'it apart from OUT; never hand it out.')
    curves: str = opt('deletion,insertion', check=Text(), flag='--curve', metavar='CURVE[,CURVE...]',
                      help='deletion, insertion and/or road (comma-separated).')
    steps: int = opt(10, check=Int(1, MAX_CURVE_STEPS),
                     help='K: images 0..K per curve and order (ROAD: 0..K-1), step k changing floor(k*G*G/K) '
                          'cells.')
    grid: int = opt(16, check=Int(1, 256),
                    help='G: the map is resized to G x G cells and the image changes cell by cell.')
    gt_path: Path | None = opt(None, check=Text(click.Path(path_type=Path)), flag='--gt',
                               help='Ground truth: perturb only the positive pairs (label 1). Default: every '
                                    'case and supported class.')
    classes: str | None = opt(None, check=Text(), metavar='NAME[,NAME...]', help='Only these classes.')
    datasets: str | None = opt(None, check=Text(), metavar='KEY[,KEY...]',
                               help='Only these datasets (default: all in both stores).')
    limit: int | None = opt(None, check=Int(1, MAX_CASES), help='Only the first N cases of each dataset.')
    seed: int = opt(0, check=Int(0, MAX_SEED),
                    help="Seed of the random-order baseline and of ROAD's noise (ids are drawn from a secret "
                         'salt instead).')
    road_noise: float = opt(2.55, check=Float(0, 255),
                            help='Standard deviation, in grey levels, of the noise ROAD adds to imputed pixels '
                                 "(the authors' 0.01 of the range).")
    insertion_substrate: str = opt('blur', check=Choice(('blur', 'grey')),
                                   help="What insertion starts from: RISE's Gaussian blur of the image (kernel "
                                        "11, sigma 5, as Petsiuk et al.) or the image's mean grey everywhere.")
    max_images: int = opt(40000, check=Int(1, 40000),
                          help='Refuse (exit 2) a run that would write more round-2 images than this.')
    quiet: bool = opt(False, check=Flag(), short='-q', help='Print nothing but errors.')
    as_json: bool = opt(False, check=Flag(), flag='--json', help='Print the summary as JSON on stdout.')


@command("perturb", epilog=EXAMPLES, on_interrupt=NOT_WRITTEN_HINT)
@click.argument("submission", type=click.Path(path_type=Path))
@click_options(PerturbOptions)
@budget_options
def perturb(submission, max_memory, timeout, **params):
    """Write round 2 of the faithfulness flow: SUBMISSION's images perturbed in the order of its own maps.

    OUT (public) holds one image per (case, class, curve, order, step) under an opaque id; the key (private)
    says which is which. The team runs its model on OUT and returns a scores-only submission, scored with
    xbench-score --faithfulness ROUND2_SUBMISSION --key KEY.
    """
    o = parse(PerturbOptions, params)
    (images_path, out_path, key_path, curves, steps, grid, gt_path, classes, datasets, limit, seed, road_noise,
         insertion_substrate, max_images, quiet, as_json) = (
        o.images_path, o.out_path, o.key_path, o.curves, o.steps, o.grid, o.gt_path, o.classes, o.datasets, o.limit,
        o.seed, o.road_noise, o.insertion_substrate, o.max_images, o.quiet, o.as_json)
    apply_budget("xbench perturb", max_memory, timeout)
    from xbench.schemas import read_images, read_submission, validate_images, validate_submission
    from xbench.schemas.paths import output_problems
    from xbench.schemas.perturb import Round2Options, key_problems, make_round2

    if key_path is None:
        raise UserError("--key: required: the path of the private key (a file kept apart from the public --out store, "
                        "e.g. in a folder the team never sees)", "nothing was written")
    require_kind(submission, "submission", "SUBMISSION", swap_with="--images")
    require_kind(images_path, "images", "--images")
    inputs = {"the submission": submission, "the images store": images_path, "the ground truth": gt_path}
    problems = [str(p) for p in output_problems(out_path, inputs)]
    problems += [escape_text(p) for p in key_problems(key_path, out_path, inputs)]
    if str(out_path).endswith(".zip"):
        problems.append(f"--out {escape_text(str(out_path))}: round 2 is written as a folder store (*.zarr); zip it afterwards if needed")
    if os.path.lexists(out_path):
        problems.append(f"--out {escape_text(str(out_path))}: exists; choose a new name (round 2 is never overwritten: its key would no longer match)")
    if os.path.lexists(key_path):
        problems.append(f"--key {escape_text(str(key_path))}: exists; choose a new name")
    if problems:
        raise UserError(problems, "nothing was written")
    problems = [str(p) for p in validate_images(images_path)] + [str(p) for p in validate_submission(submission)]
    gt = None
    if gt_path is not None:
        require_kind(gt_path, "ground-truth", "--gt")
        from xbench.schemas import read_ground_truth, validate_ground_truth

        problems += [str(p) for p in validate_ground_truth(gt_path)]
    if problems:
        raise UserError(problems, "nothing was written")
    if gt_path is not None:
        gt = read_ground_truth(gt_path)
    opts = Round2Options(curves=_csv(curves) or (), steps=steps, grid=grid, seed=seed, road_noise=road_noise,
                         insertion_substrate=insertion_substrate, classes=_csv(classes), datasets=_csv(datasets), limit=limit, max_images=max_images)
    images = read_images(images_path)
    say = None if (quiet or as_json) else (lambda line: click.echo(escape_text(line), err=True))
    from xbench.schemas.round2_cost import announcer

    announce = announcer(images_path, images, opts.datasets, limit, say)
    bar = progress(desc="round 2", unit="image", enabled=not (quiet or as_json))

    def on_total(n: int) -> None:  # before the first image is written: the cost, then the bar
        announce(n)
        bar.set_total(n)

    try:
        summary = make_round2(read_submission(submission), images, out_path, key_path, opts, gt=gt,
                              progress=bar.update, on_total=on_total)
    finally:
        bar.close()
    if as_json:
        click.echo(json.dumps({"ok": True, **summary}, indent=2))
    elif not quiet:
        pairs = sum(d["pairs"] for d in summary["datasets"].values())
        click.echo(escape_text(f"wrote {out_path} ({summary['images']} images for {pairs} pairs; curves "
                               f"{', '.join(summary['curves'])}, {steps} steps, {grid}x{grid} cells) and the key {key_path} "
                               "(private: keep it)"))


def main(argv: list[str] | None = None) -> None:
    perturb.run_program(argv, "xbench perturb")
