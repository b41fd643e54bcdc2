"""Micro-benchmark of the serial chunk kernel: µs per (map, region) pair, min and spread of repeated runs.

Usage: python benchmarks/kernel_micro.py [--pairs 256] [--repeats 9] [--map 14] [--grid 224]
Random smooth-ish maps and box regions; the figure is the serial kernel alone (no I/O, no threads).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from xbench.score.kernels import maps as kernels


def _case(pairs: int, side: int, grid: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    maps = rng.random((pairs, side, side), dtype=np.float32)
    masks = np.zeros((pairs, grid, grid), dtype=bool)
    for p in range(pairs):
        r0, c0 = rng.integers(0, grid // 2, 2)
        h, w = rng.integers(grid // 16, grid // 3, 2)
        masks[p, r0:r0 + h, c0:c0 + w] = True
    return maps, masks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--map", type=int, default=14, help="map side (smaller than grid: bilinear; larger: area)")
    ap.add_argument("--grid", type=int, default=224)
    a = ap.parse_args()
    maps, masks = _case(a.pairs, a.map, a.grid)
    P = a.pairs
    plan = kernels.resize_plan(maps.shape[1:], masks.shape[1:])
    T = kernels.N_THRESHOLDS
    out = kernels.GroundingCounts(np.empty((P, T), np.int32), np.empty((P, T), np.int32), np.empty(P, bool),
                                  np.empty(P, np.int32), np.empty(P), np.empty(P, np.int32))
    local = np.arange(P, dtype=np.int64)
    kernels.count_pairs_into(maps, masks, local, plan, out)  # compile / load from cache
    times = []
    for _ in range(a.repeats):
        t = time.perf_counter()
        kernels.count_pairs_into(maps, masks, local, plan, out)
        times.append((time.perf_counter() - t) / P * 1e6)
    times.sort()
    path = "area" if plan.area else "bilinear"
    print(f"{path} {a.map}x{a.map} -> {a.grid}x{a.grid}: min {times[0]:.1f} µs/pair, "
          f"median {times[len(times) // 2]:.1f}, max {times[-1]:.1f} ({a.repeats} runs of {P} pairs)")


if __name__ == "__main__":
    main()
