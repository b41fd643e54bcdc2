"""The human ceiling's arithmetic (score/human.py) against a brute-force computation written from the contract's
words: per reader and class the mean over its pairs (best tau: the first maximum of the mean curve), per class
the mean over readers, per dataset the mean over classes; bootstrap over the union of the readers' cases with
numpy.random.default_rng(seed).integers(0, n, n) per resample; the paired gap model - human on the model's pairs
that some reader was scored on."""
from __future__ import annotations

import json

import numpy as np
import pytest

from xbench.schemas.errors import InputError
from xbench.score.counts import DatasetCounts, save_pair_counts
from xbench.score.human import (KEYS, ceiling, human_block, load_human, percent_of_human, percentage_decrease,
                                reader_pairs)

CLASSES = ("A", "B", "C")
T = 101


def _counts(rng, case_ids, n_pairs, classes=CLASSES, grid=(8, 8)) -> DatasetCounts:
    n = len(case_ids)
    pairs = sorted({(int(rng.integers(0, len(classes))), int(rng.integers(0, n))) for _ in range(n_pairs)})
    pc = np.array([p[1] for p in pairs], np.int64)
    pk = np.array([p[0] for p in pairs], np.int64)
    P = len(pairs)
    cells = grid[0] * grid[1]
    r = rng.integers(1, cells // 2, P).astype(np.int32)
    b = np.sort(rng.integers(0, cells + 1, (P, T)), axis=1)[:, ::-1].astype(np.uint16)  # non-increasing in tau
    br = np.minimum(b, r[:, None]) * rng.random((P, 1))
    br = np.floor(br).astype(np.uint16)
    return DatasetCounts(name="d", classes=tuple(classes), supported=np.ones(len(classes), bool),
                         case_id=np.asarray(case_ids, dtype=str), labels=np.zeros((n, len(classes)), np.int8),
                         prob=np.zeros((n, len(classes))), pair_case=pc, pair_class=pk, region_pixels=r,
                         hit=rng.random(P) < 0.5, b=b, br=br, grid=grid)


def _pair_values(dc: DatasetCounts):
    """[(case id, class, hit, dice curve, iou curve)] by loops over the counts."""
    out = []
    for i in range(len(dc.pair_case)):
        R = float(dc.region_pixels[i])
        dice = [2.0 * float(dc.br[i, k]) / (float(dc.b[i, k]) + R) for k in range(T)]
        iou = [float(dc.br[i, k]) / (float(dc.b[i, k]) + R - float(dc.br[i, k])) for k in range(T)]
        out.append((str(dc.case_id[dc.pair_case[i]]), dc.classes[dc.pair_class[i]], float(dc.hit[i]), dice, iou))
    return out


def _class_value(pairs, weights, key):
    """Weighted class mean of one reader (None when no weight); best: the first maximum of the mean curve."""
    tot = sum(weights.get(p[0], 0) for p in pairs)
    if tot == 0:
        return None
    if key == "pointing_game":
        return sum(weights.get(p[0], 0) * p[2] for p in pairs) / tot
    idx = 3 if key.startswith("dice") else 4
    curve = [sum(weights.get(p[0], 0) * p[idx][k] for p in pairs) / tot for k in range(T)]
    return curve[50] if key.endswith("fixed") else max(curve)


def _brute(readers: dict, weights: dict, classes=CLASSES):
    per_class = {}
    for c in classes:
        per_class[c] = {}
        for key in KEYS:
            vals = [_class_value([p for p in pv if p[1] == c], weights, key) for pv in readers.values()]
            vals = [v for v in vals if v is not None]
            per_class[c][key] = sum(vals) / len(vals) if vals else None
    summary = {}
    for key in KEYS:
        vals = [per_class[c][key] for c in classes if per_class[c][key] is not None]
        summary[key] = sum(vals) / len(vals) if vals else None
    return per_class, summary


def _setup(seed=3):
    rng = np.random.default_rng(seed)
    ids = [f"case{i:02d}" for i in range(12)]
    # three readers, each reading an overlapping subset of the images (as VinDr's 3-of-17)
    counts = {r: _counts(rng, ids[s:s + 8], 9) for r, s in (("R1", 0), ("R2", 2), ("R3", 4))}
    return rng, ids, counts


def test_point_values_equal_brute_force():
    _, _, counts = _setup()
    h, _ = ceiling({r: reader_pairs(dc) for r, dc in counts.items()}, classes=CLASSES, n_resamples=0)
    readers = {r: _pair_values(dc) for r, dc in counts.items()}
    ones = {c: 1 for dc in counts.values() for c in dc.case_id}
    per_class, summary = _brute(readers, ones)
    for c in CLASSES:
        for k in KEYS:
            assert h.point[c][k] == pytest.approx(per_class[c][k], rel=1e-12, abs=1e-15)
    for k in KEYS:
        assert h.point[None][k] == pytest.approx(summary[k], rel=1e-12)


def test_bootstrap_replicates_equal_brute_force():
    _, _, counts = _setup()
    B, seed = 7, 11
    h, _ = ceiling({r: reader_pairs(dc) for r, dc in counts.items()}, classes=CLASSES, n_resamples=B, seed=seed)
    readers = {r: _pair_values(dc) for r, dc in counts.items()}
    cases = sorted({str(c) for dc in counts.values() for c in dc.case_id})
    rng = np.random.default_rng(seed)
    for b in range(B):
        drawn = rng.integers(0, len(cases), len(cases))
        weights = {}
        for j in drawn:
            weights[cases[j]] = weights.get(cases[j], 0) + 1
        per_class, summary = _brute(readers, weights)
        for c in CLASSES:
            for k in KEYS:
                got = h.reps[c][k][b]
                assert (np.isnan(got) and per_class[c][k] is None) or got == pytest.approx(per_class[c][k], rel=1e-12)
        for k in KEYS:
            assert h.reps[None][k][b] == pytest.approx(summary[k], rel=1e-12)


def test_paired_gap_uses_only_the_pairs_a_reader_was_scored_on():
    rng, ids, counts = _setup()
    model = _counts(rng, ids, 30)
    h, m = ceiling({r: reader_pairs(dc) for r, dc in counts.items()}, classes=CLASSES, n_resamples=5, seed=2,
                   model=reader_pairs(model))
    human_pairs = {(str(dc.case_id[i]), dc.classes[k]) for dc in counts.values()
                   for i, k in zip(dc.pair_case, dc.pair_class)}
    mine = [p for p in _pair_values(model) if (p[0], p[1]) in human_pairs]
    ones = {c: 1 for c in ids}
    per_class, summary = _brute({"model": mine}, ones)
    for c in CLASSES:
        for k in KEYS:
            assert m.point[c][k] == pytest.approx(per_class[c][k], rel=1e-12, abs=1e-15) if per_class[c][k] is not None \
                else m.point[c][k] is None


def test_percent_of_human_and_percentage_decrease():
    assert percent_of_human(0.3, 0.6) == pytest.approx(50.0)
    assert percentage_decrease(0.3, 0.6) == pytest.approx(50.0)  # CheXlocalize: (human - model) / human
    assert percentage_decrease(0.45, 0.6) == pytest.approx(25.0)
    assert percent_of_human(None, 0.6) is None and percent_of_human(0.3, 0.0) is None


def _human_folder(tmp_path, counts, name="d"):
    folder = tmp_path / "human"
    for r, dc in counts.items():
        (folder / "readers" / r).mkdir(parents=True)
        save_pair_counts(folder / "readers" / r / "pair_counts.npz", {name: dc})
    doc = {"xbench": {"kind": "human-ceiling", "schema": 1, "rule": "test"},
           "datasets": {name: {"readers": list(counts)}}}
    (folder / "human.json").write_text(json.dumps(doc))
    return folder


def test_human_block_of_a_model(tmp_path):
    rng, ids, counts = _setup()
    model = _counts(rng, ids, 30)
    source = load_human(_human_folder(tmp_path, counts))
    metrics = {"datasets": {"d": {"summary": {"pointing_game": 0.25}, "classes": {c: {"pointing_game": 0.25}
                                                                                  for c in CLASSES}}}}
    block = human_block(metrics, {"d": model}, source, bootstrap=20, seed=0)
    s = block["datasets"]["d"]["summary"]["pointing_game"]
    h, _ = ceiling({r: reader_pairs(dc) for r, dc in counts.items()}, classes=CLASSES, n_resamples=0)
    assert s["human"] == h.point[None]["pointing_game"]
    assert s["percent_of_human"] == pytest.approx(0.25 / s["human"] * 100)
    assert s["ci95"][0] <= s["human"] <= s["ci95"][1]
    assert s["paired"]["gap_ci95"] is not None


@pytest.mark.parametrize("mutate, message", [
    (lambda f: (f / "human.json").write_text('{"xbench": {"kind": "human-ceiling"}, "datasets": {"d": {"readers": ["../x"]}}}'),
     "not a plain folder name"),
    (lambda f: (f / "human.json").write_text('{"xbench": {"kind": "human-ceiling"}, "xbench": 1, "datasets": {}}'),
     "twice in one object"),
    (lambda f: (f / "human.json").write_text('[1, 2]'), "not a human.json"),
    (lambda f: (f / "readers" / "R1" / "pair_counts.npz").write_bytes(b"PK\x03\x04 not a zip"), "pair_counts"),
    (lambda f: (f / "human.json").write_text('{"xbench": {"kind": "human-ceiling"}, "datasets": {"d": {"readers": ["R9"]}}}'),
     "missing"),
])
def test_hostile_human_folder(tmp_path, mutate, message):
    _, _, counts = _setup()
    folder = _human_folder(tmp_path, counts)
    mutate(folder)
    with pytest.raises(InputError) as err:
        load_human(folder)
    assert message in str(err.value).lower() or message in str(err.value)


def test_a_link_leaving_the_human_folder_is_refused(tmp_path):
    _, _, counts = _setup()
    folder = _human_folder(tmp_path, counts)
    outside = tmp_path / "elsewhere.npz"
    (folder / "readers" / "R1" / "pair_counts.npz").rename(outside)
    (folder / "readers" / "R1" / "pair_counts.npz").symlink_to(outside)
    with pytest.raises(InputError, match="link leaving"):
        load_human(folder)
