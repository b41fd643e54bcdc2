"""Every link and every cited docs path resolves (issue 46 item 7: the docs were split by purpose into
tutorials/, how-to/, reference/ and explanation/, and a moved page must not leave a dead link or a stale path in
an error message, a docstring, a card or a test).

Checked:
* every relative Markdown link of the project's Markdown files names an existing file, and its ``#anchor`` a
  heading of that file (GitHub's anchor rule: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``);
* every ``docs/<page>.md`` path written anywhere in the repository's tracked text files exists;
* docs/index.md links every page under docs/, so each page is reachable from the one that says who reads what.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]*?\.md\b")


def _tracked() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def _markdown() -> list[Path]:
    return [p for p in _tracked() if p.suffix == ".md" and ".venv" not in p.parts]


def anchors(text: str) -> set[str]:
    """GitHub's anchors of the headings of ``text`` (code blocks left out)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def link_problems(path: Path, text: str, root: Path = ROOT) -> list[str]:
    problems = []
    for target in LINK.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        where = f"{path.relative_to(root).as_posix()}: ({target})"
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(errors="replace")):
            problems.append(f"{where}: no heading '#{anchor}' in {dest.name}")
    return problems


def test_every_markdown_link_resolves():
    problems = [p for md in _markdown() for p in link_problems(md, md.read_text(errors="replace"))]
    assert problems == []


def test_every_cited_docs_path_exists():
    problems = []
    for path in _tracked():
        if path.suffix in (".png", ".zip", ".npz", ".h5", ".crt", ".ico") or "fixtures" in path.parts:
            continue
        text = path.read_text(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            for cited in DOCS_PATH.findall(line):
                if not (ROOT / cited).is_file():
                    problems.append(f"{path.relative_to(ROOT).as_posix()}:{n}: {cited}: no such file")
    assert problems == []


def test_the_index_links_every_page():
    index = ROOT / "docs" / "index.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for t in LINK.findall(index.read_text())}
    pages = {p.resolve() for p in (ROOT / "docs").rglob("*.md")} - {index.resolve()}
    assert sorted(p.relative_to(ROOT).as_posix() for p in pages - linked) == []


def test_the_checks_catch_a_dead_link(tmp_path):
    (tmp_path / "docs/how-to").mkdir(parents=True)
    (tmp_path / "docs/contract.md").write_text("# XBench contract\n\n## Exit codes of every command\n")
    page = tmp_path / "docs/how-to/score.md"
    text = ("[ok](../contract.md#exit-codes-of-every-command) [gone](../score.md) [bad](../contract.md#exit-codes) "
            "[web](https://example.org/x.md)\n```\n[in code](nowhere.md)\n```\n")
    assert link_problems(page, text, tmp_path) == [
        "docs/how-to/score.md: (../score.md): no such file",
        "docs/how-to/score.md: (../contract.md#exit-codes): no heading '#exit-codes' in contract.md"]
    assert DOCS_PATH.findall("see docs/how-to/score.md, and docs/contract.md.") == ["docs/how-to/score.md",
                                                                                  "docs/contract.md"]


def _headings(text: str) -> list[str]:
    """The Markdown headings' marks ("#", "##", ...) outside code fences, in order."""
    marks, fence = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            marks.append(line.split(" ", 1)[0])
    return marks


def test_every_docs_page_has_one_title_first():
    """Each page under docs/ opens with its one level-1 title, sections below it (the how-to pages moved in from
    the old layout began at ``##``, or had several ``#`` sections)."""
    bad = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        marks = _headings(page.read_text(encoding="utf-8"))
        if not marks or marks[0] != "#" or marks.count("#") != 1:
            bad[str(page.relative_to(ROOT))] = marks[:4]
    assert bad == {}


def test_the_title_check_sees_code_fences():
    assert _headings("# T\n```bash\n# a comment\n```\n## S\n") == ["#", "##"]
    assert _headings("## S\n# T\n") == ["##", "#"]
