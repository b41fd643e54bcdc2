"""``clip_surgery`` (Li et al., "CLIP Surgery for Better Explainability with Enhancement in
Open-Vocabulary Tasks", 2023). Architecture surgery: over the last six blocks a second path adds
v-v self-attention (softmax(v v^T * scale) v, then the output projection) computed from the
original path's tokens and skips the MLP. Feature surgery: with the class weights
w = softmax(2 cos(image, text)) / mean, the map of class c is
sum_e (p_e t_ce w_c - mean_c' p_e t_c'e w_c') for normalised patch features p, i.e. the
similarity minus its redundant part shared by all classes. With a single class the redundant
feature is the empty prompt's embedding instead: p . (t - t_empty)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from xbench.extract.saliency import MapMethod  # torch is imported where it is used: listing the methods stays instant

if TYPE_CHECKING:  # annotations only
    import torch

DEPTH = 6  # the authors' surgery replaces the last six blocks' attention


def vv_attention(h, q, k, v, scale):
    return ((v @ v.transpose(-2, -1)) * scale).softmax(dim=-1) @ v


def feature_surgery(patches: torch.Tensor, text: torch.Tensor, image: torch.Tensor,
                    empty: torch.Tensor | None = None) -> torch.Tensor:
    """(B, N, E) normalised patches, (C, E) text, (B, E) image -> (B, N, C).

    Sum over e of (p_e t_ce w_c) minus its mean over classes is w_c (p . t_c) - mean_c'(w_c' p . t_c'),
    computed without the (B, N, C, E) tensor."""
    from xbench.extract.saliency._tower import image_text_cos

    if text.shape[0] == 1 and empty is not None:
        return patches @ (text - empty.reshape(1, -1)).T
    prob = (2 * image_text_cos(image, text)).softmax(dim=-1)  # (B, C)
    w = prob / prob.mean(dim=-1, keepdim=True)
    s = (patches @ text.T) * w[:, None, :]
    return s - s.mean(dim=-1, keepdim=True)


def run(tower, pixels, text, empty_text=None):
    import torch.nn.functional as F

    from xbench.extract.saliency._tower import parallel_path, to_grid

    x, path = parallel_path(tower, pixels, vv_attention, DEPTH)
    image = tower.pool(x)
    p = F.normalize(tower.patches(path).float(), dim=-1)
    empty = None if empty_text is None else empty_text.float()
    return image, to_grid(feature_surgery(p, text.float(), image, empty), tower.grid)


METHOD = MapMethod(
    name="clip_surgery", run=run,
    description="v-v attention path over the last 6 blocks (no MLP) + feature surgery (class-mean redundancy removed)",
    reference="Li, Wang, Zheng, Hui & Li, CLIP Surgery for Better Explainability with Enhancement in "
              "Open-Vocabulary Tasks, arXiv:2304.05653 (2023)",
    needs=frozenset({"blocks", "empty_prompt"}))
