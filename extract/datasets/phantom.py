"""The ``phantom`` dataset: seeded synthetic chest radiographs with known findings and regions.

Each case is a frontal "radiograph" drawn with vectorised NumPy: air, a body outline, two lungs
with vessel-like markings, a spine, a heart, domed hemidiaphragms over a brighter abdomen and
posterior ribs, plus Gaussian noise. Five findings are placed with fixed prevalences:

==================  ==========  ===========================================================
class               prevalence  appearance (its region is exactly the changed pixels)
==================  ==========  ===========================================================
Cardiomegaly        0.30        heart widened to a cardiothoracic ratio of about 0.55-0.65;
                                the region is the heart silhouette
Pleural effusion    0.30        fluid density filling one lung base up to a meniscus that
                                rises laterally (blunting the costophrenic angle)
Consolidation       0.30        a lobulated dense blob inside one lung, markings kept
Nodule              0.25        a small round dense opacity (radius 1.2-3.5 % of the width)
Pneumothorax        0.20        a dark band without lung markings between the chest wall and
                                a collapsed lung, with a bright visceral pleural line
==================  ==========  ===========================================================

Labels are 0/1 for every class (no -1). A label-1 finding always has a non-empty native region
(:class:`~.base.Mask`), a label-0 finding none. Every case is drawn from its own generator
``numpy.random.default_rng([seed, split, index])``, so a case does not depend on how many cases
are drawn, in which order, or on how many workers: the same seed gives byte-identical images.

``size`` is the native (square) image size in pixels, 64 or more; 256 by default.

``phrases`` (default false): each present finding also becomes a phrase row (contract §Phrase rows)
whose text names the finding and its side, e.g. "left pneumothorax", from the case's own parameters
(no extra random draw, so images and labels are the same with or without phrases), and whose region is
the finding's region: the whole phrase-grounding path runs offline.

Simulated readers (:func:`draw_reading`, used by ``xbench human phantom``): extra readers who re-read each case
and mark its findings with a stated error model (misses, jittered and resized regions, false marks), drawn
from their own stream, so that the human ceiling exists on the phantom; the stores never change.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from xbench.schemas.options import MAX_PHANTOM_CASES

from xbench.extract.datasets.base import CaseRecord, DatasetReader, Mask, Phrase, ReaderError

__all__ = ["PHANTOM_CLASSES", "PREVALENCE", "PhantomCase", "PhantomReader", "render_image", "render_finding",
           "ReaderMark", "draw_reading", "jitter_mask", "salient_point", "READER_MISS", "READER_FALSE_MARK",
           "READER_SHIFT_SD", "READER_SCALE_SD", "READER_SCALE_RANGE", "MAX_READERS"]

PHANTOM_CLASSES: tuple[str, ...] = ("Cardiomegaly", "Pleural effusion", "Consolidation", "Nodule", "Pneumothorax")
PREVALENCE: dict[str, float] = {
    "Cardiomegaly": 0.30,
    "Pleural effusion": 0.30,
    "Consolidation": 0.30,
    "Nodule": 0.25,
    "Pneumothorax": 0.20,
}
_SPLITS = ("test", "val")
MAX_CASES = MAX_PHANTOM_CASES  # a typo of a few zeros must not start a week-long run or fill the disk
MAX_SIZE = 4096


@dataclass(frozen=True)
class PhantomCase:
    """All random choices of one case, in units of the image width (u = x / size, v = y / size).

    ``side`` fields are 0 for the patient's right lung (image left) and 1 for the left lung.
    """

    body_rx: float
    lung_cx: tuple[float, float]
    lung_cy: float
    lung_rx: float
    lung_ry: float
    dome: float  # height of the diaphragm dome, above the lung base
    heart_cx: float
    heart_rx: float
    heart_ry: float
    rib_phase: float
    findings: tuple[str, ...]
    effusion_side: int
    effusion_height: float
    consolidation_side: int
    consolidation_centres: tuple[tuple[float, float], ...]
    consolidation_radius: float
    nodule_side: int
    nodule_centre: tuple[float, float]
    nodule_radius: float
    pneumothorax_side: int
    pneumothorax_collapse: float
    noise_seed: int


def _point_in_lung(rng: np.random.Generator, cx: float, cy: float, rx: float, ry: float, depth: float):
    """A uniform point in the ellipse shrunk by ``depth`` (0 < depth < 1), kept above the base."""
    ang = rng.uniform(0, 2 * np.pi)
    rad = depth * np.sqrt(rng.uniform(0, 1))
    return (float(cx + rad * rx * np.cos(ang)), float(cy - abs(rad * ry * np.sin(ang)) * 0.9))


def draw_case(seed: int, split: str, index: int) -> PhantomCase:
    """Draw the parameters of case ``index`` of ``split`` for ``seed`` (cheap: no pixels)."""
    rng = np.random.default_rng([seed, _SPLITS.index(split), index])
    present = tuple(c for c in PHANTOM_CLASSES if rng.uniform() < PREVALENCE[c])
    lung_rx, lung_ry = rng.uniform(0.125, 0.145), rng.uniform(0.26, 0.30)
    lung_cx = (0.5 - rng.uniform(0.17, 0.19), 0.5 + rng.uniform(0.17, 0.19))
    lung_cy = rng.uniform(0.44, 0.47)
    if "Cardiomegaly" in present:
        heart_rx, heart_ry = rng.uniform(0.19, 0.22), rng.uniform(0.14, 0.16)
    else:
        heart_rx, heart_ry = rng.uniform(0.10, 0.125), rng.uniform(0.11, 0.13)
    sides = rng.integers(0, 2, size=4)
    cons_side = int(sides[1])
    c0 = _point_in_lung(rng, lung_cx[cons_side], lung_cy, lung_rx, lung_ry, 0.55)
    cons_r = rng.uniform(0.035, 0.075)
    cons = tuple((c0[0] + float(dx), c0[1] + float(dy)) for dx, dy in rng.normal(0, cons_r * 0.6, size=(3, 2)))
    nod_side = int(sides[2])
    return PhantomCase(
        body_rx=rng.uniform(0.41, 0.46),
        lung_cx=lung_cx,
        lung_cy=lung_cy,
        lung_rx=lung_rx,
        lung_ry=lung_ry,
        dome=rng.uniform(0.03, 0.05),
        heart_cx=0.5 + rng.uniform(0.03, 0.05),
        heart_rx=heart_rx,
        heart_ry=heart_ry,
        rib_phase=rng.uniform(0, 1),
        findings=present,
        effusion_side=int(sides[0]),
        effusion_height=rng.uniform(0.07, 0.18),
        consolidation_side=cons_side,
        consolidation_centres=((c0[0], c0[1]),) + cons,
        consolidation_radius=cons_r,
        nodule_side=nod_side,
        nodule_centre=_point_in_lung(rng, lung_cx[nod_side], lung_cy, lung_rx, lung_ry, 0.7),
        nodule_radius=rng.uniform(0.012, 0.035),
        pneumothorax_side=int(sides[3]),
        pneumothorax_collapse=rng.uniform(0.6, 0.82),
        noise_seed=int(rng.integers(0, 2**31)),
    )


@functools.lru_cache(maxsize=4)
def _coords(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates (v rows, u columns) in width units, (size, 1) and (1, size) float32."""
    c = ((np.arange(size, dtype=np.float32) + 0.5) / size).astype(np.float32)
    return c[:, None], c[None, :]


def _ellipse(u, v, cx, cy, rx, ry) -> np.ndarray:
    """(u-cx)^2/rx^2 + (v-cy)^2/ry^2, < 1 inside."""
    return ((u - cx) / rx) ** 2 + ((v - cy) / ry) ** 2


def _lung(case: PhantomCase, size: int, side: int) -> np.ndarray:
    """One lung: an ellipse above a domed diaphragm and lateral to the heart. (size, size) bool."""
    v, u = _coords(size)
    cx, cy, rx, ry = case.lung_cx[side], case.lung_cy, case.lung_rx, case.lung_ry
    base = cy + 0.8 * ry - case.dome * (1 - ((u - cx) / rx) ** 2)  # dome highest mid-lung
    inside = (_ellipse(u, v, cx, cy, rx, ry) < 1) & (v < base)
    return inside & ~_heart(case, size)


def _heart(case: PhantomCase, size: int) -> np.ndarray:
    v, u = _coords(size)
    cy = case.lung_cy + 0.8 * case.lung_ry - case.heart_ry * 0.75
    return _ellipse(u, v, case.heart_cx, cy, case.heart_rx, case.heart_ry) < 1


def _effusion(case: PhantomCase, size: int) -> np.ndarray:
    v, u = _coords(size)
    s = case.effusion_side
    cx, rx = case.lung_cx[s], case.lung_rx
    lateral = np.clip((u - cx) / rx * (1 if s == 1 else -1), -1, 1)  # +1 at the chest wall
    level = case.lung_cy + 0.8 * case.lung_ry - case.effusion_height - 0.05 * (lateral + 1)
    return _lung(case, size, s) & (v > level)


def _consolidation(case: PhantomCase, size: int) -> np.ndarray:
    v, u = _coords(size)
    r = case.consolidation_radius
    field = sum(np.exp(-_ellipse(u, v, x, y, r, r * 0.8)) for x, y in case.consolidation_centres)
    blob = field > np.exp(-1.0)
    return blob & _lung(case, size, case.consolidation_side)


def _nodule(case: PhantomCase, size: int) -> np.ndarray:
    v, u = _coords(size)
    x, y = case.nodule_centre
    r = max(case.nodule_radius, 1.5 / size)  # at least a few pixels at any size
    return _ellipse(u, v, x, y, r, r) < 1


def _collapsed_lung(case: PhantomCase, size: int) -> np.ndarray:
    """The lung shrunk towards its hilum (medial, lower third) by ``pneumothorax_collapse``."""
    v, u = _coords(size)
    s, f = case.pneumothorax_side, case.pneumothorax_collapse
    hx = case.lung_cx[s] + (0.6 if s == 0 else -0.6) * case.lung_rx
    hy = case.lung_cy + 0.3 * case.lung_ry
    cx, cy = hx + f * (case.lung_cx[s] - hx), hy + f * (case.lung_cy - hy)
    return _ellipse(u, v, cx, cy, f * case.lung_rx, f * case.lung_ry) < 1


def _pneumothorax(case: PhantomCase, size: int) -> np.ndarray:
    return _lung(case, size, case.pneumothorax_side) & ~_collapsed_lung(case, size)


_FINDING_MASKS = {
    "Cardiomegaly": _heart,
    "Pleural effusion": _effusion,
    "Consolidation": _consolidation,
    "Nodule": _nodule,
    "Pneumothorax": _pneumothorax,
}


def render_finding(case: PhantomCase, size: int, finding: str) -> np.ndarray:
    """The native region of ``finding`` in ``case``: (size, size) bool (empty if absent)."""
    if finding not in case.findings:
        return np.zeros((size, size), dtype=bool)
    return _FINDING_MASKS[finding](case, size)


def _smooth_noise(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """Smooth noise in about [-1, 1]: a random cells x cells grid, bilinearly upsampled. float32."""
    grid = rng.standard_normal((cells, cells)).astype(np.float32)
    pos = (np.arange(size, dtype=np.float32) + 0.5) * (cells / size) - 0.5
    lo = np.clip(np.floor(pos).astype(np.int64), 0, cells - 1)
    hi = np.clip(lo + 1, 0, cells - 1)
    t = np.clip(pos - lo, 0, 1).astype(np.float32)
    # gathers, not a matrix product: BLAS threads in forked workers would oversubscribe the cores
    rows = grid[lo] * (1 - t)[:, None] + grid[hi] * t[:, None]
    return rows[:, lo] * (1 - t)[None, :] + rows[:, hi] * t[None, :]


def _box_blur(x: np.ndarray, r: int) -> np.ndarray:
    """Mean over a (2r+1)^2 window, edge-replicated, via cumulative sums: (S, S) float32 -> same."""
    if r < 1:
        return x.astype(np.float32)
    k = 2 * r + 1
    p = np.pad(x.astype(np.float32), r, mode="edge")
    c = np.cumsum(np.pad(p, ((1, 0), (0, 0))), axis=0)
    p = (c[k:] - c[:-k]) / k
    c = np.cumsum(np.pad(p, ((0, 0), (1, 0))), axis=1)
    return ((c[:, k:] - c[:, :-k]) / k).astype(np.float32)


def _soft(mask: np.ndarray, width: float) -> np.ndarray:
    """A soft version of ``mask`` (0..1 float32): two box blurs of about ``width`` (in image-width
    units) in all, a near-Gaussian edge. Normal anatomy is drawn with these so that its edges are
    gradual, as on a film; findings keep sharp edges."""
    r = max(1, int(round(width * mask.shape[0] / 4)))
    return _box_blur(_box_blur(mask, r), r)


# Brightness (0-255, brighter = denser) of each layer. The findings are the densest structures at
# lesion scale: a consolidation or nodule stands ~130-150 above the lung, while ribs add ~10 and
# the normal heart, spine and chest wall are soft-edged and far less dense.
AIR, BODY, LUNG_DROP, MARKINGS, RIBS, SPINE, HEART, ABDOMEN = 10.0, 95.0, 58.0, 14.0, 10.0, 18.0, 22.0, 20.0
CONSOLIDATION, NODULE, EFFUSION, ENLARGED_HEART, PTX_DROP, PLEURAL_LINE = 180.0, 150.0, 172.0, 168.0, 20.0, 40.0


def render_image(case: PhantomCase, size: int) -> np.ndarray:
    """Draw the radiograph of ``case``: (size, size) uint8, brighter = denser.

    Normal anatomy is composed of soft-edged layers (body, lungs, spine, heart, abdomen, faint ribs);
    each present finding then changes exactly the pixels of its region (the pneumothorax's pleural
    line lies on the collapsed lung's edge, at most 2 px outside its region).
    """
    v, u = _coords(size)
    rng = np.random.default_rng(case.noise_seed)
    # soft tissue: thickest centrally, thinning to the skin (no bright rim at the body outline)
    body_r = np.sqrt(_ellipse(u, v, 0.5, 0.58, case.body_rx, 0.56))
    body_w = np.clip((1 - body_r) / 0.18, 0, 1)
    img = AIR + BODY * (body_w * body_w * (3 - 2 * body_w))  # smoothstep: a gradual edge
    lungs = [_lung(case, size, s) for s in (0, 1)]
    both = lungs[0] | lungs[1]
    lung_w = _soft(both, 0.035)
    # vessel-like markings: fine smooth noise, stronger towards the hila
    markings = np.abs(_smooth_noise(rng, size, max(8, size // 10)))
    hilum = np.exp(-(((u - 0.5) / 0.25) ** 2))
    mark = MARKINGS * markings * (0.5 + hilum)
    img = img + lung_w * (mark - LUNG_DROP)
    heart = _heart(case, size)
    spine = (body_r < 1) & (np.abs(u - 0.5) < 0.03) & (v > 0.08)
    img = img + SPINE * _soft(spine & ~both & ~heart, 0.03)
    thorax_base = case.lung_cy + 0.8 * case.lung_ry
    abdomen = (body_r < 1) & (v > thorax_base + 0.01)
    img = img + ABDOMEN * _soft(abdomen & ~both, 0.05) * body_w
    # posterior ribs: faint, smooth bands sloping down laterally, only over the thorax
    rib_v = v - 0.35 * (u - 0.5) ** 2
    ribs = (0.5 + 0.5 * np.cos(2 * np.pi * (rib_v * 11 + case.rib_phase))) ** 3
    img = img + RIBS * ribs * _soft((body_r < 1) & (v < thorax_base), 0.05) * body_w
    if "Cardiomegaly" in case.findings:
        img = np.where(heart, np.float32(ENLARGED_HEART) + 4 * markings, img)  # region: the silhouette
    else:
        img = img + HEART * _soft(heart, 0.04) * (1 - lung_w)
    if "Pneumothorax" in case.findings:
        s = case.pneumothorax_side
        ptx = _pneumothorax(case, size)
        img = np.where(ptx, img - lung_w * mark - PTX_DROP, img)  # lucent, no markings
        edge = _collapsed_lung(case, size)
        # the visceral pleural line: the collapsed lung's lateral and upper edge, facing the air
        shift = 2 if s == 0 else -2
        line = edge & ~np.roll(edge, shift, axis=1) | edge & ~np.roll(edge, 2, 0)
        img = np.where(line & lungs[s], img + PLEURAL_LINE, img)
    if "Pleural effusion" in case.findings:
        img = np.where(_effusion(case, size), np.float32(EFFUSION) + 3 * markings, img)  # homogeneous
    if "Consolidation" in case.findings:
        img = np.where(_consolidation(case, size), np.float32(CONSOLIDATION) + 0.5 * mark, img)
    if "Nodule" in case.findings:
        x, y = case.nodule_centre
        r = max(case.nodule_radius, 1.5 / size)
        d = np.sqrt(_ellipse(u, v, x, y, r, r))
        img = img + np.where(d < 1, NODULE * np.clip(1.6 * (1 - d), 0.55, 1), 0).astype(np.float32)
    img = img + rng.standard_normal((size, size), dtype=np.float32) * 3.0
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


_SIDE = ("right", "left")  # side 0 is the patient's right lung (image left)


def phrase_text(case: PhantomCase, finding: str) -> str:
    """The phrase of a present finding, as a radiologist might write it."""
    if finding == "Cardiomegaly":
        return "enlarged cardiac silhouette"
    if finding == "Pleural effusion":
        return f"{_SIDE[case.effusion_side]} pleural effusion"
    if finding == "Consolidation":
        return f"consolidation in the {_SIDE[case.consolidation_side]} lung"
    if finding == "Nodule":
        return f"small nodule in the {_SIDE[case.nodule_side]} lung"
    return f"{_SIDE[case.pneumothorax_side]} pneumothorax"


# -- simulated readers (``xbench human phantom``) ------------------------------------------------------------
# The phantom's truth is exact; a radiologist's is not. Each simulated reader re-reads every case and marks
# what they see by the model below (docs/how-to/human.md, data_cards/phantom.md), so that the human ceiling exists on
# the phantom too. The readers draw from their own generator: the cases, images and stores do not change.

#: chance that a reader leaves a present finding unmarked (small and subtle findings are missed more often)
READER_MISS: dict[str, float] = {
    "Cardiomegaly": 0.05,
    "Pleural effusion": 0.10,
    "Consolidation": 0.10,
    "Nodule": 0.25,
    "Pneumothorax": 0.15,
}
#: chance that a reader marks an absent finding (a false mark)
READER_FALSE_MARK = 0.04
#: standard deviation of a drawn region's shift, per axis, in image widths
READER_SHIFT_SD = 0.02
#: standard deviation of the log of a drawn region's scale about its centroid, and the scale's bounds
READER_SCALE_SD = 0.15
READER_SCALE_RANGE = (0.7, 1.4)
MAX_READERS = 16
#: the readers' stream tag in the seed sequence (nonzero: SeedSequence pads with zeros, so a trailing 0
#: would not tell a stream apart)
_READER_STREAM = 0x68756D


@dataclass(frozen=True)
class ReaderMark:
    """One simulated reader's reading of one finding of one case.

    ``kind``: ``"drawn"`` (a present finding, marked: the true region shifted by ``shift`` = (dx, dy) pixels
    and scaled by ``scale`` about its centroid), ``"missed"`` (present, unmarked), ``"false"`` (absent,
    marked anyway) or ``"none"`` (absent, unmarked). ``mask`` (size, size) bool and ``point`` (x, y) in native
    pixel coordinates are set when the reader marked the finding, else None."""

    finding: str
    kind: str
    shift: tuple[float, float]
    scale: float
    mask: np.ndarray | None
    point: tuple[float, float] | None


def jitter_mask(mask: np.ndarray, shift: tuple[float, float], scale: float) -> np.ndarray:
    """``mask`` scaled by ``scale`` about its centroid c and moved by ``shift`` = (dx, dy), pixels
    (nearest neighbour): pixel p (centre) is set when the pixel holding c + (p - c - shift) / scale is.
    What falls outside the image is cut (a reader draws on the film)."""
    rows, cols = np.nonzero(mask)
    if rows.size == 0:
        return np.zeros_like(mask, dtype=bool)
    cy, cx = rows.mean() + 0.5, cols.mean() + 0.5
    h, w = mask.shape
    sy = np.floor(cy + ((np.arange(h) + 0.5) - cy - shift[1]) / scale).astype(np.int64)
    sx = np.floor(cx + ((np.arange(w) + 0.5) - cx - shift[0]) / scale).astype(np.int64)
    oky, okx = (sy >= 0) & (sy < h), (sx >= 0) & (sx < w)
    out = mask[np.clip(sy, 0, h - 1)][:, np.clip(sx, 0, w - 1)]
    return out & oky[:, None] & okx[None, :]


def salient_point(mask: np.ndarray) -> tuple[float, float]:
    """A reader's most representative point of a non-empty region: the centre (x, y) of the region's pixel
    nearest the region's centroid (the first in row-major order on a tie), so it always lies in the region,
    even in a crescent whose centroid does not."""
    rows, cols = np.nonzero(mask)
    cy, cx = rows.mean() + 0.5, cols.mean() + 0.5
    k = int(np.argmin((rows + 0.5 - cy) ** 2 + (cols + 0.5 - cx) ** 2))  # nonzero is row-major: first on a tie
    return float(cols[k] + 0.5), float(rows[k] + 0.5)


def draw_reading(seed: int, split: str, index: int, reader: int, size: int) -> dict[str, ReaderMark]:
    """Reader ``reader`` (1, 2, ...)'s reading of case ``index`` of ``split``: one :class:`ReaderMark` per
    class, drawn from ``numpy.random.default_rng([seed, split, index, tag, reader])``.

    Every class draws the same numbers whether present or not (a miss/false-mark uniform, a shift, a log
    scale, a false mark's side, place and radius), so one finding's reading never depends on another's."""
    case = draw_case(seed, split, index)
    rng = np.random.default_rng([seed, _SPLITS.index(split), index, _READER_STREAM, reader])
    out = {}
    for c in PHANTOM_CLASSES:
        u = float(rng.uniform())
        dx, dy = (float(v) * size for v in rng.normal(0.0, READER_SHIFT_SD, 2))
        scale = float(np.clip(np.exp(rng.normal(0.0, READER_SCALE_SD)), *READER_SCALE_RANGE))
        side = int(rng.integers(0, 2))
        fx, fy = _point_in_lung(rng, case.lung_cx[side], case.lung_cy, case.lung_rx, case.lung_ry, 0.7)
        fr = float(rng.uniform(0.03, 0.07))
        mask = None
        if c in case.findings:
            kind = "missed" if u < READER_MISS[c] else "drawn"
            if kind == "drawn":
                mask = jitter_mask(render_finding(case, size, c), (dx, dy), scale)
                if not mask.any():  # drawn wholly off the film: nothing marked
                    kind, mask = "missed", None
        else:
            kind = "false" if u < READER_FALSE_MARK else "none"
            if kind == "false":
                # an overcalled heart is the normal silhouette; any other false mark a round patch in a lung
                v, uu = _coords(size)
                mask = _heart(case, size) if c == "Cardiomegaly" else _ellipse(uu, v, fx, fy, fr, fr) < 1
        out[c] = ReaderMark(c, kind, (dx, dy), scale, mask, salient_point(mask) if mask is not None else None)
    return out


#: the gaze stream's tag ("gaz"): reader r's fixations of a case come from
#: ``default_rng([seed, split, case, _GAZE_STREAM, r])``, apart from the reader marks' stream
_GAZE_STREAM = 0x67617A
#: simulated gaze: R1 reads every case, R2 and R3 every third (index % 3 == 0), like REFLACX's multi-reader subset
GAZE_READERS = 3
GAZE_FIXATIONS = (12, 24)      # fixations per reading: uniform in [12, 24)
GAZE_ON_MARKS = 0.6            # share of a reading's fixations on the findings the reader marks
GAZE_NOISE_SD = 0.02           # a fixation's scatter about a marked pixel, as a fraction of the image side
GAZE_DURATION = (0.25, 0.4)    # durations: lognormal, median 0.25 s, log-sd 0.4


def simulated_gaze(seed: int, split: str, indices: Sequence[int], size: int, grid: tuple[int, int]):
    """The phantom's simulated readings (docs/how-to/gaze.md, "Phantom") of the cases ``indices`` (gt rows 0..n-1):
    reader r's labels and regions are its reader marks (:func:`draw_reading`: drawn or false marks are labelled
    present, their masks its regions), its fixations fall on the marked findings (a share GAZE_ON_MARKS, each
    about a pixel of a mark drawn uniformly, with normal scatter) and elsewhere in the lungs."""
    from xbench.schemas.gaze import Gaze, Reading, default_sigma

    from xbench.extract.datasets.rasterise import rasterise_region

    readings = []
    for row, index in enumerate(indices):
        case = draw_case(seed, split, index)
        for r in range(1, GAZE_READERS + 1):
            if r > 1 and index % 3:
                continue
            marks = draw_reading(seed, split, index, r, size)
            rng = np.random.default_rng([seed, _SPLITS.index(split), index, _GAZE_STREAM, r])
            n = int(rng.integers(*GAZE_FIXATIONS))
            marked = [m for m in marks.values() if m.mask is not None]
            on = int(round(GAZE_ON_MARKS * n)) if marked else 0
            pts = []
            for k in range(on):
                rows, cols = np.nonzero(marked[k % len(marked)].mask)
                j = int(rng.integers(0, len(rows)))
                pts.append((cols[j] + 0.5 + rng.normal(0, GAZE_NOISE_SD * size),
                            rows[j] + 0.5 + rng.normal(0, GAZE_NOISE_SD * size)))
            for _ in range(n - on):
                side = int(rng.integers(0, 2))
                pts.append(_point_in_lung(rng, case.lung_cx[side] * size, case.lung_cy * size, case.lung_rx * size,
                                          case.lung_ry * size, 0.9))
            dur = np.exp(rng.normal(np.log(GAZE_DURATION[0]), GAZE_DURATION[1], n))
            fix = np.column_stack([np.asarray(pts, np.float64).reshape(-1, 2), dur])
            labels = np.array([int(marks[c].mask is not None) for c in PHANTOM_CLASSES], np.int8)
            regions = {}
            for j, c in enumerate(PHANTOM_CLASSES):
                m = marks[c].mask
                if m is not None:
                    raster = rasterise_region([Mask(lambda m=m: m)], (size, size), grid)
                    if raster is not None:
                        regions[j] = raster.mask
            readings.append(Reading(row, f"R{r}", fix, labels, default_sigma((size, size)), regions))
    gaze = Gaze.from_readings(readings, np.full((len(indices), 2), size, np.int32), grid, len(PHANTOM_CLASSES))
    gaze.sigma_rule = "3% of the image's larger side (simulated readers; no viewing geometry)"
    return gaze


#: the attributes stream's tag ("att"): case i's attributes come from ``default_rng([seed, split, i, _ATTR_STREAM])``
_ATTR_STREAM = 0x617474
ATTR_MISSING_AGE = 0.05   # share of cases whose age is missing
ATTR_AP = 0.3             # share of AP (bedside) views; the rest PA


def simulated_attributes(seed: int, split: str, indices: Sequence[int]) -> dict:
    """The phantom's simulated case attributes (docs/how-to/score.md, "Subgroups"): ``sex`` F or M with probability
    1/2, ``age`` 18 + 72 Beta(2, 2) whole years (missing for ATTR_MISSING_AGE of the cases), ``view`` AP with
    probability ATTR_AP else PA; independent of the findings, so any gap they show is chance."""
    from xbench.schemas.attributes import category, number

    sex, age, view = [], [], []
    for index in indices:
        rng = np.random.default_rng([seed, _SPLITS.index(split), index, _ATTR_STREAM])
        u_sex, u_age, u_miss, u_view = rng.uniform(size=4)
        b = float(rng.beta(2, 2))
        sex.append("F" if u_sex < 0.5 else "M")
        age.append(None if u_miss < ATTR_MISSING_AGE else float(np.floor(18 + 72 * b)))
        view.append("AP" if u_view < ATTR_AP else "PA")
    return {"sex": category(sex, "simulated"), "age": number(age, "simulated"), "view": category(view, "simulated")}


#: The dataset registry's entry for this module, read from the source without importing it (see
#: xbench.extract.datasets): dataset key -> reader class.
REGISTER = {"phantom": "PhantomReader"}


class PhantomReader(DatasetReader):
    """The built-in synthetic dataset; needs no files (``root`` is ignored and may be None).

    Options: ``n_cases`` (default 200), ``seed`` (default 0), ``size`` (native size, default 256).
    Values may be given as strings (from ``--option key=value``).
    """

    key = "phantom"
    classes = PHANTOM_CLASSES
    grounding_classes = PHANTOM_CLASSES
    splits = _SPLITS

    def __init__(
        self,
        root: Path | str | None = None,
        split: str | None = None,
        *,
        n_cases: int | str = 200,
        seed: int | str = 0,
        size: int | str = 256,
        phrases: bool | str = False,
        gaze: bool | str = False,
        attributes: bool | str = False,
        **unknown,
    ) -> None:
        from xbench.extract.datasets._io import check_options, option_bool

        check_options("phantom", unknown, {"n_cases": "", "seed": "", "size": "", "phrases": "", "gaze": "",
                                            "attributes": ""})
        try:
            phrases = option_bool("phantom", "phrases", phrases)
            gaze = option_bool("phantom", "gaze", gaze)
            attributes = option_bool("phantom", "attributes", attributes)
        except ValueError as exc:
            raise ReaderError(str(exc)) from None
        try:
            n_cases, seed, size = int(n_cases), int(seed), int(size)
        except (TypeError, ValueError):
            raise ReaderError(f"phantom options n_cases, seed and size must be integers; got {n_cases!r}, {seed!r}, {size!r}") from None
        if not (1 <= n_cases <= MAX_CASES and 64 <= size <= MAX_SIZE and seed >= 0):
            raise ReaderError(f"phantom needs 1 <= n_cases <= {MAX_CASES:,}, 64 <= size <= {MAX_SIZE} and seed >= 0; "
                              f"got {n_cases}, {size}, {seed}")
        super().__init__(root if root is not None else ".", split, n_cases=n_cases, seed=seed, size=size)
        self.n_cases, self.seed, self.size, self.phrases, self.gaze = n_cases, seed, size, phrases, gaze
        self.attributes = attributes

    def describe(self) -> dict:
        out = {"split": self.split, "n_cases": self.n_cases, "seed": self.seed, "size": self.size}
        out = {**out, "phrases": True} if self.phrases else out  # unchanged attributes without phrases
        out = {**out, "gaze": True} if self.gaze else out  # likewise without gaze
        return {**out, "attributes": True} if self.attributes else out  # and without case attributes

    def case_attributes(self, records: Sequence[CaseRecord]):
        """The simulated attributes of ``records`` (the prepared cases, in order), or None without the
        ``attributes`` option (:func:`simulated_attributes`)."""
        if not self.attributes:
            return None
        return simulated_attributes(self.seed, self.split, [int(r.case_id.rsplit("-", 1)[1]) for r in records])

    def gaze_readings(self, records: Sequence[CaseRecord], grid: tuple[int, int]):
        """The simulated gaze of ``records`` (the prepared cases, in their gt order) on ``grid``, or None without
        the ``gaze`` option (:func:`simulated_gaze`)."""
        if not self.gaze:
            return None
        return simulated_gaze(self.seed, self.split, [int(r.case_id.rsplit("-", 1)[1]) for r in records],
                              self.size, grid)

    def records(self) -> Sequence[CaseRecord]:
        out = []
        for i in range(self.n_cases):
            case = draw_case(self.seed, self.split, i)
            out.append(
                CaseRecord(
                    case_id=f"phantom-{self.split}-{i:06d}",
                    image_ref=case,
                    labels={c: int(c in case.findings) for c in self.classes},
                    regions={
                        c: [Mask(functools.partial(render_finding, case, self.size, c))] for c in case.findings
                    },
                    orig_size=(self.size, self.size),
                    source=f"phantom(seed={self.seed}, split={self.split}) case {i}",
                    phrases=[Phrase(phrase_text(case, c), c, (Mask(functools.partial(render_finding, case, self.size, c)),))
                             for c in case.findings] if self.phrases else [],
                )
            )
        return out

    def load_image(self, record: CaseRecord) -> np.ndarray:
        return render_image(record.image_ref, self.size)
