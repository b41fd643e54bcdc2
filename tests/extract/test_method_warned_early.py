"""`--method` that a model with a method of its own ignores is said before the extraction runs (issue 35: the
warning came only after the whole run), once, and without torch being needed to know it."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from xbench import cli


class _Stop(Exception):
    pass


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("method-early")
    res = CliRunner().invoke(cli.main, ["prepare", "phantom", "--out", str(d), "--n-cases", "4", "-q"])
    assert res.exit_code == 0, res.output
    return d / "images.zarr"


def _stop(*args, **kwargs):
    raise _Stop("the extraction started")


def test_the_warning_comes_before_the_extraction_starts(images, tmp_path, monkeypatch):
    monkeypatch.setattr("xbench.extract.runner.run_extraction", _stop)
    res = CliRunner().invoke(cli.main, ["extract", "--model", "dog", "--images", str(images), "--out",
                                        str(tmp_path / "d.zarr"), "--method", "gradcam", "-q"])
    warning = "warning: --method gradcam will be ignored: model 'dog' uses its own method (dog)"
    assert res.exit_code != 0 and "the extraction started" in res.stderr, res.output  # it never got far ...
    assert warning in res.stderr  # ... and the warning was out already
    assert res.stderr.index(warning) < res.stderr.index("the extraction started")


def test_a_method_the_model_runs_or_its_own_is_not_warned_about(images, tmp_path, monkeypatch):
    from xbench.extract.cli import _method_ignored_early

    assert _method_ignored_early("dog", {}, "dog") is None and _method_ignored_early("dog", {}, None) is None
    assert _method_ignored_early("clip-tiny", {}, "gradcam") is None  # a dual encoder runs the methods
    assert "will be ignored" in _method_ignored_early("center", {}, "similarity")


def test_the_warning_is_said_once_for_a_whole_run(images, tmp_path):
    pytest.importorskip("torch")
    res = CliRunner().invoke(cli.main, ["extract", "--model", "dog", "--images", str(images), "--out",
                                        str(tmp_path / "d.zarr"), "--method", "gradcam", "--workers", "0", "-q"])
    assert res.exit_code == 0, res.output
    assert res.stderr.count("--method gradcam") == 1 and "will be ignored" in res.stderr
