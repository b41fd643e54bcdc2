"""The report page as a reader sees it (issue 35 item 9), checked in the HTML and in a real browser.

The fixture is the report of four synthetic models with stores (so overlays are drawn), one of them carrying a
human ceiling (simulated readers) and a faithfulness section made by the real code paths, one recorded as
untrained (random weights) and one as a baseline. HTML assertions check the structure; headless Chromium (skipped
when it is not installed: ``apt-get install chromium``) renders the page, measures it through the DOM and takes a
screenshot (kept under the test's folder to look at).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

import report_fixtures

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def _human(result_dir, reader_dir, folder):
    """A human folder by hand (xbench human's layout) whose one simulated reader is ``reader_dir``'s counts, and the
    ``human`` section it gives ``result_dir``'s metrics.json (the functions of score/sections/human/)."""
    import numpy as np

    from xbench.score.sections.pair_counts import read_counts_file
    from xbench.score.metrics.grounding import FIXED_THRESHOLD_INDEX
    from xbench.score.sections.human.ceiling import ReaderReading
    from xbench.score.sections.human.reading import READING_FILE, load_human, save_reading
    from xbench.score.sections.human.section import human_block

    (folder / "readers" / "R1").mkdir(parents=True)
    shutil.copy(reader_dir / "pair_counts.npz", folder / "readers" / "R1" / "pair_counts.npz")
    m = json.loads((result_dir / "metrics.json").read_text())
    datasets = list(m["datasets"])
    reader_counts, _ = read_counts_file(reader_dir / "pair_counts.npz")
    cols = {k: [] for k in ("case_id", "cls", "iou", "hit")}
    cases = set()
    for dc in reader_counts.values():  # the reading (schema 2): every pair of the reader's counts, hit as counted
        b, br = dc.b[:, FIXED_THRESHOLD_INDEX], dc.br[:, FIXED_THRESHOLD_INDEX]  # the region at the fixed threshold
        cols["case_id"] += dc.case_id[dc.pair_case].astype(str).tolist()
        cols["cls"] += [dc.classes[k] for k in dc.pair_class]
        cols["iou"] += (br / np.maximum(b + dc.region_pixels - br, 1)).tolist()
        cols["hit"] += dc.hit.astype(float).tolist()
        cases |= set(dc.case_id.astype(str).tolist())
    n = len(cols["case_id"])
    save_reading(folder / "readers" / "R1" / READING_FILE, ReaderReading(
        case_id=np.asarray(cols["case_id"], str), cls=np.asarray(cols["cls"], str), gt=np.ones(n, bool),
        seg=np.ones(n, bool), iou=np.asarray(cols["iou"], float), hit=np.asarray(cols["hit"], float),
        cases=np.asarray(sorted(cases), str)))
    (folder / "human.json").write_text(json.dumps({
        "xbench": {"kind": "human-ceiling", "schema": 2,
                   "rule": "1 simulated reader(s) of the phantom, each against the ground truth"},
        "datasets": {d: {"readers": ["R1"]} for d in datasets}}))
    counts, _ = read_counts_file(result_dir / "pair_counts.npz")
    m["human"] = human_block(m, counts, load_human(folder), bootstrap=20, seed=0)
    (result_dir / "metrics.json").write_text(json.dumps(m))


def _faithfulness(result_dir, tmp):
    """The faithfulness section of ``result_dir`` through the real flow: xbench perturb's make_round2 on its
    stores, a "model" scoring each round-2 image (mean grey), the round-2 scores read back through the key."""
    from xbench.schemas import read_images, read_submission
    from xbench.schemas.perturb import Round2Options, make_round2
    from xbench.schemas.submission import DatasetSpec, SubmissionWriter
    from xbench.score.sections.faithfulness import add_section, faithfulness_section, load_round2

    m = json.loads((result_dir / "metrics.json").read_text())
    inputs = m["xbench"]["inputs"]
    sub = read_submission(inputs["submission"])
    make_round2(sub, read_images(inputs["images"]), tmp / "r2.zarr", tmp / "r2.key.npz",
                Round2Options(curves=("deletion", "insertion"), steps=3, grid=8, seed=1, limit=6))
    r2 = read_images(tmp / "r2.zarr")
    specs, scores = {}, {}
    for d, ds in r2.datasets.items():
        ids = [str(x) for x in ds.case_id]
        grey = np.asarray(ds.image[:], dtype=np.float64).mean(axis=(1, 2)) / 255.0
        scores[d] = np.repeat(grey[:, None], len(ds.classes), axis=1).astype(np.float32)
        specs[d] = DatasetSpec(ids, list(ds.classes), (1, 1), "probability")
    w = SubmissionWriter.create(tmp / "r2-sub.zarr", model="m", method="t", scores_only=True, datasets=specs,
                                cases_per_block=64)
    for d in specs:
        for b in w.blocks_todo(d):
            s, e = w.block_rows(d, b)
            w.write_block(d, b, scores[d][s:e], None)
    w.finish()
    key, curves, info = load_round2(tmp / "r2-sub.zarr", tmp / "r2.key.npz")
    add_section(m, faithfulness_section(key, curves, info, bootstrap=20, seed=0, round2_name="r2-sub"))
    (result_dir / "metrics.json").write_text(json.dumps(m))


def _provenance(result_dir, config: dict, adapter: dict):
    m = json.loads((result_dir / "metrics.json").read_text())
    m["xbench"].setdefault("submission", {}).update({"config": config, "adapter": adapter})
    (result_dir / "metrics.json").write_text(json.dumps(m))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from xbench.score.report import build_report

    root = tmp_path_factory.mktemp("browser")
    dirs = report_fixtures.make_results(root, n_cases=16, stores=True,
                                        skills=(("strong", 0.9), ("clip-tiny", 0.6), ("center", 0.3), ("weak", 0.0)))
    strong, tiny, center, _ = dirs
    _human(strong, center, root / "human")
    _faithfulness(strong, root)
    _provenance(tiny, {"adapter": "clip-tiny", "name": "clip-tiny", "weights": "random"},
                {"adapter": "OpenCLIP", "weights": "random"})
    _provenance(center, {"adapter": "center", "name": "center"}, {"adapter": "CenterBaseline"})
    out = root / "report"
    build_report(out, dirs, bootstrap=20, seed=1)
    return out, (out / "index.html").read_text()


def _h2(text: str) -> list[str]:
    return re.findall(r"<h2>(.*?)</h2>", text)


# ------------------------------------------------------------------------------------------------ the HTML
def test_results_sections_come_before_figures_and_definitions_last(page):
    _, text = page
    heads = _h2(text)
    assert heads[-1] == "Definitions"
    assert heads.index("Human ceiling") < heads.index("Figures")
    assert heads.index("Faithfulness") < heads.index("Figures")


def test_human_and_faithfulness_tables_have_the_report_style(page):
    _, text = page
    for section, end in (("<h2>Human ceiling</h2>", "</section>"), ("<h2>Faithfulness</h2>", "<h2>Figures</h2>")):
        part = text[text.index(section):]
        part = part[:part.index(end)]
        tables = re.findall(r"<div class=\"scroll\"><table class=\"lb\"", part)
        assert tables and len(tables) == part.count("<table"), section


def test_human_lines_say_what_the_numbers_are(page):
    _, text = page
    part = text[text.index("<h2>Human ceiling</h2>"):text.index("</section>")]
    lines = re.findall(r"<li>(human ceiling .*?)</li>", part)
    assert lines and "simulated reader(s)" in lines[0]
    # "pointing_game 73.0% (model at 55% of it)", not "pointing_game 73.0 (55% of human)"
    assert re.search(r"pointing_game \d+\.\d% \(model at \d+% of it\)", lines[0]), lines[0]
    assert "Simulated readers of the phantom" in part and "Radiologists" not in part


def test_human_lines_of_radiologists_are_not_called_simulated():
    from xbench.score.sections.human.tables import human_lines, simulated

    metrics = {"human": {"source": {"rule": "radiologist annotations of CheXlocalize"}, "datasets": {}}}
    assert not simulated(metrics) and simulated({"human": {"source": {"rule": "3 simulated reader(s)"}}})
    assert human_lines(metrics) == []


def test_interval_captions_agree_with_the_cells(page):
    """A caption that says "in brackets" belongs to a table whose intervals are in brackets."""
    _, text = page
    for m in re.finditer(r"<div class=\"scroll\">(<table.*?</table>)</div>(<p class=\"caption\">(.*?)</p>)?", text, re.S):
        table, caption = m.group(1), m.group(3) or ""
        ranges = re.search(r'<span class="ci">[-\d.]+–[-\d.]+</span>', table)
        if ranges:
            assert "in brackets" not in caption, caption
    for section in ("<h2>Human ceiling</h2>", "<h2>Faithfulness</h2>"):
        part = text[text.index(section):]
        part = part[:part.index("<h2>", 5)]
        assert "in brackets" in part and re.search(r"\[[-+\d.]+, [-+\d.]+\]", part)


def test_untrained_and_baseline_models_are_marked(page):
    _, text = page
    board = text[text.index("<h2>Leaderboard</h2>"):text.index("<h3>")]
    assert re.search(r"<b>clip-tiny \(untrained\)</b><span class=\"tag untrained\">untrained</span> untrained: its weights are random", board)
    assert '<b>center</b><span class="tag baseline">baseline</span>' in board
    assert "strong</b>" not in board and "weak</b>" not in board  # no provenance recorded: no note
    assert '<th class="model">clip-tiny (untrained)</th>' in text  # the name says it (every table does), no second tag


def test_overlays_are_folded_but_the_top_models(page):
    out, text = page
    from xbench.score.report.html import OVERLAYS_OPEN

    figs = re.findall(r"<details class=\"overlay\"( open)?><summary>(.*?)</summary>", text)
    pngs = list((out / "figures").glob("overlay_*.png"))
    assert len(figs) == len(pngs) > OVERLAYS_OPEN
    assert sum(bool(o) for o, _ in figs) == OVERLAYS_OPEN and figs[0][0]
    assert figs[0][1].startswith("strong on ")  # the top-ranked model's figure is the one shown
    assert "outlined in white" in text and "marks the map's maximum" in text and "cyan" not in text


def test_phrase_table_shows_the_means_and_folds_the_categories():
    from xbench.score.report.html import _scope_html
    from xbench.score.table import Cell, Table

    t = Table(title="Phrase grounding", key="phrases", columns=[(None, None, "cnr")], caption="c",
              index=("Model", "Dataset", "Category", "Phrases"))
    for model in ("a", "b"):
        for cat in ("all categories", "Nodule", "Mass"):
            t.rows[(model, "Phantom", cat, "3")] = [Cell(0.5, None)]
    html = _scope_html(t, {})
    top, folded = html.split("<details", 1)
    assert top.count("all categories") == 2 and "Nodule" not in top
    assert folded.count("Nodule") == 2 and folded.count("Mass") == 2 and "all categories" not in folded


def test_phrase_caption_explains_the_signed_cnr():
    from xbench.score.sections.plugins.phrases import phrase_table

    metrics = {"phrases": {"datasets": {"phantom": {"n_phrases": 2, "summary": {"cnr": 1.0, "cnr_signed": -1.0},
                                                    "categories": {}}}}}
    class R:
        name = "m"

    R.metrics = metrics
    t = phrase_table([R()])
    assert "CNR± = (mu_in - mu_out)" in t.caption and "negative" in t.caption


def test_overlay_panel_marks_the_peak_and_outlines_in_white():
    """The cross sits on the scorer's pointing-game peak (here a map whose single maximum is known) and the
    outline is white with a black halo (cyan vanished on jet)."""
    from matplotlib.figure import Figure

    from xbench.score.report.overlays import draw_panel

    image = np.full((64, 64), 100, np.uint8)
    smap = np.zeros((8, 8), np.float32)
    smap[5, 2] = 1.0  # the maximum, by construction
    mask = np.zeros((8, 8), bool)
    mask[4:7, 1:4] = True
    ax = Figure().add_subplot()
    draw_panel(ax, image, smap, mask)
    (line,) = ax.lines
    assert line.get_marker() == "x" and line.get_color() == "white"
    assert (line.get_xdata()[0], line.get_ydata()[0]) == ((2 + 0.5) * 8, (5 + 0.5) * 8)  # cell centre, pixels
    outline = [c for c in ax.collections if c.get_path_effects()]
    assert outline and np.allclose(outline[0].get_edgecolor()[0][:3], (1, 1, 1))
    assert any(getattr(e, "_gc", {}).get("foreground") == "black" for e in outline[0].get_path_effects())
    ax2 = Figure().add_subplot()
    draw_panel(ax2, image, smap, mask, peak=False)
    assert not ax2.lines


# ------------------------------------------------------------------------------------------------ the browser
MEASURE = """<!DOCTYPE html><html><head><title>pending</title></head><body style="margin:0">
<iframe id="f" src="index.html" style="width:1280px;height:900px;border:0"></iframe>
<script>
document.getElementById('f').onload = function () {
  var d = this.contentDocument, out = {height: d.documentElement.scrollHeight, sections: {}, wraps: []};
  var h2 = Array.prototype.slice.call(d.querySelectorAll('h2'));
  h2.forEach(function (h, i) {
    var next = h2[i + 1];
    out.sections[h.textContent] = (next ? next.getBoundingClientRect().top : d.documentElement.scrollHeight)
                                  - h.getBoundingClientRect().top;
  });
  ['#human', 'h2 + p + div.scroll'].forEach(function (sel) {
    d.querySelectorAll(sel + ' table.lb td').forEach(function (td) {
      out.wraps.push(td.getBoundingClientRect().height);
    });
  });
  var names = [];
  d.querySelectorAll('table.lb th.model').forEach(function (th) { names.push(th.getBoundingClientRect().height); });
  out.name_heights = names;
  document.title = 'done';
  document.body.setAttribute('data-measure', JSON.stringify(out));
};
</script></body></html>"""


def _chromium(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--allow-file-access-from-files", "--virtual-time-budget=5000", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_page_in_a_browser(page):
    out, _ = page
    (out / "_measure.html").write_text(MEASURE)
    res = _chromium("--dump-dom", (out / "_measure.html").as_uri(), cwd=out)
    m = re.search(r"data-measure=\"(.*?)\"", res.stdout)
    assert m, res.stderr[-2000:]
    info = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    sections = info["sections"]
    # the sections a reader looks for, rendered, in this order
    order = [h for h in sections if h in ("Leaderboard", "Human ceiling", "Faithfulness", "Figures",
                                          "Best and worst cases", "Definitions")]
    assert order == ["Leaderboard", "Human ceiling", "Faithfulness", "Figures", "Best and worst cases", "Definitions"]
    # overlays: one figure open (a 2-column panel grid at most 460 px wide), the others one line each
    from xbench.score.report.html import OVERLAYS_OPEN

    n = len(list((out / "figures").glob("overlay_*.png")))
    assert sections["Best and worst cases"] < 1400 * OVERLAYS_OPEN + 60 * n, sections
    # intervals and model names do not wrap: every human/faithfulness cell is one line high, as is every model cell
    assert info["wraps"] and max(info["wraps"]) < 1.6 * min(info["wraps"]), info["wraps"]
    assert max(info["name_heights"]) < 2.6 * min(info["name_heights"])  # value + interval lines at most
    # a screenshot of the whole page, to look at (and: it is not blank)
    shot = out / "_page.png"
    res = _chromium(f"--screenshot={shot}", f"--window-size=1280,{min(int(info['height']), 16000)}",
                    (out / "index.html").as_uri(), cwd=out)
    assert shot.is_file(), res.stderr[-2000:]
    from PIL import Image

    im = Image.open(shot)
    assert im.size == (1280, min(int(info["height"]), 16000))
    colours = im.convert("RGB").resize((64, 256)).getcolors(64 * 256)
    assert colours is not None and len(colours) > 50  # text, tables and figures, not an empty page
    assert info["height"] < 14000, info["height"]
