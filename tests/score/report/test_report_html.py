"""The HTML page is well formed, self-contained, and every link and image in it resolves."""
from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Checker(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.refs, self.tags = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        for key in ("href", "src"):
            if key in a:
                self.refs.append((tag, a[key]))
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"unexpected </{tag}> at {self.getpos()}, open: {self.stack[-3:]}")
            return
        self.stack.pop()


def _parse(path: Path) -> _Checker:
    c = _Checker()
    c.feed(path.read_text(encoding="utf-8"))
    c.close()
    return c


def test_page_is_well_formed(built_report):
    text = (built_report / "index.html").read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    c = _parse(built_report / "index.html")
    assert c.errors == []
    assert c.stack == [], f"unclosed: {c.stack}"
    assert {"html", "head", "body", "style", "table", "img"} <= set(c.tags)
    assert "script" not in c.tags


def test_every_link_and_image_resolves_inside_the_report(built_report):
    c = _parse(built_report / "index.html")
    assert len([r for r in c.refs if r[0] == "img"]) >= 4 + 6
    for tag, ref in c.refs:
        u = urlparse(ref)
        assert not u.scheme and not u.netloc, f"external reference {ref}"
        target = (built_report / u.path).resolve()
        assert built_report.resolve() in target.parents, ref
        assert target.is_file() and target.stat().st_size > 0, ref


def test_page_has_the_tables_and_gaps(built_report):
    text = (built_report / "index.html").read_text(encoding="utf-8")
    for key in ('id="grounding"', 'id="grounding_fixed"', 'id="recognition"', 'id="gaps"', "<b>", "<u>"):
        assert key in text
