"""The phantom generator: determinism, label/region consistency and visible findings."""
from __future__ import annotations

import numpy as np
import pytest

from xbench.extract.datasets import DATASETS
from xbench.extract.datasets.base import Mask, ReaderError
from xbench.extract.datasets.phantom import PHANTOM_CLASSES, PhantomReader, draw_case, render_finding, render_image


def test_registered_under_its_key():
    assert DATASETS.get("phantom") is PhantomReader


def test_class_names_are_canonical():
    assert PHANTOM_CLASSES == ("Cardiomegaly", "Pleural effusion", "Consolidation", "Nodule", "Pneumothorax")


def test_same_seed_same_bytes_other_seed_differs():
    a, b = PhantomReader(n_cases=5, seed=3), PhantomReader(n_cases=5, seed=3)
    c = PhantomReader(n_cases=5, seed=4)
    ra, rb, rc = a.records(), b.records(), c.records()
    for x, y in zip(ra, rb):
        assert x.labels == y.labels
        assert a.load_image(x).tobytes() == b.load_image(y).tobytes()
    assert any(a.load_image(x).tobytes() != c.load_image(z).tobytes() for x, z in zip(ra, rc))


def test_a_case_does_not_depend_on_how_many_are_drawn():
    few, many = PhantomReader(n_cases=3, seed=1).records(), PhantomReader(n_cases=50, seed=1).records()
    assert [r.case_id for r in few] == [r.case_id for r in many[:3]]
    assert [r.image_ref for r in few] == [r.image_ref for r in many[:3]]


def test_splits_differ():
    t = PhantomReader(n_cases=4, split="test").records()
    v = PhantomReader(n_cases=4, split="val").records()
    assert [r.image_ref for r in t] != [r.image_ref for r in v]
    assert all(r.case_id.startswith("phantom-val-") for r in v)


def test_labels_and_regions_agree():
    reader = PhantomReader(n_cases=150, seed=7, size=128)
    counts = dict.fromkeys(PHANTOM_CLASSES, 0)
    for rec in reader.records():
        assert set(rec.labels) == set(PHANTOM_CLASSES)
        assert set(rec.labels.values()) <= {0, 1}
        for cls, lab in rec.labels.items():
            if lab == 1:
                counts[cls] += 1
                (shape,) = rec.regions[cls]
                assert isinstance(shape, Mask)
                m = shape.load()
                assert m.shape == (128, 128) and m.dtype == bool and m.any(), (rec.case_id, cls)
            else:
                assert cls not in rec.regions
    # every class occurs, but not in every case (prevalences 0.2-0.3)
    assert all(10 < n < 100 for n in counts.values()), counts


def _case_with(finding, seed=0, size=128):
    for i in range(200):
        case = draw_case(seed, "test", i)
        if finding in case.findings:
            return case
    raise AssertionError(finding)


@pytest.mark.parametrize("finding, brighter", [
    ("Consolidation", True), ("Nodule", True), ("Pleural effusion", True), ("Pneumothorax", False),
])
def test_findings_are_visible(finding, brighter):
    """The region differs from the same case drawn without the finding, in the stated direction."""
    size = 128
    case = _case_with(finding)
    region = render_finding(case, size, finding)
    without = type(case)(**{**case.__dict__, "findings": tuple(f for f in case.findings if f != finding)})
    diff = render_image(case, size).astype(float) - render_image(without, size).astype(float)
    inside = diff[region].mean()
    assert (inside > 20) if brighter else (inside < -15), inside
    # nothing changes far outside the region (the pleural line may touch its border)
    grown = region | np.roll(region, 3, 0) | np.roll(region, -3, 0) | np.roll(region, 3, 1) | np.roll(region, -3, 1)
    assert np.abs(diff[~grown]).max() == 0


def test_cardiomegaly_widens_the_heart():
    widths = {0: [], 1: []}
    for i in range(80):
        case = draw_case(0, "test", i)
        lab = int("Cardiomegaly" in case.findings)
        widths[lab].append(case.heart_rx * 2 / (case.lung_cx[1] + case.lung_rx - case.lung_cx[0] + case.lung_rx))
    # cardiothoracic ratio: normal < 0.45, enlarged > 0.5
    assert max(widths[0]) < 0.45 < 0.5 < min(widths[1])


def test_bad_options_are_reader_errors():
    with pytest.raises(ReaderError, match="integers"):
        PhantomReader(n_cases="many")
    with pytest.raises(ReaderError, match="64 <= size <= 4096"):
        PhantomReader(size=16)
    with pytest.raises(ValueError, match="unknown split"):
        PhantomReader(split="train")


def test_string_options_are_accepted():
    r = PhantomReader(None, n_cases="3", seed="2", size="64")
    assert len(r.records()) == 3 and r.describe() == {"split": "test", "n_cases": 3, "seed": 2, "size": 64}
    img = r.load_image(r.records()[0])
    assert img.shape == (64, 64) and img.dtype == np.uint8


def test_classes_agree_with_the_vocabulary():
    vocabulary = pytest.importorskip("xbench.schemas.vocabulary")
    assert vocabulary.classes_for("phantom") == PHANTOM_CLASSES
    assert set(vocabulary.grounding_classes_for("phantom")) == set(PhantomReader.grounding_classes)


def _dog_argmax(img: np.ndarray) -> tuple[int, int]:
    """Argmax of a lesion-scale difference of Gaussians (sigmas 1.5 % and 6 % of the side)."""
    from scipy.ndimage import gaussian_filter

    x = img.astype(np.float32)
    d = gaussian_filter(x, 0.015 * x.shape[0]) - gaussian_filter(x, 0.06 * x.shape[0])
    return np.unravel_index(int(np.argmax(d)), d.shape)


def test_findings_are_the_salient_dense_blobs():
    """An image-only blob detector finds the findings: on 100 cases the DoG maximum falls in a
    finding's region far more often than the regions' area would give by chance."""
    size, hits, chance, union_hits, union_chance = 128, [], [], [], []
    for i in range(100):
        case = draw_case(0, "test", i)
        if not case.findings:
            continue
        y, x = _dog_argmax(render_image(case, size))
        union = np.zeros((size, size), dtype=bool)
        for f in case.findings:
            region = render_finding(case, size, f)
            hits.append(region[y, x])
            chance.append(region.mean())
            union |= region
        union_hits.append(union[y, x])
        union_chance.append(union.mean())
    # one maximum per image can hit only one of several findings, hence the per-pair bound is lower
    assert np.mean(union_hits) > max(0.8, 5 * np.mean(union_chance)), (np.mean(union_hits), np.mean(union_chance))
    assert np.mean(hits) > max(0.5, 5 * np.mean(chance)), (np.mean(hits), np.mean(chance))


def test_normal_anatomy_is_soft_and_fainter_than_findings():
    """Without findings, no pixel is as dense as a consolidation or effusion, and the largest
    step between neighbouring pixels (the sharpest edge) is well below a finding's contrast."""
    size = 128
    for i in range(20):
        case = draw_case(0, "test", i)
        normal = type(case)(**{**case.__dict__, "findings": ()})
        img = render_image(normal, size).astype(float)
        assert img.max() < 165, (i, img.max())  # consolidation 180, effusion 172
        smooth = img[1:-1, 1:-1]
        step = max(np.abs(np.diff(smooth, axis=0)).max(), np.abs(np.diff(smooth, axis=1)).max())
        assert step < 45, (i, step)  # noise (sd 3) plus soft edges; a finding's edge is > 100
