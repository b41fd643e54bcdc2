"""A tiny random LLaVA-Rad weights folder (the real architecture, small sizes) for the decoder VLM tests."""
from __future__ import annotations

import json
from pathlib import Path

import torch

WORDS = ("a chat between curious user and an artificial intelligence assistant . the gives helpful , detailed "
         "polite answers to ' s questions : is there in this chest x - ray ? yes no pneumonia effusion "
         "cardiomegaly atelectasis pleural").split()
#: open_clip config of a small timm ViT (the authors' tower class is the same open_clip/timm path at 518 px)
VISION = {"embed_dim": 64, "vision_cfg": {"timm_model_name": "vit_tiny_patch16_224", "timm_model_pretrained": False,
                                          "timm_pool": "", "timm_proj": "linear", "image_size": 224},
          "text_cfg": {"context_length": 16, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1}}
LLAMA = dict(vocab_size=len(WORDS) + 4, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, bos_token_id=2,
             eos_token_id=3, pad_token_id=0, rms_norm_eps=1e-5, tie_word_embeddings=False)


def word_tokenizer(folder: Path) -> None:
    """A word-level tokenizer that starts every text with BOS, as Llama's does."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[BOS]", "[EOS]", *dict.fromkeys(WORDS)])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", 2)])
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]",
                            eos_token="[EOS]").save_pretrained(folder)


def config(**over) -> dict:
    cfg = dict(LLAMA, architectures=["LlavaLlamaForCausalLM"], model_type="llava",
               mm_vision_tower="biomedclip_cxr_518", mm_vision_tower_config="biomedclipcxr_518.json",
               mm_projector_type="mlp2x_gelu", mm_vision_select_layer=-2, mm_vision_select_feature="patch",
               mm_use_im_start_end=False, mm_hidden_size=192)
    cfg.update(over)
    return cfg


def make_folder(folder: Path, state: dict | None = None, seed: int = 0, **over) -> Path:
    """config.json, the vision config, the tokenizer and model.safetensors (``state``, else our own random
    model's state dict in the authors' key layout)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg = config(**over)
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "biomedclipcxr_518.json").write_text(json.dumps(VISION))
    word_tokenizer(folder)
    if state is None:
        from xbench.extract.models.decoder.folder import tokenizer
        from xbench.extract.models.decoder.llava_rad import PROJECTOR_PREFIX, VISION_PREFIX, LlavaRad

        torch.manual_seed(seed)
        model = LlavaRad(cfg, VISION, tokenizer(folder, "tiny"))
        for p in model.parameters():  # larger than the init's: the maps and scores then differ visibly
            p.data.normal_(0, 0.2) if p.dim() > 1 else None
        state = {f"{VISION_PREFIX}{k}": v for k, v in model.vit.state_dict().items()}
        state.update({f"{PROJECTOR_PREFIX}{k}": v for k, v in model.projector.state_dict().items()})
        state.update(model.lm.state_dict())
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


GEMMA_WORDS = "user model is there pneumonia effusion in this chest x - ray ? answer yes or no . pleural".split()
GEMMA_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                 "<end_of_image>", "<image_soft_token>"]
#: a chat template of Gemma 3's form (turns, the image as <start_of_image>, the model's generation prompt)
GEMMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
                  "else m['role'] }}\n{% for c in m['content'] %}{% if c['type'] == 'image' %}<start_of_image>"
                  "{% else %}{{ c['text'] }}{% endif %}{% endfor %}<end_of_turn>\n{% endfor %}"
                  "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def make_gemma_folder(folder: Path, seed: int = 0) -> Path:
    """A tiny random Gemma3ForConditionalGeneration (sliding-window and global layers, a 4 x 4 SigLIP grid
    pooled to 2 x 2 image tokens) with a Gemma3Processor, saved as transformers saves them."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import (Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor,
                              PreTrainedTokenizerFast)

    vocab = {w: i for i, w in enumerate(GEMMA_SPECIAL + GEMMA_WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", extra_special_tokens={
                                       "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                       "image_token": "<image_soft_token>"})
    fast.add_special_tokens({"additional_special_tokens": GEMMA_SPECIAL[4:]})
    ip = Gemma3ImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    proc = Gemma3Processor(image_processor=ip, tokenizer=fast, chat_template=GEMMA_TEMPLATE, image_seq_length=4)
    text = dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=8,
                max_position_embeddings=256, layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    vision = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4)
    cfg = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                       image_token_index=vocab["<image_soft_token>"], boi_token_index=vocab["<start_of_image>"],
                       eoi_token_index=vocab["<end_of_image>"])
    torch.manual_seed(seed)
    net = Gemma3ForConditionalGeneration(cfg)
    with torch.no_grad():
        for p in net.parameters():  # the projector starts at zero and the init is small: make both visible
            p.normal_(0, 0.2) if p.dim() > 1 else None
    folder.mkdir(parents=True, exist_ok=True)
    net.save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder
