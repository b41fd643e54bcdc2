"""``gradcam``: Grad-CAM with target cos(image embedding, text embedding) and the tokens entering
the last block as activations: weights = mean gradient over patch tokens, map = ReLU of the
weighted sum. One backward pass per class."""
from __future__ import annotations

from xbench.extract.saliency import MapMethod  # torch is imported where it is used: listing the methods stays instant


def run(tower, pixels, text):
    import torch
    import torch.nn.functional as F

    from xbench.extract.saliency._tower import image_text_cos, to_grid

    with torch.enable_grad():
        x = tower.tokens_before_last(pixels).detach().requires_grad_(True)
        image = tower.pool(tower.last_block(x))
        cos = image_text_cos(image, text)  # (B, C)
        acts = x[:, tower.n_prefix:].detach().float()  # (B, N, D)
        cams = []
        for c in range(cos.shape[1]):
            # cases are independent, so the gradient of the batch sum is each case's own gradient
            (g,) = torch.autograd.grad(cos[:, c].sum(), x, retain_graph=c + 1 < cos.shape[1])
            weights = g[:, tower.n_prefix:].float().mean(dim=1, keepdim=True)  # (B, 1, D)
            cams.append(F.relu((acts * weights).sum(-1)))  # (B, N)
    return image.detach(), to_grid(torch.stack(cams, dim=-1), tower.grid)


METHOD = MapMethod(
    name="gradcam", run=run,
    description="tokens entering the last block; target cos(image, text)",
    reference="Selvaraju et al., Grad-CAM, ICCV 2017 (applied to ViT tokens)",
    needs=frozenset({"gradients"}))
