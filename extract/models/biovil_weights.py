"""Where BioViL / BioViL-T weights are found offline, without importing torch (the CLI preflight uses it).

The package downloads the image checkpoints from the Hugging Face repositories that also hold the
text models (hi-ml-multimodal ``image/model/pretrained.py:20-37``, ``text/utils.py:26-37``); XBench
reads the same files from a local folder or the offline hub cache and never downloads.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from xbench.extract.models.errors import WeightsNotFoundError
from xbench.extract.models.hub import cached_file


@dataclass(frozen=True)
class Variant:
    repo: str  # Hugging Face repository holding the image checkpoint and the text model
    revision: str  # the tag the package pins (image/model/pretrained.py:26-27)
    image_file: str
    crop: int
    title: str


VARIANTS = {
    "biovil": Variant("microsoft/BiomedVLP-CXR-BERT-specialized", "v1.1", "biovil_image_resnet50_proj_size_128.pt",
                      480, "BioViL"),
    "biovil_t": Variant("microsoft/BiomedVLP-BioViL-T", "v1.0", "biovil_t_image_model_proj_size_128.pt",
                        448, "BioViL-T"),
}

def _hub_file(repo: str, revision: str, name: str) -> Path | None:
    """The file at the pinned ``revision`` in the offline cache, else at whatever revision the cache holds."""
    return cached_file(repo, name, revision) or cached_file(repo, name)


def resolve_weights(variant: str, config: Mapping[str, Any]) -> tuple[Path, Path]:
    """(image checkpoint file, text model folder) from ``weights`` / ``text_encoder`` or the offline hub cache."""
    v = VARIANTS[variant]
    how = (f"Download {v.repo} on a networked machine (`huggingface-cli download {v.repo} --revision "
           f"{v.revision} --local-dir DIR`) and pass --model-option weights=DIR")
    weights, text = config.get("weights"), config.get("text_encoder")
    if weights:
        w = Path(str(weights)).expanduser()
        image = w / v.image_file if w.is_dir() else w
        if not image.is_file():
            raise WeightsNotFoundError(f"{v.title} image weights", str(image), how + ".")
        default_text = w if w.is_dir() else None
    else:
        image = _hub_file(v.repo, v.revision, v.image_file)
        if image is None:
            raise WeightsNotFoundError(f"{v.title} image weights", f"{v.image_file} of hub id {v.repo!r} "
                                       "(not in the offline Hugging Face cache)", how + ".")
        default_text = image.parent
    if text:
        t = Path(str(text)).expanduser()
        if not t.is_dir():
            cached = _hub_file(str(text), "main", "config.json")
            if cached is None:
                raise WeightsNotFoundError("CXR-BERT text model", f"folder or offline-cached hub id {text!r}", how + ".")
            t = cached.parent
    elif default_text is not None:
        t = default_text
    else:
        raise WeightsNotFoundError("CXR-BERT text model", "text_encoder=FOLDER (weights is a single file)", how + ".")
    return image, t


def preflight(variant: str):
    """Raise WeightsNotFoundError before torch is imported when nothing could be found."""
    def check(config: Mapping[str, Any]) -> None:
        if config.get("weights") is None:
            v = VARIANTS[variant]
            if _hub_file(v.repo, v.revision, v.image_file) is None:
                raise WeightsNotFoundError(
                    f"{v.title} image weights", f"{v.image_file} of hub id {v.repo!r} (not in the offline cache)",
                    f"Download {v.repo} (revision {v.revision}) on a networked machine and pass "
                    "--model-option weights=DIR.")
    return check


