"""The optional dataset-reader hooks (``case_attributes``, ``gaze_readings``) are declared on DatasetReader with a
"none here" default, and every registered reader either keeps that default or overrides it with the same
signature; the preparation step calls them on every reader, never probing for them (issue 47 item 4)."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from xbench.extract.datasets import DATASETS, CaseRecord, DatasetReader

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ("case_attributes", "gaze_readings")


def _params(fn) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", DATASETS.names())
def test_every_registered_reader_keeps_the_hook_signatures(name, tmp_path):
    cls = DATASETS.get(name)
    assert issubclass(cls, DatasetReader)
    reader = cls(tmp_path)  # default options: no attributes asked for
    for hook in HOOKS:
        assert _params(getattr(cls, hook)) == _params(getattr(DatasetReader, hook)), (name, hook)
        if getattr(cls, hook) is getattr(DatasetReader, hook):
            args = ([], (8, 8)) if hook == "gaze_readings" else ([],)
            assert getattr(reader, hook)(*args) is None, (name, hook)
    # attributes are opt-in everywhere: a reader built without the option keeps none
    assert reader.case_attributes([]) is None, name


def test_base_defaults_say_none():
    class Bare(DatasetReader):
        key, classes = "bare", ("Pneumonia",)

        def records(self):
            return [CaseRecord("a", "a", {"Pneumonia": 0}, {}, (4, 4), "a")]

        def load_image(self, record):
            raise AssertionError("not decoded")

    r = Bare(".")
    assert r.case_attributes(r.records()) is None and r.gaze_readings(r.records(), (4, 4)) is None


def test_no_caller_probes_for_a_hook():
    probe = re.compile(r"(getattr|hasattr)\([^)]*[\"'](%s)[\"']" % "|".join(HOOKS))
    found = [f"{p.relative_to(ROOT)}:{i}" for folder in ("extract", "xbench", "schemas")
             for p in sorted((ROOT / folder).rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if probe.search(line)]
    assert not found, found
