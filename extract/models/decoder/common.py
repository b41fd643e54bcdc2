"""The adapter of every decoder VLM: recognition by likelihood, maps from the answer position.

A model module supplies a :class:`DecoderModel` (its vision tower, projector, decoder and tokenizer behind a few
methods) and a :class:`QuestionTemplate`; :class:`DecoderVLMAdapter` does the rest:

* **Scores.** For each (image, finding) the model's own prompt with the finding's question, the image tokens
  spliced in where the template puts the image, one forward pass; the score is log P(yes) - log P(no) of the
  answer's first token at the answer position (the token after the prompt). The softmax normaliser cancels,
  so it is exactly the difference of the two logits (``score_kind`` "logit": sigmoid of it is P(yes) among
  the two answers). The findings of one image are one batch of sequences, right-padded: a causal decoder's
  real positions never see the padding after them, so no padding mask is needed and each sequence's answer
  is read at its own last position.
* **Maps** (``method``, :mod:`.maps`): computed on the vision patch grid and undone to the whole image with
  the frame of the model's own preprocessing (:func:`~xbench.extract.models.geometry.undo_box`).
"""
from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from xbench.extract.models.base import AdapterOutput, ModelAdapter
from xbench.extract.models.errors import ModelConfigError
from xbench.extract.models.geometry import frame_boxes, model_input, undo_box

PROMPTS_FILE = Path(__file__).with_name("prompts.toml")


@functools.lru_cache(maxsize=None)
def published_prompts() -> dict:
    """The question templates of prompts.toml, by model."""
    with open(PROMPTS_FILE, "rb") as fh:
        return tomllib.load(fh)


@dataclass(frozen=True)
class QuestionTemplate:
    """One question per finding (``question`` with ``{}`` for the finding's text, or per-class text) and the
    two answers whose first tokens are compared."""

    question: str
    answers: tuple[str, str]
    classes: Mapping[str, str]
    origin: str = ""
    phrase: str = "Is there {} in this chest X-ray?"  # the question of a phrase row (``{}``: the phrase as written)

    @classmethod
    def from_config(cls, model: str, prompts: Mapping[str, Any] | None) -> "QuestionTemplate":
        base = dict(published_prompts()[model])
        prompts = dict(prompts or {})
        question = prompts.get("positive", base["question"])
        answers = prompts.get("answers", base["answers"])
        classes = prompts.get("classes") or {}
        if not isinstance(question, str) or question.count("{}") != 1:
            raise ModelConfigError(f"prompts.positive must be text with one {{}} for the finding, got {question!r}")
        if (not isinstance(answers, (list, tuple)) or len(answers) != 2
                or not all(isinstance(a, str) and a.strip() for a in answers)):
            raise ModelConfigError(f"prompts.answers must be two non-empty texts (yes, no), got {answers!r}")
        if not isinstance(classes, Mapping) or not all(isinstance(v, (str, list)) for v in classes.values()):
            raise ModelConfigError("prompts.classes must map a class to its question text")
        classes = {str(k): (v[0] if isinstance(v, list) and v else v) for k, v in classes.items()}
        phrase = prompts.get("phrase", base.get("phrase", question))
        if not isinstance(phrase, str) or phrase.count("{}") != 1:
            raise ModelConfigError(f"prompts.phrase must be text with one {{}} for the phrase, got {phrase!r}")
        return cls(question, (answers[0], answers[1]), classes, prompts.get("origin", base.get("origin", "")), phrase)

    def text(self, finding: str) -> str:
        if finding in self.classes:
            return str(self.classes[finding])
        return self.question.replace("{}", finding.lower())

    def phrase_text(self, phrase: str) -> str:
        """A phrase row's question: the phrase as written (a radiologist's sentence keeps its case)."""
        return self.phrase.replace("{}", phrase.strip())


class DecoderModel(torch.nn.Module):
    """What a decoder VLM module implements. ``grid`` (h, w) of the vision tokens; ``input_size`` R of the
    square model frame; ``mean``/``std`` its normalisation; ``resize`` its frame mode (geometry)."""

    grid: tuple[int, int]
    input_size: int
    resize: str = "crop"
    interpolation: str = "bicubic"
    mean: tuple[float, ...]
    std: tuple[float, ...]
    #: the model's processor stretches each image's grey values to 0..255 before resizing (MAIRA-2)
    stretch: bool = False
    tokenizer: Any = None

    def vision_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """(B, N, Dv): the vision tokens entering the projector."""
        raise NotImplementedError

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """(B, N, D): the image tokens the decoder sees."""
        raise NotImplementedError

    def prompt_ids(self, question: str) -> tuple[list[int], list[int]]:
        """Token ids before and after the image tokens for one question (the model's template)."""
        raise NotImplementedError

    def answer_ids(self, answers: tuple[str, str]) -> tuple[int, int]:
        """The first token of each answer as the model would write it after the prompt: each answer tokenised
        alone without special tokens (``self.tokenizer``), its first token; the two must differ."""
        ids = [self.tokenizer(a, add_special_tokens=False).input_ids for a in answers]
        if not all(ids):
            raise ModelConfigError(f"an answer tokenises to nothing: {answers!r}")
        if ids[0][0] == ids[1][0]:
            raise ModelConfigError(f"the answers {answers!r} start with the same token")
        return ids[0][0], ids[1][0]

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def answer_logits(self, embeds: torch.Tensor, positions: torch.Tensor, image: tuple[int, int]) -> torch.Tensor:
        """(S, V) next-token logits at ``positions`` of the sequences ``embeds`` (S, L, D) whose image tokens
        are the columns ``image`` [start, stop) (a model whose image tokens attend to each other needs them)."""
        raise NotImplementedError

    def attention_layers(self) -> dict:
        """The decoder's attention modules -> layer number (0 = first), for :mod:`.capture`."""
        raise NotImplementedError

    def grid_of(self, n: int) -> tuple[int, int]:
        """The patch grid of a map over ``n`` tokens: the image tokens' grid, or the vision tokens' grid
        (``feature_grid``) when the projector pools them (Grad-CAM's maps are over the vision tokens)."""
        for grid in (self.grid, getattr(self, "feature_grid", self.grid)):
            if grid[0] * grid[1] == n:
                return grid
        raise ValueError(f"{n} tokens are on neither grid {self.grid} nor the vision tokens' grid")


class CausalLMDecoder(DecoderModel):
    """A decoder VLM whose language model is a transformers ``*ForCausalLM`` (``causal_lm``: LLaVA-Rad's Llama,
    MAIRA-2's, CheXagent's Phi-2): its embedding table, its last hidden states at the answer positions through its
    own head, and the attention modules ``_layers`` the capture reads (layer number by module)."""

    _layers: dict

    @property
    def causal_lm(self) -> torch.nn.Module:
        return self.lm

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.causal_lm.get_input_embeddings()(ids)

    def answer_logits(self, embeds: torch.Tensor, positions: torch.Tensor, image=None) -> torch.Tensor:
        hidden = self.causal_lm.model(inputs_embeds=embeds, use_cache=False).last_hidden_state
        rows = hidden[torch.arange(hidden.shape[0], device=hidden.device), positions]
        return self.causal_lm.lm_head(rows)

    def attention_layers(self) -> dict:
        return self._layers


@dataclass
class Batch:
    """The sequences of one image: inputs (S, L, D), answer positions (S,), image columns [start, stop)."""

    embeds: torch.Tensor
    positions: torch.Tensor
    image: tuple[int, int]


def split_state(state: Mapping[str, torch.Tensor], prefixes: Mapping[str, str], rest: str,
                skip: tuple[str, ...]) -> dict[str, dict]:
    """A checkpoint's state dict cut into the parts a model holds: a key under ``prefixes[name]`` goes to part
    ``name`` without its prefix, any other to ``rest`` unless it ends with one of ``skip`` (buffers the model
    recomputes from its config)."""
    parts: dict[str, dict] = {name: {} for name in (*prefixes, rest)}
    for key, value in state.items():
        name = next((n for n, pre in prefixes.items() if key.startswith(pre)), None)
        if name is not None:
            parts[name][key[len(prefixes[name]):]] = value
        elif not key.endswith(skip):
            parts[rest][key] = value
    return parts


def load_parts(model: torch.nn.Module, parts: Mapping[str, Mapping[str, torch.Tensor]],
               ignore_missing: tuple[str, ...] = ()) -> None:
    """Each part into the submodule of its name (``""``: the model itself), strictly: a tensor of the wrong shape,
    a missing weight (unless it ends with one of ``ignore_missing``) or an unexpected one is a
    :class:`ModelConfigError`, one line each (20 of each kind a part at most)."""
    problems = []
    for name, sub in parts.items():
        where = f"weights of {name}" if name else "weights"
        try:
            missing, unexpected = (getattr(model, name) if name else model).load_state_dict(sub, strict=False)
        except RuntimeError as exc:  # a tensor of the wrong shape: the folder does not match its config
            raise ModelConfigError([f"{where}: {line.strip()[:200]}" for line in str(exc).splitlines()[1:11]
                                    if line.strip()]) from None
        missing = [k for k in missing if not k.endswith(ignore_missing)]
        dot = f"{name}." if name else ""
        problems += [f"missing weight {dot}{k}" for k in missing[:20]]
        problems += [f"unexpected weight {dot}{k}" for k in unexpected[:20]]
    if problems:
        raise ModelConfigError(problems[:40])


def stretch_grey(images: torch.Tensor) -> torch.Tensor:
    """Each (S, S) uint8 image's grey values stretched to 0..255 as MAIRA-2's processor does before its image
    processor (``_normalize_image``: minus the minimum, divided by the new maximum, times 255, truncated to
    uint8), in float64 as numpy computes it. A constant image, which the authors' code turns into NaN, stays 0."""
    x = images.to(torch.float64)
    flat = x.flatten(1)
    x = x - flat.min(1).values.view(-1, 1, 1)
    top = x.flatten(1).max(1).values.view(-1, 1, 1)
    x = torch.where(top > 0, x / torch.where(top > 0, top, 1.0) * 255, 0.0)
    return x.to(torch.uint8)


class DecoderVLMAdapter(ModelAdapter):
    score_kind = "logit"
    supports_phrases = True
    phrase_reason = ""

    def __init__(self, *, name: str, model: DecoderModel, template: QuestionTemplate, method: str = "attention",
                 layers: Sequence[int] | None = None, map_size: Sequence[int] | None = None,
                 info: Mapping[str, Any] | None = None) -> None:
        from xbench.extract.models.decoder.maps import METHODS

        super().__init__()
        if method not in METHODS:
            raise ModelConfigError(f"{name} runs the map methods {', '.join(METHODS)}, not {method!r}")
        self.name, self.model, self.template, self.method = name, model.eval(), template, method
        self.info = dict(info or {})
        n_layers = len(model.attention_layers())
        if isinstance(layers, int) and not isinstance(layers, bool):
            layers = [layers]  # `layers: -1` as the config allows
        if layers is not None and (not isinstance(layers, (list, tuple))
                                   or not all(isinstance(v, int) and not isinstance(v, bool) for v in layers)):
            raise ModelConfigError(f"layers must be a layer number or a list of them, got {layers!r}")
        chosen = list(range(n_layers)) if layers is None else list(layers)
        bad = [v for v in chosen if not -n_layers <= v < n_layers]
        if bad or not chosen:
            raise ModelConfigError(f"layers {bad or chosen} outside the decoder's {n_layers} layers")
        self.layers = tuple(sorted({v % n_layers for v in chosen}))
        self._map_shape = tuple(int(v) for v in (map_size or model.grid))
        self._prompts: list[tuple[list[int], list[int]]] = []
        self._answers = model.answer_ids(template.answers)

    @property
    def map_shape(self) -> tuple[int, int]:
        return self._map_shape

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device, dtype=None) -> "DecoderVLMAdapter":
        self.model.to(device=device, dtype=dtype)
        return self

    def set_classes(self, classes: Sequence[str]) -> None:
        self.classes = tuple(classes)
        self._prompts = [self.model.prompt_ids(self.template.text(c)) for c in self.classes]

    def image_transform(self, dataset: str | None = None):
        from xbench.extract.models.dual import host_transform

        m = self.model
        if m.stretch:  # a per-image step before resizing: done here on the stored image (``pixels``)
            return None
        return host_transform((m.input_size, m.input_size), m.resize, m.interpolation, {"mean": m.mean, "std": m.std})

    def pixels(self, images: torch.Tensor, orig_size: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(model inputs (B, 3, R, R), frame boxes (B, 4)) from stored uint8 images or host-prepared inputs."""
        m = self.model
        dtype = next(m.parameters()).dtype
        if images.dtype == torch.uint8:
            images = stretch_grey(images) if m.stretch else images
            boxes = frame_boxes(orig_size, m.resize, images.shape[-1])
            x = model_input(images, boxes, m.input_size, m.resize, m.interpolation).expand(-1, 3, -1, -1)
            mean = torch.tensor(m.mean, device=x.device).view(1, -1, 1, 1)
            std = torch.tensor(m.std, device=x.device).view(1, -1, 1, 1)
            return ((x - mean) / std).to(self.device, dtype), boxes
        return images.to(self.device, dtype), self.image_transform().boxes(orig_size.cpu())

    def sequences(self, image_tokens: torch.Tensor, which: Sequence[int] | None = None) -> Batch:
        """The prompts of classes ``which`` (all by default) around one image's tokens (N, D), right-padded."""
        which = range(len(self.classes)) if which is None else which
        rows, positions, start = [], [], None
        for c in which:
            before, after = self._prompts[c]
            ids_b = torch.tensor(before, dtype=torch.long, device=image_tokens.device)
            ids_a = torch.tensor(after, dtype=torch.long, device=image_tokens.device)
            if start is not None and start != len(before):
                raise ModelConfigError("every question must put the image at the same place in the prompt")
            start = len(before)
            rows.append(torch.cat([self.model.embed(ids_b), image_tokens, self.model.embed(ids_a)]))
            positions.append(rows[-1].shape[0] - 1)
        longest = max(r.shape[0] for r in rows)
        embeds = torch.stack([F.pad(r, (0, 0, 0, longest - r.shape[0])) for r in rows])
        pos = torch.tensor(positions, dtype=torch.long, device=image_tokens.device)
        return Batch(embeds, pos, (start, start + image_tokens.shape[0]))

    def yes_no(self, logits: torch.Tensor) -> torch.Tensor:
        """log P(yes) - log P(no) from next-token logits (S, V): the logits' difference (normaliser cancels)."""
        yes, no = self._answers
        return logits[:, yes].float() - logits[:, no].float()

    def __call__(self, images: torch.Tensor, orig_size: torch.Tensor) -> AdapterOutput:
        from xbench.extract.models.decoder.maps import METHODS

        if not self._prompts:
            raise RuntimeError("set_classes() must be called before the adapter is run")
        pixels, boxes = self.pixels(images, orig_size)
        scores, maps = METHODS[self.method](self, pixels)
        maps = maps.reshape(maps.shape[0], maps.shape[1], *self.model.grid_of(maps.shape[-1]))
        return AdapterOutput(scores.float(), undo_box(maps.float(), boxes, self.map_shape))

    def phrase_outputs(self, images: torch.Tensor, orig_size: torch.Tensor, texts: Sequence[str],
                       rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Phrase rows asked as findings are: each phrase's question (``template.phrase``) about its image, the
        score log P(yes) - log P(no) and the map of the adapter's method, all from the same machinery (the
        phrases of one image are that image's "classes" for the pass)."""
        from xbench.extract.models.decoder.maps import METHODS

        pixels, boxes = self.pixels(images, orig_size)
        rows = torch.as_tensor(rows, dtype=torch.long).cpu()
        scores = torch.zeros(len(texts))
        maps = torch.zeros(len(texts), *self.map_shape)
        saved = self.classes, self._prompts
        try:
            for b in sorted(set(rows.tolist())):
                which = [q for q in range(len(texts)) if rows[q] == b]
                self.classes = tuple(texts[q] for q in which)
                self._prompts = [self.model.prompt_ids(self.template.phrase_text(t)) for t in self.classes]
                s, m = METHODS[self.method](self, pixels[b:b + 1])
                m = m.reshape(1, m.shape[1], *self.model.grid_of(m.shape[-1]))
                scores[which] = s[0].float().cpu()
                maps[which] = undo_box(m.float(), boxes[b:b + 1], self.map_shape)[0].cpu()
        finally:
            self.classes, self._prompts = saved
        return scores, maps

    def provenance(self) -> dict:
        from xbench.extract.models.decoder.maps import DESCRIPTIONS

        m = self.model
        out = {"adapter": type(self).__name__, "method": self.method, "method_description": DESCRIPTIONS[self.method],
               "layers": list(self.layers), "map_shape": list(self.map_shape), "grid": list(m.grid),
               "preprocess": {"size": m.input_size, "resize": m.resize, "interpolation": m.interpolation,
                              "mean": list(m.mean), "std": list(m.std)},
               "score": "log P(answer[0]) - log P(answer[1]) of the first answer token at the answer position",
               "prompts": {"answers": list(self.template.answers), "origin": self.template.origin,
                           "questions": {c: self.template.text(c) for c in self.classes}}}
        out.update(self.info)
        return out


def build_adapter(config: Mapping[str, Any], key: str, title: str, load, info: Mapping[str, Any] | None = None
                  ) -> DecoderVLMAdapter:
    """The adapter of a decoder VLM module's ``build``: ``load(folder, random=, seed=)`` its model from the
    config's ``model`` folder (``weights: random`` for untrained weights), its question template from
    prompts.toml under ``key`` (overridable by ``prompts``), the map method and layers; ``info`` (or
    ``info(model)``) adds to the provenance."""
    folder = config.get("model")
    if not folder:
        raise ModelConfigError(f"{key} needs `model`: the local weights folder (model_cards/{key}.md)")
    model = load(str(folder), random=config.get("weights") == "random", seed=int(config.get("seed") or 0))
    extra = info(model) if callable(info) else dict(info or {})
    return DecoderVLMAdapter(name=str(config.get("name") or key), model=model,
                             template=QuestionTemplate.from_config(key, config.get("prompts")),
                             method=str(config.get("method") or "attention"), layers=config.get("layers"),
                             map_size=config.get("map_size"), info={"model": title, "folder": str(folder), **extra})
