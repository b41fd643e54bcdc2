"""``xbench perturb``: round 2 of the faithfulness flow (contract § Faithfulness, docs/faithfulness.md).

The organiser runs it on a team's round-1 submission: each case's image is deleted, inserted or ROAD-imputed
step by step in the order of the team's own map, and written as a public images store (every image under an
opaque id) with a private key beside it. The team scores the store with its own model (``xbench-extract
--scores-only``) and hands back the scores; ``xbench-score --faithfulness ... --key ...`` turns them into curves.
Weights never leave the team. Scorer-side only: numpy and scipy, no torch.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import click

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, apply_budget, budget_options, command, progress, require_kind
from xbench.schemas.errors import escape_text

EXAMPLES = """\b
Examples:
  xbench perturb sub.zarr --images images.zarr --out round2.zarr --key private/round2.key.npz --steps 8
  xbench perturb sub.zarr --images images.zarr --gt gt.zarr --out round2.zarr --key private/road.key.npz --curve road --steps 5
"""


def _csv(text: str | None) -> tuple[str, ...] | None:
    return tuple(t.strip() for t in text.split(",") if t.strip()) if text else None


@command("perturb", epilog=EXAMPLES, on_interrupt=NOT_WRITTEN_HINT)
@click.argument("submission", type=click.Path(path_type=Path))
@click.option("--images", "images_path", required=True, type=click.Path(path_type=Path),
              help="The images store the submission was extracted from (only read).")
@click.option("--out", "out_path", required=True, type=click.Path(path_type=Path),
              help="The round-2 images store to write (public: give it to the team). Must not exist.")
@click.option("--key", "key_path", type=click.Path(path_type=Path), default=None,
              help="The private key to write (required; not inside OUT nor any input). Keep it apart from OUT; never hand it out.")
@click.option("--curve", "curves", default="deletion,insertion", show_default=True, metavar="CURVE[,CURVE...]",
              help="deletion, insertion and/or road (comma-separated).")
@click.option("--steps", type=click.IntRange(1), default=10, show_default=True,
              help="K: images 0..K per curve and order (ROAD: 0..K-1), step k changing floor(k*G*G/K) cells.")
@click.option("--grid", type=click.IntRange(1, 256), default=16, show_default=True,
              help="G: the map is resized to G x G cells and the image changes cell by cell.")
@click.option("--gt", "gt_path", type=click.Path(path_type=Path), default=None,
              help="Ground truth: perturb only the positive pairs (label 1). Default: every case and supported class.")
@click.option("--classes", default=None, metavar="NAME[,NAME...]", help="Only these classes.")
@click.option("--datasets", default=None, metavar="KEY[,KEY...]", help="Only these datasets (default: all in both stores).")
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the first N cases of each dataset.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True,
              help="Seed of the random-order baseline and of ROAD's noise (ids are drawn from a secret salt instead).")
@click.option("--road-noise", type=float, default=2.55, show_default=True,
              help="Standard deviation, in grey levels, of the noise ROAD adds to imputed pixels (the authors' 0.01 of the range).")
@click.option("--insertion-substrate", type=click.Choice(["blur", "grey"]), default="blur", show_default=True,
              help="What insertion starts from: RISE's Gaussian blur of the image (kernel 11, sigma 5, as Petsiuk et al.) "
                   "or the image's mean grey everywhere.")
@click.option("--max-images", type=click.IntRange(1, 40_000), default=40_000, show_default=True,
              help="Refuse (exit 2) a run that would write more round-2 images than this.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@budget_options
def perturb(submission, images_path, out_path, key_path, curves, steps, grid, gt_path, classes, datasets, limit, seed,
            road_noise, insertion_substrate, max_images, quiet, as_json, max_memory, timeout):
    """Write round 2 of the faithfulness flow: SUBMISSION's images perturbed in the order of its own maps.

    OUT (public) holds one image per (case, class, curve, order, step) under an opaque id; the key (private)
    says which is which. The team runs its model on OUT and returns a scores-only submission, scored with
    xbench-score --faithfulness ROUND2_SUBMISSION --key KEY.
    """
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
