"""Sharding blocks over ranks: contiguous, disjoint, complete, balanced."""
from __future__ import annotations

import pytest

from xbench.extract.distributed import DistInfo, shard, world_info


@pytest.mark.parametrize("n,world", [(0, 2), (1, 3), (5, 2), (7, 3), (8, 4), (3, 8)])
def test_shard_partitions_in_order(n, world):
    blocks = list(range(10, 10 + n))
    parts = [shard(blocks, r, world) for r in range(world)]
    assert sum(parts, []) == blocks  # every block once, in order, ranges contiguous
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_shard_example():
    assert [shard([0, 1, 2, 3, 4], r, 2) for r in range(2)] == [[0, 1, 2], [3, 4]]
    # resumed runs shard what is left, still in whole blocks
    assert [shard([1, 4, 5], r, 2) for r in range(2)] == [[1, 4], [5]]


def test_world_info(monkeypatch):
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "SLURM_NTASKS", "SLURM_PROCID"):
        monkeypatch.delenv(k, raising=False)
    assert world_info() == DistInfo(0, 1, 0)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert world_info() == DistInfo(3, 4, 1)
