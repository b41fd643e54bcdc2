"""Throughput of xbench-prepare: cases per second, one worker against every core.

Two workloads, each prepared with ``workers=1`` (the baseline) and with every core, in the same run:

* ``phantom``: the synthetic generator (native 256 px, cheap to draw), so mostly the shared
  pipeline: resizing, rasterising, writing the stores;
* ``rsna-dicom`` (unless ``--no-dicom``): a folder in the RSNA layout written here with pydicom,
  1024 x 1024 JPEG-baseline DICOMs as in the real download, read by the real RSNA reader, so
  decoding dominates.

Prints one line per run and the speed-up against the one-worker baseline; ``--json`` prints the
same as JSON. Example::

    python benchmarks/prepare_throughput.py --cases 2000 --dicom-cases 300
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def write_rsna_folder(root: Path, n: int, seed: int = 0) -> None:
    """An RSNA-layout folder: labels CSV and n JPEG-baseline 1024x1024 DICOMs (phantom pixels)."""
    import pydicom
    from PIL import Image
    from pydicom.dataset import FileMetaDataset
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEGBaseline8Bit, SecondaryCaptureImageStorage, generate_uid

    from xbench.extract.datasets.phantom import draw_case, render_image

    img_dir = root / "stage_2_train_images"
    img_dir.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    rows = ["patientId,x,y,width,height,Target"]
    for i in range(n):
        pid = f"bench{i:06d}"
        pixels = render_image(draw_case(seed, "test", i), 1024)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
        meta.MediaStorageSOPInstanceUID = generate_uid()
        meta.TransferSyntaxUID = JPEGBaseline8Bit
        ds = pydicom.Dataset()
        ds.file_meta = meta
        ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
        ds.PatientID, ds.Modality = pid, "CR"
        ds.Rows = ds.Columns = 1024
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated = ds.BitsStored = 8
        ds.HighBit, ds.PixelRepresentation = 7, 0
        ds.PixelData = encapsulate([buf.getvalue()])
        ds["PixelData"].VR = "OB"
        ds.save_as(img_dir / f"{pid}.dcm", enforce_file_format=True)
        if rng.uniform() < 0.3:
            x, y = rng.uniform(100, 700, size=2)
            w, h = rng.uniform(50, 250, size=2)
            rows.append(f"{pid},{x:.1f},{y:.1f},{w:.1f},{h:.1f},1")
        else:
            rows.append(f"{pid},,,,,0")
    (root / "stage_2_train_labels.csv").write_text("\n".join(rows) + "\n")


def timed(make_reader, workers: int, image_size: int) -> tuple[float, int]:
    from xbench.extract.datasets.prepare import prepare_dataset

    out = Path(tempfile.mkdtemp(prefix="xbench-bench-"))
    try:
        t0 = time.perf_counter()
        summary = prepare_dataset(make_reader(), out, workers=workers, image_size=image_size, progress=False)
        return time.perf_counter() - t0, summary.n_written
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000, help="phantom cases (default 1000)")
    ap.add_argument("--dicom-cases", type=int, default=200, help="RSNA-layout DICOMs (default 200)")
    ap.add_argument("--no-dicom", action="store_true", help="skip the DICOM workload")
    ap.add_argument("--image-size", type=int, default=512)
    ap.add_argument("--workers", type=int, default=_cores(), help="the 'all cores' run (default: every core)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from xbench.extract.datasets import DATASETS
    from xbench.extract.datasets.phantom import PhantomReader

    workloads = [("phantom", lambda: PhantomReader(n_cases=args.cases, seed=0))]
    tmp = None
    if not args.no_dicom:
        tmp = Path(tempfile.mkdtemp(prefix="xbench-bench-rsna-"))
        t0 = time.perf_counter()
        write_rsna_folder(tmp, args.dicom_cases)
        print(f"# wrote {args.dicom_cases} JPEG-baseline DICOMs in {time.perf_counter() - t0:.1f} s")
        rsna = DATASETS.get("rsna_pneumonia")
        workloads.append(("rsna-dicom", lambda: rsna(tmp)))
    results = []
    try:
        for name, make in workloads:
            base = None
            for w in sorted({1, args.workers}):
                seconds, n = timed(make, w, args.image_size)
                rate = n / seconds
                base = base or rate
                results.append({"workload": name, "workers": w, "cases": n, "seconds": round(seconds, 3),
                                "cases_per_s": round(rate, 1), "speedup_vs_1_worker": round(rate / base, 2)})
                if not args.json:
                    r = results[-1]
                    print(f"{name:11s} workers={w:<3d} {n:6d} cases {seconds:7.2f} s {rate:8.1f} cases/s  x{r['speedup_vs_1_worker']:.2f}")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps({"cores": _cores(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
