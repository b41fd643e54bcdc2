"""Run the hub's CheXagent-2 remote code (a public copy, outside the repository) on a tiny weights folder, under
the transformers version it asserts (4.40.0), and save what the fidelity test compares.

    python chexagent_reference.py REF_DIR FOLDER IMAGE.png QUESTION OUT.npz

REF_DIR holds modeling_chexagent.py, modeling_visual.py and tokenization_chexagent.py; the caller puts a
transformers 4.40.0 first on PYTHONPATH. Their files are imported unchanged, as the package ``chexagent_ref``.
Three things around them are supplied here, none on a path that computes a number:

* ``configuration_chexagent``, not in the copy: a ``PhiConfig`` that also carries ``visual`` (what the model
  reads of it: the Phi fields and ``visual``, passed to the tower class as keyword arguments);
* the modules modeling_visual.py imports and never calls (albumentations, einops) as empty modules;
* the image span: their tokenizer's ``IMG_TOKEN_SPAN`` (1024, the real 32 x 32 grid) is set to the tiny
  tower's number of patches (IMAGE's path must fit in it: the caller passes a short relative path);
* the tower: their ``CLIPModel`` loads it with ``AutoModel.from_pretrained(name).vision_model`` (the XraySigLIP
  repository) and reads the processor's mean and std; here that call builds a ``SiglipVisionModel`` of
  FOLDER/vision_config.json (their class, transformers' own) with SigLIP's mean and std, and the whole state
  dict is then loaded from FOLDER/model.safetensors strictly (every key of the hub layout, both ways).

Saved: the prompt ids, the image span, the pixels their transform made from IMAGE, the logits of the last
position and every layer's attention (eager), the first token ids of "Yes" and "No".
"""
from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch


def _package(ref: Path):
    from transformers import PhiConfig

    for name in ("albumentations", "albumentations.pytorch", "einops"):
        mod = types.ModuleType(name)
        mod.ToTensorV2, mod.rearrange = None, None
        sys.modules.setdefault(name, mod)
    pkg = types.ModuleType("chexagent_ref")
    pkg.__path__ = [str(ref)]
    sys.modules["chexagent_ref"] = pkg
    conf = types.ModuleType("chexagent_ref.configuration_chexagent")

    class CheXagentConfig(PhiConfig):
        model_type = "chexagent"

        def __init__(self, visual=None, **kwargs):
            super().__init__(**kwargs)
            self.visual = visual

    conf.CheXagentConfig = CheXagentConfig
    sys.modules[conf.__name__] = conf
    return conf


def main(ref, folder, image, question, out) -> None:
    import transformers
    from safetensors.torch import load_file
    from transformers import SiglipVisionConfig, SiglipVisionModel

    assert transformers.__version__ == "4.40.0", transformers.__version__
    ref, folder = Path(ref), Path(folder)
    conf = _package(ref)
    visual = importlib.import_module("chexagent_ref.modeling_visual")
    vision = json.loads((folder / "vision_config.json").read_text())["vision_config"]

    class Tower:
        @staticmethod
        def from_pretrained(name, **kw):
            return types.SimpleNamespace(vision_model=SiglipVisionModel(SiglipVisionConfig(**vision)).vision_model)

    class Processor:
        @staticmethod
        def from_pretrained(name, **kw):
            return types.SimpleNamespace(image_processor=types.SimpleNamespace(image_mean=[0.5] * 3, image_std=[0.5] * 3))

    visual.AutoModel, visual.AutoProcessor = Tower, Processor
    modeling = importlib.import_module("chexagent_ref.modeling_chexagent")
    vision_cfg = SiglipVisionConfig(**vision)
    # their tokenizer reserves IMG_TOKEN_SPAN = 1024 positions for an image, CheXagent-2's 32 x 32 grid: the tiny
    # tower's grid takes its place (the span must equal the tokens the tower gives, modeling_chexagent.py:921)
    importlib.import_module("chexagent_ref.tokenization_chexagent").IMG_TOKEN_SPAN = \
        (vision_cfg.image_size // vision_cfg.patch_size) ** 2
    raw = json.loads((folder / "config.json").read_text())
    cfg = conf.CheXagentConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type", "auto_map")})
    cfg._name_or_path = str(folder)
    cfg._attn_implementation = "eager"
    model = modeling.CheXagentForCausalLM(cfg).eval()
    result = model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    assert not result.missing_keys and not result.unexpected_keys, result
    tok = model.model.tokenizer
    query = tok.from_list_format([{"image": str(image)}, {"text": question}])
    conv = [{"from": "system", "value": "You are a helpful assistant."}, {"from": "human", "value": query}]
    ids = tok.apply_chat_template(conv, add_generation_prompt=True, return_tensors="pt")
    with torch.no_grad():
        outputs = model(input_ids=ids, output_attentions=True, use_cache=False)
        pixels = model.model.visual.load_image(str(image), training=False)
    a = int((ids[0] == tok.img_start_id).nonzero()[0, 0])
    b = int((ids[0] == tok.img_end_id).nonzero()[0, 0])
    np.savez(out, ids=ids[0].numpy(), span=np.array([a, b]), pixels=pixels.numpy(),
             logits=outputs.logits[0, -1].float().numpy(),
             attentions=np.stack([x[0].float().numpy() for x in outputs.attentions]),
             answers=np.array([tok("Yes").input_ids[0], tok("No").input_ids[0]]))


if __name__ == "__main__":
    main(*sys.argv[1:6])
