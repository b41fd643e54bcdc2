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


MAIRA_WORDS = ("user assistant : given the current frontal image is there in this chest x - ray ? yes no pneumonia "
               "effusion cardiomegaly atelectasis pleural left right small large opacity").split()
MAIRA_SPECIAL = ["<image>", "<obj>", "</obj>", "<box>", "</box>"]
#: a chat template of the form of MAIRA-2's (a Vicuna-style user turn whose content pieces are text and the
#: image placeholder, the generation prompt last)
MAIRA_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}USER: {% for c in m['content'] %}"
                  "{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}"
                  "{% else %} ASSISTANT: {{ m['content'][0]['text'] }}{% endif %}{% endfor %}"
                  "{% if add_generation_prompt %} ASSISTANT:{% endif %}")
MAIRA_SIZE = 56  # 4 x 4 patches of 14 px
MAIRA_PRE = {"image_processor_type": "BitImageProcessor", "do_resize": True, "size": {"shortest_edge": MAIRA_SIZE},
             "resample": 3, "do_center_crop": True, "crop_size": {"height": MAIRA_SIZE, "width": MAIRA_SIZE},
             "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5307] * 3,
             "image_std": [0.2583] * 3, "do_convert_rgb": True}


def maira_config() -> dict:
    """A tiny MAIRA-2 config.json of the real architecture: Dinov2 (2 layers, 56 px), 4-layer projector, Llama."""
    vision = dict(model_type="dinov2", image_size=MAIRA_SIZE, patch_size=14, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, mlp_ratio=2, out_features=["stage2"], reshape_hidden_states=False,
                  apply_layernorm=True, layerscale_value=1.0)
    vocab = len(MAIRA_SPECIAL) + len(MAIRA_WORDS) + 4
    return {"model_type": "maira2", "architectures": ["Maira2ForConditionalGeneration"], "vision_config": vision,
            "text_config": dict(LLAMA, vocab_size=vocab, model_type="llama"), "projector_n_layers": 4,
            "projector_hidden_act": "gelu", "vision_feature_layer": -1, "vision_feature_select_strategy": "default",
            "image_token_index": 4, "pad_token_id": 0}


def maira_tokenizer(folder: Path) -> None:
    """A word-level tokenizer (BOS first, as Llama's) with the image and grounding tokens and the chat template."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "[BOS]", "[EOS]", *MAIRA_SPECIAL, *dict.fromkeys(MAIRA_WORDS)]
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]",
                                   eos_token="[EOS]")
    fast.add_special_tokens({"additional_special_tokens": MAIRA_SPECIAL})
    fast.save_pretrained(folder)
    # written as the hub's folder (made for transformers 4.4x) has it: the class and the template in the config
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg.update(tokenizer_class="PreTrainedTokenizerFast", additional_special_tokens=MAIRA_SPECIAL,
               chat_template=MAIRA_TEMPLATE)
    cfg.pop("extra_special_tokens", None)
    cfg.pop("backend", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))


def maira_side_files(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(maira_config()))
    (folder / "preprocessor_config.json").write_text(json.dumps(MAIRA_PRE))
    (folder / "processor_config.json").write_text(json.dumps({
        "patch_size": 14, "vision_feature_select_strategy": "default", "image_token": "<image>",
        "num_additional_image_tokens": 1}))
    maira_tokenizer(folder)
    return folder


def make_maira_folder(folder: Path, seed: int = 0) -> Path:
    """A tiny random MAIRA-2 folder whose model.safetensors is in the authors' (transformers 4.51) key layout."""
    from safetensors.torch import save_file

    from xbench.extract.models.decoder.maira2 import DINOV2_RENAMES, load

    maira_side_files(folder)
    model = load(folder, random=True, seed=seed)
    with torch.no_grad():
        for p in model.parameters():  # larger than the init's: the maps and scores then differ visibly
            p.normal_(0, 0.2) if p.dim() > 1 else None
    state = {}
    for k, v in model.state_dict().items():
        for old, new in DINOV2_RENAMES:
            k = k.replace(new, old) if k.startswith("vision_tower.") else k
        state[k] = v.contiguous()
    save_file(state, str(folder / "model.safetensors"))
    return folder


STORE_CLASSES = ("Pleural effusion", "Pneumothorax")


def make_images(path: Path, n: int = 5, seed: int = 0, classes=STORE_CLASSES) -> Path:
    """A phantom images store of ``n`` random 64 x 64 cases (original sizes 300 x 240.., non-square), blocks of 2."""
    import numpy as np

    from xbench.schemas import ImagesWriter

    rng = np.random.default_rng(seed)
    w = ImagesWriter(path, "phantom", case_ids=[f"case{i}" for i in range(n)], classes=classes, image_size=64,
                     cases_per_block=2)
    for b in w.blocks_todo():
        start, stop = w.block_rows(b)
        w.write_block(b, rng.integers(0, 256, size=(stop - start, 64, 64), dtype=np.uint8),
                      np.array([[300, 240 + 20 * i] for i in range(start, stop)], dtype=np.int32))
    w.finish()
    return path


def make_phrase_stores(out: Path, n_cases: int = 4) -> Path:
    """A prepared phantom dataset with phrase rows (images.zarr, gt.zarr) in ``out``."""
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset

    prepare_dataset(PhantomReader(n_cases=n_cases, size=64, phrases="true"), out, grid=(16, 16), image_size=64,
                    workers=1, progress=False, cases_per_block=2)
    return out
