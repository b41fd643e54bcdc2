"""The robustness track at preparation: perturbed copies of every case (``xbench-prepare --perturb``).

After the clean cases are final, :func:`write_copies` writes the dataset's images group again with the clean
rows first (unchanged, same order) and then every perturbed copy (:mod:`xbench.schemas.perturbations` plans
them: ids, drawn parameters, seeds), and returns the table that ``write_ground_truth`` stores in the private
ground truth. A copy is the augmentation's image function applied to the clean case's stored S x S image
(and, with ``--keep-original``, to its original-resolution image, with the same parameters and seed: the
augmentations are defined in normalised coordinates, so both are the same perturbation).

Resuming: the clean rows are staged once (``clean.npy`` beside the side files, like a rewrite without failed
cases), then the new group is written block by block by :class:`~xbench.schemas.ImagesWriter`, which resumes an
unfinished group of the same spec; ``copies.done`` marks the end. Every copy depends only on its own row of the
table, so the result is the same whatever the block or worker layout.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xbench.schemas import perturbations as PT


@dataclass(frozen=True)
class Copies:
    """What ``--perturb``, ``--perturb-copies`` and ``--seed`` ask for (parsed, checked)."""

    templates: tuple
    copies: int
    seed: int

    @classmethod
    def of(cls, perturb, copies: int, seed: int | None) -> "Copies | None":
        items = [perturb] if isinstance(perturb, str) else perturb or ()
        if not (isinstance(items, (list, tuple)) and all(isinstance(i, str) for i in items)):
            raise PT.InputError(["perturb must be a SPEC string or a list of them, e.g. [hflip, rotate:degrees=5]"])
        templates = PT.parse_templates(items)
        if not templates:
            return None
        if not (isinstance(copies, int) and 1 <= copies <= PT.MAX_COPIES):
            raise PT.InputError([f"--perturb-copies must be an integer between 1 and {PT.MAX_COPIES}, got {copies!r}"])
        seed = 0 if seed is None else seed
        if not (isinstance(seed, int) and 0 <= seed < 2**63):
            raise PT.InputError([f"--seed (the key of the perturbed copies) must be an integer in 0..2^63-1, got {seed!r}"])
        return cls(tuple(templates), int(copies), int(seed))

    def plan(self) -> dict:
        """What the resume plan records: changing any of it starts the preparation again."""
        return {"specs": [t.text for t in self.templates], "copies": self.copies, "seed": self.seed}

    def table(self, dataset: str, case_ids) -> PT.Perturbations:
        from xbench.schemas.store import MAX_CASES

        per_case = sum(t.copies(self.copies) for t in self.templates)
        total = len(case_ids) * (1 + per_case)
        if total > MAX_CASES:
            raise PT.InputError([f"{dataset}: {len(case_ids)} case(s) with {per_case} cop{'y' if per_case == 1 else 'ies'} "
                                 f"each ({len(self.templates)} SPEC(s), --perturb-copies {self.copies}) make {total} "
                                 f"rows; the limit is {MAX_CASES}"])
        return PT.plan_copies(dataset, case_ids, list(self.templates), self.copies, self.seed)


def perturb_problems(perturb, copies=1) -> list[str]:
    """Why a suite's ``perturb`` (and ``perturb_copies``) cannot be used, one line each; none when it can."""
    try:
        Copies.of(perturb, copies if isinstance(copies, int) and not isinstance(copies, bool) else 1, 0)
    except PT.InputError as exc:
        return [str(p) for p in exc.problems] or [str(exc)]
    return []


def _stage_clean(images_path: Path, key: str, work: Path, keep_original: bool) -> None:
    """The clean rows (and originals) as side files, so the group itself may be replaced."""
    from xbench.schemas import read_images

    if (work / "clean.ready").exists():
        return
    source = read_images(images_path).datasets[key]
    n = len(source.case_id)
    arr = np.lib.format.open_memmap(work / "clean.npy", mode="w+", dtype=np.uint8, shape=(n, *source.image.shape[1:]))
    step = int(source.image.chunks[0])
    for a in range(0, n, step):  # one stored block at a time
        arr[a:a + step] = np.asarray(source.image[a:min(a + step, n)])
    arr.flush()
    del arr
    orig = np.asarray(source.orig_size[...])
    np.save(work / "clean_orig.npy", orig)
    if keep_original:
        sizes = orig[:, 0].astype(np.int64) * orig[:, 1]
        flat = np.lib.format.open_memmap(work / "clean_pixels.npy", mode="w+", dtype=np.uint8, shape=(int(sizes.sum()),))
        at = 0
        for r in range(n):
            im = source.original(r).reshape(-1)
            flat[at:at + im.size] = im
            at += im.size
        flat.flush()
        del flat
    (work / "clean.ready").write_text("")


def _row_image(r: int, n: int, clean, table: PT.Perturbations, specs: dict) -> np.ndarray:
    if r < n:
        return np.asarray(clean[r])
    j = r - n
    return specs[j].apply_image(np.asarray(clean[int(table.case[j])]), seed=int(table.seed[j]))


def write_copies(copies: Copies, images_path: Path, key: str, work: Path, case_ids, classes, image_size: int,
                 cases_per_block: int, attrs: dict, keep_original: bool, queries, guard, progress: bool,
                 query_probes=None) -> PT.Perturbations:
    """Append the perturbed copies to the images group ``key`` (module doc); their table for the ground truth.

    ``queries`` (the clean cases' phrase rows, with text; None without): every copy gets a phrase row for each
    original phrase row of its clean case (``query_probes``: which rows are text probes; probes are not copied),
    under a new opaque id, after the clean rows; the table records which row each copies."""
    from xbench.schemas import ImagesWriter
    from xbench.schemas.augment import parse_spec
    from xbench.schemas.store import ensure_root

    table = copies.table(key, case_ids)
    if queries is not None:
        original = np.ones(len(queries), bool) if query_probes is None else ~query_probes.is_probe
        table = table.with_queries(key, queries.id, queries.case, original)
        extra = table.copy_queries(queries, len(case_ids))
        queries = type(queries)(np.concatenate([np.asarray(queries.id, dtype=str), extra.id]),
                                np.concatenate([np.asarray(queries.case, np.int64), extra.case]),
                                np.concatenate([np.asarray(queries.category, dtype=str), extra.category]),
                                None if queries.text is None else np.concatenate([np.asarray(queries.text, dtype=str),
                                                                                  extra.text]))
    if (work / "copies.done").exists():
        return table
    _stage_clean(images_path, key, work, keep_original)
    clean = np.load(work / "clean.npy", mmap_mode="r")
    orig = np.load(work / "clean_orig.npy")
    n = len(case_ids)
    flat = np.load(work / "clean_pixels.npy", mmap_mode="r") if keep_original else None
    starts = np.concatenate([[0], np.cumsum(orig[:, 0].astype(np.int64) * orig[:, 1])])

    def original(r: int) -> np.ndarray:
        return np.asarray(flat[starts[r]:starts[r + 1]]).reshape(orig[r])

    parsed: dict[str, object] = {}
    specs = {}
    for j, text in enumerate(table.spec.tolist()):
        specs[j] = parsed.setdefault(text, parse_spec(text))
    all_ids = np.concatenate([np.asarray(case_ids, dtype=str), table.id])
    with guard.critical():
        root = ensure_root(images_path, "images")  # the minor first: a store holding copies always declares it
        meta = root.attrs["xbench"]
        minor = meta.get("schema_minor", 0) if isinstance(meta.get("schema_minor", 0), int) else 0
        root.attrs["xbench"] = {**meta, "schema_minor": max(PT.IMAGES_MINOR, minor)}
        writer = ImagesWriter(images_path, key, case_ids=all_ids, classes=classes, image_size=image_size,
                              cases_per_block=cases_per_block, attrs={**attrs, PT.IMAGES_ATTR: int(len(table))},
                              keep_original=keep_original, queries=queries)
    bar = None
    if progress:
        from xbench.schemas._cli import progress as make_bar

        bar = make_bar(len(table), desc=f"perturb {key}", unit="copy")
    try:
        for b in writer.blocks_todo():
            a, z = writer.block_rows(b)
            images = np.stack([_row_image(r, n, clean, table, specs) for r in range(a, z)])
            src = np.array([r if r < n else int(table.case[r - n]) for r in range(a, z)], dtype=np.int64)
            originals = None
            if keep_original:
                originals = [original(r) if r < n else
                             specs[r - n].apply_image(original(int(src[r - a])), seed=int(table.seed[r - n]))
                             for r in range(a, z)]
            with guard.critical():
                writer.write_block(b, images, orig[src], originals)
            if bar is not None:
                bar.update(max(0, z - max(a, n)))
        with guard.critical():
            writer.finish()
            (work / "copies.done").write_text("")
    finally:
        if bar is not None:
            bar.close()
    return table
