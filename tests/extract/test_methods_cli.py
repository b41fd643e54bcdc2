"""Every map method beyond the paper's three runs through ``xbench-extract`` for an open_clip and a
transformers dual encoder (issue 15): a valid submission whose maps are finite and differ from the
similarity method's (a method that silently fell back to it would pass a shape check)."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from xbench.extract.cli import main
from xbench.extract.saliency import METHODS
from xbench.schemas import read_submission, validate_submission

PAPER = {"similarity", "maskclip", "gradcam"}
NEW = sorted({n for n in METHODS.names() if "decoder" not in METHODS.get(n).needs} - PAPER)  # dual encoders'


def _extract(images, out, method, backend):
    args = backend + ["--images", str(images), "--out", str(out), "--method", method, "--workers", "0",
                      "--batch-size", "4", "--limit", "4", "--quiet"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return read_submission(out).datasets["phantom"].saliency[...].astype(np.float64)


@pytest.fixture(scope="module")
def backends(tiny_open_clip, tiny_hf, tmp_path_factory):
    cfg = tmp_path_factory.mktemp("cfg") / "tiny.yaml"
    cfg.write_text(f"adapter: open_clip\nmodel: local-dir:{tiny_open_clip}\nweights: random\n")
    return {"open_clip": ["--model", str(cfg)],
            "transformers": ["--model", "transformers", "--model-option", f"model={tiny_hf['clip']}"]}


def test_the_new_methods_are_registered():
    assert {"rollout", "chefer", "clip_surgery", "gem"} <= set(NEW)


@pytest.mark.parametrize("backend", ["open_clip", "transformers"])
def test_new_methods_through_the_cli(phantom_images, tmp_path, backends, backend):
    images = phantom_images / "images.zarr"
    base = _extract(images, tmp_path / "similarity.zarr", "similarity", backends[backend])
    for method in NEW:
        out = tmp_path / f"{method}.zarr"
        maps = _extract(images, out, method, backends[backend])
        assert read_submission(out).attrs["method"] == method
        assert validate_submission(out) == []  # --limit 4: a partial run, so no check against the gt
        assert np.isfinite(maps).all() and maps.shape == base.shape
        assert not np.allclose(maps, base), f"{method} gives the similarity maps"
