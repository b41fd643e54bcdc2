"""``xbench show``: one case and class of a submission drawn over its image, as one PNG.

The panel shows what the scorer sees: the raw map stretched over the whole image (min-max
normalised, with a colour bar), the ground-truth region outlined, and the pointing-game peak,
the centroid of the highest cells of the map resized to the evaluation grid (the scorer's own resize), marked
with a white cross. The caption says whether the peak is a hit.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, apply_budget, budget_options, command, require_kind
from xbench.schemas.options import Flag, Text, click_options, opt, parse
from xbench.score.report._stores import store_problems  # noqa: F401  (part of this module's interface)

__all__ = ["pointing_peak", "show_case", "show", "store_problems"]


def pointing_peak(saliency: np.ndarray, grid: tuple[int, int]) -> tuple[int, int] | None:
    """(row, col) on the grid of the pointing-game peak of the map resized as the scorer does, None for a
    constant map (score/report/overlays.py's, which the report's overlays mark too)."""
    from xbench.score.report.overlays import pointing_peak as peak

    return peak(saliency, grid)


def _numbers(text: str) -> tuple[int, ...]:
    import re

    return tuple(int(d) for d in re.findall(r"\d+", text))


def _digits_normalised(text: str) -> str:
    """``phantom-test-00006`` -> ``phantom-test-6``: the same id however many leading zeros it was typed with."""
    import re

    return re.sub(r"\d+", lambda m: str(int(m.group())), text.casefold())


def _suggest(value: str, names) -> str:
    """"; did you mean a, b?" with the closest names, or "" when none is close. First the names equal once
    leading zeros and case are ignored, then those holding the same numbers, then difflib's closest (issue 35:
    difflib alone offered 000096, 000086, 000076 for 00006, whose digits it reads as letters)."""
    import difflib

    names = [str(n) for n in names]
    key, numbers = _digits_normalised(value), _numbers(value)
    close = [n for n in names if _digits_normalised(n) == key]
    close += [n for n in names if numbers and _numbers(n) == numbers]
    close += difflib.get_close_matches(value, names, n=3, cutoff=0.6)
    close = list(dict.fromkeys(close))[:3]
    return f"; did you mean {', '.join(close)}?" if close else ""


def _find(names, value: str, what: str, where: str) -> int:
    names = [str(n) for n in names]
    if value not in names:
        raise UserError(f"{what} {value!r} is not in {where}{_suggest(value, names)}")
    return names.index(value)


def show_case(submission, gt, images, case_id: str, cls: str, out, *, dataset: str | None = None) -> dict:
    """Draw one (case, class) overlay into ``out`` (a .png path, written atomically); returns what was drawn."""
    from matplotlib.figure import Figure

    from xbench.schemas import read_ground_truth, read_images, read_submission

    from xbench.score.report.figures import plain, save_figure
    from xbench.score.report.overlays import draw_panel

    from xbench.schemas.errors import InputError
    from xbench.schemas.paths import is_remote

    for path, kind in ((images, "images"), (gt, "ground-truth"), (submission, "submission")):
        if not is_remote(path):  # a remote store is held to the same limits by its reader
            problems = store_problems(path, kind)
            if problems:
                raise InputError(problems)
    img_store, gt_store, sub = read_images(images), read_ground_truth(gt), read_submission(submission)
    if dataset is None:
        having = [d for d, ds in gt_store.datasets.items() if case_id in {str(c) for c in ds.case_id}]
        if not having:
            every = [str(c) for ds in gt_store.datasets.values() for c in ds.case_id]
            raise UserError(f"case {case_id!r} is in no dataset of {gt}{_suggest(case_id, every)}")
        if len(having) > 1:
            raise UserError(f"case {case_id!r} is in several datasets ({', '.join(having)}); pick one with --dataset")
        dataset = having[0]
    for store, name in ((img_store, images), (gt_store, gt), (sub, submission)):
        if dataset not in store.datasets:
            raise UserError(f"dataset {dataset!r} is not in {name}")
    g, im_ds, s_ds = gt_store.datasets[dataset], img_store.datasets[dataset], sub.datasets[dataset]
    gi = _find(g.case_id, case_id, "case", f"{gt} ({dataset})")
    gc = _find(g.classes, cls, "class", f"{gt} ({dataset}); its classes: {', '.join(g.classes)}")
    smap = np.asarray(s_ds.saliency[_find(s_ds.case_id, case_id, "case", str(submission)),
                                    _find(s_ds.classes, cls, "class", str(submission))])
    image = np.asarray(im_ds.image[_find(im_ds.case_id, case_id, "case", str(images))])
    region = {(int(i), int(c)): k for k, (i, c) in enumerate(np.asarray(g.region_index))}.get((gi, gc))
    grid = tuple(int(v) for v in g.grid) if getattr(g, "grid", None) is not None else None
    mask = np.asarray(g.region_mask[region]).astype(bool) if region is not None else None
    grid = mask.shape if mask is not None else grid
    peak = pointing_peak(smap, grid) if grid is not None else None
    hit = (peak is not None and bool(mask[peak])) if mask is not None else None  # a constant map: no peak, a miss
    label = int(np.asarray(g.labels)[gi, gc])

    fig = Figure(figsize=(5.2, 4.6), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    artist = draw_panel(ax, image, smap, mask, peak=False if peak is None else peak)
    fig.colorbar(artist, ax=ax, shrink=0.8, label="saliency (min-max normalised)")
    verdict = "no region" if mask is None else ("pointing game: hit" if hit else "pointing game: miss")
    model = sub.attrs.get("model", Path(str(submission)).name)
    ax.set_title(plain(f"{model} · {dataset} · {case_id}\n{cls} (label {label}) · {verdict}"), fontsize=10)
    out = Path(out)
    stem = out.with_suffix("") if out.suffix.lower() == ".png" else out
    files = save_figure(fig, stem, dpi=120, formats=("png",))
    return {"file": str(files[0]), "dataset": dataset, "case_id": case_id, "class": cls, "label": label,
            "peak": list(peak) if peak is not None else None, "hit": hit, "has_region": mask is not None}


@dataclass(kw_only=True)
class ShowOptions:
    """What ``xbench show SUBMISSION`` takes besides SUBMISSION (the fields are its options)."""

    gt_path: Path = opt(check=Text(click.Path(path_type=Path)), flag='--gt', required=True,
                        help='gt.zarr (the region outline).')
    images_path: Path = opt(check=Text(click.Path(path_type=Path)), flag='--images', required=True,
                            help='images.zarr (the picture).')
    case_id: str = opt(check=Text(), flag='--case', required=True, help='Case id.')
    cls: str = opt(check=Text(), flag='--class', required=True, help='Class name, as in the ground truth.')
    dataset: str | None = opt(None, check=Text(), help='Dataset key (default: the one dataset holding the case).')
    out: Path | None = opt(None, check=Text(click.Path(path_type=Path)),
                           help='PNG to write (default: show_<case>_<class>.png).')
    quiet: bool = opt(False, check=Flag(), short='-q', help='Print nothing.')
    as_json: bool = opt(False, check=Flag(), flag='--json', help='Print what was drawn (peak, hit, file) as JSON.')


@command("show", on_interrupt=NOT_WRITTEN_HINT)
@click.argument("submission", type=click.Path(path_type=Path))
@click_options(ShowOptions)
@budget_options
def show(submission, max_memory, timeout, **params):
    """Draw one case and class of SUBMISSION over its image: map, region outline, pointing-game peak.

    \b
    Example (the phantom set: xbench-prepare phantom --out data; a dog map: xbench-extract --model dog
    --images data/images.zarr --out dog.zarr; case 6 has a nodule with a region):
      xbench show dog.zarr --gt data/gt.zarr --images data/images.zarr --case phantom-test-000006 --class Nodule
    """
    o = parse(ShowOptions, params)
    (gt_path, images_path, case_id, cls, dataset, out, quiet, as_json) = (
        o.gt_path, o.images_path, o.case_id, o.cls, o.dataset, o.out, o.quiet, o.as_json)
    import json
    import re

    from xbench.schemas.errors import escape_text

    apply_budget("xbench show", max_memory, timeout)  # three stores from outside

    require_kind(submission, "submission", "SUBMISSION", swap_with="--gt")
    require_kind(gt_path, "ground-truth", "--gt")
    require_kind(images_path, "images", "--images")
    if out is None:  # a file name from data: keep it to safe characters
        out = Path(re.sub(r"[^A-Za-z0-9._-]+", "_", f"show_{case_id}_{cls}") + ".png")
    info = show_case(submission, gt_path, images_path, case_id, cls, out, dataset=dataset)
    if as_json:
        click.echo(json.dumps(info, indent=2))
    elif not quiet:
        verdict = "no region" if not info["has_region"] else ("hit" if info["hit"] else "miss")
        click.echo(escape_text(f"wrote {info['file']} ({info['dataset']} {case_id}, {cls}: {verdict})"))
