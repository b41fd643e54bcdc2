"""Default prompts: the authors' own text per dataset where their code publishes it
(extract/models/prompts.toml), recorded with its origin in the provenance, overridable by config."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from xbench.schemas import vocabulary  # noqa: E402
from xbench.extract.models import presets  # noqa: E402
from xbench.extract.models.crossattn import carzero, common, devide, kad  # noqa: E402
from xbench.extract.models.prompts import _published, build_prompts, model_prompts  # noqa: E402

CXR14 = vocabulary.classes_for("chestxray14")


def _kad(tiny_bert, tiny_cache, tiny_config, dataset=None, **extra):
    a = kad.build(tiny_config("kad", tiny_bert, tiny_cache, **extra))
    a.dataset = dataset
    a.set_classes(CXR14)
    return a


def test_kad_chestxray14_uses_the_authors_text(tiny_bert, tiny_cache, tiny_config):
    a = _kad(tiny_bert, tiny_cache, tiny_config, "chestxray14")
    got = dict(zip(CXR14, a.prompts))
    # test_chestxray14.py sends "lung nodule" / "lung mass" / "pleural effusion", not the bare class names
    assert got["Nodule"] == "lung nodule" and got["Mass"] == "lung mass"
    assert got["Pleural effusion"] == "pleural effusion" and got["Infiltration"] == "infiltration"
    prov = a.provenance()["prompts"]
    assert prov["positive"] == got and prov["style"] == "single"
    assert all("test_chestxray14.py:105" in prov["origin"][c] for c in CXR14)


def test_kad_text_features_encode_the_chosen_prompt(tiny_bert, tiny_cache, tiny_config):
    """Independent check that the dataset prompt is what reaches the text encoder."""
    a = _kad(tiny_bert, tiny_cache, tiny_config, "chestxray14")
    tok = a.tokenizer(["lung nodule", "Nodule"], add_special_tokens=True, padding="max_length", truncation=True,
                      max_length=a.max_length, return_tensors="pt")
    with torch.no_grad():
        want = a.text_encoder.encode_text(tok["input_ids"], tok["attention_mask"])
    row = CXR14.index("Nodule")
    torch.testing.assert_close(a.text_features[row], want[0])
    assert not torch.allclose(want[0], want[1])  # the bare name would give other features


def test_kad_without_a_published_table_uses_the_template(tiny_bert, tiny_cache, tiny_config):
    for dataset in (None, "vindr_cxr", "phantom"):
        a = _kad(tiny_bert, tiny_cache, tiny_config, dataset)
        assert a.prompts == tuple(vocabulary.prompts(c).positive[0] for c in CXR14)
        assert all(o.startswith("template '{}'") for o in a.provenance()["prompts"]["origin"].values())


def test_kad_chestx_det10_and_chexlocalize_tables():
    det10, src = model_prompts("kad").for_dataset("chestx_det10")
    assert det10["Pleural effusion"] == "Effusion" and det10["Pulmonary fibrosis"] == "Fibrosis"
    assert "plot_visualize_512.py:78" in src
    chex, src = model_prompts("kad").for_dataset("chexlocalize")
    assert sorted(chex) == ["Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural effusion"]
    assert "test_chexpert.py:104" in src


def test_config_overrides_win(tiny_bert, tiny_cache, tiny_config):
    a = _kad(tiny_bert, tiny_cache, tiny_config, "chestxray14", prompts={"classes": {"nodule": "a nodule"}})
    got = dict(zip(CXR14, a.prompts))
    assert got["Nodule"] == "a nodule" and got["Mass"] == "lung mass"  # per class; others keep the table
    assert a.provenance()["prompts"]["origin"]["Nodule"] == "config prompts.classes"
    a = _kad(tiny_bert, tiny_cache, tiny_config, "chestxray14", prompts={"positive": "there is {}"})
    assert dict(zip(CXR14, a.prompts))["Nodule"] == "there is Nodule"  # a user template beats the table
    a = _kad(tiny_bert, tiny_cache, tiny_config, None, prompts={"dataset": "chestxray14"})
    assert dict(zip(CXR14, a.prompts))["Mass"] == "lung mass"  # the table picked by config
    a = _kad(tiny_bert, tiny_cache, tiny_config, "chestxray14", prompts={"classes": {"Hernia": None, "Mass": None}})
    assert a.unsupported == ("Mass",)


def test_carzero_and_devide_defaults(tiny_bert, tiny_cache, tiny_config):
    a = carzero.build(tiny_config("carzero", tiny_bert, tiny_cache))
    a.dataset = "chestxray14"  # CARZero publishes no prompts: the dataset changes nothing
    a.set_classes(["Pleural effusion", "Nodule"])
    assert a.prompts == ("there is Pleural effusion", "there is Nodule")
    assert "not published" in a.provenance()["prompts"]["origin"]["Nodule"]
    d = devide.build(tiny_config("devide", tiny_bert, tiny_cache))
    d.set_classes(["Nodule"])
    assert d.prompts == ("Nodule",) and "DeViDe" in d.provenance()["prompts"]["origin"]["Nodule"]


def test_bad_template_is_a_config_error():
    with pytest.raises(common.AdapterConfigError, match="placeholder"):
        common.prompt_texts(["Nodule"], {"prompts": {"positive": "no slot"}}, "kad")


def test_packaged_table_is_consistent():
    """Every dataset table names real datasets and their canonical classes; templates have a slot."""
    data = _published()
    assert {"kad", "carzero", "devide", "biomedclip", "clip"} <= set(data)
    for model, entry in data.items():
        assert entry.get("origin"), model
        if "template" in entry:
            assert "{}" in entry["template"], model
        for dataset, table in (entry.get("datasets") or {}).items():
            assert dataset in vocabulary.dataset_keys(), (model, dataset)
            assert ":" in table["source"]  # file:line
            assert set(table["classes"]) <= set(vocabulary.classes_for(dataset)), (model, dataset)
            assert all(isinstance(v, str) and v.strip() for v in table["classes"].values())


def test_biomedclip_preset_records_the_model_card_and_user_text_drops_it():
    cfg = presets._with(presets.BIOMEDCLIP_DEFAULTS, {})
    p = build_prompts(["Nodule"], cfg["prompts"]).to_dict(["Nodule"])
    assert p["positive"]["Nodule"] == "this is a photo of " + vocabulary.prompts("Nodule").positive[0]
    assert "model card" in p["origin"]
    cfg = presets._with(presets.BIOMEDCLIP_DEFAULTS, {"prompts": {"positive": "an x-ray with {}"}})
    p = build_prompts(["Nodule"], cfg["prompts"]).to_dict(["Nodule"])
    assert p["positive"]["Nodule"].startswith("an x-ray with ") and "origin" not in p
    assert "origin" in presets._with(presets.CLIP_DEFAULTS, {"prompts": {"style": "pair"}})["prompts"]
