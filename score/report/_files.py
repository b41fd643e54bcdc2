"""The one way a comparison writes its CSV: never into a folder it compares, atomically."""
from __future__ import annotations

import os
from pathlib import Path


def write_csv_outside(out_csv, text: str, inputs, what: str = "the result folder") -> None:
    """Write ``text`` to ``out_csv`` through a hidden temporary file and a rename, refusing (a UserError, exit 2)
    a path inside any of ``inputs``: the compared folders are inputs and are only read."""
    from xbench.schemas._cli import UserError

    out_csv = Path(out_csv)
    real = Path(os.path.realpath(out_csv))
    inside = [d for d in inputs if Path(os.path.realpath(d)) in real.parents]
    if inside:
        raise UserError(f"--out {out_csv}: lies inside {what} {inside[0]}; choose a file elsewhere")
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_csv.with_name(f".{out_csv.name}.tmp")
    tmp.write_text(text)
    tmp.replace(out_csv)
