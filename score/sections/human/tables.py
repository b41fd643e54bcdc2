"""The ``human`` section as rows: ``table_human.csv`` / ``.md`` and the "human ceiling" lines of the terminal and
the report page. A metrics.json read back may come from elsewhere: entries of the wrong shape are left out."""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from xbench.score.sections.human.ceiling import KEYS

# -- rows for the tables and `xbench compare` ------------------------------------------------------------
ROW_COLUMNS = ("dataset", "class", "metric", "model", "human", "human_lo", "human_hi", "percent_of_human",
               "percentage_decrease", "gap", "gap_lo", "gap_hi", "p_value")


def _num(v) -> float | None:
    """A finite number of a metrics.json read back (a report reads files from elsewhere), else None."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _pair(v) -> list:
    return [_num(v[0]), _num(v[1])] if isinstance(v, list) and len(v) == 2 and None not in map(_num, v) \
        else [None, None]


def _mapping(v) -> Mapping:
    return v if isinstance(v, Mapping) else {}


def human_rows(block: Mapping, *, per_class: bool = True) -> list[dict]:
    """One row per (dataset, class or "(mean)", metric) of a ``human`` section; fractions and percents as stored.
    Entries of the wrong shape are left out and values that are not numbers read as missing, so a metrics.json
    from elsewhere never breaks a table."""
    rows = []
    for d, entry in _mapping(_mapping(block).get("datasets")).items():
        entry = _mapping(entry)
        scopes = [("(mean)", _mapping(entry.get("summary")))]
        if per_class:
            scopes += [(c, _mapping(e)) for c, e in _mapping(entry.get("classes")).items()]
        for cls, values in scopes:
            for k in KEYS:
                v = values.get(k)
                if not isinstance(v, Mapping):
                    continue
                ci = _pair(v.get("ci95"))
                paired = _mapping(v.get("paired"))
                gci = _pair(paired.get("gap_ci95"))
                rows.append({"dataset": str(d), "class": str(cls), "metric": k, "model": _num(v.get("model")),
                             "human": _num(v.get("human")), "human_lo": ci[0], "human_hi": ci[1],
                             "percent_of_human": _num(v.get("percent_of_human")),
                             "percentage_decrease": _num(v.get("percentage_decrease")), "gap": _num(paired.get("gap")),
                             "gap_lo": gci[0], "gap_hi": gci[1], "p_value": _num(paired.get("p_value"))})
    return rows


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def human_markdown(rows: Sequence[Mapping]) -> str:
    """The rows as a Markdown table: values in %, "% of human" = model / human x 100, the paired gap (model -
    human, points) with its 95 % interval."""
    from xbench.schemas.errors import escape_text

    head = ("| Dataset | Class | Metric | Model | Human [95% CI] | % of human | Gap model − human [95% CI] |\n"
            "|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        human = f"{_pct(r['human'])} [{_pct(r['human_lo'])}, {_pct(r['human_hi'])}]" if r["human_lo"] is not None \
            else _pct(r["human"])
        gap = "–" if r["gap"] is None else (f"{100 * r['gap']:+.1f}" + (
            f" [{100 * r['gap_lo']:+.1f}, {100 * r['gap_hi']:+.1f}]" if r["gap_lo"] is not None else ""))
        pct = "–" if r["percent_of_human"] is None else f"{r['percent_of_human']:.1f}"
        cells = [escape_text(str(r["dataset"])), escape_text(str(r["class"])).replace("|", "\\|"), r["metric"],
                 _pct(r["model"]), human, pct, gap]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def human_csv(rows: Sequence[Mapping]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(ROW_COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r[k] is None else r[k]) for k in ROW_COLUMNS})
    return buf.getvalue()


def write_human_tables(metrics: Mapping, out_dir: str | os.PathLike) -> list[Path]:
    """``table_human.csv`` / ``.md`` beside the other tables, only when metrics.json has a ``human`` section."""
    if "human" not in metrics:
        return []
    rows = human_rows(metrics["human"])
    out = Path(out_dir)
    (out / "table_human.csv").write_text(human_csv(rows))
    (out / "table_human.md").write_text(human_markdown(rows))
    return [out / "table_human.csv", out / "table_human.md"]


def human_lines(metrics: Mapping) -> list[str]:
    """One "human: ..." line per dataset of a ``human`` section (the summary's pointing game and best Dice), for
    the terminal and the report page."""
    lines = []
    rows = [r for r in human_rows(_mapping(metrics.get("human")), per_class=False)
            if r["metric"] in ("pointing_game", "dice_best", "iou_best") and r["human"] is not None]
    readers = {d: _mapping(e).get("readers") for d, e in _mapping(_mapping(metrics.get("human")).get("datasets")).items()}
    kind = "simulated reader(s)" if simulated(metrics) else "reader(s)"
    for d in dict.fromkeys(r["dataset"] for r in rows):
        parts = []
        for r in (r for r in rows if r["dataset"] == d):
            pct = ("model: –" if r["percent_of_human"] is None
                   else f"model at {r['percent_of_human']:.0f}% of it")
            parts.append(f"{r['metric']} {_pct(r['human'])}% ({pct})")
        n = readers.get(d)
        lines.append(f"human ceiling ({d}, {len(n) if isinstance(n, list) else '?'} {kind}): " + ", ".join(parts))
    return lines


def simulated(metrics: Mapping) -> bool:
    """Whether the ``human`` section's readers are simulated (``xbench human phantom``: its rule says so), not
    radiologists."""
    rule = _mapping(_mapping(metrics.get("human")).get("source")).get("rule")
    return isinstance(rule, str) and "simulated" in rule.lower()


def section_tables(metrics: Mapping, folder, label: str) -> list[Path]:
    """The human section's files beside metrics.json (:mod:`xbench.score.sections.plugins`)."""
    return write_human_tables(metrics, folder)
