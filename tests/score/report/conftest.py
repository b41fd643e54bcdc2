"""Shared synthetic score outputs for the report tests (built once per session, small)."""
from __future__ import annotations

import pytest

import report_fixtures


@pytest.fixture(scope="session")
def result_dirs(tmp_path_factory):
    """Three synthetic score outputs (strong, medium, weak) on one ground truth, with stores."""
    root = tmp_path_factory.mktemp("results")
    return report_fixtures.make_results(root, n_cases=20, stores=True)


@pytest.fixture(scope="session")
def built_report(result_dirs, tmp_path_factory):
    """The report over ``result_dirs`` (100 resamples); returns the output directory."""
    from xbench.score.report import build_report

    out = tmp_path_factory.mktemp("report")
    build_report(out, result_dirs, bootstrap=100, seed=3)
    return out


@pytest.fixture(scope="session")
def scorer_results(result_dirs, tmp_path_factory):
    """The fixture's submission stores scored by the real scorer (40 resamples): metrics.json with every
    registered metric (lesion-size strata included) and its intervals."""
    import json

    from xbench.score.outputs.folder import write_outputs
    from xbench.score.scoring import score_submission

    root = tmp_path_factory.mktemp("scored-session")
    out = []
    for d in result_dirs:
        inputs = json.loads((d / "metrics.json").read_text())["xbench"]["inputs"]
        res = score_submission(inputs["submission"], inputs["gt"], bootstrap=40, seed=2)
        res.metrics["xbench"]["inputs"]["images"] = inputs["images"]
        write_outputs(res, root / d.name)
        out.append(root / d.name)
    return out
