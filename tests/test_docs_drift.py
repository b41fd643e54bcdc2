"""Sentences of the docs that state a behaviour, checked against the behaviour (issue 35: each had drifted)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not (ROOT / "README.md").exists(), reason="no checkout")


def test_score_md_gives_the_out_default_xbench_score_has():
    from xbench.score.cli import score_command

    (param,) = [p for p in score_command.params if "--out" in p.opts]
    row = next(line for line in (ROOT / "docs/score.md").read_text().splitlines() if line.startswith("| `--out DIR`"))
    documented = re.search(r"\(default `([^`]+)`", row).group(1)
    assert documented == str(param.default) == "results"


def test_the_phantom_data_card_gives_the_licence_of_the_project():
    licence = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    card = (ROOT / "data_cards/phantom.md").read_text()
    stated = re.search(r"same licence as XBench \(([^,)]+)", card).group(1)
    assert stated == licence == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License")


@pytest.mark.parametrize("cache_dir", [None, "env"])
def test_the_warm_up_says_where_the_kernels_are_cached(monkeypatch, tmp_path, cache_dir):
    from click.testing import CliRunner

    from xbench.score.kernels import warm

    monkeypatch.setattr(warm, "warm_cache", lambda jobs: 0.25)
    if cache_dir is None:
        monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
        monkeypatch.setattr("xbench.score.kernels._numba_cache.choose_cache_dir", lambda package_dir, **kw: None)
        where = str(Path(warm.__file__).resolve().parent / "__pycache__")
    else:
        monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
        where = str(tmp_path)
    result = CliRunner().invoke(warm.warm, [])
    assert result.exit_code == 0, result.output
    out = result.output.strip()
    assert out == f"compiled {', '.join(warm.JOBS)} in 0.2 s; the kernels are cached in {where}"


def test_the_readme_puts_a_submissions_model_and_method_inside_the_xbench_attribute(tmp_path):
    from xbench.schemas.store import root_attrs

    attrs = root_attrs("submission", model="m", method="similarity")
    assert set(attrs) == {"xbench"} and {"model", "method"} <= set(attrs["xbench"])
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "a submission's also holds `model`, `method` and the provenance: inside `xbench`, not beside it" in readme


