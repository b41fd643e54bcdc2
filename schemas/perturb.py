"""Round 2 of the faithfulness flow: a public images store of perturbed images and the organiser's private key.

:func:`make_round2` reads a round-1 submission (its maps) and the images store it was made from, and writes

- ``out`` (images store, images minor 5): one dataset group per dataset, every perturbed image under an opaque
  id, the rows in a secret random order, the dataset's classes as in the original store (the model scores every
  class, as in round 1); the root attribute ``xbench.faithfulness`` says only the curves, steps and grid;
- ``key`` (``.npz``, private): which id is which (dataset, case, class, curve, order, step).

Images that are the same for many rows are written once: each case's unperturbed image (step 0 of deletion
and ROAD, the last step of insertion) and its all-fill image (the last step of deletion, step 0 of insertion).
Ids are drawn from a secret salt, not from ``seed``: the seed fixes the random orders and ROAD's noise (a
rerun is the same experiment) but must not let anyone recompute which id is which.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from xbench.schemas import faithfulness as F
from xbench.schemas.errors import InputError, InputLimitError, Problem

ORIG, FILL, BASE = "original", "fill", "substrate"


@dataclass(frozen=True)
class Round2Options:
    curves: tuple[str, ...] = ("deletion", "insertion")
    steps: int = F.DEFAULT_STEPS
    grid: int = F.DEFAULT_GRID
    seed: int = 0
    road_noise: float = F.DEFAULT_ROAD_NOISE
    insertion_substrate: str = F.DEFAULT_SUBSTRATE   # what insertion starts from: RISE's blur or the fill grey
    classes: tuple[str, ...] | None = None   # only these classes (default: every class the model supports)
    datasets: tuple[str, ...] | None = None
    limit: int | None = None                  # only the first N cases of each dataset
    max_images: int = F.MAX_ROUND2_IMAGES

    def check(self) -> list[Problem]:
        p = []
        bad = [c for c in self.curves if c not in F.CURVES]
        if bad or not self.curves:
            p.append(Problem("--curve", f"must name some of {', '.join(F.CURVES)}; got {', '.join(bad) or 'none'}"))
        if len(set(self.curves)) != len(self.curves):
            p.append(Problem("--curve", "names a curve twice"))
        if not 1 <= self.grid <= 256:
            p.append(Problem("--grid", "must be in 1..256"))
        if not 1 <= self.steps <= self.grid * self.grid:
            p.append(Problem("--steps", f"must be in 1..{self.grid * self.grid} (the cells of a {self.grid}x{self.grid} grid: "
                                        "each step changes at least one cell)"))
        if "road" in self.curves and self.steps < 2:
            p.append(Problem("--steps", "ROAD needs at least 2 steps (its curve stops one step before every pixel is removed)"))
        if self.insertion_substrate not in F.SUBSTRATES:
            p.append(Problem("--insertion-substrate", f"must be one of {', '.join(F.SUBSTRATES)}"))
        if not (self.road_noise >= 0 and np.isfinite(self.road_noise)):
            p.append(Problem("--road-noise", "must be a finite number >= 0"))
        return p


def key_problems(key: str | os.PathLike, out: str | os.PathLike, inputs: dict, *, flag: str = "--key",
                 out_flag: str = "--out") -> list[str]:
    """Why the private key may not be written at ``key``, one line per problem: it may be neither the public
    round-2 store ``out`` nor inside it (it would be handed out with it) nor hold it, nor equal to, inside or
    holding an input (``inputs``: {what: path}, e.g. the images store). Symbolic links are followed."""
    from xbench.schemas.paths import is_remote

    def real(p) -> Path:
        return Path(os.path.realpath(os.path.abspath(os.fspath(p))))

    k = real(key)
    problems = []
    for what, path in {f"the public round-2 store ({out_flag} {out})": out, **inputs}.items():
        if path is None or is_remote(path):
            continue
        src = real(path)
        public = path is out
        if k == src:
            problems.append(f"{flag} {key}: is {what}; the key must be a file of its own"
                            + (", kept apart from the store the team receives" if public else ""))
        elif src in k.parents:
            problems.append(f"{flag} {key}: is inside {what}; "
                            + ("the key would be handed out with it: keep it outside" if public
                               else "nothing may be written into an input"))
        elif k in src.parents:
            problems.append(f"{flag} {key}: holds {what}; the key is a file, choose another path")
    if not problems and os.path.lexists(key):  # never replaced: a file of the user's, or the key of another round 2
        problems.append(f"{flag} {key}: exists; a key is written only to a new path (a file there is the user's, or "
                        "the key of another round 2, which would lose its pairing): choose a new path")
    return problems


@dataclass
class _Pair:
    row: int          # the case's row in the images store (and of the submission, aligned)
    case: str
    cls: str
    col: int          # the class's column in the submission


def select_pairs(ids: np.ndarray, classes: Sequence[str], unsupported: Sequence[str], labels: np.ndarray | None,
                 gt_classes: Sequence[str] | None, opts: Round2Options) -> list[_Pair]:
    """The (case, class) pairs that get curves: with a ground truth, the positive pairs (label 1) of the classes
    it shares with the submission; otherwise every case with every class the model supports; in both cases only
    ``opts.classes`` when given, and only the first ``opts.limit`` cases."""
    n = len(ids) if opts.limit is None else min(len(ids), opts.limit)
    wanted = [c for c in classes if c not in unsupported and (opts.classes is None or c in opts.classes)]
    col = {c: j for j, c in enumerate(classes)}
    out = []
    if labels is not None:
        gcol = {c: j for j, c in enumerate(gt_classes)}
        wanted = [c for c in wanted if c in gcol]
        for i in range(n):
            out += [_Pair(i, str(ids[i]), c, col[c]) for c in wanted if labels[i, gcol[c]] == 1]
    else:
        for i in range(n):
            out += [_Pair(i, str(ids[i]), c, col[c]) for c in wanted]
    return out


def images_per_pair(curves: Sequence[str], steps: int) -> int:
    """Round-2 images one pair adds besides its case's shared ones (:func:`shared_per_case`): the inner steps of
    each order."""
    return sum(len(F.ORDERS[c]) * (len(F.curve_steps(c, steps)) - 1 - (c != "road")) for c in curves)


def shared_per_case(curves: Sequence[str], substrate: str) -> int:
    """Round-2 images each case writes once, whatever its pairs: the unperturbed image; the all-fill image when a
    curve uses it (deletion's last step, insertion's first from the grey substrate); the blurred image when
    insertion starts from RISE's blur. (Until 2026-11 the all-fill image was written for ROAD alone too, which no
    key row named, so a ROAD-only round 2 could not be scored.)"""
    insertion = "insertion" in curves
    return 1 + int("deletion" in curves or (insertion and substrate == "grey")) + int(insertion and substrate == "blur")


def _opaque_ids(n: int) -> list[str]:
    salt = secrets.token_bytes(16)
    return ["r2-" + hashlib.sha256(salt + i.to_bytes(8, "little")).hexdigest()[:24] for i in range(n)]


def _plan_round2(submission, images, gt, opts: Round2Options) -> dict:
    """{dataset: (pairs, the submission's rows of the cases)} for round 2, or InputError with every problem."""
    names = list(opts.datasets) if opts.datasets else sorted(set(images.datasets) & set(submission.datasets))
    plan, problems = {}, []
    for name in names:
        if name not in images.datasets or name not in submission.datasets:
            problems.append(Problem(name, "is not in both the images store and the submission"))
            continue
        ds, sub = images.datasets[name], submission.datasets[name]
        if getattr(sub, "saliency", None) is None:
            problems.append(Problem(name, "the submission holds no maps (scores only); round 2 needs round 1's maps"))
            continue
        row_of = {c: i for i, c in enumerate(sub.case_id.tolist())}
        case_ids = ds.case_id[: opts.limit].tolist()  # the cases that get curves (--limit: the first N)
        missing = [c for c in case_ids if c not in row_of]
        if missing:
            problems.append(Problem(name, f"{len(missing)} case(s) of the images store are not in the submission, e.g. {missing[0]!r}"))
            continue
        if opts.classes:
            unknown = [c for c in opts.classes if c not in sub.classes]
            if unknown:
                problems.append(Problem("--classes", f"{', '.join(unknown)} not among the classes of {name}"))
                continue
        labels = gt_classes = None
        if gt is not None:
            if name not in gt.datasets:
                problems.append(Problem(name, "is not in the ground truth given with --gt"))
                continue
            g = gt.datasets[name]
            gt_row = {c: i for i, c in enumerate(g.case_id.tolist())}
            absent = [c for c in case_ids if c not in gt_row]
            if absent:
                problems.append(Problem(name, f"{len(absent)} case(s) of the images store are not in the ground truth, e.g. {absent[0]!r}"))
                continue
            labels = np.asarray(g.labels)[[gt_row[c] for c in case_ids]]
            gt_classes = list(g.classes)
        pairs = select_pairs(np.asarray(case_ids), sub.classes, sub.unsupported, labels, gt_classes, opts)
        plan[name] = (pairs, np.array([row_of[c] for c in case_ids], dtype=np.int64))
    if problems:
        raise InputError(problems)
    return plan


def make_round2(submission, images, out: str | os.PathLike, key_path: str | os.PathLike, opts: Round2Options, *,
                gt=None, progress: Callable[[int], None] | None = None, on_total: Callable[[int], None] | None = None) -> dict:
    """Write the round-2 store ``out`` and its key ``key_path`` (see the module docstring); returns a summary.

    ``submission``, ``images`` and ``gt`` are opened stores (:func:`read_submission`, :func:`read_images`,
    :func:`read_ground_truth`), already validated. Nothing is written when an input is refused; the store is
    built beside ``out`` and renamed into place, then the key is written."""
    from xbench.schemas.paths import swap_in, work_dir
    from xbench.schemas.store import consolidate, open_store_group

    problems = opts.check()
    if problems:
        raise InputError(problems)
    plan = _plan_round2(submission, images, gt, opts)
    cases = sum(len({p.row for p in pairs}) for pairs, _ in plan.values())
    n_pairs = sum(len(pairs) for pairs, _ in plan.values())
    total = shared_per_case(opts.curves, opts.insertion_substrate) * cases + n_pairs * images_per_pair(opts.curves, opts.steps)
    if n_pairs == 0:
        raise InputError([Problem("round 2", "no (case, class) pair to perturb (no positive pair, or --classes/--limit left none)")])
    if total > opts.max_images:
        raise InputLimitError([Problem("round 2", f"{n_pairs} pairs x {opts.steps} steps x the orders of {', '.join(opts.curves)} "
                                                  f"make {total} images; the limit is {opts.max_images} (fewer --steps, "
                                                  "--classes, --limit or --datasets)")])
    if on_total:
        on_total(total)

    out = Path(out)
    built = work_dir(out)
    key_tmp = None
    try:
        store = built / out.name
        header = {"kind": F.KEY_KIND, "schema": 1, "curves": list(opts.curves), "steps": opts.steps, "grid": opts.grid,
                  "seed": opts.seed, "road_noise": opts.road_noise, "store": out.name,
                  "submission_model": str(submission.attrs.get("model", "")), "datasets": sorted(plan)}
        if "insertion" in opts.curves:
            header["insertion_substrate"] = opts.insertion_substrate
        if "road" in opts.curves:  # whose labels are known: ROAD's accuracy needs them
            header["pairs"] = "positive" if gt is not None else "all"
        columns = {k: [] for k in F.KEY_COLUMNS}
        for name, (pairs, sub_rows) in plan.items():
            _write_dataset(store, name, images.datasets[name], submission.datasets[name], pairs, sub_rows, opts,
                           columns, progress)
        root = open_store_group(store, mode="r+")
        root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": max(F.IMAGES_MINOR, int(root.attrs["xbench"].get("schema_minor", 0))),
                                "faithfulness": {"round": 2, "curves": list(opts.curves), "steps": opts.steps, "grid": opts.grid}}
        consolidate(store)
        key = F.Key(header, *(np.asarray(columns[k], dtype=str if t == "U" else np.int64) for k, t in F.KEY_COLUMNS.items()))
        # the key first, under a hidden name beside its place: a key that cannot be written leaves no public store
        key_path = Path(key_path)
        key_tmp = key_path.with_name(f".{key_path.name}.xbench-new-{os.getpid()}")
        F.write_key(key_tmp, key)
        os.rename(store, built / "store-done")
        swap_in(built / "store-done", out)
        try:
            os.replace(key_tmp, key_path)
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)  # the store without its key is no round 2
            raise
    finally:
        shutil.rmtree(built, ignore_errors=True)
        if key_tmp is not None and key_tmp.exists():
            key_tmp.unlink()
    return {"out": str(out), "key": str(key_path), "datasets": {n: {"pairs": len(p), "cases": len({x.row for x in p})}
                                                                for n, (p, _) in plan.items()},
            "images": total, "curves": list(opts.curves), "steps": opts.steps, "grid": opts.grid}


def _write_dataset(store: Path, name: str, ds, sub, pairs: list[_Pair], sub_rows: np.ndarray, opts: Round2Options,
                   columns: dict, progress) -> None:
    """Every round-2 image of one dataset, case by case; each row of the (shuffled) store is one chunk, so rows
    are written in whatever order they are made."""
    from xbench.schemas.images import ImagesWriter

    by_case: dict[int, list[_Pair]] = {}
    for p in pairs:
        by_case.setdefault(p.row, []).append(p)
    n = shared_per_case(opts.curves, opts.insertion_substrate) * len(by_case) + len(pairs) * images_per_pair(opts.curves, opts.steps)
    ids = _opaque_ids(n)
    position = np.random.default_rng(int.from_bytes(secrets.token_bytes(16), "little")).permutation(n)
    writer = ImagesWriter(store, name, case_ids=[ids[k] for k in np.argsort(position)], classes=ds.classes,
                          image_size=int(ds.image.shape[1]), cases_per_block=1, attrs={})
    size = int(ds.image.shape[1])
    cells = F.cell_index(size, opts.grid)
    counts = F.step_cells(opts.grid * opts.grid, opts.steps)
    made = 0

    def put(image: np.ndarray, orig_size) -> str:
        nonlocal made
        pos = int(position[made])
        writer.write_block(pos, image[None], np.asarray(orig_size, dtype=np.int64)[None])
        made += 1
        if progress:
            progress(1)
        return ids[made - 1]

    def record(rid, p, curve, order, step):
        for k, v in zip(F.KEY_COLUMNS, (rid, name, p.case, p.cls, curve, order, step)):
            columns[k].append(v)

    for row in sorted(by_case):
        image = np.asarray(ds.image[row], dtype=np.uint8)
        osize = ds.orig_size[row]
        shared = {ORIG: put(image, osize)}
        if "deletion" in opts.curves or ("insertion" in opts.curves and opts.insertion_substrate == "grey"):
            shared[FILL] = put(np.full_like(image, F.fill_value(image)), osize)
        base = None
        if "insertion" in opts.curves:
            base = F.substrate_image(image, opts.insertion_substrate)
            shared[BASE] = put(base, osize) if opts.insertion_substrate == "blur" else shared[FILL]
        maps = np.asarray(sub.saliency[int(sub_rows[row])], dtype=np.float64)  # the case's maps, read once
        for p in by_case[row]:
            raw = maps[p.col]
            for curve in opts.curves:
                for order_name, order in F.orders_for(curve, raw, opts.grid, opts.seed, name, p.case, p.cls).items():
                    for step in F.curve_steps(curve, opts.steps):
                        if step == 0:
                            rid = shared[BASE if curve == "insertion" else ORIG]
                        elif step == opts.steps:  # deletion and insertion only: every cell changed
                            rid = shared[ORIG if curve == "insertion" else FILL]
                        else:
                            mask = F.changed_mask(order, int(counts[step]), cells)
                            rng = np.random.default_rng(F.seed_of(opts.seed, name, p.case, p.cls, curve, order_name, step))
                            rid = put(F.perturbed_image(image, curve, mask, noise=opts.road_noise, rng=rng, base=base), osize)
                        record(rid, p, curve, order_name, step)
    writer.finish()
