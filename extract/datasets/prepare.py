"""Shared preparation: any :class:`~.base.DatasetReader` -> ``images.zarr`` + ``gt.zarr``.

:func:`prepare_dataset` reads the reader's records (annotations only), checks them, then decodes,
resizes and rasterises the cases block by block in a pool of worker processes and writes

* ``OUT/images.zarr/<dataset>``: every image stretched to S x S with PIL's antialiased bilinear
  filter (``Image.resize(..., Resampling.BILINEAR)``: a triangle filter whose support widens with
  the reduction factor, so downsizing averages like an area filter and never aliases), through
  :class:`xbench.schemas.ImagesWriter`, one block of ``cases_per_block`` cases at a time;
* ``OUT/gt.zarr/<dataset>``: labels from the native annotations and each region rasterised onto
  the grid by :func:`.rasterise.rasterise_region`, through :func:`xbench.schemas.write_ground_truth`
  once at the end;
* with ``keep_original`` (``xbench-prepare --keep-original``), also every image as the reader gave
  it, before any resize (``orig_offset``/``orig_pixels``, schemas/README.md), so that a model's
  official preprocessing can run on the original pixels. Those are appended in case order, so
  blocks are then collected in order (``imap``) instead of as they finish.

Several datasets share one pair of stores as groups; preparing one again replaces only its group.

Resuming. Each finished block's labels and region rasters go to a side file
``OUT/.xbench-prepare/<dataset>/block-NNNNN.npz`` (written atomically, then the image block is
written). A run that crashes or is killed resumes, when started again with the same options, with
the blocks not yet done; a finished run removes the side folder. Changing any option that alters
the output (cases, grid, image size, reader options) starts again from scratch.

Bad input policy (every problem is one line naming the file and row, or the case):

* fatal, the run stops at once with exit status 2: the reader raises
  :class:`~.base.ReaderError` (e.g. an annotation file is missing) or reports a ``fatal`` problem;
* the case is skipped: whatever the reader reports as a non-fatal problem (an annotation naming an
  unknown image, an unknown label, a malformed RLE, ...) and whatever prepare finds itself:
  a duplicate case id; a label for a class the dataset does not have, or a value other than
  -1/0/1; a region for a class not labelled 1; a malformed shape (non-finite or inverted box,
  polygon with fewer than 2 points, a mask of the wrong size or one that cannot be decoded); a
  region with no area in the image (a box wholly outside it, an all-zero mask); an image that
  cannot be read, is not 2-D uint8, or whose size differs from the annotations' ``orig_size``.
  A box partly outside the image is clipped to it and counted (``n_clipped_boxes``), not skipped.
* Skipped cases are listed in both stores' dataset attributes as ``skipped`` =
  ``[{case_id, source, reason}, ...]`` and in the :class:`PrepareSummary`. When more than
  ``max_skip_fraction`` of the cases are skipped the run fails (:class:`TooManySkippedError`,
  exit 2) *before* the ground truth is written; the images group stays visibly unfinished, and
  running again with a higher ``--max-skip-fraction`` finishes without decoding anything again.

A region is never silently wrong: a case whose annotations cannot be rasterised exactly by the
documented rule is skipped, never written with an empty or guessed mask.

Workers are forked (``multiprocessing`` "fork" context), so readers need not be picklable (a
:class:`~.base.Mask` may hold a lambda). Where fork is unavailable the work runs in-process.
"""
from __future__ import annotations

from xbench.schemas.errors import InputError

import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from xbench.extract.options import PrepareOptions
from xbench.extract.datasets._io import is_inside
from xbench.extract.datasets.base import Box, CaseRecord, DatasetReader, Polygon
from xbench.extract.datasets.rasterise import RASTERISATION, ShapeError, clip_box, rasterise_region

__all__ = [
    "PrepareError",
    "PrepareSummary",
    "TooManySkippedError",
    "prepare_dataset",
    "resize_image",
    "RESAMPLING",
]

RESAMPLING = "PIL Image.resize, Resampling.BILINEAR (antialiased triangle filter)"
WORK_DIR = ".xbench-prepare"


class PrepareError(InputError):
    """Bad input that stops the run (exit status 2). ``problems`` holds one line per problem."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(list(problems), message)


class TooManySkippedError(PrepareError):
    """More cases were skipped than ``max_skip_fraction`` allows; carries the summary so far."""

    def __init__(self, message: str, summary: "PrepareSummary") -> None:
        super().__init__(message, [f"{s['source'] or s['case_id']}: {s['reason']}" for s in summary.skipped])
        self.summary = summary


@dataclass
class PrepareSummary:
    """What a run did. ``skipped`` entries are ``{case_id, source, reason}``."""

    dataset: str
    split: str
    n_listed: int = 0
    n_written: int = 0
    n_regions: int = 0
    n_fallback_regions: int = 0  # lesions that kept only their centroid cell (name kept for JSON readers)
    n_clipped_boxes: int = 0
    n_resumed_blocks: int = 0
    skipped: list[dict] = field(default_factory=list)
    images: str = ""
    gt: str = ""
    seconds: float = 0.0

    @property
    def n_skipped(self) -> int:
        return len({(s["case_id"], s["source"]) if s["case_id"] is None else s["case_id"] for s in self.skipped})

    def to_dict(self) -> dict:
        return {**asdict(self), "n_skipped": self.n_skipped}


def resize_image(image: np.ndarray, size: int) -> np.ndarray:
    """Stretch a (h, w) uint8 image to (size, size) uint8 with the documented filter."""
    from PIL import Image

    if image.shape == (size, size):
        return np.ascontiguousarray(image)
    return np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.BILINEAR))


# ----------------------------------------------------------------------------------------------
# checks that need no pixels


def _skip(record_or_id, source: str, reason: str) -> dict:
    cid = record_or_id.case_id if isinstance(record_or_id, CaseRecord) else record_or_id
    return {"case_id": cid, "source": source, "reason": reason}


def _annotation_problem(rec: CaseRecord, classes: Sequence[str], grounding: set[str]) -> str | None:
    """Why ``rec`` must be skipped before decoding, or None. Boxes are checked when the size is known."""
    for cls, val in rec.labels.items():
        if cls not in classes:
            return f"unknown label {cls!r} (this dataset's classes: {', '.join(classes)})"
        if val not in (-1, 0, 1):
            return f"label {cls!r} has value {val!r}; expected 1, 0 or -1"
    for k, ph in enumerate(rec.phrases):
        if ph.category not in classes:
            return f"phrase {k} has unknown category {ph.category!r}"
        if not ph.shapes or not ph.text.strip():
            return f"phrase {k} has no text or no shapes"
    for cls, shapes in rec.regions.items():
        if cls not in classes:
            return f"region for unknown class {cls!r}"
        if cls not in grounding:
            return f"region for {cls!r}, which this dataset uses for recognition only"
        if rec.labels.get(cls, -1) != 1:
            return f"region for {cls!r}, which is labelled {rec.labels.get(cls, -1)} (a region needs label 1)"
        if not shapes:
            return f"region for {cls!r} has no shapes"
        if rec.orig_size is not None:
            why = _geometry_problem(cls, shapes, rec.orig_size)
            if why:
                return why
    return None


def _geometry_problem(cls: str, shapes, orig_size) -> str | None:
    """Box and polygon checks that are pure geometry (masks are checked by the workers)."""
    try:
        boxes = [s for s in shapes if isinstance(s, Box)]
        others = [s for s in shapes if not isinstance(s, Box)]
        if boxes and not others and all(clip_box(b, orig_size) is None for b in boxes):
            b = boxes[0]
            return f"{cls}: box ({b.x0}, {b.y0}, {b.x1}, {b.y1}) lies wholly outside the {orig_size[1]}x{orig_size[0]} image"
        for p in others:
            if isinstance(p, Polygon) and len(p.points) < 2:
                return f"{cls}: polygon with {len(p.points)} point(s)"
    except ShapeError as exc:
        return f"{cls}: {exc}"
    return None


# ----------------------------------------------------------------------------------------------
# per-case work (runs in the workers)

_JOB: dict = {}  # set in the parent before forking: reader, records, classes, grid, image size


@dataclass
class _CaseResult:
    image: np.ndarray | None
    orig_size: tuple[int, int]
    original: np.ndarray | None
    labels: np.ndarray
    regions: list[tuple[int, np.ndarray]]  # (class column, grid mask)
    n_fallback: int = 0
    n_clipped: int = 0
    failure: str | None = None
    phrases: list[np.ndarray] = field(default_factory=list)  # grid mask of each phrase of the record


def _process_case(reader: DatasetReader, rec: CaseRecord, classes, grid, size, keep: bool = False) -> _CaseResult:
    labels = np.array([rec.labels.get(c, -1) for c in classes], dtype=np.int8)
    if isinstance(rec.image_ref, (str, os.PathLike)) and not is_inside(rec.image_ref, reader.source_roots()):
        return _CaseResult(None, (1, 1), None, labels, [], failure=(
            f"the image {rec.image_ref} is a link to {os.path.realpath(rec.image_ref)}, outside the dataset root; "
            "nothing is read outside the given folders (allow its folder with --allow-links-to DIR)"))
    try:
        image = reader.load_image(rec)
    except Exception as exc:  # one unreadable image must not stop the others
        why = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"  # ours say it in words
        return _CaseResult(None, (1, 1), None, labels, [], failure=f"cannot read image ({why})")
    image = np.asarray(image)
    if image.ndim != 2 or image.dtype != np.uint8 or image.size == 0:
        return _CaseResult(None, (1, 1), None, labels, [], failure=f"reader gave a {image.dtype} image of shape {image.shape}; expected 2-D uint8")
    orig = (int(image.shape[0]), int(image.shape[1]))
    if rec.orig_size is not None and tuple(int(v) for v in rec.orig_size) != orig:
        return _CaseResult(None, orig, None, labels, [], failure=f"annotations are for a {rec.orig_size[1]}x{rec.orig_size[0]} image but the image is {orig[1]}x{orig[0]}")
    regions, n_fallback, n_clipped = [], 0, 0
    for cls, shapes in rec.regions.items():
        try:
            raster = rasterise_region(shapes, orig, grid)
        except Exception as exc:  # ShapeError, or a Mask.load that fails (malformed RLE, ...)
            return _CaseResult(None, orig, None, labels, [], failure=f"{cls}: malformed region ({type(exc).__name__}: {exc})")
        if raster is None:
            return _CaseResult(None, orig, None, labels, [], failure=f"{cls}: the region has no area inside the {orig[1]}x{orig[0]} image")
        n_clipped += sum(1 for s in shapes if isinstance(s, Box) and clip_box(s, orig) != s)
        n_fallback += raster.fallback
        regions.append((classes.index(cls), raster.mask))
    regions.sort(key=lambda r: r[0])
    phrases = []
    for k, ph in enumerate(rec.phrases):  # each phrase's region is the union of its own boxes
        try:
            raster = rasterise_region(list(ph.shapes), orig, grid)
        except Exception as exc:
            return _CaseResult(None, orig, None, labels, [], failure=f"phrase {k}: malformed region ({type(exc).__name__}: {exc})")
        if raster is None:
            return _CaseResult(None, orig, None, labels, [], failure=f"phrase {k}: the region has no area inside the {orig[1]}x{orig[0]} image")
        n_clipped += sum(1 for s in ph.shapes if isinstance(s, Box) and clip_box(s, orig) != s)
        n_fallback += raster.fallback
        phrases.append(raster.mask)
    return _CaseResult(resize_image(image, size), orig, image if keep else None, labels, regions, n_fallback, n_clipped,
                       phrases=phrases)


def _process_block(task: tuple[int, int, int]) -> tuple[int, dict]:
    """Process rows [start, stop) of the job; returns (block, arrays for the side file + images)."""
    block, start, stop = task
    j = _JOB
    results = [_process_case(j["reader"], j["records"][r], j["classes"], j["grid"], j["size"], j["keep"])
               for r in range(start, stop)]
    packed = _pack_block(results, start, j["grid"], j["size"])
    if j["keep"]:  # a failed case keeps a 1 x 1 black original, matching its orig_size (1, 1)
        packed["originals"] = [r.original if r.failure is None else np.zeros((1, 1), np.uint8) for r in results]
    return block, packed


def _pack_block(results: list[_CaseResult], start: int, grid, size) -> dict:
    n = len(results)
    images = np.zeros((n, size, size), dtype=np.uint8)
    rows, cols, masks, failed_rows, failed_reason, phrase_masks = [], [], [], [], [], []
    for k, res in enumerate(results):
        if res.failure is not None:
            failed_rows.append(start + k)
            failed_reason.append(res.failure)
            continue
        images[k] = res.image
        for col, m in res.regions:
            rows.append(start + k)
            cols.append(col)
            masks.append(m)
        phrase_masks += res.phrases
    mask_arr = np.stack(masks) if masks else np.zeros((0, *grid), dtype=bool)
    phrase_arr = np.stack(phrase_masks) if phrase_masks else np.zeros((0, *grid), dtype=bool)
    return {
        "images": images,
        "orig_size": np.array([r.orig_size if r.failure is None else (1, 1) for r in results], dtype=np.int32).reshape(n, 2),
        "labels": np.stack([r.labels for r in results]),
        "region_row": np.array(rows, dtype=np.int32),
        "region_col": np.array(cols, dtype=np.int32),
        "region_bits": np.packbits(mask_arr.reshape(len(mask_arr), grid[0] * grid[1]), axis=1),  # a block may have none
        "phrase_bits": np.packbits(phrase_arr.reshape(len(phrase_arr), grid[0] * grid[1]), axis=1),
        "failed_row": np.array(failed_rows, dtype=np.int32),
        "failed_reason": np.array(failed_reason, dtype=str),
        "counts": np.array([sum(r.n_fallback for r in results), sum(r.n_clipped for r in results)], dtype=np.int64),
    }


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops the pool: no traceback from every worker."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_blocks(tasks: list[tuple[int, int, int]], workers: int, ordered: bool = False,
                guard: "_DeferredInterrupt | None" = None) -> Iterator[tuple[int, dict]]:
    """Yield (block, result) as blocks finish (in task order if ``ordered``), forked workers when ``workers > 1``.

    The pool is built inside ``guard.critical()``: a Ctrl-C halfway through ``Pool()`` (workers forked, its
    threads started, no finaliser yet) would leave a pool that nothing stops, whose maintenance thread forks
    new workers while the interpreter exits; orphans that keep the terminal's pipes open. Once built it is
    always stopped here, however the iteration ends: when every block is done, closed (each worker reads the
    end of the queue and leaves); otherwise (an error, Ctrl-C) terminated. Terminating after a normal end could
    hang: a SIGTERM that reaches a worker still starting up (the blocks of a small set finish before every
    worker is running) is dropped by CPython's after-fork reset of pending signals, and the worker then waits
    on the queue while ``terminate`` joins it for ever."""
    if workers > 1 and len(tasks) > 1 and "fork" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("fork")
        pool, done = None, False
        try:
            with guard.critical() if guard is not None else contextlib.nullcontext():
                pool = ctx.Pool(min(workers, len(tasks)), initializer=_ignore_sigint)
            run = pool.imap if ordered else pool.imap_unordered
            yield from run(_process_block, tasks, chunksize=1)
            done = True
        finally:
            if pool is not None:
                with guard.critical() if guard is not None else contextlib.nullcontext():  # a second Ctrl-C waits
                    if done:
                        pool.close()  # no signal to lose: the workers finish the (empty) queue and exit
                    else:
                        pool.terminate()
                    pool.join()
    else:
        for t in tasks:
            yield _process_block(t)


# ----------------------------------------------------------------------------------------------
# side files


def _atomic_savez(path: Path, arrays: dict) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _block_file(work: Path, block: int) -> Path:
    return work / f"block-{block:05d}.npz"


def _plan_digest(plan: dict) -> str:
    return hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()


def _open_work_dir(work: Path, digest: str) -> bool:
    """Keep the side files of an earlier run of the same plan; otherwise start empty.

    Returns True when the folder starts empty (nothing to resume).
    """
    marker = work / "plan.sha256"
    if work.exists() and marker.exists() and marker.read_text().strip() == digest:
        return False
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    marker.write_text(digest + "\n")
    return True



class _DeferredInterrupt:
    """Ctrl-C that waits for the end of a write to the stores (the parent process only).

    Zarr writes a block from its own event-loop thread while the caller waits; a KeyboardInterrupt raised
    in the caller during that wait leaves the loop's tasks running, and the interpreter's exit then closes
    the loop and its executor under them ("Task was destroyed but it is pending", "cannot schedule new
    futures after shutdown" on stderr). Inside :meth:`critical` a SIGINT is only remembered and raised
    when the write is complete; elsewhere (waiting for the workers, reading annotations) it is raised at
    once. Installed only in the main thread, and only over Python's own Ctrl-C handler.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.pending = False
        self._previous = None

    def _handler(self, signum, frame) -> None:
        if self.depth:
            self.pending = True
            return
        raise KeyboardInterrupt

    def __enter__(self) -> "_DeferredInterrupt":
        import signal
        import threading

        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    @contextlib.contextmanager
    def critical(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        if not self.depth and self.pending:
            self.pending = False
            raise KeyboardInterrupt


# ----------------------------------------------------------------------------------------------
# the driver
_DEFAULTS = PrepareOptions()  # the defaults are xbench-prepare's (extract/options.py)



def prepare_dataset(
    reader: DatasetReader,
    out_dir: str | os.PathLike,
    *,
    grid: tuple[int, int] | int = _DEFAULTS.grid,
    image_size: int = _DEFAULTS.image_size,
    workers: int | None = _DEFAULTS.workers,
    cases_per_block: int = _DEFAULTS.cases_per_block,
    max_skip_fraction: float = _DEFAULTS.max_skip_fraction,
    progress: bool = True,
    keep_original: bool = _DEFAULTS.keep_original,
    text_probes: bool = _DEFAULTS.text_probes,
    perturb: Sequence[str] = (),
    perturb_copies: int = _DEFAULTS.perturb_copies,
    perturb_seed: int | None = None,
) -> PrepareSummary:
    """Prepare one dataset into ``out_dir/images.zarr`` and ``out_dir/gt.zarr`` (see module doc).

    Parameters
    ----------
    reader : a constructed reader (its ``key`` names the groups).
    grid : (H, W) of the evaluation grid of the ground truth (an integer: square).
    image_size : S, the side of the stored square images.
    workers : processes decoding in parallel; None means every core (``os.cpu_count()``).
    cases_per_block : cases per image block, the unit of work and of resuming.
    max_skip_fraction : the run fails when more than this fraction of the cases is skipped.
    keep_original : also store every image at its original resolution (see module doc).
    text_probes : add the text probes of every phrase row (:mod:`.text_probes`; needs phrase rows).
    perturb, perturb_copies, perturb_seed : the robustness track's perturbed copies (``--perturb``; SPECs,
        copies per SPEC and case, the key of their ids and seeds, default 0; :mod:`.perturb`).

    Returns the :class:`PrepareSummary`. Raises :class:`PrepareError` for bad input (fatal
    reader problems, every case skipped, too many skipped).
    """
    with _DeferredInterrupt() as guard:  # Ctrl-C never lands inside a write to the stores
        grid = (grid, grid) if isinstance(grid, int) else grid
        from xbench.extract.datasets.perturb import Copies

        copies = Copies.of(perturb, perturb_copies, perturb_seed)  # bad SPECs fail before any work
        return _prepare(reader, Path(out_dir), (int(grid[0]), int(grid[1])), image_size, workers, cases_per_block,
                        max_skip_fraction, progress, keep_original, guard, text_probes, copies)


def _kept_records(reader: DatasetReader, classes, grounding: set, summary: "PrepareSummary",
                  max_skip_fraction: float) -> tuple[list[CaseRecord], list[dict]]:
    """The reader's records that pass the checks without pixels (in record order, so the case list is the same
    on every run) and the skipped ones; the summary's listed count. Raises PrepareError."""
    try:
        records = list(reader.records())
    except InputError as exc:  # ReaderError, or an annotation file refused by the bounded readers
        lines = [ln for p in (exc.problems or [exc]) for ln in str(p).splitlines() if ln.strip()] or [str(exc)]
        raise PrepareError(f"{reader.key}: {lines[0]}", lines[1:]) from None
    fatal = [p for p in reader.problems if p.fatal]
    if fatal:
        raise PrepareError(f"{reader.key}: {len(fatal)} fatal problem(s) in the native files", [str(p) for p in fatal])
    skipped = [_skip(p.case_id, p.source, p.message) for p in reader.problems]

    # checks without pixels, in record order, so that the case list is the same on every run
    counts: dict[str, int] = {}
    for rec in records:
        counts[rec.case_id] = counts.get(rec.case_id, 0) + 1
    kept: list[CaseRecord] = []
    for rec in records:
        why = "duplicate case id" if counts[rec.case_id] > 1 else _annotation_problem(rec, classes, grounding)
        if why:
            skipped.append(_skip(rec, rec.source, why))
        else:
            kept.append(rec)
    summary.skipped = skipped
    # cases the reader dropped itself (e.g. an annotation naming a missing image) count as listed
    dropped = {p.case_id for p in reader.problems if p.case_id is not None and p.case_id not in counts}
    summary.n_listed = len(counts) + len(dropped) + sum(1 for p in reader.problems if p.case_id is None)
    _check_fraction(summary, max_skip_fraction)
    if not kept:
        raise PrepareError(f"{reader.key}: no case left to prepare", [f"{s['source']}: {s['reason']}" for s in skipped])
    return kept, skipped


def _plan(reader: DatasetReader, case_ids, kept, classes, grid, image_size: int, cases_per_block: int,
          keep_original: bool, text_probes: bool, copies):
    """The run's attributes, its resumable plan (keys added only when their option is used, so that the plans
    of earlier runs stay resumable), its phrase rows and text probes."""
    base_attrs = {"reader": reader.describe(), "resampling": RESAMPLING, "source_split": reader.split}
    plan = {"case_ids": case_ids, "classes": classes, "grid": grid, "size": image_size, "cpb": cases_per_block,
            "rasterisation": RASTERISATION, **base_attrs}  # blocks rasterised by another rule are not resumed
    if keep_original:  # only then, so that the plans of earlier runs stay resumable
        plan["originals"] = True
    queries = _queries(kept, classes)
    if queries is not None:  # likewise: only datasets with phrase rows
        plan["phrases"] = [f"{c}:{t}" for c, t in zip(queries.category.tolist(), queries.text.tolist())]
    probes = None
    if text_probes:  # the probe rows join the phrase rows of the images store; which is which stays private
        if queries is None:
            raise PrepareError(f"{reader.key}: --text-probes needs phrase rows, and this dataset has none"
                               + (" (phantom: add --option phrases=true)" if reader.key == "phantom" else ""))
        from xbench.extract.datasets.text_probes import add_probes

        probes = add_probes(queries, case_ids)
        plan["text_probes"] = True  # only then, so that the plans of earlier runs stay resumable
    if copies:  # likewise: only with perturbed copies
        plan["perturb"] = copies.plan()
    return base_attrs, plan, queries, probes


def _stage1(reader: DatasetReader, work: Path, images_path: Path, kept, case_ids, classes, grid, image_size: int,
            cases_per_block: int, base_attrs: dict, skipped, keep_original: bool, queries, probes, workers, progress,
            guard: "_DeferredInterrupt", summary: "PrepareSummary"):
    """Stage 1: the image blocks not yet written (and their side files), on worker processes; (writer or None
    when stage 1 was already done, the number of blocks)."""
    from xbench.schemas import ImagesWriter

    writer = None
    if not (work / "stage1.done").exists():
        with guard.critical():
            writer = ImagesWriter(images_path, reader.key, case_ids=case_ids, classes=classes, image_size=image_size,
                                  cases_per_block=cases_per_block, attrs={**base_attrs, "skipped": skipped},
                                  keep_original=keep_original, queries=queries if probes is None else probes.queries)
        n_blocks = writer.n_blocks
        todo = sorted(set(writer.blocks_todo()) | {b for b in range(n_blocks) if not _block_file(work, b).exists()})
        summary.n_resumed_blocks = n_blocks - len(todo)
        tasks = [(b, *writer.block_rows(b)) for b in todo]
        _JOB.update(reader=reader, records=kept, classes=classes, grid=grid, size=image_size, keep=keep_original)
        bar = _progress_bar(progress, len(kept), sum(b - a for _, a, b in tasks), reader.key)
        blocks = _run_blocks(tasks, workers or _n_cores(), ordered=keep_original, guard=guard)
        try:
            for block, res in blocks:  # Ctrl-C while waiting for a worker stops at once
                with guard.critical():  # a block's writes are never cut half-way (see _DeferredInterrupt)
                    images, originals = res.pop("images"), res.pop("originals", None)
                    _atomic_savez(_block_file(work, block), res)  # side file first, then the image block
                    writer.write_block(block, images, res["orig_size"], originals)
                if bar is not None:
                    bar.update(len(images))
        finally:
            blocks.close()  # the pool is stopped here, whatever ended the loop
            _JOB.clear()
            if bar is not None:
                bar.close()
    else:
        n_blocks = len(list(work.glob("block-*.npz")))
    return writer, n_blocks


def _prepare(reader: DatasetReader, out: Path, grid: tuple[int, int], image_size: int, workers: int | None,
             cases_per_block: int, max_skip_fraction: float, progress: bool, keep_original: bool,
             guard: _DeferredInterrupt, text_probes: bool = False, copies=None) -> PrepareSummary:
    from xbench.schemas import ImagesWriter, read_images, write_ground_truth
    from xbench.schemas.queries import Queries

    t0 = time.perf_counter()
    classes = list(reader.classes)
    grounding = set(reader.grounding_classes if reader.grounding_classes is not None else classes)
    summary = PrepareSummary(reader.key, reader.split, images=str(out / "images.zarr"), gt=str(out / "gt.zarr"))

    kept, skipped = _kept_records(reader, classes, grounding, summary, max_skip_fraction)

    case_ids = [r.case_id for r in kept]
    base_attrs, plan, queries, probes = _plan(reader, case_ids, kept, classes, grid, image_size, cases_per_block,
                                              keep_original, text_probes, copies)
    work = out / WORK_DIR / reader.key
    out.mkdir(parents=True, exist_ok=True)
    images_path, gt_path = out / "images.zarr", out / "gt.zarr"
    if _open_work_dir(work, _plan_digest(plan)) and (images_path / reader.key).is_dir():
        # ImagesWriter would resume an unfinished group with the same case ids even if reader
        # options (and so pixels and attributes) changed; nothing is resumable here, so drop it. Only a group of
        # an images store XBench wrote: ensure_root refuses a folder that is not one (nothing of the user's goes).
        from xbench.schemas.store import ensure_root

        if reader.key in ensure_root(images_path, "images"):
            shutil.rmtree(images_path / reader.key)

    writer, n_blocks = _stage1(reader, work, images_path, kept, case_ids, classes, grid, image_size, cases_per_block,
                               base_attrs, skipped, keep_original, queries, probes, workers, progress, guard, summary)

    # gather the side files
    parts = [dict(np.load(_block_file(work, b))) for b in range(n_blocks)]
    labels = np.concatenate([p["labels"] for p in parts])
    orig_size = np.concatenate([p["orig_size"] for p in parts])
    failed = {int(r): str(why) for p in parts for r, why in zip(p["failed_row"], p["failed_reason"])}
    summary.n_fallback_regions = int(sum(p["counts"][0] for p in parts))
    summary.n_clipped_boxes = int(sum(p["counts"][1] for p in parts))
    summary.skipped = skipped + [_skip(kept[r], kept[r].source, failed[r]) for r in sorted(failed)]
    _check_fraction(summary, max_skip_fraction)

    good = np.array([r not in failed for r in range(len(kept))], dtype=bool)
    if not good.any():
        raise PrepareError(f"{reader.key}: no case left to prepare", [f"{s['source']}: {s['reason']}" for s in summary.skipped])
    new_row = np.cumsum(good) - 1
    region_row = np.concatenate([p["region_row"] for p in parts]).astype(np.int64)
    region_col = np.concatenate([p["region_col"] for p in parts]).astype(np.int64)
    hw = grid[0] * grid[1]
    bits = np.concatenate([p["region_bits"] for p in parts]) if parts else np.zeros((0, (hw + 7) // 8), np.uint8)
    region_mask = np.unpackbits(bits, axis=1, count=hw).astype(bool).reshape(-1, *grid)
    survivors = [cid for cid, g in zip(case_ids, good) if g]
    attrs = {**base_attrs, "skipped": summary.skipped}
    # phrase rows of the surviving cases (a failed case wrote no phrase masks)
    q_survivors = q_mask = None
    if queries is not None:
        q_survivors = queries.subset(good[queries.case], new_row)
        q_bits = np.concatenate([p["phrase_bits"] for p in parts])
        q_mask = np.unpackbits(q_bits, axis=1, count=hw).astype(bool).reshape(-1, *grid)
    q_probes = None
    if probes is not None:  # every row of the surviving cases; a probe's region is its original's
        q_survivors, q_mask, q_probes = _with_probes(probes, good, new_row, queries, q_mask)

    with guard.critical():
        if writer is not None:
            writer.finish()
            (work / "stage1.done").write_text("")
    copies_done = bool(copies) and (work / "copies.done").exists()
    if failed and not copies_done:
        with guard.critical():  # one block at a time would do; the rewrite is rare and short
            _rewrite_without(images_path, reader.key, work, good, survivors, classes, image_size, cases_per_block,
                             attrs, ImagesWriter, read_images, keep_original, q_survivors)

    perturbations = None
    if copies:  # the robustness track: perturbed copies appended to the images group (extract/datasets/perturb.py)
        from xbench.extract.datasets.perturb import write_copies

        perturbations = write_copies(copies, images_path, reader.key, work, survivors, classes, image_size,
                                     cases_per_block, attrs, keep_original, q_survivors, guard, progress,
                                     query_probes=q_probes)
    gaze = _gaze(reader, [rec for rec, g in zip(kept, good) if g], grid, orig_size[good])
    attributes = reader.case_attributes([rec for rec, g in zip(kept, good) if g])  # None: none kept
    with guard.critical():
        write_ground_truth(
            gt_path, reader.key, case_ids=survivors, classes=classes, labels=labels[good],
            region_index=np.stack([new_row[region_row], region_col], axis=1).astype(np.int32).reshape(-1, 2),
            region_mask=region_mask, orig_size=orig_size[good], grid=grid,
            attrs={**attrs, "rasterisation": RASTERISATION},
            queries=None if q_survivors is None else Queries(q_survivors.id, q_survivors.case, q_survivors.category),
            query_mask=q_mask, query_probes=q_probes, perturbations=perturbations, gaze=gaze,
            attributes=attributes,
        )
    # the plan first: a kill during the removal then leaves a folder the next run discards whole, never a
    # stage1.done whose side files are partly gone
    (work / "plan.sha256").unlink(missing_ok=True)
    shutil.rmtree(work)
    _remove_if_empty(out / WORK_DIR)
    summary.n_written = len(survivors)
    summary.n_regions = int(len(region_row))
    summary.seconds = time.perf_counter() - t0
    return summary


def _rewrite_without(images_path, key, work, good, survivors, classes, image_size, cpb, attrs, ImagesWriter, read_images,
                     keep_original=False, queries=None):
    """Write the images group again without the failed rows (rare: an image failed to decode).

    The good rows (and their originals) are first copied to side files, so the complete first group
    may be replaced.
    """
    staged = work / "survivors.npy"
    if not (work / "survivors.ready").exists():
        source = read_images(images_path).datasets[key]
        arr = np.lib.format.open_memmap(staged, mode="w+", dtype=np.uint8, shape=(len(survivors), image_size, image_size))
        orig = source.orig_size[good]
        at = 0
        for a in range(0, len(good), cpb):  # one stored block at a time
            keep = good[a:a + cpb]
            if keep.any():
                arr[at:at + int(keep.sum())] = np.asarray(source.image[a:a + len(keep)])[keep]
                at += int(keep.sum())
        arr.flush()
        del arr
        np.save(work / "survivors_orig.npy", orig)
        if keep_original:
            sizes = orig[:, 0].astype(np.int64) * orig[:, 1]
            flat = np.lib.format.open_memmap(work / "survivors_pixels.npy", mode="w+", dtype=np.uint8, shape=(int(sizes.sum()),))
            at = 0
            for r in np.flatnonzero(good):
                im = source.original(int(r)).reshape(-1)
                flat[at:at + im.size] = im
                at += im.size
            flat.flush()
            del flat
        (work / "survivors.ready").write_text("")
    arr = np.load(staged, mmap_mode="r")
    orig = np.load(work / "survivors_orig.npy")
    writer = ImagesWriter(images_path, key, case_ids=survivors, classes=classes, image_size=image_size,
                          cases_per_block=cpb, attrs=attrs, keep_original=keep_original, queries=queries)
    starts = np.concatenate([[0], np.cumsum(orig[:, 0].astype(np.int64) * orig[:, 1])])
    flat = np.load(work / "survivors_pixels.npy", mmap_mode="r") if keep_original else None
    for b in writer.blocks_todo():
        a, z = writer.block_rows(b)
        originals = None if flat is None else [np.asarray(flat[starts[r]:starts[r + 1]]).reshape(orig[r]) for r in range(a, z)]
        writer.write_block(b, np.asarray(arr[a:z]), orig[a:z], originals)
    writer.finish()


def _gaze(reader: DatasetReader, records: Sequence[CaseRecord], grid, sizes):
    """The readings of a reader that records where radiologists looked (schemas/gaze.py: the reader hook
    :meth:`DatasetReader.gaze_readings`), for the prepared cases in their order, each record with its original
    size as decoded (``sizes``: a reader whose files do not state it learns it here); None for the others."""
    import dataclasses

    return reader.gaze_readings([dataclasses.replace(r, orig_size=(int(s[0]), int(s[1]))) for r, s in zip(records, sizes)],
                                grid)


def _queries(records: Sequence[CaseRecord], classes: Sequence[str]):
    """The phrase rows of ``records`` (ids ``<case id>#<k>``, k the phrase's index in its record), or None."""
    from xbench.schemas.queries import Queries

    rows = [(r, k, ph) for r, rec in enumerate(records) for k, ph in enumerate(rec.phrases)]
    if not rows:
        return None
    return Queries.of([f"{records[r].case_id}#{k}" for r, k, _ in rows], [r for r, _, _ in rows],
                      [ph.category for _, _, ph in rows], [ph.text for _, _, ph in rows])


def _with_probes(probes, good: np.ndarray, new_row: np.ndarray, queries, q_mask: np.ndarray):
    """The phrase rows with their probes of the surviving cases (``good``), their masks (``q_mask`` holds the
    surviving originals' masks, in order) and the probe mapping for the ground truth."""
    from xbench.schemas.probes import TextProbes

    keep = good[probes.queries.case]
    at = np.cumsum(good[queries.case]) - 1  # an original's row among the surviving originals
    return (probes.queries.subset(keep, new_row), q_mask[at[probes.source[keep]]],
            TextProbes(probes.of[keep], probes.kind[keep]))


def _check_fraction(summary: PrepareSummary, max_fraction: float) -> None:
    n = max(summary.n_listed, 1)
    if summary.n_skipped / n > max_fraction:
        raise TooManySkippedError(
            f"{summary.dataset}: {summary.n_skipped} of {summary.n_listed} case(s) skipped "
            f"({summary.n_skipped / n:.1%}), more than --max-skip-fraction {max_fraction:g}",
            summary,
        )


def _n_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _progress_bar(enabled: bool, total: int, todo: int, name: str):
    if not enabled:
        return None
    from xbench.schemas._cli import progress  # a bar on a terminal, a line every 30 s in a log

    return progress(total, desc=f"prepare {name}", unit="case", initial=total - todo)
