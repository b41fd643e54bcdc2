"""A tiny random CheXagent-2 weights folder (the real architecture: a SigLIP tower, the per-token resampler, a Phi
decoder; small sizes) laid out as the hub folder is, for the CheXagent tests."""
from __future__ import annotations

import json
from pathlib import Path

import torch

TEXT = ("You are a helpful assistant. Picture 1: Does this chest X-ray contain a pneumonia? pleural effusion "
        "cardiomegaly atelectasis Yes No yes no <|system|> <|user|> <|assistant|>")
VISION = dict(image_size=64, patch_size=8, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh")
PHI = dict(vocab_size=384, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
           num_key_value_heads=4, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, hidden_act="gelu_new",
           max_position_embeddings=256, initializer_range=0.02, layer_norm_eps=1e-5, use_cache=True,
           tie_word_embeddings=False, rope_theta=10000.0, rope_scaling=None, partial_rotary_factor=0.5,
           qk_layernorm=False, bos_token_id=0, eos_token_id=0)


def bpe_files(folder: Path) -> None:
    """vocab.json + merges.txt of a small byte-level BPE (the GPT-2 format the hub tokenizer reads)."""
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator([TEXT] * 4, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    tok.save_model(str(folder))


def config(**over) -> dict:
    cfg = dict(PHI, architectures=["CheXagentForCausalLM"], model_type="chexagent",
               auto_map={"AutoConfig": "configuration_chexagent.CheXagentConfig"},
               visual={"image_size": 64, "output_dim": 32, "vision_model_name_or_path": "tiny-xraysiglip"})
    cfg.update(over)
    return cfg


def make_folder(folder: Path, seed: int = 0, state: dict | None = None, **over) -> Path:
    """config.json, vision_config.json, vocab.json, merges.txt and model.safetensors (``state``, else our own
    random model's state dict in the hub's key layout)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg = config(**over)
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "vision_config.json").write_text(json.dumps({"model_type": "siglip", "vision_config": VISION}))
    bpe_files(folder)
    if state is None:
        from xbench.extract.models.decoder.chexagent import CheXagent, tokenizer

        torch.manual_seed(seed)
        model = CheXagent(cfg, VISION, tokenizer(folder))
        with torch.no_grad():
            for name, p in model.named_parameters():  # larger than the init's: scores and maps differ visibly
                if p.dim() > 1 and "pos_embed" not in name and "position_embedding" not in name:
                    p.normal_(0, 0.2)
        state = hub_state(model)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


def hub_state(model) -> dict:
    """Our model's tensors under the hub's CheXagentForCausalLM names."""
    from xbench.extract.models.decoder.chexagent import RESAMPLER_PREFIX, VISION_PREFIX

    state = {f"{VISION_PREFIX}{k}": v for k, v in model.vit.state_dict().items()}
    state.update({f"{RESAMPLER_PREFIX}{k}": v for k, v in model.resampler.state_dict().items()})
    state.update(model.lm.state_dict())
    return state
