"""The two-round faithfulness flow end to end through the commands, on clip-tiny and a baseline (dog): the
documented commands (perturb, extract --scores-only, score --faithfulness) and xbench-extract --faithfulness give
the same metrics; the unperturbed step scores what round 1 scored; everything without the options is unchanged."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from xbench import cli  # noqa: E402
from xbench.schemas import faithfulness as F  # noqa: E402
from xbench.schemas import read_submission  # noqa: E402
from nested import assert_nested_close  # noqa: E402


def _xb(args):
    res = CliRunner().invoke(cli.main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("faithflow")
    _xb(["prepare", "phantom", "--out", d / "data", "--n-cases", "3", "--image-size", "64", "-q"])
    return d


@pytest.mark.slow
@pytest.mark.parametrize("model", ["dog", "clip-tiny"])
def test_two_rounds_by_hand_equal_one_go(data, tmp_path, model):
    images, gt = data / "data/images.zarr", data / "data/gt.zarr"
    common = ["--images", images, "--workers", "0", "-q"]
    # one go: round 1 into --out, round 2 into DIR
    _xb(["extract", "--model", model, *common, "--out", tmp_path / "sub.zarr", "--faithfulness", tmp_path / "faith",
         "--faithfulness-curve", "deletion,insertion", "--faithfulness-steps", "3"])
    # by hand, as the organiser and the team do it
    _xb(["perturb", tmp_path / "sub.zarr", "--images", images, "--out", tmp_path / "round2.zarr", "--key",
         tmp_path / "round2.key.npz", "--curve", "deletion,insertion", "--steps", "3", "-q"])
    _xb(["extract", "--model", model, "--images", tmp_path / "round2.zarr", "--out", tmp_path / "round2-sub.zarr",
         "--scores-only", "--workers", "0", "-q"])
    metrics = {}
    for name, r2, key in [("go", tmp_path / "faith/round2-sub.zarr", tmp_path / "faith/round2.key.npz"),
                          ("hand", tmp_path / "round2-sub.zarr", tmp_path / "round2.key.npz")]:
        _xb(["score", tmp_path / "sub.zarr", "--gt", gt, "--out", tmp_path / f"res-{name}", "--bootstrap", "20",
             "--faithfulness", r2, "--key", key, "-q"])
        metrics[name] = json.loads((tmp_path / f"res-{name}/metrics.json").read_text())["faithfulness"]
    for m in metrics.values():
        m["round2"].pop("key_sha256")
        m["round2"].pop("submission")
    # same images and seeds; only the opaque ids and the secret row order differ, so the model sees each image in
    # another batch (with the blurred substrate's extra image per case, clip-tiny's float32 scores then differed in
    # the last bits: 6e-10 on an area)
    assert_nested_close(metrics["go"], metrics["hand"], rel=0, abs=1e-6)
    assert set(metrics["go"]["overall"]) == {"deletion_auc", "deletion_auc_random", "deletion_gain",
                                             "insertion_auc", "insertion_auc_random", "insertion_gain"}

    # brute force: step 0 of deletion is the unperturbed image, so it scores what round 1 scored for that class
    key = F.read_key(tmp_path / "round2.key.npz")
    r1, r2 = read_submission(tmp_path / "sub.zarr").datasets["phantom"], read_submission(tmp_path / "round2-sub.zarr").datasets["phantom"]
    row1 = {c: i for i, c in enumerate(r1.case_id.tolist())}
    row2 = {c: i for i, c in enumerate(r2.case_id.tolist())}
    first = np.flatnonzero((key.curve == "deletion") & (key.step == 0) & (key.order == "map"))
    for k in first:
        j = list(r1.classes).index(key.class_name[k])
        assert r2.scores[row2[key.round2_id[k]], j] == pytest.approx(r1.scores[row1[key.case_id[k]], j], abs=1e-4)
    # the areas are the trapezoid of those scores (by hand, one class)
    cls = key.class_name[first[0]]
    fr = F.step_cells(F.DEFAULT_GRID ** 2, 3) / F.DEFAULT_GRID ** 2
    aucs = []
    for case in sorted(set(key.case_id[key.class_name == cls].tolist())):
        sel = (key.case_id == case) & (key.class_name == cls) & (key.curve == "deletion") & (key.order == "map")
        steps = key.step[sel]
        p = F.probability(r2.scores[[row2[i] for i in key.round2_id[sel]], list(r1.classes).index(cls)], r2.score_kind)
        p = p[np.argsort(steps)]
        aucs.append(sum((fr[s] - fr[s - 1]) * (p[s] + p[s - 1]) / 2 for s in range(1, 4)))
    got = metrics["hand"]["datasets"]["phantom"]["classes"][cls]["deletion_auc"]
    assert got == pytest.approx(np.mean(aucs), abs=1e-12)


def test_scores_only_store_has_no_maps_and_rerun_resumes(data, tmp_path):
    images = data / "data/images.zarr"
    _xb(["extract", "--model", "dog", "--images", images, "--out", tmp_path / "s.zarr", "--scores-only", "--workers", "0", "-q"])
    sub = read_submission(tmp_path / "s.zarr")
    assert sub.attrs["scores_only"] is True and sub.attrs["schema_minor"] == 2
    assert all(ds.saliency is None for ds in sub.datasets.values())
    res = _xb(["extract", "--model", "dog", "--images", images, "--out", tmp_path / "s.zarr", "--scores-only", "--workers", "0"])
    assert "already complete" in res.output


@pytest.mark.parametrize("where", ["images", "out"])
def test_faithfulness_folder_inside_a_store_is_refused(data, tmp_path, where):
    """DIR receives round 2, its key and its scores: inside the images store (or the round-1 store) it would write
    into an input or hand the key out with it. Exit 2, one line, nothing written (not even round 1)."""
    images = tmp_path / "images.zarr"
    shutil.copytree(data / "data/images.zarr", images)
    before = sorted(p.relative_to(images) for p in images.rglob("*"))
    out = tmp_path / "sub.zarr"
    inside = (images if where == "images" else out) / "faith"
    res = CliRunner().invoke(cli.main, [str(a) for a in ["extract", "--model", "dog", "--images", images, "--out", out,
                                                         "--faithfulness", inside, "--workers", "0", "-q"]])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and f"inside the store --{where}" in res.output, res.output
    assert sorted(p.relative_to(images) for p in images.rglob("*")) == before and not out.exists()
