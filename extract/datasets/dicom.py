"""DICOM decoding shared by the RSNA, SIIM and VinDr readers.

:func:`read_dicom` turns one file into the (H, W) uint8 image every reader returns, brighter =
denser. The display policy, in order:

1. **Reading.** ``pydicom.dcmread``; a file without the 128-byte preamble/``DICM`` marker is
   read again with ``force=True``. When the file meta lacks ``TransferSyntaxUID`` it is set from
   the encoding pydicom detected for the data set (implicit/explicit VR, little/big endian);
   encapsulated (compressed) pixel data without a transfer syntax cannot be decoded and is an
   :class:`ImageReadError`. So is a file with no ``PixelData``.
2. **Decoding.** ``ds.pixel_array`` through pydicom 3's pixel handlers: native data of any
   BitsAllocated/BitsStored, JPEG Baseline via Pillow, JPEG Lossless/Extended/JPEG-LS/JPEG
   2000 via pylibjpeg plugins when installed. Multi-frame: the first frame. RGB: luminance.
3. **Modality LUT** (RescaleSlope/Intercept or Modality LUT Sequence), always.
4. **VOI** (``voi="header"``, the default): the first window (WindowCenter/WindowWidth with
   VOILUTFunction LINEAR, LINEAR_EXACT or SIGMOID, per PS3.3 C.11.2.1.2) when the header has
   one; else the first VOI LUT Sequence item; else a linear min-max stretch of the image's
   own values (a constant image becomes 0). An 8-bit unsigned image with no rescale and no
   VOI is kept as stored (no stretch), so JPEG-baseline RSNA/SIIM files match their PNGs.
   ``voi="minmax"`` ignores the header's window and always stretches (except that 8-bit rule).
5. **MONOCHROME1** is inverted after windowing, so brighter always means denser.
6. Rounded to the nearest integer in [0, 255].
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from xbench.extract.datasets._io import MAX_DICOM_BYTES, ImageReadError, check_pixels
from xbench.extract.datasets.base import DatasetReader

__all__ = ["DicomReader", "ImageReadError", "dicom_attributes", "read_dicom", "read_dicom_size", "to_uint8"]

_VOI_POLICIES = ("header", "minmax")
# Item tag (FFFE,E000) in little endian: the first bytes of encapsulated pixel data.
_ITEM_TAG = b"\xfe\xff\x00\xe0"


def _check_file(path: Path) -> None:
    """A regular file of at most MAX_DICOM_BYTES (pydicom would block forever on a FIFO, and read a huge
    file whole); checked from the file's metadata, without reading it."""
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ImageReadError(f"{path}: DICOM file is missing") from None
    except OSError as e:
        raise ImageReadError(f"{path}: cannot read DICOM ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ImageReadError(f"{path}: not a regular file (a pipe, socket, device or folder)")
    if st.st_size > MAX_DICOM_BYTES:
        raise ImageReadError(f"{path}: the file is {st.st_size / 2**20:.0f} MiB; the limit for one DICOM is "
                             f"{MAX_DICOM_BYTES / 2**20:.0f} MiB")


def _dcmread(path: Path, **kwargs):
    import pydicom
    from pydicom.errors import InvalidDicomError

    _check_file(path)
    try:
        try:
            return pydicom.dcmread(path, **kwargs)
        except InvalidDicomError:
            # No preamble / 'DICM' marker (some VinDr files): read the bare data set.
            return pydicom.dcmread(path, force=True, **kwargs)
    except FileNotFoundError:
        raise ImageReadError(f"{path}: DICOM file is missing") from None
    except Exception as e:  # pydicom raises many types on corrupt files
        raise ImageReadError(f"{path}: cannot read DICOM ({type(e).__name__}: {e})") from None


def _ensure_transfer_syntax(ds, path: Path) -> None:
    """Give a data set read without file meta the transfer syntax its encoding implies."""
    from pydicom.dataset import FileMetaDataset
    from pydicom.uid import ExplicitVRBigEndian, ExplicitVRLittleEndian, ImplicitVRLittleEndian

    meta = getattr(ds, "file_meta", None)
    if meta is None:
        ds.file_meta = meta = FileMetaDataset()
    if "TransferSyntaxUID" in meta:
        return
    pixel = ds.get("PixelData")
    if pixel is not None and isinstance(pixel, (bytes, bytearray)) and bytes(pixel[:4]) == _ITEM_TAG:
        raise ImageReadError(f"{path}: compressed pixel data but no TransferSyntaxUID to say how")
    implicit, little = ds.original_encoding
    if implicit is None:  # pydicom could not tell; the common case for these files
        implicit, little = True, True
    if implicit:
        meta.TransferSyntaxUID = ImplicitVRLittleEndian
    else:
        meta.TransferSyntaxUID = ExplicitVRLittleEndian if little else ExplicitVRBigEndian


def read_dicom(path: Path | str, *, voi: str = "header") -> np.ndarray:
    """Decode a DICOM file to (H, W) uint8, brighter = denser, per the module's policy.

    Raises :class:`ImageReadError` (message names the file) for a missing, unreadable or
    pixel-less file, or pixel data no installed handler can decode.
    """
    path = Path(path)
    ds = _dcmread(path)
    _ensure_transfer_syntax(ds, path)
    return to_uint8(ds, source=str(path), voi=voi)


def read_dicom_size(path: Path | str) -> tuple[int, int]:
    """(Rows, Columns) from the header only, without decoding pixels."""
    path = Path(path)
    ds = _dcmread(path, stop_before_pixels=True)
    try:
        return int(ds.Rows), int(ds.Columns)
    except AttributeError:
        raise ImageReadError(f"{path}: header has no Rows/Columns") from None


def to_uint8(ds, *, source: str = "<dataset>", voi: str = "header") -> np.ndarray:
    """Apply the module's display policy to a pydicom Dataset: (H, W) uint8, brighter = denser."""
    from pydicom.pixels import apply_modality_lut

    if voi not in _VOI_POLICIES:
        from xbench.extract.datasets.base import ReaderOptionError

        raise ReaderOptionError(f"voi must be one of {_VOI_POLICIES}; got {voi!r}")
    if "PixelData" not in ds:
        raise ImageReadError(f"{source}: no PixelData element (header-only file)")
    try:  # every frame and sample is decoded at once: the header's counts bound the work before it starts
        rows, cols = int(ds.get("Rows", 0) or 0), int(ds.get("Columns", 0) or 0)
        frames = int(ds.get("NumberOfFrames", 1) or 1)
        samples = int(ds.get("SamplesPerPixel", 1) or 1)
    except (TypeError, ValueError):
        raise ImageReadError(f"{source}: Rows, Columns, NumberOfFrames or SamplesPerPixel is not a number") from None
    check_pixels(rows, cols, frames * max(samples, 1), source)
    try:
        arr = ds.pixel_array
    except Exception as e:
        tsuid = ds.file_meta.get("TransferSyntaxUID", "unknown")
        name = getattr(tsuid, "name", str(tsuid))
        raise ImageReadError(f"{source}: cannot decode pixel data ({name}): {type(e).__name__}: {e}") from None

    spp = int(ds.get("SamplesPerPixel", 1))
    frames = int(ds.get("NumberOfFrames", 1) or 1)
    if frames > 1:
        arr = arr[0]
    if spp == 3:
        # pydicom converts YBR to RGB by default; luminance as in ITU-R 601.
        rgb = arr.astype(np.float64)
        arr = rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114
        return np.clip(np.rint(arr), 0, 255).astype(np.uint8)
    if arr.ndim != 2:
        raise ImageReadError(f"{source}: expected a 2-D image, got pixel array shape {arr.shape}")

    has_rescale = "ModalityLUTSequence" in ds or (
        float(ds.get("RescaleSlope", 1) or 1) != 1.0 or float(ds.get("RescaleIntercept", 0) or 0) != 0.0
    )
    values = apply_modality_lut(arr, ds) if has_rescale else arr
    values = np.asarray(values, dtype=np.float64)

    y = None
    if voi == "header":
        y = _window(values, ds)
        if y is None:
            y = _voi_lut(values, ds)
    if y is None:
        bits = int(ds.get("BitsStored", 8) or 8)
        signed = int(ds.get("PixelRepresentation", 0) or 0) == 1
        if bits <= 8 and not signed and not has_rescale:
            y = values / 255.0
        else:
            y = _minmax(values)
    if str(ds.get("PhotometricInterpretation", "MONOCHROME2")).strip() == "MONOCHROME1":
        y = 1.0 - y
    return np.clip(np.rint(y * 255.0), 0, 255).astype(np.uint8)


def _first(value) -> float | None:
    """First value of a possibly multi-valued DICOM number, or None."""
    if value is None:
        return None
    try:
        return float(value[0]) if hasattr(value, "__len__") and not isinstance(value, str) else float(value)
    except (TypeError, ValueError, IndexError):
        return None


def _window(x: np.ndarray, ds) -> np.ndarray | None:
    """The header's first window mapped to [0, 1], or None when there is no usable window."""
    c, w = _first(ds.get("WindowCenter")), _first(ds.get("WindowWidth"))
    if c is None or w is None:
        return None
    func = str(ds.get("VOILUTFunction", "LINEAR") or "LINEAR").strip().upper()
    if func == "LINEAR_EXACT":
        if w <= 0:
            return None
        return np.clip((x - c) / w + 0.5, 0.0, 1.0)
    if func == "SIGMOID":
        if w <= 0:
            return None
        return 1.0 / (1.0 + np.exp(-4.0 * (x - c) / w))
    if w < 1:  # LINEAR requires width >= 1 (PS3.3 C.11.2.1.2.1)
        return None
    return np.clip((x - (c - 0.5)) / (w - 1.0) + 0.5, 0.0, 1.0) if w > 1 else (x > c - 0.5).astype(np.float64)


def _voi_lut(x: np.ndarray, ds) -> np.ndarray | None:
    """The first VOI LUT Sequence item applied and scaled to [0, 1], or None if absent."""
    seq = ds.get("VOILUTSequence")
    if not seq:
        return None
    from pydicom.pixels import apply_voi_lut

    # apply_voi_lut indexes the table with integers; the modality output may be float.
    out = np.asarray(apply_voi_lut(np.rint(x).astype(np.int64), ds, index=0, prefer_lut=True), dtype=np.float64)
    bits = int(seq[0].LUTDescriptor[2])
    top = max(float(2**bits - 1), float(out.max()) if out.size else 0.0)
    return out / top if top > 0 else np.zeros_like(out)


def _minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    if hi <= lo:
        return np.zeros_like(x)
    return (x - lo) / (hi - lo)



def dicom_attributes(paths, dataset: str) -> dict:
    """The case attributes of DICOM files (headers only, no pixels): ``sex`` from PatientSex (M/F, another value
    "O"), ``age`` from PatientAge ("057Y", "006M", ...; :func:`xbench.extract.datasets._io.native_age`) and
    ``view`` from ViewPosition (upper-cased); a tag the file lacks is missing. Raises ImageReadError for a file
    that cannot be read."""
    from xbench.extract.datasets._io import native_age
    from xbench.schemas.attributes import category, number

    sex, age, view = [], [], []
    for path in paths:
        ds = _dcmread(Path(path), stop_before_pixels=True, specific_tags=["PatientSex", "PatientAge", "ViewPosition"])
        s = str(getattr(ds, "PatientSex", "") or "").strip().upper()
        sex.append({"M": "M", "F": "F", "": ""}.get(s, "O"))
        age.append(native_age(str(getattr(ds, "PatientAge", "") or "")))
        view.append(str(getattr(ds, "ViewPosition", "") or "").strip().upper()[:64])
    return {"sex": category(sex, f"{dataset} DICOM PatientSex"), "age": number(age, f"{dataset} DICOM PatientAge"),
            "view": category(view, f"{dataset} DICOM ViewPosition")}


class DicomReader(DatasetReader):
    """A reader whose records' ``image_ref`` is the path of a DICOM file (RSNA, SIIM, VinDr): with its
    ``attributes`` option, the case attributes come from those files' headers."""

    def case_attributes(self, records) -> dict | None:
        """With ``attributes=true``: each case's sex, age and view position from its DICOM header
        (:func:`dicom_attributes`); None without the option."""
        if not self.options.get("attributes"):
            return None
        return dicom_attributes([Path(r.image_ref) for r in records], self.key)
