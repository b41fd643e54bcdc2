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
    build_report(out, result_dirs, n_boot=100, seed=3)
    return out
