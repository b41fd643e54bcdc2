"""Model presets are data files (extract/models/preset_configs/<name>.toml), found by listing the folder."""
from __future__ import annotations

import pytest

from xbench.extract.models import MODELS, presets
from xbench.extract.models.errors import ModelConfigError


def test_every_preset_file_is_a_registered_model_and_parses():
    names = presets.preset_names()
    assert names == ["biomedclip", "clip", "clip-tiny"]
    for name in names:
        assert MODELS.target(name) in (f"xbench.extract.models.presets:{name}", presets.preset(name))
        p = presets.preset(name)
        assert p.builder in presets.BUILDERS and getattr(presets, name) is p


def test_the_presets_hold_the_former_python_defaults():
    """The values the presets had as Python dicts before they became files (behaviour unchanged)."""
    from xbench.extract.models.prompts import preset_prompts

    assert presets.CLIP_DEFAULTS == {"model": "ViT-B-16-quickgelu", "weights": "openai", "quick_gelu": True,
                                     "prompts": preset_prompts("clip")}
    assert presets.BIOMEDCLIP_DEFAULTS == {"model": f"hf-hub:{presets.BIOMEDCLIP_REPO}",
                                           "prompts": preset_prompts("biomedclip")}
    assert presets.CLIP_TINY_DEFAULTS == {"weights": "random", "seed": 0,
                                          "preprocess": {"mean": [0.5] * 3, "std": [0.25] * 3},
                                          "prompts": {"style": "single"}}
    assert presets.CLIP_TINY_ARCH == {
        "embed_dim": 64,
        "vision_cfg": {"image_size": 224, "layers": 4, "width": 64, "patch_size": 16, "head_width": 32},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2}}


def test_a_builder_cannot_change_the_preset():
    a = presets.preset("clip-tiny").fresh_defaults()
    a["preprocess"]["mean"][0] = 9
    assert presets.preset("clip-tiny").defaults["preprocess"]["mean"][0] == 0.5


@pytest.fixture
def preset_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(presets, "PRESET_DIR", tmp_path)
    presets.preset.cache_clear()
    yield tmp_path
    presets.preset.cache_clear()


def test_a_bad_preset_file_is_refused_with_its_close_key(preset_dir):
    (preset_dir / "mine.toml").write_text('builder = "open_clip"\ndefault = {model = "x"}\n')
    with pytest.raises(ModelConfigError, match="unknown key 'default'. Did you mean: defaults?"):
        presets.preset("mine")
    (preset_dir / "mine2.toml").write_text('builder = "openclip"\n')
    with pytest.raises(ModelConfigError, match="builder must be one of open_clip, clip-tiny"):
        presets.preset("mine2")


def test_a_new_preset_is_one_file(preset_dir, monkeypatch):
    from xbench.extract.models import create_adapter

    (preset_dir / "tiny-seven.toml").write_text(
        (presets.Path(presets.__file__).with_name("preset_configs") / "clip-tiny.toml").read_text()
        .replace("seed = 0", "seed = 7"))
    monkeypatch.setattr(MODELS, "_entries", dict(MODELS._entries))  # restored afterwards
    MODELS.register("tiny-seven", "xbench.extract.models.presets:tiny-seven")  # what listing the folder does
    adapter = create_adapter("tiny-seven")
    assert adapter.config["name"] == "tiny-seven"
    assert presets.preset("tiny-seven").defaults["seed"] == 7
