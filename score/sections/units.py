"""The units each dataset takes in a scoring run's one resampling stream (shared by the row scopes)."""
from __future__ import annotations

import numpy as np

__all__ = ["scored_units"]


def scored_units(sub, gt, names, cases=None) -> dict[str, int]:
    """{dataset: its scored cases} for the datasets ``names`` (the submission's cases of the ground truth; with
    ``cases`` {dataset: bool per ground-truth case}, those present): the units each dataset takes in the run's one
    resampling stream, from which a scope positions its draws
    (:func:`xbench.score.resampling.engine.prior_units`, docs/contract.md "Resampling")."""
    from xbench.schemas import align  # the store package (zarr) only when a run counts

    out = {}
    for name in names:
        if name not in sub.datasets or name not in gt.datasets:
            out[name] = 0
            continue
        rows = np.asarray(align(sub.datasets[name], gt.datasets[name], allow_missing=True)[0])
        present = (cases or {}).get(name)
        if present is not None:
            rows = np.where(np.asarray(present, bool), rows, -1)
        out[name] = int(np.count_nonzero(rows >= 0))
    return out
