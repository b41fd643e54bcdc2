"""One JSON reader for user-supplied files (extract/_json.py): each failure is one line naming the file, in the
caller's error class; the dataset readers and the model adapters go through it."""
from __future__ import annotations

import pytest

from xbench.extract._json import read_json


class MyError(Exception):
    pass


@pytest.mark.parametrize("content, message", [
    (None, r"^side: .*x\.json: no such file$"),
    (b"{\"a\": 1,\n  oops}", r"^side: .*x\.json: is not valid JSON \(Expecting property name enclosed in double quotes "
                             r"at line 2, column 3\)$"),
    (b"\xff\xfe{}", r"^side: .*x\.json: is not UTF-8 text \(invalid byte at offset 0\)$"),
    (b'{"a": 1, "a": 2}', r"^side: .*x\.json: has the key 'a' twice in one object$"),
    (b"[NaN]", r"^side: .*x\.json: has the token NaN"),
    (b"[" * 100_000 + b"]" * 100_000, r"^side: .*x\.json: nests 100000 levels deep"),
    (b"[" + b"9" * 5000 + b"]", r"^side: .*x\.json: has an integer of 5000 digits"),
    (b"[1, 2]", r"^side: .*x\.json: expected an object of things$"),
])
def test_each_failure_is_one_line_in_the_callers_class(tmp_path, content, message):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(MyError, match=message) as err:
        read_json(path, what="side", expected="an object of things", error=MyError)
    assert "\n" not in str(err.value)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    import os

    os.mkfifo(tmp_path / "f.json")
    with pytest.raises(ValueError, match="is not a regular file"):
        read_json(tmp_path / "f.json")


def test_a_folder_is_named_as_such(tmp_path):
    with pytest.raises(ValueError, match="is a folder, not a file"):
        read_json(tmp_path)


def test_the_document_of_the_asked_kind_is_returned(tmp_path):
    (tmp_path / "l.json").write_text('[{"a": "é"}]', encoding="utf-8")
    assert read_json(tmp_path / "l.json", kind=list, expected="a list") == [{"a": "é"}]
    (tmp_path / "d.json").write_text('{"k": [1, 2.5, null]}')
    assert read_json(str(tmp_path / "d.json")) == {"k": [1, 2.5, None]}


def test_readers_and_models_use_it(tmp_path):
    from xbench.extract.datasets._io import read_json as reader_json
    from xbench.extract.datasets.base import ReaderError
    from xbench.extract.models.crossattn.cache import _read_json_object

    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ReaderError, match=r"bad\.json: is not valid JSON \(.* at line 1, column 2\)$"):
        reader_json(tmp_path / "bad.json", dict, "an object")
    # the model side reads its side files through the bounded reader (xbench.schemas.inputs), which also
    # refuses duplicate keys and deep nesting
    with pytest.raises(ValueError, match=r"^descriptions: .*bad\.json: is not valid JSON"):
        _read_json_object(tmp_path / "bad.json", "descriptions")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ValueError, match=r"list\.json: expected a JSON object keyed by entity name$"):
        _read_json_object(tmp_path / "list.json", "aspects")
    (tmp_path / "twice.json").write_text('{"a": "x", "a": "y"}')
    with pytest.raises(ValueError, match=r"twice\.json: has the key 'a' twice"):
        _read_json_object(tmp_path / "twice.json", "descriptions")
    (tmp_path / "deep.json").write_text("[" * 10_000 + "]" * 10_000)
    with pytest.raises(ValueError, match=r"nests 10000 levels deep"):
        _read_json_object(tmp_path / "deep.json", "aspects")
