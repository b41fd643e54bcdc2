"""Run the authors' MAIRA-2 code (hub remote code, kept outside the repository) on a weights folder, under
transformers 4.51 (their code needs 4.46-4.51: it subclasses the 4.4x ``LlavaForConditionalGeneration``).

Used by tests/models/test_maira2_fidelity.py in a subprocess of the reference interpreter; never imported by
XBench. ``python maira2_reference.py CODE_DIR FOLDER IMAGE.npy QUESTIONS.json OUT.npz`` writes, per question,
the processor's input ids and pixel values, the logits at the answer position and the answer position's
attention over the image tokens (heads averaged) per decoder layer, from their processor and their model
(eager attention, ``output_attentions``).

Setting up the reference (once, outside CI): ``tests/models/maira2_reference_env.sh`` makes the venv and says
where the authors' three files go.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(code: str, folder: str, image: str, questions: str, out: str) -> None:
    import torch
    from PIL import Image
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, BitImageProcessor

    sys.path.insert(0, code)
    from maira2.configuration_maira2 import Maira2Config
    from maira2.modeling_maira2 import Maira2ForConditionalGeneration
    from maira2.processing_maira2 import Maira2Processor

    folder_p = Path(folder)
    raw = json.loads((folder_p / "config.json").read_text())
    cfg = Maira2Config(**{k: v for k, v in raw.items() if k not in ("model_type", "architectures")})
    cfg._attn_implementation = "eager"
    cfg.text_config._attn_implementation = "eager"
    class Theirs(Maira2ForConditionalGeneration):
        """The one shim: transformers 4.51's Llava forward passes ``image_sizes`` (None here), which their
        ``get_image_features`` (written for 4.46-4.48) does not take. Everything else is their code."""

        def get_image_features(self, pixel_values, vision_feature_layer, vision_feature_select_strategy,
                               image_sizes=None):
            assert image_sizes is None
            return super().get_image_features(pixel_values, vision_feature_layer, vision_feature_select_strategy)

    model = Theirs(cfg).eval()
    model.load_state_dict(load_file(str(folder_p / "model.safetensors")), strict=True)
    tok = AutoTokenizer.from_pretrained(folder)
    proc_cfg = json.loads((folder_p / "processor_config.json").read_text())
    pre = json.loads((folder_p / "preprocessor_config.json").read_text())
    pre.pop("image_processor_type", None)
    processor = Maira2Processor(image_processor=BitImageProcessor(**pre), tokenizer=tok, **proc_cfg)
    img = Image.fromarray(np.load(image))
    prefix = "Given the current frontal image"
    result = {}
    for i, question in enumerate(json.loads(Path(questions).read_text())):
        # the structure of their phrase-grounding turn (processing_maira2.py), with the question as its text
        messages = [{"role": "user", "content": [
            {"index": None, "text": prefix, "type": "text"}, {"index": 0, "text": None, "type": "image"},
            {"index": None, "text": f" {question}", "type": "text"}]}]
        text = processor.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        batch = processor(text=text, images=[processor._normalize_image(img)], return_tensors="pt")
        with torch.no_grad():
            o = model(**batch, output_attentions=True, return_dict=True)
        ids = batch["input_ids"][0]
        where = (ids == cfg.image_token_index).nonzero()[:, 0]
        rows = torch.stack([a[0, :, -1, where].mean(0) for a in o.attentions])
        result[f"ids{i}"] = ids.numpy()
        result[f"pixels{i}"] = batch["pixel_values"][0].numpy()
        result[f"logits{i}"] = o.logits[0, -1].float().numpy()
        result[f"rows{i}"] = rows.float().numpy()
        # their image features (the projector's output), to place a difference in the tower or the decoder
        feats = model.get_image_features(batch["pixel_values"], cfg.vision_feature_layer,
                                         cfg.vision_feature_select_strategy)
        result[f"features{i}"] = feats[0].detach().float().numpy()
    np.savez(out, **result)


if __name__ == "__main__":
    main(*sys.argv[1:6])
