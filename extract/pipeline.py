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

* :class:`InputRing` is a small ring of block-sized input buffers in shared memory (page-locked on
  CUDA), which the DataLoader workers fill in place: no per-block shared-memory segment created,
  faulted in and unlinked, no copy into pinned memory by the DataLoader's pin thread in the main
  process. :func:`compute_block` copies the whole block to the device on a side stream (it
  overlaps the previous block's kernels) and the compute stream waits for it on the device; a slot
  is handed back to the workers once its copy has completed.

Values are those of the plain loop bit for bit (the same float32 casts, in the same order, only
joined on the device instead of the host), so a resumed or sharded store stays byte-identical.
Blocks are written in the order they are submitted; the first error in the writer is raised in the
main thread at the next :meth:`BlockWriter.submit` or at :meth:`BlockWriter.close`.
"""
from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
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
    """A block's outputs on their way to the host: ``result()`` waits for the copy and returns numpy.
    ``input_event`` marks the end of the block's input copy to the device (None: already read)."""

    scores: torch.Tensor
    maps: torch.Tensor
    event: "torch.cuda.Event | None" = None
    input_event: "torch.cuda.Event | None" = None

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        if self.event is not None:
            self.event.synchronize()
        return self.scores.numpy(), self.maps.numpy()


def to_device(images: torch.Tensor, device: torch.device, stream: "torch.cuda.Stream | None" = None):
    """(``images`` on ``device``, event marking the end of the copy or None when nothing is in flight).

    On CUDA the copy is queued on ``stream`` (a side stream: the copy engine works while the compute
    stream still runs the previous block) and the current stream waits for it on the device, so the
    host never waits; ``record_stream`` keeps the allocator from reusing the device copy too early.
    """
    if device.type != "cuda":
        return images.to(device), None
    compute = torch.cuda.current_stream(device)
    stream = stream or compute
    with torch.cuda.stream(stream):
        x = images.to(device, non_blocking=True)
        done = torch.cuda.Event()
        done.record(stream)
    if stream is not compute:
        compute.wait_event(done)
        x.record_stream(compute)
    return x, done


def compute_block(adapter, images: torch.Tensor, sizes: torch.Tensor, batch_size: int, device: torch.device,
                  precision: str, copy_stream: "torch.cuda.Stream | None" = None) -> PendingBlock:
    """Scores (n, C) and maps (n, C, h, w) of one block as float32, in micro-batches of ``batch_size``,
    with no host synchronisation (see the module doc). The block is copied to the device once."""
    x_all, input_event = to_device(images, device, copy_stream)
    scores, maps = [], []
    for i in range(0, x_all.shape[0], batch_size):
        with autocast(device, precision):
            out = adapter(x_all[i:i + batch_size], sizes[i:i + batch_size])
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
    return PendingBlock(host_s, host_m, event, input_event)


class InputRing:
    """``slots`` buffers of one block of inputs each, filled in place by the readers (module doc).

    Item ``i`` (the i-th block read, in order) lives in slot ``i % slots``. A reader that is to fill
    item i first waits until item ``i - slots`` has been released; the main thread releases items
    in order through :meth:`consumed`, each once its copy to the device has completed. Releasing
    every item but the newest one at each step lets the reader of the next item go on whenever
    ``slots >= 2``, so the loop cannot deadlock; more slots let the readers run ahead.

    ``shared``: put the buffers and the release counter in shared memory (DataLoader worker
    processes). On CUDA the buffers are page-locked in place (``cudaHostRegister``) so that the
    copy to the device is asynchronous; if that fails the copies are merely synchronous.
    """

    def __init__(self, slots: int, rows: int, case_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                 shared: bool, timeout: float = 600.0) -> None:
        if slots < 2:
            raise ValueError("an input ring needs at least 2 slots")
        self.slots, self.timeout = slots, timeout
        self.buf = torch.empty((slots, rows, *case_shape), dtype=dtype)
        self._released = torch.zeros(1, dtype=torch.int64)  # items < this are free
        if shared:
            self.buf.share_memory_()
            self._released.share_memory_()
        self._pending: collections.deque = collections.deque()
        self._registered = device.type == "cuda" and _host_register(self.buf)

    def __getstate__(self) -> dict:  # readers get the buffers, never the main thread's bookkeeping
        return {**self.__dict__, "_pending": collections.deque(), "_registered": False}

    def slot_for(self, item: int) -> torch.Tensor:
        """(reader) The buffer to fill with ``item``, once the item that used it before is released."""
        deadline = time.monotonic() + self.timeout
        while int(self._released[0]) <= item - self.slots:
            if time.monotonic() > deadline:
                raise RuntimeError(f"input ring: slot of block {item} not released within {self.timeout:.0f} s")
            time.sleep(0.0005)
        return self.buf[item % self.slots]

    def view(self, item: int, rows: int) -> torch.Tensor:
        """(main) The first ``rows`` rows of ``item``'s slot (a view: no copy)."""
        return self.buf[item % self.slots, :rows]

    def consumed(self, item: int, event: "torch.cuda.Event | None") -> None:
        """(main) ``item`` has been handed to the device; ``event`` marks the end of its copy (None: done).
        Releases every earlier item (waiting for their copies, queued a block ago) and this one if done."""
        self._pending.append((item, event))
        while self._pending and (self._pending[0][1] is None or len(self._pending) > 1):
            it, ev = self._pending.popleft()
            if ev is not None:
                ev.synchronize()
            self._released[0] = it + 1

    def close(self) -> None:
        """Wait for the copies still in flight and unpin the buffers (idempotent)."""
        while self._pending:
            _, ev = self._pending.popleft()
            if ev is not None:
                ev.synchronize()
        if self._registered:
            torch.cuda.cudart().cudaHostUnregister(self.buf.data_ptr())
            self._registered = False

    def __enter__(self) -> "InputRing":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _host_register(buf: torch.Tensor) -> bool:
    """Page-lock ``buf`` in place (it may live in shared memory, which ``pin_memory()`` would copy)."""
    try:
        err = torch.cuda.cudart().cudaHostRegister(buf.data_ptr(), buf.numel() * buf.element_size(), 0)
    except Exception:  # noqa: BLE001 - no runtime binding: unpinned, still correct
        return False
    return int(err) == 0


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
