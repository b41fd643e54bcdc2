"""The report's "Does a model's map agree with what it says?" section: a model's maps beside its own boxes.

A generative model can be scored three ways on the same regions: its attention map, its gradient map (map
methods of its adapter) and the boxes it writes in its answers (``xbench-convert --answers``: a submission of
method ``boxes``). When the report holds a boxes result and map results of one model (the submissions' ``model``
attribute), this section puts them side by side: each one's pointing game against the radiologists' regions,
and the agreement of each map with the model's own boxes, by :func:`agreement` on every case and finding (and
phrase row) where the model gave a box (docs/contract.md, "A model's own boxes", has the definitions):

* **peak in own boxes**: the map's peak (the pointing game's, :func:`xbench.schemas.pointing.peak_cell`: the
  centroid of its maximum's cells; none for a constant map) lies in a cell its boxes cover;
* **IoU (top-k)**: the k cells of highest map value (ties in row-major order), k = the cells the boxes cover,
  against those cells;
* **mass inside**: the share of the map's positive mass on the cells the boxes cover (undefined for a map with
  none, left out of the mean).

The box map is read on the map's own grid: a map cell is covered when the box-map cell holding its centre is
non-zero. The maps are read one block of cases at a time.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xbench.schemas.pointing import peak_cell

#: cases read at a time from each store
BLOCK = 64


def support_on(box_map: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """(h, w) bool: the cells of a map of ``shape`` whose centre falls in a non-zero cell of ``box_map``."""
    bh, bw = box_map.shape
    h, w = shape
    rows = np.minimum(((np.arange(h) + 0.5) * bh / h).astype(np.int64), bh - 1)
    cols = np.minimum(((np.arange(w) + 0.5) * bw / w).astype(np.int64), bw - 1)
    return np.asarray(box_map, np.float64)[np.ix_(rows, cols)] > 0


def agreement(smap: np.ndarray, box_map: np.ndarray) -> tuple[bool, float, float] | None:
    """(peak in own boxes, IoU of the top-k cells, mass inside) of one map against the model's own box map; None
    when the boxes cover no cell of the map's grid. NaN cells of the map count as its lowest values."""
    m = np.asarray(smap, np.float64)
    m = np.where(np.isnan(m), -np.inf, m)
    s = support_on(box_map, m.shape)
    k = int(s.sum())
    if k == 0:
        return None
    flat, sup = m.ravel(), s.ravel()
    peak = peak_cell(m, nan_lowest=True)
    hit = peak is not None and bool(s[peak])
    top = np.zeros(flat.size, bool)
    top[np.argsort(-flat, kind="stable")[:k]] = True  # stable: equal values in row-major order
    iou = float((top & sup).sum() / (top | sup).sum())
    pos = np.where(np.isfinite(flat) & (flat > 0), flat, 0.0)
    total = float(pos.sum())
    inside = float(pos[sup].sum() / total) if total > 0 else math.nan
    return hit, iou, inside


@dataclass
class Tally:
    """Sums of :func:`agreement` over rows."""

    n: int = 0
    hits: int = 0
    iou: float = 0.0
    inside: float = 0.0
    n_inside: int = 0

    def add(self, got: tuple[bool, float, float] | None) -> None:
        if got is None:
            return
        self.n += 1
        self.hits += got[0]
        self.iou += got[1]
        if not math.isnan(got[2]):
            self.inside += got[2]
            self.n_inside += 1

    def row(self) -> dict:
        return {"rows": self.n, "peak_in_boxes": self.hits / self.n if self.n else None,
                "iou_topk": self.iou / self.n if self.n else None,
                "mass_inside": self.inside / self.n_inside if self.n_inside else None}


def _blocks(n: int):
    for start in range(0, n, BLOCK):
        yield start, min(n, start + BLOCK)


def _class_rows(maps_ds, boxes_ds, tally: Tally) -> None:
    """Every case and finding both stores hold and the boxes mark."""
    classes = [c for c in boxes_ds.classes if c in maps_ds.classes and c not in boxes_ds.unsupported
               and c not in maps_ds.unsupported]
    if not classes:
        return
    at = {str(c): i for i, c in enumerate(maps_ds.case_id)}
    bj = [list(boxes_ds.classes).index(c) for c in classes]
    mj = [list(maps_ds.classes).index(c) for c in classes]
    for start, stop in _blocks(len(boxes_ds.case_id)):
        boxes = np.asarray(boxes_ds.saliency[start:stop])
        for i, case in enumerate(boxes_ds.case_id[start:stop]):
            row = at.get(str(case))
            marked = [k for k, j in enumerate(bj) if boxes[i, j].any()]
            if row is None or not marked:
                continue
            maps = np.asarray(maps_ds.saliency[row])
            for k in marked:
                tally.add(agreement(maps[mj[k]], boxes[i, bj[k]]))


def _phrase_rows(maps_ds, boxes_ds, tally: Tally) -> None:
    if maps_ds.query_id is None or boxes_ds.query_id is None:
        return
    at = {str(q): i for i, q in enumerate(maps_ds.query_id.tolist())}
    for start, stop in _blocks(len(boxes_ds.query_id)):
        boxes = np.asarray(boxes_ds.query_saliency[start:stop])
        for i, qid in enumerate(boxes_ds.query_id[start:stop].tolist()):
            row = at.get(str(qid))
            box = boxes[i].reshape(boxes[i].shape[-2:])
            if row is None or not box.any():
                continue
            smap = np.asarray(maps_ds.query_saliency[row])
            tally.add(agreement(smap.reshape(smap.shape[-2:]), box))


def store_agreement(maps_sub, boxes_sub) -> dict[str, dict]:
    """{"findings": row, "phrases": row} of :meth:`Tally.row` over the datasets both read submissions hold."""
    found, phrases = Tally(), Tally()
    for name, boxes_ds in boxes_sub.datasets.items():
        maps_ds = maps_sub.datasets.get(name)
        if maps_ds is None:
            continue
        _class_rows(maps_ds, boxes_ds, found)
        _phrase_rows(maps_ds, boxes_ds, phrases)
    return {"findings": found.row(), "phrases": phrases.row()}


@dataclass
class Model:
    """One model's results in the report: its boxes result and its map results (display names)."""

    boxes: object = None
    maps: list = field(default_factory=list)


def _attrs(r) -> tuple[str | None, str | None]:
    a = r.submission_attrs
    model, method = a.get("model"), a.get("method")
    return (model if isinstance(model, str) else None), (method if isinstance(method, str) else None)


def own_boxes_rows(results, submissions: dict) -> tuple[list[dict], list[str]]:
    """The section's rows (one per model and map method, its boxes' own row first) and what was skipped.

    ``submissions``: display name -> submission path (the report's resolved inputs)."""
    from xbench.score.report._stores import store_problems
    from xbench.schemas import read_submission

    models: dict[str, Model] = {}
    for r in results:
        model, method = _attrs(r)
        if model is None:
            continue
        entry = models.setdefault(model, Model())
        if method == "boxes":
            entry.boxes = entry.boxes or r
        else:
            entry.maps.append(r)
    rows, skipped = [], []
    for model, entry in models.items():
        if entry.boxes is None or not entry.maps:
            continue
        paths = {r.name: submissions.get(r.name) for r in (entry.boxes, *entry.maps)}
        missing = [n for n, p in paths.items() if p is None or store_problems(p, "submission")]
        if missing:
            skipped.append(f"own boxes of {model}: no readable submission for {', '.join(missing)}")
            continue
        boxes_sub = read_submission(paths[entry.boxes.name])
        rows.append({"model": model, "method": "boxes (its own)", "result": entry.boxes.name,
                     "pointing_game": _pointing(entry.boxes), "findings": None, "phrases": None})
        for r in entry.maps:
            got = store_agreement(read_submission(paths[r.name]), boxes_sub)
            rows.append({"model": model, "method": _attrs(r)[1] or "?", "result": r.name,
                         "pointing_game": _pointing(r), **got})
    return rows, skipped


def _pointing(r) -> float | None:
    v = r.metrics.get("overall", {}).get("pointing_game")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _pct(v) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}"


HEADERS = ("Model", "Map", "Pointing game vs regions", "Rows (findings / phrases)", "Peak in own boxes",
           "IoU top-k vs own boxes", "Mass inside own boxes")
TITLE = "Does a model's map agree with what it says? (its maps against its own boxes)"
CAPTION = ("Pointing game against the radiologists' regions (percent), then, on every case and finding (and phrase "
           "row) where the model wrote a box: how often its map's peak lies in its own boxes, the IoU of the map's "
           "top-k cells with them (k = the cells they cover) and the share of the map's mass inside them (percent; "
           "findings / phrase rows). Definitions: docs/contract.md, \"A model's own boxes\".")


def _cells(row: dict) -> list[str]:
    f, p = row["findings"], row["phrases"]
    if f is None:
        return [row["model"], row["method"], _pct(row["pointing_game"]), "–", "–", "–", "–"]
    both = lambda key: f"{_pct(f[key])} / {_pct(p[key])}"  # noqa: E731
    return [row["model"], row["method"], _pct(row["pointing_game"]), f"{f['rows']} / {p['rows']}",
            both("peak_in_boxes"), both("iou_topk"), both("mass_inside")]


def own_boxes_markdown(rows: list[dict]) -> list[str]:
    from xbench.score.cells import md_cell

    if not rows:
        return []
    out = [f"## {TITLE}", "", CAPTION, "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    out += ["| " + " | ".join(md_cell(c) for c in _cells(r)) + " |" for r in rows]
    return out + [""]


def own_boxes_html(rows: list[dict]) -> str:
    import html

    if not rows:
        return ""
    esc = lambda s: html.escape(str(s), quote=True)  # noqa: E731
    head = "".join(f"<th>{esc(h)}</th>" for h in HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in _cells(r)) + "</tr>" for r in rows)
    return (f'<section id="own-boxes"><h2>{esc(TITLE)}</h2><p>{esc(CAPTION)}</p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>\n")


def own_boxes_csv(rows: list[dict]) -> str:
    from xbench.score.cells import csv_cell

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["model", "method", "result", "pointing_game", "scope", "rows", "peak_in_boxes", "iou_topk",
                "mass_inside"])
    for r in rows:
        for scope in ("findings", "phrases"):
            got = r[scope] or {}
            w.writerow([csv_cell(r["model"]), csv_cell(r["method"]), csv_cell(r["result"]), r["pointing_game"], scope,
                        got.get("rows"),
                        got.get("peak_in_boxes"), got.get("iou_topk"), got.get("mass_inside")])
    return buf.getvalue()


def own_boxes_section(results, submissions: dict, out: Path) -> tuple[list[str], str, list[str], list[str]]:
    """(Markdown lines, HTML fragment, files written relative to ``out``, skipped) of the section; nothing when no
    model of the report has both a boxes result and a map result."""
    rows, skipped = own_boxes_rows(results, submissions)
    if not rows:
        return [], "", [], skipped
    (out / "own_boxes.csv").write_text(own_boxes_csv(rows), encoding="utf-8")
    return own_boxes_markdown(rows), own_boxes_html(rows), ["own_boxes.csv"], skipped
