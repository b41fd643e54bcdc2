"""Faithfulness (contract § Faithfulness): the perturbation rules against brute force, the whole two-round flow
against a "model" whose score is a known function of the pixels (closed-form curves), ROAD against a dense solve
(and pytorch-grad-cam's imputer where it is importable), and the hostile inputs of the new surfaces."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from xbench.schemas import faithfulness as F
from xbench.schemas.errors import InputError
from xbench.schemas.images import ImagesWriter, read_images
from xbench.schemas.perturb import Round2Options, make_round2
from xbench.schemas.submission import DatasetSpec, SubmissionWriter, read_submission, validate_submission

S, G = 32, 8          # images 32 x 32, cells of 4 x 4 pixels
CLASSES = ["A", "B"]
REGION = {"A": (slice(8, 16), slice(4, 20)), "B": (slice(20, 32), slice(0, 12))}   # pixel boxes, whole cells


# ------------------------------------------------------------------------------------------ rules, brute force
@pytest.mark.parametrize("shape", [(7, 5), (3, 3), (8, 8), (16, 16), (24, 9), (9, 24), (1, 1), (40, 40)])
def test_cells_resize_matches_the_scorers(shape):
    from xbench.score.kernels.maps import resize_map

    rng = np.random.default_rng(sum(shape))
    raw = rng.normal(size=shape).astype(np.float32)
    np.testing.assert_allclose(F.resize_to_cells(raw, 8), resize_map(raw, (8, 8)), rtol=0, atol=1e-12)


def test_order_is_descending_with_row_major_ties():
    raw = np.array([[0.0, 2.0, 1.0], [2.0, 0.0, 1.0], [1.0, 2.0, 0.0]])
    assert F.map_order(raw, 3).tolist() == [1, 3, 7, 2, 5, 6, 0, 4, 8]
    assert F.map_order(np.zeros((4, 4)), 4).tolist() == list(range(16))  # a constant map: row-major


def _contract_cells(S, G):
    """The contract's sentence, word for word: "Cell (i, j) covers the pixels of rows floor(i*S/G) ...
    floor((i+1)*S/G) - 1 and the same columns". Each cell paints its own rows and columns; a pixel painted
    twice or never fails here."""
    cells = np.full((S, S), -1, dtype=np.int64)
    for i in range(G):
        for j in range(G):
            for y in range(i * S // G, (i + 1) * S // G):          # rows floor(i*S/G) .. floor((i+1)*S/G) - 1
                for x in range(j * S // G, (j + 1) * S // G):
                    assert cells[y, x] == -1, "a pixel in two cells"
                    cells[y, x] = i * G + j
    assert (cells >= 0).all(), "a pixel in no cell"
    return cells


@pytest.mark.parametrize("S, G", [(40, 6), (30, 7), (32, 8), (10, 3), (5, 7), (1, 1), (17, 16), (64, 1)])
def test_cell_partition_is_the_contracts(S, G):
    """The partition when G does not divide S (S = 40, G = 6: the old rule floor(y*G/S) put row 6 in cell 0,
    the contract in cell 1), when it does, and when there are more cells than pixels (empty cells)."""
    assert np.array_equal(F.cell_index(S, G), _contract_cells(S, G))


def test_steps_cells_and_masks_by_brute_force():
    assert F.step_cells(64, 10).tolist() == [(k * 64) // 10 for k in range(11)]
    cells = F.cell_index(30, 7)   # 7 does not divide 30: cells of 4 or 5 pixels
    assert np.array_equal(cells, _contract_cells(30, 7))
    order = np.random.default_rng(0).permutation(49)
    for n in (0, 1, 20, 49):
        mask = F.changed_mask(order, n, cells)
        taken = set(order[:n].tolist())
        assert all(mask[y, x] == (cells[y, x] in taken) for y in range(30) for x in range(30))


def test_deletion_and_insertion_images_by_brute_force():
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (S, S), dtype=np.uint8)
    fill = int(np.rint(image.astype(np.float64).mean()))
    mask = rng.random((S, S)) < 0.3
    d = F.perturbed_image(image, "deletion", mask)
    i = F.perturbed_image(image, "insertion", mask, substrate="grey")
    for y in range(S):
        for x in range(S):
            assert d[y, x] == (fill if mask[y, x] else image[y, x])
            assert i[y, x] == (image[y, x] if mask[y, x] else fill)


def _dense_road(image, missing):
    """ROAD's equations written one pixel at a time, solved densely: each missing pixel is the weighted mean of
    its neighbours inside the image (1/6 edge, 1/12 diagonal)."""
    H, W = image.shape
    unknown = [(y, x) for y in range(H) for x in range(W) if missing[y, x]]
    var = {p: i for i, p in enumerate(unknown)}
    A = np.zeros((len(unknown), len(unknown)))
    b = np.zeros(len(unknown))
    for i, (y, x) in enumerate(unknown):
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                if (dy, dx) == (0, 0) or not (0 <= y + dy < H and 0 <= x + dx < W):
                    continue
                w = 1 / 6 if dy == 0 or dx == 0 else 1 / 12
                A[i, i] += w
                if missing[y + dy, x + dx]:
                    A[i, var[(y + dy, x + dx)]] -= w
                else:
                    b[i] += w * image[y + dy, x + dx]
    out = image.astype(np.float64)
    for (y, x), v in zip(unknown, np.linalg.solve(A, b)):
        out[y, x] = v
    return out


def test_road_fill_equals_a_dense_solve():
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (12, 12), dtype=np.uint8)
    missing = rng.random((12, 12)) < 0.6
    missing[0, :] = True  # a border run, so that the out-of-image weights matter
    np.testing.assert_allclose(F.road_fill(image, missing), _dense_road(image, missing), rtol=0, atol=1e-9)
    noisy = F.road_impute(image, missing, noise=0)
    assert np.array_equal(noisy, np.clip(np.rint(_dense_road(image, missing)), 0, 255).astype(np.uint8))
    assert np.array_equal(noisy[~missing], image[~missing])
    with pytest.raises(ValueError):
        F.road_fill(image, np.ones_like(missing))


def test_road_noise_is_seeded_and_only_on_imputed_pixels():
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, (16, 16), dtype=np.uint8)
    missing = rng.random((16, 16)) < 0.5
    a = F.road_impute(image, missing, noise=20, rng=np.random.default_rng(5))
    b = F.road_impute(image, missing, noise=20, rng=np.random.default_rng(5))
    assert np.array_equal(a, b) and np.array_equal(a[~missing], image[~missing])
    assert not np.array_equal(a, F.road_impute(image, missing, noise=0))


def test_road_against_pytorch_grad_cam():
    """pytorch-grad-cam's NoisyLinearImputer (a copy of the authors' imputations.py), noise 0: the same image."""
    torch = pytest.importorskip("torch")
    road = pytest.importorskip("pytorch_grad_cam.metrics.road")
    rng = np.random.default_rng(4)
    image = rng.integers(0, 256, (20, 20), dtype=np.uint8)
    cam = rng.random((20, 20)).astype(np.float32)
    keep = cam < np.percentile(cam, 70)                  # their ROADMostRelevantFirst(70): the top 30 % removed
    theirs = road.NoisyLinearImputer(noise=0.0)(torch.tensor(image[None], dtype=torch.float32),
                                                torch.tensor(keep.astype(np.float32)))[0].numpy()
    order = F.map_order(cam, 20)                          # one pixel per cell
    mine = F.road_fill(image, F.changed_mask(order, int((~keep).sum()), F.cell_index(20, 20)))
    np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-3)  # theirs is float32


def test_area_is_the_trapezoid_over_the_span():
    x = np.array([0.0, 0.25, 0.5, 0.75])
    y = np.array([0.9, 0.5, 0.4, 0.1])
    brute = sum((x[k] - x[k - 1]) * (y[k] + y[k - 1]) / 2 for k in range(1, 4)) / 0.75
    assert F.curve_area(x, y) == pytest.approx(brute, abs=1e-15)
    assert F.probability(np.array([0.0, 1000.0, -1000.0]), "logit").tolist() == [0.5, 1.0, 0.0]


# ------------------------------------------------------------------------------------------ the whole flow
def _region_model(image: np.ndarray) -> np.ndarray:
    """The "model": per class, the mean grey inside its fixed region / 255 (a probability)."""
    return np.array([image[REGION[c]].astype(np.float64).mean() / 255.0 for c in CLASSES])


def _images(path, n=3, seed=0):
    rng = np.random.default_rng(seed)
    imgs = rng.integers(0, 256, (n, S, S), dtype=np.uint8)
    for i in range(n):  # constant inside each region, so the closed form is simple
        for j, c in enumerate(CLASSES):
            imgs[i][REGION[c]] = 40 + 60 * j + 30 * i
    w = ImagesWriter(path, "phantom", case_ids=[f"case{i}" for i in range(n)], classes=CLASSES, image_size=S,
                     cases_per_block=2)
    for b in w.blocks_todo():
        s, e = w.block_rows(b)
        w.write_block(b, imgs[s:e], np.full((e - s, 2), 100))
    w.finish()
    return imgs


def _round1(path, n=3):
    """Maps: 1 on the class's region, 0 elsewhere (G x G), so the map order takes the region's cells first."""
    maps = np.zeros((n, 2, G, G), np.float32)
    for j, c in enumerate(CLASSES):
        ys, xs = REGION[c]
        maps[:, j, ys.start // 4: ys.stop // 4, xs.start // 4: xs.stop // 4] = 1
    w = SubmissionWriter.create(path, model="region", method="test", datasets={
        "phantom": DatasetSpec([f"case{i}" for i in range(n)], CLASSES, (G, G), "probability")}, cases_per_block=8)
    w.write_block("phantom", 0, np.full((n, 2), 0.5), maps)
    w.finish()


def _score_round2(images_path, out, *, drop=0, model=_region_model):
    """The team's side: the model over every round-2 image, a scores-only submission (``drop`` rows left out)."""
    ds = read_images(images_path).datasets["phantom"]
    ids = [str(x) for x in ds.case_id][drop:]
    scores = np.stack([model(np.asarray(ds.image[i])) for i in range(drop, len(ds.case_id))]).astype(np.float32)
    w = SubmissionWriter.create(out, model="region", method="test", scores_only=True, datasets={
        "phantom": DatasetSpec(ids, CLASSES, (1, 1), "probability")}, cases_per_block=64)
    for b in w.blocks_todo("phantom"):
        s, e = w.block_rows("phantom", b)
        w.write_block("phantom", b, scores[s:e], None)
    w.finish()


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    d = tmp_path_factory.mktemp("faith")
    imgs = _images(d / "images.zarr")
    _round1(d / "sub.zarr")
    opts = Round2Options(curves=("deletion", "insertion", "road"), steps=4, grid=G, seed=3, insertion_substrate="grey")
    summary = make_round2(read_submission(d / "sub.zarr"), read_images(d / "images.zarr"), d / "round2.zarr",
                          d / "round2.key.npz", opts)
    _score_round2(d / "round2.zarr", d / "round2-sub.zarr")
    return d, imgs, summary


def test_round2_store_is_public_and_opaque(flow):
    d, _, summary = flow
    from xbench.schemas import validate_images

    assert validate_images(d / "round2.zarr") == []
    store = read_images(d / "round2.zarr")
    assert store.attrs["schema_minor"] == F.IMAGES_MINOR
    assert store.attrs["faithfulness"] == {"round": 2, "curves": ["deletion", "insertion", "road"], "steps": 4, "grid": G}
    ids = [str(x) for x in store.datasets["phantom"].case_id]
    assert all(i.startswith("r2-") and "case" not in i for i in ids) and len(set(ids)) == len(ids)
    # 3 cases x 2 shared images + 6 pairs x (deletion 2x3 + insertion 2x3 + road 3x3)
    assert summary["images"] == len(ids) == 3 * 2 + 6 * 21


def test_key_rows_point_at_the_images_they_name(flow):
    d, imgs, _ = flow
    key = F.read_key(d / "round2.key.npz")
    ds = read_images(d / "round2.zarr").datasets["phantom"]
    row = {str(c): i for i, c in enumerate(ds.case_id)}
    cells = F.cell_index(S, G)
    sub = read_submission(d / "sub.zarr").datasets["phantom"]
    for r in np.random.default_rng(0).choice(len(key), 40, replace=False):
        case, cls, curve, order, step = (key.case_id[r], key.class_name[r], key.curve[r], key.order[r], int(key.step[r]))
        if curve == "road":
            continue  # noise: checked below
        i = int(case[4:])
        raw = np.asarray(sub.saliency[i, CLASSES.index(cls)], np.float64)
        o = F.orders_for(curve, raw, G, 3, "phantom", case, cls)[order]
        mask = F.changed_mask(o, int(F.step_cells(G * G, 4)[step]), cells)
        expect = F.perturbed_image(imgs[i], curve, mask, substrate="grey")
        assert np.array_equal(np.asarray(ds.image[row[str(key.round2_id[r])]]), expect)


def _closed_form(img, cls, curve, steps=4):
    """Map order, region model: the region's cells go first (row-major), so after step k the first
    min(n_k, m) of its m cells are changed; inside the region the grey is c, the fill f."""
    ys, xs = REGION[cls]
    c = float(img[ys, xs][0, 0])
    f = float(np.rint(img.astype(np.float64).mean()))
    m = (ys.stop - ys.start) * (xs.stop - xs.start) // 16
    n = F.step_cells(G * G, steps)
    x = n / (G * G)
    share = np.minimum(n, m) / m  # changed share of the region
    y = ((1 - share) * c + share * f) / 255 if curve == "deletion" else ((1 - share) * f + share * c) / 255
    return np.trapezoid(y, x) if hasattr(np, "trapezoid") else np.trapz(y, x)


def test_flow_equals_the_closed_form(flow):
    from xbench.score.sections.faithfulness import faithfulness_section, load_round2

    d, imgs, _ = flow
    key, curves, info = load_round2(d / "round2-sub.zarr", d / "round2.key.npz")
    sec = faithfulness_section(key, curves, info, bootstrap=0)
    for cls in CLASSES:
        entry = sec["datasets"]["phantom"]["classes"][cls]
        assert entry["n_pairs"] == 3
        for curve in ("deletion", "insertion"):
            expect = np.mean([_closed_form(imgs[i], cls, curve) for i in range(3)])
            assert entry[f"{curve}_auc"] == pytest.approx(expect, abs=1e-6)  # float32 scores
    summ = sec["datasets"]["phantom"]["summary"]
    assert summ["deletion_gain"] == pytest.approx(summ["deletion_auc_random"] - summ["deletion_auc"], abs=1e-12)
    assert sec["overall"] == summ


def test_flow_equals_brute_force_for_every_order(flow):
    """Each curve of each pair recomputed from scratch: the images made again from the rules, the model applied."""
    from xbench.score.sections.faithfulness import faithfulness_section, load_round2

    d, imgs, _ = flow
    key, curves, info = load_round2(d / "round2-sub.zarr", d / "round2.key.npz")
    sec = faithfulness_section(key, curves, info, bootstrap=0)
    sub = read_submission(d / "sub.zarr").datasets["phantom"]
    cells = F.cell_index(S, G)
    for cls in CLASSES:
        j = CLASSES.index(cls)
        got = sec["datasets"]["phantom"]["classes"][cls]
        for curve in ("deletion", "insertion", "road"):
            steps = list(F.curve_steps(curve, 4))
            x = np.array([F.step_cells(G * G, 4)[k] / (G * G) for k in steps])
            areas = {}
            for order in F.ORDERS[curve]:
                per_case = []
                for i in range(3):
                    o = F.orders_for(curve, np.asarray(sub.saliency[i, j], np.float64), G, 3, "phantom", f"case{i}", cls)[order]
                    ys = []
                    for k in steps:
                        mask = F.changed_mask(o, int(F.step_cells(G * G, 4)[k]), cells)
                        rng = np.random.default_rng(F.seed_of(3, "phantom", f"case{i}", cls, curve, order, k))
                        ys.append(_region_model(F.perturbed_image(imgs[i], curve, mask, rng=rng, substrate="grey"))[j])
                    ys = np.array(ys, np.float32).astype(np.float64)
                    per_case.append(sum((x[k] - x[k - 1]) * (ys[k] + ys[k - 1]) / 2 for k in range(1, len(x))) / (x[-1] - x[0]))
                areas[order] = np.mean(per_case)
                assert sec["datasets"]["phantom"]["classes"][cls]["curves"][curve]["fractions"] == x.tolist()
            if curve == "road":
                assert got["road_morf_auc"] == pytest.approx(areas["map"], abs=1e-9)
                assert got["road_lerf_auc"] == pytest.approx(areas["reverse"], abs=1e-9)
                assert got["road_random_auc"] == pytest.approx(areas["random"], abs=1e-9)
            else:
                assert got[f"{curve}_auc"] == pytest.approx(areas["map"], abs=1e-9)
                assert got[f"{curve}_auc_random"] == pytest.approx(areas["random"], abs=1e-9)


def test_bootstrap_by_hand(flow):
    from xbench.score.sections.faithfulness import faithfulness_section, load_round2, pair_values

    d, _, _ = flow
    key, curves, info = load_round2(d / "round2-sub.zarr", d / "round2.key.npz")
    sec = faithfulness_section(key, curves, info, bootstrap=50, seed=9)
    dc = curves["phantom"]
    v = pair_values(key, dc)["deletion_auc"]
    rng = np.random.default_rng(9)
    reps = []
    for _ in range(50):
        mult = np.bincount(rng.integers(0, 3, 3), minlength=3)[dc.pair_case].astype(float)
        cls_means = [(mult * v)[[c == k for k in dc.pair_class]].sum() / mult[[c == k for k in dc.pair_class]].sum()
                     for c in sorted(set(dc.pair_class))]
        reps.append(np.mean(cls_means))
    assert sec["datasets"]["phantom"]["ci95"]["deletion_auc"] == pytest.approx(list(np.percentile(reps, [2.5, 97.5])))


# ------------------------------------------------------------------------------------------ commands, hostile input
def _xb(args):
    from xbench import cli

    return CliRunner().invoke(cli.main, [str(a) for a in args])


def _score(args, capsys):
    from score_stores import run_score_cli

    return run_score_cli(args, capsys)


@pytest.fixture(scope="module")
def gt_for_flow(flow):
    from xbench.schemas.ground_truth import write_ground_truth

    d = flow[0]
    labels = np.array([[1, 0], [1, 1], [0, 1]], np.int8)
    mask = np.zeros((4, 8, 8), bool)
    mask[:, 2:4, 1:5] = True
    write_ground_truth(d / "gt.zarr", "phantom", case_ids=["case0", "case1", "case2"], classes=CLASSES, labels=labels,
                       region_index=np.array([[0, 0], [1, 0], [1, 1], [2, 1]]), region_mask=mask,
                       orig_size=np.full((3, 2), 100), grid=(8, 8))
    return d / "gt.zarr"


def test_score_command_writes_the_section_and_tables(flow, gt_for_flow, tmp_path, capsys):
    d = flow[0]
    code, out, err = _score([d / "sub.zarr", "--gt", gt_for_flow, "--out", tmp_path / "res", "--bootstrap", "20",
                             "--faithfulness", d / "round2-sub.zarr", "--key", d / "round2.key.npz", "-q"], capsys)
    assert code == 0, err
    m = json.loads((tmp_path / "res/metrics.json").read_text())
    assert m["xbench"]["schema_minor"] == 7
    assert set(m["faithfulness"]["overall"]) == {"deletion_auc", "deletion_auc_random", "deletion_gain", "insertion_auc",
                                                 "insertion_auc_random", "insertion_gain", "road_morf_auc", "road_lerf_auc",
                                                 "road_random_auc", "road_morf_gain", "road_lerf_gain"}
    assert (tmp_path / "res/faithfulness.csv").read_text().count("\n") == 1 + 3
    rep = _xb(["report", tmp_path / "res", "--out", tmp_path / "rep", "-q"])
    assert rep.exit_code == 0, rep.output
    page = (tmp_path / "rep/index.html").read_text()
    assert "<h2>Faithfulness</h2>" in page and "Deletion gain" in page
    assert "Insertion starts from the image&#x27;s mean grey" in page and "define no area" in page  # the flow's substrate
    # without the options: no section, no minor 7, no table
    code, out, err = _score([d / "sub.zarr", "--gt", gt_for_flow, "--out", tmp_path / "plain", "--bootstrap", "0", "-q"], capsys)
    assert code == 0, err
    plain = json.loads((tmp_path / "plain/metrics.json").read_text())
    assert "faithfulness" not in plain and plain["xbench"].get("schema_minor", 0) < 7
    assert not (tmp_path / "plain/faithfulness.csv").exists()
    rep = _xb(["report", tmp_path / "plain", "--out", tmp_path / "rep-plain", "-q"])
    assert rep.exit_code == 0 and "Faithfulness" not in (tmp_path / "rep-plain/index.html").read_text()


def test_perturb_with_gt_takes_the_positive_pairs(flow, gt_for_flow, tmp_path):
    d = flow[0]
    res = _xb(["perturb", d / "sub.zarr", "--images", d / "images.zarr", "--gt", gt_for_flow, "--out", tmp_path / "r.zarr",
               "--key", tmp_path / "r.key.npz", "--curve", "deletion", "--steps", "2", "--grid", "8", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["datasets"]["phantom"]["pairs"] == 4
    key = F.read_key(tmp_path / "r.key.npz")
    assert sorted(set(zip(key.case_id.tolist(), key.class_name.tolist()))) == [
        ("case0", "A"), ("case1", "A"), ("case1", "B"), ("case2", "B")]


def _fails(res, *fragments):
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    for f in fragments:
        assert f in res.output, res.output


def test_hostile_round2_inputs(flow, gt_for_flow, tmp_path, capsys):
    d = flow[0]
    base = [d / "sub.zarr", "--gt", gt_for_flow, "--bootstrap", "0", "-q"]
    # missing steps: the team left images out
    _score_round2(d / "round2.zarr", tmp_path / "short.zarr", drop=5)
    code, _, err = _score([*base, "--out", tmp_path / "o1", "--faithfulness", tmp_path / "short.zarr", "--key",
                           d / "round2.key.npz"], capsys)
    assert code == 2 and "missing steps" in err and not (tmp_path / "o1").exists()
    # a key of another round 2
    other = tmp_path / "other"
    make_round2(read_submission(d / "sub.zarr"), read_images(d / "images.zarr"), other / "r.zarr", other / "r.key.npz",
                Round2Options(curves=("deletion",), steps=2, grid=G))
    code, _, err = _score([*base, "--out", tmp_path / "o2", "--faithfulness", d / "round2-sub.zarr", "--key",
                           other / "r.key.npz"], capsys)
    assert code == 2 and "the key does not know" in err and "have no score" in err
    # one option without the other; the round-2 submission as the main one
    code, _, err = _score([*base, "--out", tmp_path / "o3", "--faithfulness", d / "round2-sub.zarr"], capsys)
    assert code == 2 and "--faithfulness needs --key" in err
    code, _, err = _score([d / "round2-sub.zarr", "--gt", gt_for_flow, "--out", tmp_path / "o4", "-q"], capsys)
    assert code == 2 and "scores-only" in err
    # a key that is not one: not an npz, a missing column, an object (pickled) column, a row repeated
    (tmp_path / "bad.npz").write_text("{}")
    arrays = dict(np.load(d / "round2.key.npz"))
    np.savez(tmp_path / "nocol.npz", **{k: v for k, v in arrays.items() if k != "step"})
    np.savez(tmp_path / "pickle.npz", **{**arrays, "case_id": arrays["case_id"].astype(object)})
    np.savez(tmp_path / "twice.npz", **{k: np.concatenate([v, v[:1]]) if v.ndim else v for k, v in arrays.items()})
    hdr = json.loads(str(arrays["header"]))
    np.savez(tmp_path / "steps.npz", **{**arrays, "header": np.asarray(json.dumps({**hdr, "steps": 2}))})
    for name, fragment in [("bad.npz", "bad.npz"), ("nocol.npz", "step"), ("pickle.npz", "pickle"),
                           ("twice.npz", "twice"), ("steps.npz", "steps in 0..")]:
        code, _, err = _score([*base, "--out", tmp_path / f"o-{name}", "--faithfulness", d / "round2-sub.zarr", "--key",
                               tmp_path / name], capsys)
        assert code == 2 and fragment in err and "Traceback" not in err, (name, err)


def test_hostile_perturb_inputs(flow, tmp_path):
    d = flow[0]
    args = [d / "sub.zarr", "--images", d / "images.zarr", "--key", tmp_path / "a.key.npz"]
    _fails(_xb(["perturb", *args, "--out", tmp_path / "a.zarr", "--steps", "65", "--grid", "8"]), "--steps")
    _fails(_xb(["perturb", *args, "--out", tmp_path / "a.zarr", "--curve", "blur"]), "--curve")
    _fails(_xb(["perturb", *args, "--out", tmp_path / "a.zarr", "--curve", "road", "--steps", "1"]), "ROAD")
    _fails(_xb(["perturb", *args, "--out", tmp_path / "a.zarr", "--steps", "50", "--grid", "8", "--max-images", "100"]),
           "the limit is 100")
    _fails(_xb(["perturb", *args, "--out", d / "round2.zarr"]), "exists")
    _fails(_xb(["perturb", *args, "--out", tmp_path / "a.zarr.zip"]), "folder store")
    _fails(_xb(["perturb", *args, "--out", tmp_path / "a.zarr", "--road-noise", "nan", "--curve", "road"]), "--road-noise")
    _fails(_xb(["perturb", *args, "--out", tmp_path / "a.zarr", "--classes", "Nope"]), "Nope")
    _fails(_xb(["perturb", d / "round2-sub.zarr", "--images", d / "images.zarr", "--out", tmp_path / "a.zarr",
                "--key", tmp_path / "a.key.npz"]), "scores-only")
    _fails(_xb(["perturb", d / "images.zarr", "--images", d / "sub.zarr", "--out", tmp_path / "a.zarr",
                "--key", tmp_path / "a.key.npz"]))
    _fails(_xb(["perturb", *args, "--out", d / "images.zarr" / "inside.zarr"]))
    assert not (tmp_path / "a.zarr").exists() and not (tmp_path / "a.key.npz").exists()


def test_scores_only_submission_validates_alone_only(flow, gt_for_flow):
    d = flow[0]
    assert validate_submission(d / "round2-sub.zarr", scores_only=True) == []
    assert any("scores-only" in p.message for p in validate_submission(d / "round2-sub.zarr"))
    assert read_submission(d / "round2-sub.zarr").datasets["phantom"].saliency is None
    res = _xb(["validate", d / "round2-sub.zarr"])
    assert res.exit_code == 0, res.output
    _fails(_xb(["validate", d / "round2-sub.zarr", "--gt", gt_for_flow]), "scores-only")


def test_codabench_phase2_finds_the_teams_key(flow, gt_for_flow, tmp_path, capsys):
    """Phase 2 on a platform: the reference data holds each team's round-1 store and key; the uploaded round-2
    scores are matched to their key by id, and scores.json carries the faithfulness keys."""
    from xbench.package import codabench_main

    d = flow[0]
    ref = tmp_path / "input/ref"
    (ref / "faithfulness/team-a").mkdir(parents=True)
    (ref / "faithfulness/team-b").mkdir(parents=True)
    shutil.copytree(gt_for_flow, ref / "gt.zarr")
    shutil.copytree(d / "sub.zarr", ref / "faithfulness/team-a/sub.zarr")
    shutil.copy(d / "round2.key.npz", ref / "faithfulness/team-a/round2.key.npz")
    make_round2(read_submission(d / "sub.zarr"), read_images(d / "images.zarr"), tmp_path / "b/r.zarr",
                ref / "faithfulness/team-b/r.key.npz", Round2Options(curves=("deletion",), steps=2, grid=G))
    shutil.copytree(d / "sub.zarr", ref / "faithfulness/team-b/sub.zarr")
    shutil.copytree(d / "round2-sub.zarr", tmp_path / "input/res/round2-sub.zarr")
    assert codabench_main(str(tmp_path / "input"), str(tmp_path / "out")) == 0, capsys.readouterr().err
    scores = json.loads((tmp_path / "out/scores.json").read_text())
    assert "deletion_gain" in scores and "phantom_road_morf_gain_error" in scores and "pointing_game" in scores
    # an upload that answers no round 2 of this phase
    shutil.rmtree(tmp_path / "input/res")
    _score_round2(d / "round2.zarr", tmp_path / "input/res/short.zarr", drop=1)
    assert codabench_main(str(tmp_path / "input"), str(tmp_path / "out2")) == 2
    assert "match no round-2 store" in capsys.readouterr().err.splitlines()[-1]



def test_grand_challenge_phase2(flow, gt_for_flow, tmp_path, monkeypatch, capsys):
    from xbench.package import grand_challenge_main

    d = flow[0]
    (tmp_path / "faith/team").mkdir(parents=True)
    shutil.copytree(d / "sub.zarr", tmp_path / "faith/team/sub.zarr")
    shutil.copy(d / "round2.key.npz", tmp_path / "faith/team/round2.key.npz")
    shutil.copytree(d / "round2-sub.zarr", tmp_path / "input/round2-sub.zarr")
    monkeypatch.setenv("XBENCH_GT", str(gt_for_flow))
    monkeypatch.setenv("XBENCH_FAITHFULNESS", str(tmp_path / "faith"))
    monkeypatch.setenv("XBENCH_BOOTSTRAP", "10")
    assert grand_challenge_main(str(tmp_path / "input"), str(tmp_path / "out")) == 0, capsys.readouterr().err
    m = json.loads((tmp_path / "out/metrics.json").read_text())
    assert "faithfulness" in m and "phantom_deletion_gain_error" in m["aggregates"]


# ------------------------------------------------------------------------------------------ RISE's blurred substrate
def _rise_kernel_by_hand(klen=11, sigma=5.0, truncate=4.0):
    """RISE's gkern(11, 5) rebuilt from its definition, without scipy: a klen x klen delta smoothed by a Gaussian
    of sigma 5 whose taps reach round(truncate * sigma) = 20 pixels, each tap normalised to sum 1, the delta's
    border extended by half-sample reflection (scipy's "reflect": d c b a | a b c d | d c b a), applied on both
    axes. Returns the klen x klen kernel."""
    r = int(truncate * sigma + 0.5)
    taps = {j: np.exp(-0.5 * j * j / sigma ** 2) for j in range(-r, r + 1)}
    total = sum(taps.values())

    def fold(m):  # half-sample reflection into 0..klen-1, as often as needed
        while not 0 <= m < klen:
            m = -m - 1 if m < 0 else 2 * klen - m - 1
        return m

    k1 = [sum(w / total for j, w in taps.items() if fold(i + j) == klen // 2) for i in range(klen)]
    return np.array([[a * b for b in k1] for a in k1])


def _blur_by_hand(image, kernel, pad):
    """Each pixel: the sum over the 11 x 11 square around it of kernel * value, a pixel outside the image
    counting as ``pad``; rounded half to even (Python's round), clipped."""
    H, W = image.shape
    h = kernel.shape[0] // 2
    out = np.zeros((H, W), np.uint8)
    for y in range(H):
        for x in range(W):
            acc = 0.0
            for a in range(-h, h + 1):
                for b in range(-h, h + 1):
                    v = image[y + a, x + b] if 0 <= y + a < H and 0 <= x + b < W else pad
                    acc += kernel[a + h, b + h] * float(v)
            out[y, x] = min(255, max(0, round(acc)))
    return out


def test_rise_kernel_by_hand():
    k = _rise_kernel_by_hand()
    assert k.sum() == pytest.approx(1.0, abs=1e-12) and np.allclose(k, k.T) and k.argmax() == 5 * 11 + 5
    np.testing.assert_allclose(np.outer(F.rise_kernel_1d(), F.rise_kernel_1d()), k, rtol=0, atol=1e-15)


@pytest.mark.parametrize("size", [23, 7, 12])   # 7 < 11: every pixel sees the border
def test_blur_substrate_equals_a_brute_force_convolution(size):
    rng = np.random.default_rng(size)
    image = rng.integers(0, 256, (size, size), dtype=np.uint8)
    image[: size // 2, : size // 3] = 250                 # an edge, so the blur moves values a lot
    f = F.fill_value(image)
    expect = _blur_by_hand(image, _rise_kernel_by_hand(), f)
    got = F.substrate_image(image, "blur")
    # float64 sums in another order: a value within 1e-9 of a half may round the other way
    assert np.abs(got.astype(int) - expect.astype(int)).max() <= 1 and (got != expect).mean() < 0.01
    assert np.array_equal(F.substrate_image(image, "grey"), np.full_like(image, f))
    mask = rng.random((size, size)) < 0.4
    ins = F.perturbed_image(image, "insertion", mask)       # the default substrate is RISE's
    assert np.array_equal(ins[mask], image[mask]) and np.array_equal(ins[~mask], got[~mask])


def test_blur_substrate_equals_rises_conv2d():
    """RISE blurs the normalised input with torch's conv2d(x, gkern(11, 5), padding=5): zero padding, zero being
    the normalisation's mean; here the mean is the fill grey f, so conv2d on (image - f) plus f, the kernel made
    as gkern makes it (scipy's gaussian_filter of an 11 x 11 delta, sigma 5, cast to float32)."""
    torch = pytest.importorskip("torch")
    from scipy.ndimage import gaussian_filter

    delta = np.zeros((11, 11))
    delta[5, 5] = 1
    kern = torch.from_numpy(gaussian_filter(delta, 5).astype("float32"))[None, None]
    rng = np.random.default_rng(11)
    image = rng.integers(0, 256, (40, 40), dtype=np.uint8)
    f = F.fill_value(image)
    x = torch.from_numpy(image.astype(np.float32) - f)[None, None]
    theirs = torch.nn.functional.conv2d(x, kern, padding=5)[0, 0].double().numpy() + f
    mine = F.substrate_image(image, "blur").astype(np.float64)
    assert np.abs(mine - theirs).max() <= 0.5 + 1e-3        # ours is theirs rounded to grey levels (theirs float32)
    assert np.array_equal(mine, np.clip(np.rint(theirs), 0, 255)) or np.abs(mine - np.rint(theirs)).max() <= 1


def test_round2_with_rises_substrate(flow, tmp_path):
    """A round 2 made with the default substrate: insertion's step 0 is the blurred image (one shared image per
    case), every inner step the blurred image with the taken cells restored, brute force; deletion unchanged;
    the key and the metrics.json section say which substrate."""
    from xbench.score.sections.faithfulness import faithfulness_section, load_round2

    d, imgs, _ = flow
    summary = make_round2(read_submission(d / "sub.zarr"), read_images(d / "images.zarr"), tmp_path / "r.zarr",
                          tmp_path / "k.npz", Round2Options(curves=("deletion", "insertion"), steps=4, grid=G, seed=3))
    key = F.read_key(tmp_path / "k.npz")
    assert key.header["insertion_substrate"] == "blur" == key.substrate
    assert summary["images"] == 3 * 3 + 6 * (2 * 3 + 2 * 3)    # original, fill and blurred image per case
    ds = read_images(tmp_path / "r.zarr").datasets["phantom"]
    row = {str(c): i for i, c in enumerate(ds.case_id)}
    kern = _rise_kernel_by_hand()
    cells = _contract_cells(S, G)
    sub = read_submission(d / "sub.zarr").datasets["phantom"]
    base = {i: _blur_by_hand(imgs[i], kern, F.fill_value(imgs[i])) for i in range(3)}
    checked = 0
    for r in range(len(key)):
        if key.curve[r] != "insertion":
            continue
        i, cls, step = int(key.case_id[r][4:]), key.class_name[r], int(key.step[r])
        o = F.orders_for("insertion", np.asarray(sub.saliency[i, CLASSES.index(cls)], np.float64), G, 3, "phantom",
                         key.case_id[r], cls)[key.order[r]]
        taken = set(o[: (step * G * G) // 4].tolist())
        expect = np.where(np.isin(cells, list(taken)), imgs[i], base[i])
        got = np.asarray(ds.image[row[str(key.round2_id[r])]])
        assert np.abs(got.astype(int) - expect.astype(int)).max() <= 1 and (got != expect).mean() < 0.01
        checked += 1
    assert checked == 6 * 2 * 5
    _score_round2(tmp_path / "r.zarr", tmp_path / "r-sub.zarr")
    k2, curves, info = load_round2(tmp_path / "r-sub.zarr", tmp_path / "k.npz")
    assert faithfulness_section(k2, curves, info, bootstrap=0)["insertion_substrate"] == "blur"
    k3, curves3, info3 = load_round2(d / "round2-sub.zarr", d / "round2.key.npz")
    assert faithfulness_section(k3, curves3, info3, bootstrap=0)["insertion_substrate"] == "grey"


def test_a_key_without_the_substrate_is_grey(flow, tmp_path):
    """Keys written before the substrate was recorded were made with the fill grey."""
    d = flow[0]
    arrays = dict(np.load(d / "round2.key.npz"))
    hdr = json.loads(str(arrays["header"]))
    hdr.pop("insertion_substrate")
    np.savez(tmp_path / "old.npz", **{**arrays, "header": np.asarray(json.dumps(hdr))})
    assert F.read_key(tmp_path / "old.npz").substrate == "grey"
    np.savez(tmp_path / "bad.npz", **{**arrays, "header": np.asarray(json.dumps({**hdr, "insertion_substrate": "x"}))})
    with pytest.raises(InputError, match="insertion_substrate"):
        F.read_key(tmp_path / "bad.npz")


# ------------------------------------------------------------------------------------------ the key's place
def test_perturb_refuses_a_key_near_the_public_store(flow, tmp_path):
    """The key is private: --key is required, and may be neither the public store, nor inside it, nor inside an
    input; each refusal is exit 2, one line, nothing written."""
    d = flow[0]
    args = [d / "sub.zarr", "--images", d / "images.zarr", "--curve", "deletion", "--steps", "2"]
    out = tmp_path / "r2.zarr"
    res = _xb(["perturb", *args, "--out", out])
    _fails(res, "--key: required")
    for key, fragment in [(out / "r2.key.npz", "inside the public round-2 store"), (out, "is the public round-2 store"),
                          (d / "images.zarr" / "k.npz", "inside the images store"),
                          (d / "sub.zarr" / "k.npz", "inside the submission"), (out.parent, "holds the public")]:
        res = _xb(["perturb", *args, "--out", out, "--key", key])
        _fails(res, fragment)
        assert not out.exists() and not (d / "images.zarr" / "k.npz").exists() and not (d / "sub.zarr" / "k.npz").exists()
        assert res.output.splitlines()[-1] == "xbench perturb: nothing was written", res.output
    (tmp_path / "notes.npz").write_text("mine")  # issue 44, class 5: an existing file is never replaced
    res = _xb(["perturb", *args, "--out", out, "--key", tmp_path / "notes.npz"])
    _fails(res, "--key", "exists; a key is written only to a new path")
    assert (tmp_path / "notes.npz").read_text() == "mine" and not out.exists()
    res = _xb(["perturb", *args, "--out", out, "--key", tmp_path / "private" / "r2.key.npz", "-q"])
    assert res.exit_code == 0, res.output
    assert F.read_key(tmp_path / "private" / "r2.key.npz").header["store"] == "r2.zarr"


def test_a_key_that_cannot_be_written_leaves_no_public_store(flow, tmp_path):
    d = flow[0]
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OSError):
        make_round2(read_submission(d / "sub.zarr"), read_images(d / "images.zarr"), tmp_path / "r2.zarr",
                    tmp_path / "afile" / "k.npz", Round2Options(curves=("deletion",), steps=2, grid=G))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


# ------------------------------------------------------------------------------------------ hostile keys, round 2
def test_hostile_keys_and_round2_are_refused(flow, gt_for_flow, tmp_path, capsys):
    d = flow[0]
    base = [d / "sub.zarr", "--gt", gt_for_flow, "--bootstrap", "0", "-q"]
    arrays = dict(np.load(d / "round2.key.npz"))
    hdr = json.loads(str(arrays["header"]))
    np.savez(tmp_path / "empty.npz", **{k: (v[:0] if v.ndim else v) for k, v in arrays.items()})
    road = arrays["curve"] == "road"
    one = {k: (v[road & (arrays["step"] == 0)] if v.ndim else v) for k, v in arrays.items()}
    np.savez(tmp_path / "road1.npz", **{**one, "header": np.asarray(json.dumps({**hdr, "curves": ["road"], "steps": 1}))})
    for name, fragment in [("empty.npz", "no rows"), ("road1.npz", "ROAD needs 'steps' >= 2")]:
        code, out, err = _score([*base, "--out", tmp_path / f"o-{name}", "--faithfulness", d / "round2-sub.zarr", "--key",
                                 tmp_path / name], capsys)
        assert code == 2 and fragment in err and "Traceback" not in err and "Warning" not in err, (name, err)
        assert not (tmp_path / f"o-{name}").exists()
    # a round 2 holding a dataset the key does not know (every id of the key scored, plus another dataset)
    ds = read_images(d / "round2.zarr").datasets["phantom"]
    ids = [str(x) for x in ds.case_id]
    scores = np.stack([_region_model(np.asarray(ds.image[i])) for i in range(len(ids))]).astype(np.float32)
    w = SubmissionWriter.create(tmp_path / "extra.zarr", model="region", method="test", scores_only=True, datasets={
        "phantom": DatasetSpec(ids, CLASSES, (1, 1), "probability"),
        "chexlocalize": DatasetSpec(["r2-000000000000000000000000"], CLASSES, (1, 1), "probability")}, cases_per_block=64)
    for name, sc in (("phantom", scores), ("chexlocalize", scores[:1])):
        for b in w.blocks_todo(name):
            s, e = w.block_rows(name, b)
            w.write_block(name, b, sc[s:e], None)
    w.finish()
    code, out, err = _score([*base, "--out", tmp_path / "o-extra", "--faithfulness", tmp_path / "extra.zarr", "--key",
                             d / "round2.key.npz"], capsys)
    assert code == 2 and "1 dataset(s) the key does not know, e.g. 'chexlocalize'" in err and "Traceback" not in err, err
    assert not (tmp_path / "o-extra").exists()


@pytest.mark.parametrize("what", ["missing", "file"])
def test_grand_challenge_phase2_folder_must_be_a_folder(flow, gt_for_flow, tmp_path, monkeypatch, capsys, what):
    from xbench.package import grand_challenge_main

    d = flow[0]
    shutil.copytree(d / "round2-sub.zarr", tmp_path / "input/round2-sub.zarr")
    faith = tmp_path / "faith"
    if what == "file":
        faith.write_text("not a folder")
    monkeypatch.setenv("XBENCH_GT", str(gt_for_flow))
    monkeypatch.setenv("XBENCH_FAITHFULNESS", str(faith))
    assert grand_challenge_main(str(tmp_path / "input"), str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("XBENCH_FAITHFULNESS")
    assert ("is not a folder" if what == "file" else "does not exist") in err
    assert not (tmp_path / "out").exists()


def test_road_accuracy_is_the_share_still_predicted(flow, gt_for_flow, tmp_path, capsys):
    """ROAD's own measure (accuracy on the imputed images) where it is defined: a round 2 of the positive pairs
    (--gt). Brute force: every ROAD row of the key, the model on its image, the share of the class's pairs with
    probability >= 0.5 per order and step; the dataset's share pooled over its pairs. Without --gt: absent."""
    d = flow[0]

    def model(image):  # a probability that crosses 0.5 as the region's grey changes
        return np.array([min(1.0, image[REGION[c]].astype(np.float64).mean() / 150.0) for c in CLASSES])

    for gt, name in ((gt_for_flow, "with"), (None, "without")):
        r2 = tmp_path / f"{name}.zarr"
        args = ["perturb", d / "sub.zarr", "--images", d / "images.zarr", "--out", r2, "--key", tmp_path / f"{name}.npz",
                "--curve", "road", "--steps", "3", "--grid", "8", "-q", "--road-noise", "30"]
        assert _xb(args + (["--gt", gt] if gt else [])).exit_code == 0
        _score_round2(r2, tmp_path / f"{name}-sub.zarr", model=model)
        code, _, err = _score([d / "sub.zarr", "--gt", gt_for_flow, "--out", tmp_path / f"res-{name}", "--bootstrap", "0",
                               "-q", "--faithfulness", tmp_path / f"{name}-sub.zarr", "--key", tmp_path / f"{name}.npz"], capsys)
        assert code == 0, err
        sec = json.loads((tmp_path / f"res-{name}/metrics.json").read_text())["faithfulness"]
        if gt is None:
            assert "road_accuracy" not in json.dumps(sec)
            continue
        key = F.read_key(tmp_path / f"{name}.npz")
        ds = read_images(r2).datasets["phantom"]
        row = {str(c): i for i, c in enumerate(ds.case_id)}
        hits: dict = {}
        for r in range(len(key)):
            p = model(np.asarray(ds.image[row[str(key.round2_id[r])]]))[CLASSES.index(key.class_name[r])]
            p = float(np.float32(p))  # the round-2 submission stores float32
            hits.setdefault((key.class_name[r], key.order[r], int(key.step[r])), []).append(p >= 0.5)
        seen_both = set()
        for cls in CLASSES:
            got = sec["datasets"]["phantom"]["classes"][cls]["road_accuracy"]
            for order in ("map", "reverse", "random"):
                expect = [np.mean(hits[(cls, order, k)]) for k in range(3)]
                assert got[order] == pytest.approx(expect, abs=1e-12)
                seen_both |= {v for v in expect}
        pooled = sec["datasets"]["phantom"]["road_accuracy"]
        for order in ("map", "reverse", "random"):
            expect = [sum(sum(hits[(c, order, k)]) for c in CLASSES) / sum(len(hits[(c, order, k)]) for c in CLASSES)
                      for k in range(3)]
            assert pooled[order] == pytest.approx(expect, abs=1e-12)
        assert len(seen_both) > 1, "the model should cross 0.5 somewhere, else the test cannot fail"
