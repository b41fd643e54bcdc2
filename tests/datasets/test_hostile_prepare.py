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


# -- --allow-links-to: a dataset root whose images folder is a link to another disk ----------------------------
def _prepare(root: Path, out: Path, *allow: Path):
    from click.testing import CliRunner

    from xbench.extract.prepare_cli import main

    argv = ["chestx_det10", "--root", str(root), "--out", str(out), "--workers", "1", "--quiet", "--grid", "16",
            "--image-size", "32"]
    for a in allow:
        argv += ["--allow-links-to", str(a)]
    return CliRunner().invoke(main, argv)


def _images(out: Path) -> dict:
    import zarr

    g = zarr.open_group(str(out / "images.zarr"), mode="r")["chestx_det10"]
    return {k: np.asarray(g[k][...]) for k in ("case_id", "image", "orig_size")}


@pytest.fixture(scope="module")
def disks(tmp_path_factory):
    """base/plain: the dataset as downloaded, prepared (the reference); base/root: the same annotations with
    test_data/ a link to base/bigdisk/test_data (another disk)."""
    base = tmp_path_factory.mktemp("links")
    F.write_det10(base / "plain")
    ref = _prepare(base / "plain", base / "ref")
    assert ref.exit_code == 0, ref.output
    shutil.copytree(base / "plain", base / "root")
    (base / "bigdisk").mkdir()
    shutil.move(str(base / "root" / "test_data"), str(base / "bigdisk" / "test_data"))
    (base / "root" / "test_data").symlink_to(base / "bigdisk" / "test_data")
    (base / "bigdisk2").mkdir()  # a folder whose name starts like the allowed one
    return base


import numpy as np  # noqa: E402 - only the tests below read arrays


def test_a_linked_images_folder_is_refused_by_default(disks, tmp_path):
    res = _prepare(disks / "root", tmp_path / "out")
    assert res.exit_code == 2 and "outside the dataset root" in res.output and "--allow-links-to" in res.output
    assert not (tmp_path / "out" / "gt.zarr").exists()


def test_allowing_the_other_disk_prepares_what_the_real_folder_gives(disks, tmp_path):
    res = _prepare(disks / "root", tmp_path / "out", disks / "bigdisk")
    assert res.exit_code == 0, res.output
    got, want = _images(tmp_path / "out"), _images(disks / "ref")
    assert all(np.array_equal(got[k], want[k]) for k in want) and len(want["case_id"]) == 3
    # the allowed folder given with `..` and a trailing separator is the same folder
    res = _prepare(disks / "root", tmp_path / "out2", Path(f"{disks / 'bigdisk' / 'test_data'}/../"))
    assert res.exit_code == 0, res.output


def _variant(disks: Path, tmp: Path, target: Path) -> Path:
    """A copy of the annotations whose test_data/ is a link to ``target``."""
    root = tmp / "root"
    root.mkdir()
    shutil.copyfile(disks / "plain" / "test.json", root / "test.json")
    (root / "test_data").symlink_to(target)
    return root


def test_a_link_to_a_place_not_allowed_is_still_refused(disks, tmp_path):
    # allowed: a folder whose name is a prefix of the link's target's folder
    (disks / "bigdisk2" / "x").mkdir(exist_ok=True)
    root = _variant(disks, tmp_path, disks / "bigdisk")
    res = _prepare(root, tmp_path / "out", disks / "bigdisk2")
    assert res.exit_code == 2 and "outside the dataset root" in res.output
    # allowed: only a subfolder of where the images are
    sub = tmp_path / "images"
    shutil.copytree(disks / "bigdisk" / "test_data", sub)
    (sub / "inner").mkdir()
    root2 = tmp_path / "r2"
    root2.mkdir()
    shutil.copyfile(disks / "plain" / "test.json", root2 / "test.json")
    (root2 / "test_data").symlink_to(sub)
    res = _prepare(root2, tmp_path / "out2", sub / "inner")
    assert res.exit_code == 2 and "outside the dataset root" in res.output


def test_a_chain_of_links_is_judged_by_where_it_ends(disks, tmp_path):
    hop = tmp_path / "hop"
    hop.mkdir()
    (hop / "test_data").symlink_to(disks / "bigdisk" / "test_data")  # root/test_data -> hop/test_data -> bigdisk
    root = _variant(disks, tmp_path, hop / "test_data")
    assert _prepare(root, tmp_path / "a", disks / "bigdisk").exit_code == 0
    res = _prepare(root, tmp_path / "b", hop)  # the middle of the chain is not where the files are
    assert res.exit_code == 2 and "outside the dataset root" in res.output


def test_dot_dot_in_a_link_cannot_leave_the_allowed_folder(disks, tmp_path):
    outside = tmp_path / "secret"
    shutil.copytree(disks / "bigdisk" / "test_data", outside)
    # a link that names the allowed folder, then climbs out of it
    start = disks / "bigdisk" / "test_data"
    climb = "/".join([".."] * (len(start.resolve().parts) - 1))  # up to / from inside the allowed folder
    root = _variant(disks, tmp_path, Path(f"{start}/{climb}{outside.resolve()}"))
    assert os.path.realpath(root / "test_data") == str(outside.resolve())
    res = _prepare(root, tmp_path / "out", disks / "bigdisk")
    assert res.exit_code == 2 and "outside the dataset root" in res.output


def test_a_link_to_an_annotation_file_outside_is_judged_alike(disks, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(disks / "root", root, symlinks=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _link_outside(root / "test.json", elsewhere / "test.json")
    res = _prepare(root, tmp_path / "a", disks / "bigdisk")  # the images' disk is allowed, not the file's
    assert res.exit_code == 2 and "annotation file is a link" in res.output and "outside the dataset root" in res.output
    assert _prepare(root, tmp_path / "b", disks / "bigdisk", elsewhere).exit_code == 0  # repeatable


def test_an_allowed_folder_given_as_a_link_is_the_folder_it_leads_to(disks, tmp_path):
    alias = tmp_path / "alias"
    alias.symlink_to(disks / "bigdisk")
    assert _prepare(disks / "root", tmp_path / "a", alias).exit_code == 0
    other = tmp_path / "other"
    other.mkdir()
    decoy = tmp_path / "decoy"
    decoy.symlink_to(other)  # named like an allowed folder, leads elsewhere
    res = _prepare(disks / "root", tmp_path / "b", decoy)
    assert res.exit_code == 2 and "outside the dataset root" in res.output


@pytest.mark.parametrize("allow,says", [("missing", "no such folder"), ("/", "the file system's root"),
                                        ("file", "is a file")])
def test_allow_links_to_must_name_a_real_folder(disks, tmp_path, allow, says):
    (tmp_path / "file").write_text("x")
    target = Path(allow) if allow == "/" else tmp_path / allow
    res = _prepare(disks / "root", tmp_path / "out", target)
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "out").exists()
