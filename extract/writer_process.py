"""Blocks written by a separate process: the store's encoding and compression (zarr's codec pipeline
runs largely in Python) then never holds the main process's GIL while it queues kernels.

:class:`ProcessStore` has the ``write_block`` of a submission store and forwards each block, in
order, to one child process that opened the same store; it returns once the child has written it,
so :class:`~.pipeline.BlockWriter`'s thread (which calls it) keeps its order, back-pressure, error
hand-over and its ``on_written`` hook (progress, the resume test's kill) in the parent. The child
exits when the parent closes the pipe, or dies (it reads end-of-file). Imports no torch.
"""
from __future__ import annotations

import multiprocessing
from typing import Callable


def _serve(opener: Callable, conn) -> None:
    """Child: open the store, then write each (dataset, block, scores, maps) received; reply None or the error."""
    try:
        store = opener()
    except BaseException as e:  # noqa: BLE001 - reported on the first write
        store, failure = None, f"{type(e).__name__}: {e}"
    while True:
        try:
            item = conn.recv()
        except EOFError:  # the parent is gone
            return
        if item is None:
            return
        try:
            if store is None:
                raise RuntimeError(failure)
            store.write_block(*item)
            conn.send(None)
        except BaseException as e:  # noqa: BLE001 - handed to the parent
            conn.send(f"{type(e).__name__}: {e}")


class ProcessStore:
    """``write_block`` done by a child process running ``opener()`` (picklable; returns the store)."""

    def __init__(self, opener: Callable) -> None:
        ctx = multiprocessing.get_context("spawn")  # never fork a process holding CUDA and threads
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(opener, child), name="xbench-block-writer", daemon=True)
        self._proc.start()
        child.close()

    def write_block(self, dataset: str, block: int, scores, maps) -> None:
        self._conn.send((dataset, block, scores, maps))
        try:
            reply = self._conn.recv()
        except EOFError:
            raise RuntimeError(f"the writer process died (exit code {self._proc.exitcode})") from None
        if reply is not None:
            raise RuntimeError(f"writer process: {reply}")

    def close(self) -> None:
        """Stop the child (after the blocks already written) and wait for it."""
        if self._proc.is_alive():
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        self._proc.join(60)
        self._conn.close()

    def __enter__(self) -> "ProcessStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
