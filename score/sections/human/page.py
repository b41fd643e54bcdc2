"""The report page's human section (``xbench report``)."""
from __future__ import annotations

from xbench.score.sections.human.tables import _pct, human_lines, human_markdown, human_rows, simulated

def report_sections(results) -> tuple[list[str], str]:
    """The report's human section (Markdown lines, an HTML fragment) for the results whose metrics.json carries
    a ``human`` section; ([], "") when none does, so a report without one is unchanged. Each model gets its
    "human: ..." lines and the dataset rows (model, human [95% CI], % of human, paired gap)."""
    import html

    with_h = [r for r in results if "human" in r.metrics]
    if not with_h:
        return [], ""
    sim = all(simulated(r.metrics) for r in with_h)
    who = "simulated readers (xbench human phantom)" if sim else "radiologists' own annotations"
    md = [f"## Human ceiling ({who} scored like a model; % of human = model / human x 100)", ""]
    parts = ["<section id='human'><h2>Human ceiling</h2><p>"
             + ("Simulated readers of the phantom (they miss, shift and resize regions; not radiologists)"
                if sim else "Radiologists' own annotations")
             + " scored like a model (xbench human); % of human = model / human &times; 100; gap = model &minus; "
             "human on the (case, class) pairs both were scored on, paired bootstrap; 95% intervals in brackets.</p>"]
    for r in with_h:
        rows = human_rows(r.metrics["human"], per_class=False)
        lines = human_lines(r.metrics)
        md += [f"### {r.name}", ""] + [f"- {line}" for line in lines] + ["", human_markdown(rows)]
        parts.append(f"<h3>{html.escape(str(r.name))}</h3><ul>"
                     + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>")
        head = "".join(f"<th>{h}</th>" for h in ("Dataset", "Metric", "Model", "Human [95% CI]", "% of human",
                                                    "Gap [95% CI]"))
        body = []
        for row in rows:
            human = (f"{_pct(row['human'])} [{_pct(row['human_lo'])}, {_pct(row['human_hi'])}]"
                     if row["human_lo"] is not None else _pct(row["human"]))
            gap = "–" if row["gap"] is None else f"{100 * row['gap']:+.1f}" + (
                f" [{100 * row['gap_lo']:+.1f}, {100 * row['gap_hi']:+.1f}]" if row["gap_lo"] is not None else "")
            pct = "–" if row["percent_of_human"] is None else f"{row['percent_of_human']:.1f}"
            cells = [str(row["dataset"]), row["metric"], _pct(row["model"]), human, pct, gap]
            body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        # the report's table style (score/report/html.py: class "lb", no wrapping, in a scrolling box)
        parts.append(f"<div class=\"scroll\"><table class=\"lb\"><thead><tr>{head}</tr></thead>"
                     f"<tbody>{''.join(body)}</tbody></table></div>")
    parts.append("</section>")
    return md, "".join(parts)
