"""REFLACX's readers for ``xbench human`` (issue 37, item 5): the reader-side source only.

In REFLACX's phases 1 and 2 every image was read by all five radiologists (data_cards/reflacx.md). The release
does not say which radiologist made which reading, so a *reader* here is one reading (its id, e.g.
``P101R000001``), scored on its one image against the *other* readings of the same image, as VinDr-CXR's
readers are against the other readers of each image (:func:`xbench.extract.human.read_vindr`, the same
:class:`~xbench.extract.human.Reading` it returns, so ``--rule union|majority`` combine them the same way).

A reading *marks* a class when it drew an ellipse for it at ``certainty`` or above (default 3, Possibly) on a
finding it labels present: its mark is those ellipses (native masks, data_cards/reflacx.md). Labels without an
ellipse (Support devices need none) are not marks, as VinDr's classes without a box are not. Images read by
fewer than two readings (phase 3) are left out. ``xbench human reflacx`` reads them through
:func:`xbench.extract.human.read_readers` and scores each reading like a model (docs/how-to/human.md).
"""
from __future__ import annotations

from pathlib import Path

from xbench.schemas.errors import InputError, Problem

from xbench.extract.human_marks import Mark, Reading, reader_count_problems


def read_reflacx(root: Path, sizes: dict[str, tuple[int, int]], classes: tuple[str, ...], *, certainty: int = 3,
                 phases: tuple[int, ...] = (1, 2), images: Path | None = None) -> Reading:
    """The readings of the images in ``sizes`` (an images store's cases) that at least two readings read: each
    reading's ellipses, and as its ground truth the other readings' ellipses of the same image."""
    from xbench.extract.datasets.base import ReaderError
    from xbench.extract.datasets.reflacx import REFLACXReader

    try:
        reader = REFLACXReader(root, "all", certainty=str(certainty), phases=",".join(str(p) for p in phases),
                               **({"images": str(images)} if images else {}))
        records = reader.records()
    except ReaderError as exc:
        raise InputError(getattr(exc, "problems", None) or [Problem(str(root), str(exc))]) from None
    if reader.problems:
        raise InputError([Problem(p.source, f"[{p.case_id}] {p.message}" if p.case_id else p.message)
                          for p in reader.problems[:20]])
    _check_sizes(records, sizes)
    counts = {image: len(rs) for image, rs in reader.all_readings.items() if image in sizes and len(rs) >= 2}
    counts["*"] = sum(counts.values())  # a reader is one reading
    too_many = reader_count_problems(counts, str(root / "main_data"))
    if too_many:
        raise InputError(too_many)
    marks: dict[str, dict[str, dict[str, Mark]]] = {}
    cases: dict[str, list[str]] = {}
    truth: dict[str, dict] = {}
    absent = 0
    for image in sorted(reader.all_readings):
        if image not in sizes:
            absent += 1
            continue
        readings = sorted(reader.all_readings[image], key=lambda r: r.reader)
        if len(readings) < 2:
            continue
        drawn = {r.reader: {c: list(r.regions[c]) for c in classes if r.labels.get(c) == 1 and r.regions.get(c)}
                 for r in readings}
        for r in readings:
            cases.setdefault(r.reader, []).append(image)
            marks.setdefault(r.reader, {})[image] = {c: Mark(shapes=s) for c, s in drawn[r.reader].items()}
            others = [drawn[o.reader] for o in readings if o.reader != r.reader]
            truth.setdefault(r.reader, {})[image] = {c: [o.get(c, []) for o in others] for c in classes
                                                    if any(c in o for o in others)}
    if not cases:
        raise InputError([Problem(str(root), "no image of the images store was read by two or more REFLACX readings "
                                             f"(phases {','.join(str(p) for p in phases)})")])
    files = [root / "main_data" / f"metadata_phase_{p}.csv" for p in phases
             if (root / "main_data" / f"metadata_phase_{p}.csv").is_file()]
    notes = [f"{absent} REFLACX image(s) are not in the images store: left out"] if absent else []
    return Reading(marks, cases, truth, files, notes)


def _check_sizes(records, sizes: dict[str, tuple[int, int]]) -> None:
    """Each image's size in REFLACX's metadata (up to 20,000 x 20,000, what its ellipse masks are built at) against
    the images store's, before any mask is allocated: a metadata size that differs is refused, one line an image
    (the first 20), instead of a 400 MB mask per ellipse the scoring would then build (issue 44, class 3)."""
    bad = [r for r in records if r.case_id in sizes and tuple(int(v) for v in r.orig_size) != tuple(sizes[r.case_id])]
    if bad:
        lines = [Problem(r.source, f"[{r.case_id}] REFLACX's metadata gives the image as {r.orig_size[1]}x"
                                  f"{r.orig_size[0]}, the images store as {sizes[r.case_id][1]}x{sizes[r.case_id][0]}")
                 for r in bad[:20]]
        more = [Problem("REFLACX metadata", f"and {len(bad) - 20:,} more image(s) of another size")] if len(bad) > 20 else []
        raise InputError(lines + more)
