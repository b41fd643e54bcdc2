"""The extraction loop and CLI: valid submissions, resume after SIGKILL, two gloo ranks, errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xbench.extract.cli import main
from xbench.extract.runner import ExtractOptions, run_extraction
from xbench.schemas import read_submission, validate_submission


def _run(images, out, model, **kw):
    kw.setdefault("workers", 0)
    kw.setdefault("quiet", True)
    return run_extraction(ExtractOptions(model=model, images=images, out=out, **kw))


def _same_store(a: Path, b: Path) -> None:
    sa, sb = read_submission(a), read_submission(b)
    assert sa.attrs == sb.attrs
    assert sorted(sa.datasets) == sorted(sb.datasets)
    for name, da in sa.datasets.items():
        db = sb.datasets[name]
        assert da.classes == db.classes and da.score_kind == db.score_kind
        assert np.array_equal(da.case_id, db.case_id)
        assert np.array_equal(da.scores, db.scores)
        assert np.array_equal(np.asarray(da.saliency[:]), np.asarray(db.saliency[:]))


@pytest.mark.parametrize("model", ["random", "center", "dog"])
def test_baselines_write_valid_submissions(phantom_images, tmp_path, model):
    out = tmp_path / f"{model}.zarr"
    summary = _run(phantom_images / "images.zarr", out, model, batch_size=4, cases_per_block=8)
    assert summary["blocks_written"] == 3 and summary["cases"] == 20
    assert validate_submission(out, phantom_images / "gt.zarr") == []
    sub = read_submission(out)
    assert sub.attrs["model"] == model and sub.attrs["config_hash"]
    ds = sub.datasets["phantom"]
    assert ds.saliency.shape == (20, 5, 14, 14)


def test_tiny_open_clip_config_end_to_end(phantom_images, tmp_path, tiny_open_clip):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(f"adapter: open_clip\nmodel: local-dir:{tiny_open_clip}\nweights: random\n"
                   "prompts: {style: pair}\npreprocess: {resize: crop}\n")
    out = tmp_path / "tiny.zarr"
    r = CliRunner().invoke(main, ["--model", str(cfg), "--images", str(phantom_images / "images.zarr"),
                                  "--out", str(out), "--method", "maskclip", "--workers", "1", "--batch-size", "5",
                                  "--cases-per-block", "8", "--precision", "bf16", "--quiet", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["precision"] == "bf16"
    assert validate_submission(out, phantom_images / "gt.zarr") == []
    attrs = read_submission(out).attrs
    assert attrs["method"] == "maskclip" and attrs["precision"] == "bf16"
    assert attrs["prompts"]["phantom"]["style"] == "pair"
    assert set(attrs["software"]) >= {"torch", "zarr", "open_clip_torch"}


def _cli(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "xbench.extract.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_resume_after_sigkill_gives_identical_store(phantom_images, tmp_path, writer):
    images = str(phantom_images / "images.zarr")
    ref = tmp_path / "ref.zarr"
    _run(images, ref, "random", batch_size=3, cases_per_block=4)
    out = tmp_path / "killed.zarr"
    args = ["--model", "random", "--images", images, "--out", str(out), "--batch-size", "3",
            "--cases-per-block", "4", "--workers", "0", "--writer", writer, "--quiet", "--json"]
    first = _cli(*args, env={"XBENCH_EXTRACT_KILL_AFTER_BLOCKS": "2"})
    assert first.returncode == -9, first.stderr  # really SIGKILLed, mid-run
    assert validate_submission(out) != []  # an unfinished store is not a valid submission
    second = _cli(*args)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    assert summary["datasets"]["phantom"]["blocks_todo"] == 3  # 5 blocks, 2 were done before the kill
    assert validate_submission(out, phantom_images / "gt.zarr") == []
    _same_store(ref, out)


@pytest.mark.slow
def test_two_gloo_ranks_match_single_rank(phantom_images, tmp_path):
    images = str(phantom_images / "images.zarr")
    ref = tmp_path / "one.zarr"
    _run(images, ref, "dog", batch_size=4, cases_per_block=4)
    out = tmp_path / "two.zarr"
    r = _cli("--model", "dog", "--images", images, "--out", str(out), "--batch-size", "4", "--cases-per-block", "4",
             "--workers", "0", "--device", "cpu", "--nproc-per-node", "2", "--quiet", "--json",
             env={"OMP_NUM_THREADS": "1"}, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["world_size"] == 2 and summary["blocks_written"] in (2, 3)  # 5 blocks over 2 ranks
    assert validate_submission(out, phantom_images / "gt.zarr") == []
    _same_store(ref, out)


def test_rerun_of_finished_store_is_a_noop(phantom_images, tmp_path):
    out = tmp_path / "c.zarr"
    _run(phantom_images / "images.zarr", out, "center")
    again = _run(phantom_images / "images.zarr", out, "center")
    assert again["blocks_written"] == 0
    assert validate_submission(out, phantom_images / "gt.zarr") == []


def test_cli_errors_are_one_line(phantom_images, tmp_path):
    images = str(phantom_images / "images.zarr")
    runner = CliRunner()
    cases = [
        (["--model", "dgo"], "unknown model 'dgo'"),
        (["--model", "clip"], "timm/vit_base_patch16_clip_224.openai"),
        (["--model", "dog", "--datasets", "vindr_cxr"], "has no dataset 'vindr_cxr'"),
        (["--model", str(tmp_path / "missing.yaml")], "not found"),
    ]
    for extra, msg in cases:
        r = runner.invoke(main, ["--images", images, "--out", str(tmp_path / "x.zarr"), "--quiet", *extra])
        assert r.exit_code == 2, (extra, r.output)
        assert msg in r.output and "Traceback" not in r.output
    # a store with a different spec is refused, not overwritten
    _run(images, tmp_path / "s.zarr", "center")
    r = runner.invoke(main, ["--images", images, "--out", str(tmp_path / "s.zarr"), "--model", "dog", "--quiet"])
    assert r.exit_code == 2 and "different specification" in r.output


def test_list_models():
    r = CliRunner().invoke(main, ["--list-models", "--json"])
    assert r.exit_code == 0
    names = [row["name"] for row in json.loads(r.output)]
    assert {"clip", "biomedclip", "open_clip", "transformers", "random", "center", "dog", "medklip", "kad",
            "mavl", "carzero", "devide"} <= set(names)


def test_out_inside_or_equal_to_the_images_store_is_refused(phantom_images, tmp_path):
    from xbench.extract.runner import ExtractError
    from xbench.schemas.store import store_sha256

    images = phantom_images / "images.zarr"
    before = store_sha256(images)
    for out in (images / "sub.zarr", images, images.parent):
        with pytest.raises(ExtractError, match="images store"):
            _run(images, out, "random")
    assert store_sha256(images) == before


def test_writer_process_gives_the_same_store_and_resumes(phantom_images, tmp_path):
    images = phantom_images / "images.zarr"
    ref, out = tmp_path / "thread.zarr", tmp_path / "process.zarr"
    _run(images, ref, "dog", batch_size=3, cases_per_block=4)
    summary = _run(images, out, "dog", batch_size=3, cases_per_block=4, writer="process", workers=1)
    assert summary["blocks_written"] == 5
    assert validate_submission(out, phantom_images / "gt.zarr") == []
    _same_store(ref, out)
    assert _run(images, out, "dog", batch_size=3, cases_per_block=4, writer="process")["blocks_written"] == 0


def test_writer_process_error_reaches_the_caller(tmp_path):
    import functools

    from xbench.extract.pipeline import BlockWriter, PendingBlock
    from xbench.extract.writer_process import ProcessStore
    from xbench.schemas import SubmissionWriter

    torch = pytest.importorskip("torch")
    pending = PendingBlock(torch.zeros(2, 1), torch.zeros(2, 1, 2, 2))
    with ProcessStore(functools.partial(SubmissionWriter.open, tmp_path / "missing.zarr")) as sink:
        with pytest.raises(RuntimeError, match="writer process: .*missing.zarr"):
            with BlockWriter(sink.write_block) as w:
                w.submit("phantom", 0, pending)
