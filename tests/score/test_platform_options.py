"""A platform's configuration of the scoring (xbench/platform_scoring.py platform_options): the keys of a suite's score:
section, given to score_for_platform or as the JSON object in $XBENCH_SCORE_OPTIONS, reach the scorer; a bad
configuration is one line and exit 2, nothing written."""
from __future__ import annotations

import json

import pytest

from score_stores import make_gt, make_submission
from xbench.package import SCORE_OPTIONS_ENV, grand_challenge_main, platform_options, score_for_platform


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("platform-options")
    gt = make_gt(d / "gt.zarr", seed=21)
    make_submission(d / "sub.zarr", gt, seed=22)
    return d


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(SCORE_OPTIONS_ENV, raising=False)
    monkeypatch.delenv("XBENCH_BOOTSTRAP", raising=False)


def test_options_reach_the_scorer(world, tmp_path, capsys):
    out = tmp_path / "out"
    code = score_for_platform(world / "sub.zarr", world / "gt.zarr", out, "codabench", bootstrap=0,
                              options={"pointing_tolerance": 7.5, "metric_groups": ["complexity"]})
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["xbench"]["pointing_tolerance_px"] == 7.5
    from xbench.score.metrics.registry import opt_in_metrics

    assert {m.key for m in opt_in_metrics("complexity")} & set(metrics["overall"])
    assert metrics["xbench"]["bootstrap"]["n_resamples"] == 0 and (out / "scores.json").is_file()


def test_the_environment_configures_grand_challenge(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XBENCH_GT", str(world / "gt.zarr"))
    monkeypatch.setenv(SCORE_OPTIONS_ENV, json.dumps({"bootstrap": 0, "pointing_tolerance": 3}))
    out = tmp_path / "output"
    out.mkdir()
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "team.zarr").symlink_to(world / "sub.zarr", target_is_directory=True)
    assert grand_challenge_main(str(tmp_path / "input"), str(out)) == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["xbench"]["pointing_tolerance_px"] == 3.0 and "aggregates" in metrics


def test_xbench_bootstrap_wins_and_lists_become_tuples(monkeypatch, tmp_path):
    monkeypatch.setenv("XBENCH_BOOTSTRAP", "5")
    got = platform_options(1000, {"bootstrap": 9, "metric_groups": ["complexity"], "human_dir": "h"})
    assert got["bootstrap"] == 5 and got["metric_groups"] == ("complexity",)
    assert got["human_dir"] == str(tmp_path.cwd() / "h")


@pytest.mark.parametrize("env, options, needle", [
    (None, {"bogus": 1}, "options: unknown key(s) bogus"),
    (None, {"formats": ["codabench"]}, "unknown key(s) formats"),  # the platform's own
    (None, {"faithfulness": "x.zarr"}, "unknown key(s) faithfulness"),
    (None, {"pointing_tolerance": -1}, "options.pointing_tolerance: must be a number"),
    (None, {"metric_groups": ["nope"]}, "options.metric_groups: must be"),
    (None, ["by"], "options: must be an object"),
    ("{not json", None, SCORE_OPTIONS_ENV),
    ("[1, 2]", None, f"{SCORE_OPTIONS_ENV}: must be an object"),
    ('{"by": "sex", "by": "view"}', None, SCORE_OPTIONS_ENV),
    ("[" * 100_000, None, SCORE_OPTIONS_ENV),
])
def test_a_bad_configuration_is_one_line_and_exit_2(world, tmp_path, monkeypatch, capsys, env, options, needle):
    if env is not None:
        monkeypatch.setenv(SCORE_OPTIONS_ENV, env)
    out = tmp_path / "out"
    code = score_for_platform(world / "sub.zarr", world / "gt.zarr", out, "codabench", bootstrap=0,
                              options=options)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert needle in err and "Traceback" not in err
    assert not out.exists()


def test_a_bad_xbench_bootstrap_is_named(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XBENCH_BOOTSTRAP", "lots")
    assert score_for_platform(world / "sub.zarr", world / "gt.zarr", tmp_path / "o", "codabench") == 2
    assert "XBENCH_BOOTSTRAP 'lots': must be an integer >= 0" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
