"""xbench sanity: SSIM against scikit-image, the layers of clip-tiny, maps that drift when its weights are
re-initialised, and a weight-independent map method that the check flags."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from xbench.extract.models.base import AdapterOutput
from xbench.extract.sanity import randomise, run_sanity, spearman, ssim

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(11, 11), (16, 23), (64, 64)])
def test_ssim_matches_scikit_image(shape):
    metrics = pytest.importorskip("skimage.metrics")
    rng = np.random.default_rng(shape[0])
    for _ in range(5):
        a = rng.random(shape)
        b = np.clip(a + rng.normal(0, rng.uniform(0.01, 0.5), shape), 0, 1)
        ref = metrics.structural_similarity(a, b, data_range=1.0, gaussian_weights=True, sigma=1.5,
                                            use_sample_covariance=False)
        assert ssim(a, b) == pytest.approx(ref, abs=1e-12)
    assert ssim(a, a) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        ssim(np.zeros((7, 7)), np.zeros((7, 7)))


def test_spearman():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    a, b = rng.random((8, 8)), rng.integers(0, 4, (8, 8)).astype(float)  # ties in b
    assert spearman(a, b) == pytest.approx(spearmanr(a.ravel(), b.ravel()).statistic)
    assert spearman(a, a ** 3) == pytest.approx(1.0)
    assert np.isnan(spearman(a, np.zeros_like(a)))


def test_randomise_is_seeded_and_keeps_shape():
    p1, p2 = torch.nn.Parameter(torch.ones(4, 3)), torch.nn.Parameter(torch.ones(4, 3))
    randomise([p1], seed=3, position=2)
    randomise([p2], seed=3, position=2)
    assert torch.equal(p1, p2) and p1.std() > 0
    p3 = torch.nn.Parameter(torch.ones(4, 3))
    randomise([p3], seed=3, position=1)
    assert not torch.equal(p1, p3)


@pytest.fixture(scope="module")
def clip_tiny():
    from xbench.extract.models import create_adapter

    return lambda: create_adapter("clip-tiny")


def test_clip_tiny_maps_drift_when_randomised(clip_tiny, phantom_images):
    adapter = clip_tiny()
    before = {k: v.clone() for k, v in adapter.modules[0].state_dict().items()}
    res = run_sanity(adapter, phantom_images / "images.zarr", limit=3, seed=0)
    layers = res["layers"]
    # bottom to top, as the image forward uses them: the patch embedding first, the projection last
    assert layers[0].endswith("visual.conv1") and layers[-1].endswith("visual.proj")
    assert any(name.endswith("resblocks.0") for name in layers) and not any("text" in n for n in layers)
    steps = res["steps"]
    assert steps[0]["spearman"] == 1.0 and len(steps) == len(layers) + 1
    assert steps[1]["layer"] == layers[-1]  # cascading starts at the top
    assert steps[-1]["spearman_abs"] < 0.5 and steps[-1]["ssim"] < 0.5
    assert res["depends_on_weights"] is True
    after = adapter.modules[0].state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the weights are restored


class PixelMaps:
    """A deliberately weight-independent map "method": clip-tiny's scores, but maps that are the image
    itself pooled to 8 x 8 (an edge detector or any image filter would do as well)."""

    def __init__(self, inner):
        self.inner, self.name, self.method = inner, "pixel-maps", "pixels"

    def __getattr__(self, name):
        return getattr(self.__dict__["inner"], name)

    def __call__(self, images, sizes):
        out = self.inner(images, sizes)
        pooled = torch.nn.functional.adaptive_avg_pool2d(images.float().unsqueeze(1), (8, 8))
        return AdapterOutput(out.scores, pooled.expand(-1, out.scores.shape[1], -1, -1).contiguous())


def test_a_weight_independent_method_is_flagged(clip_tiny, phantom_images):
    wrapped = PixelMaps(clip_tiny())
    wrapped.modules = wrapped.inner.modules  # the weights are there (scores use them); the maps ignore them
    res = run_sanity(wrapped, phantom_images / "images.zarr", limit=3, seed=0, mode="independent")
    assert res["layers"]  # the forward did use weights
    assert all(s["spearman"] == pytest.approx(1.0) and s["ssim"] == pytest.approx(1.0) for s in res["steps"])
    assert res["depends_on_weights"] is False


def test_a_baseline_without_weights_does_not_depend(phantom_images):
    from xbench.extract.models import create_adapter

    res = run_sanity(create_adapter("center"), phantom_images / "images.zarr", limit=2)
    assert res["layers"] == [] and res["depends_on_weights"] is False and "no weights" in res["verdict"]


def test_cli_writes_its_outputs_atomically(phantom_images, tmp_path):
    from xbench import cli

    out = tmp_path / "sanity"
    res = CliRunner().invoke(cli.main, ["sanity", "--model", "dog", "--images", str(phantom_images / "images.zarr"),
                                        "--out", str(out), "--limit", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} == {"sanity.json", "sanity.md", "sanity.csv", "sanity.png", "sanity.svg"}
    assert json.loads((out / "sanity.json").read_text())["depends_on_weights"] is False
    again = CliRunner().invoke(cli.main, ["sanity", "--model", "dog", "--images", str(phantom_images / "images.zarr"),
                                          "--out", str(out)])
    assert again.exit_code == 2 and "already exists" in again.output
    bad = CliRunner().invoke(cli.main, ["sanity", "--model", "no-such-model", "--images",
                                        str(phantom_images / "images.zarr"), "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "Traceback" not in bad.output and not (tmp_path / "x").exists()


def test_report_shows_the_sanity_verdict(tmp_path):
    from xbench.score.report import read_sanity, sanity_markdown

    d = tmp_path / "s"
    d.mkdir()
    (d / "sanity.json").write_text(json.dumps({"model": "clip-tiny", "method": "similarity", "mode": "cascading",
                                               "steps": [{"spearman_abs": 1.0, "ssim": 1.0},
                                                         {"spearman_abs": 0.2, "ssim": 0.1}],
                                               "depends_on_weights": True, "verdict": "x"}))
    checks = read_sanity([d])
    assert checks[0]["spearman_abs"] == 0.2
    assert "| clip-tiny | similarity | cascading | 0.200 | 0.100 | yes |" in sanity_markdown(checks)
    from xbench.score.report import ReportInputError

    with pytest.raises(ReportInputError):
        read_sanity([tmp_path / "none"])
