"""The gaze section (score/sections/gaze.py) end to end: every row, mean, interval, the readers' leave-one-out
ceiling and the region shares against plain-loop brute forces computed from the raw arrays."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from gaze_stores import add_gaze  # noqa: E402
from score_stores import make_gt, make_submission, run_score_cli  # noqa: E402
from test_gaze_measures import (bf_auc_judd, bf_auc_shuffled, bf_cc, bf_cells, bf_kl, bf_nss,  # noqa: E402
                                bf_sim)

from xbench.score.sections import gaze as GS  # noqa: E402
from xbench.score.kernels.maps import resize_map  # noqa: E402
from xbench.score.scoring import score_submission  # noqa: E402

MEASURES = ("nss", "cc", "sim", "kl", "auc_judd", "auc_shuffled")
CLASSES = ["A", "B", "C"]
GRID = (12, 16)
N = 7
B = 40


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("gaze")
    gt = make_gt(d / "gt.zarr", datasets={"phantom": dict(n=N, classes=CLASSES, grid=GRID)})
    gaze = add_gaze(d / "gt.zarr", "phantom", n_cases=N, n_classes=3, grid=GRID)
    sub = make_submission(d / "sub.zarr", gt, unsupported={"phantom": ("C",)})
    other = make_submission(d / "other.zarr", gt, seed=5, unsupported={"phantom": ("C",)})
    make_gt(d / "plain.zarr", datasets={"phantom": dict(n=N, classes=CLASSES, grid=GRID)})
    return d, gt["phantom"], gaze, sub["phantom"], other["phantom"]


# ------------------------------------------------------------------------------ the brute force
def bf_minmax(m):
    flat = [v for row in m.tolist() for v in row]
    lo, hi = min(flat), max(flat)
    return np.zeros_like(m) if hi == lo else (m - lo) / (hi - lo)


def bf_rows(gt, gaze, sub):
    """Every row's values from the raw arrays, with loops: (finding rows, image rows, ceiling rows, regions)."""
    orig = (512, 512)
    cells = []
    for r in range(len(gaze.case)):
        f = gaze.fixations[gaze.offset[r]:gaze.offset[r + 1]]
        cells.append(bf_cells([(float(x), float(y)) for x, y, _ in f], orig, GRID))
    supported = [c for c in CLASSES if c not in sub.unsupported]
    model = {}
    for c in range(N):
        row = sub.case_ids.index(gt.case_ids[c])
        model[c] = {k: bf_minmax(resize_map(sub.saliency[row, sub.classes.index(k)], GRID)) for k in supported}

    def measures(m, r):
        g = gaze.gaze_map[r].astype(np.float64)
        if not cells[r]:
            return dict.fromkeys(MEASURES)
        neg = [cell for o in range(len(gaze.case)) if gaze.case[o] != gaze.case[r] for cell in cells[o]]
        return {"nss": bf_nss(m, cells[r]), "cc": bf_cc(m, g), "sim": bf_sim(m, g), "kl": bf_kl(m, g),
                "auc_judd": bf_auc_judd(m, cells[r]), "auc_shuffled": bf_auc_shuffled(m, cells[r], neg)}

    finding, image, ceiling, regions = [], [], [], []
    for r in range(len(gaze.case)):
        c = int(gaze.case[r])
        present = [k for j, k in enumerate(CLASSES) if gaze.labels[r, j] == 1 and k in supported]
        for k in present:
            finding.append((c, k, measures(model[c][k], r)))
        chosen = present or supported
        img = sum(model[c][k] for k in chosen) / len(chosen)
        image.append((c, r, measures(img, r)))
    for c, r, mine in image:
        others = [o for o in range(len(gaze.case)) if gaze.case[o] == c and gaze.reader[o] != gaze.reader[r]]
        if others:
            mean = sum(gaze.gaze_map[o].astype(np.float64) for o in others) / len(others)
            ceiling.append((c, measures(bf_minmax(mean), r), mine))
    for q, (r, j) in enumerate(gaze.region_index.tolist()):
        k = CLASSES[j]
        if k not in supported:
            continue
        g, m, mask = gaze.gaze_map[r].astype(np.float64), model[int(gaze.case[r])][k], gaze.region_mask[q]
        share = lambda a: sum(a[y, x] for y, x in zip(*np.nonzero(mask))) / a.sum() if a.sum() > 0 else None  # noqa: E731
        regions.append((int(gaze.case[r]), k, share(g), share(m)))
    return finding, image, ceiling, regions


def bf_mean(vals):
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def close(got, want, tol=1e-9):
    if want is None:
        return got is None
    return got is not None and math.isclose(got, want, rel_tol=tol, abs_tol=1e-12)


# ------------------------------------------------------------------------------ tests
def test_section_equals_brute_force(stores):
    d, gt, gaze, sub, _ = stores
    metrics = score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=B, seed=3).metrics
    assert metrics["xbench"]["schema_minor"] >= GS.GAZE_METRICS_MINOR
    e = metrics["gaze"]["datasets"]["phantom"]
    finding, image, ceiling, regions = bf_rows(gt, gaze, sub)
    assert e["n_finding_rows"] == len(finding) and e["n_image_rows"] == len(image) == len(gaze.case)
    assert "C" not in e["classes"]  # unsupported: no rows
    class_means = {}
    for k in sorted({k for _, k, _ in finding}):
        for m in MEASURES:
            want = bf_mean([v[m] for _, kk, v in finding if kk == k])
            class_means.setdefault(m, []).append(want)
            assert close(e["classes"][k][m], want), (k, m)
        assert e["classes"][k]["n_rows"] == sum(1 for _, kk, _ in finding if kk == k)
    assert all(e["images"][m] is not None and e["findings"][m] is not None for m in MEASURES)
    for m in MEASURES:
        assert close(e["findings"][m], bf_mean(class_means[m])), m
        assert close(e["images"][m], bf_mean([v[m] for _, _, v in image])), m
        assert close(metrics["gaze"]["overall"]["images"][m], e["images"][m])
        assert close(metrics["gaze"]["overall"][m], e["findings"][m])
    # the readers' ceiling: leave-one-out, each reading against the others' mean map
    assert e["ceiling"]["n_readings"] == len(ceiling) == 5  # case 0: three readers, case 1: two
    for m in MEASURES:
        h, mo = bf_mean([v[m] for _, v, _ in ceiling]), bf_mean([v[m] for _, _, v in ceiling])
        assert close(e["ceiling"]["human"][m], h) and close(e["ceiling"]["model"][m], mo), m
        want = (h / mo if m == "kl" else mo / h) * 100 if h and mo else None
        assert close(e["ceiling"]["percent_of_human"][m], want), m
    # the share of gaze and of the model's map inside the readers' own regions
    for k in sorted({k for _, k, _, _ in regions}):
        sel = [(g, mo) for _, kk, g, mo in regions if kk == k]
        assert close(e["regions"][k]["gaze_share"], bf_mean([g for g, _ in sel]))
        assert close(e["regions"][k]["model_energy"], bf_mean([mo for _, mo in sel]))
        assert e["regions"][k]["n_rows"] == len(sel)


def test_intervals_equal_a_brute_force_bootstrap(stores):
    d, gt, gaze, sub, _ = stores
    from xbench.score.resampling.engine import resample_weights

    e = score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=B, seed=3).metrics["gaze"]["datasets"]["phantom"]
    _, image, ceiling, _ = bf_rows(gt, gaze, sub)
    w = np.concatenate(list(resample_weights(N, B, np.random.default_rng(3))))
    for m in MEASURES:
        reps = []
        for b in range(B):
            num = sum(w[b, c] * v[m] for c, _, v in image if v[m] is not None)
            den = sum(w[b, c] for c, _, v in image if v[m] is not None)
            reps.append(num / den if den else np.nan)
        reps = np.array(reps)
        want = np.percentile(reps[~np.isnan(reps)], [2.5, 97.5])
        assert np.allclose(e["images"]["ci95"][m], want, rtol=1e-9), m
        reps = []
        for b in range(B):
            num = sum(w[b, c] * h[m] for c, h, _ in ceiling if h[m] is not None)
            den = sum(w[b, c] for c, h, _ in ceiling if h[m] is not None)
            reps.append(num / den if den else np.nan)
        reps = np.array(reps)
        want = np.percentile(reps[~np.isnan(reps)], [2.5, 97.5])
        assert np.allclose(e["ceiling"]["human"]["ci95"][m], want, rtol=1e-9), m


def test_without_gaze_there_is_no_section(stores):
    d = stores[0]
    r = score_submission(d / "sub.zarr", d / "plain.zarr", bootstrap=5)
    assert "gaze" not in r.metrics and not r.scope_counts.get("gaze")


def test_cli_writes_tables_and_counts_and_compare_pairs_them(stores, capsys, tmp_path):
    d = stores[0]
    printed = {}
    for name in ("sub", "other"):
        code, printed[name], err = run_score_cli([d / f"{name}.zarr", "--gt", d / "gt.zarr", "--out", tmp_path / name,
                                                  "--bootstrap", "20"], capsys)
        assert code == 0, err
    csv = (tmp_path / "sub" / "table_gaze.csv").read_text().splitlines()
    assert csv[0].startswith("model,dataset,rows,scope,n,nss,cc,sim,kl,auc_judd,auc_shuffled")
    assert any(",ceiling,% of human," in line for line in csv) and any(",regions,A," in line for line in csv)
    md = (tmp_path / "sub" / "table_gaze.md").read_text().splitlines()
    assert "| NSS |" in md[2]
    # region rows' shares sit under their own headers, not under NSS and CC (issue 46 item 3)
    head = [c.strip() for c in md[2].strip("|").split("|")]
    assert head[-2:] == ["gaze share in region", "model energy in region"]
    region = [[c.strip() for c in ln.strip("|").split("|")] for ln in md if "| regions |" in ln]
    assert region and all(r[head.index("NSS")] == "" and r[head.index("CC")] == "" and r[-1] != "" for r in region)
    metrics = json.loads((tmp_path / "sub" / "metrics.json").read_text())
    # xbench-score's terminal: the gaze line with metrics.json's values and intervals, and the ceiling's %
    f = metrics["gaze"]["datasets"]["phantom"]["findings"]
    lo, hi = f["ci95"]["auc_shuffled"]
    assert f"sAUC {f['auc_shuffled']:.2f} [{lo:.2f}, {hi:.2f}]" in printed["sub"]
    pct = metrics["gaze"]["datasets"]["phantom"]["ceiling"]["percent_of_human"]["nss"]
    assert f"model at NSS {pct:.2f}%" in printed["sub"]
    # the ceiling line names its rows and the readers' own level beside the %
    ceiling = metrics["gaze"]["datasets"]["phantom"]["ceiling"]
    flat = " ".join(printed["sub"].split())  # the terminal wraps long lines
    line = flat[flat.index("gaze ceiling"):]
    line = line[:line.index("of the readers'") + 200]
    assert "image rows" in line and f"readers' own {ceiling['human']['nss']:.2f}" in line, line
    assert ("near chance" in line) == (abs(ceiling["human"]["auc_shuffled"] - 0.5) <= 0.05), line
    from xbench.score.sections.paired import paired_bootstrap
    from xbench.score.kernels.counts import load_pair_counts
    from xbench.score.sections.pair_counts import load_scope_counts

    sa, sb = (load_scope_counts(tmp_path / n / "pair_counts.npz") for n in ("sub", "other"))
    assert set(sa["gaze"]) == {"phantom"}
    ca, cb = (load_pair_counts(tmp_path / n / "pair_counts.npz") for n in ("sub", "other"))
    table = paired_bootstrap(ca, cb, bootstrap=20, seed=0, scopes_a=sa, scopes_b=sb)
    rows = table[table["dataset"] == "gaze/phantom"]
    other = json.loads((tmp_path / "other" / "metrics.json").read_text())["gaze"]["datasets"]["phantom"]
    mine = metrics["gaze"]["datasets"]["phantom"]
    for m in MEASURES:
        row = rows[(rows["class"] == "images") & (rows["metric"] == m)].iloc[0]
        assert close(row["a"], mine["images"][m]) and close(row["b"], other["images"][m])
        assert close(row["diff"], mine["images"][m] - other["images"][m])
    from click.testing import CliRunner

    from xbench.score.report.cli import compare, report

    res = CliRunner().invoke(compare, [str(tmp_path / "sub"), str(tmp_path / "other"), "--bootstrap", "20"])
    assert res.exit_code == 0, res.output
    assert "gaze/phantom" in res.output and "sAUC" in res.output and "NSS, CC, SIM, KL, AUC-Judd, sAUC as numbers" in res.output
    # the measures print as numbers, never x100: the NSS row's A and B are metrics.json's values to 2 decimals
    nss = next(line.split() for line in res.output.splitlines() if line.split()[:2] == ["findings", "NSS"])
    fnss = metrics["gaze"]["datasets"]["phantom"]["findings"]["nss"]
    assert nss[2] == f"{fnss:.2f}" and nss[3] == f"{other['findings']['nss']:.2f}"
    res = CliRunner().invoke(report, [str(tmp_path / "sub"), str(tmp_path / "other"), "--out", str(tmp_path / "rep"),
                                      "--bootstrap", "20", "--quiet"])
    assert res.exit_code == 0, res.output
    assert "## Gaze" in (tmp_path / "rep" / "leaderboard.md").read_text()
    page = (tmp_path / "rep" / "index.html").read_text()
    at = page.index("<h2>Gaze</h2>")  # the section's table on the page, each value with its interval
    ci = metrics["gaze"]["datasets"]["phantom"]["findings"]["ci95"]["nss"]
    assert f"{fnss:.2f}" in page[at:] and f"{ci[0]:.2f}–{ci[1]:.2f}" in page[at:]
    assert 'href="gaze.csv"' in page
    assert (tmp_path / "rep" / "gaze.csv").read_text().startswith("model,dataset,rows,scope,n,nss")
    same = paired_bootstrap(ca, ca, bootstrap=20, seed=0, scopes_a=sa, scopes_b=sa)
    same = same[same["dataset"] == "gaze/phantom"]
    assert len(same) and (same["diff"].dropna() == 0).all() and (same["diff_lo"].dropna() == 0).all()


def test_counts_file_round_trip_and_problems(stores):
    d, *_ = stores
    r = score_submission(d / "sub.zarr", d / "gt.zarr", bootstrap=0)
    gc = r.scope_counts["gaze"]["phantom"]
    z = GS.save_counts("phantom.gaze", gc)
    assert GS.counts_problems(z, "phantom.gaze", "f.npz") == []
    back = GS.load_counts(z, "phantom.gaze", "phantom")
    assert GS.points(back) == GS.points(gc)
    bad = dict(z)
    bad["phantom.gaze.f_case"] = z["phantom.gaze.f_case"] + 100
    del bad["phantom.gaze.q_model"]
    problems = GS.counts_problems(bad, "phantom.gaze", "f.npz")
    assert any("q_model missing" in p for p in problems) and len(problems) >= 1
    assert tuple(z["phantom.gaze.prior"]) == gc.prior == ()  # the first (only) dataset: the stream's start
    for forged in (np.array([-1]), np.array([[3]]), np.array([2.5]), np.zeros(10_001, np.int64), np.array([2**31])):
        problems = GS.counts_problems({**z, "phantom.gaze.prior": forged}, "phantom.gaze", "f.npz")
        assert problems == ["f.npz: phantom.gaze.prior must list at most 10,000 case counts, each 0 to 2^31 - 1"]
    older = {k: v for k, v in z.items() if not k.endswith(".prior")}  # written before the prior was kept
    assert GS.counts_problems(older, "phantom.gaze", "f.npz") == []
    assert GS.load_counts(older, "phantom.gaze", "phantom").prior == ()


def _break_offset(g):
    off = np.asarray(g["gaze_offset"][...])
    off[-1] += 3
    g["gaze_offset"][...] = off


def _nan_map(g):
    m = np.asarray(g["gaze_map"][...])
    m[2, 0, 0] = np.nan
    g["gaze_map"][...] = m


def _bad_duration(g):
    f = np.asarray(g["fixations"][...])
    f[4, 2] = -1.0
    g["fixations"][...] = f


def _bad_case(g):
    c = np.asarray(g["gaze_case"][...])
    c[1] = 99
    g["gaze_case"][...] = c


@pytest.mark.parametrize("breaker,word", [(_break_offset, "gaze_offset"), (_nan_map, "gaze_map"),
                                          (_bad_duration, "fixations"), (_bad_case, "gaze_case")])
def test_hostile_gaze_arrays_are_refused(stores, capsys, tmp_path, breaker, word):
    import shutil

    import zarr

    d = stores[0]
    bad = tmp_path / "bad.zarr"
    shutil.copytree(d / "gt.zarr", bad)
    breaker(zarr.open_group(str(bad / "phantom"), mode="r+"))
    code, out, err = run_score_cli([d / "sub.zarr", "--gt", bad, "--out", tmp_path / "o", "--bootstrap", "0"], capsys)
    assert code == 2 and word in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) <= 3
    assert not (tmp_path / "o" / "metrics.json").exists()


def test_chunk_rows_read_each_block_once_and_keep_few(tmp_path):
    """The gaze maps are read a stored chunk at a time (score/sections/gaze.py ChunkRows): every row equals the
    array's, rows visited in two interleaved streams (two readers' readings, case by case) decode each chunk
    once, and no more than the bound's blocks are kept."""
    import zarr

    rng = np.random.default_rng(3)
    data = rng.random((40, 6, 5)).astype(np.float32)
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=data.shape, chunks=(4, 6, 5), dtype="float32")
    z[...] = data

    class Counting:  # the array, counting the block reads
        def __init__(self, arr):
            self.arr, self.reads, self.chunks, self.shape, self.dtype = arr, 0, arr.chunks, arr.shape, arr.dtype

        def __getitem__(self, key):
            self.reads += 1
            return self.arr[key]

    arr = Counting(z)
    rows = GS.ChunkRows(arr, max_bytes=1, min_blocks=2)  # at most two blocks kept
    order = [i for k in range(20) for i in (k, 20 + k)]  # reader 1's readings 0..19, reader 2's 20..39
    for i in order:
        np.testing.assert_array_equal(rows[i], data[i])
    assert arr.reads == 10 and len(rows.blocks) == 2  # 10 chunks, each decoded once
    for i in (0, 39, 0, 39):  # far apart: re-read only when evicted
        np.testing.assert_array_equal(rows[i], data[i])
    assert arr.reads == 11 and len(rows.blocks) == 2


def test_rows_are_the_same_for_any_number_of_workers(stores):
    """The rows are computed on worker threads and gathered in case order: one worker, three, and a custom
    ``maps`` (read on the calling thread) give the same arrays, exactly."""
    from xbench.schemas import align, read_ground_truth, read_submission

    d = stores[0]
    sub, gt = read_submission(d / "sub.zarr"), read_ground_truth(d / "gt.zarr")
    sd, gd = sub.datasets["phantom"], gt.datasets["phantom"]
    rows, cols = align(sd, gd, allow_missing=True)
    got = [GS.gaze_counts(sd, gd, GS.read_gaze(gt, "phantom"), case_rows=rows, class_cols=cols, workers=w,
                          **({"maps": lambda *a: GS.model_maps(*a)} if custom else {}))
           for w, custom in ((1, False), (3, False), (2, True))]
    for other in got[1:]:
        for field in ("f_case", "f_class", "f_values", "i_case", "i_values", "c_case", "c_human", "c_model",
                      "q_case", "q_class", "q_gaze", "q_model"):
            np.testing.assert_array_equal(getattr(other, field), getattr(got[0], field), err_msg=field)
    assert got[0].f_values.shape[0] > 0 and got[0].c_human.shape[0] > 0 and got[0].q_gaze.shape[0] > 0


def test_a_second_dataset_draws_its_own_resamples_in_the_one_stream(tmp_path):
    """docs/contract.md "Resampling": one default_rng(seed); the datasets in sorted order each take B resamples
    of integers(0, n, n); "phantom" comes after "chestx_det10" (5 cases), so its gaze rows are resampled on the draws that
    follow alpha's, the same resamples as its class intervals (main started a new default_rng(seed) per dataset)."""
    gt = make_gt(tmp_path / "gt.zarr", datasets={"chestx_det10": dict(n=5, classes=CLASSES, grid=GRID),
                                                 "phantom": dict(n=N, classes=CLASSES, grid=GRID)})
    gaze = add_gaze(tmp_path / "gt.zarr", "phantom", n_cases=N, n_classes=3, grid=GRID)
    sub = make_submission(tmp_path / "sub.zarr", gt, unsupported={"phantom": ("C",)})
    e = score_submission(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=B, seed=3).metrics["gaze"]
    e = e["datasets"]["phantom"]
    rng = np.random.default_rng(3)
    for _ in range(B):
        rng.integers(0, 5, 5)  # chestx_det10's resamples
    w = np.array([np.bincount(rng.integers(0, N, N), minlength=N) for _ in range(B)], np.float64)
    _, image, _, _ = bf_rows(gt["phantom"], gaze, sub["phantom"])
    for m in MEASURES:
        reps = []
        for b in range(B):
            num = sum(w[b, c] * v[m] for c, _, v in image if v[m] is not None)
            den = sum(w[b, c] for c, _, v in image if v[m] is not None)
            reps.append(num / den if den else np.nan)
        reps = np.array(reps)
        want = np.percentile(reps[~np.isnan(reps)], [2.5, 97.5])
        assert np.allclose(e["images"]["ci95"][m], want, rtol=1e-9), m


@pytest.mark.parametrize("breaker", [_break_offset, _nan_map, _bad_duration, _bad_case])
def test_the_scorer_reads_gaze_through_the_contracts_validator(stores, tmp_path, breaker):
    """Issue 47 item 4: read_gaze checks the arrays with schemas.gaze.validate alone, so a store the scorer is
    handed without validation (validate=False) is refused with exactly the validator's lines."""
    import shutil

    import zarr

    from xbench.schemas import InvalidStoreError, read_ground_truth, validate_ground_truth

    d = stores[0]
    bad = tmp_path / "bad.zarr"
    shutil.copytree(d / "gt.zarr", bad)
    breaker(zarr.open_group(str(bad / "phantom"), mode="r+"))
    with pytest.raises(InvalidStoreError) as exc:
        GS.read_gaze(read_ground_truth(bad), "phantom", f"{bad}/phantom")
    assert [str(p) for p in exc.value.problems] == [str(p) for p in validate_ground_truth(bad)]
    assert GS.read_gaze(read_ground_truth(d / "plain.zarr"), "phantom") is None


def test_score_declares_no_gaze_array_of_its_own():
    """The gaze arrays' names and checks live in schemas/gaze.py only."""
    from xbench.schemas import gaze as GZ

    root = Path(GS.__file__).resolve().parents[1]
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert '("gaze_case", "gaze_reader"' not in text and "GAZE_ARRAYS" not in text, path
    assert set(GZ.ARRAYS) >= {"gaze_case", "gaze_map", "fixations"}
