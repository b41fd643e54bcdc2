"""index.html shows the phrase-grounding table (per category and the mean over categories, with intervals),
from the same rows and columns as leaderboard.md's phrase table; a report without phrase rows has none."""
from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser

from xbench.score.sections.phrases import phrase_columns
from xbench.score.report import build_report

HOSTILE = "<b>Nodule</b> & mass"


def _entry(v, ci=True):
    """A metrics.json "phrases" per-category or summary entry: every phrase key ``v`` + a per-key offset."""
    keys = ("pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best", "cnr", "cnr_signed")
    e = {k: v + 0.01 * i for i, k in enumerate(keys)}
    e["cnr"], e["cnr_signed"] = 1.5 + v, -(1.5 + v)
    if ci:
        e["ci95"] = {k: [e[k] - 0.05, e[k] + 0.125] for k in keys}
    return e


def _phrases(v, *, unsupported=False):
    if unsupported:
        return {"datasets": {"phantom": {"n_phrases": 4, "unsupported": True, "reason": "no free text",
                                         "summary": {k: None for k in _entry(0, ci=False)}}}}
    summary = _entry(v)
    ci = summary.pop("ci95")
    return {"datasets": {"phantom": {"n_phrases": 5, "summary": summary, "ci95": ci,
                                     "categories": {HOSTILE: dict(_entry(v + 0.1), n_phrases=2),
                                                    "disc": dict(_entry(v + 0.2, ci=False), n_phrases=3)}}}}


class _Rows(HTMLParser):
    """The text of every cell of <table id="phrases"> (and of its folded per-category part, id="phrases_categories"),
    row by row."""

    def __init__(self):
        super().__init__()
        self.rows, self._in, self._cell = [], False, None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and dict(attrs).get("id") in ("phrases", "phrases_categories"):
            self._in = True
        elif self._in and tag == "tr":
            self.rows.append([])
        elif self._in and tag in ("td", "th"):
            self._cell = ""
        elif self._in and tag == "br" and self._cell is not None:
            self._cell += "|"

    def handle_endtag(self, tag):
        if tag == "table":
            self._in = False
        elif self._in and tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def _copy(result_dirs, root, phrases):
    dirs = []
    for d in result_dirs:
        dst = root / d.name
        shutil.copytree(d, dst)
        if d.name in phrases:
            m = json.loads((dst / "metrics.json").read_text())
            m["phrases"] = phrases[d.name]
            (dst / "metrics.json").write_text(json.dumps(m))
        dirs.append(dst)
    return dirs


def _shown(key, v):
    return f"{v:.2f}" if key.startswith("cnr") else f"{100 * v:.2f}"


def test_index_html_has_the_phrase_table_with_intervals(result_dirs, tmp_path):
    dirs = _copy(result_dirs, tmp_path / "in", {"strong": _phrases(0.4), "weak": _phrases(0, unsupported=True)})
    build_report(tmp_path / "rep", dirs, bootstrap=0, overlays=False)
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "<h2>Phrase grounding</h2>" in page and '<a href="phrases.csv">phrases.csv</a>' in page
    assert "<b>Nodule</b>" not in page and "&lt;b&gt;Nodule&lt;/b&gt; &amp; mass" in page  # escaped
    p = _Rows()
    p.feed(page)
    head, *rows = p.rows
    cols = ["cnr", "cnr_signed", "pointing_game", "dice_fixed", "iou_fixed", "dice_best", "iou_best"]
    assert [k for k, _ in phrase_columns()] == cols  # the registry's phrase metrics, ratios first
    assert head == ["Model", "Dataset", "Category", "Phrases", "CNR", "CNR±", "Point", "Dice@0.5", "IoU@0.5",
                    "Dice", "IoU"]
    by = {tuple(r[:3]): r for r in rows if r[0] != "Model"}  # the folded table repeats the header row
    # the means over categories in the page, one per model; the per-category rows folded below them
    assert list(by) == [("strong", "Phantom", "all categories"), ("weak", "Phantom", "all categories"),
                        ("strong", "Phantom", HOSTILE), ("strong", "Phantom", "disc")]
    folded = page[page.index('<details class="categories">'):]
    assert "disc" in folded and "all categories" not in folded[:folded.index("</details>")]
    ph = _phrases(0.4)["datasets"]["phantom"]
    for scope, entry, ci, n in (("all categories", ph["summary"], ph["ci95"], "5"),
                                (HOSTILE, ph["categories"][HOSTILE], ph["categories"][HOSTILE]["ci95"], "2"),
                                ("disc", ph["categories"]["disc"], None, "3")):
        row = by[("strong", "Phantom", scope)]
        assert row[3] == n
        for k, cell in zip(cols, row[4:]):
            want = _shown(k, entry[k]) + (f"|{_shown(k, ci[k][0])}–{_shown(k, ci[k][1])}" if ci else "")
            assert cell == want, (scope, k)
    assert by[("weak", "Phantom", "all categories")][4:] == ["–"] * 7
    assert "Not scored: weak on phantom: no free text." in page
    # the same rows as leaderboard.md's phrase table and phrases.csv
    md = (tmp_path / "rep" / "leaderboard.md").read_text()
    assert md.count("| strong | phantom |") == 3 and "| weak | phantom | all categories |" in md
    assert (tmp_path / "rep" / "phrases.csv").read_text().splitlines()[0].endswith("cnr,cnr_signed,note")


def test_a_report_without_phrase_rows_has_no_phrase_table(built_report):
    page = (built_report / "index.html").read_text()
    assert 'id="phrases"' not in page and "Phrase grounding" not in page and "phrases.csv" not in page
