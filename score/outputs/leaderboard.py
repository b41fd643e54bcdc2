"""The columns and cells of the ranked leaderboard printed in a terminal, shared by ``xbench-score`` (several
submissions) and ``xbench report`` (``report/leaderboard.txt``), so both terminals show the same numbers.
Light on purpose: ``xbench-score``'s command module imports it, and ``--help`` must stay instant.
"""
from __future__ import annotations

#: (metrics.json key, header): the paper's grounding numbers, then recognition
TERMINAL_COLUMNS = (("pointing_game", "pointing"), ("dice_best", "dice*"), ("iou_best", "iou*"),
                    ("dice_fixed", "dice@.5"), ("auroc", "auroc"))


def format_cell(value, ci) -> str:
    """One value in percent with 2 decimals (as the tables) and its interval: "41.43 [30.21, 53.80]"."""
    if value is None:
        return "-"
    text = f"{100 * value:.2f}"
    if not ci or ci[0] is None or ci[1] is None:
        return f"{text} [–]"
    return f"{text} [{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]"


def _mapping(v) -> dict:
    return v if isinstance(v, dict) else {}


def is_untrained(metrics: dict) -> bool:
    """Whether a result's recorded provenance (metrics.json ``xbench.submission``: the extraction's config and
    adapter) says its weights are random (``weights: random``, ``random_init: true``; the demo's clip-tiny): a
    plumbing check whose rank says nothing about a trained model. Every board and table names such a model
    "NAME (untrained)" (:data:`UNTRAINED_SUFFIX`), not only the HTML page."""
    sub = _mapping(_mapping(_mapping(metrics).get("xbench")).get("submission"))
    config, adapter = _mapping(sub.get("config")), _mapping(sub.get("adapter"))
    return config.get("weights") == "random" or config.get("random_init") is True or adapter.get("weights") == "random"


#: what a model's display name gets when :func:`is_untrained`
UNTRAINED_SUFFIX = " (untrained)"
