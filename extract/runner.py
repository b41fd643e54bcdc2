"""The extraction loop: images.zarr -> model adapter -> submission.zarr, resumable and multi-rank.

Per dataset, the blocks still to do (the store's ledger) are split over the ranks in contiguous
ranges; each rank reads its blocks with a DataLoader (workers), runs the adapter on micro-batches
that never span a block (so a block's values do not depend on which other blocks were still to
do: a resumed or sharded run writes the same bytes as an uninterrupted one), and writes each block
on a background thread while the next one is computed (extract/pipeline.py). Rank 0 finishes the store after a barrier. A run killed at any point
(SIGKILL included) is resumed by running the same command again.

Testing hook: with ``XBENCH_EXTRACT_KILL_AFTER_BLOCKS=n`` in the environment a rank SIGKILLs itself
after writing n blocks (used by the resume test; never set it otherwise).
"""
from __future__ import annotations

from xbench.schemas.errors import InputError

import contextlib
import functools
import os
import platform
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from xbench.schemas import DatasetSpec, InvalidStoreError, SubmissionWriter, read_images
from xbench.schemas.options import problems

from xbench.extract import distributed
from xbench.extract.models import create_adapter
from xbench.extract.noop import jsonable as _jsonable
from xbench.extract.options import ExtractOptions
from xbench.extract.models.catalog import needs_torch
from xbench.extract.tta import TTA, check_resume, resolve as resolve_tta
from xbench.extract.writer_process import ProcessStore

if TYPE_CHECKING:  # torch is imported where it is used: a model that needs none runs without it (_run_numpy)
    import torch
    from xbench.extract.pipeline import InputRing

#: the precisions a run accepts (extract/pipeline.py maps them onto torch dtypes)
PRECISIONS = ("fp32", "bf16", "fp16")


#: the options run_extraction checks itself, by their declared constraints
_CHECKED = ("batch_size", "workers", "cases_per_block", "map_dtype", "writer", "limit", "augment_seed")


class ExtractError(InputError, RuntimeError):
    """A problem with the inputs that the CLI reports as one line (no traceback)."""


class _Blocks:
    """Rows of one images dataset, one item per submission block: (block, images, orig_size).

    With an adapter's host-side ``transform`` (:class:`~.models.pixels.ImageTransform`) each case
    goes through it here, in the DataLoader workers: the original image when ``originals`` (the
    store keeps them and the transform wants them), else the stored S x S image; ``images`` is
    then the stack of its outputs. With an :class:`~.pipeline.InputRing` the images are written
    into the ring's slot for the item instead, and the item is (block, item, orig_size).

    With test-time augmentation (``tta``, extract/tta.py) a block of n cases gives V * n inputs, view-major
    (rows v * n .. v * n + n - 1 are view v), each view made from the pixels the adapter starts from
    before its transform; ``orig_size`` stays the n cases' sizes.
    """

    def __init__(self, images_path: str, dataset: str, blocks: Sequence[tuple[int, int, int]],
                 transform=None, originals: bool = False, ring: InputRing | None = None,
                 tta: TTA | None = None) -> None:
        self.images_path, self.dataset, self.blocks = str(images_path), dataset, list(blocks)
        self.transform, self.originals, self.ring = transform, bool(originals), ring
        self.tta = tta
        self._ds = None

    def __len__(self) -> int:
        return len(self.blocks)

    def _open(self):
        if self._ds is None:  # opened lazily so that each worker has its own handle
            self._ds = read_images(self.images_path).datasets[self.dataset]
        return self._ds

    def case_layout(self) -> tuple[tuple[int, ...], torch.dtype]:
        """Shape and dtype of one case's input (the first case of the first block, prepared once)."""
        _, start, _ = self.blocks[0]
        x = self._inputs(start, start + 1, np.asarray(self._open().orig_size[start:start + 1], dtype=np.int64))
        self._ds = None  # the workers open their own
        return tuple(x.shape[1:]), x.dtype

    def _inputs(self, start: int, stop: int, sizes: np.ndarray, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows start:stop as the adapter gets them, written into ``out`` when given."""
        import torch

        ds = self._open()
        if self.tta is not None:
            return self._views(ds, start, stop, sizes, out)
        if self.transform is None:
            stored = np.asarray(ds.image[start:stop])
            if out is None:
                return torch.from_numpy(np.ascontiguousarray(stored))
            out.numpy()[...] = stored
            return out
        stored = None if self.originals else np.asarray(ds.image[start:stop])
        cases = (self.transform(ds.original(r) if self.originals else stored[r - start], sizes[r - start])
                 for r in range(start, stop))  # one case at a time: originals can be large
        if out is None:
            return torch.stack(list(cases))
        for k, case in enumerate(cases):
            out[k].copy_(case)
        return out

    def _views(self, ds, start: int, stop: int, sizes: np.ndarray, out: torch.Tensor | None) -> torch.Tensor:
        """The V views of rows start:stop, view-major (class doc); one case at a time, as above."""
        import torch

        n, views = stop - start, self.tta.views
        stored = None if self.originals and self.transform is not None else np.asarray(ds.image[start:stop])
        made: list = [None] * (views * n)
        for r in range(start, stop):
            base = ds.original(r) if stored is None else stored[r - start]
            for v, img in enumerate(self.tta.view_images(base, self.dataset, str(ds.case_id[r]))):
                k = v * n + (r - start)
                case = torch.from_numpy(np.ascontiguousarray(img)) if self.transform is None \
                    else self.transform(img, sizes[r - start])
                if out is None:
                    made[k] = case
                else:
                    out[k].copy_(case)
        return torch.stack(made) if out is None else out

    def __getitem__(self, i: int):
        import torch

        b, start, stop = self.blocks[i]
        sizes = np.asarray(self._open().orig_size[start:stop], dtype=np.int64)
        if self.ring is None:
            return b, self._inputs(start, stop, sizes), torch.from_numpy(sizes)
        rows = (stop - start) * (self.tta.views if self.tta is not None else 1)
        self._inputs(start, stop, sizes, self.ring.slot_for(i)[:rows])
        return b, i, torch.from_numpy(sizes)


def pick_device(requested: str | None, local_rank: int) -> torch.device:
    import torch

    if requested:
        try:
            dev = torch.device(requested)
        except (RuntimeError, TypeError, ValueError):
            raise ExtractError(f"--device {str(requested)[:40]!r} is not a device; give cpu, cuda or cuda:N") from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ExtractError(f"--device {requested}: CUDA is not available on this machine")
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", local_rank)
        return dev
    return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")


def software_versions() -> dict:
    """Installed versions of what shapes the numbers (read from package metadata: imports nothing)."""
    from importlib.metadata import PackageNotFoundError, version

    from xbench.schemas.version import __version__

    # xbench's own version from the package: its distribution is named xbench-cxr (pyproject.toml)
    # torch's version from its metadata too: recorded when installed, whichever path ran (_run_numpy imports none)
    out = {"python": platform.python_version(), "xbench": __version__}
    for dist_name in ("torch", "numpy", "zarr", "open_clip_torch", "transformers", "timm"):
        try:
            out[dist_name] = version(dist_name)
        except PackageNotFoundError:
            pass
    return out


def _plan(adapter, store, names, opts: ExtractOptions, config, precision: str, tta):
    """Per dataset the submission's spec and the adapter's input pixels, and the run's provenance and model name."""
    specs, prompts, adapter_prov, pixels = {}, {}, {}, {}
    for name in names:
        ds = store.datasets[name]
        adapter.dataset = name  # per-dataset prompt defaults (extract/models/prompts.toml)
        pixels[name] = input_pixels(adapter, name, ds.has_originals)
        if pixels[name]["source"] == "original":
            check_original_sizes(name, ds.orig_size[:opts.limit])
        adapter.set_classes(ds.classes)
        specs[name] = DatasetSpec([str(c) for c in ds.case_id[:opts.limit]], tuple(ds.classes), tuple(adapter.map_shape), adapter.score_kind,
                                  tuple(adapter.unsupported), **({} if opts.scores_only else _phrase_spec(ds, adapter, opts.limit)))
        adapter_prov = adapter.provenance()
        prompts[name] = adapter_prov.pop("prompts", None)
    model_name = str(config.get("name") or opts.model)
    provenance = {
        "adapter": adapter_prov, "layers": adapter_prov.get("layers"), "prompts": prompts,
        "config": _jsonable(config), "config_hash": adapter.config_hash, "precision": precision,
        "input_pixels": {n: {k: v for k, v in p.items() if k != "transform"} for n, p in pixels.items()},
        "images": {"path": Path(opts.images).name, "attrs": _jsonable(store.attrs)},
        "software": software_versions(),
    }
    if tta is not None:  # only then: a run without augmentations writes the same attributes as before
        provenance["augment"] = tta.provenance()
    return specs, pixels, provenance, model_name


def _create_store(opts: ExtractOptions, info, model_name: str, adapter, provenance: dict, specs: dict, cpb: int) -> None:
    """Rank 0 creates (or checks, when resuming) the submission store; every rank learns whether that failed."""
    error = None
    if info.is_main:
        error = check_resume(opts.out, provenance.get("augment"), opts.overwrite)
    if info.is_main and error is None:
        try:
            SubmissionWriter.create(opts.out, model=model_name, method=adapter.method, provenance=provenance,
                                    datasets=specs, cases_per_block=cpb, map_dtype=opts.map_dtype,
                                    overwrite=opts.overwrite, **({"scores_only": True} if opts.scores_only else {}))
        except InvalidStoreError as e:
            error = str(e)
        except BaseException:
            distributed.broadcast("rank 0 failed to create the store (see its traceback)")
            raise
    error = distributed.broadcast(error)
    if error:
        distributed.shutdown()
        raise ExtractError(error)


def run_extraction(opts: ExtractOptions, progress: Callable | None = None) -> dict:
    """Run (or resume) an extraction; returns a summary dict. Raises ExtractError for bad inputs."""
    info = distributed.world_info()
    t0 = time.perf_counter()
    out_real, images_real = Path(os.path.realpath(opts.out)), Path(os.path.realpath(opts.images))
    if out_real == images_real or images_real in out_real.parents or out_real in images_real.parents:
        raise ExtractError(f"--out {opts.out}: is, lies inside or holds the images store {opts.images}; "
                           "it is only read, choose another --out")
    store = read_images(opts.images)
    names = list(opts.datasets) if opts.datasets else sorted(store.datasets)
    unknown = [n for n in names if n not in store.datasets]
    if unknown:
        raise ExtractError(f"{opts.images} has no dataset {', '.join(map(repr, unknown))}; it has {', '.join(sorted(store.datasets))}")
    # the CLI's own rules, for the callers of this function (paths and lists are checked where they are read)
    bad = problems(ExtractOptions, {k: getattr(opts, k) for k in _CHECKED}, "", suite=False)
    if bad:
        raise ExtractError(bad)

    adapter = create_adapter(opts.model, **opts.model_overrides())
    config = adapter.config
    try:
        tta = resolve_tta(opts.augment, config, opts.augment_seed)
    except InputError as e:
        raise ExtractError(e.problems) from None
    precision = opts.precision or config.get("precision") or "fp32"
    if precision not in PRECISIONS:
        raise ExtractError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    cpb = opts.cases_per_block or max(64, opts.batch_size)
    if not needs_torch(str(config.get("adapter"))) and info.world_size == 1:  # the catalog says: no torch
        specs, pixels, provenance, model_name = _plan(adapter, store, names, opts, config, precision, tta)
        _create_store(opts, info, model_name, adapter, provenance, specs, cpb)
        summary, written = _run_numpy(opts, SubmissionWriter.open(opts.out), adapter, store, names, specs, tta,
                                      progress)
        SubmissionWriter.open(opts.out).finish()
        return _summary(opts, model_name, adapter, "cpu", precision, info, written, summary, t0)
    return _run_torch(opts, info, adapter, store, names, config, precision, tta, cpb, progress, t0)


def _summary(opts, model_name, adapter, device, precision, info, written, summary, t0) -> dict:
    return {"out": str(opts.out), "model": model_name, "method": adapter.method, "device": str(device),
            "precision": precision, "rank": info.rank, "world_size": info.world_size,
            "blocks_written": written, "datasets": summary, "seconds": round(time.perf_counter() - t0, 3),
            "cases": sum(v["cases"] for v in summary.values())}


def _run_torch(opts, info, adapter, store, names, config, precision, tta, cpb, progress, t0) -> dict:
    """The extraction loop of a model that runs on torch (module doc)."""
    import torch
    from torch.utils.data import DataLoader

    from xbench.extract.pipeline import BlockWriter, InputRing, compute_block
    from xbench.extract.tta import CombinedBlock

    device = pick_device(opts.device or config.get("device"), info.local_rank)
    distributed.init(info, device)
    adapter.to(device)

    specs, pixels, provenance, model_name = _plan(adapter, store, names, opts, config, precision, tta)

    _create_store(opts, info, model_name, adapter, provenance, specs, cpb)
    writer = SubmissionWriter.open(opts.out)

    kill_after = int(os.environ.get("XBENCH_EXTRACT_KILL_AFTER_BLOCKS", "0") or 0)
    count, summary = {"written": 0}, {}

    def on_written(name: str, b: int, n: int) -> None:  # on the writer thread, after each block
        count["written"] += 1
        if progress:
            progress(name, b, n)
        if kill_after and count["written"] >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    copy_stream = torch.cuda.Stream(device) if device.type == "cuda" else None  # input copies overlap compute
    sink = ProcessStore(functools.partial(SubmissionWriter.open, opts.out)) if opts.writer == "process" else writer
    # blocks are written behind the compute (extract/pipeline.py); a writer process stops after the BlockWriter
    with contextlib.ExitStack() as stack, BlockWriter(sink.write_block, on_written) as block_writer:
        if sink is not writer:
            stack.enter_context(sink)
        for name in names:
            todo = distributed.broadcast(writer.blocks_todo(name) if info.is_main else None)
            mine = distributed.shard(todo, info.rank, info.world_size)
            summary[name] = {"cases": len(specs[name].case_ids), "blocks": writer.n_blocks(name),
                             "blocks_todo": len(todo), "blocks_this_rank": len(mine)}
            if not mine:
                continue
            if progress:
                progress(name, -1, sum(b1 - b0 for b0, b1 in (writer.block_rows(name, b) for b in mine)))
            adapter.dataset = name
            adapter.set_classes(store.datasets[name].classes)  # text embeddings once per dataset
            blocks = [(b, *writer.block_rows(name, b)) for b in mine]
            reader = _Blocks(opts.images, name, blocks, pixels[name]["transform"], pixels[name]["source"] == "original",
                             tta=tta)
            shape, dtype = reader.case_layout()
            views = tta.views if tta is not None else 1
            with InputRing(ring_slots(opts.workers), views * max(b1 - b0 for _, b0, b1 in blocks), shape, dtype, device,
                           shared=opts.workers > 0) as reader.ring:
                loader = DataLoader(reader, batch_size=None, shuffle=False, num_workers=opts.workers,
                                    persistent_workers=False)
                for b, item, sizes in loader:
                    n = sizes.shape[0]
                    pending = compute_block(adapter, reader.ring.view(item, n * views),
                                            sizes if views == 1 else sizes.repeat(views, 1), opts.batch_size,
                                            device, precision, copy_stream)
                    if tta is not None:
                        pending = CombinedBlock(pending, tta, n)
                    reader.ring.consumed(item, pending.input_event)
                    block_writer.submit(name, int(b), pending)
    for name in names:  # phrase rows, after the class blocks (their own ledger; resumable the same way)
        if specs[name].query_ids and not specs[name].phrases_unsupported:
            _phrase_pass(opts, writer, adapter, name, store.datasets[name], pixels[name], device, precision, info, tta)
    written = count["written"]

    distributed.barrier()
    if info.is_main:
        writer.finish()
    distributed.barrier()
    distributed.shutdown()
    return _summary(opts, model_name, adapter, device, precision, info, written, summary, t0)


def _kill_hook() -> Callable[[], None]:
    """The resume test's hook (module doc): SIGKILL this process after the n-th block written."""
    kill_after, count = int(os.environ.get("XBENCH_EXTRACT_KILL_AFTER_BLOCKS", "0") or 0), [0]

    def written() -> None:
        count[0] += 1
        if kill_after and count[0] >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
    return written


def _numpy_inputs(ds, dataset: str, start: int, stop: int, tta: TTA | None) -> np.ndarray:
    """Stored rows start:stop as uint8 (n, S, S), or their V views view-major (as _Blocks makes them)."""
    stored = np.ascontiguousarray(ds.image[start:stop])
    if tta is None:
        return stored
    n, made = stop - start, [None] * (tta.views * (stop - start))
    for r in range(start, stop):
        for v, img in enumerate(tta.view_images(stored[r - start], dataset, str(ds.case_id[r]))):
            made[v * n + (r - start)] = np.ascontiguousarray(img)
    return np.stack(made)


def _run_numpy(opts, writer, adapter, store, names, specs, tta: TTA | None, progress) -> tuple[dict, int]:
    """The extraction loop of a model the catalog marks ``torch=False`` (the weight-free baselines): the same
    blocks, micro-batches, views and writer as the torch loop, on NumPy arrays through ``adapter.outputs``
    and ``adapter.phrase_arrays``, in this process; resumed from the store's ledger like the torch loop."""
    summary, hook, written = {}, _kill_hook(), 0
    views = tta.views if tta is not None else 1
    for name in names:
        ds, todo = store.datasets[name], writer.blocks_todo(name)
        summary[name] = {"cases": len(specs[name].case_ids), "blocks": writer.n_blocks(name),
                         "blocks_todo": len(todo), "blocks_this_rank": len(todo)}
        if todo and progress:
            progress(name, -1, sum(b1 - b0 for b0, b1 in (writer.block_rows(name, b) for b in todo)))
        adapter.dataset = name
        adapter.set_classes(ds.classes)
        for b in todo:
            start, stop = writer.block_rows(name, b)
            x = _numpy_inputs(ds, name, start, stop, tta)
            sizes = np.asarray(ds.orig_size[start:stop], dtype=np.int64)
            sizes = sizes if views == 1 else np.tile(sizes, (views, 1))
            parts = [adapter.outputs(x[i:i + opts.batch_size], sizes[i:i + opts.batch_size])
                     for i in range(0, x.shape[0], opts.batch_size)]  # the torch loop's micro-batches
            scores, maps = (np.concatenate([p[k] for p in parts]).astype(np.float32) for k in (0, 1))
            if tta is not None:
                n = stop - start
                scores, maps = tta.combine(scores.reshape(views, n, *scores.shape[1:]),
                                           maps.reshape(views, n, *maps.shape[1:]))
            writer.write_block(name, int(b), scores, maps)
            written += 1
            if progress:
                progress(name, int(b), stop - start)
            hook()
        if specs[name].query_ids and not specs[name].phrases_unsupported:
            _numpy_phrases(writer, adapter, name, ds, tta)
    return summary, written


def _numpy_phrases(writer, adapter, name: str, ds, tta: TTA | None) -> None:
    """The phrase-row blocks still to do, as _phrase_pass writes them, through ``adapter.phrase_arrays``."""
    adapter.dataset = name
    adapter.set_classes(ds.classes)
    q = ds.queries
    for b in writer.query_blocks_todo(name):
        s, e = writer.query_block_rows(name, b)
        cases = np.asarray(q.case[s:e])
        c0, c1 = int(cases.min()), int(cases.max()) + 1
        images, sizes = _numpy_inputs(ds, name, c0, c1, tta), np.asarray(ds.orig_size[c0:c1], dtype=np.int64)
        n, outs = c1 - c0, []
        for v in range(tta.views if tta is not None else 1):
            sc, mp = adapter.phrase_arrays(images[v * n:(v + 1) * n], sizes, cases - c0)
            outs.append((np.asarray(sc, dtype=np.float32), np.asarray(mp, dtype=np.float32)))
        if tta is None:
            scores, maps = outs[0]
        else:
            scores, maps = tta.combine(np.stack([o[0] for o in outs]), np.stack([o[1] for o in outs]))
        writer.write_query_block(name, b, scores, maps)


#: The most pixels one original image may have before a host transform decodes it (a 43 x 43 cm detector at
#: 0.1 mm is 18.5 MP; this leaves room and keeps one case's working copies well under a gigabyte).
MAX_ORIGINAL_PIXELS = 64 * 2**20


def check_original_sizes(dataset: str, orig_size) -> None:
    """Refuse, before any worker starts, a store whose original images are larger than
    :data:`MAX_ORIGINAL_PIXELS` (or have a non-positive side): each would be decoded in full."""
    sizes = np.asarray(orig_size, dtype=np.int64).reshape(-1, 2)
    if not len(sizes):
        return
    pixels = sizes[:, 0] * sizes[:, 1]
    bad = np.flatnonzero((sizes.min(axis=1) < 1) | (pixels > MAX_ORIGINAL_PIXELS))
    if len(bad):
        r = int(bad[0])
        raise ExtractError(f"{dataset}: case {r} has an original image of {int(sizes[r, 0])} x {int(sizes[r, 1])} "
                           f"pixels ({len(bad)} case(s) like it); the limit is {MAX_ORIGINAL_PIXELS // 2**20} MP "
                           "and sides of at least 1")


def ring_slots(workers: int) -> int:
    """Input ring slots: enough for every block the DataLoader prefetches (2 per worker) plus the one
    being copied and the one being read, so the readers rarely wait for a slot."""
    return 2 * max(workers, 1) + 2


def _phrase_spec(ds, adapter, limit: int | None) -> dict:
    """The phrase-row part of a dataset's DatasetSpec: the query ids (of the first ``limit`` cases) and,
    for a model that takes no free text, the reason it writes none."""
    q = ds.queries
    if q is None:
        return {}
    keep = q.case < (limit if limit is not None else len(ds.case_id))
    ids = [str(x) for x in q.id[keep]]
    if not ids:
        return {}
    return {"query_ids": ids,
            "phrases_unsupported": None if getattr(adapter, "supports_phrases", False) else adapter.phrase_reason}


def _phrase_pass(opts, writer, adapter, name, ds, pixels, device, precision, info, tta: TTA | None = None) -> None:
    """Write the phrase-row blocks of ``name`` still to do: per block, the images its phrases point at
    (a contiguous run of cases: phrases are listed in case order) and the adapter's phrase outputs."""
    import torch

    from xbench.extract.pipeline import autocast

    todo = distributed.broadcast(writer.query_blocks_todo(name) if info.is_main else None)
    adapter.dataset = name
    adapter.set_classes(ds.classes)
    q = ds.queries
    for b in distributed.shard(todo, info.rank, info.world_size):
        s, e = writer.query_block_rows(name, b)
        cases = q.case[s:e]
        c0, c1 = int(cases.min()), int(cases.max()) + 1
        _, images, sizes = _Blocks(opts.images, name, [(b, c0, c1)], pixels["transform"],
                                   pixels["source"] == "original", tta=tta)[0]
        # a model whose queries attend to each other (KAD) puts a phrase in its category's slot: it asks for them
        kw = {"categories": [str(c) for c in q.category[s:e]]} if getattr(adapter, "phrase_categories", False) else {}
        n, outs = c1 - c0, []
        for v in range(tta.views if tta is not None else 1):  # the views of the cases, one pass each (extract/tta.py)
            with autocast(device, precision):
                scores, maps = adapter.phrase_outputs(images[v * n:(v + 1) * n].to(device), sizes,
                                                      [str(t) for t in q.text[s:e]],
                                                      torch.as_tensor(cases - c0, dtype=torch.long), **kw)
            outs.append((scores.float().cpu().numpy(), maps.float().cpu().numpy()))
        if tta is None:
            scores, maps = outs[0]
        else:
            scores, maps = tta.combine(np.stack([o[0] for o in outs]), np.stack([o[1] for o in outs]))
        writer.write_query_block(name, b, scores, maps)


def input_pixels(adapter, dataset: str, store_has_originals: bool) -> dict:
    """Which pixels the adapter gets for ``dataset`` and how they are prepared (recorded in the
    provenance): the original image when the adapter has a host-side transform that wants it and
    the store keeps originals; otherwise the stored S x S image."""
    transform = adapter.image_transform(dataset) if hasattr(adapter, "image_transform") else None
    if transform is None or (getattr(transform, "only_original", False) and not store_has_originals):
        return {"transform": None, "source": "stored", "steps": "the adapter's own (see adapter.preprocess)"}
    source = "original" if store_has_originals and transform.wants_original else "stored"
    return {"transform": transform, "source": source, "steps": transform.describe()}
