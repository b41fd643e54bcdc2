"""The tutorials (docs/tutorials/: the phantom walk and the getting-started page of each user: researcher,
organiser, team) work as written, from an empty folder (issue 46 item 7).

Each page runs top to bottom in a folder of its own that starts empty: every `xbench...` line of its shell blocks
(through the umbrella, as tests/test_cli_docs.py runs the other pages) and every Python block, in page order.
Each must succeed (exit 0, no traceback), and afterwards every file the page's "What you have now" section names
must exist. Nothing is rewritten: the pages already use small sets, so what a reader runs is what runs here.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from xbench import cli

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
PAGES = sorted(p.name for p in TUTORIALS.glob("*.md"))
#: the users issue 46 names, each with a page; and the learning walk
EXPECTED = {"researcher.md", "organiser.md", "team.md", "phantom.md"}
PROGRAMS = {"xbench": None, **{f"xbench-{n}": n for n in ("prepare", "extract", "score", "validate", "convert")}}
#: "Keep them short": a getting-started page a reader follows in one sitting
MAX_LINES = 120


def steps(text: str) -> list[tuple[str, str]]:
    """("shell", command) and ("python", code) in page order: each xbench command of a shell block (continuation
    lines joined, comments dropped), each Python block whole."""
    out = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        if lang == "python":
            out.append(("python", body))
        elif lang in ("", "bash", "sh", "console"):
            for line in re.sub(r"\s*\\\n\s*", " ", body).splitlines():
                line = re.sub(r"\s+#.*$", "", line.strip().removeprefix("$ ")).strip()
                if line.split(" ", 1)[0] in PROGRAMS:
                    out.append(("shell", line))
    return out


def produced(text: str) -> list[str]:
    """The paths the page's "What you have now" section names: the backquoted names that open each bullet, before
    its first ": " (what follows says what the file is)."""
    section = text.split("## What you have now", 1)[1].split("\n## ", 1)[0]
    bullets = [ln.split(": ", 1)[0] for ln in section.splitlines() if ln.startswith("- ")]
    return [name for ln in bullets for name in re.findall(r"`([^`\s]+)`", ln)]


def _argv(line: str) -> list[str]:
    tokens = shlex.split(line)
    sub = PROGRAMS[tokens[0]]
    return tokens[1:] if sub is None else [sub, *tokens[1:]]


def test_every_user_has_a_page():
    assert EXPECTED <= set(PAGES)
    for name in PAGES:
        text = (TUTORIALS / name).read_text()
        assert len(text.splitlines()) <= MAX_LINES, f"{name}: keep a getting-started page short"
        assert any(kind == "shell" for kind, _ in steps(text)) and produced(text), name


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_the_page_runs_as_written_from_an_empty_folder(page, tmp_path, monkeypatch):
    text = (TUTORIALS / page).read_text()
    monkeypatch.chdir(tmp_path)
    for n, (kind, step) in enumerate(steps(text), 1):
        if kind == "python":
            exec(compile(step, f"{page}, block {n}", "exec"), {"__name__": "__tutorial__"})  # noqa: S102
            continue
        res = CliRunner().invoke(cli.main, _argv(step))
        assert res.exit_code == 0, f"{page}: `{step}` exited {res.exit_code}:\n{res.output}"
        assert "Traceback" not in res.output
    missing = [name for name in produced(text) if not (tmp_path / name).exists()]
    assert missing == [], f"{page} says it makes {missing}, which are not there"


def test_the_parser_reads_a_page():
    page = ("# T\n\n```bash\nxbench prepare phantom --out d \\\n    --n-cases 3   # small\nls d\n```\n\n"
            "```python\nprint(1)\n```\n\n```text\nxbench not-run\n```\n\n## What you have now\n\n"
            "- `d/images.zarr`, `d/gt.zarr`: stores\n- `r/metrics.json`: numbers of `dog` ([c](x.md))\n\n## Next\n\n"
            "- `no`\n")
    assert steps(page) == [("shell", "xbench prepare phantom --out d --n-cases 3"), ("python", "print(1)\n")]
    assert produced(page) == ["d/images.zarr", "d/gt.zarr", "r/metrics.json"]
