"""Faithfulness from the two rounds (contract § Faithfulness): deletion and insertion areas, ROAD curves, and
each one's difference from the random-order baseline, per class, per dataset and overall, with bootstrap
intervals over cases.

Input: the round-2 submission (the team's scores of the perturbed images; scores only) and the organiser's key
(:mod:`xbench.schemas.faithfulness`). Every round-2 id of the key must have a score, and the round-2 submission
must hold no id the key does not know (else it answers another round 2); both are refused with exit 2.

Per pair (case, class) and order, the curve is p_k = the probability of the class on the image of step k
(sigmoid of a logit, a probability as it is) over the fractions x_k = floor(k G²/K) / G², and its area the
trapezoid rule over them divided by the span (:func:`xbench.schemas.faithfulness.curve_area`). The gains say
"better than random" with one sign for every curve: deletion and ROAD-MoRF ``random - map`` (a faithful map's
curve drops faster), insertion and ROAD-LeRF ``map - random`` (it rises faster, or drops slower).
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xbench.schemas import faithfulness as F
from xbench.schemas.errors import InputError, Problem

from xbench.schemas.schema_versions import minor
from xbench.score.resampling.intervals import percentile_interval

METRICS_MINOR = minor("metrics", "faithfulness")

#: curve -> [(metrics.json key, how it is made from the per-order areas)]
KEYS = {
    "deletion": [("deletion_auc", "map"), ("deletion_auc_random", "random"), ("deletion_gain", "random-map")],
    "insertion": [("insertion_auc", "map"), ("insertion_auc_random", "random"), ("insertion_gain", "map-random")],
    "road": [("road_morf_auc", "map"), ("road_lerf_auc", "reverse"), ("road_random_auc", "random"),
             ("road_morf_gain", "random-map"), ("road_lerf_gain", "reverse-random")],
}
LABELS = {"deletion_auc": "Deletion AUC", "deletion_auc_random": "Deletion AUC (random)", "deletion_gain": "Deletion gain",
          "insertion_auc": "Insertion AUC", "insertion_auc_random": "Insertion AUC (random)",
          "insertion_gain": "Insertion gain", "road_morf_auc": "ROAD MoRF", "road_lerf_auc": "ROAD LeRF",
          "road_random_auc": "ROAD random", "road_morf_gain": "ROAD MoRF gain", "road_lerf_gain": "ROAD LeRF gain"}


def _value(areas: dict[str, np.ndarray], how: str) -> np.ndarray:
    if "-" in how:
        a, b = how.split("-")
        return areas[a] - areas[b]
    return areas[how]


@dataclass
class DatasetCurves:
    """One dataset's pairs and their curves: ``probs[curve]`` (pairs, orders, steps) in ORDERS[curve] order."""

    cases: list[str]                # distinct case ids, sorted (the bootstrap's units)
    pair_case: np.ndarray           # (pairs,) index into cases
    pair_class: list[str]
    probs: dict[str, np.ndarray]


def load_round2(round2_path, key_path) -> tuple[F.Key, dict[str, DatasetCurves], dict]:
    """Read and check the key and the round-2 submission; the curves of every pair. Raises InputError with
    every problem (one a line)."""
    from xbench.schemas.submission import read_submission, validate_submission

    key = F.read_key(key_path, where=f"--key {key_path}")
    problems = validate_submission(round2_path, scores_only=True)
    if problems:
        raise InputError([Problem(f"--faithfulness {p.where}", p.message) for p in problems])
    sub = read_submission(round2_path)
    out, problems = {}, []
    unknown = sorted(set(sub.datasets) - set(key.dataset.tolist()))
    if unknown:
        problems.append(Problem(f"--faithfulness {round2_path}", f"holds {len(unknown)} dataset(s) the key does not know, "
                                f"e.g. {unknown[0]!r}: the key belongs to another round 2 (or the submission to another "
                                "round-2 store)"))
    for name in sorted(set(key.dataset.tolist())):
        w = f"--faithfulness {round2_path}/{name}"
        if name not in sub.datasets:
            problems.append(Problem(w, "dataset of the key is missing from the round-2 submission"))
            continue
        ds = sub.datasets[name]
        rows = key.dataset == name
        ids = set(key.round2_id[rows].tolist())
        have = {c: i for i, c in enumerate(ds.case_id.tolist())}
        missing = sorted(ids - set(have))
        extra = sorted(set(have) - ids)
        if missing:
            problems.append(Problem(w, f"{len(missing)} round-2 image(s) of the key have no score (missing steps), e.g. {missing[0]!r}"))
        if extra:
            problems.append(Problem(w, f"holds {len(extra)} id(s) the key does not know, e.g. {extra[0]!r}: the key belongs "
                                       "to another round 2 (or the submission to another round-2 store)"))
        col = {c: j for j, c in enumerate(ds.classes)}
        classes = sorted(set(key.class_name[rows].tolist()))
        lacking = [c for c in classes if c not in col or c in ds.unsupported]
        if lacking:
            problems.append(Problem(w, f"class(es) of the key without scores: {', '.join(lacking)}"))
        if missing or extra or lacking:
            continue
        from xbench.schemas.faithfulness import probability

        p_all = probability(ds.scores, ds.score_kind)
        r = np.flatnonzero(rows)
        prob = p_all[[have[i] for i in key.round2_id[r].tolist()], [col[c] for c in key.class_name[r].tolist()]]
        curves, bad = _arrange(key, r, prob)
        if bad:
            problems.append(Problem(w, bad))
            continue
        out[name] = curves
    if problems:
        raise InputError(problems)
    from xbench.schemas.store import file_sha256  # in pieces: the key was bounded by its reader, not its size

    info = {"model": str(sub.attrs.get("model", "")), "key_sha256": file_sha256(key_path)}
    return key, out, info


def _arrange(key: F.Key, rows: np.ndarray, prob: np.ndarray) -> tuple[DatasetCurves | None, str | None]:
    """The key's rows of one dataset into (pairs, orders, steps) arrays per curve; a message when a pair lacks a
    step or order, or a row is repeated."""
    case = key.case_id[rows].tolist()
    cls = key.class_name[rows].tolist()
    pairs = sorted(set(zip(case, cls)))
    pair_of = {p: i for i, p in enumerate(pairs)}
    cases = sorted({c for c, _ in pairs})
    case_of = {c: i for i, c in enumerate(cases)}
    probs = {}
    for curve in key.header["curves"]:
        sel = np.flatnonzero(key.curve[rows] == curve)
        if not sel.size:
            continue
        orders = F.ORDERS[curve]
        n_steps = len(F.curve_steps(curve, key.steps))
        arr = np.full((len(pairs), len(orders), n_steps), np.nan)
        seen = np.zeros(arr.shape, dtype=np.int64)
        pi = np.array([pair_of[(case[i], cls[i])] for i in sel], dtype=np.int64)
        oi = np.array([orders.index(o) for o in key.order[rows][sel].tolist()], dtype=np.int64)
        si = key.step[rows][sel]
        np.add.at(seen, (pi, oi, si), 1)
        arr[pi, oi, si] = prob[sel]
        if (seen > 1).any():
            return None, f"the key lists a (case, class, {curve}, order, step) row twice"
        # every pair of the dataset must have the whole curve in every order
        if (seen == 0).any():
            p, o, s = (int(v[0]) for v in np.nonzero(seen == 0))
            return None, (f"the key lacks step {s} of the {orders[o]} order of {curve} for case {pairs[p][0]!r}, "
                          f"class {pairs[p][1]!r} (missing steps)")
        probs[curve] = arr
    return DatasetCurves(cases, np.array([case_of[c] for c, _ in pairs], dtype=np.int64), [c for _, c in pairs], probs), None


def fractions(curve: str, key: F.Key) -> np.ndarray:
    n = key.grid * key.grid
    return F.step_cells(n, key.steps)[: len(F.curve_steps(curve, key.steps))] / n


def pair_values(key: F.Key, dc: DatasetCurves) -> dict[str, np.ndarray]:
    """Every metric key -> (pairs,) value of each pair."""
    out = {}
    for curve, arr in dc.probs.items():
        areas = {o: F.curve_area(fractions(curve, key), arr[:, j]) for j, o in enumerate(F.ORDERS[curve])}
        for k, how in KEYS[curve]:
            out[k] = _value(areas, how)
    return out


def _class_means(values: dict[str, np.ndarray], dc: DatasetCurves, weights: np.ndarray | None = None) -> dict:
    """class -> {key: weighted mean over its pairs}, ``weights`` (pairs,) (a resample's case multiplicities)."""
    classes = sorted(set(dc.pair_class))
    idx = np.searchsorted(classes, dc.pair_class)
    w = np.ones(len(dc.pair_class)) if weights is None else weights
    den = np.bincount(idx, weights=w, minlength=len(classes))
    sums = {k: np.bincount(idx, weights=w * v, minlength=len(classes)) for k, v in values.items()}
    return {c: {k: (float(sums[k][j] / den[j]) if den[j] > 0 else None) for k in values} for j, c in enumerate(classes)}


def _mean(vals) -> float | None:
    vals = [v for v in vals if v is not None]
    return float(np.mean(vals)) if vals else None


def faithfulness_section(key: F.Key, curves: dict[str, DatasetCurves], info: dict, *, bootstrap: int = 1000,
                         seed: int = 0, round2_name: str = "") -> dict:
    """The metrics.json ``faithfulness`` section."""
    datasets = {}
    # ROAD's own measure (the authors' road_eval: accuracy on the imputed images) needs the pairs' labels: only a
    # round 2 made from the positive pairs of a ground truth (xbench perturb --gt) has them (every label 1)
    road_accuracy = "road" in key.header["curves"] and key.header.get("pairs") == "positive"
    for name, dc in curves.items():
        values = pair_values(key, dc)
        per_class = _class_means(values, dc)
        summary = {k: _mean(pc[k] for pc in per_class.values()) for k in values}
        boot_class, boot_ds = _bootstrap(values, dc, bootstrap, seed)
        classes = {}
        for c, v in per_class.items():
            sel = np.array([pc == c for pc in dc.pair_class])
            entry = {"n_pairs": int(sel.sum()), **v}
            if bootstrap:
                entry["ci95"] = {k: percentile_interval(boot_class[c][k]) for k in values}
            entry["curves"] = {curve: {"fractions": fractions(curve, key).tolist(),
                                       **{o: arr[sel, j].mean(axis=0).tolist() for j, o in enumerate(F.ORDERS[curve])}}
                               for curve, arr in dc.probs.items()}
            if road_accuracy:
                entry["road_accuracy"] = _road_accuracy(dc.probs["road"][sel])
            classes[c] = entry
        datasets[name] = {"n_pairs": len(dc.pair_class), "n_cases": len(dc.cases), "summary": summary,
                          **({"ci95": {k: percentile_interval(boot_ds[k]) for k in values}} if bootstrap else {}),
                          **({"road_accuracy": _road_accuracy(dc.probs["road"])} if road_accuracy else {}),
                          "classes": classes}
    keys = [k for curve in key.header["curves"] for k, _ in KEYS[curve]]
    overall = {k: _mean(d["summary"].get(k) for d in datasets.values()) for k in keys}
    return {"curves": list(key.header["curves"]), "steps": key.steps, "grid": key.grid,
            "seed": key.header.get("seed"), "road_noise": key.header.get("road_noise") if "road" in key.header["curves"] else None,
            **({"insertion_substrate": key.substrate} if "insertion" in key.header["curves"] else {}),
            "score": "probability: sigmoid of a logit, a probability as it is",
            "round2": {"submission": round2_name, "model": info["model"], "key_sha256": info["key_sha256"]},
            "bootstrap": bootstrap, "overall": overall, "datasets": datasets}


def _road_accuracy(arr: np.ndarray) -> dict:
    """ROAD's measure per step (Rong et al. 2022; road/retraining.py:25-51 at e6b9987, which counts the images whose
    predicted class is the label): here every pair is positive, so the share of the pairs whose class is still
    predicted present, probability >= 0.5, per order; ``arr`` (pairs, orders, steps)."""
    return {o: (arr[:, j] >= 0.5).mean(axis=0).tolist() for j, o in enumerate(F.ORDERS["road"])}


def _bootstrap(values: dict[str, np.ndarray], dc: DatasetCurves, bootstrap: int, seed: int):
    """Resample the dataset's cases with replacement ``bootstrap`` times (all pairs of a case move together); per
    resample the class means (pairs weighted by their case's multiplicity) and the dataset mean over the classes
    present in it. Returns ({class: {key: (B,)}}, {key: (B,)}), NaN where undefined."""
    classes = sorted(set(dc.pair_class))
    boot_class = {c: {k: np.full(bootstrap, np.nan) for k in values} for c in classes}
    boot_ds = {k: np.full(bootstrap, np.nan) for k in values}
    n = len(dc.cases)
    from xbench.score.resampling.engine import resample_weights, stream

    weights = np.concatenate(list(resample_weights(n, bootstrap, stream(seed)))) if bootstrap else np.zeros((0, n))
    for b in range(bootstrap):
        mult = weights[b]
        per = _class_means(values, dc, mult[dc.pair_case])
        for c in classes:
            for k in values:
                if per[c][k] is not None:
                    boot_class[c][k][b] = per[c][k]
        for k in values:
            m = _mean(per[c][k] for c in classes)
            if m is not None:
                boot_ds[k][b] = m
    return boot_class, boot_ds


def add_section(metrics: dict, section: dict) -> dict:
    """metrics.json with the ``faithfulness`` section and its minor (never lowering one another section set)."""
    header = metrics.setdefault("xbench", {})
    header["schema_minor"] = max(METRICS_MINOR, int(header.get("schema_minor", 0)))
    metrics["faithfulness"] = section
    return metrics


# ------------------------------------------------------------------------------------------ tables
def table_rows(metrics: dict, label: str = "") -> tuple[list[str], list[list]]:
    """(header, rows): one row per dataset (its mean over classes, class "all") and per class, values in percent
    with the 95 % interval."""
    sec = metrics["faithfulness"]
    keys = [k for curve in sec["curves"] for k, _ in KEYS[curve]]
    head = ["model", "dataset", "class", "pairs"] + [LABELS[k] for k in keys]
    rows = []
    for d, e in sec["datasets"].items():
        entries = [("all", e["n_pairs"], e["summary"], e.get("ci95", {}))]
        entries += [(c, v["n_pairs"], v, v.get("ci95", {})) for c, v in e["classes"].items()]
        for c, n, vals, ci in entries:
            rows.append([label, d, c, n] + [_cell(vals.get(k), ci.get(k)) for k in keys])
    return head, rows


def _cell(v, ci) -> str:
    if v is None:
        return "-"
    s = f"{100 * v:.2f}"
    return s + (f" [{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]" if ci else "")


def write_tables(metrics: dict, folder: Path, label: str = "") -> list[Path]:
    """faithfulness.csv and faithfulness.md (percent; gains > 0: better than the random order)."""
    head, rows = table_rows(metrics, label)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([head, *rows])
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |" for r in rows]
    md.append("")
    md.append("Areas under the curves of the class probability (percent); gains > 0: better than a random order; "
              "95% bootstrap interval over cases in brackets.")
    paths = [folder / "faithfulness.csv", folder / "faithfulness.md"]
    paths[0].write_text(buf.getvalue())
    paths[1].write_text("\n".join(md) + "\n")
    return paths


def faithfulness_html(results) -> str:
    """The report page's "Faithfulness" section (every model whose metrics.json has one), or "" when none has."""
    import html

    blocks = []
    for r in results:
        if "faithfulness" not in r.metrics:
            continue
        head, rows = table_rows(r.metrics, r.name)
        cells = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in row) + "</tr>" for row in rows)
        sec = r.metrics["faithfulness"]
        notes = ""
        if sec.get("insertion_substrate"):
            notes += (" Insertion starts from a blurred copy of the image (RISE's substrate)."
                      if sec["insertion_substrate"] == "blur" else " Insertion starts from the image's mean grey.")
        if "road" in sec["curves"]:
            notes += (" The ROAD areas and gains are XBench's summaries: ROAD's authors report the accuracy per removal "
                      "step (metrics.json road_accuracy, with --gt) and define no area.")
        blocks.append(f"<p class=\"meta\">{html.escape(r.name)}: curves {html.escape(', '.join(sec['curves']))}, "
                      f"{sec['steps']} steps, {sec['grid']}x{sec['grid']} cells.{html.escape(notes)}</p>"
                      f"<div class=\"scroll\"><table class=\"lb\"><thead><tr>{cells}</tr></thead><tbody>{body}"
                      "</tbody></table></div>")  # the report's table style (score/report/html.py)
    if not blocks:
        return ""
    return ("<h2>Faithfulness</h2><p>Does the score fall when the map's most relevant cells are removed first (deletion, "
            "ROAD MoRF) and rise when they are inserted first? Areas under the class-probability curves in percent; "
            "gains &gt; 0: better than a random order of the same cells; 95% bootstrap interval over cases in brackets.</p>"
            + "".join(blocks))


def prepare(values: dict, gt, names, submissions) -> dict | None:
    """The track's inputs (--faithfulness ROUND2 and --key, both or neither; one submission), read and checked
    before anything is scored: the section itself (it needs nothing of the round-1 scoring), or None."""
    from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError

    round2, key = values.get("faithfulness"), values.get("key")
    if round2 is None and key is None:
        return None
    if round2 is None or key is None:
        raise UserError(f"{'--key' if round2 is None else '--faithfulness'} needs {'--faithfulness' if round2 is None else '--key'}: "
                        "the round-2 scores are read through the key that xbench perturb wrote", NOT_WRITTEN_HINT)
    if len(submissions) != 1:
        raise UserError("--faithfulness scores one submission at a time (the round-1 submission its round 2 was made "
                        "from)", NOT_WRITTEN_HINT)
    from xbench.schemas.paths import store_stem

    k, curves, info = load_round2(round2, key)  # an InputError: every problem, exit 2
    return faithfulness_section(k, curves, info, bootstrap=values["bootstrap"], seed=values["seed"],
                                round2_name=store_stem(round2))


def add(result, section: dict, *, bootstrap: int, seed: int):
    """``result`` with the faithfulness section (:func:`add_section`)."""
    add_section(result.metrics, section)
    return result


def page(results) -> tuple[list[str], str]:
    return [], faithfulness_html(results)
