"""Zarr's internals are used in schemas/_zarr.py only, and zarr's version is bounded to the minor it was checked on.

Scanned with ast: an import of a private Zarr module (``zarr.core``, ``zarr.registry``, ``zarr.abc``), an
attribute chain through ``zarr.core``/``zarr.registry``, and any use of the private attributes the fence wraps.
The one allowed outside the fence is *defining* ``_decode_sync`` on a subclass of a Zarr codec (the bounded
decoders in schemas/budget.py override that hook; they never call it).
"""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("schemas", "score", "extract", "xbench", "suites", "benchmarks", "platforms")
FENCE = ROOT / "schemas" / "_zarr.py"
PRIVATE_MODULES = ("zarr.core", "zarr.registry", "zarr.abc")
PRIVATE_ATTRS = {"store_path", "_shard_index_size", "_decode_shard_index", "_xbench_inventory", "_decode_sync",
                 "_encode_sync", "_async_array"}


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def zarr_internals(source: str) -> list[str]:
    """What ``source`` uses of Zarr's internals, one entry a use."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.startswith(PRIVATE_MODULES)]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(PRIVATE_MODULES):
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Attribute):
            if node.attr in PRIVATE_ATTRS:
                found.append(f".{node.attr}")
            elif _dotted(node) in PRIVATE_MODULES:  # zarr.core.<anything>: reported once, at zarr.core
                found.append(_dotted(node))
        elif isinstance(node, ast.Constant) and node.value in PRIVATE_ATTRS and node.value.startswith("_"):
            found.append(f"'{node.value}'")
    return found


def _hook_definitions(source: str) -> set[str]:
    return {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "_decode_sync"}


def test_no_module_but_the_fence_touches_zarr_internals():
    offenders = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == FENCE:
                continue
            source = path.read_text(encoding="utf-8")
            uses = zarr_internals(source)
            offenders += [f"{path.relative_to(ROOT)}: {u}" for u in uses]
    assert offenders == []


@pytest.mark.parametrize("source, expected", [
    ("from zarr.core.sync import sync\n", ["from zarr.core.sync import ..."]),
    ("import zarr.registry\n", ["import zarr.registry"]),
    ("import zarr\nx = zarr.core.buffer.default_buffer_prototype()\n", ["zarr.core"]),
    ("x = arr.store_path.store\n", [".store_path"]),
    ("x = getattr(s, '_xbench_inventory', None)\n", ["'_xbench_inventory'"]),
    ("import zarr\nfrom zarr.codecs import ZstdCodec\nzarr.open_group('a')\n", []),
])
def test_the_scanner_finds_each_spelling(source, expected):
    uses = zarr_internals(source)
    assert uses == expected


def test_the_fence_is_where_the_internals_are():
    assert zarr_internals(FENCE.read_text(encoding="utf-8"))  # otherwise the fence is empty and the test proves nothing


def test_zarr_is_bounded_to_the_checked_minor():
    import zarr

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    spec = next(d for d in deps if re.match(r"zarr\b", d))
    lower = re.search(r">=\s*([\d.]+)", spec).group(1)
    upper = re.search(r"<\s*([\d.]+)", spec).group(1)
    installed = tuple(int(x) for x in zarr.__version__.split(".")[:2])
    assert tuple(int(x) for x in lower.split(".")[:2]) <= installed < tuple(int(x) for x in upper.split(".")[:2])


def test_the_fenced_helpers_work_on_a_store(tmp_path):
    import numpy as np
    import zarr

    from xbench.schemas import _zarr

    arr = zarr.create_array(zarr.storage.LocalStore(tmp_path / "s.zarr"), name="a", shape=(4,), chunks=(2,),
                            dtype="int16", compressors=None)
    arr[:] = np.arange(4, dtype=np.int16)
    store, path = _zarr.array_location(arr)
    assert path == "a" and "a/c/1" in _zarr.list_keys(store)
    assert _zarr.list_prefix(store, "a/c/") == {"a/c/0", "a/c/1"}
    assert _zarr.get_buffer(store, "a/c/1").to_bytes() == np.array([2, 3], np.int16).tobytes()
    assert _zarr.get_buffer(store, "a/c/9") is None
    _zarr.tag_store(store, {"sizes": 1})
    assert _zarr.store_tag(store) == {"sizes": 1} and _zarr.store_tag(object()) is None
