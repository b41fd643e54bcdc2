"""Faithfulness in two rounds: the perturbation rules and the organiser's key (contract § Faithfulness).

Round 1 is an ordinary submission (scores and maps). From its maps, :func:`perturbed_image` makes each
case's image progressively deleted, inserted or ROAD-imputed in the order of the team's own map; the team
scores those images with its own model (round 2, a scores-only submission) and the scorer turns the scores
into curves and areas (:func:`curve_area`). Nothing here knows a model: the rules are pure numpy (scipy's
sparse solver for ROAD), shared by ``xbench perturb``, ``xbench-extract --faithfulness`` and the scorer.

The key (which opaque round-2 id is which case, class, curve, order and step) is private: the organiser
keeps it, the team never sees it. It is an ``.npz`` of string and integer columns plus a JSON header,
read back through the bounded input layer (:func:`read_key`).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xbench.schemas.errors import InputError, Problem
from xbench.schemas.schema_versions import minor
from xbench.schemas.options import MAX_CURVE_STEPS

CURVES = ("deletion", "insertion", "road")
#: the orders each curve is measured in: the map's own (most relevant first), ROAD's least-relevant-first
#: (the map order reversed) and a seeded random order, the baseline every curve is compared with
ORDERS = {"deletion": ("map", "random"), "insertion": ("map", "random"), "road": ("map", "reverse", "random")}
IMAGES_MINOR = minor("images", "faithfulness")  # images store minor of a round-2 store (root attribute xbench.faithfulness)
SUBMISSION_MINOR = minor("submission", "scores_only")  # submission minor of a scores-only submission (root attribute xbench.scores_only)
KEY_KIND = "faithfulness-key"
DEFAULT_GRID = 16
DEFAULT_STEPS = 10
#: ROAD's noise: the authors' default 0.01 on images scaled to [0, 1] (road/imputations.py:97), in grey levels
DEFAULT_ROAD_NOISE = 0.01 * 255.0
#: the most round-2 images one run may write (each is one chunk file of the store, S x S bytes)
MAX_ROUND2_IMAGES = 40_000
#: what insertion starts from (the *substrate*): "blur", RISE's choice (Petsiuk et al. 2018; the authors'
#: Evaluation.ipynb, eclique/RISE at d91ea00: a Gaussian blur of the image, kernel 11 x 11, sigma 5), or "grey",
#: the image's fill grey everywhere (XBench's only substrate before 2026-11; a key without the header field has it)
SUBSTRATES = ("blur", "grey")
DEFAULT_SUBSTRATE = "blur"
#: RISE's blur: klen = 11, ksig = 5 (Evaluation.ipynb, the cell defining ``blur``)
BLUR_KLEN, BLUR_SIGMA = 11, 5.0
#: ROAD's neighbour weights (road/imputations.py:94): 1/6 for the four edge neighbours, 1/12 for the diagonals
ROAD_NEIGHBOURS = (((1, 1), 1 / 12), ((0, 1), 1 / 6), ((-1, 1), 1 / 12), ((1, -1), 1 / 12),
                   ((0, -1), 1 / 6), ((-1, -1), 1 / 12), ((1, 0), 1 / 6), ((-1, 0), 1 / 6))


# ------------------------------------------------------------------------------------------ the map's order
def _bilinear_axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # half-pixel centres, negative source positions clamped to 0 (torch's align_corners=False)
    scale = n_in / n_out
    x = np.maximum((np.arange(n_out, dtype=np.float64) + 0.5) * scale - 0.5, 0.0)
    i0 = np.floor(x).astype(np.int64)
    i0 = np.minimum(i0, n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, x - i0


def resize_to_cells(raw: np.ndarray, grid: int) -> np.ndarray:
    """One raw (h, w) map on the ``grid`` x ``grid`` cells, by the contract's step-1 rule (bilinear with half-pixel
    centres and edge clamping; area averaging when the map is at least as large on both axes and larger on one),
    float64. Written here with numpy because the scorer's Numba kernels belong to the scorer; the test compares
    the two."""
    m = np.asarray(raw, dtype=np.float64)
    h, w = m.shape
    if h >= grid and w >= grid and (h > grid or w > grid):
        rows = [m[(o * h) // grid: -(-((o + 1) * h) // grid)].mean(axis=0) for o in range(grid)]
        m = np.stack(rows)
        return np.stack([m[:, (o * w) // grid: -(-((o + 1) * w) // grid)].mean(axis=1) for o in range(grid)], axis=1)
    r0, r1, rw = _bilinear_axis(h, grid)
    c0, c1, cw = _bilinear_axis(w, grid)
    tmp = m[:, c0] * (1.0 - cw) + m[:, c1] * cw          # along the width first, as the scorer does
    return tmp[r0] * (1.0 - rw)[:, None] + tmp[r1] * rw[:, None]


def map_order(raw: np.ndarray, grid: int) -> np.ndarray:
    """The cells of the map, most relevant first: a stable sort by value descending, so that equal values keep
    row-major order (cell i*grid + j). Min-max normalising would not change it, so the raw resized map is used."""
    return np.argsort(-resize_to_cells(raw, grid).ravel(), kind="stable")


def random_order(n_cells: int, seed: int, *parts: str) -> np.ndarray:
    """A random order of the cells, the same for the same seed, dataset, case and class on every machine."""
    return np.random.default_rng(seed_of(seed, *parts)).permutation(n_cells)


def seed_of(seed: int, *parts) -> np.random.SeedSequence:
    """A seed sequence from the run's seed and the names of what is drawn (strings hashed, so no order of runs
    or of cases changes a draw)."""
    words = [int(seed)]
    for p in parts:
        words.append(int.from_bytes(hashlib.sha256(str(p).encode("utf-8")).digest()[:8], "little"))
    return np.random.SeedSequence(words)


def orders_for(curve: str, raw: np.ndarray, grid: int, seed: int, dataset: str, case: str, cls: str) -> dict[str, np.ndarray]:
    """Every order ``curve`` is measured in, for one pair: {"map", ["reverse",] "random"} -> cell order."""
    mine = map_order(raw, grid)
    out = {"map": mine, "random": random_order(grid * grid, seed, dataset, case, cls)}
    if curve == "road":
        out["reverse"] = mine[::-1].copy()
    return {k: out[k] for k in ORDERS[curve]}


# ------------------------------------------------------------------------------------------ steps and images
def step_cells(n_cells: int, steps: int) -> np.ndarray:
    """Cells changed after step k = 0..K: floor(k * n_cells / K) (k = 0: none; k = K: all)."""
    k = np.arange(steps + 1, dtype=np.int64)
    return (k * n_cells) // steps


def curve_steps(curve: str, steps: int) -> range:
    """The steps a curve has images for: 0..K, except ROAD, which stops at K-1 (with every pixel removed its
    linear system has no known pixel to interpolate from)."""
    return range(steps) if curve == "road" else range(steps + 1)


def cell_index(size: int, grid: int) -> np.ndarray:
    """(size, size) int64: the cell of each pixel; cell (i, j) covers rows floor(i*S/G) .. floor((i+1)*S/G) - 1
    and the same columns, so every pixel is in exactly one cell even when G does not divide S."""
    starts = (np.arange(grid + 1, dtype=np.int64) * size) // grid   # the first row of cell i, and S at i = G
    of_row = np.searchsorted(starts, np.arange(size, dtype=np.int64), side="right") - 1
    return of_row[:, None] * grid + of_row[None, :]


def fill_value(image: np.ndarray) -> int:
    """The grey a deleted pixel takes: the mean of the whole image, rounded half to even."""
    return int(np.rint(np.asarray(image, dtype=np.float64).mean()))


def rise_kernel_1d(klen: int = BLUR_KLEN, sigma: float = BLUR_SIGMA) -> np.ndarray:
    """One axis of RISE's blur kernel. The authors' ``gkern(klen, nsig)`` (evaluation.py:9-22) smooths a klen x klen
    delta with ``scipy.ndimage.gaussian_filter(inp, nsig)`` at scipy's defaults (mode "reflect", truncate 4): the
    Gaussian's taps beyond the 11 x 11 square are folded back into it, so the kernel sums to 1 and is the outer
    product of this vector with itself (the filter is separable and the delta is one). float64 here (theirs is cast to
    float32)."""
    from scipy.ndimage import gaussian_filter1d

    delta = np.zeros(klen, dtype=np.float64)
    delta[klen // 2] = 1.0
    return gaussian_filter1d(delta, sigma)


def blurred(image: np.ndarray, pad: float) -> np.ndarray:
    """RISE's insertion substrate: ``conv2d(x, gkern(11, 5), padding=5)`` (Evaluation.ipynb), i.e. each pixel the
    kernel-weighted sum of the 11 x 11 square around it, the pixels outside the image taking the value ``pad`` (their
    zero padding is 0 of the normalised input, the normalisation's mean; here the fill grey, the same stand-in for
    RISE's zero as deletion's), in float64, rounded half to even, clipped to 0..255 (uint8)."""
    from scipy.ndimage import correlate1d

    k = rise_kernel_1d()
    x = np.asarray(image, dtype=np.float64)
    # separable: along the columns, then the rows; a padded row is pad * sum(k) = pad either way
    x = correlate1d(x, k, axis=1, mode="constant", cval=float(pad))
    x = correlate1d(x, k, axis=0, mode="constant", cval=float(pad))
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def substrate_image(image: np.ndarray, substrate: str) -> np.ndarray:
    """The image insertion starts from: the blurred image ("blur") or the fill grey everywhere ("grey")."""
    image = np.asarray(image, dtype=np.uint8)
    if substrate == "blur":
        return blurred(image, fill_value(image))
    if substrate == "grey":
        return np.full_like(image, fill_value(image))
    raise ValueError(f"unknown insertion substrate {substrate!r}")


def changed_mask(order: np.ndarray, n_changed: int, cells: np.ndarray) -> np.ndarray:
    """(S, S) bool: the pixels of the first ``n_changed`` cells of ``order``."""
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return rank[cells] < n_changed


def perturbed_image(image: np.ndarray, curve: str, mask: np.ndarray, *, noise: float = DEFAULT_ROAD_NOISE,
                    rng: np.random.Generator | None = None, substrate: str = DEFAULT_SUBSTRATE,
                    base: np.ndarray | None = None) -> np.ndarray:
    """The round-2 image (uint8, S x S) of one step: ``mask`` holds the pixels of the cells taken so far.

    deletion: those pixels take the fill grey; insertion: only those pixels are the image's, the rest is the
    ``substrate`` (:func:`substrate_image`; ``base``: that image, when the caller has made it already); road: those
    pixels are imputed by ROAD's noisy linear imputation (:func:`road_impute`)."""
    image = np.asarray(image, dtype=np.uint8)
    if curve == "deletion":
        return np.where(mask, np.uint8(fill_value(image)), image)
    if curve == "insertion":
        return np.where(mask, image, substrate_image(image, substrate) if base is None else base)
    if curve == "road":
        return road_impute(image, mask, noise=noise, rng=rng)
    raise ValueError(f"unknown curve {curve!r}")


def road_system(image: np.ndarray, missing: np.ndarray):
    """ROAD's sparse linear system (road/imputations.py:119-171), built anew: one unknown per missing pixel, in
    row-major order; each says that the pixel equals the weighted mean of its neighbours inside the image
    (weights :data:`ROAD_NEIGHBOURS`), known neighbours moved to the right-hand side. Returns (A, b, index) with
    A (n, n) CSC, b (n,) and index the flat positions of the unknowns."""
    from scipy.sparse import csc_matrix

    H, W = missing.shape
    flat_missing = missing.ravel()
    index = np.flatnonzero(flat_missing)
    var = np.full(H * W, -1, dtype=np.int64)
    var[index] = np.arange(index.size)
    values = np.asarray(image, dtype=np.float64).ravel()
    r, c = np.divmod(index, W)
    diag = np.zeros(index.size)
    b = np.zeros(index.size)
    rows, cols, data = [], [], []
    for (dr, dc), w in ROAD_NEIGHBOURS:
        rr, cc = r + dr, c + dc
        inside = (rr >= 0) & (rr < H) & (cc >= 0) & (cc < W)
        diag[inside] += w  # the weight of the neighbours that exist (the authors' sum_neighbors)
        eq = np.flatnonzero(inside)
        pos = rr[eq] * W + cc[eq]
        unknown = flat_missing[pos]
        b[eq[~unknown]] += w * values[pos[~unknown]]
        rows.append(eq[unknown])
        cols.append(var[pos[unknown]])
        data.append(np.full(int(unknown.sum()), -w))
    rows.append(np.arange(index.size))
    cols.append(np.arange(index.size))
    data.append(diag)
    A = csc_matrix((np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))), shape=(index.size, index.size))
    return A, b, index


def road_impute(image: np.ndarray, missing: np.ndarray, *, noise: float = DEFAULT_ROAD_NOISE,
                rng: np.random.Generator | None = None) -> np.ndarray:
    """ROAD's noisy linear imputation of the ``missing`` pixels of a grey image (uint8 in, uint8 out): the
    solution of :func:`road_system` plus Gaussian noise of standard deviation ``noise`` grey levels on each
    imputed pixel (road/imputations.py:186-190), then rounded half to even and clipped to 0..255. With nothing
    missing the image is returned unchanged; with everything missing there is nothing to interpolate from."""
    image = np.asarray(image, dtype=np.uint8)
    missing = np.asarray(missing, dtype=bool)
    if not missing.any():
        return image.copy()
    out = road_fill(image, missing)
    if noise:
        out[missing] += noise * (rng if rng is not None else np.random.default_rng(0)).standard_normal(int(missing.sum()))
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def road_fill(image: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """The noiseless linear imputation: float64 (H, W), the known pixels as they are, the missing ones the
    solution of :func:`road_system` (scipy's direct sparse solver, as the authors use)."""
    from scipy.sparse.linalg import spsolve

    missing = np.asarray(missing, dtype=bool)
    if missing.all():
        raise ValueError("ROAD cannot impute an image with every pixel missing")
    out = np.asarray(image, dtype=np.float64).copy()
    if not missing.any():
        return out
    A, b, index = road_system(image, missing)
    out.ravel()[index] = np.atleast_1d(spsolve(A, b))
    return out


# ------------------------------------------------------------------------------------------ curves and areas
def probability(scores: np.ndarray, score_kind: str) -> np.ndarray:
    """The recognition rule: sigmoid(score) for logits, the score itself for probabilities (float64)."""
    s = np.asarray(scores, dtype=np.float64)
    if score_kind == "logit":
        return 0.5 * (1.0 + np.tanh(0.5 * s))  # the logistic function without overflow for large |s|
    return s


def curve_area(fractions: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Area under the curve(s) ``values[..., k]`` over ``fractions[k]``, by the trapezoid rule, divided by the span
    fractions[-1] - fractions[0] (1 for deletion and insertion, (K-1)/K for ROAD): the curve's mean height."""
    x = np.asarray(fractions, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    dx = np.diff(x)
    area = ((y[..., 1:] + y[..., :-1]) * 0.5 * dx).sum(axis=-1)
    return area / (x[-1] - x[0])


# ------------------------------------------------------------------------------------------ the key
KEY_COLUMNS = {"round2_id": "U", "dataset": "U", "case_id": "U", "class_name": "U", "curve": "U", "order": "U",
               "step": "i"}


@dataclass
class Key:
    """The private key of a round-2 store: one row per (dataset, case, class, curve, order, step)."""

    header: dict
    round2_id: np.ndarray
    dataset: np.ndarray
    case_id: np.ndarray
    class_name: np.ndarray
    curve: np.ndarray
    order: np.ndarray
    step: np.ndarray

    def __len__(self) -> int:
        return len(self.round2_id)

    @property
    def steps(self) -> int:
        return int(self.header["steps"])

    @property
    def grid(self) -> int:
        return int(self.header["grid"])

    @property
    def substrate(self) -> str:
        """Insertion's substrate; keys written before it was recorded used the fill grey."""
        return str(self.header.get("insertion_substrate", "grey"))


def write_key(path: str | os.PathLike, key: Key) -> None:
    """Write the key atomically (a temporary file in the same folder, renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    arrays = {k: np.asarray(getattr(key, k), dtype=str if t == "U" else np.int64) for k, t in KEY_COLUMNS.items()}
    try:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, header=np.asarray(json.dumps(key.header, sort_keys=True)), **arrays)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_key(path: str | os.PathLike, *, where: str | None = None) -> Key:
    """Read and check a key written by :func:`write_key` (an untrusted file: bounded, no pickle, every column
    present with one length and its type, the header a JSON object naming the key's kind, curves and steps)."""
    from xbench.schemas.inputs import load_npz, parse_json

    w = where or str(path)
    arrays = load_npz(path, where=w, max_bytes=512 * 2**20)
    problems: list[Problem] = []
    missing = [k for k in ("header", *KEY_COLUMNS) if k not in arrays]
    if missing:
        raise InputError([Problem(w, f"is not a faithfulness key: array(s) {', '.join(missing)} missing")])
    header_arr = arrays["header"]
    if header_arr.shape != () or header_arr.dtype.kind != "U":
        raise InputError([Problem(w, "is not a faithfulness key: 'header' must be one string")])
    header = parse_json(str(header_arr), f"{w}: header")
    if not isinstance(header, dict) or header.get("kind") != KEY_KIND:
        raise InputError([Problem(w, f"is not a faithfulness key (header kind must be {KEY_KIND!r})")])
    n = None
    for k, t in KEY_COLUMNS.items():
        a = arrays[k]
        if a.ndim != 1 or a.dtype.kind != t:
            problems.append(Problem(f"{w}: {k}", f"must be a 1-D {'string' if t == 'U' else 'integer'} array"))
            continue
        if n is None:
            n = len(a)
        elif len(a) != n:
            problems.append(Problem(f"{w}: {k}", f"has {len(a)} rows, the other columns {n}"))
    steps, grid, curves = header.get("steps"), header.get("grid"), header.get("curves")
    if not (isinstance(steps, int) and not isinstance(steps, bool) and 1 <= steps <= MAX_CURVE_STEPS):
        problems.append(Problem(f"{w}: header", f"'steps' must be an integer in 1..{MAX_CURVE_STEPS}"))
    if not (isinstance(grid, int) and not isinstance(grid, bool) and 1 <= grid <= 1024):
        problems.append(Problem(f"{w}: header", "'grid' must be an integer in 1..1024"))
    if not (isinstance(curves, list) and curves and all(c in CURVES for c in curves)):
        problems.append(Problem(f"{w}: header", f"'curves' must list some of {', '.join(CURVES)}"))
    if header.get("pairs", "all") not in ("positive", "all"):
        problems.append(Problem(f"{w}: header", "'pairs' must be 'positive' or 'all'"))
    if header.get("insertion_substrate", "grey") not in SUBSTRATES:
        problems.append(Problem(f"{w}: header", f"'insertion_substrate' must be one of {', '.join(SUBSTRATES)}"))
    if isinstance(steps, int) and isinstance(curves, list) and "road" in curves and steps < 2:
        problems.append(Problem(f"{w}: header", "ROAD needs 'steps' >= 2 (its curve stops one step before every "
                                                "pixel is removed; with 1 step it has no area)"))
    if n == 0:
        problems.append(Problem(w, "the key has no rows (no round-2 image to score)"))
    if problems:
        raise InputError(problems)
    key = Key(header, *(arrays[k] for k in KEY_COLUMNS))
    bad_curve = ~np.isin(key.curve, curves)
    if bad_curve.any():
        problems.append(Problem(f"{w}: curve", f"{int(bad_curve.sum())} row(s) name a curve the header does not list"))
    for c in curves:
        rows = key.curve == c
        if (~np.isin(key.order[rows], ORDERS[c])).any():
            problems.append(Problem(f"{w}: order", f"rows of curve {c} must have an order in {', '.join(ORDERS[c])}"))
        st = key.step[rows]
        top = steps - 1 if c == "road" else steps
        if st.size and (st.min() < 0 or st.max() > top):
            problems.append(Problem(f"{w}: step", f"rows of curve {c} must have steps in 0..{top}"))
    if (key.round2_id == "").any():
        problems.append(Problem(f"{w}: round2_id", "empty id"))
    if problems:
        raise InputError(problems)
    return key
