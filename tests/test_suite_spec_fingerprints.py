"""Suite fingerprints see canonical augmentation and perturbation specs: two spellings of one spec are one
fingerprint, and a suite without augment/perturb keeps the fingerprints it had before specs were canonicalised."""
from __future__ import annotations

import copy

import pytest

from xbench import suite as S


def _suite(**extract) -> dict:
    return {
        "name": "t", "seed": 0,
        "prepare": {"grid": 32, "image_size": 64, "workers": 1, "cases_per_block": 4},
        "datasets": {"phantom": {"split": "test", "options": {"n_cases": 6, "seed": 1, "size": 64}}},
        "models": ["random", {"name": "dog", "model": "dog", "options": {}}],
        "extract": {"batch_size": 4, "device": "cpu", "workers": 0, "map_dtype": "float32", **extract},
        "score": {"bootstrap": 0},
        "report": {"bootstrap": 0, "overlays": False},
    }


def _prepare_fingerprints(data, tmp_path) -> dict:
    steps = S.plan_steps(S.parse_suite(data, tmp_path))
    states = S.evaluate(steps, {}, tmp_path / "run", S.DigestCache(), {"phantom": None})
    return {k: st.fingerprint for k, st in states.items() if k.startswith("prepare/")}


def _extract_options(data, tmp_path) -> dict:
    return {s.id: s.options for s in S.plan_steps(S.parse_suite(data, tmp_path)) if s.kind == "extract"}


@pytest.mark.parametrize("a,b", [
    ("rotate", ["rotate:degrees=10"]),
    ("hflip,translate:y=0, x=16", ["hflip", "translate:x=16,y=0,side=512"]),
    (["noise:sigma=8.0", "blur"], "noise,blur:sigma=1,side=512"),
])
def test_two_spellings_of_one_augmentation_are_one_extract_fingerprint(tmp_path, a, b):
    oa, ob = (_extract_options(_suite(augment=v), tmp_path) for v in (a, b))
    assert oa == ob
    assert oa != _extract_options(_suite(augment="rotate:degrees=11"), tmp_path)
    # a model config's augment: (overrides) likewise, and the model digest that goes into the fingerprint
    da, db = copy.deepcopy(_suite()), copy.deepcopy(_suite())
    da["models"][1]["options"]["augment"], db["models"][1]["options"]["augment"] = a, b
    sa, sb = (_extract_options(d, tmp_path)["extract/dog"] for d in (da, db))
    assert sa == sb
    ca = S.model_digest(sa["model"], sa["overrides"], S.DigestCache())
    assert "error" not in ca and ca == S.model_digest(sb["model"], sb["overrides"], S.DigestCache())


def test_the_augmented_run_uses_the_canonical_specs(tmp_path):
    opts = _extract_options(_suite(augment="rotate,hflip"), tmp_path)["extract/random"]
    assert opts["augment"] == ["rotate:degrees=10", "hflip"]  # order kept: it is the order of the views


@pytest.mark.parametrize("a,b", [
    ("rotate,hflip", ["rotate:degrees=10", "hflip"]),
    ("rotate:degrees=-10.0..10", "rotate:degrees=-10..10"),
    ("translate:y=0..4,x=2", "translate:x=2,y=0..4,side=512"),
])
def test_two_spellings_of_one_perturbation_are_one_prepare_fingerprint(tmp_path, a, b):
    fa, fb = ({}, {})
    for f, v in ((fa, a), (fb, b)):
        data = _suite()
        data["prepare"]["perturb"] = v
        f.update(_prepare_fingerprints(data, tmp_path))
    assert fa == fb and all(fa.values())
    other = _suite()
    other["prepare"]["perturb"] = "rotate:degrees=-10..11"
    assert _prepare_fingerprints(other, tmp_path) != fa


def test_without_augment_or_perturb_the_fingerprinted_options_are_as_before(tmp_path):
    """The options exactly as the planner built them before specs were canonicalised (its formula, written out)."""
    suite = S.parse_suite(_suite(), tmp_path)
    steps = {s.id: s for s in S.plan_steps(suite)}
    for m in suite.models:
        before = {"model": m.model, "overrides": m.options, "datasets": ["phantom"],
                  **{k: v for k, v in m.extract.items() if k not in S.EXTRACT_NOT_IN_OUTPUT
                     and not (k in S.EXTRACT_FINGERPRINT_WHEN_SET and v == S.EXTRACT_DEFAULTS[k])}}
        assert steps[f"extract/{m.key}"].options == before
        assert "augment" not in before
    d = suite.datasets[0]
    before = {"dataset": d.key, "split": d.split, "options": d.options, "limit": None,
              **{k: (list(S._grid(v)) if k == "grid" else v) for k, v in d.prepare.items()
                 if k != "workers" and not k.startswith("perturb")}}
    assert steps["prepare/phantom"].options == before


def test_an_empty_augment_list_is_no_augmentation(tmp_path):
    assert _extract_options(_suite(augment=[]), tmp_path) == _extract_options(_suite(), tmp_path)
