"""Multi-process extraction: rank discovery, whole-block sharding and a self-relaunch via torchrun.

Extraction is embarrassingly parallel: every rank holds a full model, takes a contiguous range of
the blocks still to do, writes its own blocks, and rank 0 finishes the store after a barrier. The
process group is only used for barriers and one broadcast per dataset (gloo on CPU, NCCL on GPU).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import torch



@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def world_info() -> DistInfo:
    """Rank, world size and local rank from torchrun's variables (or SLURM's), else a single process."""
    env = os.environ
    if "WORLD_SIZE" in env:
        return DistInfo(int(env.get("RANK", 0)), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)))
    if "SLURM_NTASKS" in env and "SLURM_PROCID" in env and "MASTER_ADDR" in env:
        return DistInfo(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0)))
    return DistInfo()


def init(info: DistInfo, device: torch.device) -> None:
    """Join the process group when there are several ranks (NCCL for CUDA devices, else gloo)."""
    import torch
    import torch.distributed as dist

    if info.world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(device)
        dist.init_process_group(backend=backend, rank=info.rank, world_size=info.world_size)


def active() -> bool:
    """Whether a process group is up; False without importing torch when torch was never imported (the
    torch-free extraction path of the weight-free baselines runs one process)."""
    if sys.modules.get("torch") is None:
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def barrier() -> None:
    if active():
        import torch.distributed as dist

        dist.barrier()


def broadcast(obj: Any, src: int = 0) -> Any:
    """rank ``src``'s ``obj`` on every rank (any picklable object)."""
    if not active():
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def shutdown() -> None:
    if active():
        import torch.distributed as dist

        dist.destroy_process_group()


def shard(blocks: Sequence[int], rank: int, world_size: int) -> list[int]:
    """Split a list of block indices into ``world_size`` contiguous, nearly equal ranges.

    Rank r gets ``blocks[r*q + min(r, m) : ...]`` with q, m = divmod(len, world): sizes differ by at
    most one, every block goes to exactly one rank, and each rank's blocks stay in order.
    """
    q, m = divmod(len(blocks), world_size)
    start = rank * q + min(rank, m)
    return list(blocks[start:start + q + (rank < m)])


def relaunch(nproc: int, argv: Sequence[str], module: str = "xbench.extract.cli") -> int:
    """Run ``python -m module argv`` on ``nproc`` local ranks through torch.distributed.run."""
    from torch.distributed import run as torchrun

    args = ["--standalone", f"--nproc-per-node={nproc}", "-m", module, *argv]
    try:
        torchrun.main(args)
    except SystemExit as e:
        return int(e.code or 0)
    except Exception as e:  # ChildFailedError: the failing rank already printed its message
        name = type(e).__name__
        return 1 if name == "ChildFailedError" else _report(e)
    return 0


def _report(e: Exception) -> int:
    print(f"xbench-extract: launching ranks failed: {type(e).__name__}: {e}", flush=True)
    return 1
