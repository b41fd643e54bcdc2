"""The report's static HTML page: one file, inline CSS, no scripts, no remote resources.

Images are referenced by relative path (``figures/<name>.png``, each linked to its SVG), so the
report directory can be copied or served as it is; every link points inside the directory.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from xbench.score.cells import html_box as _box
from xbench.score.cells import html_text as _e

__all__ = ["DEFINITIONS_AT", "FIGURES_AT", "OVERLAYS_OPEN", "insert_before", "model_notes", "render_html"]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;
color:#1d1d1f;padding:0 1em;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.meta{color:#555;font-size:.9em}
.scroll{overflow:auto;display:inline-block;max-width:100%;max-height:85vh;margin:.8em 0;border:1px solid #e5e7eb;vertical-align:top}
table.lb{border-collapse:separate;border-spacing:0;font-size:.8em;white-space:nowrap}
table.lb th,table.lb td{border-right:1px solid #ddd;border-bottom:1px solid #ddd;padding:3px 6px;text-align:right}
table.lb thead th{background:#f3f4f6;text-align:center;position:sticky;top:0;z-index:2}
table.lb thead tr:nth-child(2) th{top:1.75em}
table.lb th.model{text-align:left;background:#fafafa}
table.lb tr>th:first-child{position:sticky;left:0;z-index:1;background:#fafafa}
table.lb thead tr>th:first-child{z-index:3;background:#f3f4f6}
table.lb caption{caption-side:bottom;text-align:left;color:#555;padding:4px 6px;font-size:.95em;white-space:normal}
p.caption{color:#555;font-size:.8em;margin:-.4em 0 1em;max-width:1000px}
.ci{color:#777;font-size:.85em}.na{color:#aaa}
.sig{color:#0a7d27;font-weight:600}.ns{color:#888}
figure{margin:1em 0;display:inline-block;vertical-align:top;max-width:100%}
figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.85em;color:#555;max-width:560px}
details{margin:.5em 0}summary{cursor:pointer;font-weight:600}
ul.skipped{color:#8a5300;font-size:.9em}
details.overlay{margin:.3em 0}details.overlay summary{font-weight:normal;color:#333}
details.overlay figure img{max-width:460px}
ul.notes{font-size:.9em;margin:.3em 0 1em}.tag{display:inline-block;font-size:.75em;font-weight:600;padding:0 .4em;
border-radius:.6em;margin-left:.3em;vertical-align:middle;white-space:nowrap}
.tag.untrained{background:#fde68a;color:#713f12}.tag.baseline{background:#e5e7eb;color:#374151}.tag.masks{background:#dbeafe;color:#1e3a8a}
.partial{border-left:4px solid #c2410c;background:#fff7ed;padding:.3em .8em;margin:1em 0}
"""

FIGURE_CAPTIONS = {
    "auroc_vs_pointing": "Recognition (AUROC) against grounding (pointing game) per model, means over datasets, "
                         "with the least-squares line and R² (shown with at least three models).",
    "dice_fixed_vs_best": "Dice at the fixed threshold τ = 0.5 against Dice at the best threshold per class; "
                          "ΔDice = best − fixed (a calibration gap).",
    "pointing_heatmap": "Pointing game per class and model (grey: no positive pair).",
    "region_size": "Pointing game and best-threshold Dice by lesion size (region area as a fraction of the "
                   "image).",
}


#: where the results sections (robustness, human ceiling, faithfulness) go: before the figures
FIGURES_AT = "<h2>Figures</h2>"
#: the definitions close the page: later sections (text probes, sanity checks) go before them
DEFINITIONS_AT = "<h2>Definitions</h2>"
#: overlay figures shown open on the page (the first model's); the others are folded in <details>
OVERLAYS_OPEN = 1


def insert_before(page: str, marker: str, fragment: str) -> str:
    """``fragment`` inserted before the first ``marker`` of ``page`` (before ``</body>`` when there is none)."""
    return page.replace(marker, fragment + marker, 1) if marker in page else page.replace("</body>", fragment + "</body>", 1)


def _mapping(v) -> dict:
    return v if isinstance(v, dict) else {}


def model_notes(results) -> dict[str, tuple[str, str]]:
    """{model: (tag, sentence)} for the models whose recorded provenance (metrics.json
    ``xbench.submission``: the extraction's config and adapter) says they are not trained models: ``untrained``
    when the config draws random weights (``weights: random``, ``random_init: true``; the demo's clip-tiny), or
    ``baseline`` when the adapter is one of XBench's baselines (random, center, dog: no learned model); ``masks``
    for a submission converted from mask outputs (its pointing peaks are the masks' middles)."""
    from xbench.score.outputs.leaderboard import is_untrained

    out = {}
    for r in results:
        sub = _mapping(_mapping(r.metrics.get("xbench")).get("submission"))
        adapter = _mapping(sub.get("adapter"))
        if sub.get("method") == "masks":  # converted mask outputs: say how their ties are pointed at
            out[r.name] = ("masks", "mask output (xbench-convert): its pointing game points at each mask's middle, "
                                    "the centroid of its highest cells (contract \"Pointing game\"), and its Dice "
                                    "and IoU at tau = 0.5 are the mask's own")
        elif is_untrained(r.metrics):
            out[r.name] = ("untrained", "untrained: its weights are random (its config says weights: random), a "
                                        "plumbing check; its rank says nothing about the architecture")
        elif str(adapter.get("adapter", "")).endswith("Baseline"):
            out[r.name] = ("baseline", f"baseline without a learned model ({adapter['adapter']}); a floor to beat")
    return out


def _notes_html(results) -> str:
    notes = model_notes(results)
    if not notes:
        return ""
    return ('<ul class="notes">' + "".join(f'<li><b>{_e(n)}</b><span class="tag {t}">{t}</span> {_e(text)}</li>'
                                           for n, (t, text) in notes.items()) + "</ul>")


def _tag_models(table_html: str, notes: dict) -> str:
    """The leaderboard's model cells with their tag (untrained, baseline) beside the name."""
    for name, (tag, _) in notes.items():
        if name.endswith(f" ({tag})"):  # the name says it already (load_result's "(untrained)")
            continue
        cell = f'<th class="model">{_e(name)}</th>'
        table_html = table_html.replace(cell, f'<th class="model">{_e(name)}<span class="tag {tag}">{tag}</span></th>')
    return table_html


#: the row of a per-category table that holds the mean over categories (score/sections/phrases.py)
SUMMARY_CATEGORY = "all categories"


def _scope_html(table, notes) -> str:
    """A row-scope table (the phrase-grounding table): the rows of the means over categories, one per model and
    dataset, in the page; the per-category rows folded below them (they repeat each model per category)."""
    import dataclasses

    index = list(getattr(table, "index", ()))
    if "Category" not in index:
        return _box(_tag_models(table.to_html(), notes))
    at = index.index("Category")
    summary = {k: v for k, v in table.rows.items() if isinstance(k, tuple) and k[at] == SUMMARY_CATEGORY}
    rest = {k: v for k, v in table.rows.items() if k not in summary}
    if not summary or not rest:
        return _box(_tag_models(table.to_html(), notes))
    top = dataclasses.replace(table, rows=summary)
    per = dataclasses.replace(table, rows=rest, key=f"{table.key}_categories",
                              caption=f"{table.title} per category ({len(rest)} rows).")
    return (_box(_tag_models(top.to_html(), notes))
            + f'<details class="categories"><summary>Per category ({len(rest)} rows)</summary>{_box(per.to_html())}'
            "</details>")


def _pointing_key(r):
    v = _mapping(r.metrics.get("overall")).get("pointing_game")
    return (not isinstance(v, (int, float)), -(v if isinstance(v, (int, float)) else 0.0), r.name)


def _fig(rel_png: str, caption: str, *, svg: bool = True) -> str:
    if not svg:  # a raster figure (the overlays): the PNG is the figure
        return (f'<figure><a href="{_e(rel_png)}"><img src="{_e(rel_png)}" alt="{_e(caption)}"></a>'
                f"<figcaption>{_e(caption)}</figcaption></figure>")
    rel_svg = str(Path(rel_png).with_suffix(".svg"))
    return (f'<figure><a href="{_e(rel_svg)}"><img src="{_e(rel_png)}" alt="{_e(caption)}"></a>'
            f"<figcaption>{_e(caption)} (<a href=\"{_e(rel_svg)}\">SVG</a>)</figcaption></figure>")


def _gaps_html(gaps) -> str:
    from xbench.score.report.paired import floor_note, format_p, p_note
    from xbench.score.table import METRIC_TITLES, shown_value

    rows = []
    # B too small for any gap to pass Holm: the cells say so instead of "within noise" (nothing was decided)
    undecidable = floor_note([r for g in gaps for r in g.get("rows", [])]) is not None
    for g in gaps:
        if "rows" not in g:
            continue
        for r in g["rows"]:
            if r.diff is None:
                continue
            ci = ("–" if r.ci_lo is None else
                  f"{shown_value(r.metric, r.ci_lo):+.2f} to {shown_value(r.metric, r.ci_hi):+.2f}")
            cls = "sig" if r.significant else "ns"
            verdict = "real" if r.significant else "too few resamples" if undecidable else "within noise"
            rows.append(f"<tr><th class=\"model\">{_e(g['a'])} vs {_e(g['b'])}</th>"
                        f"<td>{_e(METRIC_TITLES.get(r.metric, r.metric))}</td><td>{shown_value(r.metric, r.diff):+.2f}</td>"
                        f"<td>{ci}</td><td>{_e(format_p(r.p_value, r.p_floor))}</td>"
                        f"<td>{_e(format_p(r.p_holm, r.p_floor))}</td><td class=\"{cls}\">{verdict}</td></tr>")
    if not rows:
        return ""
    shown = [r for g in gaps for r in g.get("rows", []) if r.diff is not None]
    return _box('<table class="lb" id="gaps"><thead><tr><th>Pair</th><th>Metric</th>'
                "<th>A − B (pp)</th><th>95% CI</th><th>p</th><th>p (Holm)</th><th>Gap</th></tr></thead><tbody>"
                + "".join(rows)
                + "</tbody><caption>Paired bootstrap over cases (same resamples for both models), means over "
                  "datasets; the 95% interval is not adjusted for multiplicity. " + _e(p_note(shown))
                + "</caption></table>")


def _resamples_note(results, bootstrap) -> str:
    """How many bootstrap resamples stand behind the intervals and the gaps (issue 12: say it on the page)."""
    per_model = {r.name: int(r.metrics.get("xbench", {}).get("bootstrap", {}).get("n_resamples", 0) or 0)
                 for r in results}
    scored = sorted({n for n in per_model.values() if n})
    parts = [f"scorer intervals: {', '.join(map(str, scored))} resamples"] if scored else []
    if len(set(per_model.values())) > 1:  # mixed counts: which model has which (their intervals differ in precision)
        parts = ["scorer intervals: " + ", ".join(f"{name} {n or 'none'}" for name, n in per_model.items())
                 + " resamples (mixed: intervals from fewer resamples are less precise)"]
    if bootstrap:
        parts.append(f"intervals computed here and paired gaps: {bootstrap} resamples")
    return ("Bootstrap: " + "; ".join(parts) + ". ") if parts else "No bootstrap intervals. "


def _partial_html(results) -> str:
    """A warning for results scored on a subset of the ground truth's cases (metrics.json ``partial``): their
    numbers are not comparable with a full run's, so the page says so above every table."""
    items = []
    for r in results:
        whole = r.partial()
        if whole is None:
            continue
        per = [f"{d}: {p['cases']} of {p['of']}" for d in r.datasets if (p := r.partial(d)) is not None]
        items.append(f"<li><b>{_e(r.name)}</b>: partial: {whole['cases']} of {whole['of']} cases"
                     + (f" ({_e('; '.join(per))})" if len(per) > 1 else "") + "</li>")
    if not items:
        return ""
    return ('<div class="partial"><p>Scored on a subset of the ground truth\'s cases (xbench-score --allow-missing): '
            "these models' numbers cover only the cases present and are not comparable with a full run.</p><ul>"
            + "".join(items) + "</ul></div>")


def render_html(*, title, results, main_tables, per_class, gaps, figures, overlay_files, skipped, files,
                bootstrap=None, phrases=None, overlay_captions=None, scope_tables=None) -> str:
    """The whole page as a string (UTF-8, HTML5). ``scope_tables``: [(metrics.json section, table)] of the
    other row scopes (:mod:`xbench.score.sections.plugins`; the phrase-grounding table,
    :func:`xbench.score.sections.plugins.phrases.phrase_table`), each shown after the leaderboard with a link to its CSV when
    that was written; ``phrases`` alone is ``[("phrases", phrases)]``."""
    scope_tables = list(scope_tables or []) + ([("phrases", phrases)] if phrases is not None else [])
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    gt = {r.gt_sha256 for r in results if r.gt_sha256}
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_e(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>",
             f"<h1>{_e(title)}</h1>",
             f'<p class="meta">{len(results)} model(s): {_e(", ".join(r.name for r in results))}. '
             f"Ground truth sha256: {_e(', '.join(sorted(x[:16] for x in gt)) or 'not recorded')}. "
             f"Generated {now}. Values in percent unless a table says otherwise (CNR, the gaze measures). {_e(_resamples_note(results, bootstrap))}"
             "Models ranked by overall pointing game.</p>",
             '<p class="meta">Downloads: <a href="leaderboard.md">leaderboard.md</a> · '
             '<a href="leaderboard.csv">leaderboard.csv</a> · <a href="grounding_fixed.csv">grounding_fixed.csv</a>'
             ' · <a href="recognition.csv">recognition.csv</a> · <a href="per_class.md">per_class.md</a>'
             + "".join(f' · <a href="{_e(section)}.csv">{_e(section)}.csv</a>' for section, _ in scope_tables
                       if f"{section}.csv" in files["tables"])
             + (' · <a href="comparisons.csv">comparisons.csv</a>' if "comparisons.csv" in files["tables"] else "")
             + ' · <a href="report.json">report.json</a></p>']
    partial = _partial_html(results)
    if partial:
        parts.append(partial)
    parts.append("<h2>Leaderboard</h2>")
    parts.append(_notes_html(results))
    notes = model_notes(results)
    for t in main_tables:
        parts.append(f"<h3>{_e(t.title)}</h3>{_box(_tag_models(t.to_html(), notes))}")
    for _, table in scope_tables:
        parts.append(f"<h2>{_e(table.title)}</h2>{_scope_html(table, notes)}")
    gap_html = _gaps_html(gaps)
    if gap_html:
        parts.append("<h2>Are the gaps real?</h2>")
        parts.append("<p>Each model against the next one in the pointing-game ranking.</p>" + gap_html)
    parts.append("<h2>Figures</h2>")
    for key, caption in FIGURE_CAPTIONS.items():
        info = figures.get(key)
        if not info:
            continue
        png = next(str(p) for p in files["figures"] if p.endswith(f"{key}.png"))
        cap = caption
        if key == "auroc_vs_pointing" and info.get("fit"):
            cap += f" R² = {info['fit']['r2']:.2f}."
        if key == "region_size":
            lo, hi = info["edges"]
            cap += f" Bins: small < {100 * lo:.3g}%, medium {100 * lo:.3g}–{100 * hi:.3g}%, large ≥ {100 * hi:.3g}% ({info['bins']})."
            if info.get("quantity") == "mean over classes":
                cap += (" Each bar is the number of the \"Grounding by lesion size\" table: the mean over the classes "
                        "with such a region, then over datasets, with its 95% interval.")
            else:
                cap += (" Each bar is pooled over the positive pairs of the bin (not the table's mean over classes), "
                        "with a 95% percentile bootstrap over cases.")
        if key == "dice_fixed_vs_best" and info.get("intervals"):
            cap += " Error bars: 95% intervals, as in the tables."
        parts.append(_fig(png, cap))
    pngs = [p for p in overlay_files or [] if p.endswith(".png")]
    rank = {r.name: i for i, r in enumerate(sorted(results, key=_pointing_key))}

    def owner_rank(p):  # the top-ranked model's figure first (the one shown open)
        cap = (overlay_captions or {}).get(Path(p).name, "")
        return min((i for n, i in rank.items() if cap.startswith(f"{n} on ")), default=len(rank))

    pngs.sort(key=owner_rank)
    if pngs:
        parts.append("<h2>Best and worst cases</h2><p>Saliency (jet, normalised) over the image; the "
                     "ground-truth region outlined in white (black halo); the white cross marks the map's maximum, "
                     "the pointing-game peak. Best and worst positive pair of each class by best-threshold Dice. "
                     f"{'The first figure is shown; open' if len(pngs) > OVERLAYS_OPEN else 'Open'} a model's line "
                     "to see its figure.</p>")
        for i, p in enumerate(pngs):
            caption = (overlay_captions or {}).get(Path(p).name) or Path(p).stem.replace("overlay_", "")
            parts.append(f'<details class="overlay"{" open" if i < OVERLAYS_OPEN else ""}><summary>{_e(caption)}'
                         f"</summary>{_fig(p, caption, svg=False)}</details>")
    parts.append("<h2>Per-class tables</h2>")
    for t in per_class:
        parts.append(f"<details><summary>{_e(t.title)}</summary>{_box(t.to_html())}</details>")
    if skipped:
        parts.append("<h2>Not shown</h2><ul class=\"skipped\">" + "".join(f"<li>{_e(s)}</li>" for s in skipped)
                     + "</ul>")
    parts.append("<h2>Definitions</h2><p class=\"meta\">Pointing game: the map's peak (its maximum's cell; "
                 "for tied cells, as a mask's, their centroid) lies in the region. Dice/IoU at τ: the normalised map thresholded at ≥ τ against the region; best τ "
                 "chosen per class over 0.00…1.00. Means over positive pairs per class, over classes per "
                 "dataset, over datasets overall. Intervals: 95% percentile bootstrap over cases. Best value "
                 "per column in bold, second best underlined.</p>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"
