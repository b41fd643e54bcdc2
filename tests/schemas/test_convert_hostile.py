"""Hostile sources through ``xbench-convert`` as users run it (issue 25): HDF5, npz folders, COCO results and
marks JSON crafted to read outside the source, to hang, to inflate, or to forge a printed line.

Each crafted source goes to ``xbench-convert SOURCE --out OUT --max-memory 1GiB --timeout 60`` in its own
process (forked from one driver that has imported the converter once, as in test_hostile.py), and each must
exit 2 with exactly one problem line naming the cause (not the watchdog's line: the checks refuse before
decoding), no traceback, within 20 s and 1 GiB, and with nothing written beside OUT.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from forked import run_forked

from hostile import deflate_bomb, write_zip

BUDGET = ["--max-memory", "1GiB", "--timeout", "60"]
MAX_RSS_MIB = 1024
MAX_SECONDS = 20
CLASSES = ["Cardiomegaly", "Nodule", "Pneumothorax"]
IDS = [f"case-{i:02d}" for i in range(6)]

def run_all(jobs: list[dict], tmp_path: Path) -> list[dict]:
    return run_forked(jobs, tmp_path, entry="xbench.schemas.cli:convert_cmd", prog="xbench-convert",
                      cap=MAX_SECONDS * 3, preload=("h5py", "zarr", "xbench.schemas.cli", "xbench.schemas.convert",
                                                    "xbench.schemas.convert_boxes"))


# -- valid bases, changed as little as each attack needs ---------------------------------------------------
def h5_base(path: Path, **override) -> Path:
    """A valid HDF5 source; ``override``: dataset name -> callable(group) that writes it instead."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w", libver="latest") as f:
        f.attrs["model"], f.attrs["method"] = "h5-model", "similarity"
        g = f.create_group("phantom")
        g.attrs["classes"] = CLASSES
        g.attrs["score_kind"] = "logit"
        arrays = {"case_id": lambda g: g.create_dataset("case_id", data=np.array([i.encode() for i in IDS])),
                  "scores": lambda g: g.create_dataset("scores", data=rng.normal(size=(6, 3))),
                  "saliency": lambda g: g.create_dataset("saliency", data=rng.random((6, 3, 4, 4)))}
        arrays.update(override)
        for name, write in arrays.items():
            write(g)
    return path


def other_h5(d: Path) -> Path:
    """Another team's file: what an attack tries to pull in."""
    path = d / "other.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("saliency", data=np.full((6, 3, 4, 4), 7.0))
        f.create_group("phantom")
    return path


def npz_base(d: Path) -> Path:
    src = d / "npz"
    (src / "phantom").mkdir(parents=True)
    (src / "meta.json").write_text(json.dumps({"model": "npz-model", "method": "x",
                                               "datasets": {"phantom": {"classes": CLASSES}}}))
    for i, c in enumerate(IDS):
        np.savez(src / "phantom" / f"{c}.npz", scores=np.zeros(3) + i, saliency=np.zeros((3, 4, 4)) + i)
    return src


def images_store(d: Path) -> Path:
    from xbench.schemas import ImagesWriter

    images = d / "images.zarr"
    w = ImagesWriter(images, "phantom", case_ids=IDS, classes=CLASSES, image_size=8, cases_per_block=6)
    w.write_block(0, np.zeros((6, 8, 8), np.uint8), np.full((6, 2), 512, np.int32))
    w.finish()
    return images


# -- the attacks: name -> (make(d) -> extra argv before the budget, expected fragment of the one line) ------
def _h5(d: Path, **override) -> list[str]:
    return [str(h5_base(d / "src.h5", **override))]


def h5_external_link_dataset(d):
    other = other_h5(d)
    return _h5(d, saliency=lambda g: g.__setitem__("saliency", h5py.ExternalLink(str(other), "/saliency")))


def h5_external_link_group(d):
    other = other_h5(d)
    src = h5_base(d / "src.h5")
    with h5py.File(src, "a") as f:
        f["pneumonia"] = h5py.ExternalLink(str(other), "/phantom")
    return [str(src)]


def h5_soft_link_loop(d):
    def loop(g):
        g["scores"] = h5py.SoftLink("/phantom/a")
        g["a"] = h5py.SoftLink("/phantom/scores")
    return _h5(d, scores=loop)


def h5_soft_link_through_external(d):
    other = other_h5(d)
    src = h5_base(d / "src.h5", saliency=lambda g: g.__setitem__("saliency", h5py.SoftLink("/phantom/ext/saliency")))
    with h5py.File(src, "a") as f:
        f["phantom/ext"] = h5py.ExternalLink(str(other), "/")  # a member never read by name: only via the soft link
    return [str(src)]


def h5_soft_link_dangling(d):
    return _h5(d, saliency=lambda g: g.__setitem__("saliency", h5py.SoftLink("/nowhere/saliency")))


def h5_external_storage(d):
    raw = d / "raw.bin"
    raw.write_bytes(np.full(6 * 3 * 16, 7.0).tobytes())
    return _h5(d, saliency=lambda g: g.create_dataset("saliency", shape=(6, 3, 4, 4), dtype="f8",
                                                      external=[(str(raw), 0, 6 * 3 * 16 * 8)]))


def h5_virtual(d):
    other = other_h5(d)

    def virtual(g):
        layout = h5py.VirtualLayout(shape=(6, 3, 4, 4), dtype="f8")
        layout[:] = h5py.VirtualSource(str(other), "saliency", shape=(6, 3, 4, 4))
        g.create_virtual_dataset("saliency", layout)
    return _h5(d, saliency=virtual)


def h5_vlen(d):
    def vlen(g):
        ds = g.create_dataset("saliency", shape=(6,), dtype=h5py.vlen_dtype(np.float32))
        for i in range(6):
            ds[i] = np.arange(i + 1, dtype=np.float32)
    return _h5(d, saliency=vlen)


def h5_compound(d):
    return _h5(d, scores=lambda g: g.create_dataset("scores", data=np.zeros((6, 3), dtype=[("a", "f4"), ("b", "f4")])))


def h5_reference(d):
    def refs(g):
        ds = g.create_dataset("case_id", shape=(6,), dtype=h5py.ref_dtype)
        ds[0] = g.file.ref
    return _h5(d, case_id=refs)


def h5_enum(d):
    dt = h5py.enum_dtype({"low": 0, "high": 1}, basetype="i1")
    return _h5(d, scores=lambda g: g.create_dataset("scores", data=np.zeros((6, 3), "i1"), dtype=dt))


def h5_opaque(d):
    return _h5(d, saliency=lambda g: g.create_dataset("saliency", data=np.zeros((6, 3, 4, 4), dtype="V8")))


def h5_lzf(d):
    return _h5(d, saliency=lambda g: g.create_dataset("saliency", data=np.zeros((6, 3, 4, 4)), compression="lzf"))


def h5_deflate_bomb(d):
    """One chunk rewritten as 256 MiB of zeros in deflate: declared 384 bytes, HDF5's own filter would grow
    its buffer to the end."""
    def bomb(g):
        ds = g.create_dataset("saliency", data=np.zeros((6, 3, 4, 4)), compression="gzip", chunks=(1, 3, 4, 4))
        ds.id.write_direct_chunk((0, 0, 0, 0), deflate_bomb(256, wbits=15))
    return _h5(d, saliency=bomb)


def h5_huge_chunk(d):
    return _h5(d, saliency=lambda g: g.create_dataset("saliency", shape=(6, 3, 1024, 1024), dtype="f8",
                                                      chunks=(6, 3, 1024, 1024), compression="gzip"))


def h5_unwritten_chunks(d):
    return _h5(d, saliency=lambda g: g.create_dataset("saliency", shape=(6, 3, 1024, 1024), dtype="f4",
                                                      chunks=(1, 1, 256, 256), compression="gzip"))


def h5_unwritten_contiguous(d):
    return _h5(d, saliency=lambda g: g.create_dataset("saliency", shape=(6, 3, 1024, 1024), dtype="f4"))


def h5_fifo(d):
    os.mkfifo(d / "src.h5")
    return [str(d / "src.h5")]


def h5_many_members(d):
    src = h5_base(d / "src.h5")
    with h5py.File(src, "a") as f:
        for i in range(1001):
            f.create_group(f"g{i}")
    return [str(src)]


def h5_reference_attribute(d):
    src = h5_base(d / "src.h5")
    with h5py.File(src, "a") as f:
        f.attrs.create("pointer", f["phantom"].ref, dtype=h5py.ref_dtype)
    return [str(src)]


def h5_huge_attribute(d):
    src = h5_base(d / "src.h5")
    with h5py.File(src, "a", libver="latest") as f:
        f.attrs["notes"] = np.zeros(2**18, np.float64)  # 2 MiB
    return [str(src)]


def h5_not_utf8(d):
    return _h5(d, case_id=lambda g: g.create_dataset("case_id", data=np.array([b"\xff\xfe"] + [i.encode() for i in IDS[1:]])))


def h5_truncated(d):
    src = h5_base(d / "src.h5")
    src.write_bytes(src.read_bytes()[:3000])
    return [str(src)]


def npz_symlink_outside(d):
    src = npz_base(d)
    np.savez(d / "outside.npz", scores=np.ones(3), saliency=np.ones((3, 4, 4)))
    os.remove(src / "phantom" / "case-02.npz")
    os.symlink(d / "outside.npz", src / "phantom" / "case-02.npz")
    return [str(src)]


def npz_symlink_inside(d):
    src = npz_base(d)
    os.symlink(src / "phantom" / "case-00.npz", src / "phantom" / "case-99.npz")
    return [str(src)]


def npz_symlink_to_device(d):
    src = npz_base(d)
    os.symlink("/dev/zero", src / "phantom" / "case-99.npz")
    return [str(src)]


def npz_fifo(d):
    src = npz_base(d)
    os.mkfifo(src / "phantom" / "case-99.npz")
    return [str(src)]


def npz_folder_link(d):
    src = npz_base(d)
    os.rename(src / "phantom", d / "elsewhere")
    os.symlink(d / "elsewhere", src / "phantom")
    return [str(src)]


def npz_phrases_folder_link(d):
    src = npz_base(d)
    (d / "phr").mkdir()
    os.symlink(d / "phr", src / "phantom" / "phrases")
    return [str(src)]


def npz_meta_link(d):
    src = npz_base(d)
    os.rename(src / "meta.json", d / "meta.json")
    os.symlink(d / "meta.json", src / "meta.json")
    return [str(src)]


def npz_zip_bomb(d):
    """1.3 MB on disk, 1.3 GiB once inflated: refused from the zip's declared sizes, nothing inflated."""
    src = npz_base(d)
    declared = 1331 * 2**20
    write_zip(src / "phantom" / "case-00.npz", [("saliency.npy", deflate_bomb(1331, wbits=-15)), ("scores.npy", b"")],
              deflated={"saliency.npy": declared})
    return [str(src)]


def npz_pickle(d):
    src = npz_base(d)
    np.savez(src / "phantom" / "case-00.npz", scores=np.array([{}, {}, {}], dtype=object), saliency=np.zeros((3, 4, 4)))
    return [str(src)]


def _meta(d, text: bytes | str) -> list[str]:
    src = npz_base(d)
    (src / "meta.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    return [str(src)]


def meta_not_utf8(d):
    return _meta(d, b'{"model": "\xff", "datasets": {"phantom": {"classes": ["Nodule"]}}}')


def meta_model_not_text(d):
    return _meta(d, json.dumps({"model": 5, "datasets": {"phantom": {"classes": CLASSES}}}))


def meta_classes_not_list(d):
    return _meta(d, json.dumps({"datasets": {"phantom": {"classes": "Nodule"}}}))


def meta_datasets_not_object(d):
    return _meta(d, json.dumps({"datasets": ["phantom"]}))


def meta_duplicate_keys(d):
    return _meta(d, '{"model": "a", "model": "b", "datasets": {"phantom": {"classes": ["Nodule"]}}}')


def meta_deep(d):
    return _meta(d, "[" * 100_000 + "]" * 100_000)


def _boxes(d, data, *extra) -> list[str]:
    path = d / "src.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return [str(path), "--images", str(images_store(d)), *extra]


def marks_ten_million_points(d):
    """60 MB of points: refused by the JSON value cap before anything is parsed (2.3 GiB and > 60 s before)."""
    point = "[0.5,0.5],"
    body = point * 10_000_000
    text = '{"coordinates": "normalised", "datasets": {"phantom": {"case-00": {"Nodule": {"points": [' + body[:-1] + "]}}}}}"
    return _boxes(d, text)


def marks_too_many_per_finding(d):
    return _boxes(d, {"datasets": {"phantom": {"case-00": {"Nodule": {"points": [[1, 1]] * 10_001}}}}})


def marks_duplicate_keys(d):
    return _boxes(d, '{"datasets": {"phantom": {}}, "datasets": {"phantom": {}}}')


def coco_nan(d):
    return _boxes(d, '[{"image_id": "case-00", "category_id": "Nodule", "bbox": [1, NaN, 5, 5], "score": 0.5}]')


def coco_deep(d):
    return _boxes(d, "[" * 100_000 + "]" * 100_000)


def coco_newline_in_image_id(d):
    forged = "case-00\nxbench-convert: wrote submission.zarr"
    return _boxes(d, [{"image_id": forged, "category_id": "Nodule", "bbox": [1, 1, 5, 5], "score": 0.5}])


def coco_escape_in_image_id(d):
    return _boxes(d, [{"image_id": "case-00\x1b[2K\rok", "category_id": "Nodule", "bbox": [1, 1, 5, 5], "score": 0.5}])


def coco_newline_in_category_name(d):
    instances = d / "instances.json"
    instances.write_text(json.dumps({"images": [{"id": 1, "file_name": "case-00.png"}],
                                     "categories": [{"id": 7, "name": "Lesion\nxbench-convert: wrote x.zarr"}]}))
    return _boxes(d, [{"image_id": 1, "category_id": 7, "bbox": [1, 1, 5, 5], "score": 0.5}],
                  "--coco-images", str(instances))


ATTACKS = {
    "h5_external_link_dataset": (h5_external_link_dataset, "is an external link"),
    "h5_external_link_group": (h5_external_link_group, "is an external link"),
    "h5_soft_link_loop": (h5_soft_link_loop, "soft links loop"),
    "h5_soft_link_through_external": (h5_soft_link_through_external, "is an external link"),
    "h5_soft_link_dangling": (h5_soft_link_dangling, "which does not exist"),
    "h5_external_storage": (h5_external_storage, "external raw files"),
    "h5_virtual": (h5_virtual, "is a virtual dataset"),
    "h5_vlen": (h5_vlen, "variable-length sequence type"),
    "h5_compound": (h5_compound, "has a compound type"),
    "h5_reference": (h5_reference, "has a reference type"),
    "h5_enum": (h5_enum, "has an enum type"),
    "h5_opaque": (h5_opaque, "has an opaque type"),
    "h5_lzf": (h5_lzf, "is compressed with lzf"),
    "h5_deflate_bomb": (h5_deflate_bomb, "inflates past its declared 384 bytes"),
    "h5_huge_chunk": (h5_huge_chunk, "has chunks of 144 MiB; the limit is 128 MiB"),
    "h5_unwritten_chunks": (h5_unwritten_chunks, "chunks were never written"),
    "h5_unwritten_contiguous": (h5_unwritten_contiguous, "but the file stores 0 for it"),
    "h5_fifo": (h5_fifo, "is not a regular file"),
    "h5_many_members": (h5_many_members, "holds 1,002 members; the limit is 1,000"),
    "h5_reference_attribute": (h5_reference_attribute, "attribute 'pointer': has a reference type"),
    "h5_huge_attribute": (h5_huge_attribute, "attribute 'notes': is larger than the limit"),
    "h5_not_utf8": (h5_not_utf8, "holds a string that is not UTF-8"),
    "h5_truncated": (h5_truncated, "not a readable HDF5 file"),
    "npz_symlink_outside": (npz_symlink_outside, "case-02.npz: is a symbolic link"),
    "npz_symlink_inside": (npz_symlink_inside, "case-99.npz: is a symbolic link"),
    "npz_symlink_to_device": (npz_symlink_to_device, "case-99.npz: is a symbolic link"),
    "npz_fifo": (npz_fifo, "case-99.npz: is not a regular file"),
    "npz_folder_link": (npz_folder_link, "phantom: must be a folder (not a link)"),
    "npz_phrases_folder_link": (npz_phrases_folder_link, "phrases: must be a folder (not a link)"),
    "npz_meta_link": (npz_meta_link, "meta.json: is a symbolic link"),
    "npz_zip_bomb": (npz_zip_bomb, "would inflate to more than"),
    "npz_pickle": (npz_pickle, "holds Python objects"),
    "meta_not_utf8": (meta_not_utf8, "meta.json: is not UTF-8 text"),
    "meta_model_not_text": (meta_model_not_text, "meta.json: model: must be a string"),
    "meta_classes_not_list": (meta_classes_not_list, "datasets.phantom.classes: must be a non-empty list"),
    "meta_datasets_not_object": (meta_datasets_not_object, "meta.json: datasets: must be an object"),
    "meta_duplicate_keys": (meta_duplicate_keys, "has the key 'model' twice"),
    "meta_deep": (meta_deep, "nests 100000 levels deep"),
    "marks_ten_million_points": (marks_ten_million_points, "holds more than 4,000,000 values"),
    "marks_too_many_per_finding": (marks_too_many_per_finding, "holds 10,001 marks; the limit is 10,000"),
    "marks_duplicate_keys": (marks_duplicate_keys, "has the key 'datasets' twice"),
    "coco_nan": (coco_nan, "has the token NaN"),
    "coco_deep": (coco_deep, "nests 100000 levels deep"),
    "coco_newline_in_image_id": (coco_newline_in_image_id, "image_id case-00\\nxbench-convert: wrote submission.zarr"),
    "coco_escape_in_image_id": (coco_escape_in_image_id, "image_id case-00\\x1b[2K\\rok"),
    "coco_newline_in_category_name": (coco_newline_in_category_name, "category 7 (Lesion\\nxbench-convert: wrote x.zarr)"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("convert_hostile")
    jobs, where = [], {}
    for name, (make, _) in ATTACKS.items():
        d = root / name
        d.mkdir()
        argv = make(d)
        before = sorted(os.listdir(d))
        jobs.append({"argv": [*argv, "--out", str(d / "sub.zarr"), "-q", *BUDGET]})
        where[name] = (d, before)
    return dict(zip(ATTACKS, run_all(jobs, root))), where


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_refused_in_one_line_within_budget(results, attack):
    res, where = results
    r = res[attack]
    d, before = where[attack]
    lines = r["stderr"].splitlines()
    assert r["rc"] == 2, (r["rc"], r["stderr"][-2000:])
    assert len(lines) == 1, lines
    assert ATTACKS[attack][1] in lines[0], lines
    assert lines[0].startswith("xbench-convert: error: ") and "\x1b" not in r["stderr"]
    assert "Traceback" not in r["stderr"] and "budget of" not in r["stderr"]  # a check, not the watchdog
    assert not r["killed"] and r["seconds"] < MAX_SECONDS, r["seconds"]
    assert r["maxrss_mib"] < MAX_RSS_MIB, r["maxrss_mib"]
    assert sorted(os.listdir(d)) == before  # nothing written: no OUT, no hidden work folder


def test_the_controls_convert(tmp_path):
    """What the attacks change is what they are refused for: the untouched bases convert (and a soft link
    to a dataset inside the file is followed, as a hard link is)."""
    inside = h5_base(tmp_path / "soft.h5", saliency=lambda g: (
        g.create_dataset("shared", data=np.random.default_rng(0).random((6, 3, 4, 4))),
        g.__setitem__("saliency", h5py.SoftLink("/phantom/shared"))))
    compressed = h5_base(tmp_path / "gz.h5", saliency=lambda g: g.create_dataset(
        "saliency", data=np.arange(6 * 3 * 4 * 4, dtype=np.float32).reshape(6, 3, 4, 4), compression="gzip",
        shuffle=True, fletcher32=True, chunks=(4, 2, 3, 4)))
    jobs = [{"argv": [str(h5_base(tmp_path / "src.h5")), "--out", str(tmp_path / "a.zarr"), "-q", *BUDGET]},
            {"argv": [str(npz_base(tmp_path)), "--out", str(tmp_path / "b.zarr"), "-q", *BUDGET]},
            {"argv": [str(inside), "--out", str(tmp_path / "c.zarr"), "-q", *BUDGET]},
            {"argv": [str(compressed), "--out", str(tmp_path / "d.zarr"), "-q", "--map-dtype", "float32", *BUDGET]}]
    for r in run_all(jobs, tmp_path):
        assert r["rc"] == 0, r["stderr"]
    from xbench.schemas import read_submission

    got = read_submission(tmp_path / "d.zarr").datasets["phantom"]
    np.testing.assert_array_equal(np.asarray(got.saliency[...]), np.arange(6 * 3 * 4 * 4, dtype=np.float32).reshape(6, 3, 4, 4))
    with h5py.File(inside) as f:
        np.testing.assert_allclose(np.asarray(read_submission(tmp_path / "c.zarr").datasets["phantom"].saliency[...],
                                              np.float32), f["phantom/shared"][...].astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("values, line", [
    ({"scores": np.array([[1e300, 0, 0]] * 6)}, "scores hold values beyond float32's range (±3.4028e+38)"),
    ({"saliency": np.full((6, 3, 4, 4), 1e6)}, "maps hold values beyond float16's range (±65504); --map-dtype "
                                               "float32 holds up to 3.4e38"),
])
def test_values_the_store_cannot_hold_are_one_line_without_warnings(tmp_path, values, line):
    """A float64 beyond the stored dtype would become inf with a NumPy RuntimeWarning on stderr: refused first,
    one line per case naming it (issue 35 item 8: every problem in one run, each naming its case)."""
    over = {k: (lambda g, k=k, v=v: g.create_dataset(k, data=v)) for k, v in values.items()}
    src = h5_base(tmp_path / "src.h5", **over)
    res = subprocess.run([sys.executable, "-c", "from xbench.schemas.cli import convert_main; convert_main()", "src.h5",
                          "--out", "sub.zarr", "-q"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.splitlines() == [
        f"xbench-convert: error: src.h5: phantom: case 'case-{i:02d}': {line}" for i in range(6)], res.stderr
    assert sorted(os.listdir(tmp_path)) == [src.name]


def test_a_source_at_the_caps_converts_within_the_budget(tmp_path):
    """Memory is bounded by design: the largest COCO results file the value cap lets through (440,000
    boxes, 42 MB) converts within 60 s and well under 1 GiB, and one value more is refused."""
    from xbench.schemas import ImagesWriter
    from xbench.schemas.convert_boxes import BOXES_JSON

    ids = [f"case-{i:03d}" for i in range(100)]
    w = ImagesWriter(tmp_path / "images.zarr", "phantom", case_ids=ids, classes=CLASSES, image_size=8, cases_per_block=100)
    w.write_block(0, np.zeros((100, 8, 8), np.uint8), np.full((100, 2), 512, np.int32))
    w.finish()
    rng = np.random.default_rng(0)
    xy, wh, score = rng.random((440_000, 2)) * 400, 10 + rng.random((440_000, 2)) * 50, rng.random(440_000)
    results = ",".join(f'{{"image_id":"{ids[k % 100]}","category_id":"{CLASSES[k % 3]}","bbox":[{xy[k, 0]:.1f},'
                       f'{xy[k, 1]:.1f},{wh[k, 0]:.1f},{wh[k, 1]:.1f}],"score":{score[k]:.3f}}}' for k in range(440_000))
    values = results.count(",") + results.count("{") + results.count("[") + 1
    assert BOXES_JSON.max_elements - 50_000 < values <= BOXES_JSON.max_elements
    (tmp_path / "at_cap.json").write_text(f"[{results}]")
    more = results[:results.index("}", 600_000) + 1]  # a few thousand results more: past the cap
    assert values + more.count(",") > BOXES_JSON.max_elements
    (tmp_path / "past_cap.json").write_text(f"[{results},{more}]")
    jobs = [{"argv": [str(tmp_path / f"{name}.json"), "--images", str(tmp_path / "images.zarr"), "--out",
                      str(tmp_path / f"{name}.zarr"), "-q", *BUDGET]} for name in ("at_cap", "past_cap")]
    at_cap, past_cap = run_all(jobs, tmp_path)
    assert at_cap["rc"] == 0 and at_cap["seconds"] < 60 and at_cap["maxrss_mib"] < 700, at_cap
    assert past_cap["rc"] == 2 and "holds more than 4,000,000 values" in past_cap["stderr"], past_cap


def test_source_attributes_never_rewrite_what_the_store_is(tmp_path):
    """HDF5 root attributes are copied as provenance; ones named like the store's own (kind, schema_minor, ...)
    are kept apart under source_attributes instead of turning the submission into an 'images' store or a
    TypeError."""
    src = h5_base(tmp_path / "src.h5")
    with h5py.File(src, "a") as f:
        f.attrs["kind"], f.attrs["schema_minor"], f.attrs["complete"] = "images", "x", 0
        f.attrs["_xbench_writer_spec"], f.attrs["team"] = "forged", "blue"
    res = subprocess.run([sys.executable, "-c", "from xbench.schemas.cli import convert_main; convert_main()", "src.h5",
                          "--out", "sub.zarr", "-q"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    from xbench.schemas import read_submission, validate_submission

    attrs = read_submission(tmp_path / "sub.zarr").attrs
    assert attrs["kind"] == "submission" and attrs["complete"] is True and attrs["team"] == "blue"
    assert attrs["source_attributes"] == {"kind": "images", "schema_minor": "x", "complete": 0,
                                          "_xbench_writer_spec": "forged"}
    assert validate_submission(tmp_path / "sub.zarr") == []
