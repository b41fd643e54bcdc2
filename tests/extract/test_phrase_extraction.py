"""Phrase rows end to end on the phantom's phrase variant: prepare, extract (baselines and a dual encoder),
validate, score; the dual encoder's phrase maps equal its class maps for the same text."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xbench.extract.datasets.phantom import PhantomReader, phrase_text, draw_case
from xbench.extract.datasets.prepare import prepare_dataset
from xbench.extract.runner import ExtractOptions, run_extraction
from xbench.schemas import read_images, read_submission, validate_ground_truth, validate_images, validate_submission
from xbench.score.scoring import score_submission


@pytest.fixture(scope="module")
def phrase_stores(tmp_path_factory):
    out = tmp_path_factory.mktemp("phantom-phrases")
    prepare_dataset(PhantomReader(n_cases=6, size=64, phrases="true"), out, grid=(16, 16), image_size=64,
                    workers=1, progress=False, cases_per_block=4)
    return out


def test_phantom_phrase_variant_prepares_one_phrase_per_finding(phrase_stores):
    assert validate_images(phrase_stores / "images.zarr") == [] and validate_ground_truth(phrase_stores / "gt.zarr") == []
    ds = read_images(phrase_stores / "images.zarr").datasets["phantom"]
    want = [(i, c, phrase_text(draw_case(0, "test", i), c)) for i in range(6) for c in draw_case(0, "test", i).findings]
    got = list(zip(ds.queries.case.tolist(), ds.queries.category.tolist(), ds.queries.text.tolist()))
    assert got == want and len(got) >= 3


@pytest.mark.parametrize("model", ["dog", "clip-tiny"])
def test_phrase_rows_extract_validate_and_score(phrase_stores, tmp_path, model):
    sub = tmp_path / f"{model}.zarr"
    run_extraction(ExtractOptions(model=model, images=phrase_stores / "images.zarr", out=sub, workers=0, quiet=True,
                                  batch_size=4, cases_per_block=4, device="cpu"))
    assert validate_submission(sub, phrase_stores / "gt.zarr") == []
    s = read_submission(sub).datasets["phantom"]
    q = read_images(phrase_stores / "images.zarr").datasets["phantom"].queries
    assert s.query_id.tolist() == q.id.tolist()
    m = score_submission(sub, phrase_stores / "gt.zarr", bootstrap=10).metrics
    ph = m["phrases"]["datasets"]["phantom"]
    assert ph["n_phrases"] == len(q) and ph["summary"]["pointing_game"] is not None
    if model == "dog":  # the report shows phrase grounding beside the class tables
        from xbench.score.outputs.folder import write_outputs
        from xbench.score.report import build_report
        from xbench.score.scoring import score_submission as score

        res_dir = tmp_path / "res"
        write_outputs(score(sub, phrase_stores / "gt.zarr", bootstrap=10), res_dir)
        build_report(tmp_path / "report", [res_dir], bootstrap=0, overlays=False)
        md = (tmp_path / "report" / "leaderboard.md").read_text()
        assert "## Phrase grounding" in md and "Pleural effusion" in md.split("## Phrase grounding")[1]
        csv_text = (tmp_path / "report" / "phrases.csv").read_text()
        assert csv_text.splitlines()[0].startswith("model,dataset,category,n_phrases,pointing_game")


def test_dual_encoder_phrase_map_is_the_map_of_that_text(phrase_stores):
    from xbench.extract.models import create_adapter

    adapter = create_adapter("clip-tiny")
    ds = read_images(phrase_stores / "images.zarr").datasets["phantom"]
    images = torch.from_numpy(np.asarray(ds.image[0:2]))
    sizes = torch.from_numpy(np.asarray(ds.orig_size[0:2], dtype=np.int64))
    texts = ["left pneumothorax", "enlarged cardiac silhouette", "small nodule in the right lung"]
    rows = torch.tensor([1, 0, 1])
    scores, maps = adapter.phrase_outputs(images, sizes, texts, rows)
    # the same texts as "classes" with a bare "{}" template: the class maps of those images
    adapter.prompt_cfg = {"style": "single", "templates": ["{}"]}
    adapter.set_classes(texts)
    full = adapter(images, sizes).maps
    for q, r in enumerate(rows.tolist()):
        torch.testing.assert_close(maps[q], full[r, q], rtol=1e-5, atol=1e-6)
    assert scores.shape == (3,) and torch.all(scores.abs() <= 1 + 1e-6)
