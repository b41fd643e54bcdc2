"""Test-time augmentation at extraction (``xbench-extract --augment``, ``augment:`` in model configs and suites;
extract/tta.py): every augmentation through the real command on clip-tiny and the weight-free baselines to a
submission that validates and scores, the combination against brute force, equivariance, deterministic noise
whatever the batching, originals, resuming, and hostile specs refused in one line before torch."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from cli_run import run_extract
from xbench.extract.cli import main as extract_main
from xbench.extract.tta import TTA, case_seed
from xbench.schemas import read_submission
from xbench.schemas.augment import AUGMENTATIONS, parse_spec, parse_specs

ALL = list(AUGMENTATIONS.names())


@pytest.fixture(scope="module")
def phantom(tmp_path_factory):
    """images.zarr + gt.zarr of 6 phantom cases, S = 48 from 80-pixel originals (kept), 3 cases per block."""
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset

    out = tmp_path_factory.mktemp("tta")
    prepare_dataset(PhantomReader(n_cases=6, size=80, phrases=True), out, grid=(16, 16), image_size=48, workers=1,
                    cases_per_block=3, progress=False, keep_original=True)
    return out


def _extract(phantom, out, *args, model="dog"):
    res = CliRunner().invoke(extract_main, ["--model", model, "--images", str(phantom / "images.zarr"), "--out",
                                            str(out), "--workers", "0", "--map-dtype", "float32", "--quiet", *args])
    assert res.exit_code == 0, res.output
    return read_submission(out)


def _arrays(sub):
    ds = sub.datasets["phantom"]
    out = {"scores": np.asarray(ds.scores[...]), "maps": np.asarray(ds.saliency[...], dtype=np.float64)}
    if ds.query_id is not None and len(ds.query_id):
        out["phrase_scores"] = np.asarray(ds.query_scores[...])
        out["phrase_maps"] = np.asarray(ds.query_saliency[...], dtype=np.float64)
    return out


@pytest.mark.torch
@pytest.mark.parametrize("model", ["clip-tiny", "random", "center", "dog"])
def test_every_augmentation_extracts_validates_and_scores(phantom, tmp_path, model):
    from xbench.cli import main as xbench_main
    from xbench.score.scoring import score_submission

    args = [a for name in ALL for a in ("--augment", name)]
    sub = _extract(phantom, tmp_path / "s.zarr", *args, model=model)
    assert sub.attrs["augment"]["specs"] == [str(parse_spec(n)) for n in ALL]
    assert sub.attrs["augment"]["views"] == len(ALL) + 1
    res = CliRunner().invoke(xbench_main, ["validate", str(tmp_path / "s.zarr")])
    assert res.exit_code == 0, res.output
    metrics = score_submission(tmp_path / "s.zarr", phantom / "gt.zarr", bootstrap=0).metrics
    assert metrics["datasets"]["phantom"]["classes"]
    assert np.isfinite(_arrays(sub)["maps"]).all()


def _views_by_hand(phantom, model, specs, tmp_path):
    """Brute force of the combination: one plain extraction per view on a store whose images ARE that view
    (made here with apply_image and the documented seed), each map warped back, then the covered mean."""
    import shutil

    import zarr

    from xbench.schemas import read_images

    ds = read_images(phantom / "images.zarr").datasets["phantom"]
    ids = [str(c) for c in ds.case_id]
    outs = []
    for k, spec in enumerate([None, *specs]):
        store = tmp_path / f"view{k}" / "images.zarr"
        shutil.copytree(phantom / "images.zarr", store)
        img = zarr.open_group(str(store), mode="r+")["phantom"]["image"]
        if spec is not None:
            img[...] = np.stack([spec.apply_image(np.asarray(ds.image[r]), seed=case_seed(0, "phantom", ids[r], k, str(spec)))
                                 for r in range(len(ids))])
        res = CliRunner().invoke(extract_main, ["--model", model, "--images", str(store), "--out",
                                                str(tmp_path / f"view{k}.zarr"), "--workers", "0", "--map-dtype",
                                                "float32", "--quiet"])
        assert res.exit_code == 0, res.output
        outs.append(_arrays(read_submission(tmp_path / f"view{k}.zarr")))
    expected = {}
    for key in outs[0]:
        if "scores" in key:
            expected[key] = np.mean([o[key] for o in outs], axis=0)
            continue
        h, w = outs[0][key].shape[-2:]
        total, count = outs[0][key].copy(), np.ones((h, w))
        for spec, o in zip(specs, outs[1:]):
            cover = np.array([[_in_view(spec, i, j, h, w) for j in range(w)] for i in range(h)])
            total += np.where(cover, spec.invert_map(o[key]), 0.0)
            count += cover
        expected[key] = total / count
    return expected


def _in_view(spec, i, j, h, w) -> bool:
    a = spec.forward()
    u, v = (j + .5) / w, (i + .5) / h
    uu, vv = a[0, 0] * u + a[0, 1] * v + a[0, 2], a[1, 0] * u + a[1, 1] * v + a[1, 2]
    return -1e-9 <= uu <= 1 + 1e-9 and -1e-9 <= vv <= 1 + 1e-9


@pytest.mark.torch
def test_the_submission_is_the_covered_mean_of_the_views_computed_one_by_one(phantom, tmp_path):
    specs = parse_specs("rotate:degrees=20,noise:sigma=20,translate:x=100")
    got = _arrays(_extract(phantom, tmp_path / "tta.zarr", "--augment", ",".join(map(str, specs)), model="random"))
    # the stored S x S images are what random reads (no host transform), so a store of each view is the view
    want = _views_by_hand(phantom, "random", specs, tmp_path)
    assert set(got) == set(want) and "phrase_maps" in got
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-6, err_msg=key)


@pytest.mark.torch
def test_an_exactly_symmetric_baseline_gives_the_same_map_with_and_without_hflip(phantom, tmp_path):
    plain = _arrays(_extract(phantom, tmp_path / "c0.zarr", model="center"))
    flipped = _arrays(_extract(phantom, tmp_path / "c1.zarr", "--augment", "hflip", model="center"))
    for key in plain:
        assert (plain[key] == flipped[key]).all(), key  # the centre prior is mirror-symmetric: exactly equal
    # dog is equivariant (a mirrored image gives the mirrored map) up to float rounding
    dog0 = _arrays(_extract(phantom, tmp_path / "d0.zarr", model="dog"))
    dog1 = _arrays(_extract(phantom, tmp_path / "d1.zarr", "--augment", "hflip", model="dog"))
    np.testing.assert_allclose(dog1["maps"], dog0["maps"], rtol=1e-4, atol=1e-5 * np.abs(dog0["maps"]).max())
    # and a method that is not (random reads the image bytes) does change: the test can fail
    r0 = _arrays(_extract(phantom, tmp_path / "r0.zarr", model="random"))
    r1 = _arrays(_extract(phantom, tmp_path / "r1.zarr", "--augment", "hflip", model="random"))
    assert np.abs(r0["maps"] - r1["maps"]).max() > 0.1


@pytest.mark.torch
def test_noise_and_results_do_not_depend_on_batching_workers_or_resuming(phantom, tmp_path, monkeypatch):
    spec = ["--augment", "noise:sigma=30", "--augment", "rotate:degrees=7"]
    a = _arrays(_extract(phantom, tmp_path / "a.zarr", *spec, "--batch-size", "1", model="random"))
    res = CliRunner().invoke(extract_main, ["--model", "random", "--images", str(phantom / "images.zarr"), "--out",
                                            str(tmp_path / "b.zarr"), "--workers", "2", "--batch-size", "7",
                                            "--cases-per-block", "5", "--map-dtype", "float32", "--quiet", *spec])
    assert res.exit_code == 0, res.output
    b = _arrays(read_submission(tmp_path / "b.zarr"))
    for key in a:
        assert (a[key] == b[key]).all(), key
    c = _arrays(_extract(phantom, tmp_path / "c.zarr", *spec, "--augment-seed", "1", model="random"))
    assert (a["maps"] != c["maps"]).any()  # another seed, other noise (random reads the noisy bytes)


def test_case_seed_is_the_documented_hash():
    import hashlib

    text = "xbench-augment\x1f3\x1fphantom\x1fcase-7\x1f2\x1fnoise:sigma=8"
    want = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    assert case_seed(3, "phantom", "case-7", 2, "noise:sigma=8") == want
    assert len({case_seed(0, "d", c, v, "noise:sigma=8") for c in "ab" for v in (1, 2)}) == 4


def test_combination_of_views_by_hand():
    tta = TTA(tuple(parse_specs("hflip,translate:x=256,side=512,brightness")))
    maps = np.random.default_rng(0).normal(size=(4, 2, 3, 4, 4))
    scores = np.random.default_rng(1).normal(size=(4, 2, 3))
    s, m = tta.combine(scores, maps)
    np.testing.assert_allclose(s, scores.mean(axis=0), rtol=1e-6)
    # translate by half the width: the left half of the original frame is read from the augmented right half;
    # its right half moved out of view, so there only the three other views count
    back = maps[2][..., :, 2:]
    want = maps[0] + maps[1][..., ::-1] + maps[3]
    want_left = (want[..., :, :2] + back) / 4
    np.testing.assert_allclose(m[..., :, :2], want_left, rtol=1e-5)
    np.testing.assert_allclose(m[..., :, 2:], want[..., :, 2:] / 3, rtol=1e-5)


def test_views_are_made_from_the_originals_when_the_loader_reads_them(phantom):
    import torch

    from xbench.extract.runner import _Blocks
    from xbench.schemas import read_images

    seen = []

    def transform(img, size):  # stands for a model's loader: records the pixels it was given
        seen.append(np.array(img))
        return torch.zeros(2)

    ds = read_images(phantom / "images.zarr").datasets["phantom"]
    tta = TTA(tuple(parse_specs("hflip")))
    _, x, sizes = _Blocks(str(phantom / "images.zarr"), "phantom", [(0, 0, 2)], transform, True, tta=tta)[0]
    assert x.shape == (4, 2) and sizes.shape == (2, 2)
    originals = [np.asarray(ds.original(r)) for r in range(2)]
    assert originals[0].shape != tuple(ds.image.shape[1:])  # 80-pixel originals, 48-pixel stored images
    assert [s.shape for s in seen] == [o.shape for o in originals for _ in range(2)]
    assert (seen[0] == originals[0]).all() and (seen[1] == originals[0][:, ::-1]).all()
    assert (seen[2] == originals[1]).all() and (seen[3] == originals[1][:, ::-1]).all()


@pytest.mark.torch
def test_model_config_augment_and_the_cli_winning(phantom, tmp_path):
    cfg = tmp_path / "dog-tta.yaml"
    cfg.write_text(yaml.safe_dump({"adapter": "dog", "augment": ["hflip", "gamma:gamma=1.5"]}))
    sub = _extract(phantom, tmp_path / "cfg.zarr", model=str(cfg))
    assert sub.attrs["augment"]["specs"] == ["hflip", "gamma:gamma=1.5"]
    sub = _extract(phantom, tmp_path / "cli.zarr", "--augment", "blur", model=str(cfg))
    assert sub.attrs["augment"]["specs"] == ["blur:sigma=1,side=512"]


@pytest.mark.torch
def test_without_augment_nothing_changes(phantom, tmp_path):
    sub = _extract(phantom, tmp_path / "plain.zarr")
    assert "augment" not in sub.attrs
    meta = json.loads((tmp_path / "plain.zarr" / "zarr.json").read_text())
    assert "augment" not in json.dumps(meta)


@pytest.mark.torch
def test_resuming_with_other_augmentations_is_refused(phantom, tmp_path):
    _extract(phantom, tmp_path / "r.zarr", "--augment", "hflip")
    res = CliRunner().invoke(extract_main, ["--model", "dog", "--images", str(phantom / "images.zarr"), "--out",
                                            str(tmp_path / "r.zarr"), "--workers", "0", "--map-dtype", "float32",
                                            "--quiet", "--augment", "rotate"])
    assert res.exit_code == 2 and "was begun with augmentations [hflip]" in res.output, res.output
    _extract(phantom, tmp_path / "r.zarr", "--augment", "hflip")  # the same ones resume (nothing to do)
    _extract(phantom, tmp_path / "r.zarr", "--augment", "rotate", "--overwrite")


@pytest.mark.parametrize("spec,fragment", [
    ("rotate:degrees=nan", "degrees must be a number in [-360, 360]"),
    ("rotate:degrees=1e999", "must be a number"),
    ("scale:factor=" + "9" * 150, "must be a number in [0.25, 4]"),
    ("x" * 5000, "characters long"),
    ("rotat", "Did you mean: rotate"),
    ("blur:sigma=1,sgima=2", "did you mean sigma?"),
    ("noise:sigma=1\x1b[2J", "must be a number"),
    (",".join(["hflip"] * 40), "at most 16"),
])
def test_hostile_augment_specs_exit_2_in_one_line_before_torch(phantom, tmp_path, spec, fragment):
    run = run_extract(["--model", "dog", "--images", phantom / "images.zarr", "--out", tmp_path / "o.zarr",
                       "--augment", spec], tmp_path, no_torch=True, cap_s=60)
    assert run.rc == 2, (run.rc, run.stderr[-2000:])
    assert "Traceback" not in run.stderr and "TORCH WAS IMPORTED" not in run.stderr
    assert len(run.lines) == 1 and fragment in run.lines[0], run.lines
    assert "\x1b" not in run.stderr and run.seconds < 60 and run.maxrss_mib < 1024
    assert not (tmp_path / "o.zarr").exists()


def test_a_bad_augment_in_a_model_config_is_refused_before_torch(phantom, tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("adapter: dog\naugment: [hflip, 'jpeg:quality=500']\n")
    run = run_extract(["--model", cfg, "--images", phantom / "images.zarr", "--out", tmp_path / "o.zarr"], tmp_path,
                      no_torch=True, cap_s=60)
    assert run.rc == 2 and "Traceback" not in run.stderr, run.stderr
    assert any("augment" in line and "quality must be an integer in [1, 100]" in line for line in run.lines), run.lines


# ------------------------------------------------------------------------------------------------ suites
def _small_tta_suite() -> dict:
    """suites/robustness-tta.yaml as shipped, on a 6-case phantom (the models and augmentations unchanged)."""
    from pathlib import Path

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "suites" / "robustness-tta.yaml").read_text())
    data["prepare"].update(grid=32, image_size=64, cases_per_block=3)
    data["datasets"]["phantom"]["options"].update(n_cases=6, size=64)
    data["score"]["bootstrap"] = data["report"]["bootstrap"] = 0
    return data


@pytest.mark.torch
def test_the_shipped_tta_suite_runs_and_scores(tmp_path):
    from xbench import suite as S

    suite = S.parse_suite(_small_tta_suite(), tmp_path)
    S.run_suite(suite, out=tmp_path / "out", progress=False, only=["prepare", "extract", "score"])
    for key, specs in [("dog", ["hflip", "rotate:degrees=5", "brightness:delta=-10", "noise:sigma=4"]),
                       ("center", ["hflip", "rotate:degrees=5", "brightness:delta=-10", "noise:sigma=4"]),
                       ("clip-tiny-flip", ["hflip"])]:
        sub = read_submission(tmp_path / "out" / "submissions" / f"{key}.zarr")
        assert sub.attrs["augment"]["specs"] == specs
        assert (tmp_path / "out" / "scores" / key / "metrics.json").is_file()


def test_suite_augment_reaches_the_command_line_of_each_rank(tmp_path):
    from xbench import suite as S
    from xbench.extract.options import ExtractOptions
    from xbench.schemas.options import from_params

    (tmp_path / "images.zarr").mkdir()
    argv = S.extract_argv({"model": "dog", "augment": ["hflip", "translate:y=4, x=3"], "augment_seed": 5},
                          tmp_path / "images.zarr", tmp_path / "o.zarr")
    params = extract_main.make_context("xbench-extract", list(argv)).params
    values = from_params(ExtractOptions, params)
    assert values["augment"] == ["hflip", "translate:x=3,y=4,side=512"] and values["augment_seed"] == 5


def test_suite_augment_is_checked_and_left_out_of_fingerprints_when_unset(tmp_path):
    from xbench import suite as S

    data = _small_tta_suite()
    data["extract"]["augment"] = ["hflip", "rotate:degrees=999"]
    data["models"][2]["extract"]["augment"] = "jpeg:qualty=5"
    with pytest.raises(S.SuiteError) as e:
        S.parse_suite(data, tmp_path)
    text = "\n".join(map(str, e.value.problems))
    assert "extract.augment" in text and "degrees must be a number in [-360, 360]" in text
    assert "did you mean quality?" in text
    plain = _small_tta_suite()
    del plain["extract"]["augment"], plain["extract"]["augment_seed"], plain["models"][2]
    steps = S.plan_steps(S.parse_suite(plain, tmp_path))
    assert all("augment" not in s.options and "augment_seed" not in s.options for s in steps)  # fingerprints as before
