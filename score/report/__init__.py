"""The XBench report: leaderboard tables, figures, paired comparisons and one static HTML page,
built from earlier score outputs (one directory per submission) without rescoring.

``build_report(out_dir, result_dirs)`` writes into ``out_dir``::

    index.html                 self-contained page (inline CSS; images referenced by relative path)
    leaderboard.md             Table 1 layout (grounding), fixed-threshold grounding, recognition, gaps
    leaderboard.txt            the ranked terminal table (overall values with 95 % intervals), as printed
    leaderboard.csv            Table 1 as CSV (fractions, with ci_lo/ci_hi columns)
    grounding_fixed.csv, recognition.csv, comparisons.csv
    per_class.md, per_class/<dataset>_<metric>.csv
    figures/*.png, figures/*.svg
    report.json                manifest: files, fitted line, ΔDice, size bins, what was skipped and why

Every file is written atomically (temporary name, then rename).
"""
from __future__ import annotations

import json
from pathlib import Path

from xbench.schemas.paths import NameTable

from xbench.score.report._load import ReportInputError, Result, load_result, load_results
from xbench.score.report.paired import (ALPHA, compare_results, floor_text, format_p, missing_intervals, p_note,
                                        units_note)

__all__ = ["build_report", "load_results", "load_result", "ReportInputError", "Result", "compare_results",
           "PER_CLASS_METRICS", "floor_text", "format_p", "p_note"]

PER_CLASS_METRICS = ("pointing_game", "dice_best", "iou_best", "auroc")
GAP_METRICS = ("pointing_game", "dice_best", "iou_best", "auroc")


def _write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def _has_pairs(r: Result) -> bool:
    return r.counts is not None


def _lacks_intervals(r: Result) -> bool:
    """True when metrics.json has no interval above class level (dataset ``ci95`` or top-level ``ci95``)."""
    m = r.metrics
    return not m.get("ci95") or any(not ds.get("ci95") for ds in m.get("datasets", {}).values())


def adjacent_gaps(results: list[Result], *, bootstrap: int, seed: int, progress=None) -> list[dict]:
    """Paired comparisons of neighbours in the ranking by overall pointing game (1st vs 2nd, ...).

    Each entry: {"a", "b", "rows": [ComparisonRow for the overall GAP_METRICS]}; pairs lacking
    per-pair data or scored against different ground truths are reported with "skipped".
    """
    from xbench.score.outputs.tables import value_of

    ranked = sorted(results, key=lambda r: -(value_of(r.metrics, "overall", "pointing_game") or -1.0))
    gaps = []
    cache: dict = {}  # each model's replicates are computed once, though it meets two neighbours
    for a, b in zip(ranked, ranked[1:]):
        if not (_has_pairs(a) and _has_pairs(b)):
            gaps.append({"a": a.name, "b": b.name, "skipped": "needs pair_counts.npz"})
            continue
        try:
            rows = compare_results(a, b, bootstrap=bootstrap, seed=seed, per_class=False, cache=cache)
        except ReportInputError as err:
            gaps.append({"a": a.name, "b": b.name, "skipped": "; ".join(map(str, err.problems))})
            continue
        gaps.append({"a": a.name, "b": b.name,
                     "rows": [r for r in rows if r.scope == "overall" and r.metric in GAP_METRICS]})
        if progress:
            progress.update(1)
    return gaps


def holm_gaps(gaps: list[dict]) -> list[dict]:
    """The gaps with Holm-adjusted p-values: one family of every metric × pair test they show."""
    from xbench.score.report.paired import with_holm

    rows = [r for g in gaps for r in g.get("rows", [])]
    adjusted = iter(with_holm(rows))
    return [dict(g, rows=[next(adjusted) for _ in g["rows"]]) if "rows" in g else g for g in gaps]


def comparison_csv(rows, a_name: str, b_name: str, *, header: bool = True) -> str:
    """Long-form CSV of paired comparison rows (fractions)."""
    import csv
    import io

    from xbench.score.cells import csv_cell

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(["a", "b", "scope", "class", "metric", "value_a", "value_b", "diff", "ci_lo", "ci_hi",
                    "p_value", "p_holm", "p_floor", "n_valid", "significant"])

    def n(x):
        return "" if x is None else repr(float(x))

    for r in rows:
        w.writerow([csv_cell(a_name), csv_cell(b_name), csv_cell(r.scope), csv_cell(r.cls or ""), r.metric, n(r.a), n(r.b), n(r.diff), n(r.ci_lo),
                    n(r.ci_hi), n(r.p_value), n(r.p_holm), n(r.p_floor), r.n_valid, int(r.significant)])
    return buf.getvalue()


def comparison_markdown(rows, a_name: str, b_name: str, *, title: str | None = None, note: bool = True) -> str:
    """Markdown table of paired differences A - B in percentage points, * where the difference is significant
    (Holm-adjusted p below alpha: :func:`xbench.score.resampling.engine.significant`), the 95 % CI, the p-value (floored
    at 1/(B+1)) and its Holm adjustment (set on ``rows`` by the caller)."""
    from xbench.score.cells import md_cell
    from xbench.score.table import METRIC_TITLES, shown_value

    title = md_cell(title) if title else f"{md_cell(a_name)} vs {md_cell(b_name)}"
    lines = [f"### {title}", "",
             f"Paired bootstrap of {md_cell(a_name)} − {md_cell(b_name)} ({units_note(rows)}); "
             f"* = significant: Holm-adjusted p < {ALPHA:g}." + (f" {p_note(rows)}" if note else ""), "",
             "| Scope | Class | Metric | A | B | A − B | 95% CI | p | p (Holm) |",
             "|---|---|---|---:|---:|---:|---|---:|---:|"]

    from xbench.score.report.paired import scope_title, shown_once

    rows, repeats = shown_once(rows)  # one dataset: its summary rows equal Overall's, printed once
    for r in rows:  # percentage points for shares, ratios (fmt "number": the phrases' CNR) as they are
        def shown(x, sign=""):
            return "–" if x is None else f"{shown_value(r.metric, x):{sign}.2f}"

        ci = "–" if r.ci_lo is None else f"{shown(r.ci_lo, '+')} to {shown(r.ci_hi, '+')}"
        d = "–" if r.diff is None else shown(r.diff, "+") + ("*" if r.significant else "")
        scope = scope_title(r.scope, repeats)
        p = format_p(r.p_value, r.p_floor)
        ph = format_p(r.p_holm, r.p_floor)
        lines.append(f"| {md_cell(scope)} | {md_cell(r.cls or '')} | {METRIC_TITLES.get(r.metric, r.metric)} | "
                     f"{shown(r.a)} | {shown(r.b)} | {d} | {ci} | {p} | {ph} |")
    return "\n".join(lines) + "\n"


def _resolve_inputs(results, images, gt, submissions):
    """Paths for overlays: explicit options win, then what the scorer recorded in metrics.json."""
    submissions = dict(submissions or {})
    resolved = {}
    for r in results:
        p = submissions.get(r.name) or submissions.get(r.path.name) or r.inputs().get("submission")
        if p is not None and Path(p).exists():
            resolved[r.name] = Path(p)
    if gt is None:
        gt = next((r.inputs().get("gt") for r in results if r.inputs().get("gt")), None)
    if images is None:
        images = next((r.inputs().get("images") for r in results if r.inputs().get("images")), None)
    images = Path(images) if images is not None and Path(images).exists() else None
    gt = Path(gt) if gt is not None and Path(gt).exists() else None
    return images, gt, resolved


def build_report(out_dir, result_dirs, *, images=None, gt=None, submissions=None, bootstrap: int = 1000,
                 seed: int = 0, size_bins: str = "fixed", overlays: bool = True, progress: bool = False,
                 title: str = "XBench report", sanity=()) -> Path:
    """Build the report for several score outputs into ``out_dir``; returns the index.html path.

    result_dirs: score output directories (each with metrics.json; pairs.parquet and pair_counts.npz
    enable intervals above class level, the size figure, overlays and the paired gaps).
    images / gt: images.zarr and gt.zarr paths for the overlays (default: the paths the scorer
    recorded); submissions: {model name or result directory name: submission store path}.
    bootstrap: bootstrap resamples for intervals the scorer did not write and for the paired gaps
    (0 disables both). sanity: ``xbench sanity`` output folders (each with sanity.json): a table says, per
    model, whether its maps depend on the weights. Raises ReportInputError (one message per problem) for
    unusable inputs.
    """
    from xbench.score.metrics import registry as R

    from xbench.score.report._load import ground_truth_problems, metric_groups

    results = load_results([Path(p) for p in result_dirs])
    if ground_truth_problems(results):  # ranked together only against one ground truth, as compare pairs them
        raise ReportInputError(ground_truth_problems(results))
    with R.opt_in(*metric_groups(results)):  # the opt-in metrics the results were scored with are shown too
        return _build_report(Path(out_dir), results, images=images, gt=gt, submissions=submissions, bootstrap=bootstrap,
                             seed=seed, size_bins=size_bins, overlays=overlays, progress=progress, title=title,
                             sanity=sanity)


def _figures(results, out: Path, fig_dir: Path, size_bins: str, computed: dict, bootstrap: int, seed: int,
             skipped: list, files: dict) -> dict:
    """The report's figures (figures.py); their files join ``files``, what was left out ``skipped``."""
    from xbench.score.report import figures as F

    info: dict = {}
    info["auroc_vs_pointing"] = F.auroc_vs_pointing(results, fig_dir / "auroc_vs_pointing")
    skipped += [f"{n}: {why}, left out of the recognition-vs-grounding figure and fit"
                for n, why in info["auroc_vs_pointing"]["left_out"]]
    info["dice_fixed_vs_best"] = F.dice_fixed_vs_best(results, fig_dir / "dice_fixed_vs_best", computed)
    info["pointing_heatmap"] = F.pointing_heatmap(results, fig_dir / "pointing_heatmap")
    with_sizes = size_bins == "fixed" and all("pointing_game_small" in r.metrics.get("overall", {}) for r in results)
    if with_sizes or any(r.pairs is not None for r in results):
        info["region_size"] = F.region_size(results, fig_dir / "region_size", bins=size_bins, computed=computed,
                                            bootstrap=bootstrap, seed=seed)
        skipped += [f"{n}: no pairs.parquet, left out of the size figure" for n in info["region_size"]["skipped"]]
    else:
        skipped.append("region-size figure: no pairs.parquet in any result")
    for v in info.values():
        files["figures"] += [str(Path(p).relative_to(out)) for p in v["files"]]
    return info


def _track_sections(page: str, pages: list, checks) -> str:
    """The page with each declared section's fragment (:meth:`xbench.score.sections.kinds.Section.page`: human ceilings,
    robustness, faithfulness before the figures; text probes at the end), then the sanity checks; the
    definitions stay last. A section no result has adds nothing."""
    from xbench.score.report.html import DEFINITIONS_AT, FIGURES_AT, insert_before

    for at, _, html in pages:
        if html:
            page = insert_before(page, FIGURES_AT if at == "results" else DEFINITIONS_AT, html)
    if checks:  # one more section, before the page ends
        page = insert_before(page, DEFINITIONS_AT, sanity_html(checks))
    return page


def _scope_and_gap_tables(results, gaps: list, out: Path, md: list, files: dict, skipped: list) -> list:
    """Each other row scope's table and the paired gaps: their Markdown joins ``md``, their CSVs ``files``;
    returns [(section, table)] for index.html."""
    from xbench.score.sections.plugins import row_scopes

    scope_tables = []  # [(section, table)] for index.html
    for scope in row_scopes(primary=False):  # each other row scope's table beside the class tables (phrases)
        s_rows = scope.table_rows(results)
        if s_rows:
            md.append(scope.markdown(s_rows))
            files["tables"].append(str(_write_text(out / f"{scope.section}.csv", scope.csv(s_rows))
                                       .relative_to(out)))
        table = scope.table(results)
        if table is not None:
            scope_tables.append((scope.section, table))
    gap_md = []
    gap_rows_all = []
    for g in gaps:
        if "rows" in g:
            gap_md.append(comparison_markdown(g["rows"], g["a"], g["b"], title=f"Gap: {g['a']} vs {g['b']}",
                                              note=False))
            gap_rows_all.append(comparison_csv(g["rows"], g["a"], g["b"], header=not gap_rows_all))
        else:
            skipped.append(f"gap {g['a']} vs {g['b']}: {g['skipped']}")
    if gap_md:
        shown_rows = [r for g in gaps for r in g.get("rows", [])]
        md += ["## Are the gaps real? (paired bootstrap, neighbours in the pointing-game ranking)", "",
               p_note(shown_rows), ""] + gap_md
        files["tables"].append(str(_write_text(out / "comparisons.csv", "".join(gap_rows_all)).relative_to(out)))
    return scope_tables


def _markdown_head(title: str, results: list[Result], bootstrap: int) -> list[str]:
    """leaderboard.md's first lines: the title, the models, and the resamples behind the intervals (per model when
    the results were scored with different counts, as the page says)."""
    from xbench.score.cells import md_cell
    from xbench.score.report.html import _resamples_note

    return [f"# {md_cell(title)}", "", "Models: " + ", ".join(md_cell(r.name) for r in results), "",
            md_cell(_resamples_note(results, bootstrap).strip()), ""]


def _build_report(out: Path, results: list[Result], *, images, gt, submissions, bootstrap: int, seed: int,
                  size_bins: str, overlays: bool, progress: bool, title: str, sanity) -> Path:
    """:func:`build_report` on the loaded results, the metrics they hold registered."""
    from tqdm import tqdm

    from xbench.score.report.html import render_html
    from xbench.score.cells import md_cell
    from xbench.score.outputs.tables import dataset_order, extra_tables, grounding_table, per_class_table, recognition_table

    previous = _previous_files(out)
    fig_dir = out / "figures"
    steps = tqdm(total=6, desc="report", disable=not progress, leave=False)
    skipped: list[str] = []

    computed = {}
    if bootstrap > 0:
        for r in results:
            if not _lacks_intervals(r):
                continue  # the scorer wrote dataset and overall intervals: use those
            if _has_pairs(r):
                computed[r.name] = missing_intervals(r, bootstrap=bootstrap, seed=seed)
            else:
                skipped.append(f"{r.name}: no pair_counts.npz, so no intervals above class level")
    steps.update(1)

    main_tables = [grounding_table(results, computed), grounding_table(results, computed, best=False),
                   recognition_table(results, computed)] + extra_tables(results, computed)
    per_class = [per_class_table(results, d, m, computed) for d in dataset_order(results) for m in PER_CLASS_METRICS]
    gaps = adjacent_gaps(results, bootstrap=bootstrap, seed=seed) if bootstrap > 0 and len(results) > 1 else []
    gaps = holm_gaps(gaps)
    steps.update(1)

    files: dict[str, list[str]] = {"tables": [], "figures": [], "overlays": []}
    names = {"per_class": NameTable(), "overlays": NameTable()}  # data-derived file names -> the map in report.json
    csv_names = {"grounding": "leaderboard.csv", "grounding_fixed": "grounding_fixed.csv",
                 "recognition": "recognition.csv", "lesion_size": "lesion_size.csv",
                 "other": "grounding_more.csv"}
    for t in main_tables:
        files["tables"].append(str(_write_text(out / csv_names[t.key], t.to_csv()).relative_to(out)))
    for t in per_class:  # the key holds a dataset key from a result's metrics.json: data, so sanitised
        name = names["per_class"].name(t.key)
        files["tables"].append(str(_write_text(out / "per_class" / f"{name}.csv", t.to_csv()).relative_to(out)))
    md = _markdown_head(title, results, bootstrap)
    md += [t.to_markdown() for t in main_tables]
    scope_tables = _scope_and_gap_tables(results, gaps, out, md, files, skipped)
    from xbench.score.report.terminal import leaderboard_text

    files["tables"].append(str(_write_text(out / "leaderboard.txt", leaderboard_text(results, computed) + "\n")
                               .relative_to(out)))
    from xbench.score.sections.plugins import sections

    pages = [(s.page_at, *s.page(results)) for s in sections(primary=False)]
    pages.append(_own_boxes(results, images, gt, submissions, out, files, skipped))
    md += [line for _, lines, _ in pages for line in lines]  # each section's Markdown (human ceilings)
    checks = read_sanity(sanity)
    if checks:
        md += [sanity_markdown(checks)]
    files["tables"].append(str(_write_text(out / "leaderboard.md", "\n".join(md)).relative_to(out)))
    files["tables"].append(str(_write_text(out / "per_class.md", "\n".join(
        [f"# {md_cell(title)}: per-class tables", ""] + [t.to_markdown() for t in per_class])).relative_to(out)))
    steps.update(1)

    info = _figures(results, out, fig_dir, size_bins, computed, bootstrap, seed, skipped, files)
    steps.update(1)

    overlay_info = {"files": [], "skipped": [], "captions": {}}
    if overlays:
        img_path, gt_path, subs = _resolve_inputs(results, images, gt, submissions)
        from xbench.score.report.overlays import overlay_figures

        overlay_info = overlay_figures(results, fig_dir, images_path=img_path, gt_path=gt_path, submissions=subs,
                                       names=names["overlays"])
        skipped += overlay_info["skipped"]
        files["overlays"] = [str(Path(p).relative_to(out)) for p in overlay_info["files"]]
    steps.update(1)

    page = render_html(title=title, results=results, main_tables=main_tables, per_class=per_class, gaps=gaps,
                       figures=info, overlay_files=files["overlays"], skipped=skipped, files=files, bootstrap=bootstrap,
                       overlay_captions=overlay_info.get("captions", {}),
                       scope_tables=scope_tables)
    page = _track_sections(page, pages, checks)
    index = _write_text(out / "index.html", page)
    manifest = {
        "models": [{"name": r.name, "path": _shown_path(r.path, out)} for r in results],
        "names": {kind: table.mapping for kind, table in names.items()},
        "files": files,
        "fit": info["auroc_vs_pointing"]["fit"],
        "delta_dice": info["dice_fixed_vs_best"]["delta_dice"],
        "size_bins": {k: info["region_size"][k] for k in ("bins", "edges")} if "region_size" in info else None,
        "n_boot": bootstrap,
        "seed": seed,
        "skipped": skipped,
        "sanity": checks,
    }
    _write_text(out / "report.json", json.dumps(manifest, indent=1, default=str))
    _remove_stale(out, previous, {f for group in files.values() for f in group})
    steps.update(1)
    steps.close()
    return index


def _own_boxes(results, images, gt, submissions, out: Path, files: dict, skipped: list) -> tuple[str, list, str]:
    """The "own boxes" section (:mod:`xbench.score.report.own_boxes`) as a page entry (at, Markdown, HTML)."""
    from xbench.score.report.own_boxes import own_boxes_section

    subs = _resolve_inputs(results, images, gt, submissions)[2]
    md, html, written, why = own_boxes_section(results, subs, out)
    files["tables"] += written
    skipped += why
    return "results", md, html


def _shown_path(path: Path, out: Path) -> str:
    """A result folder's path, relative to the report when inside it (the report may be built elsewhere and
    moved into place, so an absolute path into the build folder would go stale)."""
    try:
        return str(Path(path).resolve().relative_to(Path(out).resolve()))
    except ValueError:
        return str(path)


def _previous_files(out: Path) -> set[str]:
    """The files an earlier report wrote into ``out``, from its report.json (empty when there is none)."""
    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import DEFAULT, load_json, with_limits

    if not (out / "report.json").exists():
        return set()
    try:  # the folder is the user's: a report.json in it is read like any file from outside
        old = load_json(out / "report.json", limits=with_limits(DEFAULT, max_bytes=64 * 2**20))
        return {str(f) for group in old.get("files", {}).values() for f in group}
    except (InputError, AttributeError, TypeError):
        return set()  # not a report we wrote: nothing of it is removed


def _remove_stale(out: Path, previous: set[str], current: set[str]) -> None:
    """Delete what an earlier report wrote and this one did not (an overlay of a case no longer picked, the
    table of a dataset no longer scored), so the folder shows one report. Only files listed in the earlier
    report.json are touched, never anything else in ``out`` (the scorer writes results beside it)."""
    root = out.resolve()
    for rel in sorted(previous - current):
        path = (out / rel).resolve()
        if root not in path.parents or not path.is_file():
            continue  # a manifest that points outside the report folder is not ours to act on
        path.unlink()



# -- xbench sanity outputs -------------------------------------------------------------------------------------
def read_sanity(folders) -> list[dict]:
    """Per ``xbench sanity`` folder: model, method, mode, the last step's similarities and the verdict."""
    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import CONFIG, load_json

    checks, problems = [], []
    for folder in folders or ():
        path = Path(folder) / "sanity.json"
        try:
            data = load_json(path, limits=CONFIG)
            last = data["steps"][-1]
            checks.append({"model": str(data["model"]), "method": str(data.get("method")), "mode": str(data["mode"]),
                           "spearman_abs": last.get("spearman_abs"), "ssim": last.get("ssim"),
                           "depends_on_weights": bool(data["depends_on_weights"]), "verdict": str(data["verdict"])})
            for key in ("spearman_abs", "ssim"):
                v = checks[-1][key]
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise TypeError(f"{key} is {type(v).__name__}, not a number")
        except InputError as err:
            problems += [str(p) for p in err.problems]
        except (KeyError, IndexError, TypeError, AttributeError) as err:
            problems.append(f"{path}: not an xbench sanity output (missing or wrong {type(err).__name__}: {err})")
    if problems:
        raise ReportInputError(problems)
    return checks


def _sanity_rows(checks):
    f = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
    return [(c["model"], c["method"], c["mode"], f(c["spearman_abs"]), f(c["ssim"]),
             "yes" if c["depends_on_weights"] else "NO") for c in checks]


def sanity_markdown(checks) -> str:
    from xbench.score.cells import md_cell

    lines = ["## Do the maps depend on the weights? (xbench sanity, Adebayo et al. 2018)", "",
             "Similarity of the maps to the original ones once the weights are re-initialised (last step).", "",
             "| Model | Method | Mode | abs(Spearman) | SSIM | Depends on the weights |", "|---|---|---|---:|---:|---|"]
    lines += ["| " + " | ".join(md_cell(v) for v in row) + " |" for row in _sanity_rows(checks)]
    return "\n".join(lines) + "\n"


def sanity_html(checks) -> str:
    from html import escape

    head = "".join(f"<th>{h}</th>" for h in ("Model", "Method", "Mode", "|Spearman|", "SSIM", "Depends on the weights"))
    rows = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>" for row in _sanity_rows(checks))
    return (f"<section><h2>Do the maps depend on the weights?</h2><p>xbench sanity (model randomisation test, "
            f"Adebayo et al. 2018): similarity to the original maps after re-initialising the weights.</p>"
            f"<table><tr>{head}</tr>{rows}</table></section>\n")
