"""One name for the resample count (issue 47 item 4): ``bootstrap``, as the flag (``--bootstrap B``), a suite's
``score:``/``report:`` key and a platform's option already say. The older keywords ``n_boot`` and ``n_resamples``
name nothing in the code; the output keys that carry the count (metrics.json ``xbench.bootstrap.n_resamples``,
report.json and ``xbench compare --json``'s ``n_boot``) are strings of the contract and stay."""
from __future__ import annotations

import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OLD = ("n_boot", "n_resamples")


def identifiers_named(names, folders=("score", "schemas", "xbench", "extract", "tests", "benchmarks",
                                      "platforms"), root: Path = ROOT) -> list[str]:
    """``path:line name`` of every identifier (not a string, not a comment) spelled as one of ``names``; the
    expressions inside f-strings are read too (Python 3.11 tokenizes an f-string as one string)."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
                if tok.type == tokenize.NAME and tok.string in names:
                    found.append(f"{path.relative_to(root)}:{tok.start[0]} {tok.string}")
                elif tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").lower().startswith("f"):
                    body = tok.string
                    found += [f"{path.relative_to(root)}:{tok.start[0]} {n}" for n in names
                              if any(f"{{{n}{end}" in body or f"{{{n} " in body for end in ("}", ":", "!", " +", ")"))]
    return found


def test_the_old_names_of_the_count_are_gone():
    assert identifiers_named(OLD) == []


def test_the_check_sees_an_old_name(tmp_path):
    (tmp_path / "score").mkdir()
    (tmp_path / "score" / "m.py").write_text('def f(n_boot):\n    return {"n_boot": 1}\n'
                                             'def g(b):\n    return f"{n_resamples} x"\n')
    got = identifiers_named(OLD, ("score",), tmp_path)
    assert got == ["score/m.py:1 n_boot", "score/m.py:4 n_resamples"]


def test_every_command_declares_the_count_as_bootstrap():
    """Every option declaration with the resample-count field names it ``bootstrap`` (the flag --bootstrap,
    --n-boot still accepted)."""
    from xbench.schemas.options import RESAMPLES_FLAG, declared
    from xbench.score.options import ReportOptions, ScoreOptions
    from xbench.score.report.cli import CompareOptions
    from xbench.human import HumanOptions
    from xbench.package import CompetitionOptions

    for cls in (ScoreOptions, ReportOptions, CompareOptions, HumanOptions, CompetitionOptions):
        counts = [f.name for f, o in declared(cls) if o.flag == RESAMPLES_FLAG]
        assert counts == ["bootstrap"], cls
        assert [o.aliases for f, o in declared(cls) if f.name == "bootstrap"] == [("--n-boot",)]
