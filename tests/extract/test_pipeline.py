"""extract/pipeline.py: block outputs equal the plain per-micro-batch loop; the background writer keeps order,
bounds its queue, and hands its errors to the main thread."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xbench.extract.pipeline import BlockWriter, PendingBlock, compute_block  # noqa: E402


class _Out:
    def __init__(self, scores, maps):
        self.scores, self.maps = scores, maps


class _Toy:
    """A deterministic adapter: scores and maps from the pixels, in the input's dtype (bf16 under autocast)."""

    def __init__(self):
        self.w = torch.linspace(-1, 1, 3 * 16).reshape(3, 16)
        self.calls = []

    def __call__(self, x, sizes):
        self.calls.append(x.shape[0])
        f = x.float().reshape(x.shape[0], -1)[:, :16] / 255.0
        scores = f @ self.w.to(x.device).T
        maps = torch.nn.functional.avg_pool2d(x.float()[:, None], 4).repeat(1, 3, 1, 1) / 255.0 + sizes[:, :1, None, None].to(x.device)
        return _Out(scores.half(), maps)  # half scores: the float32 cast must happen per micro-batch as before


def _plain(adapter, images, sizes, batch_size):
    """The loop the pipeline replaced: .float().cpu() per micro-batch, joined on the host."""
    s, m = [], []
    for i in range(0, images.shape[0], batch_size):
        out = adapter(images[i:i + batch_size], sizes[i:i + batch_size])
        s.append(out.scores.float().cpu())
        m.append(out.maps.float().cpu())
    return torch.cat(s).numpy(), torch.cat(m).numpy()


@pytest.mark.parametrize("n,batch", [(10, 3), (8, 8), (5, 16), (1, 1)])
def test_compute_block_equals_the_plain_loop(n, batch):
    g = torch.Generator().manual_seed(n)
    images = torch.randint(0, 256, (n, 16, 16), dtype=torch.uint8, generator=g)
    sizes = torch.randint(1, 9, (n, 2), generator=g)
    toy = _Toy()
    s, m = compute_block(toy, images, sizes, batch, torch.device("cpu"), "fp32").result()
    assert toy.calls == [min(batch, n - i) for i in range(0, n, batch)]  # never more than `batch` per call
    rs, rm = _plain(_Toy(), images, sizes, batch)
    assert s.dtype == rs.dtype == np.float32 and m.dtype == np.float32
    assert s.tobytes() == rs.tobytes() and m.tobytes() == rm.tobytes()


def _pending(k: int) -> PendingBlock:
    return PendingBlock(torch.full((2, 1), float(k)), torch.full((2, 1, 2, 2), float(k)))


def test_writer_keeps_order_and_reports_each_block():
    written, seen = [], []
    with BlockWriter(lambda d, b, s, m: written.append((d, b, float(s[0, 0]), m.shape)),
                     on_written=lambda d, b, n: seen.append((d, b, n)), depth=2) as w:
        for k in range(7):
            w.submit("ds" if k < 4 else "other", k, _pending(k))
    assert written == [("ds" if k < 4 else "other", k, float(k), (2, 1, 2, 2)) for k in range(7)]
    assert seen == [(d, b, 2) for d, b, _, _ in written]


def test_writer_queue_is_bounded():
    gate, started = threading.Event(), threading.Event()

    def slow(d, b, s, m):
        started.set()
        gate.wait(10)

    w = BlockWriter(slow, depth=1)
    w.submit("d", 0, _pending(0))  # taken by the thread, which then waits on the gate
    assert started.wait(10)
    w.submit("d", 1, _pending(1))  # fills the queue
    done = threading.Event()
    t = threading.Thread(target=lambda: (w.submit("d", 2, _pending(2)), done.set()))
    t.start()
    time.sleep(0.2)
    assert not done.is_set()  # back-pressure: the third submit waits for room
    gate.set()
    t.join(10)
    assert done.is_set()
    w.close()


def test_writer_error_reaches_the_main_thread_and_stops_writing():
    written, gate = [], threading.Event()

    def write(d, b, s, m):
        if b == 1:
            gate.wait(10)  # block 2 is queued behind the failing block before it fails
            raise OSError("disk full")
        written.append(b)

    w = BlockWriter(write, depth=4)
    for k in range(3):
        w.submit("d", k, _pending(k))
    gate.set()
    with pytest.raises(OSError, match="disk full"):
        w.close()
    assert written == [0]  # nothing after the failed block
    w2 = BlockWriter(write, depth=4)
    w2.submit("d", 1, _pending(1))
    for _ in range(500):  # wait until the writer has failed
        if w2._error is not None:
            break
        time.sleep(0.01)
    with pytest.raises(OSError):  # then the next submit raises at once
        w2.submit("d", 2, _pending(2))
    with pytest.raises(OSError):
        w2.close()
    assert written == [0]


def test_a_main_thread_error_stops_the_writer_without_hanging():
    written = []
    with pytest.raises(RuntimeError, match="model broke"):
        with BlockWriter(lambda d, b, s, m: written.append(b), depth=1) as w:
            w.submit("d", 0, _pending(0))
            raise RuntimeError("model broke")
    assert not w._thread.is_alive() and written == [0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_block_is_copied_once_into_pinned_memory_and_equals_the_plain_loop():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (37, 16, 16), dtype=torch.uint8, generator=g)
    sizes = torch.randint(1, 9, (37, 2), generator=g)
    toy = _Toy()
    dev = torch.device("cuda")
    pending = compute_block(toy, images.pin_memory(), sizes, 8, dev, "fp32", torch.cuda.Stream(dev))  # side-stream copy
    assert pending.maps.is_pinned() and pending.event is not None and pending.input_event is not None
    s, m = pending.result()
    rs, rm = _plain(_Toy(), images.to(dev), sizes, 8)
    assert s.tobytes() == rs.tobytes() and m.tobytes() == rm.tobytes()


# ------------------------------------------------------------------------------ the input ring
from xbench.extract.pipeline import InputRing, to_device  # noqa: E402


def test_ring_reader_waits_for_the_slot_to_be_released():
    ring = InputRing(2, 3, (2,), torch.float32, torch.device("cpu"), shared=False)
    ring.slot_for(0).fill_(0)
    ring.slot_for(1).fill_(1)
    got = threading.Event()
    t = threading.Thread(target=lambda: (ring.slot_for(2).fill_(2), got.set()))
    t.start()
    time.sleep(0.2)
    assert not got.is_set()  # item 2 reuses item 0's slot, still held by the main thread
    assert ring.view(0, 3).eq(0).all()
    ring.consumed(0, None)  # nothing in flight: released at once
    t.join(10)
    assert got.is_set() and ring.view(2, 3).eq(2).all() and ring.view(1, 3).eq(1).all()


class _Ev:
    def __init__(self):
        self.synced = False

    def synchronize(self):
        self.synced = True


def test_ring_releases_every_item_but_the_newest_copy_in_flight():
    ring = InputRing(3, 1, (), torch.uint8, torch.device("cpu"), shared=False)
    e0, e1 = _Ev(), _Ev()
    ring.consumed(0, e0)
    assert int(ring._released[0]) == 0 and not e0.synced  # its copy may still read the slot
    ring.consumed(1, e1)
    assert int(ring._released[0]) == 1 and e0.synced and not e1.synced
    ring.close()
    assert e1.synced


def test_ring_reader_gives_up_with_a_clear_error():
    ring = InputRing(2, 1, (), torch.uint8, torch.device("cpu"), shared=False, timeout=0.05)
    with pytest.raises(RuntimeError, match="slot of block 2 not released"):
        ring.slot_for(2)
    with pytest.raises(ValueError):
        InputRing(1, 1, (), torch.uint8, torch.device("cpu"), shared=False)


@pytest.mark.parametrize("workers", [0, 2])
def test_ring_fed_by_dataloader_workers_gives_every_block_in_order(phantom_images, workers):
    """Blocks read through a 2-slot ring by worker processes equal a direct read (no slot overwritten early)."""
    from torch.utils.data import DataLoader

    from xbench.extract.runner import _Blocks
    from xbench.schemas import read_images

    path = str(phantom_images / "images.zarr")
    ds = read_images(path).datasets["phantom"]
    blocks = [(b, lo, min(lo + 3, 20)) for b, lo in enumerate(range(0, 20, 3))]  # 7 blocks, the last short
    reader = _Blocks(path, "phantom", blocks)
    shape, dtype = reader.case_layout()
    assert shape == (64, 64) and dtype == torch.uint8
    with InputRing(2, 3, shape, dtype, torch.device("cpu"), shared=workers > 0) as reader.ring:
        seen = []
        for b, item, sizes in DataLoader(reader, batch_size=None, num_workers=workers):
            _, lo, hi = blocks[item]
            time.sleep(0.02)  # a slow consumer: the readers run into the ring's limit
            assert np.array_equal(reader.ring.view(item, sizes.shape[0]).numpy(), np.asarray(ds.image[lo:hi]))
            assert np.array_equal(sizes.numpy(), np.asarray(ds.orig_size[lo:hi]))
            reader.ring.consumed(item, None)
            seen.append(int(b))
    assert seen == list(range(7))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_ring_is_page_locked_in_place_and_unpinned_on_close():
    ring = InputRing(2, 4, (8,), torch.uint8, torch.device("cuda"), shared=True)
    assert ring._registered and ring.buf.is_pinned()
    ring.slot_for(0).fill_(7)
    x, ev = to_device(ring.view(0, 4), torch.device("cuda"), torch.cuda.Stream())
    ring.consumed(0, ev)
    ring.close()
    assert not ring._registered and x.eq(7).all()
