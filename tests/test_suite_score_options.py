"""A suite's ``score:`` section can express every option ``xbench-score`` has: each field of ScoreOptions is a
suite key or one the suite sets itself, each key's value reaches the library's entry point
(xbench.score.run) unchanged, a bad value is named in the suite's terms, and a suite without the newer keys
keeps its score steps' fingerprints."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
import pytest
import yaml

from xbench import suite as S
from xbench.schemas import options as O
from xbench.score.options import ScoreOptions
from xbench.suite import steps

sys.path.insert(0, str(Path(__file__).parent))


def _suite(**score) -> dict:
    return {"datasets": {"phantom": {}}, "models": ["dog"], "score": score}


def _is_path(o: O.Opt) -> bool:
    return isinstance(getattr(o.check, "type", None), click.Path)


def _value(f, o: O.Opt):
    """A value of the field that its rule accepts and that is not its default (a suite's spelling: lists)."""
    default = O.default_of(f)
    check = o.check
    if isinstance(check, O.Flag):
        value = not default
    elif isinstance(check, O.Int):
        value = (check.low or 0) + 3
    elif isinstance(check, O.Float):
        value = (check.low or 0) + 1.5
    elif isinstance(check, O.Choice):
        value = check.choices[-1]
    elif _is_path(o):
        value = f"given/{f.name}"  # relative: to the suite file's folder
    else:
        value = f"v-{f.name}"
    value = [value] if o.multiple else value
    assert value != default, f.name
    return value


def _expected(f, o: O.Opt, value, base: Path):
    if o.multiple:
        return tuple(value)
    if _is_path(o):
        return str((base / value).resolve())
    return value


def _score_step(suite_data: dict, base: Path) -> S.Step:
    suite = S.parse_suite(suite_data, base)
    return next(s for s in S.plan_steps(suite) if s.kind == "score")


def test_every_field_is_a_suite_key_or_set_by_the_suite():
    fields = [f.name for f, _ in O.declared(ScoreOptions)]
    keys = [f.name for f, o in O.declared(ScoreOptions) if o.suite]
    assert not set(keys) & set(steps.SCORE_SET_BY_SUITE)
    assert sorted(keys + list(steps.SCORE_SET_BY_SUITE)) == sorted(fields)
    assert list(S.SCORE_DEFAULTS) == keys


def test_every_suite_key_reaches_the_entry_point(tmp_path, monkeypatch):
    """Walks the declaration: every suite key written into the score section, the step run with the library's
    run() replaced by a recorder; each value arrives as the option's own, the suite's own fields as the suite's."""
    from xbench.score import entry

    section = {f.name: _value(f, o) for f, o in O.declared(ScoreOptions) if o.suite}
    step = _score_step(_suite(**section), tmp_path)
    assert set(section) <= set(step.options)  # each one in the step's fingerprint too
    calls = []
    monkeypatch.setattr(entry, "run", lambda options, subs, **kw: calls.append((options, subs, kw)) or [])
    run_dir = tmp_path / "run"
    ctx = steps.Context(S.parse_suite(_suite(**section), tmp_path), run_dir, None, False, lambda s: None)
    steps.EXECUTORS["score"](step, ctx, False)
    [(options, subs, kw)] = calls
    for f, o in O.declared(ScoreOptions):
        if o.suite:
            assert getattr(options, f.name) == _expected(f, o, section[f.name], tmp_path), f.name
    assert subs == [run_dir / "submissions" / "dog.zarr"] and kw == {"labels": ["dog"]}
    assert options.gt_path == str(run_dir / "data" / "gt.zarr") and options.out_dir == run_dir / "scores" / "dog"
    assert options.images_path == run_dir / "data" / "images.zarr" and options.datasets == ("phantom",)
    assert options.seed == 0 and options.quiet and not options.overwrite


def test_a_suite_without_the_newer_keys_keeps_its_score_fingerprint_options(tmp_path):
    step = _score_step(_suite(bootstrap=7), tmp_path)
    assert step.options == {"bootstrap": 7, "seed": 0, "datasets": ["phantom"]}
    defaults = {k: (list(v) if isinstance(v, tuple) else v) for k, v in S.SCORE_DEFAULTS.items()}
    assert _score_step(_suite(**defaults), tmp_path).options == step.options | {"bootstrap": 1000}


@pytest.mark.parametrize("key, value, needle", [
    ("formats", ["bogus"], "score.formats: must be"),
    ("formats", 3, "score.formats: must be a list, got 3"),
    ("metric_groups", "nope", "score.metric_groups: must be"),
    ("pointing_tolerance", -1, "score.pointing_tolerance: must be a number"),
    ("min_group", 0, "score.min_group: must be an integer"),
    ("allow_missing", "yes", "score.allow_missing: must be true or false"),
    ("thresholds_from", 3, "score.thresholds_from: must be a string"),
    ("by", ["sex"], "score.by: must be a string"),
])
def test_a_bad_value_is_named_in_the_suites_terms(tmp_path, key, value, needle):
    with pytest.raises(S.SuiteError) as err:
        S.parse_suite(_suite(**{key: value}), tmp_path, source="s.yaml")
    lines = [str(p) for p in err.value.problems]
    assert any(line.startswith("s.yaml: " + needle) for line in lines), lines


def test_one_word_is_a_list_of_one(tmp_path):
    suite = S.parse_suite(_suite(formats="codabench", metric_groups=["complexity"]), tmp_path)
    assert suite.score["formats"] == ("codabench",) and suite.score["metric_groups"] == ("complexity",)


@pytest.mark.torch
def test_a_suite_run_scores_with_its_options(tmp_path):
    """End to end: a phantom suite asking for an opt-in metric group, a pointing tolerance and the codabench
    layout gets them in its scores (the step's options reach the scorer, not only its fingerprint)."""
    pytest.importorskip("torch")
    from click.testing import CliRunner

    data = {"name": "t", "seed": 0,
            "prepare": {"grid": 32, "image_size": 64, "workers": 1, "cases_per_block": 4},
            "datasets": {"phantom": {"split": "test", "options": {"n_cases": 6, "seed": 1, "size": 64}}},
            "models": ["dog"],
            "extract": {"batch_size": 4, "device": "cpu", "workers": 0, "map_dtype": "float32"},
            "score": {"bootstrap": 0, "metric_groups": ["complexity"], "pointing_tolerance": 7.5,
                      "formats": ["codabench"]},
            "report": {"bootstrap": 0, "overlays": False}}
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    res = CliRunner().invoke(S.run, [str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "out"), "--quiet"],
                             prog_name="xbench run")
    assert res.exit_code == 0, res.output
    scores = tmp_path / "out" / "scores" / "dog"
    metrics = json.loads((scores / "metrics.json").read_text())
    assert metrics["xbench"]["pointing_tolerance_px"] == 7.5
    from xbench.score.metrics.registry import opt_in_metrics

    assert {m.key for m in opt_in_metrics("complexity")} & set(metrics["overall"])
    assert (scores / "scores.json").is_file()
    assert metrics["xbench"]["inputs"]["images"] == os.fspath((tmp_path / "out" / "data" / "images.zarr").resolve())
