"""``xbench human``: the human ceiling of a dataset, its radiologists (or the phantom's simulated readers)
scored like a model (docs/how-to/human.md).

The command joins the two sides, so it lives in the umbrella: :mod:`xbench.extract.human` reads each reader's
annotations and writes them as a submission (and, for VinDr-CXR, the other readers as its ground truth);
:func:`xbench.score.run` scores it like any model; :mod:`xbench.score.sections.human.ceiling` turns
the readers' pairs into the ceiling and :mod:`xbench.score.sections.human.reading` writes the readers' readings. The
output folder is described in :mod:`xbench.extract.human`.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, apply_budget, budget_options, command
from xbench.schemas.options import Choice, Flag, Int, Text, click_options, opt, parse, resamples, seed_opt
from xbench.schemas.errors import escape_text
from xbench.extract.human import DATASETS as READER_DATASETS


@dataclass(kw_only=True)
class HumanOptions:
    """What ``xbench human DATASET`` takes besides DATASET (the fields are its options)."""

    root: Path | None = opt(None, check=Text(click.Path(exists=True, file_okay=False, path_type=Path)),
                            help='The dataset as downloaded (the folder given to xbench-prepare); only read. '
                                 'Required for chexlocalize, vindr_cxr and reflacx; the phantom has none.')
    images: Path = opt(check=Text(click.Path(exists=True, path_type=Path)), required=True,
                       help="images.zarr of the same split (each case's original size and the case list).")
    gt_path: Path | None = opt(None, check=Text(click.Path(exists=True, path_type=Path)), flag='--gt',
                               help='gt.zarr: required for chexlocalize and phantom (the readers are scored '
                                    'against it); for vindr_cxr and reflacx only its evaluation grid is used '
                                    '(default 224x224).')
    out: Path = opt(check=Text(click.Path(path_type=Path)), required=True,
                    help='Output folder: human.json and, per reader, its submission, ground truth and scores.')
    split: str | None = opt(None, check=Choice(('train', 'test')),
                            help='vindr_cxr: the split whose readers are compared [default: train, the one read'
                                 ' by 3 readers]. chexlocalize: the human benchmark exists for test only.')
    rule: str = opt('union', check=Choice(('union', 'majority')),
                    help="vindr_cxr, reflacx: how the other readers' boxes (ellipses) make a reader's ground "
                         "truth.")
    certainty: int | None = opt(None, check=Int(1, 5),
                                help='reflacx: the lowest certainty (1-5) at which a reading counts a finding '
                                     'present and keeps its ellipse [default: 3, Possibly, as the reader].')
    source: str = opt('segmentations', check=Choice(('segmentations', 'annotations')),
                      help='chexlocalize: hb_segmentations_test.json (RLE masks) or hb_annotations_test.json '
                           '(polygons).')
    readers: int | None = opt(None, check=Int(1, 16),
                              help='phantom: how many simulated readers re-read every case [default: 3]; each '
                                   "is drawn from the phantom's seed by the reader model of docs/how-to/human.md.")
    bootstrap: int = resamples(help='Bootstrap resamples for the 95% intervals.')
    seed: int = seed_opt(help='Bootstrap seed.')
    quiet: bool = opt(False, check=Flag(), short='-q', help='Print nothing but errors.')
    as_json: bool = opt(False, check=Flag(), flag='--json', help='Print the ceiling (human.json) on stdout.')


@command("human", on_interrupt=NOT_WRITTEN_HINT)
@click.argument("dataset", type=click.Choice(list(READER_DATASETS)))
@click_options(HumanOptions)
@budget_options
def human(dataset, max_memory, timeout, **params):
    """Score the dataset's own radiologists like a model: the human ceiling.

    Each reader's annotations become a submission (binary masks on the evaluation grid) and are scored with
    Dice and IoU at the same thresholds as any model; the pointing game is, for CheXlocalize, the reader's
    salient points' (its hit rate: a hit when any point lies in the truth, a miss without a point), elsewhere
    the peak of the reader's own map by the scorer's rule (a reader scored as a model hits alike). human.json
    also carries CheXlocalize's own eval.py values (mIoU with true_pos_only True and False, hit rate, their
    bootstrap), at the images' full resolution for CheXlocalize's masks. CheXlocalize: the human benchmark
    (hb_*_test.json) against the ground truth. VinDr-CXR train:
    each reader against the other readers of the same image (--rule), averaged over readers. Phantom:
    --readers simulated readers (jittered, sometimes missed, sometimes false marks), each against the
    ground truth, averaged over readers. REFLACX phases 1-2: each reading's ellipses (--certainty) against
    the other readings of the same image (--rule), averaged over readings.

    \b
    Examples:
      xbench human chexlocalize --root CheXlocalize/ --images images.zarr --gt gt.zarr --out human/
      xbench human vindr_cxr --root vindr/ --split train --images images_train.zarr --out human_vindr/
      xbench human reflacx --root reflacx/ --images images.zarr --gt gt.zarr --out human_reflacx/
      xbench human phantom --images data/images.zarr --gt data/gt.zarr --out human_phantom/ --readers 3
      xbench-score sub.zarr --gt gt.zarr --out results/ --human human/
    """
    o = parse(HumanOptions, params)
    (root, images, gt_path, out, split, rule, source, readers, bootstrap, seed, quiet, as_json) = (
        o.root, o.images, o.gt_path, o.out, o.split, o.rule, o.source, o.readers, o.bootstrap, o.seed, o.quiet,
        o.as_json)
    certainty = o.certainty
    apply_budget("xbench human", max_memory, timeout)
    if dataset == "chexlocalize" and split not in (None, "test"):
        raise UserError("--split: CheXlocalize's human benchmark exists for the test split only")
    if dataset == "vindr_cxr" and split == "test":
        raise UserError("--split test: VinDr-CXR's test labels are one consensus, with no reader to compare; use train")
    if dataset == "phantom" and (root is not None or split is not None):
        raise UserError("--root, --split: the phantom has no download; its split and seed are the images store's")
    if dataset != "phantom" and root is None:
        raise UserError(f"--root: required for {dataset} (the folder given to xbench-prepare)")
    if dataset == "reflacx" and split is not None:
        raise UserError("--split: REFLACX's readers are those of phases 1 and 2 (five readings an image), whatever "
                        "the split; the images store decides the images")
    if dataset != "reflacx" and certainty is not None:
        raise UserError("--certainty: only REFLACX's readings carry a certainty")
    if dataset != "phantom" and readers is not None:
        raise UserError("--readers: only the phantom's readers are simulated; the other datasets' are in their files")
    from xbench.schemas.paths import output_problems

    problems = output_problems(out, {"the dataset root": root, "the --images store": images,
                                     "the ground truth": gt_path})
    if problems:  # the output folder is replaced as a whole: never an input, inside one, or holding one
        raise UserError(problems)
    lines = []
    say = (lambda s: None) if (quiet or as_json) else (lambda s: click.echo(escape_text(s), err=True))
    doc = run_human(dataset, root, images, gt_path, out, split=split, rule=rule, source=source, bootstrap=bootstrap,
                    seed=seed, readers=3 if readers is None else readers,
                    certainty=3 if certainty is None else certainty, say=say)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    elif not quiet:
        s = doc["datasets"][dataset]["summary"]
        shown = ", ".join(f"{k} {100 * v:.2f}" for k, v in s.items() if isinstance(v, float))
        lines.append(f"human ceiling of {dataset} ({len(doc['datasets'][dataset]['readers'])} reader(s)) -> {out}/")
        lines.append(f"  summary (%): {shown}")
        chex = doc["datasets"][dataset].get("chexlocalize") or {}
        if dataset == "chexlocalize" and chex.get("average"):
            avg = chex["average"]
            got = ", ".join(f"{k} {100 * avg[k]['value']:.2f}" for k in ("miou_true_pos_only", "miou_all", "hit_rate")
                            if isinstance(avg.get(k, {}).get("value"), float))
            lines.append(f"  CheXlocalize eval.py ({chex.get('resolution')} resolution, mean over classes, %): {got}")
        click.echo("\n".join(escape_text(x) for x in lines))
    return 0


def run_human(dataset: str, root: Path, images: Path, gt: Path | None, out: Path, *, split: str | None = None,
              rule: str = "union", source: str = "segmentations", bootstrap: int = 1000, seed: int = 0,
              readers: int = 3, certainty: int = 3, say: Callable[[str], None] = lambda s: None) -> dict:
    """Make each reader's submission, score it, and write the ceiling; returns human.json's content."""
    import numpy as np

    from xbench.extract.human import POINT_READERS, read_readers, reading_rows, write_submission, write_truth
    from xbench.schemas.paths import PublishedDir
    from xbench.score.sections.human.ceiling import (KEYS, ReaderReading, ceiling, ceiling_json, chexlocalize_block,
                                            reader_pairs, with_hits)
    from xbench.score.sections.human.reading import HUMAN_FILE, HUMAN_SCHEMA, NATIVE_READING_FILE, READING_FILE, save_reading
    from xbench.score.entry import run
    from xbench.score.metrics.registry import CORE_KEYS
    from xbench.score.options import ScoreOptions
    from xbench.score.outputs.folder import write_into

    got = read_readers(dataset, root, images, gt, split=split, rule=rule, source=source, readers=readers,
                       certainty=certainty)
    reading, sizes, classes, grid, info = got.reading, got.sizes, got.classes, got.grid, got.info
    native = ReaderReading(**got.native_rows) if got.native_rows is not None else None
    for note in reading.notes:
        say(note)
    per_reader, own, readings = {}, {}, {}
    with PublishedDir(out) as work:
        for r in sorted(reading.cases):
            folder = work / "readers" / r
            folder.mkdir(parents=True)
            cases = reading.cases[r]
            if reading.truth is not None:
                truth_path = folder / "gt.zarr"
                write_truth(truth_path, dataset, cases, classes, reading.truth[r], sizes, grid, rule)
            else:
                truth_path = gt
            sub = folder / "submission.zarr"
            write_submission(sub, dataset, r, cases, classes, reading.marks.get(r, {}), sizes, grid, info)
            # scored like any model (the one entry point), in memory: the files go into this reader's folder
            options = ScoreOptions(gt_path=str(truth_path), out_dir=None, bootstrap=bootstrap, seed=seed,
                                   datasets=(dataset,), allow_missing=reading.truth is None, quiet=True)
            [scored] = run(options, [sub], labels=[f"human {r}"])
            result = scored.result
            write_into(result, folder, formats=("xbench",), label=scored.label)
            rows = reading_rows(cases, classes, reading.marks.get(r, {}), sizes, grid, got.truth_of(r),
                                 points_rule=dataset in POINT_READERS)
            readings[r] = ReaderReading(**rows, cases=np.asarray(sorted(cases), dtype=str))
            save_reading(folder / READING_FILE, readings[r])
            if native is not None:
                save_reading(folder / NATIVE_READING_FILE, native)
            # the ceiling's pointing game is the reader's own points' (the reading), not the map's maximum
            per_reader[r] = with_hits(reader_pairs(result.counts[dataset]), readings[r])
            summary = result.metrics["datasets"][dataset]["summary"]
            # each reader's own scores, recognition included (a reader's score is 1 where they marked the finding)
            own[r] = {"n_cases": len(cases), **{k: summary.get(k) for k in (*KEYS, *CORE_KEYS["recognition"])
                                                   if k in summary}}
            say(f"reader {r}: {len(cases)} case(s) scored")
        h, _ = ceiling(per_reader, classes=classes, bootstrap=bootstrap, seed=seed)
        doc = {"xbench": {"kind": "human-ceiling", "schema": HUMAN_SCHEMA, **info,
                          "bootstrap": {"n_resamples": int(bootstrap), "seed": int(seed), "method": "percentile",
                                        "level": 0.95, "resampling": "cases (the union of the readers' cases)"}},
               "datasets": {dataset: {**ceiling_json(h), "per_reader": own,
                                      "chexlocalize": chexlocalize_block(
                                          {"hb": native} if native is not None else readings, classes=classes,
                                          bootstrap=bootstrap, seed=seed,
                                          resolution="native" if native is not None else "grid")}}}
        (work / HUMAN_FILE).write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return doc
