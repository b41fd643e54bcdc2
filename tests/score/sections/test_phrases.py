"""Phrase grounding: CNR against a brute-force reference, and phrase rows scored end to end.

The oracles are written from the contract's text: the resize is score_reference.resize (no code shared
with xbench.score), CNR is numpy's mean/var(ddof=0) on it, and the per-category metrics and the
image-level bootstrap are recomputed phrase by phrase.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from score_reference import pair_values, resize
from xbench.schemas import DatasetSpec, InvalidStoreError, SubmissionWriter, validate_ground_truth, validate_submission, write_ground_truth
from xbench.schemas.queries import Queries
from xbench.score.sections.phrases import cnr_of_pairs
from xbench.score.scoring import score_submission


def ref_cnr(raw, region):
    """Signed CNR by the contract's words (NaN where undefined)."""
    m = resize(raw, region.shape)
    if region.all() or not region.any():
        return np.nan
    if m.max() == m.min():
        return 0.0
    a, b = m[region], m[~region]
    den = np.sqrt(a.var() + b.var())
    return np.nan if den == 0 else (a.mean() - b.mean()) / den


def _close(a, b):
    return (np.isnan(a) and np.isnan(b)) or abs(a - b) <= 1e-9 * max(1.0, abs(b))


@pytest.mark.parametrize("map_shape", [(7, 5), (3, 3), (24, 20), (12, 16)])
def test_cnr_matches_brute_force_on_random_and_edge_cases(map_shape):
    rng = np.random.default_rng(sum(map_shape))
    grid = (12, 16)
    maps, masks = [], []
    for k in range(12):
        maps.append(rng.standard_normal(map_shape))
        m = np.zeros(grid, bool)
        y, x = rng.integers(0, 10), rng.integers(0, 14)
        m[y:y + rng.integers(1, 5), x:x + rng.integers(1, 5)] = True
        masks.append(m)
    one = np.zeros(grid, bool)
    one[3, 4] = True
    edge = [
        (np.full(map_shape, 2.5), masks[0]),             # constant map: 0
        (rng.standard_normal(map_shape), np.ones(grid, bool)),  # region covers the whole grid: undefined
        (rng.standard_normal(map_shape), one),            # one cell inside: var_in = 0
        (-maps[0], masks[0]),                              # inverted map: the signed value flips
    ]
    for m, r in edge:
        maps.append(m)
        masks.append(r)
    maps = np.stack(maps).astype(np.float32)
    masks = np.stack(masks)
    got = cnr_of_pairs(maps, masks)
    want = np.array([ref_cnr(m.astype(np.float64), r) for m, r in zip(maps, masks)])
    assert all(_close(g, w) for g, w in zip(got, want)), (got, want)
    assert got[12] == 0.0 and np.isnan(got[13]) and np.isfinite(got[14])
    assert got[15] == pytest.approx(-got[0], rel=1e-12)


def test_cnr_step_map_matching_the_region_is_undefined_and_local_rows_pick_regions():
    # a map equal to the region at the grid's own size: both variances 0, means differ -> undefined
    region = np.zeros((6, 6), bool)
    region[1:3, 2:5] = True
    got = cnr_of_pairs(region[None].astype(np.float32), region[None])
    assert np.isnan(got[0]) and np.isnan(ref_cnr(region.astype(float), region))
    rng = np.random.default_rng(0)
    masks = rng.random((3, 6, 6)) < 0.3
    maps = rng.standard_normal((5, 4, 4)).astype(np.float32)
    local = np.array([2, 0, 0, 1, 2])
    got = cnr_of_pairs(maps, masks, local)
    assert all(_close(g, ref_cnr(m.astype(float), masks[r])) for g, m, r in zip(got, maps, local))
    with pytest.raises(ValueError):
        cnr_of_pairs(maps, masks, np.array([0, 1, 2, 3, 4]))


# ---------------------------------------------------------------------------------- stores with phrases
CATS = ["Atelectasis", "Edema", "Pneumothorax"]
GRID = (10, 12)


def make_phrase_stores(tmp_path, *, seed=0, n=9, map_shape=(5, 6), unsupported=None, maps_seed=None):
    """A gt with class regions and phrase rows (several per image, some images none), and a submission
    (its maps and scores from ``maps_seed`` when given: another model on the same ground truth)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ids = [f"img-{i:02d}" for i in range(n)]
    labels = np.full((n, len(CATS)), -1, np.int8)
    qcase, qcat, qmask = [], [], []
    for i in range(n):
        for _ in range(int(rng.integers(0, 4))):
            c = int(rng.integers(len(CATS)))
            m = np.zeros(GRID, bool)
            y, x = rng.integers(0, 8), rng.integers(0, 10)
            m[y:y + rng.integers(1, 4), x:x + rng.integers(1, 5)] = True
            qcase.append(i)
            qcat.append(CATS[c])
            qmask.append(m)
    qmask = np.stack(qmask)
    qmask[0] = True  # a phrase whose region covers the whole grid: CNR undefined
    q = Queries.of([f"{ids[c]}#{k}" for k, c in enumerate(qcase)], qcase, qcat)
    # class regions: union of the phrases of that category (labels 1 there, -1 elsewhere)
    masks = {}
    for k, (c, cat) in enumerate(zip(qcase, qcat)):
        key = (c, CATS.index(cat))
        masks[key] = masks.get(key, np.zeros(GRID, bool)) | qmask[k]
        labels[key] = 1
    keys = sorted(masks)
    gt = tmp_path / "gt.zarr"
    write_ground_truth(gt, "ms_cxr", case_ids=ids, classes=CATS, labels=labels,
                       region_index=np.array(keys, np.int32).reshape(-1, 2),
                       region_mask=np.stack([masks[k] for k in keys]), orig_size=np.full((n, 2), 100), grid=GRID,
                       queries=q, query_mask=qmask)
    Q = len(q)
    if maps_seed is not None:
        rng = np.random.default_rng(maps_seed)
    qmaps = rng.standard_normal((Q, *map_shape)).astype(np.float32)
    qmaps[1] = 1.5  # constant map
    qscores = rng.standard_normal(Q).astype(np.float32)
    order = rng.permutation(Q)  # the submission lists its phrase rows in any order
    sub = tmp_path / "sub.zarr"
    spec = DatasetSpec(ids[::-1], CATS, map_shape, "logit", (), query_ids=list(q.id[order]),
                       phrases_unsupported=unsupported)
    w = SubmissionWriter.create(sub, model="m", method="similarity", provenance={}, datasets={"ms_cxr": spec},
                                cases_per_block=4, map_dtype="float32")
    for b in w.blocks_todo("ms_cxr"):
        s, e = w.block_rows("ms_cxr", b)
        w.write_block("ms_cxr", b, rng.standard_normal((e - s, 3)), rng.standard_normal((e - s, 3, *map_shape)))
    for b in w.query_blocks_todo("ms_cxr"):
        s, e = w.query_block_rows("ms_cxr", b)
        w.write_query_block("ms_cxr", b, qscores[order[s:e]], qmaps[order[s:e]])
    w.finish()
    return gt, sub, q, qmask, qmaps


def reference_phrases(q, qmask, qmaps):
    """Per phrase: category, image, hit, dice/iou curves, CNR, by brute force."""
    rows = []
    for k in range(len(q)):
        hit, dice, iou = pair_values(qmaps[k].astype(np.float64), qmask[k])
        rows.append(dict(cat=str(q.category[k]), image=int(q.case[k]), hit=float(hit), dice=np.array(dice),
                         iou=np.array(iou), cnr=ref_cnr(qmaps[k].astype(np.float64), qmask[k])))
    return rows


def category_values(rows):
    out = {}
    for cat in CATS:
        rs = [r for r in rows if r["cat"] == cat]
        if not rs:
            continue
        dm = np.mean([r["dice"] for r in rs], axis=0)
        im = np.mean([r["iou"] for r in rs], axis=0)
        cnr = [abs(r["cnr"]) for r in rs if not np.isnan(r["cnr"])]
        signed = [r["cnr"] for r in rs if not np.isnan(r["cnr"])]
        out[cat] = {"pointing_game": np.mean([r["hit"] for r in rs]), "dice_fixed": dm[50], "iou_fixed": im[50],
                    "dice_best": dm.max(), "iou_best": im.max(), "tau_dice": int(np.argmax(dm)) / 100,
                    "tau_iou": int(np.argmax(im)) / 100, "cnr": np.mean(cnr) if cnr else None,
                    "cnr_signed": np.mean(signed) if signed else None, "n_phrases": len(rs)}
    return out


def test_phrase_rows_score_as_the_brute_force_reference(tmp_path):
    gt, sub, q, qmask, qmaps = make_phrase_stores(tmp_path)
    assert validate_ground_truth(gt) == [] and validate_submission(sub, gt) == []
    res = score_submission(sub, gt, bootstrap=0)
    ph = res.metrics["phrases"]["datasets"]["ms_cxr"]
    assert res.metrics["xbench"]["schema_minor"] == 2
    rows = reference_phrases(q, qmask, qmaps)
    want = category_values(rows)
    assert ph["n_phrases"] == len(q) and ph["n_images"] == len(set(q.case.tolist()))
    assert ph["n_cnr_undefined"] == sum(np.isnan(r["cnr"]) for r in rows) >= 1
    for cat, w in want.items():
        got = ph["categories"][cat]
        for k, v in w.items():
            assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-12), (cat, k)
    for k in ("pointing_game", "dice_best", "cnr"):
        assert ph["summary"][k] == pytest.approx(np.mean([w[k] for w in want.values()]), rel=1e-12)
    defined = [abs(r["cnr"]) for r in rows if not np.isnan(r["cnr"])]
    assert ph["all_phrases"]["cnr"] == pytest.approx(np.mean(defined), rel=1e-12)
    assert ph["all_phrases"]["pointing_game"] == pytest.approx(np.mean([r["hit"] for r in rows]))
    # the class-level tables are unaffected: MS-CXR classes carry their union regions
    assert res.metrics["datasets"]["ms_cxr"]["classes"]["Edema"]["auroc"] is None
    json.dumps(res.metrics, allow_nan=False)


@pytest.mark.parametrize("before", [(), (5,)])
def test_phrase_bootstrap_resamples_images(tmp_path, before):
    """The contract's words ("Resampling"): one default_rng(seed); the datasets sorted before this one take their
    B resamples of integers(0, n, n) first (``before``: their case counts), then this one's images."""
    import dataclasses

    from xbench.score.sections.plugins.phrases import phrase_metrics

    gt, sub, q, qmask, qmaps = make_phrase_stores(tmp_path, seed=3)
    B, seed = 60, 7
    res = score_submission(sub, gt, bootstrap=B, seed=seed)
    ph = res.metrics["phrases"]["datasets"]["ms_cxr"]
    if before:  # as if scored beside a dataset sorted before ms_cxr
        ph = phrase_metrics(dataclasses.replace(res.phrase_counts["ms_cxr"], prior=before), bootstrap=B, seed=seed)
    rows = reference_phrases(q, qmask, qmaps)
    n = 9
    rng = np.random.default_rng(seed)
    for m in before:
        for _ in range(B):
            rng.integers(0, m, m)
    draws = np.array([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(B)])
    reps = {cat: {"pointing_game": [], "dice_best": [], "cnr": []} for cat in CATS}
    for d in draws:
        sample = [r for i in range(n) for _ in range(d[i]) for r in rows if r["image"] == i]
        vals = category_values(sample)
        for cat in CATS:
            for k in reps[cat]:
                v = vals.get(cat, {}).get(k)
                reps[cat][k].append(np.nan if v is None else v)
    for cat in CATS:
        for k, v in reps[cat].items():
            v = np.array(v)
            v = v[~np.isnan(v)]
            want = np.percentile(v, [2.5, 97.5])
            assert ph["categories"][cat]["ci95"][k] == pytest.approx(list(want), rel=1e-9), (cat, k)


def test_unsupported_phrases_are_null_with_the_reason(tmp_path):
    gt, sub, *_ = make_phrase_stores(tmp_path, unsupported="cross-attention model: no free text")
    assert validate_submission(sub, gt) == []
    ph = score_submission(sub, gt, bootstrap=0).metrics["phrases"]["datasets"]["ms_cxr"]
    assert ph["unsupported"] and "free text" in ph["reason"] and ph["summary"]["cnr"] is None


def test_store_without_phrases_has_no_phrase_keys(tmp_path):
    from score_stores import make_gt, make_submission

    gt = make_gt(tmp_path / "gt.zarr")
    make_submission(tmp_path / "sub.zarr", gt)
    m = score_submission(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=20).metrics
    assert "phrases" not in m and m["xbench"].get("schema_minor", 0) < 2  # minor 2 is the phrases' own


def test_phrase_row_problems_are_reported(tmp_path):
    import zarr

    gt, sub, q, qmask, _ = make_phrase_stores(tmp_path)
    # a submission lacking the phrase arrays while the ground truth has phrase rows
    g = zarr.open_group(str(sub / "ms_cxr"), mode="r+")
    del g["query_scores"]
    probs = validate_submission(sub, gt)
    assert any("query_scores" in str(p) and "missing" in str(p) for p in probs)
    # writer-side checks: a category outside the classes, cases out of order, an empty phrase region
    bad = [Queries.of(["a", "b"], [0, 1], ["Edema", "Nodule"]), Queries.of(["a", "b"], [1, 0], ["Edema", "Edema"])]
    for qq in bad:
        with pytest.raises(InvalidStoreError):
            write_ground_truth(tmp_path / "g2.zarr", "ms_cxr", case_ids=["x", "y"], classes=CATS,
                               labels=np.full((2, 3), -1), region_index=np.zeros((0, 2)), region_mask=np.zeros((0, *GRID)),
                               orig_size=np.full((2, 2), 9), grid=GRID, queries=qq, query_mask=np.ones((2, *GRID), bool))
    with pytest.raises(InvalidStoreError, match="empty"):
        write_ground_truth(tmp_path / "g3.zarr", "ms_cxr", case_ids=["x"], classes=CATS, labels=np.full((1, 3), -1),
                           region_index=np.zeros((0, 2)), region_mask=np.zeros((0, *GRID)), orig_size=np.full((1, 2), 9),
                           grid=GRID, queries=Queries.of(["a"], [0], ["Edema"]), query_mask=np.zeros((1, *GRID), bool))
    # a store whose root does not declare the minor version
    root = zarr.open_group(str(gt), mode="r+")
    root.attrs["xbench"] = {k: v for k, v in root.attrs["xbench"].items() if k != "schema_minor"}
    assert any("schema_minor" in str(p) for p in validate_ground_truth(gt))


# ------------------------------------------------------------------ phrase metrics through the registry
def _explicit_resamples(rows, n, B, seed):
    """The image resamples of the phrase bootstrap written out: each resample's phrase rows, an image's
    phrases repeated as often as it was drawn."""
    rng = np.random.default_rng(seed)  # the only dataset: its draws start the stream (contract "Resampling")
    draws = np.array([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(B)])
    return [[r for i in range(n) for _ in range(d[i]) for r in rows if r["image"] == i] for d in draws]


def test_a_new_phrase_metric_is_one_registered_definition(tmp_path):
    from xbench.score.metrics import registry as R
    from xbench.score.sections.phrases import phrase_markdown, phrase_rows

    def positive(v):  # share of phrases whose map is brighter inside the region than outside
        return v.extra[R.CNR_COLUMN] > 0

    def defined(v):
        return ~np.isnan(v.extra[R.CNR_COLUMN])

    gt, sub, q, qmask, qmaps = make_phrase_stores(tmp_path, seed=5)
    rows = reference_phrases(q, qmask, qmaps)
    B, seed = 40, 3
    new = R.Metric("cnr_positive", "Share of phrases with positive contrast", "CNR>0", "grounding", positive,
                   pairs=defined, scopes=("phrase",), minor=2)
    with R.registered(new):
        assert "cnr_positive" in R.phrase_keys() and "cnr_positive" in R.pooled_keys()
        assert "cnr_positive" not in R.class_keys() + R.summary_keys()  # class paths never see it
        m = score_submission(sub, gt, bootstrap=B, seed=seed).metrics
        text = phrase_markdown(phrase_rows([type("R", (), {"name": "m", "metrics": m})]))
    assert "cnr_positive" not in R.REGISTRY
    ph = m["phrases"]["datasets"]["ms_cxr"]

    def share(rs):
        vals = [r["cnr"] > 0 for r in rs if not np.isnan(r["cnr"])]
        return np.mean(vals) if vals else np.nan

    for cat in CATS:
        rs = [r for r in rows if r["cat"] == cat]
        assert ph["categories"][cat]["cnr_positive"] == pytest.approx(share(rs), rel=1e-12)
    assert ph["all_phrases"]["cnr_positive"] == pytest.approx(share(rows), rel=1e-12)
    assert m["phrases"]["overall"]["cnr_positive"] == ph["summary"]["cnr_positive"]
    # its interval: the same image resamples, recomputed phrase by phrase
    samples = _explicit_resamples(rows, 9, B, seed)
    for cat in CATS:
        reps = np.array([share([r for r in s if r["cat"] == cat]) for s in samples])
        want = np.percentile(reps[~np.isnan(reps)], [2.5, 97.5])
        assert ph["categories"][cat]["ci95"]["cnr_positive"] == pytest.approx(list(want), rel=1e-9)
    reps = np.array([share(s) for s in samples])
    assert ph["all_phrases"]["ci95"]["cnr_positive"] == pytest.approx(list(np.percentile(reps, [2.5, 97.5])), rel=1e-9)
    assert "CNR>0" in text
    # ... and nothing of it reaches the class-level sections
    assert all("cnr_positive" not in e for e in m["datasets"]["ms_cxr"]["classes"].values())


def test_phrase_scope_keeps_class_and_phrase_metrics_apart():
    from xbench.score.metrics import registry as R

    assert R.phrase_keys() == ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best", "cnr", "cnr_signed")
    assert R.pooled_keys() == ("pointing_game", "dice_fixed", "iou_fixed", "cnr", "cnr_signed")
    for k in ("cnr", "cnr_signed"):
        assert k not in R.class_keys() and k not in R.summary_keys() and k not in R.pair_columns()
        assert R.metric(k).fmt == "number" and R.metric(k).minor == 2
    # one definition for both scopes: the phrase pointing game is the class one
    assert R.metric("pointing_game").scopes == ("class", "phrase")
    assert max(m.minor for m in R.metrics()) < 2  # class metrics.json stays at its minor
    assert {m.key for m in R.metrics(scope=None)} == set(R.REGISTRY)
    with pytest.raises(ValueError, match="only grounding"):
        R.Metric("x", "x", "x", "recognition", lambda s: s.tp, scopes=("phrase",))
    with pytest.raises(ValueError, match="scopes"):
        R.Metric("x", "x", "x", "grounding", lambda v: v.hit, scopes=("case",))
    only_class = R.Metric("d_class", "d", "d", "grounding", R.metric("dice_best").values, curve=True,
                          threshold=R.Best("tau_x"))
    with R.registered(only_class):
        with pytest.raises(ValueError, match="scopes"):
            R.register(R.Metric("d_phrase", "d", "d", "grounding", R.metric("dice_best").values, curve=True,
                                threshold=R.ChosenBy("d_class"), scopes=("phrase",)))


def test_pair_counts_keep_phrase_rows_and_old_files_load(tmp_path):
    from xbench.score.kernels.counts import load_pair_counts
    from xbench.score.sections.pair_counts import load_phrase_counts, save_pair_counts

    gt, sub, q, *_ = make_phrase_stores(tmp_path)
    res = score_submission(sub, gt, bootstrap=0)
    pc = res.phrase_counts["ms_cxr"]
    save_pair_counts(tmp_path / "pc.npz", res.counts, res.phrase_counts)
    back = load_phrase_counts(tmp_path / "pc.npz")["ms_cxr"]
    assert back.same_ground_truth(pc) and back.n_images == 9
    assert np.array_equal(back.cnr, pc.cnr, equal_nan=True) and np.array_equal(back.counts.b, pc.counts.b)
    assert np.array_equal(back.image, np.asarray(q.case)[pc.counts.pair_case])
    assert set(load_pair_counts(tmp_path / "pc.npz")) == {"ms_cxr"}  # the class counts read as before
    save_pair_counts(tmp_path / "old.npz", res.counts)  # the layout of files written before phrase rows
    assert load_phrase_counts(tmp_path / "old.npz") == {}
    with np.load(tmp_path / "old.npz") as z:
        assert not any("phrase" in k for k in z.files)


def test_paired_phrase_comparison_equals_an_explicit_resample(tmp_path):
    from xbench.score.sections.paired import paired_bootstrap
    from xbench.score.outputs.folder import write_outputs
    from xbench.score.report import load_result
    from xbench.score.report.paired import compare_results

    gt, sub_a, q, qmask, maps_a = make_phrase_stores(tmp_path / "a", seed=2)
    _, sub_b, _, _, maps_b = make_phrase_stores(tmp_path / "b", seed=2, maps_seed=11)
    B, seed = 50, 4
    ra, rb = (score_submission(s, gt, bootstrap=B, seed=seed) for s in (sub_a, sub_b))
    table = paired_bootstrap(ra.counts, rb.counts, bootstrap=B, seed=seed,
                                phrases_a=ra.phrase_counts, phrases_b=rb.phrase_counts)
    ph = table[table["dataset"].astype(str).str.startswith("phrases")]
    rows_a, rows_b = reference_phrases(q, qmask, maps_a), reference_phrases(q, qmask, maps_b)
    sa, sb = _explicit_resamples(rows_a, 9, B, seed), _explicit_resamples(rows_b, 9, B, seed)
    checked = 0
    for cat in CATS:
        va = [category_values(x).get(cat, {}) for x in sa]
        vb = [category_values(x).get(cat, {}) for x in sb]
        for k in ("pointing_game", "dice_best", "iou_fixed", "cnr", "cnr_signed"):
            d = np.array([np.nan if a.get(k) is None or b.get(k) is None else a[k] - b[k] for a, b in zip(va, vb)])
            d = d[~np.isnan(d)]
            row = ph[(ph["dataset"] == "phrases/ms_cxr") & (ph["class"] == cat) & (ph["metric"] == k)].iloc[0]
            assert [row["diff_lo"], row["diff_hi"]] == pytest.approx(list(np.percentile(d, [2.5, 97.5])), rel=1e-9, abs=1e-12)
            assert row["n_valid"] == d.size
            cat_a = ra.metrics["phrases"]["datasets"]["ms_cxr"]["categories"][cat]
            cat_b = rb.metrics["phrases"]["datasets"]["ms_cxr"]["categories"][cat]
            assert row["a"] == cat_a[k] and row["diff"] == pytest.approx(cat_a[k] - cat_b[k], rel=1e-12)
            checked += 1
    assert checked == 15
    # the mean over every phrase, resampled the same way
    pooled = ph[(ph["class"] == "all phrases") & (ph["metric"] == "cnr")].iloc[0]
    d = np.array([np.mean([abs(r["cnr"]) for r in x if not np.isnan(r["cnr"])])
                  - np.mean([abs(r["cnr"]) for r in y if not np.isnan(r["cnr"])]) for x, y in zip(sa, sb)])
    assert [pooled["diff_lo"], pooled["diff_hi"]] == pytest.approx(list(np.percentile(d, [2.5, 97.5])), rel=1e-9)
    # each side's own replicates are those of its metrics.json interval
    summ = ph[(ph["dataset"] == "phrases/ms_cxr") & ph["class"].isna() & (ph["metric"] == "pointing_game")].iloc[0]
    assert summ["a"] == ra.metrics["phrases"]["datasets"]["ms_cxr"]["summary"]["pointing_game"]
    # through the files: pair_counts.npz keeps the phrase rows and the report compares them
    write_outputs(ra, tmp_path / "out_a")
    write_outputs(rb, tmp_path / "out_b")
    rows = compare_results(load_result(tmp_path / "out_a"), load_result(tmp_path / "out_b"), bootstrap=B, seed=seed)
    got = {(r.scope, r.cls, r.metric): r for r in rows}
    assert ("phrases/ms_cxr", "Edema", "cnr") in got and ("phrases", None, "cnr") in got
    want = ph[(ph["dataset"] == "phrases/ms_cxr") & (ph["class"] == "Edema") & (ph["metric"] == "cnr")].iloc[0]
    assert got[("phrases/ms_cxr", "Edema", "cnr")].ci_lo == want["diff_lo"]
    assert not any(r.scope == "overall" and r.metric == "cnr" for r in rows)  # class rows keep their keys


def test_phrase_prior_in_pair_counts_is_checked(tmp_path):
    """``<d>.phrases.prior`` (where the dataset's draws start in the one stream): saved, read back, forged values
    refused one line each, and a file written before it reads as the stream's start."""
    from xbench.score.kernels.counts import phrase_arrays, phrase_arrays_problems, phrase_from_arrays

    gt, sub, *_ = make_phrase_stores(tmp_path, seed=3)
    pc = score_submission(sub, gt, bootstrap=0).phrase_counts["ms_cxr"]
    z = phrase_arrays("ms_cxr.phrases", pc)
    assert phrase_arrays_problems(z, "ms_cxr.phrases", "f.npz") == [] and tuple(z["ms_cxr.phrases.prior"]) == ()
    assert phrase_from_arrays({**z, "ms_cxr.phrases.prior": np.array([4, 9])}, "ms_cxr.phrases", "ms_cxr").prior == (4, 9)
    for forged in (np.array([-2]), np.array([[1]]), np.array([0.5]), np.array([2**40])):
        problems = phrase_arrays_problems({**z, "ms_cxr.phrases.prior": forged}, "ms_cxr.phrases", "f.npz")
        assert problems == ["f.npz: ms_cxr.phrases.prior must list at most 10,000 case counts, each 0 to 2^31 - 1"]
    older = {k: v for k, v in z.items() if not k.endswith(".prior")}
    assert phrase_arrays_problems(older, "ms_cxr.phrases", "f.npz") == []
    assert phrase_from_arrays(older, "ms_cxr.phrases", "ms_cxr").prior == ()
