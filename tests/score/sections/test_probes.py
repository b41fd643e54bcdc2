"""Text probes in the scorer (score/sections/probes.py): the text_probes section equals brute force, and the original
phrase rows score exactly as against a ground truth without probes (compared by digest)."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from score_reference import resize
from score_stores import run_score_cli
from xbench.schemas import DatasetSpec, SubmissionWriter, validate_ground_truth, validate_submission, write_ground_truth
from xbench.schemas.probes import KINDS, TextProbes
from xbench.schemas.queries import Queries
from xbench.score.scoring import score_submission

CATS = ["Atelectasis", "Edema", "Pneumothorax"]
GRID = (10, 12)
SHAPE = (5, 6)


def build(seed=0, n=8):
    """Phrase rows with probes (originals first in each image, then their probes) and one raw map per row,
    with the cases brute force must get right: an unchanged probe map, a scaled one, a constant one, and
    side swaps whose mass moves to the other half or stays."""
    rng = np.random.default_rng(seed)
    ids = [f"img-{i}" for i in range(n)]
    rows = []  # (id, case, category, mask, of, kind)
    for i in range(n):
        originals = []
        for k in range(int(rng.integers(1, 4))):
            m = np.zeros(GRID, bool)
            y, x = rng.integers(0, 8), rng.integers(0, 10)
            m[y:y + 2, x:x + 2] = True
            originals.append((f"{ids[i]}#{k}", i, CATS[int(rng.integers(len(CATS)))], m, "", ""))
        rows += originals
        for o in originals:
            for kind in KINDS:
                if kind == "negation" or rng.random() < 0.7:
                    rows.append((f"{ids[i]}#{o[0][-1]}{kind[0]}", i, o[2], o[3], o[0], kind))
    maps = rng.standard_normal((len(rows), *SHAPE)).astype(np.float32)
    row_of = {r[0]: k for k, r in enumerate(rows)}
    probes = [k for k, r in enumerate(rows) if r[5]]
    lat = [k for k in probes if rows[k][5] == "laterality"]
    src = lambda k: row_of[rows[k][4]]  # noqa: E731
    maps[probes[0]] = maps[src(probes[0])]  # unchanged
    maps[probes[1]] = 3 * maps[src(probes[1])] + 1  # same up to scale and shift
    maps[probes[2]] = 0.5  # constant: rank change undefined
    left = np.zeros(SHAPE, np.float32)
    left[:, :2] = 1
    maps[src(lat[0])], maps[lat[0]] = left, left[:, ::-1]  # mass moves to the other half
    maps[src(lat[1])], maps[lat[1]] = left, left  # stays
    return ids, rows, maps


def write(tmp, ids, rows, maps, *, probes=True):
    tmp.mkdir(parents=True, exist_ok=True)
    keep = [k for k, r in enumerate(rows) if probes or not r[5]]
    q = Queries.of([rows[k][0] for k in keep], [rows[k][1] for k in keep], [rows[k][2] for k in keep])
    qmask = np.stack([rows[k][3] for k in keep])
    n = len(ids)
    labels = np.full((n, len(CATS)), -1, np.int8)
    regions = {}
    for r in rows:
        if not r[5]:
            key = (r[1], CATS.index(r[2]))
            regions[key] = regions.get(key, np.zeros(GRID, bool)) | r[3]
            labels[key] = 1
    keys = sorted(regions)
    gt = tmp / "gt.zarr"
    write_ground_truth(gt, "ms_cxr", case_ids=ids, classes=CATS, labels=labels,
                       region_index=np.array(keys, np.int32).reshape(-1, 2), region_mask=np.stack([regions[k] for k in keys]),
                       orig_size=np.full((n, 2), 100), grid=GRID, queries=q, query_mask=qmask,
                       query_probes=TextProbes(np.array([rows[k][4] for k in keep]), np.array([rows[k][5] for k in keep]))
                       if probes else None)
    rng = np.random.default_rng(9)
    order = keep[::-1]  # the submission lists its phrase rows in any order
    sub = tmp / "sub.zarr"
    spec = DatasetSpec(ids, CATS, SHAPE, "logit", (), query_ids=[rows[k][0] for k in order])
    w = SubmissionWriter.create(sub, model="m", method="similarity", provenance={}, datasets={"ms_cxr": spec},
                                cases_per_block=3, map_dtype="float32")
    for b in w.blocks_todo("ms_cxr"):
        s, e = w.block_rows("ms_cxr", b)
        w.write_block("ms_cxr", b, rng.standard_normal((e - s, 3)), rng.standard_normal((e - s, 3, *SHAPE)))
    for b in w.query_blocks_todo("ms_cxr"):
        s, e = w.query_block_rows("ms_cxr", b)
        w.write_query_block("ms_cxr", b, np.zeros(e - s, np.float32), maps[order[s:e]])
    w.finish()
    return gt, sub


# ------------------------------------------------------------------------------------------- brute force
def ref_values(orig, probe, kind):
    a, b = resize(orig.astype(np.float64), GRID), resize(probe.astype(np.float64), GRID)
    const = a.min() == a.max() or b.min() == b.max()
    out = {"rank_change": np.nan if const else 1 - spearmanr(a.ravel(), b.ravel())[0]}

    def dist(m):
        if m.min() == m.max():
            return np.full(m.size, 1 / m.size)
        v = ((m - m.min()) / (m.max() - m.min())).ravel()
        return v / v.sum()

    out["mass_change"] = 0.5 * sum(abs(x - y) for x, y in zip(dist(a), dist(b)))
    if kind == "laterality":
        def share(m):
            if m.min() == m.max():
                return np.nan
            v = (m - m.min()) / (m.max() - m.min())
            left = sum(v[i, j] for i in range(GRID[0]) for j in range(GRID[1]) if j + 0.5 < GRID[1] / 2)
            right = sum(v[i, j] for i in range(GRID[0]) for j in range(GRID[1]) if j + 0.5 > GRID[1] / 2)
            return left / (left + right) if left + right else np.nan

        so, sp = share(a), share(b)
        if np.isnan(so) or so == 0.5 or np.isnan(sp):
            out["moved"] = out["side_shift"] = np.nan
        else:
            side = 1 if so > 0.5 else -1
            out["moved"] = float((sp > 0.5 and side == -1) or (sp < 0.5 and side == 1))
            out["side_shift"] = side * (so - sp)
    return out


def reference(rows, maps, n_images, B, seed, before=()):
    """``before``: the case counts of the scored datasets sorted before this one (their resamples come first in
    the one default_rng(seed), docs/contract.md "Resampling")."""
    row_of = {r[0]: k for k, r in enumerate(rows)}
    per = [(r[5], r[2], r[1], ref_values(maps[row_of[r[4]]], maps[k], r[5])) for k, r in enumerate(rows) if r[5]]
    rng = np.random.default_rng(seed)
    for n in before:
        for _ in range(B):
            rng.integers(0, n, n)
    draws = np.array([rng.integers(0, n_images, n_images) for _ in range(B)])

    def group(sel):
        kind = sel[0][0]
        keys = ["rank_change", "mass_change"] + (["moved", "side_shift"] if kind == "laterality" else [])
        out = {"n_probes": len(sel)}
        for key in keys:
            vals = [(img, v[key]) for _, _, img, v in sel if not np.isnan(v[key])]
            out[key] = np.mean([v for _, v in vals]) if vals else None
            reps = []
            for d in draws:  # each drawn image brings all its probes
                taken = [v for img in d for i, v in vals if i == img]
                if taken:
                    reps.append(np.mean(taken))
            out[f"ci_{key}"] = list(np.percentile(reps, [2.5, 97.5])) if reps else None
        return out

    kinds = {k: group([p for p in per if p[0] == k]) for k in KINDS if any(p[0] == k for p in per)}
    cats = {c: {k: group([p for p in per if p[0] == k and p[1] == c]) for k in KINDS
                if any(p[0] == k and p[1] == c for p in per)} for c in sorted({p[1] for p in per})}
    return kinds, cats, per


def _check(got, want):
    for key, v in want.items():
        if key == "n_probes":
            assert got[key] == v
        elif key.startswith("ci_"):
            k = key[3:]
            if v is None:
                assert got["ci95"][k] is None
            else:
                assert got["ci95"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), key
        elif v is None:
            assert got[key] is None, key
        else:
            assert got[key] == pytest.approx(v, rel=1e-9, abs=1e-12), key


def test_text_probe_section_equals_brute_force(tmp_path):
    ids, rows, maps = build()
    gt, sub = write(tmp_path, ids, rows, maps)
    assert validate_ground_truth(gt) == [] and validate_submission(sub, gt) == []
    res = score_submission(sub, gt, bootstrap=40, seed=3)
    assert res.metrics["xbench"]["schema_minor"] == 5
    section = res.metrics["text_probes"]["datasets"]["ms_cxr"]
    kinds, cats, per = reference(rows, maps, len(ids), 40, 3)
    assert section["n_probes"] == len(per)
    for k, want in kinds.items():
        _check(section["kinds"][k], want)
    for c, by_kind in cats.items():
        for k, want in by_kind.items():
            _check(section["categories"][c]["kinds"][k], want)
    # the planted cases
    assert section["kinds"]["negation"]["n_rank_undefined"] >= 1
    lat = section["kinds"]["laterality"]
    assert 0 < lat["moved"] < 1 and lat["n_side_undefined"] == sum(np.isnan(p[3]["moved"]) for p in per if p[0] == "laterality")
    assert res.metrics["text_probes"]["overall"]["negation"]["mass_change"] == section["kinds"]["negation"]["mass_change"]
    json.dumps(res.metrics, allow_nan=False)


def test_a_dataset_after_another_draws_its_own_resamples_in_the_one_stream(tmp_path):
    """The probe intervals of a dataset sorted after another scored one (5 cases) are taken on the draws that
    follow that dataset's, the resamples of its own class intervals (main started default_rng(seed) again)."""
    from xbench.schemas import read_ground_truth, read_submission
    from xbench.score.sections.probes import score_probes

    ids, rows, maps = build()
    gt, sub = write(tmp_path, ids, rows, maps)
    units = {"chestx_det10": 5, "ms_cxr": len(ids)}
    section = score_probes(read_submission(sub), read_ground_truth(gt), ["ms_cxr"], bootstrap=40, seed=3,
                           units=units)["datasets"]["ms_cxr"]
    kinds, _, _ = reference(rows, maps, len(ids), 40, 3, before=(5,))
    for k, want in kinds.items():
        _check(section["kinds"][k], want)


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_original_phrase_rows_score_exactly_as_without_probes(tmp_path, capsys):
    ids, rows, maps = build(seed=4)
    gt_a, sub_a = write(tmp_path / "a", ids, rows, maps, probes=True)
    gt_b, sub_b = write(tmp_path / "b", ids, rows, maps, probes=False)
    for gt, sub, out in ((gt_a, sub_a, tmp_path / "ra"), (gt_b, sub_b, tmp_path / "rb")):
        code, _, err = run_score_cli([sub, "--gt", gt, "--out", out, "--bootstrap", "30", "--quiet"], capsys)
        assert code == 0, err
    ma, mb = (json.loads((tmp_path / r / "metrics.json").read_text()) for r in ("ra", "rb"))
    assert "text_probes" in ma and "text_probes" not in mb
    assert (ma["xbench"]["schema_minor"], mb["xbench"]["schema_minor"]) == (5, 2)
    digest = lambda m: hashlib.sha256(json.dumps({k: m[k] for k in ("overall", "datasets", "phrases")},  # noqa: E731
                                                 sort_keys=True).encode()).hexdigest()
    assert digest(ma) == digest(mb)
    for name in ("pair_counts.npz", "pairs.parquet", "table1_grounding.csv"):
        assert _sha(tmp_path / "ra" / name) == _sha(tmp_path / "rb" / name), name
    assert (tmp_path / "ra" / "table_text_probes.md").exists() and not (tmp_path / "rb" / "table_text_probes.md").exists()


def test_partial_run_counts_the_probes_of_the_images_present(tmp_path):
    from score_stores import subset_submission

    ids, rows, maps = build(seed=6)
    gt, sub = write(tmp_path, ids, rows, maps)
    keep = ids[:4]
    subset_submission(sub, tmp_path / "part.zarr", {"ms_cxr": keep})
    res = score_submission(tmp_path / "part.zarr", gt, bootstrap=0, allow_missing=True)
    section = res.metrics["text_probes"]["datasets"]["ms_cxr"]
    assert section["n_probes"] == sum(1 for r in rows if r[5] and r[1] < 4)
    assert res.metrics["xbench"]["schema_minor"] == 5


@pytest.mark.parametrize("change, message", [
    ({"kind": "sarcasm"}, "unknown probe kind"),
    ({"of": "img-0#9"}, "not an original phrase row"),
    ({"of": ""}, "both empty"),
    ({"other_case": True}, "another image or category"),
])
def test_probe_mapping_problems_are_refused(tmp_path, change, message):
    from xbench.schemas import InvalidStoreError

    ids, rows, maps = build(seed=1)
    k = next(i for i, r in enumerate(rows) if r[5])
    r = list(rows[k])
    if "kind" in change:
        r[5] = change["kind"]
    if "of" in change:
        r[4] = change["of"]
    if "other_case" in change:
        r[4] = next(o[0] for o in rows if not o[5] and o[1] != r[1])
    rows[k] = tuple(r)
    with pytest.raises(InvalidStoreError, match=message):
        write(tmp_path, ids, rows, maps)


def test_stored_probe_arrays_are_validated(tmp_path):
    import zarr

    ids, rows, maps = build(seed=2)
    gt, _ = write(tmp_path, ids, rows, maps)
    g = zarr.open_group(str(gt / "ms_cxr"), mode="r+")
    kinds = np.array(np.asarray(g["query_probe_kind"][...]).tolist(), dtype=object)
    kinds[np.argmax(kinds != "")] = "sarcasm"
    g["query_probe_kind"][:] = kinds
    assert any("unknown probe kind" in str(p) for p in validate_ground_truth(gt))
    del g["query_probe_of"]
    assert any("query_probe_of" in str(p) and "missing" in str(p) for p in validate_ground_truth(gt))
    root = zarr.open_group(str(gt), mode="r+")
    root.attrs["xbench"] = {**root.attrs["xbench"], "schema_minor": 2}
    assert any("schema_minor >= 4" in str(p) for p in validate_ground_truth(gt))


def test_scoring_a_ground_truth_with_a_broken_probe_mapping_is_exit_2(tmp_path, capsys):
    import zarr

    ids, rows, maps = build(seed=3)
    gt, sub = write(tmp_path, ids, rows, maps)
    g = zarr.open_group(str(gt / "ms_cxr"), mode="r+")
    of = np.array(np.asarray(g["query_probe_of"][...]).tolist(), dtype=object)
    of[np.argmax(of != "")] = "img-0#\n\x1b[31mforged"
    g["query_probe_of"][:] = of
    code, out, err = run_score_cli([sub, "--gt", gt, "--out", tmp_path / "r", "--bootstrap", "0"], capsys)
    assert code == 2 and "Traceback" not in err and not (tmp_path / "r").exists()
    assert "not an original phrase row" in err and "\x1b" not in err


def test_two_submissions_get_the_probe_table_in_each_folder_and_on_the_page(tmp_path, capsys):
    import shutil

    ids, rows, maps = build(seed=5)
    gt, sub = write(tmp_path, ids, rows, maps)
    shutil.copytree(sub, tmp_path / "other.zarr")
    code, _, err = run_score_cli([sub, tmp_path / "other.zarr", "--gt", gt, "--out", tmp_path / "r", "--bootstrap", "0",
                                  "--quiet"], capsys)
    assert code == 0, err
    md = (tmp_path / "r" / "sub" / "table_text_probes.md").read_text()
    assert "| m | ms\\_cxr | all categories | negation |" in md
    page = (tmp_path / "r" / "index.html").read_text()
    assert "<h2>Text probes</h2>" in page and page.count("negation") >= 2
