"""Hostile dataset files through ``xbench-prepare`` as a user runs it: every one is refused with exit 2 and a
line naming the file (and row) or the skipped case, within 60 s and 1 GiB, never a traceback.

Kinds: JSON nested 10^5 deep, an integer of 5,000 digits, a key twice, NaN tokens, the wrong document type,
non-UTF-8 bytes, a CSV field past the field limit, a FIFO in place of an annotation file or an image, a link
in the dataset root leading outside it (an annotation file, an image), decompression bombs (a PNG whose
header declares 49 Mpx and one of 10^10 px, a DICOM declaring 60,000 x 60,000, a LabelMe base64 PNG bomb, a
CheXlocalize RLE of 10^10 pixels). A bad image skips its case (the store's ``skipped`` list says why); with
the default --max-skip-fraction that is exit 2 with the reason on its line.

The runs are children forked from one driver that imported xbench-prepare once; the driver reads each
child's peak resident memory and time from ``wait4``.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import sys
import zlib
from pathlib import Path

import pytest

from forked import run_forked

import fixtures as F

pytest.importorskip("pydicom")

MAX_RSS_MIB = 1024
MAX_SECONDS = 60

def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height 8-bit gray pixels, with a few bytes of data (a bomb's shape)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1024))
            + chunk(b"IEND", b""))


def dicom_bomb(path: Path) -> None:
    """A valid small DICOM whose header then declares 60,000 x 60,000 pixels."""
    import pydicom

    ds = pydicom.dcmread(path)
    ds.Rows, ds.Columns = 60000, 60000
    ds.save_as(path)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _link_outside(path: Path, outside: Path) -> None:
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, outside)
    path.unlink()
    path.symlink_to(outside)


def _det10(root: Path, text: str) -> None:
    F.write_det10(root)
    (root / "test.json").write_text(text)


def _det10_png(root: Path, data: bytes) -> None:
    F.write_det10(root)
    next(iter(sorted((root / "test_data").glob("*.png")))).write_bytes(data)


def _rsna_csv(root: Path, data: bytes) -> None:
    F.write_rsna(root)
    (root / "stage_2_train_labels.csv").write_bytes(data)


def _covid_json(root: Path, doc_or_text) -> None:
    F.write_covid(root)
    jsons = root / "covid_rural_annot" / "jpgs" / "jsons"
    first = sorted(jsons.glob("*.json"))[0]
    text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
    (jsons / f"ZZ-{first.name}").write_text(text)


def _chexlocalize_rle_bomb(root: Path) -> None:
    F.write_chexlocalize(root)
    seg_path = root / "CheXlocalize" / "gt_segmentations_val.json"
    segs = json.loads(seg_path.read_text())
    cxr = next(iter(segs))
    task = next(iter(segs[cxr]))
    # one run of 10^10 pixels: the counts sum to h * w, so only the pixel cap stops pycocotools' allocation
    segs[cxr][task] = {"size": [100000, 100000], "counts": _coco_number(10**10)}
    seg_path.write_text(json.dumps(segs))


def _coco_number(x: int) -> str:
    """One value in COCO's compressed RLE alphabet (5 bits a character, 0x20 = more follow)."""
    out = ""
    while True:
        c = x & 0x1F
        x >>= 5
        more = not (x == 0 and not (c & 0x10))
        out += chr(48 + (c | (0x20 if more else 0)))
        if not more:
            return out


def _ms_cxr_csv(root: Path, data: bytes) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_reader_ms_cxr import write_ms_cxr

    write_ms_cxr(root)
    (root / "MS_CXR_Local_Alignment_v1.1.0.csv").write_bytes(data)


def _embedded_bomb(root: Path) -> None:
    F.write_covid(root)
    jsons = root / "covid_rural_annot" / "jpgs" / "jsons"
    doc = F.labelme([], 60, 80, image_data=base64.b64encode(png_header_only(100000, 100000)).decode())
    (jsons / "ZZ-bomb.json").write_text(json.dumps(doc))


# name: (dataset, extra argv, make(root, tmp), expected text on stderr)
CASES = {
    "json nested 10^5 deep": ("chestx_det10", [], lambda r, t: _det10(r, "[" * 100_000 + "]" * 100_000), "nests 100000 levels deep"),
    "json integer of 5,000 digits": ("chestx_det10", [], lambda r, t: _det10(r, '[{"file_name": "a.png", "n": ' + "9" * 5000 + "}]"),
                                     "has an integer of 5000 digits"),
    "json key twice": ("chestx_det10", [], lambda r, t: _det10(r, '[{"file_name": "a.png", "file_name": "b.png"}]'), "twice"),
    "json NaN token": ("chestx_det10", [], lambda r, t: _det10(r, '[{"file_name": "a.png", "syms": ["Nodule"], "boxes": [[NaN, 1, 2, 3]]}]'),
                       "has the token NaN"),
    "json wrong type": ("chestx_det10", [], lambda r, t: _det10(r, '{"file_name": "a.png"}'), "expected a JSON list"),
    "json not utf-8": ("chestx_det10", [], lambda r, t: (F.write_det10(r), (r / "test.json").write_bytes(b'["caf\xe9"]')),
                       "is not UTF-8 text"),
    "json fifo": ("chestx_det10", [], lambda r, t: (F.write_det10(r), _fifo(r / "test.json")), "is not a regular file"),
    "json link outside the root": ("chestx_det10", [], lambda r, t: (F.write_det10(r), _link_outside(r / "test.json", t / "elsewhere" / "test.json")),
                                   "outside the dataset root"),
    "png link outside the root": ("chestx_det10", [], lambda r, t: (F.write_det10(r), _link_outside(sorted((r / "test_data").glob("*.png"))[0], t / "elsewhere" / "x.png")),
                                  "outside the dataset root"),
    "png fifo": ("chestx_det10", [], lambda r, t: (F.write_det10(r), _fifo(sorted((r / "test_data").glob("*.png"))[0])), "not a regular file"),
    "png declaring 49 Mpx": ("chestx_det10", [], lambda r, t: _det10_png(r, png_header_only(7000, 7000)), "the limit is 40,000,000 pixels"),
    "png declaring 10^10 px": ("chestx_det10", [], lambda r, t: _det10_png(r, png_header_only(100000, 100000)), "pixels"),
    "csv not utf-8": ("rsna_pneumonia", [], lambda r, t: _rsna_csv(r, b"patientId,x,y,width,height,Target\n\xff\xfe,,,,,0\n"), "is not UTF-8 text"),
    "csv field past the limit": ("rsna_pneumonia", [], lambda r, t: _rsna_csv(r, b"patientId,x,y,width,height,Target\n" + b"a" * 200_000 + b",,,,,0\n"),
                                 "row 2: not a valid CSV row (field larger than field limit"),
    "csv fifo": ("rsna_pneumonia", [], lambda r, t: (F.write_rsna(r), _fifo(r / "stage_2_train_labels.csv")), "is not a regular file"),
    "csv link outside the root": ("rsna_pneumonia", [], lambda r, t: (F.write_rsna(r), _link_outside(r / "stage_2_train_labels.csv", t / "elsewhere" / "l.csv")),
                                  "outside the dataset root"),
    "dicom declaring 60000 x 60000": ("rsna_pneumonia", [], lambda r, t: (F.write_rsna(r), dicom_bomb(sorted((r / "stage_2_train_images").glob("*.dcm"))[0])),
                                      "declares 60000 x 60000 pixels"),
    "dicom fifo": ("rsna_pneumonia", [], lambda r, t: (F.write_rsna(r), _fifo(sorted((r / "stage_2_train_images").glob("*.dcm"))[0])), "not a regular file"),
    "labelme deep": ("covid_rural", [], lambda r, t: _covid_json(r, "[" * 100_000 + "]" * 100_000), "nests 100000 levels deep"),
    "labelme size not an integer": ("covid_rural", [], lambda r, t: _covid_json(r, {"imageHeight": "60", "imageWidth": 80, "shapes": []}),
                                    "must be integers"),
    "labelme base64 png bomb": ("covid_rural", [], lambda r, t: _embedded_bomb(r), "embedded imageData"),
    "coco rle of 10^10 pixels": ("chexlocalize", ["--split", "val"], lambda r, t: _chexlocalize_rle_bomb(r), "exceeds 40,000,000 pixels"),
    "ms-cxr csv not utf-8": ("ms_cxr", [], lambda r, t: _ms_cxr_csv(r, b"dicom_id,category_name\n\x80\n"), "is not UTF-8 text"),
    "vindr csv field past the limit": ("vindr_cxr", [], lambda r, t: (F.write_vindr(r), (r / "annotations" / "annotations_test.csv").write_bytes(
        b"image_id,class_name,x_min,y_min,x_max,y_max\n\"" + b"x" * 200_000 + b"\",No finding,,,,\n")), "not a valid CSV row"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile-prepare")
    jobs = []
    for i, (name, (dataset, extra, make, _)) in enumerate(CASES.items()):
        case = base / f"case{i}"
        root = case / "root"
        root.mkdir(parents=True)
        make(root, case)
        jobs.append({"argv": [dataset, "--root", str(root), "--out", str(case / "out"), "--workers", "1", "--quiet",
                              "--grid", "16", "--image-size", "32", *extra],
                     "out": str(case / "stdout"), "err": str(case / "stderr"), "cap": MAX_SECONDS, "case": str(case)})
    results = run_forked(jobs, tmp_path_factory.mktemp("hostile-prepare-io"), entry="xbench.extract.prepare_cli:main",
                         prog="xbench-prepare", preload=("xbench.extract.prepare_cli", "xbench.extract.datasets.prepare",
                                                         "xbench.schemas"))
    out = {}
    for name, job, res in zip(CASES, jobs, results):
        res["case"] = Path(job["case"])
        out[name] = res
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_dataset_file_is_refused_within_budget(results, name):
    res = results[name]
    expected = CASES[name][3]
    assert res["rc"] == 2, (res["rc"], res["stderr"][-2000:])
    assert not res["killed"] and res["seconds"] < MAX_SECONDS, res["seconds"]
    assert res["maxrss_mib"] < MAX_RSS_MIB, res["maxrss_mib"]
    assert expected in res["stderr"], res["stderr"][-2000:]
    assert "Traceback" not in res["stderr"] and "unexpected" not in res["stderr"]
    assert all(line.startswith(("xbench-prepare: ", "  ")) for line in res["stderr"].splitlines()), res["stderr"]
    assert not (res["case"] / "out" / "gt.zarr").exists()  # nothing half-written


def test_a_link_inside_the_root_is_followed():
    """Links that stay inside the root are ordinary (a dataset reorganised with links): only leaving it is refused."""
    from xbench.extract.datasets._io import is_inside

    assert is_inside(__file__, [Path(__file__).parent])
    assert not is_inside(__file__, [Path(__file__).parent / "nowhere"])
