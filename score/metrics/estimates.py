"""Point estimates from the counts: every registered metric per class (or per phrase category), the dataset
summaries and the overall means, as metrics.json reports them (without intervals: :mod:`xbench.score.resampling.bootstrap`),
and the per-pair values of the pairs table.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from xbench.score.metrics import registry as R
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.errors import ThresholdsError
from xbench.score.metrics.grounding import best_threshold, class_means, threshold_index
from xbench.score.kernels.maps import N_THRESHOLDS, THRESHOLDS
from xbench.score.metrics.recognition_sums import NO_LABELLED_CASE, ONE_LABEL_VALUE, recognition_sums

__all__ = ["class_grounding_point", "point_metrics", "class_taus", "Undefined", "undefined_notes",
           "UNSUPPORTED_REASON", "NO_POSITIVE_REGION"]

UNSUPPORTED_REASON = "listed as unsupported by the submission"
#: why a class's grounding metrics are undefined (beside recognition's NO_LABELLED_CASE, ONE_LABEL_VALUE)
NO_POSITIVE_REGION = "no positive case with a region"

Thresholds = Mapping[str, Mapping[str, tuple[float, float]]]


class Undefined(NamedTuple):
    """A class whose metrics are undefined (reported as null and left out of the means), and why:
    :data:`NO_POSITIVE_REGION` (grounding), ``recognition.NO_LABELLED_CASE`` (recognition) or
    ``recognition.ONE_LABEL_VALUE`` (AUROC and AUPRC)."""

    dataset: str
    cls: str
    reason: str


#: what each reason leaves undefined, in the order the notes list them
_UNDEFINED_WHAT = {NO_POSITIVE_REGION: "grounding metrics", NO_LABELLED_CASE: "recognition metrics",
                   ONE_LABEL_VALUE: "AUROC and AUPRC"}


def undefined_notes(items: Sequence[Undefined], shown: int = 5) -> list[str]:
    """One line per dataset and reason (a count, not a warning per class): e.g. "phantom: AUROC and AUPRC
    undefined for 2 classes (one label value only: A, B); reported as null and left out of the means"."""
    groups: dict[tuple[str, str], list[str]] = {}
    for u in items:
        groups.setdefault((u.dataset, u.reason), []).append(u.cls)
    order = list(_UNDEFINED_WHAT)
    lines = []
    for (dataset, reason), classes in sorted(groups.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1])
                                                                               if kv[0][1] in order else 99)):
        n = len(classes)
        names = ", ".join(classes[:shown]) + (f" and {n - shown} more" if n > shown else "")
        lines.append(f"{dataset}: {_UNDEFINED_WHAT.get(reason, 'metrics')} undefined for {n} "
                     f"class{'' if n == 1 else 'es'} ({reason}: {names}); reported as null and left out of the means")
    return lines


def _mean_defined(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _defined(x) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x


def _curve_means(view: R.PairView, values, sel: np.ndarray | None, block: int = 16) -> np.ndarray:
    """Class means (T,) of a curve metric's per-pair values over the selected pairs, ``block`` threshold columns
    at a time (memory: (P, block) temporaries, not (P, T) float64). For Dice and IoU over all pairs these are
    bit for bit :func:`xbench.score.metrics.grounding.class_mean_curves`."""
    out = np.full(N_THRESHOLDS, np.nan)
    for k0 in range(0, N_THRESHOLDS, block):
        k1 = min(N_THRESHOLDS, k0 + block)
        v = values(view.columns(slice(k0, k1)))
        out[k0:k1] = class_means(v if sel is None else v[sel])
    return out


def _at(view: R.PairView, values, k: int) -> np.ndarray:
    """Per-pair values (P,) of a curve metric at threshold index ``k``."""
    return values(view.columns(slice(k, k + 1)))[:, 0]


def _mean(v: np.ndarray) -> float | None:
    if v.size == 0:
        return None
    if v.dtype == bool:  # a share of hits, counted exactly
        return float(np.count_nonzero(v) / v.size)
    return float(np.mean(v))


def class_grounding_point(dc: DatasetCounts, idx: np.ndarray, taus: Mapping[str, int] | None = None, *,
                          scope: str = "class") -> tuple[dict, dict, dict]:
    """Point estimates of every registered grounding metric of ``scope`` for the positive pairs ``idx`` of
    one class (or the phrase rows ``idx`` of a category, ``scope="phrase"``).

    Returns (values {key: float or None}, chosen {tau key: index}, per_pair {key: (P,) values, NaN for
    pairs a metric does not select} of the metrics with a pairs-table column). Metrics sharing ``values``
    and ``pairs`` functions share one pass over the counts.
    """
    view = R.PairView(dc, idx)
    sels: dict = {}

    def sel_of(m):
        if m.pairs is None:
            return None
        if m.pairs not in sels:
            sels[m.pairs] = np.asarray(m.pairs(view), dtype=bool)
        return sels[m.pairs]

    curves: dict = {}
    out: dict = {}
    chosen: dict[str, int] = {}
    by_key: dict[str, int] = {}  # threshold index each curve metric used
    per_pair: dict = {}
    for m in R.metrics("grounding", scope=scope):
        sel = sel_of(m)
        if not m.curve:
            v = np.asarray(m.values(view))
            out[m.key] = _mean(v if sel is None else v[sel])
            pp = v
        else:
            rule = m.threshold
            if isinstance(rule, R.ChosenBy):
                k = by_key[rule.key]
                src = (m.values, m.pairs)
                pp = _at(view, m.values, k)
                out[m.key] = float(curves[src][k]) if src in curves else _mean(pp if sel is None else pp[sel])
            else:
                src = (m.values, m.pairs)
                if src not in curves:
                    curves[src] = _curve_means(view, m.values, sel)
                means = curves[src]
                if isinstance(rule, R.Best):
                    k = taus[rule.tau_key] if taus is not None else best_threshold(means)
                    chosen[rule.tau_key] = k
                else:
                    k = int(rule)
                out[m.key] = _defined(means[k]) if (sel is None or sel.any()) else None
                pp = _at(view, m.values, k) if m.pair_column else None
            by_key[m.key] = k
        if m.pair_column:
            pp = np.asarray(pp, dtype=np.float64)
            per_pair[m.key] = pp if sel is None else np.where(sel, pp, np.nan)
    return out, chosen, per_pair


def _class_point(dc: DatasetCounts, c: int, taus: Mapping[str, int] | tuple | None,
                 undefined: list | None = None) -> tuple[dict, dict]:
    """Point estimates of one class and its per-pair values (for the pairs table); the metrics undefined for
    it are appended to ``undefined`` (:class:`Undefined`)."""
    name = dc.classes[c]
    idx = dc.class_pairs(c)
    labelled = dc.labels[:, c] != -1
    entry: dict = {"n_positive": int(np.count_nonzero(dc.labels[:, c] == 1)), "n_regions": int(idx.size),
                   "n_labelled": int(np.count_nonzero(labelled))}
    per_pair: dict = {}
    grounding = R.metrics("grounding")
    if idx.size:
        values, chosen, pp = class_grounding_point(dc, idx, None if taus is None else R.tau_map(taus))
        entry.update(values)
        entry.update({k: float(THRESHOLDS[chosen[k]]) for k in R.tau_keys()})
        per_pair = {"idx": idx, **pp}
    else:
        if undefined is not None and any(m.warn for m in grounding):
            undefined.append(Undefined(str(dc.name), str(name), NO_POSITIVE_REGION))
        entry.update({m.key: None for m in grounding})
        entry.update({k: None for k in R.tau_keys()})
    reasons: list = []
    sums = recognition_sums(dc.labels[labelled, c], dc.prob[labelled, c], name=f"{dc.name}/{name}", undefined=reasons)
    if undefined is not None:
        undefined += [Undefined(str(dc.name), str(name), r) for r in reasons]
    entry.update({m.key: _defined(m.values(sums)[0]) for m in R.metrics("recognition")})
    return entry, per_pair


def class_taus(dc: DatasetCounts, thresholds: Thresholds | None) -> dict[str, dict[str, int]] | None:
    if thresholds is None:
        return None
    given = thresholds.get(dc.name, {})
    keys = R.tau_keys()
    out, missing = {}, []
    for c, name in enumerate(dc.classes):
        if not dc.supported[c] or not np.any(dc.pair_class == c):
            continue
        pair = given.get(name)
        taus = {} if pair is None else (dict(pair) if isinstance(pair, Mapping) else dict(zip(keys, pair)))
        if any(taus.get(k) is None for k in keys):
            missing.append(f"{dc.name}/{name}")
            continue
        out[name] = {k: threshold_index(taus[k]) for k in keys}
    if missing:
        raise ThresholdsError(f"the transferred thresholds lack {'/'.join(keys)} for {', '.join(missing)}; "
                              "score the earlier split with these classes or drop --thresholds-from")
    return out


def point_metrics(counts: Mapping[str, DatasetCounts], class_taus: dict, timings: dict,
                   undefined: list | None = None) -> tuple[dict, dict]:
    """The point estimates of :func:`xbench.score.scoring.metrics_from_counts`: (metrics without intervals, per-pair values)."""
    datasets: dict = {}
    per_pair_all: dict = {}
    class_keys, summary_keys = R.class_keys(), R.summary_keys()
    for name in sorted(counts):
        dc = counts[name]
        t0 = time.perf_counter()
        taus = class_taus[name]
        classes: dict = {}
        per_pair_all[name] = {}
        for c, cname in enumerate(dc.classes):
            if not dc.supported[c]:
                entry = {"n_positive": int(np.count_nonzero(dc.labels[:, c] == 1)),
                         "n_regions": int(np.count_nonzero(dc.pair_class == c)),
                         "n_labelled": int(np.count_nonzero(dc.labels[:, c] != -1))}
                entry.update({k: None for k in class_keys})
                entry.update({k: None for k in R.tau_keys()})
                entry.update({"unsupported": True, "reason": UNSUPPORTED_REASON})
                classes[cname] = entry
                continue
            entry, pp = _class_point(dc, c, None if taus is None else taus.get(cname), undefined)
            classes[cname] = entry
            per_pair_all[name][c] = pp
        summary = {}
        for k in summary_keys:
            m = R.metric(k)
            if m.kind == "dataset":
                summary[k] = _defined(m.values(dc, np.ones((1, dc.n_cases)))[0])
            else:
                summary[k] = _mean_defined(e[k] for e in classes.values())
        timings["metrics"] = timings.get("metrics", 0.0) + time.perf_counter() - t0
        datasets[name] = {"n_cases": dc.n_cases, "grid": [int(g) for g in dc.grid], "summary": summary,
                          "classes": classes}
    overall = {k: _mean_defined(d["summary"][k] for d in datasets.values()) for k in R.overall_keys()}
    return {"overall": overall, "datasets": datasets}, per_pair_all
