"""``xbench-extract --faithfulness DIR``: both faithfulness rounds in one go, for a model XBench runs itself.

Round 1 is the extraction just written to ``--out``; this perturbs the images in the order of its maps
(``xbench perturb``'s rules, :mod:`xbench.schemas.perturb`) into DIR/round2.zarr with the key DIR/round2.key.npz,
then scores the perturbed images with the same model into DIR/round2-sub.zarr (scores only). The organiser and
the team are one here, so the key stays beside the stores; ``xbench-score --faithfulness DIR/round2-sub.zarr --key
DIR/round2.key.npz`` scores them. A rerun resumes: a finished round-2 store and key are reused.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable

ROUND2, KEY, ROUND2_SUB = "round2.zarr", "round2.key.npz", "round2-sub.zarr"


def folder_problems(opts) -> list[str]:
    """Why ``--faithfulness DIR`` may not be written, one line per problem: DIR receives round 2, the key and the
    round-2 scores, so it may be neither the images store nor the round-1 store (``--out``) nor inside either."""
    from xbench.schemas.errors import escape_text
    from xbench.schemas.paths import is_remote

    def real(p) -> Path:
        return Path(os.path.realpath(os.path.abspath(os.fspath(p))))

    d = real(opts.faithfulness)
    problems = []
    for flag, path in (("--images", opts.images), ("--out", opts.out)):
        if path is None or is_remote(path):
            continue
        src = real(path)
        if d == src or src in d.parents:
            problems.append(escape_text(f"--faithfulness {opts.faithfulness}: is {'' if d == src else 'inside '}the store "
                                        f"{flag} {path}; round 2, its key and its scores need a folder of their own"))
    return problems


def run_faithfulness(opts, progress: Callable | None = None, say: Callable[[str], None] | None = None) -> dict:
    """Perturb (unless DIR already holds round 2 and its key) and extract round 2; returns a summary. ``say``
    gets the cost line (images, estimated size) before round 2 is written (schemas/round2_cost.py)."""
    from xbench.schemas import read_images, read_submission
    from xbench.schemas.errors import InputError, Problem
    from xbench.schemas.perturb import Round2Options, make_round2

    from xbench.extract.runner import run_extraction

    folder = Path(opts.faithfulness)
    folder.mkdir(parents=True, exist_ok=True)
    store, key = folder / ROUND2, folder / KEY
    curves = tuple(c.strip() for c in str(opts.faithfulness_curve).split(",") if c.strip())
    made = None
    if store.exists() != key.exists():
        raise InputError([Problem(str(folder), f"holds {ROUND2 if store.exists() else KEY} without "
                                               f"{KEY if store.exists() else ROUND2}; remove it to start round 2 again")])
    if not store.exists():
        opts_r2 = Round2Options(curves=curves, steps=int(opts.faithfulness_steps),
                                datasets=tuple(opts.datasets) if opts.datasets else None, limit=opts.limit)
        from xbench.schemas.round2_cost import announcer

        images = read_images(opts.images)
        made = make_round2(read_submission(opts.out), images, store, key, opts_r2,
                           on_total=announcer(opts.images, images, opts_r2.datasets, opts.limit, say))
    round2 = dataclasses.replace(opts, images=str(store), out=str(folder / ROUND2_SUB), scores_only=True,
                                 faithfulness=None, limit=None, datasets=None)
    summary = run_extraction(round2, progress=progress)
    return {"round2": str(store), "key": str(key), "round2_submission": summary["out"],
            "round2_images": made["images"] if made else None, "round2_cases": summary["cases"]}
