"""The contract every model adapter fulfils.

An adapter wraps one vision-language model. Extraction gives it batches of images exactly as
images.zarr stores them (uint8, whole image stretched to S x S, brighter = denser) together with
each image's original (height, width); the adapter applies the model's own preprocessing
(resizing, cropping or padding, normalisation), runs the model, and returns per-class scores
and raw saliency maps whose grid covers the **whole original image** (row 0 = top): any crop or
padding the preprocessing introduced is undone by the adapter.

An adapter whose model has an official loader may instead expose that loader's steps as a
host-side :class:`~.pixels.ImageTransform` (:meth:`ModelAdapter.image_transform`). The runner then
applies it per case in its DataLoader workers, on the original image when the store keeps
originals, and hands the adapter the stacked float inputs; :meth:`ModelAdapter.inputs` accepts
either form, so calling an adapter directly on stored uint8 images still works.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # torch is imported where it is used: the weight-free baselines run without it
    import torch



@dataclass
class AdapterOutput:
    """scores: (B, C) float32; maps: (B, C, h, w) float32 on the whole-image grid."""

    scores: torch.Tensor
    maps: torch.Tensor


class ModelAdapter(abc.ABC):
    """Base class of every model adapter.

    Class attributes: ``score_kind`` ("logit" or "probability"), ``method`` (the default
    saliency method name recorded in the submission, e.g. "similarity", "cross-attention").
    """

    score_kind: str = "logit"
    method: str = "similarity"
    dataset: str | None = None  # see __init__
    #: phrase rows (free-text queries, contract §Phrase rows): adapters that encode free text set this and
    #: implement :meth:`phrase_outputs`; the others are recorded as ``phrases_unsupported`` with this reason
    supports_phrases: bool = False
    phrase_reason: str = "the model's published pipeline takes no free text (fixed entity vocabulary)"
    #: True when :meth:`phrase_outputs` also takes ``categories`` (each phrase's category, a class name): the
    #: runner then passes them (KAD: a phrase takes its category's query slot)
    phrase_categories: bool = False

    def __init__(self) -> None:
        self.classes: tuple[str, ...] = ()
        self.unsupported: tuple[str, ...] = ()
        # The images dataset key being extracted (e.g. "chestxray14"), set by the runner before
        # set_classes: adapters whose authors publish per-dataset prompts pick them with it.
        self.dataset: str | None = None

    @abc.abstractmethod
    def set_classes(self, classes: Sequence[str]) -> None:
        """Prepare everything that depends on the class list once (text embeddings, entity
        indices). Classes the model cannot name go to ``self.unsupported``; their columns are
        still produced (finite, ignored by the scorer)."""

    @abc.abstractmethod
    def __call__(self, images: torch.Tensor, orig_size: torch.Tensor) -> AdapterOutput:
        """images: (B, S, S) uint8 on the adapter's device, or the stacked outputs of
        :meth:`image_transform` when it has one; orig_size: (B, 2) int (h, w)."""

    @property
    @abc.abstractmethod
    def map_shape(self) -> tuple[int, int]:
        """(h, w) of the maps this adapter writes."""

    def image_transform(self, dataset: str | None = None):
        """The host-side per-case transform (:class:`~.pixels.ImageTransform`) for ``dataset``, or
        None when the adapter preprocesses stored uint8 batches itself (the default)."""
        return None

    def inputs(self, images: torch.Tensor, orig_size: torch.Tensor) -> torch.Tensor:
        """Model inputs from what ``__call__`` got: stored (B, S, S) uint8 images go through
        :meth:`image_transform` here; anything else was prepared by the runner already."""
        import torch  # lazily: the weight-free baselines subclass this without torch (extract/runner.py)

        transform = self.image_transform()
        if transform is None or images.dtype != torch.uint8:
            return images
        return transform.batch(images, orig_size)

    def phrase_outputs(self, images: torch.Tensor, orig_size: torch.Tensor, texts: Sequence[str],
                       rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One score (Q,) and one whole-image map (Q, h, w) per phrase: phrase q is ``texts[q]`` about image
        ``rows[q]`` of the batch (images and orig_size as for ``__call__``)."""
        raise NotImplementedError(self.phrase_reason)

    def provenance(self) -> dict:
        """Everything needed to reproduce the run: weights, prompts, layers, preprocessing."""
        return {}

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> "ModelAdapter":
        return self
