"""Prompt text for each class, from the finding vocabulary, in a model's prompt style.

Two styles (config key ``prompts.style``):

* ``"single"``: one prompt per class; score = logit_scale * cos(image, prompt) (+ logit_bias for
  SigLIP), written as a logit.
* ``"pair"`` (CheXzero): a positive and a negative prompt per class; the probability is the
  softmax over the two logits, p = exp(l_pos) / (exp(l_pos) + exp(l_neg)). It is written as the
  equivalent logit l_pos - l_neg (sigmoid of it is exactly that softmax), so ``score_kind`` stays
  "logit" and no precision is lost near 0 or 1.

Text comes from :mod:`xbench.schemas.vocabulary` (its ``prompts(name)`` gives the positive and
negative text of a canonical finding) when it knows the name; otherwise the class name itself and ``"No <class>"``. A config may override the templates
(``positive: "There is {}"``, ``negative: "There is no {}"``, where ``{}`` is the finding's text)
or give per-class text (``classes: {Pneumonia: ["...", "..."]}``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from xbench.extract.models.errors import ModelConfigError

STYLES = ("single", "pair")
PUBLISHED_FILE = Path(__file__).with_name("prompts.toml")


@dataclass(frozen=True)
class ClassPrompts:
    """Per-class prompt text; ``negative`` is empty for the single style."""

    style: str
    positive: tuple[str, ...]
    negative: tuple[str, ...]
    source: str  # "vocabulary" or "class-name": where the finding text came from
    origin: str = ""  # where the template / style comes from (a model card, the authors' scripts)

    def to_dict(self, classes: Sequence[str]) -> dict:
        d = {"style": self.style, "source": self.source, "positive": dict(zip(classes, self.positive))}
        if self.style == "pair":
            d["negative"] = dict(zip(classes, self.negative))
        if self.origin:
            d["origin"] = self.origin
        return d


def vocabulary_text(name: str) -> tuple[str, str] | None:
    """(positive, negative) text for a canonical finding from the vocabulary module, or None."""
    from xbench.schemas import vocabulary  # schemas, not extract.datasets: models never import the readers

    try:
        got = vocabulary.prompts(name)
    except Exception:
        return None
    return _as_pair(got)


def _as_pair(got: Any) -> tuple[str, str] | None:
    """Accept (pos, neg), [pos, neg], {"positive":..,"negative":..} or an object with those attributes."""
    if got is None:
        return None
    if isinstance(got, str):
        return got, f"No {got}"
    if isinstance(got, Mapping):
        pos, neg = got.get("positive"), got.get("negative")
    elif isinstance(got, (tuple, list)) and len(got) >= 1:
        pos, neg = got[0], got[1] if len(got) > 1 else None
    else:
        pos, neg = getattr(got, "positive", None), getattr(got, "negative", None)
    if isinstance(pos, (list, tuple)):
        pos = pos[0] if pos else None
    if isinstance(neg, (list, tuple)):
        neg = neg[0] if neg else None
    if not isinstance(pos, str):
        return None
    return pos, neg if isinstance(neg, str) else f"No {pos}"


def build_prompts(classes: Sequence[str], cfg: Mapping[str, Any] | None = None) -> ClassPrompts:
    """Prompt text for ``classes`` under the prompt config ``cfg`` (keys: style, positive,
    negative, classes, vocabulary=True). Raises ValueError for an unknown style."""
    cfg = dict(cfg or {})
    style = cfg.get("style", "single")
    if style not in STYLES:
        raise ModelConfigError(f"prompts.style must be one of {STYLES}, got {style!r}")
    pos_t, neg_t = cfg.get("positive"), cfg.get("negative")
    per_class = cfg.get("classes") or {}
    use_vocab = cfg.get("vocabulary", True)
    pos, neg, sources = [], [], set()
    for c in classes:
        if c in per_class:
            p, n = _as_pair(per_class[c]) or (c, f"No {c}")
            sources.add("config")
        else:
            got = vocabulary_text(c) if use_vocab else None
            sources.add("vocabulary" if got else "class-name")
            p, n = got or (c, f"No {c}")
            if pos_t:
                p = pos_t.format(got[0] if got else c)
            if neg_t:
                n = neg_t.format(got[0] if got else c)
        pos.append(p)
        neg.append(n)
    source = "+".join(sorted(sources)) or "class-name"
    return ClassPrompts(style, tuple(pos), tuple(neg) if style == "pair" else (), source, str(cfg.get("origin") or ""))


# ----------------------------------------------------------------------------------------------
# The published defaults of each model (prompts.toml)
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelPrompts:
    """A model's packaged prompt defaults: its template and, per dataset, the authors' exact text
    per class with the upstream file:line it comes from."""

    model: str
    template: str | None
    origin: str
    datasets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def for_dataset(self, dataset: str | None) -> tuple[dict[str, str], str | None]:
        """(canonical class -> text, source) published for ``dataset``; empty when none is."""
        entry = self.datasets.get(dataset or "") or {}
        return dict(entry.get("classes") or {}), entry.get("source")


@functools.lru_cache(maxsize=1)
def _published() -> dict:
    import tomllib

    with open(PUBLISHED_FILE, "rb") as fh:
        return tomllib.load(fh)


def model_prompts(model: str) -> ModelPrompts:
    """The packaged defaults of ``model`` (KeyError for a model without an entry)."""
    entry = _published()[model]
    return ModelPrompts(model, entry.get("template"), str(entry.get("origin", "")), entry.get("datasets") or {})


def preset_prompts(model: str, style: str = "single") -> dict:
    """A ``prompts:`` config holding ``model``'s packaged template and origin (for the presets)."""
    mp = model_prompts(model)
    cfg = {"style": style, "origin": mp.origin}
    if mp.template:
        cfg["positive"] = mp.template
    return cfg
