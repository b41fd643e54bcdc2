"""The methods table in docs/how-to/extract.md and the CLI's --method help come from the registry."""
from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from xbench.extract.saliency import METHODS

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "extract.md"


def _table_rows() -> dict[str, list[str]]:
    text = DOC.read_text()
    body = text.split("<!-- methods-table: start -->")[1].split("<!-- methods-table: end -->")[0]
    rows = {}
    for line in body.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_docs_table_lists_every_method_as_registered():
    rows = _table_rows()
    assert sorted(rows) == METHODS.names()
    for name, (desc, ref, needs) in rows.items():
        m = METHODS.get(name)
        assert (desc, ref) == (m.description, m.reference)
        assert set(re.findall(r"[a-z_]+", needs)) - {"-"} == set(m.needs)


def test_cli_method_help_names_every_method():
    from xbench.extract.cli import main

    res = CliRunner().invoke(main, ["--help"], terminal_width=400)
    assert res.exit_code == 0
    help_text = " ".join(res.output.split())
    for name in METHODS.names():
        assert name in help_text
