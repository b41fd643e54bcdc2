"""Map methods of decoder VLMs, all read at the answer position of each (image, finding) sequence.

Each method is ``run(adapter, pixels) -> (scores (B, C), maps (B, C, N))`` over the N vision tokens (the
adapter puts them on the patch grid and undoes the preprocessing). The scores are always the likelihood
scores of the same forward pass (:mod:`.common`).

* ``attention``: the answer position's attention over the image tokens, heads and the adapter's layers
  (``layers``, default every layer) averaged; only those rows are computed (:mod:`.capture`).
* ``rollout``: attention rollout (Abnar & Zuidema 2020) through every decoder layer, R = prod (0.5 A + 0.5 I),
  rows renormalised, heads averaged; the answer row of R over the image tokens.
* ``chefer``: Chefer, Gur & Wolf (ICCV 2021) relevance for self-attention: R = I, per layer
  R <- R + mean_h((dT/dA * A)^+) R with T = log P(yes) - log P(no); the answer row over the image tokens. It
  needs every layer's attention with its gradient, so sequences are run one at a time.
* ``gradcam``: Grad-CAM on the vision tokens entering the projector: weights = the gradient of T averaged
  over the tokens, map = ReLU(sum over channels of weight * activation).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from xbench.extract.models.decoder.capture import Capture, capturing


def _per_image(adapter, pixels, fn, grad: bool = False):
    """Run ``fn(adapter, features (N, Dv) of one image) -> (scores (C,), maps (C, N))`` for every image."""
    with torch.no_grad():
        feats = adapter.model.vision_features(pixels)
    scores, maps = [], []
    for b in range(feats.shape[0]):
        with torch.enable_grad() if grad else torch.no_grad():
            s, m = fn(adapter, feats[b])
        scores.append(s.detach().float())
        maps.append(m.detach().float())
    return torch.stack(scores), torch.stack(maps)


def _attention(adapter, feats):
    batch = adapter.sequences(adapter.model.project(feats.unsqueeze(0))[0])
    cap = Capture("rows", batch.positions, batch.image, adapter.model.attention_layers(), keep=frozenset(adapter.layers))
    with capturing(cap):
        logits = adapter.model.answer_logits(batch.embeds, batch.positions, batch.image)
    return adapter.yes_no(logits), torch.stack([cap.rows[k] for k in adapter.layers]).mean(0)


def _rollout(adapter, feats):
    batch = adapter.sequences(adapter.model.project(feats.unsqueeze(0))[0])
    cap = Capture("rollout", batch.positions, batch.image, adapter.model.attention_layers())
    with capturing(cap):
        logits = adapter.model.answer_logits(batch.embeds, batch.positions, batch.image)
    rows = cap.rollout[torch.arange(len(batch.positions)), batch.positions]
    return adapter.yes_no(logits), rows[:, batch.image[0]:batch.image[1]]


def _gradcam(adapter, feats):
    n = len(adapter.classes)
    x = feats.detach().unsqueeze(0).repeat(n, 1, 1).requires_grad_(True)  # one copy per finding: its own gradient
    tokens = adapter.model.project(x)
    embeds, positions = [], []
    for c in range(n):
        b = adapter.sequences(tokens[c], [c])
        embeds.append(b.embeds[0])
        positions.append(b.positions[0])
    longest = max(e.shape[0] for e in embeds)
    embeds = torch.stack([F.pad(e, (0, 0, 0, longest - e.shape[0])) for e in embeds])
    target = adapter.yes_no(adapter.model.answer_logits(embeds, torch.stack(positions), b.image))
    (g,) = torch.autograd.grad(target.sum(), x)  # sequences are independent: each row gets its own gradient
    weights = g.float().mean(dim=1, keepdim=True)
    return target, F.relu((x.detach().float() * weights).sum(-1))


def _chefer(adapter, feats):
    tokens = adapter.model.project(feats.detach().unsqueeze(0))[0]
    scores, maps = [], []
    for c in range(len(adapter.classes)):
        batch = adapter.sequences(tokens, [c])
        batch.embeds.requires_grad_(True)  # a leaf, so that the attention probabilities carry a graph
        cap = Capture("full", batch.positions, batch.image, adapter.model.attention_layers())
        with capturing(cap):
            target = adapter.yes_no(adapter.model.answer_logits(batch.embeds, batch.positions, batch.image))
        grads = torch.autograd.grad(target.sum(), cap.probs, allow_unused=True)
        L = batch.embeds.shape[1]
        r = torch.eye(L, device=target.device)
        for a, g in zip(cap.probs, grads):
            if g is not None:
                r = r + (g.float() * a.detach().float()).clamp(min=0).mean(dim=1)[0] @ r
        scores.append(target[0])
        maps.append(r[batch.positions[0], batch.image[0]:batch.image[1]])
    return torch.stack(scores), torch.stack(maps)


METHODS = {
    "attention": lambda adapter, pixels: _per_image(adapter, pixels, _attention),
    "rollout": lambda adapter, pixels: _per_image(adapter, pixels, _rollout),
    "chefer": lambda adapter, pixels: _per_image(adapter, pixels, _chefer, grad=True),
    "gradcam": lambda adapter, pixels: _per_image(adapter, pixels, _gradcam, grad=True),
}

DESCRIPTIONS = {
    "attention": "answer position's attention over the image tokens, heads and the stated layers averaged",
    "rollout": "attention rollout through every decoder layer (0.5 A + 0.5 I, heads averaged), answer row",
    "chefer": "Chefer et al. ICCV 2021 relevance from log P(yes) - log P(no), every decoder layer, answer row",
    "gradcam": "Grad-CAM of log P(yes) - log P(no) on the vision tokens entering the projector",
}
