"""The human ceiling's arithmetic (score/sections/human/ceiling.py) against a brute-force computation written from the contract's
words: per reader and class the mean over its pairs (best tau: the first maximum of the mean curve), per class
the mean over readers, per dataset the mean over classes; bootstrap over the union of the readers' cases with
numpy.random.default_rng(seed).integers(0, n, n) per resample; the paired gap model - human on the model's pairs
that some reader was scored on."""
from __future__ import annotations

import json

import numpy as np
import pytest

from xbench.schemas.errors import InputError
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.sections.pair_counts import save_pair_counts
from xbench.score.sections.human.ceiling import (CHEXLOCALIZE_KEYS, KEYS, ReaderReading, ceiling, chexlocalize_block,
                                        percent_of_human, percentage_decrease, reader_pairs, with_hits)
from xbench.score.sections.human.reading import READING_FILE, load_human, save_reading
from xbench.score.sections.human.section import human_block

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
    h, _ = ceiling({r: reader_pairs(dc) for r, dc in counts.items()}, classes=CLASSES, bootstrap=0)
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
    h, _ = ceiling({r: reader_pairs(dc) for r, dc in counts.items()}, classes=CLASSES, bootstrap=B, seed=seed)
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
    h, m = ceiling({r: reader_pairs(dc) for r, dc in counts.items()}, classes=CLASSES, bootstrap=5, seed=2,
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


def _reading(rng, dc: DatasetCounts) -> ReaderReading:
    """A reader's reading for the counts ``dc``: every pair of the counts as a ground-truth row (its hit the
    counts' hit flipped at random: the reading, not the map, decides), some with no reader region (a miss), and
    reader-only rows (false marks) on (case, class) pairs without a region."""
    rows = []
    pairs = set()
    for i in range(len(dc.pair_case)):
        case, cls = str(dc.case_id[dc.pair_case[i]]), dc.classes[dc.pair_class[i]]
        pairs.add((case, cls))
        seg = bool(rng.random() < 0.7)
        rows.append((case, cls, True, seg, float(rng.random()) if seg else 0.0, float(rng.random() < 0.5)))
    for case in dc.case_id.tolist():
        for cls in dc.classes:
            if (case, cls) not in pairs and rng.random() < 0.2:
                rows.append((case, cls, False, True, 0.0, float("nan")))
    cols = list(zip(*rows))
    return ReaderReading(case_id=np.asarray(cols[0], str), cls=np.asarray(cols[1], str), gt=np.asarray(cols[2], bool),
                         seg=np.asarray(cols[3], bool), iou=np.asarray(cols[4], float), hit=np.asarray(cols[5], float),
                         cases=np.asarray(sorted(dc.case_id.tolist()), str))


def _human_folder(tmp_path, counts, name="d", readings=None):
    folder = tmp_path / "human"
    rng = np.random.default_rng(11)
    for r, dc in counts.items():
        (folder / "readers" / r).mkdir(parents=True)
        save_pair_counts(folder / "readers" / r / "pair_counts.npz", {name: dc})
        reading = (readings or {}).get(r) or _reading(rng, dc)
        save_reading(folder / "readers" / r / READING_FILE, reading)
    doc = {"xbench": {"kind": "human-ceiling", "schema": 2, "rule": "test"},
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
    h, _ = ceiling({r: with_hits(reader_pairs(dc), source.readings["d"][r]) for r, dc in counts.items()},
                   classes=CLASSES, bootstrap=0)
    assert s["human"] == h.point[None]["pointing_game"]
    assert s["percent_of_human"] == pytest.approx(0.25 / s["human"] * 100)
    assert s["ci95"][0] <= s["human"] <= s["ci95"][1]
    assert s["paired"]["gap_ci95"] is not None


@pytest.mark.parametrize("mutate, message", [
    (lambda f: (f / "human.json").write_text('{"xbench": {"kind": "human-ceiling", "schema": 2}, "datasets": {"d": {"readers": ["../x"]}}}'),
     "not a plain folder name"),
    (lambda f: (f / "human.json").write_text('{"xbench": {"kind": "human-ceiling"}, "xbench": 1, "datasets": {}}'),
     "twice in one object"),
    (lambda f: (f / "human.json").write_text('[1, 2]'), "not a human.json"),
    (lambda f: (f / "readers" / "R1" / "pair_counts.npz").write_bytes(b"PK\x03\x04 not a zip"), "pair_counts"),
    (lambda f: (f / "human.json").write_text('{"xbench": {"kind": "human-ceiling", "schema": 2}, "datasets": {"d": {"readers": ["R9"]}}}'),
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


# -- the reading: the ceiling's hits and CheXlocalize's own values ---------------------------------------------
def _brute_chexlocalize(readings: dict, seed: int, bootstrap: int):
    """CheXlocalize's eval.py rules by loops: per reader and class the mean over the rows where a key is defined
    (true_pos_only: gt and seg; all: gt or seg; hit: gt), per class the mean over readers, the average over
    classes; bootstrap: numpy.random.seed(seed), choice(n, n) per resample over the sorted union of cases."""
    cases = sorted({c for r in readings.values() for c in r.cases.tolist()})

    def defined(r, i, key):
        return {"miou_true_pos_only": r.gt[i] and r.seg[i], "miou_all": r.gt[i] or r.seg[i], "hit_rate": r.gt[i]}[key]

    def value(r, i, key):
        return float(r.hit[i]) if key == "hit_rate" else float(r.iou[i])

    def per_class(weight):
        out = {}
        for c in CLASSES:
            for key in CHEXLOCALIZE_KEYS:
                vals = []
                for r in readings.values():
                    num = den = 0.0
                    for i in range(len(r.case_id)):
                        if r.cls[i] == c and defined(r, i, key):
                            w = weight.get(str(r.case_id[i]), 0)
                            num += w * value(r, i, key)
                            den += w
                    if den:
                        vals.append(num / den)
                out[(c, key)] = sum(vals) / len(vals) if vals else None
        return out

    point = per_class({c: 1 for c in cases})
    rs = np.random.RandomState(seed)
    reps = []
    for _ in range(bootstrap):
        draw = rs.choice(len(cases), size=len(cases), replace=True)
        weight = {}
        for j in draw:
            weight[cases[j]] = weight.get(cases[j], 0) + 1
        reps.append(per_class(weight))
    return point, reps


def test_chexlocalize_block_equals_brute_force():
    rng, ids, counts = _setup()
    readings = {r: _reading(rng, dc) for r, dc in counts.items()}
    block = chexlocalize_block(readings, classes=CLASSES, bootstrap=40, seed=5)
    point, reps = _brute_chexlocalize(readings, 5, 40)
    assert block["n_cases"] == len(ids) and block["resolution"] == "grid"
    for c in CLASSES:
        for key in CHEXLOCALIZE_KEYS:
            got = block["classes"][c][key]
            assert got["value"] == pytest.approx(point[(c, key)], rel=1e-12)
            assert got["n"] == sum(int(((r.cls == c) & {"miou_true_pos_only": r.gt & r.seg, "miou_all": r.gt | r.seg,
                                                          "hit_rate": r.gt}[key]).sum()) for r in readings.values())
            boot = np.array([np.nan if rep[(c, key)] is None else rep[(c, key)] for rep in reps])
            ordered = np.concatenate([np.sort(boot[~np.isnan(boot)]), boot[np.isnan(boot)]])
            for name, want in (("mean", np.nanmean(boot)), ("lower", ordered[int(0.025 * 40) - 1]),
                               ("upper", ordered[int(0.975 * 40) - 1])):
                if np.isnan(want):  # an undefined resample at the position (NaN sorted last): null
                    assert got["bootstrap"][name] is None
                else:
                    assert got["bootstrap"][name] == pytest.approx(want, rel=1e-12)
    for key in CHEXLOCALIZE_KEYS:
        vals = [point[(c, key)] for c in CLASSES if point[(c, key)] is not None]
        assert block["average"][key]["value"] == pytest.approx(sum(vals) / len(vals), rel=1e-12)


def test_the_ceilings_pointing_game_is_the_readings_hit_rate(tmp_path):
    """The counts' hits (the map's maximum) are replaced by the reading's; the other keys stay the counts'."""
    rng, ids, counts = _setup()
    readings = {r: _reading(rng, dc) for r, dc in counts.items()}
    source = load_human(_human_folder(tmp_path, counts, readings=readings))
    h, _ = ceiling(source.readers["d"], classes=CLASSES, bootstrap=0)
    plain, _ = ceiling({r: reader_pairs(dc) for r, dc in counts.items()}, classes=CLASSES, bootstrap=0)
    for c in CLASSES:
        rates = []
        for r in readings.values():
            hits = [r.hit[i] for i in range(len(r.case_id)) if r.cls[i] == c and r.gt[i]]
            if hits:
                rates.append(sum(hits) / len(hits))
        assert h.point[c]["pointing_game"] == pytest.approx(sum(rates) / len(rates), rel=1e-12)
        assert h.point[c]["dice_best"] == plain.point[c]["dice_best"]


@pytest.mark.parametrize("mutate, message", [
    (lambda z: z.pop("hit"), "missing array"),
    (lambda z: z.update(hit=np.where(z["gt"], z["hit"], 1.0)), "nan elsewhere"),
    (lambda z: z.update(iou=z["iou"] + 2.0), "iou must be"),
    (lambda z: z.update(gt=np.zeros_like(z["gt"]), seg=np.zeros_like(z["seg"])), "neither"),
    (lambda z: z.update(cases=z["cases"][::-1]), "sorted and unique"),
    (lambda z: z.update(case_id=z["case_id"][:-1]), "one length"),
    (lambda z: z.update(gt=z["gt"].astype(np.int8)), "wrong type"),
    (lambda z: z.update({k: v[~z["gt"]] for k, v in z.items() if k != "cases"}),  # the pairs' rows dropped
     "does not match the reader's counts"),
])
def test_hostile_reading_is_refused(tmp_path, mutate, message):
    _, _, counts = _setup()
    folder = _human_folder(tmp_path, counts)
    path = folder / "readers" / "R1" / READING_FILE
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    mutate(arrays)
    np.savez(path, **arrays)
    with pytest.raises(InputError) as err:
        load_human(folder)
    assert message in str(err.value).lower(), str(err.value)


def test_a_human_folder_without_readings_is_refused(tmp_path):
    _, _, counts = _setup()
    folder = _human_folder(tmp_path, counts)
    (folder / "readers" / "R2" / READING_FILE).unlink()
    with pytest.raises(InputError, match="reading.npz"):
        load_human(folder)


def test_a_native_reading_is_used_for_the_block_and_checked(tmp_path):
    """reading_native.npz (CheXlocalize at full resolution), when there, is the block's source; a link leaving
    the folder, a malformed one, or one for some readers only is refused."""
    from xbench.score.sections.human.reading import NATIVE_READING_FILE

    rng, ids, counts = _setup()
    folder = _human_folder(tmp_path, counts)
    natives = {r: _reading(rng, dc) for r, dc in counts.items()}
    for r, reading in natives.items():
        save_reading(folder / "readers" / r / NATIVE_READING_FILE, reading)
    source = load_human(folder)
    metrics = {"datasets": {"d": {"summary": {}, "classes": {}}}}
    block = human_block(metrics, {}, source, bootstrap=10, seed=2)["datasets"]["d"]["chexlocalize"]
    assert block == chexlocalize_block(natives, classes=CLASSES, bootstrap=10, seed=2, resolution="native")
    outside = tmp_path / "elsewhere.npz"
    (folder / "readers" / "R1" / NATIVE_READING_FILE).rename(outside)
    (folder / "readers" / "R1" / NATIVE_READING_FILE).symlink_to(outside)
    with pytest.raises(InputError, match="not a file inside the human folder"):
        load_human(folder)
    (folder / "readers" / "R1" / NATIVE_READING_FILE).unlink()
    with pytest.raises(InputError, match="for some readers of d only"):
        load_human(folder)
    (folder / "readers" / "R1" / NATIVE_READING_FILE).write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(InputError, match="not a readable"):
        load_human(folder)
