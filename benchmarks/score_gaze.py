"""What the gaze section costs: xbench-score with gaze in the ground truth against the same run without it.

Prepares the phantom twice with the same seed, once with simulated gaze (``--option gaze=true``: reader R1 reads
every case, R2 and R3 every third, docs/how-to/gaze.md) and once without (the images stores are the same; the ground
truths differ only by the gaze arrays), extracts one weight-free model once, and times ``xbench-score`` in a
fresh process on both ground truths (min of ``--repeat`` runs, peak RSS, CPU seconds). The baseline is the
run without gaze, measured in the same run on the same machine; the ratio and the gaze section's seconds per
reading are printed with the machine (CPU model, AVX2 / AVX-512, load).

Usage::

    python benchmarks/score_gaze.py                       # 1,000 cases (1,668 readings), 1000 resamples
    python benchmarks/score_gaze.py --cases 300 --repeat 2

Nothing is asserted: figures and ratios are printed.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from score_fullscale import machine, run_cli  # noqa: E402


def _xbench(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "xbench.cli", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"xbench {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")


def _readings(gt: Path) -> int:
    import zarr

    return int(zarr.open_group(str(gt / "phantom"), mode="r")["gaze_case"].shape[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1000, help="phantom cases (default 1000)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="resamples (default 1000)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each (default 3; the minimum is shown)")
    ap.add_argument("--model", default="dog", help="the model extracted once (default dog, weight-free)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="xbench-bench-gaze-") as tmp:
        root = Path(tmp)
        for name, extra in (("plain", []), ("gaze", ["--option", "gaze=true"])):
            _xbench("prepare", "phantom", "--out", str(root / name), "--n-cases", str(args.cases), "-q", *extra)
        sub = root / "sub.zarr"
        _xbench("extract", "--model", args.model, "--images", str(root / "plain/images.zarr"), "--out", str(sub),
                "--workers", "0", "-q")
        cache = root / "numba-cache"
        run_cli(sub, root / "plain/gt.zarr", root / "warm", args.bootstrap, cache)  # fills Numba's cache
        got = {}
        for name in ("plain", "gaze"):
            runs = [run_cli(sub, root / name / "gt.zarr", root / f"out-{name}-{k}", args.bootstrap, cache)
                    for k in range(args.repeat)]
            got[name] = {"wall_s": [round(r[0], 3) for r in runs], "peak_rss_mib": round(max(r[1] for r in runs), 1),
                         "cpu_s": [round(r[2], 3) for r in runs]}
        n_read = _readings(root / "gaze/gt.zarr")
        section = json.loads((root / "out-gaze-0" / "metrics.json").read_text())["gaze"]["datasets"]["phantom"]
    plain, gaze = min(got["plain"]["wall_s"]), min(got["gaze"]["wall_s"])
    doc = {"machine": machine(), "cases": args.cases, "readings": n_read, "bootstrap": args.bootstrap,
           "finding_rows": section["n_finding_rows"], "image_rows": section["n_image_rows"], **got,
           "ratio_gaze_over_plain": round(gaze / plain, 2),
           "gaze_ms_per_reading": round(1000 * (gaze - plain) / max(n_read, 1), 2)}
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(doc["machine"])
    print(f"{args.cases} phantom cases, {n_read} readings ({doc['finding_rows']} finding rows, {doc['image_rows']} "
          f"image rows), {args.bootstrap} resamples, model {args.model}; min of {args.repeat} fresh processes")
    for name in ("plain", "gaze"):
        g = got[name]
        print(f"  {'without gaze (baseline)' if name == 'plain' else 'with gaze':24s} {min(g['wall_s']):7.2f} s  "
              f"(runs {g['wall_s']}, CPU {g['cpu_s']}, peak RSS {g['peak_rss_mib']} MiB)")
    print(f"  with / without = {doc['ratio_gaze_over_plain']}x; the gaze section ~{doc['gaze_ms_per_reading']} ms "
          "per reading (six measures on every finding and image row, the ceiling, the regions, the bootstrap)")


if __name__ == "__main__":
    main()
