"""``xbench-extract --model llava-rad`` through the block pipeline (valid submission, resume after SIGKILL), and
the weights folder as hostile input: Python files and pickles refused without running them, broken side files
and weights as one line, exit 2."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("open_clip")
pytest.importorskip("transformers")
from click.testing import CliRunner  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import decoder_tiny  # noqa: E402

CLASSES = decoder_tiny.STORE_CLASSES


@pytest.fixture(scope="module")
def folder(tiny_llava_folder):
    return tiny_llava_folder


@pytest.fixture(scope="module")
def images(tiny_decoder_images):
    return tiny_decoder_images


def _args(folder, images, out, *extra):
    return ["--model", "llava-rad", "--model-option", f"model={folder}", "--images", str(images), "--out", str(out),
            "--batch-size", "2", "--cases-per-block", "2", "--workers", "0", "--device", "cpu", "--quiet", "--json",
            *extra]


def test_extract_writes_a_valid_submission_and_resumes(folder, images, tmp_path):
    from xbench.extract.cli import main
    from xbench.schemas import read_submission, validate_submission

    ref = tmp_path / "ref.zarr"
    r = CliRunner().invoke(main, _args(folder, images, ref))
    assert r.exit_code == 0, r.output
    assert validate_submission(ref) == []
    sub = read_submission(ref)
    ds = sub.datasets["phantom"]
    assert ds.score_kind == "logit" and sub.attrs["method"] == "attention"
    assert np.isfinite(np.asarray(ds.scores)).all() and np.asarray(ds.saliency[:]).shape[:2] == (5, 2)
    # the same run killed after one block, then resumed: the same store
    out = tmp_path / "killed.zarr"
    env = {**os.environ, "XBENCH_EXTRACT_KILL_AFTER_BLOCKS": "1"}
    cmd = [sys.executable, "-m", "xbench.extract.cli", *_args(folder, images, out)]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == -9, first.stderr[-2000:]
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert json.loads(second.stdout.strip().splitlines()[-1])["datasets"]["phantom"]["blocks_todo"] == 2
    a, b = read_submission(ref).datasets["phantom"], read_submission(out).datasets["phantom"]
    assert np.array_equal(np.asarray(a.scores), np.asarray(b.scores))
    assert np.array_equal(np.asarray(a.saliency[:]), np.asarray(b.saliency[:]))


@pytest.mark.slow
def test_two_gloo_ranks_match_one_rank(folder, images, tmp_path):
    """--nproc-per-node 2 on the CPU (gloo): the blocks split over two ranks, the same store as one rank."""
    from xbench.schemas import read_submission

    one, two = tmp_path / "one.zarr", tmp_path / "two.zarr"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for out, extra in ((one, []), (two, ["--nproc-per-node", "2"])):
        cmd = [sys.executable, "-m", "xbench.extract.cli", *_args(folder, images, out, *extra)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["world_size"] == 2
    a, b = read_submission(one).datasets["phantom"], read_submission(two).datasets["phantom"]
    assert np.array_equal(np.asarray(a.scores), np.asarray(b.scores))
    assert np.array_equal(np.asarray(a.saliency[:]), np.asarray(b.saliency[:]))


def _copy(folder: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in folder.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _with_python(d: Path, marker: Path) -> None:
    (d / "modeling_llava.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_llava.LlavaLlamaForCausalLM"}
    (d / "config.json").write_text(json.dumps(cfg))


def _with_pickle(d: Path, marker: Path) -> None:
    (d / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _Payload(str(marker))}))


@pytest.mark.parametrize("plant", [_with_python, _with_pickle], ids=["python", "pickle"])
def test_folder_with_code_or_pickles_is_refused_unrun(folder, images, tmp_path, plant):
    from xbench.extract.cli import main

    d = _copy(folder, tmp_path / "m")
    marker = tmp_path / "RAN"
    plant(d, marker)
    r = CliRunner().invoke(main, _args(d, images, tmp_path / "out.zarr"))
    assert r.exit_code == 2, r.output
    assert "refused" in r.output and "Traceback" not in r.output
    assert not marker.exists() and not (tmp_path / "out.zarr").exists()


def _deep_config(d):
    (d / "config.json").write_text("[" * 40 + "]" * 40)


def _nan_config(d):
    (d / "config.json").write_text('{"hidden_size": NaN}')


def _dup_config(d):
    (d / "config.json").write_text('{"hidden_size": 32, "hidden_size": 64}')


def _bad_weights(d):
    (d / "model.safetensors").write_bytes(b"\x00" * 64)


def _wrong_shape(d):
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 50
    (d / "config.json").write_text(json.dumps(cfg))


def _escaping_index(d):
    (d / "model.safetensors").rename(d / "shard.safetensors")
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../elsewhere.safetensors"}}))


def _typed_wrong(d):  # a value transformers 5's strict config class rejects
    (d / "config.json").write_text(json.dumps({**json.loads((d / "config.json").read_text()), "hidden_size": [1]}))


def _bad_tokenizer(d):
    (d / "tokenizer.json").write_text('{"version": ' * 50)


@pytest.mark.parametrize("break_it, words", [
    (_deep_config, "config.json"), (_nan_config, "config.json"), (_dup_config, "config.json"),
    (_bad_weights, "safetensors"), (_wrong_shape, "weights of lm"), (_escaping_index, "not a safetensors file"),
    (_bad_tokenizer, "tokenizer.json"), (_typed_wrong, "config.json")])
def test_broken_folder_is_one_line_exit_2(folder, images, tmp_path, break_it, words):
    from xbench.extract.cli import main

    d = _copy(folder, tmp_path / "m")
    break_it(d)
    r = CliRunner().invoke(main, _args(d, images, tmp_path / "out.zarr"))
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize("options, words", [
    ([], "llava-rad needs `model`"),
    (["--model-option", "layers=[7]"], "outside the decoder's 3 layers"),
    (["--model-option", "prompts.positive=no placeholder"], "one {} for the finding"),
    (["--model-option", 'prompts.answers=["Yes"]'], "two non-empty texts"),
    (["--model-option", 'prompts.answers=["Yes", "Yes"]'], "start with the same token"),
    (["--method", "maskclip"], "not available for llava-rad"),
])
def test_bad_options_are_one_line_exit_2(folder, images, tmp_path, options, words):
    from xbench.extract.cli import main

    args = _args(folder, images, tmp_path / "out.zarr")
    if not options:
        args = args[:2] + args[4:]  # no model folder
    r = CliRunner().invoke(main, args + options)
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output, r.output
