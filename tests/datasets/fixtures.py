"""Fixture writers: each dataset's exact native layout, written into a temporary folder.

Every writer returns what the tests need to compute expectations by hand (paths, arrays).
Images are small (64x64, or the 1024x1024 that a format fixes, e.g. SIIM RLE) so the whole
folder's tests stay quick. Nothing here is imported by the package.
"""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np

# ----------------------------------------------------------------------------------- DICOM


def gradient(h: int = 64, w: int = 64, lo: int = 0, hi: int = 255) -> np.ndarray:
    """A deterministic (h, w) int64 test pattern spanning [lo, hi] (a diagonal ramp plus a block)."""
    yy, xx = np.mgrid[0:h, 0:w]
    ramp = (yy + xx) / max(h + w - 2, 1)
    arr = lo + np.rint(ramp * (hi - lo)).astype(np.int64)
    arr[h // 4 : h // 2, w // 4 : w // 2] = lo + (hi - lo) // 3
    return arr


def _base_dataset(rows: int, cols: int):
    from pydicom.dataset import Dataset
    from pydicom.uid import generate_uid

    ds = Dataset()
    ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.7"  # Secondary Capture, as the SIIM files
    ds.SOPInstanceUID = generate_uid()
    ds.StudyInstanceUID = generate_uid()
    ds.SeriesInstanceUID = generate_uid()
    ds.Modality = "CR"
    ds.PatientID = "fixture"
    ds.Rows, ds.Columns = rows, cols
    ds.SamplesPerPixel = 1
    ds.PixelRepresentation = 0
    return ds


def _file_meta(ds, tsuid):
    from pydicom.dataset import FileMetaDataset

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = ds.SOPClassUID
    meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    meta.TransferSyntaxUID = tsuid
    return meta


def write_dicom(
    path: Path,
    pixels: np.ndarray,
    *,
    bits_stored: int = 8,
    photometric: str = "MONOCHROME2",
    kind: str = "native",
    window: tuple[float, float] | None = None,
    rescale: tuple[float, float] | None = None,
    pixel_data: bool = True,
) -> Path:
    """Write ``pixels`` (H, W) as a DICOM file.

    kind: "native" (explicit VR little endian, uncompressed), "jpeg" (JPEG Baseline 8-bit,
    encoded by Pillow and encapsulated, as the SIIM/RSNA files), or "nometa" (implicit VR, no
    preamble and no file meta: readable only with force=True). bits_stored > 8 allocates 16 bits.
    window: (center, width) written as WindowCenter/WindowWidth. rescale: (slope, intercept).
    pixel_data False writes a header-only file (the VinDr files that lack PixelData).
    """
    from pydicom.encaps import encapsulate
    from pydicom.uid import ExplicitVRLittleEndian, JPEGBaseline8Bit

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows, cols = pixels.shape
    ds = _base_dataset(rows, cols)
    ds.PhotometricInterpretation = photometric
    allocated = 8 if bits_stored <= 8 else 16
    ds.BitsAllocated, ds.BitsStored, ds.HighBit = allocated, bits_stored, bits_stored - 1
    if window is not None:
        ds.WindowCenter, ds.WindowWidth = window
    if rescale is not None:
        ds.RescaleSlope, ds.RescaleIntercept = rescale
    dtype = np.uint8 if allocated == 8 else np.uint16
    if kind == "jpeg":
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(pixels.astype(np.uint8), mode="L").save(buf, format="JPEG", quality=95)
        if pixel_data:
            ds.PixelData = encapsulate([buf.getvalue()])
            ds["PixelData"].VR = "OB"
        ds.file_meta = _file_meta(ds, JPEGBaseline8Bit)
        ds.save_as(path, enforce_file_format=True)
        return path
    if pixel_data:
        ds.PixelData = pixels.astype(dtype).tobytes()
        ds["PixelData"].VR = "OW" if allocated == 16 else "OB"
    if kind == "nometa":
        ds.save_as(path, implicit_vr=True, little_endian=True, enforce_file_format=False)
        return path
    if kind != "native":
        raise ValueError(kind)
    ds.file_meta = _file_meta(ds, ExplicitVRLittleEndian)
    ds.save_as(path, enforce_file_format=True)
    return path


def write_png(path: Path, pixels: np.ndarray, mode: str = "L") -> Path:
    """Write an 8-bit PNG (mode "L", or "RGBA" to mimic the odd NIH files)."""
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.fromarray(pixels.astype(np.uint8), mode="L")
    if mode != "L":
        im = im.convert(mode)
    im.save(path)
    return path


def write_jpg(path: Path, pixels: np.ndarray) -> Path:
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype(np.uint8), mode="L").save(path, format="JPEG", quality=95)
    return path


def _write_text(path: Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------ RSNA
RSNA_HEADER = "patientId,x,y,width,height,Target"


def write_rsna(root: Path, *, bad: bool = False) -> dict:
    """RSNA stage 2 layout. Good cases: two negatives, one image with 2 boxes, one with 1.

    With bad=True also: Target=2, Target=1 without a box, a box outside the image, a patient
    mixing Target 0/1, a negative with no DICOM (row numbers are in the returned dict).
    """
    rows = [
        "neg-0001,,,,,0",
        "pos-0002,100.0,200.0,50.0,80.0,1",
        "pos-0002,600.0,300.0,100.0,120.0,1",
        "neg-0003,,,,,0",
        "pos-0004,10.0,20.0,30.0,40.0,1",
    ]
    with_image = ["neg-0001", "pos-0002", "neg-0003", "pos-0004"]
    bad_rows = {}
    if bad:
        extra = {
            "bad-target": "bad-target,,,,,2",
            "bad-nobox": "bad-nobox,,,,,1",
            "bad-outside": "bad-outside,1000.0,10.0,100.0,20.0,1",
            "bad-mixed-a": "bad-mixed,,,,,0",
            "bad-mixed-b": "bad-mixed,5.0,5.0,10.0,10.0,1",
            "bad-noimage": "bad-noimage,,,,,0",
        }
        for name, line in extra.items():
            rows.append(line)
            bad_rows[name] = len(rows) + 1  # +1: the header is line 1
        with_image += ["bad-target", "bad-nobox", "bad-outside", "bad-mixed"]
    _write_text(root / "stage_2_train_labels.csv", RSNA_HEADER + "\n" + "\n".join(rows) + "\n")
    img = gradient(1024, 1024)
    for i, pid in enumerate(with_image):
        kind = "jpeg" if i % 2 == 0 else "native"
        write_dicom(root / "stage_2_train_images" / f"{pid}.dcm", img, kind=kind)
    return {"bad_rows": bad_rows, "image": img}


# ------------------------------------------------------------------------------------ SIIM
def mask_to_relative_rle(mask: np.ndarray) -> str:
    """Independent encoder: (H, W) bool -> SIIM relative column-major RLE ('-1' when empty).

    Walks columns in the outer loop as the official mask2rle does (x outer, y inner).
    """
    flat = mask.T.reshape(-1).astype(np.int8)
    values, pos, last_end = [], 0, 0
    n = flat.size
    while pos < n:
        if flat[pos]:
            start = pos
            while pos < n and flat[pos]:
                pos += 1
            values += [start - last_end, pos - start]
            last_end = pos
        else:
            pos += 1
    return " ".join(map(str, values)) if values else "-1"


def siim_masks() -> dict[str, list[np.ndarray]]:
    """Instance masks (1024x1024 bool) of the SIIM fixture's positive images."""
    a = np.zeros((1024, 1024), bool)
    a[100:180, 700:760] = True  # upper right, a wedge-ish block
    b1 = np.zeros((1024, 1024), bool)
    b1[50:90, 100:130] = True
    b2 = np.zeros((1024, 1024), bool)
    b2[85:140, 120:200] = True  # overlaps b1: the union must not double count
    return {"1.2.276.0.7230010.3.1.4.111": [a], "1.2.276.0.7230010.3.1.4.222": [b1, b2]}


def write_siim(root: Path, *, stage: int = 1, bad: bool = False) -> dict:
    """SIIM layout: stage 1 'train-rle.csv' (header 'ImageId, EncodedPixels', values with a
    leading space) or stage 2 'stage_2_train.csv' (no spaces). Two negatives (' -1' and '-1'),
    one single-instance positive, one two-instance positive (rows not adjacent), and one image
    whose RLE is the hand-worked '5 3 2 4' (column 0, rows 5-7 and 10-13).
    """
    masks = siim_masks()
    sp = " " if stage == 1 else ""
    hand = "1.2.276.0.7230010.3.1.4.333"
    rows = [
        ("1.2.276.0.7230010.3.1.4.901", " -1"),
        ("1.2.276.0.7230010.3.1.4.111", sp + mask_to_relative_rle(masks["1.2.276.0.7230010.3.1.4.111"][0])),
        ("1.2.276.0.7230010.3.1.4.222", sp + mask_to_relative_rle(masks["1.2.276.0.7230010.3.1.4.222"][0])),
        ("1.2.276.0.7230010.3.1.4.902", "-1"),
        ("1.2.276.0.7230010.3.1.4.222", sp + mask_to_relative_rle(masks["1.2.276.0.7230010.3.1.4.222"][1])),
        (hand, sp + "5 3 2 4"),
    ]
    ids = ["1.2.276.0.7230010.3.1.4.901", "1.2.276.0.7230010.3.1.4.111", "1.2.276.0.7230010.3.1.4.222",
           "1.2.276.0.7230010.3.1.4.902", hand]
    bad_rows = {}
    if bad:
        extra = {
            "odd": ("bad.odd", sp + "5 3 2"),
            "nonint": ("bad.nonint", sp + "5 3.5 2 4"),
            "pastend": ("bad.pastend", sp + f"{1024 * 1024 - 2} 5"),
            "negative": ("bad.negative", sp + "5 -3"),
            "empty": ("bad.empty", ""),
            "mixed-a": ("bad.mixed", " -1"),
            "mixed-b": ("bad.mixed", sp + "5 3"),
            "noimage": ("bad.noimage", sp + "5 3"),
        }
        for name, row in extra.items():
            rows.append(row)
            bad_rows[name] = len(rows) + 1
        ids += ["bad.odd", "bad.nonint", "bad.pastend", "bad.negative", "bad.empty", "bad.mixed"]
    header = "ImageId, EncodedPixels" if stage == 1 else "ImageId,EncodedPixels"
    name = "train-rle.csv" if stage == 1 else "stage_2_train.csv"
    _write_text(root / name, header + "\n" + "\n".join(f"{i},{v}" for i, v in rows) + "\n")
    img = gradient(1024, 1024)
    for k, image_id in enumerate(ids):
        folder = root / ("dicom-images-train" if k % 2 == 0 else "dicom-images-test") / f"1.2.{k}" / f"1.3.{k}"
        write_dicom(folder / f"{image_id}.dcm", img, kind="jpeg")
    return {"masks": masks, "hand": hand, "bad_rows": bad_rows, "csv": name}


# --------------------------------------------------------------------------------- Det10
def write_det10(root: Path, *, bad: bool = False) -> dict:
    """ChestX-Det10 layout: test.json + test_data/*.png (1024x1024) and a small train split.

    test: 36204 (two Nodule boxes and an Effusion box), 36205 (no finding: empty syms/boxes),
    36206 (Fibrosis). With bad=True: unknown sym, syms/boxes length mismatch, a box past the
    image, a non-numeric box, a duplicated file_name, an image that is missing.
    """
    test = [
        {"file_name": "36204.png", "syms": ["Nodule", "Effusion", "Nodule"],
         "boxes": [[100, 120, 140, 170], [600, 700, 900, 1000], [300, 310, 330, 350]]},
        {"file_name": "36205.png", "syms": [], "boxes": []},
        {"file_name": "36206.png", "syms": ["Fibrosis"], "boxes": [[1, 1, 1022, 400]]},
    ]
    with_image = ["36204", "36205", "36206"]
    bad_items = {}
    if bad:
        extra = {
            "unknown": {"file_name": "40001.png", "syms": ["Tuberculosis"], "boxes": [[1, 1, 5, 5]]},
            "mismatch": {"file_name": "40002.png", "syms": ["Mass", "Mass"], "boxes": [[1, 1, 5, 5]]},
            "outside": {"file_name": "40003.png", "syms": ["Mass"], "boxes": [[10, 10, 1100, 50]]},
            "notnumbers": {"file_name": "40004.png", "syms": ["Mass"], "boxes": [["a", 1, 5, 5]]},
            "duplicate": {"file_name": "36206.png", "syms": [], "boxes": []},
            "noimage": {"file_name": "40005.png", "syms": [], "boxes": []},
        }
        for name, item in extra.items():
            bad_items[name] = len(test)
            test.append(item)
        with_image += ["40001", "40002", "40003", "40004"]
    train = [{"file_name": "36199.png", "syms": ["Pneumothorax"], "boxes": [[700, 100, 900, 400]]}]
    _write_text(root / "test.json", json.dumps(test))
    _write_text(root / "train.json", json.dumps(train))
    img = gradient(1024, 1024)
    for stem in with_image:
        write_png(root / "test_data" / f"{stem}.png", img)
    write_png(root / "train_data" / "36199.png", img)
    return {"bad_items": bad_items, "image": img}


# ----------------------------------------------------------------------------------- NIH
NIH_BBOX_HEADER = "Image Index,Finding Label,Bbox [x,y,w,h],,,"
NIH_ENTRY_HEADER = ("Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age,Patient Gender,"
                    "View Position,OriginalImage[Width,Height],OriginalImagePixelSpacing[x,y]")


def write_nih(root: Path, *, bad: bool = False) -> dict:
    """NIH layout: BBox_List_2017.csv (odd header, some rows with trailing commas), Data_Entry,
    images/ (one RGBA PNG) and images_002/images/ (the Kaggle folder form).

    bbox: 00000001_000 Infiltrate + Effusion; 00000002_000 two Nodule boxes.
    Data_Entry: 00000001_000 'Effusion|Infiltration|Emphysema'; 00000002_000 'Nodule|Mass';
    00000003_000 and 00000004_000 'No Finding'; 00000005_000 'Atelectasis'.
    """
    rows = [
        "00000001_000.png,Infiltrate,100.5,200.25,300.0,150.0",
        "00000001_000.png,Effusion,600,700,200,250,,,",
        "00000002_000.png,Nodule,50,60,20,30",
        "00000002_000.png,Nodule,500,400,25,25,,,",
    ]
    bad_rows = {}
    if bad:
        extra = {
            "unknown": "00000011_000.png,Infection,10,10,10,10",
            "short": "00000012_000.png,Mass,10,10",
            "outside": "00000013_000.png,Mass,1000,10,100,10",
            "notnumber": "00000014_000.png,Mass,x,10,10,10",
            "noimage": "00000015_000.png,Mass,10,10,10,10",
        }
        for name, line in extra.items():
            rows.append(line)
            bad_rows[name] = len(rows) + 1
    _write_text(root / "BBox_List_2017.csv", NIH_BBOX_HEADER + "\n" + "\n".join(rows) + "\n")
    entry = [
        "00000001_000.png,Effusion|Infiltration|Emphysema,0,1,58,M,PA,2682,2749,0.143,0.143",
        "00000002_000.png,Nodule|Mass,0,2,81,M,PA,2500,2048,0.168,0.168",
        "00000003_000.png,No Finding,0,3,81,F,PA,2500,2048,0.168,0.168",
        "00000004_000.png,No Finding,0,4,40,F,AP,2500,2048,0.168,0.168",
        "00000005_000.png,Atelectasis,0,5,30,M,PA,2500,2048,0.168,0.168",
    ]
    _write_text(root / "Data_Entry_2017_v2020.csv", NIH_ENTRY_HEADER + "\n" + "\n".join(entry) + "\n")
    img = gradient(1024, 1024)
    write_png(root / "images" / "00000001_000.png", img, mode="RGBA")
    for stem in ["00000002_000", "00000003_000", "00000004_000", "00000005_000"]:
        write_png(root / "images_002" / "images" / f"{stem}.png", img)
    if bad:
        for stem in ["00000011_000", "00000012_000", "00000013_000", "00000014_000"]:
            write_png(root / "images" / f"{stem}.png", img)
    return {"bad_rows": bad_rows, "image": img}


# --------------------------------------------------------------------------------- VinDr
VINDR_IDS = {
    "a": "0a1b2c3d4e5f60718293a4b5c6d7e8f9",
    "b": "1b2c3d4e5f60718293a4b5c6d7e8f90a",
    "c": "2c3d4e5f60718293a4b5c6d7e8f90a1b",
    "d": "3d4e5f60718293a4b5c6d7e8f90a1b2c",
    "e": "4e5f60718293a4b5c6d7e8f90a1b2c3d",
    "f": "5f60718293a4b5c6d7e8f90a1b2c3d4e",
}


def write_vindr(root: Path, *, bad: bool = False) -> dict:
    """VinDr-CXR layout with 48x64 (h x w) .dicom files covering the DICOM pitfalls.

    test (no rad_id column): a = 12-bit MONOCHROME1, Cardiomegaly + two Pleural effusion boxes;
    b = no file meta (force=True), 'No finding' with empty coordinates; c = JPEG baseline,
    Nodule/Mass. train (rad_id): d = R1 and R2 each box Aortic enlargement, R3 No finding;
    e = R1, R2, R3 No finding; f = R4 Lung Opacity, R5 No finding, R1 Nodule/Mass.
    With bad=True (test): an unknown class, a local class without coordinates, a box past the
    image, a missing DICOM, and a header-only DICOM (no PixelData; readable header).
    """
    ids = VINDR_IDS
    h, w = 48, 64
    test = [
        f"{ids['a']},Cardiomegaly,20,25,45,40",
        f"{ids['a']},Pleural effusion,0,30,12,47.5",
        f"{ids['a']},Pleural effusion,50,30,64,48",
        f"{ids['b']},No finding,,,,",
        f"{ids['c']},Nodule/Mass,10.5,10.5,14.5,16",
    ]
    bad_rows = {}
    if bad:
        extra = {
            "unknown": "ffffffffffffffffffffffffffffff01,Lung tumor,1,1,5,5",
            "nocoords": "ffffffffffffffffffffffffffffff02,Nodule/Mass,,,,",
            "outside": "ffffffffffffffffffffffffffffff03,Nodule/Mass,10,10,80,20",
            "noimage": "ffffffffffffffffffffffffffffff04,No finding,,,,",
            "nopixels": "ffffffffffffffffffffffffffffff05,No finding,,,,",
        }
        for name, line in extra.items():
            test.append(line)
            bad_rows[name] = len(test) + 1
    train = [
        f"{ids['d']},R1,Aortic enlargement,30,5,40,15",
        f"{ids['d']},R2,Aortic enlargement,32,4,44,16",
        f"{ids['d']},R3,No finding,,,,",
        f"{ids['e']},R1,No finding,,,,",
        f"{ids['e']},R2,No finding,,,,",
        f"{ids['e']},R3,No finding,,,,",
        f"{ids['f']},R4,Lung Opacity,5,5,20,20",
        f"{ids['f']},R5,No finding,,,,",
        f"{ids['f']},R1,Nodule/Mass,40,30,50,40",
    ]
    _write_text(root / "annotations" / "annotations_test.csv",
                "image_id,class_name,x_min,y_min,x_max,y_max\n" + "\n".join(test) + "\n")
    _write_text(root / "annotations" / "annotations_train.csv",
                "image_id,rad_id,class_name,x_min,y_min,x_max,y_max\n" + "\n".join(train) + "\n")
    g8 = gradient(h, w)
    g12 = gradient(h, w, lo=100, hi=4000)
    write_dicom(root / "test" / f"{ids['a']}.dicom", g12, bits_stored=12, photometric="MONOCHROME1")
    write_dicom(root / "test" / f"{ids['b']}.dicom", g8, kind="nometa")
    write_dicom(root / "test" / f"{ids['c']}.dicom", g8, kind="jpeg")
    for k in "def":
        write_dicom(root / "train" / f"{ids[k]}.dicom", g8)
    if bad:
        for n in ("01", "02", "03"):
            write_dicom(root / "test" / f"ffffffffffffffffffffffffffffff{n}.dicom", g8)
        write_dicom(root / "test" / "ffffffffffffffffffffffffffffff05.dicom", g8, pixel_data=False)
    return {"ids": ids, "size": (h, w), "g8": g8, "g12": g12, "bad_rows": bad_rows}


# -------------------------------------------------------------------------- CheXlocalize
CHEXPERT_COLUMNS = ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", "No Finding",
                    "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
                    "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion",
                    "Pleural Other", "Fracture", "Support Devices"]
CHEXLOCALIZE_TASKS = ["Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Lesion", "Airspace Opacity", "Edema",
                      "Consolidation", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Support Devices"]


def coco_rle(mask: np.ndarray) -> dict:
    """Encode an (H, W) bool mask the way the CheXlocalize files store it (counts as str)."""
    from pycocotools import mask as coco_mask

    rle = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode()}


def chexlocalize_masks(h: int = 48, w: int = 64) -> dict[str, np.ndarray]:
    """Masks (h, w) of the first CXR: Cardiomegaly (a block) and Airspace Opacity (two blobs)."""
    cardio = np.zeros((h, w), bool)
    cardio[20:40, 22:44] = True
    opacity = np.zeros((h, w), bool)
    opacity[5:15, 3:12] = True
    opacity[30:34, 50:60] = True
    return {"Cardiomegaly": cardio, "Airspace Opacity": opacity}


def write_chexlocalize(root: Path, *, bad: bool = False) -> dict:
    """CheXlocalize val layout: CheXpert/val_labels.csv, CheXpert/val/<p>/<s>/<v>.jpg (48x64),
    CheXlocalize/gt_segmentations_val.json with all 10 task keys per listed CXR.

    p1 = patient64541_study1_view1_frontal: CSV Cardiomegaly/Lung Opacity 1.0, Pneumonia -1.0,
    masks for Cardiomegaly and Airspace Opacity, 8 all-zero masks.
    p2 = patient64542_study1_view1_frontal: CSV Support Devices 1.0 but an all-zero mask; Edema 0.0
    but a non-empty mask (forces Edema to 1). p3 = patient64542_study1_view2_lateral: CSV only.
    """
    h, w = 48, 64
    masks = chexlocalize_masks(h, w)
    zero = np.zeros((h, w), bool)

    # the native demographic columns (read only with the reader's attributes=true; tests/datasets/
    # test_reader_chexlocalize.py reads them back exactly): a lateral view has no AP/PA in CheXpert
    demo = {"patient64541/study1/view1_frontal.jpg": ["Female", "72", "Frontal", "AP"],
            "patient64542/study1/view2_lateral.jpg": ["Unknown", "", "Lateral", ""]}

    def row(path: str, **values: str) -> str:
        vals = {c: "0.0" for c in CHEXPERT_COLUMNS[5:]}
        vals.update({k.replace("_", " "): v for k, v in values.items()})
        tail = "/".join(path.split("/")[-3:])
        meta = [path, *demo.get(tail, ["Male", "60", "Frontal" if "frontal" in path else "Lateral", "PA"])]
        return ",".join(meta + [vals[c] for c in CHEXPERT_COLUMNS[5:]])

    p1, p2, p3 = ("patient64541/study1/view1_frontal.jpg", "patient64542/study1/view1_frontal.jpg",
                  "patient64542/study1/view2_lateral.jpg")
    lines = [
        row("CheXpert-v1.0/valid/" + p1, Cardiomegaly="1.0", Lung_Opacity="1.0", Pneumonia="-1.0"),
        row("CheXpert-v1.0/valid/" + p2, Support_Devices="1.0"),
        row("CheXpert-v1.0/valid/" + p3, Support_Devices="1.0", Fracture=""),
    ]
    edema = np.zeros((h, w), bool)
    edema[10:12, 10:12] = True
    segs = {
        "patient64541_study1_view1_frontal": {t: coco_rle(masks.get(t, zero)) for t in CHEXLOCALIZE_TASKS},
        "patient64542_study1_view1_frontal": {t: coco_rle(edema if t == "Edema" else zero) for t in CHEXLOCALIZE_TASKS},
    }
    bad_keys = {}
    if bad:
        p4, p5, p6, p7 = (f"patient9000{i}/study1/view1_frontal.jpg" for i in range(4))
        lines += [row("CheXpert-v1.0/valid/" + p4), row("CheXpert-v1.0/valid/" + p5),
                  row("CheXpert-v1.0/valid/" + p6, Edema="2"), row("CheXpert-v1.0/valid/" + p7)]
        # File line of the Edema="2" row: data index len(lines) - 2, plus 2 (header is line 1).
        bad_keys["label_row"] = len(lines)
        malformed = {t: coco_rle(zero) for t in CHEXLOCALIZE_TASKS}
        malformed["Edema"] = {"size": [h, w], "counts": "zzz"}
        unknown = {t: coco_rle(zero) for t in CHEXLOCALIZE_TASKS}
        unknown["Nodule"] = coco_rle(zero)
        segs["patient90000_study1_view1_frontal"] = malformed
        segs["patient90001_study1_view1_frontal"] = unknown
        segs["patient99999_study1_view1_frontal"] = {t: coco_rle(zero) for t in CHEXLOCALIZE_TASKS}
        # patient90003 has a CSV row and no JPG.
    _write_text(root / "CheXpert" / "val_labels.csv", ",".join(CHEXPERT_COLUMNS) + "\n" + "\n".join(lines) + "\n")
    _write_text(root / "CheXlocalize" / "gt_segmentations_val.json", json.dumps(segs))
    img = gradient(h, w)
    paths = [p1, p2, p3] + ([f"patient9000{i}/study1/view1_frontal.jpg" for i in range(3)] if bad else [])
    for p in paths:
        write_jpg(root / "CheXpert" / "val" / p, img)
    return {"masks": masks, "edema": edema, "size": (h, w), "image": img, "bad": bad_keys}


# ------------------------------------------------------------------------------ COVID rural
def labelme(shapes: list[tuple[str, list]], h: int, w: int, image_data: str | None = None, stem: str = "") -> dict:
    """A LabelMe 4.5.6 document with polygon shapes [(label, [[x, y], ...]), ...]."""
    return {
        "version": "4.5.6", "flags": {},
        "shapes": [{"label": lab, "points": pts, "group_id": None, "shape_type": "polygon", "flags": {}}
                   for lab, pts in shapes],
        "imagePath": f"../{stem}.jpg", "imageData": image_data, "imageHeight": h, "imageWidth": w,
    }


def write_covid(root: Path, *, bad: bool = False) -> dict:
    """COVID-rural layout under covid_rural_annot/jpgs (60x80 JPGs; LabelMe JSONs in jsons/).

    A: both lungs + consolidation + groud_glass_opacity (label 1, two polygons);
    B: lungs only (label 0); C: no JPG, image embedded as imageData, consolidation (label 1).
    With bad=True: an unknown label, a 2-point polygon, a point outside the image, no image at
    all, and a file that is not JSON.
    """
    h, w = 60, 80
    base = root / "covid_rural_annot" / "jpgs"
    lung_r = [[5, 5], [35, 5], [35, 55], [5, 55]]
    lung_l = [[45, 5], [75, 5], [75, 55], [45, 55]]
    cons = [[10.0, 10.0], [30.0, 10.0], [30.0, 20.0], [10.0, 20.0]]
    ggo = [[50.5, 30.5], [70.0, 30.5], [60.0, 50.0]]
    img = gradient(h, w)
    buf = io.BytesIO()
    from PIL import Image

    Image.fromarray(img.astype(np.uint8), mode="L").save(buf, format="PNG")
    embedded = base64.b64encode(buf.getvalue()).decode()
    docs = {
        "COVID-19-AR-16406488_01-15-2012-XR": labelme(
            [("right_lung", lung_r), ("left_lung", lung_l), ("consolidation", cons), ("groud_glass_opacity", ggo)], h, w),
        "COVID-19-AR-16406500_02-01-2012-XR": labelme([("right_lung", lung_r), ("left_lung", lung_l)], h, w),
        "COVID-19-AR-16406511_03-03-2012-XR": labelme([("consolidation", cons)], h, w, image_data=embedded),
    }
    with_jpg = ["COVID-19-AR-16406488_01-15-2012-XR", "COVID-19-AR-16406500_02-01-2012-XR"]
    if bad:
        docs.update({
            "BAD-unknown": labelme([("right_lung", lung_r), ("nodule", cons)], h, w),
            "BAD-twopoints": labelme([("consolidation", [[1, 1], [5, 5]])], h, w),
            "BAD-outside": labelme([("consolidation", [[1, 1], [90, 5], [5, 5]])], h, w),
            "BAD-noimage": labelme([("consolidation", cons)], h, w),
        })
        with_jpg += ["BAD-unknown", "BAD-twopoints", "BAD-outside"]
        _write_text(base / "jsons" / "BAD-notjson.json", "{not json")
    for stem, doc in docs.items():
        _write_text(base / "jsons" / f"{stem}.json", json.dumps(doc))
    for stem in with_jpg:
        write_jpg(base / f"{stem}.jpg", img)
    return {"image": img, "size": (h, w), "cons": cons, "ggo": ggo}


# ------------------------------------------------------------------------------ lesions
def components8(m: np.ndarray) -> list[list[tuple[int, int]]]:
    """8-connected components of a small bool mask by breadth-first flood fill (independent of scipy)."""
    seen = np.zeros(m.shape, bool)
    comps = []
    for r0, c0 in zip(*np.nonzero(m)):
        if seen[r0, c0]:
            continue
        seen[r0, c0] = True
        queue, comp = [(r0, c0)], []
        while queue:
            r, c = queue.pop()
            comp.append((r, c))
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    rr, cc = r + dr, c + dc
                    if 0 <= rr < m.shape[0] and 0 <= cc < m.shape[1] and m[rr, cc] and not seen[rr, cc]:
                        seen[rr, cc] = True
                        queue.append((rr, cc))
        comps.append(comp)
    return comps
