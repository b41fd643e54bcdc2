"""Free-text phrases through KAD and CARZero (tiny random networks, offline): a phrase whose text is what
the adapter feeds for a class gets exactly that class's score and map; the entity-vocabulary models stay
unsupported with their reason; phrase rows extract end to end."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xbench.extract.models.crossattn import carzero, devide, kad, mavl, medklip  # noqa: E402

CLASSES = ("Pleural effusion", "Pneumothorax", "Lung cavity", "Cardiomegaly")
SIZES = torch.tensor([[1000, 800], [700, 900], [640, 640]])


def images(n=3, size=80, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, size, size), generator=g, dtype=torch.uint8)


# (image row, class column) of each phrase: several phrases per image, classes repeated across images
PAIRS = [(0, 0), (0, 3), (1, 1), (2, 0), (2, 2), (1, 0)]


def _class_text_phrases(a):
    rows = torch.tensor([r for r, _ in PAIRS])
    texts = [a.prompts[c] for _, c in PAIRS]
    cats = [CLASSES[c] for _, c in PAIRS]
    return rows, texts, cats


def _assert_rows_equal_class_outputs(out, scores, maps):
    for q, (r, c) in enumerate(PAIRS):
        torch.testing.assert_close(scores[q], out.scores[r, c], atol=1e-5, rtol=0)
        torch.testing.assert_close(maps[q], out.maps[r, c], atol=1e-5, rtol=0)


def test_kad_phrase_with_the_class_text_is_the_class(tiny_bert, tiny_cache, tiny_config):
    # random weights drawn from a fixed seed: from whatever state earlier tests left, a draw can saturate KAD's
    # head so that two texts give one score to four digits (seen once in a full run)
    torch.manual_seed(0)
    a = kad.build(tiny_config("kad", tiny_bert, tiny_cache))
    assert a.supports_phrases and a.phrase_categories
    a.set_classes(CLASSES)
    out = a(images(), SIZES)
    rows, texts, cats = _class_text_phrases(a)
    scores, maps = a.phrase_outputs(images(), SIZES, texts, rows, categories=cats)
    assert scores.shape == (len(PAIRS),) and maps.shape == (len(PAIRS), *a.map_shape)
    _assert_rows_equal_class_outputs(out, scores, maps)
    # another text in the slot changes the outputs (the phrase is really encoded) ...
    other, other_maps = a.phrase_outputs(images(), SIZES, ["there is a mass"] + texts[1:], rows, categories=cats)
    assert not torch.allclose(other[0], scores[0]) and not torch.allclose(other_maps[0], maps[0])
    # ... and only that phrase's: each phrase sits in its own copy of the class set
    torch.testing.assert_close(other[1:], scores[1:], atol=1e-5, rtol=0)
    # KAD's queries attend to each other: the same text in another category's slot is another query set
    moved, _ = a.phrase_outputs(images(), SIZES, [texts[0]], rows[:1], categories=[CLASSES[1]])
    assert not torch.allclose(moved[0], out.scores[0, 1])


def test_kad_phrases_need_their_categories(tiny_bert, tiny_cache, tiny_config):
    a = kad.build(tiny_config("kad", tiny_bert, tiny_cache))
    a.set_classes(CLASSES)
    with pytest.raises(ValueError, match="category"):
        a.phrase_outputs(images(), SIZES, ["pleural effusion"], torch.tensor([0]))
    with pytest.raises(ValueError, match="not among the classes"):
        a.phrase_outputs(images(), SIZES, ["pleural effusion"], torch.tensor([0]), categories=["Edema"])


def test_carzero_phrase_with_the_class_text_is_the_class(tiny_bert, tiny_cache, tiny_config):
    a = carzero.build(tiny_config("carzero", tiny_bert, tiny_cache))
    assert a.supports_phrases and not a.phrase_categories  # no self-attention among queries: no context needed
    a.set_classes(CLASSES)
    out = a(images(), SIZES)
    rows, texts, _ = _class_text_phrases(a)
    assert texts[0] == "there is Pleural effusion"
    scores, maps = a.phrase_outputs(images(), SIZES, texts, rows)
    assert maps.shape == (len(PAIRS), *a.map_shape)
    _assert_rows_equal_class_outputs(out, scores, maps)
    # the phrase's own text, no template: "pleural effusion" is not "there is pleural effusion"
    bare, _ = a.phrase_outputs(images(), SIZES, ["pleural effusion"], rows[:1])
    assert not torch.allclose(bare[0], scores[0])
    # upstream's cleaning keeps two-word sentences only: a one-word phrase is the empty text, as upstream
    words, sentence = a.encode(["Cardiomegaly", ""])
    torch.testing.assert_close(words[0], words[1])
    one, one_map = a.phrase_outputs(images(), SIZES, ["Cardiomegaly."], rows[:1])
    assert torch.isfinite(one).all() and torch.isfinite(one_map).all()


@pytest.mark.parametrize("module,name", [(medklip, "medklip"), (mavl, "mavl"), (devide, "devide")])
def test_entity_vocabulary_models_stay_unsupported(module, name, tiny_bert, tiny_cache, tiny_config):
    a = module.build(tiny_config(name, tiny_bert, tiny_cache))
    assert not a.supports_phrases and "fixed entity vocabulary" in a.phrase_reason
    with pytest.raises(NotImplementedError, match="entity vocabulary"):
        a.phrase_outputs(images(), SIZES, ["pleural effusion"], torch.tensor([0]))


@pytest.fixture(scope="module")
def phrase_stores(tmp_path_factory):
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset

    out = tmp_path_factory.mktemp("phantom-phrases")
    prepare_dataset(PhantomReader(n_cases=6, size=64, phrases="true"), out, grid=(16, 16), image_size=64,
                    workers=1, progress=False, cases_per_block=4)
    return out


@pytest.mark.parametrize("model", ["kad", "carzero"])
def test_phrase_rows_extract_and_score(model, phrase_stores, tmp_path, tiny_bert, tiny_cache, tiny_config):
    from xbench.extract.runner import ExtractOptions, run_extraction
    from xbench.schemas import read_images, read_submission, validate_submission
    from xbench.score.scoring import score_submission

    sub = tmp_path / f"{model}.zarr"
    run_extraction(ExtractOptions(model=model, images=phrase_stores / "images.zarr", out=sub, workers=0, quiet=True,
                                  batch_size=3, cases_per_block=4, device="cpu",
                                  overrides=tiny_config(model, tiny_bert, tiny_cache)))
    assert validate_submission(sub, phrase_stores / "gt.zarr") == []
    ds = read_submission(sub).datasets["phantom"]
    q = read_images(phrase_stores / "images.zarr").datasets["phantom"].queries
    assert ds.query_id.tolist() == q.id.tolist() and np.isfinite(np.asarray(ds.query_saliency[:])).all()
    ph = score_submission(sub, phrase_stores / "gt.zarr", bootstrap=0).metrics["phrases"]["datasets"]["phantom"]
    assert not ph.get("unsupported") and ph["n_phrases"] == len(q) and ph["summary"]["pointing_game"] is not None
