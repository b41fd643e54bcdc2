"""Every figure is written (PNG and SVG, non-empty, valid headers); the fit and the size bins are right."""
from __future__ import annotations

import json

import numpy as np
import pytest

from xbench.score.report.figures import linear_fit, size_bins

FIGURES = ("auroc_vs_pointing", "dice_fixed_vs_best", "pointing_heatmap", "region_size")


@pytest.mark.parametrize("stem", FIGURES)
def test_figure_files_written(built_report, stem):
    png = built_report / "figures" / f"{stem}.png"
    svg = built_report / "figures" / f"{stem}.svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
    assert b"<svg" in svg.read_bytes()[:2000] and svg.stat().st_size > 2000


def test_overlays_written_for_every_model_and_dataset(built_report):
    manifest = json.loads((built_report / "report.json").read_text())
    overlays = manifest["files"]["overlays"]
    assert len(overlays) == 3 * 2  # models x datasets, PNG only
    for rel in overlays:
        assert (built_report / rel).stat().st_size > 2000
    assert manifest["skipped"] == []


def test_every_listed_file_exists(built_report):
    manifest = json.loads((built_report / "report.json").read_text())
    for group in manifest["files"].values():
        for rel in group:
            assert (built_report / rel).stat().st_size > 0, rel


def test_linear_fit_matches_hand_computation():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    y = np.array([1.0, 3.0, 5.0, 7.5])
    fit = linear_fit(x, y)
    # normal equations by hand: slope = cov(x,y)/var(x)
    slope = np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2)
    intercept = y.mean() - slope * x.mean()
    resid = y - (slope * x + intercept)
    r2 = 1 - np.sum(resid ** 2) / np.sum((y - y.mean()) ** 2)
    assert fit["slope"] == pytest.approx(slope) and fit["intercept"] == pytest.approx(intercept)
    assert fit["r2"] == pytest.approx(r2)
    assert linear_fit([1, 2], [3, 4]) is None  # two points: a line always fits, R² says nothing
    assert linear_fit([1, 1, 1], [1, 2, 3]) is None


def test_size_bins_fixed_and_tercile():
    f = np.array([0.001, 0.01, 0.02, 0.05, 0.2])
    idx, edges = size_bins(f, "fixed")
    assert edges == (0.01, 0.05) and idx.tolist() == [0, 1, 1, 2, 2]  # an edge goes to the larger bin
    idx, edges = size_bins(np.arange(9.0), "tercile")
    assert np.bincount(idx).tolist() == [3, 3, 3]
    with pytest.raises(ValueError, match="fixed"):
        size_bins(f, "quartile")


def test_fit_recorded_in_manifest(built_report):
    manifest = json.loads((built_report / "report.json").read_text())
    assert manifest["fit"] is not None and 0 <= manifest["fit"]["r2"] <= 1
    assert set(manifest["delta_dice"]) == {"strong", "medium", "weak"}
