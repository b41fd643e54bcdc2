"""The ``human`` section of a model's metrics.json (metrics minor 6): the ceiling beside each grounding value,
% of human, the percentage decrease and the paired gap model - human."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xbench.schemas.schema_versions import minor
from xbench.score.kernels.counts import DatasetCounts
from xbench.score.resampling.intervals import paired_p_value, percentile_interval, tied_differences
from xbench.score.sections.human.ceiling import (KEYS, HumanCeiling, ceiling, chexlocalize_block, percent_of_human, percentage_decrease,
                      reader_pairs)
from xbench.score.sections.human.reading import HUMAN_FILE, HumanSource

#: metrics.json minor version that adds the "human" section (contract, "Versions")
HUMAN_METRICS_MINOR = minor("metrics", "human")


# -- the "human" section of a model's metrics.json ---------------------------------------------------------
def _entry(model_value, h: HumanCeiling, m: HumanCeiling | None, c, k: str, level: float) -> dict:
    hv = h.point[c][k]
    out = {"model": model_value, "human": hv,
           "ci95": percentile_interval(h.reps[c][k], level) if h.reps[c][k].size else None,
           "percent_of_human": percent_of_human(model_value, hv),
           "percentage_decrease": percentage_decrease(model_value, hv)}
    if m is not None:
        mv = m.point[c][k]
        out["paired"] = {"model": mv, "gap": None if mv is None or hv is None else mv - hv}
        if h.reps[c][k].size:
            d = m.reps[c][k] - h.reps[c][k]
            ok = d[~np.isnan(d)]
            out["paired"]["gap_ci95"] = percentile_interval(ok, level)
            # d = 0 decided by the tie rule (docs/contract.md, "Significant"), as every paired p-value
            out["paired"]["p_value"] = paired_p_value(tied_differences(m.reps[c][k], h.reps[c][k]))
    return out


def human_block(metrics: Mapping, counts: Mapping[str, DatasetCounts], source: HumanSource, *, bootstrap: int,
                seed: int, level: float = 0.95) -> dict:
    """The ``human`` section for a model's ``metrics`` (its per-dataset ``counts`` give the paired gaps)."""
    out = {"source": {"file": HUMAN_FILE, "sha256": source.sha256,
                      "rule": source.info.get("rule") if isinstance(source.info.get("rule"), str) else None},
           "keys": list(KEYS), "datasets": {}}
    for name, readers in source.readers.items():
        if name not in metrics.get("datasets", {}):
            continue
        dm = metrics["datasets"][name]
        model = reader_pairs(counts[name]) if name in counts else None
        h, m = ceiling(readers, classes=source.classes.get(name), bootstrap=bootstrap, seed=seed, model=model)
        entry = {"readers": list(h.readers), "n_cases": int(len(h.cases)),
                 "summary": {k: _entry((dm.get("summary") or {}).get(k), h, m, None, k, level) for k in KEYS},
                 "classes": {}}
        for c in h.classes:
            mc = (dm.get("classes") or {}).get(c)
            if mc is None or not h.n_pairs[c]:  # only where a ceiling exists
                continue
            entry["classes"][c] = {"n_pairs": h.n_pairs[c], "n_readers": h.n_readers[c],
                                   **({"n_paired": m.n_pairs[c]} if m is not None else {}),
                                   **{k: _entry(mc.get(k), h, m, c, k, level) for k in KEYS}}
        native = (source.natives or {}).get(name)
        chex = native or (source.readings or {}).get(name)
        if chex:
            entry["chexlocalize"] = chexlocalize_block(chex, classes=source.classes.get(name), bootstrap=bootstrap,
                                                       seed=seed, resolution="native" if native else "grid")
        out["datasets"][name] = entry
    return out


def with_human(result, source: HumanSource, *, bootstrap: int, seed: int):
    """``result`` (a ScoreResult) with the ``human`` section added and ``schema_minor`` raised to 6 at least."""
    block = human_block(result.metrics, result.counts, source, bootstrap=bootstrap, seed=seed)
    metrics = dict(result.metrics)
    header = dict(metrics["xbench"])
    header["schema_minor"] = max(int(header.get("schema_minor", 0) or 0), HUMAN_METRICS_MINOR)
    metrics["xbench"] = header
    metrics["human"] = block
    result.metrics = metrics
    return result


def prepare(values: dict, gt, names, submissions):
    """The track's input (--human HUMAN_DIR), read and checked before anything is scored; None without it."""
    human_dir = values.get("human_dir")
    if human_dir is None:
        return None
    from xbench.schemas._cli import UserError

    from xbench.score.sections.human.reading import load_human

    human = load_human(human_dir)
    scored = set(names or gt.datasets)
    if not scored & set(human.readers):
        raise UserError(f"--human {human_dir}: holds the ceiling of {', '.join(sorted(human.readers))}, which is "
                        f"not scored here ({', '.join(sorted(scored))}); nothing was written")
    return human


def add(result, human, *, bootstrap: int, seed: int):
    """``result`` with the human section (:func:`with_human`)."""
    return with_human(result, human, bootstrap=bootstrap, seed=seed)
