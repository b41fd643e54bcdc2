"""The torch-free model catalog (extract/models/catalog.py) agrees with the adapters it describes: every key an
adapter reads is one the checks accept (read from the adapters' source, independently of the catalog), the
choices the checks enforce are the adapters' own, the methods listed are those the towers run, and every
model config shown in the docs and model cards passes the key checks."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from xbench.extract.models import catalog, checks, list_models, request
from xbench.schemas.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
M = ROOT / "extract" / "models"
OPEN_CLIP = [("openclip.py", ("config",))]
DECODER_BUILD = ("decoder/common.py", ("config",), ("build_adapter",))  # every decoder VLM's build reads through it
#: where each registered model's factory reads its config, and the names the config has there; for the
#: baselines (one module) the functions that build each; the crossattn/common.py helpers a module calls
#: are added by :func:`keys_read`
SOURCES = {
    "clip": OPEN_CLIP, "biomedclip": OPEN_CLIP, "clip-tiny": OPEN_CLIP, "open_clip": OPEN_CLIP,
    "chexzero": OPEN_CLIP + [("chexzero.py", ("cfg", "config"))],
    "transformers": [("hf.py", ("config",))], "hf-clip": [("hf.py", ("config",))], "hf-siglip": [("hf.py", ("config",))],
    "biovil": [("biovil.py", ("cfg",)), ("biovil_weights.py", ("config",))],
    "biovil_t": [("biovil.py", ("cfg",)), ("biovil_weights.py", ("config",))],
    "medclip": [("medclip.py", ("cfg", "config"))],
    "gloria": [("gloria.py", ("config", "self.config"))],
    "medklip": [("crossattn/medklip.py", ("config",))],
    "mavl": [("crossattn/mavl.py", ("config",)),
             ("crossattn/medklip.py", ("config",), ("EntityQueryAdapter", "arch_from", "load_weights"))],
    "kad": [("crossattn/kad.py", ("config",))],
    "carzero": [("crossattn/carzero.py", ("config",))],
    "devide": [("crossattn/devide.py", ("config",)), ("crossattn/kad.py", ("config",), ("TextQueryAdapter",))],
    "random": [("baselines.py", ("config",), ("build_random", "_grid"))],
    "center": [("baselines.py", ("config",), ("build_center", "_grid"))],
    "dog": [("baselines.py", ("config",), ("build_dog", "_grid"))],
    "llava-rad": [("decoder/llava_rad.py", ("config",)), DECODER_BUILD],
    "medgemma": [("decoder/medgemma.py", ("config",)), DECODER_BUILD],
    "maira-2": [("decoder/maira2.py", ("config",)), DECODER_BUILD],
    "chexagent": [("decoder/chexagent.py", ("config",)), DECODER_BUILD],
}


def _scan(text: str, variables) -> set[str]:
    out = set()
    for v in variables:
        out |= set(re.findall(rf'\b{re.escape(v)}(?:\.get\(|\[)"(\w+)"', text))
        out |= set(re.findall(rf'\b(?:bool_)?option\({re.escape(v)}, "(\w+)"', text))
    return out


def _functions(path: Path) -> dict[str, str]:
    import ast

    source = path.read_text()
    return {node.name: ast.get_source_segment(source, node) for node in ast.parse(source).body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def keys_read(model: str) -> set[str]:
    common = {name: _scan(src, ("config", "cfg")) for name, src in _functions(M / "crossattn" / "common.py").items()}
    out = set()
    for entry in SOURCES[model]:
        name, variables = entry[:2]
        if len(entry) == 3:
            funcs = _functions(M / name)
            text = "\n".join(funcs[f] for f in entry[2])
        else:
            text = (M / name).read_text()
        out |= _scan(text, variables)
        out |= set().union(*(keys for f, keys in common.items() if re.search(rf"\b{f}\(", text)))
    return out


def test_the_catalog_covers_every_registered_model():
    assert set(catalog.MODELS) == set(list_models()) == set(SOURCES)


@pytest.mark.parametrize("model", sorted(SOURCES))
def test_every_key_an_adapter_reads_is_accepted(model):
    info = catalog.MODELS[model]
    accepted = catalog.COMMON_KEYS | info.keys | info.options
    read = keys_read(model)
    assert read, model  # the scan found the factory's reads
    assert read <= accepted, sorted(read - accepted)


def test_the_checks_use_the_adapters_own_choices():
    pytest.importorskip("torch")
    from xbench.extract.models import dual, geometry, prompts
    from xbench.extract.pipeline import PRECISIONS

    assert checks.RESIZE_MODES == geometry.RESIZE_MODES
    assert checks.MAP_TEXT == dual.MAP_TEXT
    assert checks.PROMPT_STYLES == prompts.STYLES
    assert set(checks.PRECISIONS) == set(PRECISIONS)


def test_methods_listed_are_those_the_towers_run(tmp_path):
    pytest.importorskip("open_clip")
    from xbench.extract.models import create_adapter
    from xbench.extract.models.biovil import ResNetTower
    from xbench.extract.saliency import METHODS, capabilities

    def runnable(caps):
        return tuple(m for m in METHODS.names() if not METHODS.get(m).missing(set(caps) | {"empty_prompt"}))

    tiny = create_adapter("clip-tiny")
    assert set(runnable(capabilities(tiny.tower))) == set(catalog.MODELS["clip-tiny"].methods)
    assert set(runnable(ResNetTower.capabilities)) == set(catalog.MODELS["biovil"].methods)
    assert set(catalog.MODELS["biovil_t"].methods) == set(catalog.MODELS["biovil"].methods)


def _doc_configs():
    for path in [ROOT / "docs" / "how-to" / "extract.md", *sorted((ROOT / "model_cards").glob("*.md"))]:
        for block in re.findall(r"```yaml\n(.*?)```", path.read_text(), re.S):
            data = yaml.safe_load("\n".join(line[2:] if line.startswith("  ") else line for line in block.splitlines())
                                  if block.startswith("  ") else block)
            if isinstance(data, dict) and "adapter" in data:
                yield pytest.param(data, id=f"{path.name}:{data['adapter']}")


@pytest.mark.parametrize("config", list(_doc_configs()))
def test_model_configs_in_the_docs_pass_the_key_checks(config):
    info = catalog.MODELS[config["adapter"]]
    assert checks._unknown_keys(config, info, {}, "doc") == []
    assert request._values(config, {}, "doc", info, cli_device=False, cli_precision=False) == []


def test_suite_model_options_pass_the_key_checks():
    for suite in sorted((ROOT / "suites").glob("*.yaml")):
        for entry in yaml.safe_load(suite.read_text())["models"]:
            model, options = (entry, {}) if isinstance(entry, str) else (entry["model"], entry.get("options", {}))
            info = catalog.MODELS[model]
            config = {"adapter": model, **options}
            assert checks._unknown_keys(config, info, {}, suite.name) == [], (suite.name, model)
            assert request._values(config, {}, suite.name, info, cli_device=False, cli_precision=False) == []


@pytest.mark.parametrize("text, expected", [
    ("true", True), ("false", False), ("yes", "yes"), ("on", "on"), ("True", "True"), ("1", 1), ("0.5", 0.5),
    ("[56, 56]", [56, 56]), ("{resize: crop}", {"resize": "crop"}), ('"false"', "false"), ("*a", "*a"),
    ("/w/a b.pt", "/w/a b.pt"), ("", ""), ("null", "null"), ("a: b: c", "a: b: c"),
])
def test_model_option_values(text, expected):
    assert checks.parse_option_value(text, "--model-option k") == expected


def test_model_options_nest_and_refuse_conflicts():
    assert checks.parse_model_options(["preprocess.resize=crop", "preprocess.size=224", "options.trust_checkpoint=true"]) \
        == {"preprocess": {"resize": "crop", "size": 224}, "options": {"trust_checkpoint": True}}
    with pytest.raises(InputError) as err:
        checks.parse_model_options(["prompts=x", "prompts.style=pair", "=1", "a..b=2", "k=" + "[" * 12 + "]" * 12])
    lines = [str(p) for p in err.value.problems]
    assert len(lines) == 4 and "already set to a value" in lines[0] and "nests more than 8" in lines[3]


def test_trust_checkpoint_true_passes_the_checks(tmp_path):
    ckpt = tmp_path / "carzero.ckpt"
    ckpt.write_bytes(b"x")
    cfg = request.check_request("carzero", {"weights": str(ckpt), "text_encoder": str(tmp_path),
                                           "options": {"trust_checkpoint": True}})
    assert cfg["options"]["trust_checkpoint"] is True
