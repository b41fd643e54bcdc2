"""What round 2 of the faithfulness flow will cost, said before the work starts (``xbench perturb`` and
``xbench-extract --faithfulness``; docs/how-to/faithfulness.md § Cost).

The number of images is exact (``make_round2`` counts them before it writes one). The size on disk is an
estimate: each round-2 image is one S x S uint8 chunk, compressed like the images of the store it is made
from, so it is taken as the input store's bytes on disk per image (its ``image`` array's chunk files; S x S when
they cannot be listed, e.g. a zipped store) plus the per-image files beside it (its id and original size: about
4 KiB on a local disk). Perturbed images hold grey or smoothed cells and compress better than the originals, so
the estimate errs high (the phantom's 100 cases, 512 px: 5,632 images, estimated 0.95 GB, written 0.54 GB).

With ``--limit N`` the line also gives the whole run, extrapolated from the cases the limit keeps: that is how a
cost is seen before the full run is started.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PER_IMAGE_FILES", "announcer", "bytes_per_image", "cost_line", "human_bytes"]

#: bytes on disk per round-2 image besides its pixels: each image is a chunk of its own, so it brings 3 folders
#: and 1 small file (its original size's chunk), a 4 KiB block each on ext4 and the like; one more block for the
#: folders that list them all and the store's other files
BLOCK = 4096
PER_IMAGE_FILES = 5 * BLOCK


def bytes_per_image(images_path, dataset: str, n_images: int, size: int) -> float:
    """The input store's bytes on disk per stored image of ``dataset``, or ``size * size`` when unknown."""
    folder = Path(images_path) / dataset / "image"
    if n_images > 0 and folder.is_dir():
        total = 0
        for root, _, files in os.walk(folder):
            for f in files:
                if f != "zarr.json":
                    try:  # what the file takes on disk (whole blocks), as du counts
                        st = os.stat(os.path.join(root, f))
                        total += max(st.st_size, 512 * getattr(st, "st_blocks", 0))
                    except OSError:
                        pass
        if total > 0:
            return total / n_images
    return float(size * size)


def human_bytes(n: float) -> str:
    """1.2 GB, 340 MB, 12 kB (decimal units, as ``du -h --si``)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n < 10 * scale else f"{n / scale:.0f} {unit}"
    return f"{int(n)} B"


def cost_line(n_images: int, per_image: float, cases: int, all_cases: int) -> str:
    """The line printed before round 2 is written: images, estimated size, and with a limit the whole run."""
    size = n_images * (BLOCK * -(-per_image // BLOCK) + PER_IMAGE_FILES)  # each image's pixels: whole blocks
    line = (f"round 2: {n_images:,} images for {cases:,} case(s), about {human_bytes(size)} on disk (an estimate "
            "that errs high); the team's round-2 extraction scores as many images")
    if 0 < cases < all_cases:
        scale = all_cases / cases
        line += (f"; all {all_cases:,} cases would make about {round(n_images * scale):,} images, "
                 f"{human_bytes(size * scale)}")
    return line


def announcer(images_path, images, datasets, limit, say):
    """``on_total`` for make_round2: prints the cost line (schemas/round2_cost.py) through ``say`` (None: silent)."""
    names = [n for n in (datasets or sorted(images.datasets)) if n in images.datasets]
    sizes = {n: len(images.datasets[n].case_id) for n in names}
    cases = sum(min(limit, k) if limit else k for k in sizes.values())
    per_image = {n: bytes_per_image(images_path, n, k, int(images.datasets[n].image.shape[1])) for n, k in sizes.items()}
    mean = sum(per_image[n] * sizes[n] for n in names) / max(1, sum(sizes.values()))

    def announce(n_images: int) -> None:
        if say is not None:
            say(cost_line(n_images, mean, cases, sum(sizes.values())))

    return announce
