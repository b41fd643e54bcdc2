"""The hand-written tables of the docs that list plug-ins are held to the registries.

Adding a reader or a model means a row in docs/how-to/prepare.md or model_cards/README.md (CONTRIBUTING.md);
these tests fail while a row is missing, names something that is not registered, or states a split or a
card the code does not have. (The map-method table of docs/how-to/extract.md is checked by
tests/saliency/test_docs.py, the data-card index is generated: tests/datasets/test_declarations.py.)
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _table(text: str, header: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header line starts with ``header``, as cell lists."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_prepare_table_lists_the_paper_readers_with_their_splits():
    from xbench.extract.datasets import DATASETS
    from xbench.schemas import catalog

    rows = _table((ROOT / "docs" / "how-to" / "prepare.md").read_text(encoding="utf-8"), "| Key | `--root` holds |")
    keys = [_ticked(r[0])[0] for r in rows]
    assert keys == list(catalog.paper_keys())  # the paper's order, every paper dataset once
    for key, row in zip(keys, rows, strict=True):
        splits = tuple(s.strip() for s in row[2].split(","))
        assert splits == tuple(DATASETS.get(key).splits), key


def test_model_cards_table_names_every_registered_model_with_its_card():
    from xbench.extract.models import MODELS as REGISTERED
    from xbench.extract.models.catalog import MODELS

    text = (ROOT / "model_cards" / "README.md").read_text(encoding="utf-8")
    rows = _table(text, "| Card | Registry names |")
    listed: dict[str, set[str]] = {}
    for card_cell, names_cell, *_ in rows:
        link = re.fullmatch(r"\[([^\]]+)\]\(([^)]+)\)", card_cell)
        card = f"model_cards/{link.group(2)}" if link else ""
        if link:
            assert (ROOT / card).is_file(), card
        for name in _ticked(names_cell):
            listed.setdefault(name, set()).add(card)
    assert sorted(listed) == sorted(REGISTERED.names()) == sorted(MODELS)
    for name, info in MODELS.items():
        assert info.card in listed[name], f"{name}: its card {info.card or '(none)'} has no row naming it"


def test_the_checks_fail_on_a_drifted_table(tmp_path):
    """The helpers above really see a missing row (so the tests cannot pass vacuously)."""
    text = (ROOT / "model_cards" / "README.md").read_text(encoding="utf-8")
    rows = _table(text, "| Card | Registry names |")
    dropped = "\n".join(line for line in text.splitlines() if "`clip-tiny`" not in line)
    assert len(_table(dropped, "| Card | Registry names |")) == len(rows) - 1


def test_prepare_table_beyond_the_paper_lists_every_other_file_reader_with_its_splits():
    from xbench.extract.datasets import DATASETS
    from xbench.schemas import catalog

    rows = _table((ROOT / "docs" / "how-to" / "prepare.md").read_text(encoding="utf-8"), "| Key (beyond the paper) |")
    keys = [_ticked(r[0])[0] for r in rows]
    others = set(DATASETS.names()) - set(catalog.paper_keys()) - {"phantom"}  # phantom needs no files
    assert sorted(keys) == sorted(others) and len(keys) == len(set(keys))
    for key, row in zip(keys, rows, strict=True):
        splits = tuple(s.strip() for s in row[2].split(","))
        assert splits == tuple(DATASETS.get(key).splits), key
