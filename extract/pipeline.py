"""Keeping the device busy during extraction: compute a block, copy it back once, write it behind.

The plain loop (model call, ``.cpu()`` per micro-batch, write, repeat) stalls the GPU twice per
block: every ``.cpu()`` waits for the queued kernels, and while a block is compressed and written
to zarr on the main thread no kernel is queued at all. Here

* :func:`compute_block` runs a block's micro-batches keeping every output on the device, joins them
  there and starts *one* device-to-host copy per array into pinned buffers (``non_blocking``), marked
  by a CUDA event: the main thread goes straight on to queue the next block's kernels;
* :class:`BlockWriter` is one background thread fed through a bounded queue: it waits for a block's
  event (on its own thread, so the main thread never blocks on the copy), then writes the block with
  the store's ``write_block``. Compression in numcodecs releases the GIL, so writing overlaps compute
  on the CPU too. The bound (``depth`` blocks) caps host memory and applies back-pressure when the
  disk is the bottleneck.

Values are those of the plain loop bit for bit (the same float32 casts, in the same order, only
joined on the device instead of the host), so a resumed or sharded store stays byte-identical.
Blocks are written in the order they are submitted; the first error in the writer is raised in the
main thread at the next :meth:`BlockWriter.submit` or at :meth:`BlockWriter.close`.
"""
from __future__ import annotations

import contextlib
import queue
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str):
    """Autocast to ``precision`` on ``device`` (a no-op for fp32)."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@dataclass
class PendingBlock:
    """A block's outputs on their way to the host: ``result()`` waits for the copy and returns numpy."""

    scores: torch.Tensor
    maps: torch.Tensor
    event: "torch.cuda.Event | None" = None

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        if self.event is not None:
            self.event.synchronize()
        return self.scores.numpy(), self.maps.numpy()


def compute_block(adapter, images: torch.Tensor, sizes: torch.Tensor, batch_size: int, device: torch.device,
                  precision: str) -> PendingBlock:
    """Scores (n, C) and maps (n, C, h, w) of one block as float32, in micro-batches of ``batch_size``,
    with no host synchronisation between micro-batches (see the module doc)."""
    scores, maps = [], []
    for i in range(0, images.shape[0], batch_size):
        x = images[i:i + batch_size].to(device, non_blocking=True)
        with autocast(device, precision):
            out = adapter(x, sizes[i:i + batch_size])
        scores.append(out.scores.float())
        maps.append(out.maps.float())
    s, m = (t[0] if len(t) == 1 else torch.cat(t) for t in (scores, maps))
    if s.device.type != "cuda":
        return PendingBlock(s.cpu(), m.cpu())
    host_s = torch.empty(s.shape, dtype=s.dtype, pin_memory=True)  # torch's caching host allocator reuses these
    host_m = torch.empty(m.shape, dtype=m.dtype, pin_memory=True)
    host_s.copy_(s, non_blocking=True)
    host_m.copy_(m, non_blocking=True)
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(s.device))
    return PendingBlock(host_s, host_m, event)


_STOP = object()


class BlockWriter:
    """Writes blocks on one background thread, in submission order, at most ``depth`` waiting.

    ``write(dataset, block, scores, maps)`` is the store's writer; ``on_written(dataset, block, n)``
    runs on the writer thread after each block (progress, the kill hook of the resume test).
    Use as a context manager: leaving it waits for every block, and re-raises a writer error.
    """

    def __init__(self, write: Callable, on_written: Callable | None = None, depth: int = 2) -> None:
        self._write, self._on_written = write, on_written
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="xbench-block-writer", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if self._error is not None:
                continue  # drain after a failure without writing (the main thread raises it)
            dataset, block, pending = item
            try:
                scores, maps = pending.result()
                self._write(dataset, block, scores, maps)
                if self._on_written is not None:
                    self._on_written(dataset, block, scores.shape[0])
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                self._error = e

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def submit(self, dataset: str, block: int, pending: PendingBlock) -> None:
        self._raise()
        self._queue.put((dataset, block, pending))  # blocks while `depth` blocks are waiting

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self._raise()

    def __enter__(self) -> "BlockWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # the main thread failed: stop the writer after what is queued, keep the first error
            self._queue.put(_STOP)
            self._thread.join()
