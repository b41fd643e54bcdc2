"""The canonical vocabulary: consistency of findings.toml and the lookup functions."""
from __future__ import annotations

import tomllib

import pytest

from xbench.extract.datasets import DATASETS
from xbench.schemas import vocabulary as v
from xbench.schemas import DATASET_KEYS


def test_every_dataset_key_has_classes():
    assert set(v.dataset_keys()) == set(DATASET_KEYS)
    for key in DATASET_KEYS:
        assert len(v.classes_for(key)) >= 1


def test_class_counts_match_the_papers_datasets():
    # XBench paper: RSNA 1, SIIM 1, COVID 1, Det10 10, CheXlocalize 13, NIH 8; VinDr has 22 local labels.
    counts = {k: len(v.classes_for(k)) for k in v.dataset_keys()}
    assert counts == {"rsna_pneumonia": 1, "siim_acr": 1, "covid_rural": 1, "chestx_det10": 10,
                      "chexlocalize": 13, "chestxray14": 8, "vindr_cxr": 22, "phantom": 5,
                      "ms_cxr": 8, "reflacx": 22, "egd_cxr": 13}  # the gaze datasets: their data cards


def test_phantom_uses_exactly_the_agreed_names():
    assert v.classes_for("phantom") == ("Cardiomegaly", "Pleural effusion", "Consolidation", "Nodule", "Pneumothorax")


@pytest.mark.parametrize(
    "dataset, native, expected",
    [
        ("chestxray14", "Infiltrate", "Infiltration"),
        ("chestxray14", "Infiltration", "Infiltration"),
        ("chestxray14", "Effusion", "Pleural effusion"),
        ("chestx_det10", "Fibrosis", "Pulmonary fibrosis"),
        ("chestx_det10", "Effusion", "Pleural effusion"),
        ("chexlocalize", "Airspace Opacity", "Lung opacity"),
        ("chexlocalize", "Lung Opacity", "Lung opacity"),
        ("chexlocalize", "Pleural Effusion", "Pleural effusion"),
        ("vindr_cxr", "Pleural effusion", "Pleural effusion"),
        ("vindr_cxr", "ILD", "Interstitial lung disease"),
        ("vindr_cxr", "Enlarged PA", "Enlarged pulmonary artery"),
        ("vindr_cxr", "Nodule/Mass", "Nodule/Mass"),
        ("vindr_cxr", "Lung Opacity", "Lung opacity"),
        ("covid_rural", "groud_glass_opacity", "COVID-19"),
        ("covid_rural", "consolidation", "COVID-19"),
        ("rsna_pneumonia", "Lung Opacity", "Pneumonia"),
    ],
)
def test_canonical_mapping(dataset, native, expected):
    assert v.canonical(dataset, native) == expected


def test_nodule_mass_kept_apart_from_nodule_and_mass():
    names = {f.name for f in v.findings()}
    assert {"Nodule", "Mass", "Nodule/Mass"} <= names
    assert v.finding("Nodule/Mass").parent == "Lung lesion"


def test_unknown_label_lists_the_known_ones():
    with pytest.raises(v.UnknownLabelError, match=r"unknown chestx_det10 label 'Tuberculosis'; known labels: 'Atelectasis'"):
        v.canonical("chestx_det10", "Tuberculosis")
    with pytest.raises(v.UnknownLabelError, match="unknown dataset 'nih'"):
        v.classes_for("nih")
    with pytest.raises(v.UnknownLabelError, match="unknown finding 'Pleural Effusion'"):
        v.prompts("Pleural Effusion")  # case-sensitive: the canonical spelling is 'Pleural effusion'


def test_exact_case_is_required():
    with pytest.raises(v.UnknownLabelError):
        v.canonical("vindr_cxr", "Pleural Effusion")


def test_ignored_and_no_finding_labels_are_not_findings():
    assert v.is_ignored("covid_rural", "right_lung") and v.is_ignored("covid_rural", "left_lung")
    assert not v.is_ignored("covid_rural", "consolidation")
    assert v.is_no_finding("vindr_cxr", "No finding")
    with pytest.raises(v.UnknownLabelError):
        v.canonical("covid_rural", "right_lung")


def test_prompts_pair_positive_and_negative():
    for f in v.findings():
        assert f.prompts.positive and len(f.prompts.positive) == len(f.prompts.negative), f.name
        assert f.definition, f.name
    assert v.prompts("Pleural effusion") == v.Prompts(("Pleural effusion",), ("No pleural effusion",))


def test_grounding_classes():
    g = v.grounding_classes_for("chexlocalize")
    assert len(g) == 10
    assert set(v.classes_for("chexlocalize")) - set(g) == {"Pneumonia", "Pleural other", "Fracture"}
    assert v.grounding_classes_for("chestx_det10") == v.classes_for("chestx_det10")


def test_native_labels_inverse():
    assert set(v.native_labels("chestxray14", "Infiltration")) == {"Infiltrate", "Infiltration"}
    assert v.native_labels("chestxray14", "Edema") == ()


def test_readers_use_the_vocabulary():
    for key in DATASET_KEYS:
        if key == "phantom":
            continue
        assert DATASETS.get(key).classes == v.classes_for(key)


def _broken(doc: str) -> str:
    with pytest.raises(v.VocabularyError) as info:
        v._parse(tomllib.loads(doc))
    return str(info.value)


def test_inconsistent_toml_is_rejected():
    ok = '[findings.A]\ndefinition = "a"\npositive = ["A"]\nnegative = ["No A"]\n'
    assert v._parse(tomllib.loads(ok + '[datasets.d]\nclasses = ["A"]\n[datasets.d.labels]\na = "A"\n'))
    assert "class 'B' is not defined" in _broken(ok + '[datasets.d]\nclasses = ["A", "B"]\n[datasets.d.labels]\na = "A"\nb = "B"\n')
    assert "maps to 'C'" in _broken(ok + '[datasets.d]\nclasses = ["A"]\n[datasets.d.labels]\na = "A"\nc = "C"\n')
    assert "has no native label" in _broken(
        ok + '[findings.B]\ndefinition = "b"\npositive = ["B"]\nnegative = ["No B"]\n'
        '[datasets.d]\nclasses = ["A", "B"]\n[datasets.d.labels]\na = "A"\n')
    assert "as many negative prompts" in _broken('[findings.A]\ndefinition = "a"\npositive = ["A"]\nnegative = []\n')
