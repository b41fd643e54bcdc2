"""The dataset catalog (schemas/datasets.toml) is the one list of dataset keys: the schemas, the reader registry,
the finding vocabulary, the tables, the data cards and the docs all agree with it."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from xbench.schemas import catalog

ROOT = Path(__file__).resolve().parents[2]
#: docs that spell out the full list of keys in prose (one child group per dataset key)
PROSE_LISTS = ("README.md", "docs/contract.md", "schemas/README.md")


def test_keys_are_the_schemas_keys_in_the_contracts_order():
    from xbench.schemas import DATASET_KEYS

    assert DATASET_KEYS == catalog.keys()
    assert catalog.keys()[-1] == "phantom" and len(catalog.paper_keys()) == 7
    assert "phantom" not in catalog.paper_keys()


def test_the_reader_registry_lists_the_same_keys():
    from xbench.extract.datasets import DATASETS

    assert DATASETS.names() == sorted(catalog.keys())


def test_every_reader_says_its_own_key():
    pytest.importorskip("pydicom")
    from xbench.extract.datasets import DATASETS

    assert {k: DATASETS.get(k).key for k in catalog.keys()} == {k: k for k in catalog.keys()}


def test_the_vocabulary_maps_every_key():
    from xbench.schemas import vocabulary

    assert vocabulary.dataset_keys() == catalog.keys()


def test_tables_take_titles_and_order_from_the_catalog():
    from xbench.score.outputs.tables import dataset_order
    from xbench.score.table import DATASET_TITLES

    assert DATASET_TITLES == catalog.titles()
    assert list(DATASET_TITLES) == list(catalog.table_order())
    assert list(DATASET_TITLES)[:3] == ["covid_rural", "rsna_pneumonia", "siim_acr"]  # the paper's Table 1
    results = {"m": {"datasets": {"zzz": {}, "phantom": {}, "chestxray14": {}, "covid_rural": {}, "aaa": {}}}}
    assert dataset_order(results) == ["covid_rural", "chestxray14", "phantom", "aaa", "zzz"]


def test_every_key_has_a_data_card_titled_with_its_name():
    for key in catalog.keys():
        card = ROOT / catalog.card_path(key)
        assert card.is_file(), card
        assert card.read_text(encoding="utf-8").splitlines()[0] == f"# {catalog.entry(key).name} (`{key}`)"
    assert {p.stem for p in (ROOT / "data_cards").glob("*.md")} - {"README"} == set(catalog.keys())


def test_the_data_cards_index_is_the_catalog():
    rows = [ln for ln in (ROOT / "data_cards" / "README.md").read_text(encoding="utf-8").splitlines()
            if re.match(r"\| `[a-z0-9_]+` \|", ln)]
    expected = [f"| `{d.key}` | [{d.key}.md]({d.key}.md) | {d.annotation} | {d.access} |"
                for d in map(catalog.entry, catalog.keys())]
    assert rows == expected


_KEY_RUN = re.compile(r"(?:`[a-z0-9_]+`,?\s+(?:and\s+)?){5,}`[a-z0-9_]+`")


def key_lists(text: str) -> list[list[str]]:
    """Every run of six or more back-quoted names separated by commas (and 'and') in ``text``."""
    return [re.findall(r"`([a-z0-9_]+)`", m.group(0)) for m in _KEY_RUN.finditer(text)]


def test_key_lists_in_prose_are_found():
    text = "groups (`a`, `b`, `c`,\n`d`, `e`, `f`, and `g`) but not `x`, `y`"
    assert key_lists(text) == [list("abcdefg")]


@pytest.mark.parametrize("doc", PROSE_LISTS)
def test_the_docs_list_every_key_in_order(doc):
    found = [k for k in key_lists((ROOT / doc).read_text(encoding="utf-8")) if set(k) & set(catalog.keys())]
    assert found, f"{doc}: no list of dataset keys found"
    assert all(k == list(catalog.keys()) for k in found), found


def test_the_prepare_guide_lists_the_paper_sets_with_the_readers_splits():
    pytest.importorskip("pydicom")
    from xbench.extract.datasets import DATASETS

    text = (ROOT / "docs" / "how-to" / "prepare.md").read_text(encoding="utf-8").split("| Key (beyond the paper)")[0]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| [^|]*(?:\\\|[^|]*)* \| ([^|]+) \|", text, re.M)
    assert [k for k, _ in rows] == list(catalog.paper_keys())
    for key, splits in rows:
        assert tuple(s.strip() for s in splits.split(",")) == tuple(DATASETS.get(key).splits), key


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["datasets"]["siim_acr"].pop("title"), "dataset 'siim_acr': missing title"),
    (lambda d: d["datasets"]["siim_acr"].update(colour="red"), "unknown field(s) colour"),
    (lambda d: d["table_order"].remove("phantom"), "table_order must list every dataset key once"),
    (lambda d: d["datasets"]["phantom"].update(paper="no"), "paper must be true or false"),
    (lambda d: d["datasets"].update({"Bad-Key": d["datasets"]["phantom"]}), "a key is a lower-case identifier"),
])
def test_an_inconsistent_catalog_names_the_problem(edit, message):
    doc = tomllib.loads((ROOT / "schemas" / "datasets.toml").read_text(encoding="utf-8"))
    assert catalog.parse(doc)[0]  # the shipped file parses
    edit(doc)
    with pytest.raises(catalog.CatalogError) as err:
        catalog.parse(doc)
    assert message in str(err.value)


def test_an_unknown_key_names_the_known_ones():
    with pytest.raises(KeyError, match="unknown dataset key 'ms_cxx'; expected one of rsna_pneumonia"):
        catalog.entry("ms_cxx")
