"""Every use of Zarr's internals, in one place (zarr-python 3.1.x; the bound is in pyproject.toml).

The schemas read stored chunk bytes directly (validation inspects them before Zarr decodes anything, and the
scorer decodes region-mask chunks itself), register bounded decoders for Zarr's codec names, and read a shard
index's size. None of that has a public API in zarr-python 3.1, so it goes through the small functions below
and nowhere else (tests/schemas/test_zarr_fence.py checks). A new Zarr minor version is checked here first.
"""
from __future__ import annotations

import re
from pathlib import Path

from zarr.abc.store import Store as StoreBase
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import as_numpy_array_wrapper
from zarr.core.sync import sync

__all__ = ["StoreBase", "array_location", "as_numpy_array_wrapper", "buffer_prototype", "get_buffer", "list_keys", "list_prefix",
           "register_codec_class", "remove_partial_writes", "run_sync", "shard_index_size", "shard_index_table",
           "store_tag", "tag_store"]


def buffer_prototype():
    """Zarr's default buffer prototype (``.buffer.from_bytes(...)`` makes a buffer a store can return)."""
    return default_buffer_prototype()


def run_sync(coro):
    """Run ``coro`` on Zarr's own event loop and return its result: the remote stores' clients are made on that
    loop (where Zarr later calls the store's methods), so every request of a run shares their connections."""
    return sync(coro)


def get_buffer(store, key: str):
    """The stored bytes of ``key`` as a Zarr buffer (``.to_bytes()``, ``.as_numpy_array()``), or None when absent."""
    return sync(store.get(key, prototype=default_buffer_prototype()))


def list_keys(store) -> list[str]:
    """Every key of ``store``, sorted; zip files' folder entries (``a/``, which hold no data) left out."""
    async def _keys() -> list[str]:
        return sorted([k async for k in store.list() if not k.endswith("/")])

    return sync(_keys())


def list_prefix(store, prefix: str) -> set[str]:
    """Every key of ``store`` under ``prefix``."""
    async def _keys() -> set[str]:
        return {k async for k in store.list_prefix(prefix)}

    return sync(_keys())


# LocalStore writes each object to ``<key>.<32 hex digits>.partial`` and renames it into place; it removes that
# file when the write raises, but a process killed in between leaves it, and it then reads as one more key.
_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")


def remove_partial_writes(folder) -> list[Path]:
    """Remove the temporary files that writes killed half-way left under ``folder`` (a LocalStore folder).

    Only safe where no other process can be writing under ``folder`` at the same time. Returns the paths removed.
    """
    found = [p for p in Path(folder).rglob("*.partial") if _PARTIAL.search(p.name) and p.is_file()]
    for p in found:
        p.unlink(missing_ok=True)
    return found


def array_location(arr) -> tuple[object, str]:
    """(the store, the array's path inside it) of an opened array."""
    return arr.store_path.store, arr.store_path.path


def shard_index_size(codec, chunks_per_shard: tuple[int, ...]) -> int:
    """Bytes of the index of a shard holding ``chunks_per_shard`` inner chunks (sharding codec)."""
    return int(codec._shard_index_size(chunks_per_shard))


def shard_index_table(codec, index_bytes: bytes, chunks_per_shard: tuple[int, ...]):
    """A shard index's (offset, length) table, shape ``(*chunks_per_shard, 2)``; raises on a corrupt index."""
    index = sync(codec._decode_shard_index(default_buffer_prototype().buffer.from_bytes(index_bytes),
                                           chunks_per_shard))
    return index.offsets_and_lengths


def register_codec_class(name: str, cls) -> None:
    """Make Zarr build ``cls`` for the codec called ``name`` whenever it parses array metadata from now on."""
    import zarr
    from zarr.registry import fully_qualified_name, register_codec

    register_codec(name, cls)
    zarr.config.set({f"codecs.{name}": fully_qualified_name(cls)})


_TAG = "_xbench_inventory"


def tag_store(store, value) -> None:
    """Attach ``value`` (validation's inventory of stored sizes) to an opened store object, so that arrays
    opened from it find it again (:func:`store_tag`)."""
    setattr(store, _TAG, value)


def store_tag(store):
    """What :func:`tag_store` attached to ``store``, or None."""
    return getattr(store, _TAG, None)
