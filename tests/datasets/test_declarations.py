"""Each reader declares its catalog entry and label map beside its code (extract/datasets/<module>.toml);
schemas/datasets.toml, the datasets' tables of schemas/findings.toml and the data-card index are generated
from those declarations (xbench.extract.datasets.declarations), not kept by hand."""
from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from xbench.extract.datasets import DATASETS
from xbench.extract.datasets import declarations as D
from xbench.schemas import catalog, vocabulary
from xbench.schemas.registry import declared_entries

THROWAWAY = '''\
# A throw-away reader's declaration.
key = "throwaway_set"

[catalog]
name = "Throw-away set"
title = "Throwaway"
annotation = "boxes (test)"
access = "made by this test"
paper = false

[vocabulary]
# One class, read from the native label "opacity".
classes = ["Pneumonia"]
[vocabulary.labels]
"opacity" = "Pneumonia"
'''


def test_the_generated_files_are_up_to_date():
    assert D.stale() == [], "run: python -m xbench.extract.datasets.declarations --write"
    assert D.main([]) == 0


def test_every_reader_module_has_its_declaration_and_the_other_way_round():
    by_key = D.declarations()
    assert sorted(by_key) == DATASETS.names() == sorted(catalog.keys())
    for module in sorted(D.HERE.glob("*.py")):
        for key in declared_entries(module, "REGISTER"):
            assert by_key[key].source == module.with_suffix(".toml"), key
    for key, d in by_key.items():
        reader = DATASETS.get(key)
        assert reader.classes == tuple(d.vocabulary["classes"]) == vocabulary.classes_for(key)
        assert catalog.entry(key).title == d.catalog["title"]


@pytest.fixture
def sandbox(tmp_path):
    """A copy of the generated files and of the declarations, to add a reader to."""
    root, folder = tmp_path / "root", tmp_path / "declarations"
    for path in D.TARGETS.values():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(D.PACKAGE_ROOT / path, root / path)
    folder.mkdir()
    for toml in D.HERE.glob("*.toml"):
        shutil.copy(toml, folder)
    return root, folder


def test_a_new_reader_s_declaration_reaches_every_generated_file(sandbox):
    root, folder = sandbox
    (folder / "throwaway.toml").write_text(THROWAWAY)
    assert D.stale(root, folder) == [str(p) for p in D.TARGETS.values()]
    out = D.render(root, folder)
    entries, order = catalog.parse(tomllib.loads(out["datasets"]))  # the shared layer's own checks accept it
    assert [e.key for e in entries][-1] == "throwaway_set" and order[-1] == "throwaway_set"
    assert [e.key for e in entries][:-1] == list(catalog.keys()) and order[:-1] == catalog.table_order()
    vocab = vocabulary._parse(tomllib.loads(out["findings"]))
    assert vocab.datasets["throwaway_set"].classes == ("Pneumonia",)
    assert "# One class, read from the native label \"opacity\".\n" in out["findings"]  # comments are kept
    assert "| `throwaway_set` | [throwaway_set.md](throwaway_set.md) | boxes (test) | made by this test |\n" in out["cards"]
    for name, text in out.items():  # written, they are up to date; the other datasets' text is unchanged
        (root / D.TARGETS[name]).write_text(text)
    assert D.stale(root, folder) == []
    (folder / "throwaway.toml").unlink()
    assert D.render(root, folder) == {n: (D.PACKAGE_ROOT / p).read_text() for n, p in D.TARGETS.items()}


@pytest.mark.parametrize("text, message", [
    (THROWAWAY.replace('key = "throwaway_set"', 'key = "Throwaway Set"'), "lower-case identifier"),
    (THROWAWAY.replace("[vocabulary]", "[vocab]").replace("[vocabulary.labels]", "[vocab.labels]"),
     re.escape("needs a [catalog] table and a [vocabulary] table")),
    ('key = "throwaway_set"\n' + THROWAWAY[THROWAWAY.index("[vocabulary]"):] + "\n"
     + THROWAWAY[THROWAWAY.index("[catalog]"):THROWAWAY.index("[vocabulary]")], "in that order"),
    (THROWAWAY.replace("paper = false\n", "paper = false\n\n[catalog.more]\nx = 1\n"), "do not read back"),
    (THROWAWAY.replace('name = "Throw-away set"\n', 'name = "Throw-away set"\n\n'), "do not read back"),
    (THROWAWAY.replace("key =", "key = = "), "Invalid"),
])
def test_a_bad_declaration_is_named(sandbox, text, message):
    root, folder = sandbox
    (folder / "throwaway.toml").write_text(text)
    with pytest.raises(D.DeclarationError, match=message) as info:
        D.render(root, folder)
    assert "throwaway.toml" in str(info.value) or message == "do not read back"


def test_a_key_declared_twice_is_refused(sandbox):
    root, folder = sandbox
    (folder / "again.toml").write_text((folder / "rsna.toml").read_text())
    with pytest.raises(D.DeclarationError, match="already declared by"):
        D.render(root, folder)


def test_the_index_table_of_the_cards_is_the_generated_one():
    text = (D.PACKAGE_ROOT / "data_cards" / "README.md").read_text()
    for key in catalog.keys():
        assert f"| `{key}` | [{key}.md]({key}.md) |" in text
        assert Path(D.PACKAGE_ROOT / catalog.card_path(key)).is_file()
