"""The input boundary for JSON, YAML, TOML and npz files (schemas/inputs.py): hostile files refused in one
problem line each, within small time and memory, and ordinary files read exactly as the stdlib reads them."""
from __future__ import annotations

import io
import json
import os
import time
import tomllib
import zipfile

import numpy as np
import pytest

from xbench.schemas import inputs
from xbench.schemas.errors import InputError, InputLimitError


def _one_line(exc: InputError) -> str:
    assert len(exc.problems) == 1
    line = str(exc.problems[0])
    assert "\n" not in line
    return line


# -- JSON -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ['{"a": [1, 2.5, "x", null, true]}', "[]", '"s"', "3", '{"k": {"n": -12}}',
                                  '{"u": "\\u00e9\\n"}', "\ufeff{\"bom\": 1}"])
def test_json_reads_what_json_reads(text):
    assert inputs.parse_json(text.encode(), "f.json") == json.loads(text.lstrip("\ufeff"))


@pytest.mark.parametrize("text, words", [
    ("[" * 100_000 + "]" * 100_000, "levels deep"),
    ('{"a": 1, "a": 2}', "twice"),
    ('{"a": NaN}', "NaN"),
    ('{"a": Infinity}', "Infinity"),
    ('[-Infinity]', "Infinity"),
    ('[1e999]', "too large"),
    ("[" + "9" * 5000 + "]", "5000 digits"),
    ("[" + "1" * 41 + "]", "41 digits"),
    ('{"a": }', "not valid JSON"),
])
def test_json_hostile(text, words):
    with pytest.raises(InputError) as info:
        inputs.parse_json(text.encode(), "f.json")
    line = _one_line(info.value)
    assert line.startswith("f.json: ") and words in line


def test_json_not_utf8():
    with pytest.raises(InputError, match="not UTF-8 text .*offset 2"):
        inputs.parse_json(b'["\xff"]', "f.json")


def test_json_nonfinite_allowed_when_asked():
    lim = inputs.with_limits(allow_nonfinite=True)
    assert np.isnan(inputs.parse_json(b"[NaN]", "m.json", lim)[0])


def test_json_element_cap():
    lim = inputs.with_limits(max_elements=1000)
    with pytest.raises(InputLimitError, match="more than 1,000 values"):
        inputs.parse_json(("[" + ",".join(["1"] * 2000) + "]").encode(), "f.json", lim)
    # commas inside strings are not values
    assert inputs.parse_json(json.dumps(["," * 5000]).encode(), "f.json", lim) == ["," * 5000]


def test_json_deep_is_fast():
    t = time.perf_counter()
    with pytest.raises(InputLimitError):
        inputs.parse_json(b"[" * 5_000_000, "f.json")
    assert time.perf_counter() - t < 60  # the hostile-input budget


def test_load_json_size_cap_and_special_files(tmp_path):
    f = tmp_path / "big.json"
    f.write_bytes(b"[" + b"0," * 100 + b"0]")
    with pytest.raises(InputLimitError, match="limit for this file"):
        inputs.load_json(f, limits=inputs.with_limits(max_bytes=50))
    with pytest.raises(InputError, match="is a folder"):
        inputs.load_json(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        inputs.load_json(tmp_path / "missing.json")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    t = time.perf_counter()
    with pytest.raises(InputError, match="not a regular file"):
        inputs.load_json(fifo)
    assert time.perf_counter() - t < 5


# -- YAML -------------------------------------------------------------------------------------------
def test_yaml_reads_plain_documents():
    text = "a: 1\nb: [x, 2.5, null]\nc:\n  d: true\n"
    assert inputs.parse_yaml(text, "s.yaml") == {"a": 1, "b": ["x", 2.5, None], "c": {"d": True}}


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8))


@pytest.mark.parametrize("text, words", [
    (BILLION_LAUGHS, "alias"),
    ("a: 1\na: 2\n", "twice"),
    ("a: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
    ("[" * 1000 + "]" * 1000, "levels deep"),
    ("a: " + "9" * 5000 + "\n", "digits"),
    ("a: .nan\n", "non-finite"),
    ("a: [1, 2\n", "not valid YAML"),
])
def test_yaml_hostile(text, words):
    t = time.perf_counter()
    with pytest.raises(InputError) as info:
        inputs.parse_yaml(text, "s.yaml")
    assert time.perf_counter() - t < 60  # the hostile-input budget
    line = _one_line(info.value)
    assert line.startswith("s.yaml: ") and words in line, line


# -- TOML -------------------------------------------------------------------------------------------
def test_toml_reads_plain_documents():
    text = 'a = 1\nb = ["x", 2.5]\n[c]\nd = true\ne = """long\n[[string]]"""\n'
    assert inputs.parse_toml(text, "c.toml") == tomllib.loads(text)


@pytest.mark.parametrize("text, words", [
    ("a = " + "[" * 100_000 + "]" * 100_000, "levels deep"),
    ("a = " + "9" * 5000, "digits"),
    ("a = nan", "non-finite"),
    ("a = 1\na = 2", "not valid TOML"),
    ("a = [", "not valid TOML"),
])
def test_toml_hostile(text, words):
    with pytest.raises(InputError) as info:
        inputs.parse_toml(text, "c.toml")
    line = _one_line(info.value)
    assert line.startswith("c.toml: ") and words in line, line


def test_load_config_by_suffix(tmp_path):
    for name, text in (("a.yaml", "k: 1\n"), ("a.toml", "k = 1\n"), ("a.json", '{"k": 1}')):
        (tmp_path / name).write_text(text)
        assert inputs.load_config(tmp_path / name) == {"k": 1}
    (tmp_path / "a.txt").write_text("k")
    with pytest.raises(InputError, match="not a .yaml"):
        inputs.load_config(tmp_path / "a.txt")


# -- npz --------------------------------------------------------------------------------------------
def test_npz_reads_what_numpy_reads(tmp_path):
    f = tmp_path / "a.npz"
    arrays = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "y": np.asfortranarray(np.eye(3)),
              "s": np.array(["ab", "c"]), "e": np.zeros((0, 5), np.int8)}
    np.savez_compressed(f, **arrays)
    got = inputs.load_npz(f)
    assert set(got) == set(arrays)
    for k, v in arrays.items():
        np.testing.assert_array_equal(got[k], v)
        assert got[k].dtype == v.dtype
    got["x"][0, 0] = 5  # writable


def test_npz_pickle_refused(tmp_path):
    f = tmp_path / "p.npz"
    np.savez(f, o=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError, match="Python objects"):
        inputs.load_npz(f)


def test_npz_bomb_refused_before_inflating(tmp_path):
    f = tmp_path / "bomb.npz"
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.zeros(200 * 2**20, np.uint8))
    with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("m.npy", buf.getvalue())
    assert f.stat().st_size < 2**20
    with pytest.raises(InputLimitError, match="inflate to more than"):
        inputs.load_npz(f, max_bytes=64 * 2**20)


def test_npz_header_lying_about_size(tmp_path):
    f = tmp_path / "lie.npz"
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.zeros(10, np.uint8))
    raw = buf.getvalue().replace(b"(10,)", b"(99999999,)".ljust(5)[:5] if False else b"(10,)")
    header = raw.replace(b"'shape': (10,)", b"'shape': (10000000,)")
    with zipfile.ZipFile(f, "w") as zf:
        zf.writestr("m.npy", header)
    with pytest.raises(InputError):
        inputs.load_npz(f)


def test_npz_not_a_zip_and_fifo(tmp_path):
    f = tmp_path / "x.npz"
    f.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="not a readable .npz"):
        inputs.load_npz(f)
    fifo = tmp_path / "f.npz"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        inputs.load_npz(fifo)


# -- the error hierarchy and escaping -------------------------------------------------------------
def test_escape_text_keeps_one_line():
    from xbench.schemas.errors import escape_text

    assert escape_text("a\nb\r\x1b[2Jc\u2028") == "a\\nb\\r\\x1b[2Jc\\u2028"
    assert escape_text("plain é") == "plain é"


def test_every_deliberate_error_is_an_input_error():
    pytest.importorskip("torch", reason="the extract side's errors import torch (make test-scorer-only has none)")
    from xbench.extract.datasets.base import ReaderError
    from xbench.extract.datasets.prepare import PrepareError
    from xbench.extract.models.errors import ModelConfigError, WeightsNotFoundError
    from xbench.schemas.registry import UnknownNameError
    from xbench.extract.runner import ExtractError
    from xbench.schemas.errors import InvalidStoreError, StoreNotFoundError
    from xbench.schemas.paths import UnsafeOutputError
    from xbench.score.report._load import ReportInputError
    from xbench.suite import SuiteError

    for cls in (ReaderError, PrepareError, ModelConfigError, UnknownNameError, ExtractError, InvalidStoreError,
                StoreNotFoundError, UnsafeOutputError, ReportInputError, SuiteError):
        assert issubclass(cls, InputError), cls
    assert issubclass(WeightsNotFoundError, InputError)
    assert str(WeightsNotFoundError("model", "x.pt", "download it")) == "model: x.pt not found. download it"
    assert PrepareError("msg", ["a", "b"]).problems == ["a", "b"]
    assert InvalidStoreError("x").problems[0].message == "x"


def test_cli_classifies_by_type_and_escapes(capsys):
    import click

    from xbench.schemas._cli import EXIT_ERROR, EXIT_INVALID, classify, report_failure

    failure = classify(InputError(["case a\nforged: line"]))
    assert failure.code == EXIT_INVALID
    report_failure("xbench-x", failure, as_json=False)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "case a\\nforged" in err
    assert classify(ValueError("bug")).code == EXIT_ERROR
    assert classify(click.UsageError("bad")).code == EXIT_INVALID


def test_read_zip_member_is_bounded(tmp_path):
    """Issue 44, class 6: a member is read to its limit and no further; a lying header (a small declared size,
    more data) is a problem line, not an inflation."""
    import io
    import zipfile

    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import read_zip_member

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("small", b"x" * 100)
        zf.writestr("big", b"\0" * (1 << 20))
    data = buf.getvalue()
    assert read_zip_member(data, "small", max_bytes=100, where="w") == b"x" * 100
    for member, limit, needle in (("big", 1000, "declares 1.0 MiB"), ("nope", 10, "holds no 'nope'"),
                                  ("small", 99, "declares 100 bytes")):
        with pytest.raises(InputError) as info:
            read_zip_member(data, member, max_bytes=limit, where="w")
        assert needle in str(info.value) and len(info.value.problems) == 1
    with pytest.raises(InputError, match="not a readable zip"):
        read_zip_member(b"not a zip", "x", max_bytes=10, where="w")
    forged = data.replace((1 << 20).to_bytes(4, "little"), (10).to_bytes(4, "little"))  # sizes claim 10 bytes
    with pytest.raises(InputError):
        read_zip_member(forged, "big", max_bytes=1000, where="w")


def test_read_tree_refuses_links_pipes_and_sparse_giants_before_reading(tmp_path):
    import os

    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import read_tree

    root = tmp_path / "s"
    (root / "a" / "b").mkdir(parents=True)
    (root / "zarr.json").write_text("{}")
    (root / "a" / "b" / "c").write_bytes(b"123")
    assert read_tree(root, max_bytes=5) == [("a/b/c", b"123"), ("zarr.json", b"{}")]
    with pytest.raises(InputError, match="holds more than 4 bytes"):
        read_tree(root, max_bytes=4)
    with open(root / "sparse", "wb") as fh:
        fh.truncate(1 << 40)  # a terabyte on paper: refused from its size, never read
    with pytest.raises(InputError, match="holds more than"):
        read_tree(root, max_bytes=1 << 30)
    (root / "sparse").unlink()
    os.symlink(tmp_path / "elsewhere", root / "link")
    with pytest.raises(InputError, match="symbolic link"):
        read_tree(root, max_bytes=100)
    (root / "link").unlink()
    os.mkfifo(root / "pipe")
    with pytest.raises(InputError, match="not a regular file"):
        read_tree(root, max_bytes=100)
