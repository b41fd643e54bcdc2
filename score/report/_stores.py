"""Whether a store is safe to read for a drawing (``xbench show``, the report's overlays): the scorer's budget
checks on its listing and metadata, before anything is decoded. Its own module, so the two readers that need it
import it without importing each other."""
from __future__ import annotations

from xbench.schemas.errors import Problem

#: arrays a reader holds whole (ids, labels, scores, sizes, region index): their declared size counts against the
#: memory budget; the others (images, maps, masks) are read one row, hence one chunk, at a time
_READ_WHOLE = ("case_id", "labels", "scores", "orig_size", "orig_offset", "region_index", "query_id", "query_scores",
               "query_case", "query_class", "query_region")


def store_problems(path, kind: str) -> list[Problem]:
    """What makes reading the store at ``path`` unsafe, from its listing and metadata alone (the scorer's budget
    checks, :mod:`xbench.schemas.budget`): files and metadata documents (:func:`~xbench.schemas.budget.inspect_store`),
    then every array of every dataset group: codecs and chunk counts, one decoded chunk within the chunk limit,
    arrays read whole within a quarter of the memory budget, stored chunks that would decompress too far.
    Nothing is decoded here; ``xbench show`` reads one case afterwards."""
    import math

    from xbench.schemas import budget
    from xbench.schemas.store import MAX_CHUNK_BYTES, open_for_validation, stored_problems

    group, groups, problems = open_for_validation(path, kind)
    if group is None or problems:
        return problems
    lim = budget.limits()
    chunk_cap = min(MAX_CHUNK_BYTES, lim.max_chunk_bytes)
    for name, g in groups.items():
        for key, arr in g.arrays():
            where = f"{path}/{name}/{key}"
            unsafe = budget.array_problems(arr, where)
            if unsafe:
                problems += unsafe
                continue
            per_chunk = budget.decoded_chunk_bytes(arr)
            if per_chunk > chunk_cap:
                problems.append(Problem(where, f"declares chunks of {per_chunk / 2**20:.0f} MiB decoded; the limit is "
                                               f"{chunk_cap // 2**20} MiB (--max-memory)"))
                continue
            itemsize = per_chunk // max(1, math.prod(int(c) for c in arr.metadata.chunk_grid.chunk_shape))
            if key in _READ_WHOLE and math.prod(arr.shape) * itemsize > lim.max_memory // 4:
                problems.append(Problem(where, f"shape {tuple(arr.shape)} is more than a quarter of the memory budget "
                                               f"({lim.max_memory // 2**20} MiB, --max-memory)"))
                continue
            problems += stored_problems(arr, where, trusted=kind == "ground-truth")
    return problems
