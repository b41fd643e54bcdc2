"""``xbench-extract`` checks every name and option before torch or a model loads (issue 27 item 4) and reads
model configs and ``--model-option`` values through the bounded readers (issue 25).

Each run is ``python -m xbench.extract.cli`` with a ``torch`` on the path whose import exits 99: a refusal
that imported torch first cannot pass. The docs promise a refusal within 2 s; the bound here is 5 s, for a
loaded 2-core test machine.
"""
from __future__ import annotations

import json

import pytest

from cli_run import run_extract

FAST_S = 5.0


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset

    out = tmp_path_factory.mktemp("ph")
    prepare_dataset(PhantomReader(n_cases=4, size=64), out, grid=(32, 32), image_size=64, workers=1,
                    cases_per_block=4, progress=False)
    return out / "images.zarr"


def _refused(run, *fragments):
    assert run.rc == 2, (run.rc, run.stderr)
    assert "TORCH WAS IMPORTED" not in run.stderr and "Traceback" not in run.stderr
    assert run.seconds < FAST_S, run.seconds
    for fragment in fragments:
        assert any(fragment in line for line in run.lines), (fragment, run.lines)


def test_a_typo_in_method_is_refused_before_torch_with_a_suggestion(images, tmp_path):
    run = run_extract(["--model", "dog", "--method", "gemm", "--images", images, "--out", tmp_path / "o.zarr"],
                      tmp_path, no_torch=True)
    _refused(run, "unknown map method 'gemm'. Did you mean: gem?")
    assert not (tmp_path / "o.zarr").exists()


@pytest.mark.parametrize("extra, fragment", [
    (["--model", "clpi"], "unknown model 'clpi'. Did you mean: clip?"),
    (["--model", "dog", "--model-option", "sigmma=0.1"], "dog reads no key 'sigmma'. Did you mean: sigma"),
    (["--model", "clip-tiny", "--model-option", "preprocess.resize=stretch"], "must be one of squash, crop, pad"),
    (["--model", "clip-tiny", "--model-option", "preprocess.rezise=crop"], "Did you mean: resize?"),
    (["--model", "clip-tiny", "--model-option", "map_text=negative"], "must be one of positive, contrast"),
    (["--model", "clip-tiny", "--model-option", "map_size=[0, 3]"], "map_size: must be a positive integer"),
    (["--model", "kad", "--model-option", "weights=/nonexistent/KAD_512.pt"], "/nonexistent/KAD_512.pt: no such file"),
    (["--model", "kad"], "kad needs weights"),
    (["--model", "kad", "--model-option", "weights=random", "--model-option", "text_encoder=Med-KEBERT"],
     "Med-KEBERT: no such file or folder"),
    (["--model", "kad", "--model-option", "weights=random", "--model-option", "options.stagse=3"],
     "Did you mean: stages?"),
    (["--model", "biovil", "--method", "rollout"], "'rollout' is not available for biovil"),
    (["--model", "dog", "--device", "gpu"], "--device: 'gpu' is not a device"),
    (["--model", "dog", "--model-option", "device=cuda:x"], "is not a device"),
    (["--model", "dog", "--model-option", "precision=bf61"], "must be one of fp32, bf16, fp16"),
    (["--model", "dog", "--model-option", "novalue"], "expected KEY=VALUE"),
    (["--model", "dog", "--model-option", "seed=" + "[" * 20 + "]" * 20], "nests more than 8 levels"),
])
def test_bad_names_and_options_are_refused_before_torch(images, tmp_path, extra, fragment):
    run = run_extract([*extra, "--images", images, "--out", tmp_path / "o.zarr"], tmp_path, no_torch=True)
    _refused(run, fragment)


def test_a_bad_precision_is_a_usage_error(images, tmp_path):
    run = run_extract(["--model", "dog", "--precision", "bf61", "--images", images, "--out", tmp_path / "o.zarr"],
                      tmp_path, no_torch=True)
    _refused(run, "'bf61' is not one of")


def test_every_problem_is_listed_at_once(images, tmp_path):
    run = run_extract(["--model", "clip-tiny", "--method", "gemm", "--model-option", "prompt.style=pair",
                       "--model-option", "map_text=both", "--device", "tpu", "--images", images.parent / "gt.zarr",
                       "--out", tmp_path / "o.zarr"], tmp_path, no_torch=True)
    _refused(run, "'gemm'", "reads no key 'prompt'. Did you mean: prompts?", "map_text", "'tpu'",
             "this is a ground-truth store")
    assert len([line for line in run.lines if "error:" in line]) == 5


@pytest.mark.parametrize("value, shown", [
    ("yes", "the string 'yes'"), ('"false"', "the string 'false'"), ('"true"', "the string 'true'"),
    ("1", "int 1"), ("0", "int 0"), ("True", "the string 'True'"), ("on", "the string 'on'"),
])
def test_trust_checkpoint_takes_the_boolean_true_only(images, tmp_path, value, shown):
    run = run_extract(["--model", "kad", "--model-option", "weights=random", "--model-option",
                       f"options.trust_checkpoint={value}", "--images", images, "--out", tmp_path / "o.zarr"],
                      tmp_path, no_torch=True)
    _refused(run, f"options.trust_checkpoint: must be the boolean true or false, not {shown}",
             "--model-option options.trust_checkpoint=true")


@pytest.mark.parametrize("suffix, text", [
    (".yaml", "adapter: kad\nweights: random\noptions:\n  trust_checkpoint: 'false'\n"),
    (".toml", 'adapter = "kad"\nweights = "random"\n[options]\ntrust_checkpoint = "false"\n'),
    (".json", '{"adapter": "kad", "weights": "random", "options": {"trust_checkpoint": "false"}}'),
])
def test_trust_checkpoint_as_a_string_in_a_config_file_is_refused(images, tmp_path, suffix, text):
    cfg = tmp_path / f"kad{suffix}"
    cfg.write_text(text)
    run = run_extract(["--model", cfg, "--images", images, "--out", tmp_path / "o.zarr"], tmp_path, no_torch=True)
    _refused(run, "trust_checkpoint: must be the boolean true or false, not the string 'false'")


@pytest.mark.parametrize("word", ["yes", "on", "Y"])
def test_yaml_11_booleans_do_not_give_trust(images, tmp_path, word):
    cfg = tmp_path / "kad.yaml"
    cfg.write_text(f"adapter: kad\nweights: random\noptions: {{trust_checkpoint: {word}}}\n")
    run = run_extract(["--model", cfg, "--images", images, "--out", tmp_path / "o.zarr"], tmp_path, no_torch=True)
    _refused(run, f"trust_checkpoint: must be written true or false, not '{word}' (line 3)")


def test_unknown_config_keys_in_a_file_are_refused_with_suggestions(images, tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("adapter: clip-tiny\nmodle: ViT-B-16\nprompts: {stlye: pair}\nweigths: random\n")
    run = run_extract(["--model", cfg, "--images", images, "--out", tmp_path / "o.zarr"], tmp_path, no_torch=True)
    _refused(run, "reads no key 'modle'. Did you mean: model?", "reads no prompts.stlye. Did you mean: style?",
             "reads no key 'weigths'. Did you mean: weights?")
    assert all(str(cfg) in line for line in run.lines)  # each line says where the key was written


# -- hostile model configs: refused in a line, within 60 s and 1 GiB -------------------------------------
def _alias_bomb(levels: int = 12) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "adapter: dog\n" + "\n".join(lines) + f"\nname: *a{levels - 1}\n"


@pytest.mark.parametrize("name, text, fragment", [
    ("bomb.yaml", _alias_bomb(), "uses the YAML alias"),
    ("deep.json", '{"adapter": "dog", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "levels deep"),
    ("deep.toml", 'adapter = "dog"\nx = ' + "[" * 100_000 + "]" * 100_000 + "\n", "levels deep"),
    ("big.yaml", "adapter: dog\nprompts:\n  classes:\n" + "".join(f"    c{i}: [a, b]\n" for i in range(80_000)),
     "the limit for this file is 1.0 MiB"),
    ("twice.yaml", "adapter: dog\nsigma: 0.2\nsigma: 0.3\n", "given twice"),
    ("digits.json", '{"adapter": "dog", "seed": ' + "9" * 5000 + "}", "integer of 5000 digits"),
    ("text.yaml", "- just\n- a list\n", "a model config must be a mapping"),
    ("adapter.yaml", "adapter: open_clpi\n", "unknown adapter 'open_clpi'. Did you mean: open_clip?"),
    ("adapters.yaml", "adapter: [dog]\n", "unknown adapter"),
    ("tagged.yaml", "adapter: dog\nname: !!python/object/apply:os.system [echo pwned]\n", "not valid YAML"),
])
def test_hostile_model_configs_are_refused_within_budget(images, tmp_path, name, text, fragment):
    cfg = tmp_path / name
    cfg.write_text(text)
    run = run_extract(["--model", cfg, "--images", images, "--out", tmp_path / "o.zarr"], tmp_path, cap_s=60,
                      no_torch=True)
    assert run.rc == 2, (run.rc, run.stderr[-2000:])
    assert run.seconds < 60 and run.maxrss_mib < 1024, (run.seconds, run.maxrss_mib)
    assert any(fragment in line for line in run.lines), run.lines
    assert "Traceback" not in run.stderr and not (tmp_path / "o.zarr").exists()


def test_a_missing_or_oddly_named_config_is_one_line(images, tmp_path):
    run = run_extract(["--model", tmp_path / "nope.yaml", "--images", images, "--out", tmp_path / "o.zarr"],
                      tmp_path, no_torch=True)
    _refused(run, "not found")
    (tmp_path / "model.cfg").write_text("adapter: dog\n")
    run = run_extract(["--model", tmp_path / "model.cfg", "--images", images, "--out", tmp_path / "o.zarr"],
                      tmp_path, no_torch=True)
    _refused(run, "a model config must end in .yaml")


# -- --list-methods / --list-models ---------------------------------------------------------------
def test_list_methods_one_line_each_with_needs_models_and_reference(tmp_path):
    from xbench.extract.models import catalog
    from xbench.extract.saliency import METHODS

    run = run_extract(["--list-methods"], tmp_path, no_torch=True)
    assert run.rc == 0 and run.seconds < FAST_S, (run.rc, run.stderr)
    lines = run.stdout.strip().splitlines()
    assert len(lines) == len(METHODS.names()) + len(catalog.OWN_METHODS)
    by_name = {line.split()[0]: line for line in lines}
    for name in METHODS.names():
        m = METHODS.get(name)
        assert m.description in by_name[name] and m.reference in by_name[name]
    assert "ViT towers with per-block attention views" in by_name["gem"]
    assert "Models: medklip, mavl, kad, carzero, devide" in by_name["cross-attention"]
    assert "biovil" in by_name["gradcam"] and "biovil" not in by_name["rollout"]

    rows = json.loads(run_extract(["--list-methods", "--json"], tmp_path, no_torch=True).stdout)
    assert {r["name"] for r in rows} == set(METHODS.names()) | set(catalog.OWN_METHODS)
    gem = next(r for r in rows if r["name"] == "gem")
    assert gem["needs"] == ["blocks"] and gem["selectable"] and "clip" in gem["models"]
    assert gem["reference"].startswith("Bousselham")


def test_list_models_says_what_each_needs(tmp_path):
    from xbench.extract.models import list_models

    run = run_extract(["--list-models"], tmp_path, no_torch=True)
    assert run.rc == 0 and run.seconds < FAST_S, (run.rc, run.stderr)
    lines = {line.split()[0]: line for line in run.stdout.strip().splitlines()}
    assert set(lines) == set(list_models())
    assert "Needs nothing" in lines["dog"] and "Needs nothing" in lines["clip-tiny"]
    assert "text encoder: a local Med-KEBERT folder" in lines["kad"]
    assert "trust_checkpoint: true" in lines["carzero"] and "trust_checkpoint" not in lines["kad"]
    rows = {r["name"]: r for r in json.loads(run_extract(["--list-models", "--json"], tmp_path, no_torch=True).stdout)}
    assert set(rows) == set(list_models())
    assert rows["dog"]["needs"].startswith("nothing") and rows["dog"]["text_encoder"] is None
    assert rows["kad"]["weights_required"] and rows["kad"]["methods"] == ["cross-attention"]
    assert not rows["kad"]["method_selectable"] and rows["clip"]["method_selectable"]
    assert "hub id timm/vit_base_patch16_clip_224.openai" in rows["clip"]["weights"]


def test_original_images_are_capped_by_pixel_count():
    pytest.importorskip("torch")
    import numpy as np

    from xbench.extract.runner import MAX_ORIGINAL_PIXELS, ExtractError, check_original_sizes

    check_original_sizes("d", np.array([[2048, 2500], [1, 1]]))
    side = int(MAX_ORIGINAL_PIXELS ** 0.5)
    check_original_sizes("d", np.array([[side, side]]))
    with pytest.raises(ExtractError, match=r"case 1 has an original image of 100000 x 100000 pixels \(2 case"):
        check_original_sizes("d", np.array([[10, 10], [100_000, 100_000], [side + 1, side]]))
    with pytest.raises(ExtractError, match="sides of at least 1"):
        check_original_sizes("d", np.array([[0, 10]]))
