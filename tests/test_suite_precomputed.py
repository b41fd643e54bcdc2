"""A suite scores a precomputed submission (a converted submission.zarr) beside the models it extracts (issue 46
item 6): `models: [{submission: PATH, name: NAME}]`. No extraction step; its score step's fingerprint holds the
store's content digest, so an unchanged store is skipped on the next run and a changed one is scored again."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xbench import suite as S
from xbench.schemas import DatasetSpec, SubmissionWriter, read_images


def _suite(models) -> dict:
    return {
        "name": "mine", "seed": 0,
        "prepare": {"grid": 16, "image_size": 64, "workers": 1, "cases_per_block": 4},
        "datasets": {"phantom": {"split": "test", "options": {"n_cases": 5, "seed": 1, "size": 64, "phrases": False}}},
        "models": models,
        "score": {"bootstrap": 0},
        "report": {"bootstrap": 0, "overlays": False},
    }


def _own_submission(path: Path, images: Path, seed: int) -> Path:
    """A researcher's own maps for the suite's prepared cases (what xbench-convert would write)."""
    ds = read_images(images).datasets["phantom"]
    ids, classes = [str(c) for c in ds.case_id], [str(c) for c in ds.classes]
    rng = np.random.default_rng(seed)
    w = SubmissionWriter.create(path, model="my-model", method="mine", cases_per_block=4, overwrite=True,
                                datasets={"phantom": DatasetSpec(ids, classes, (4, 4), "probability")})
    for b in w.blocks_todo("phantom"):
        s, e = w.block_rows("phantom", b)
        w.write_block("phantom", b, rng.random((e - s, len(classes))), rng.random((e - s, len(classes), 4, 4)))
    w.finish()
    return path


def test_parsing_a_precomputed_entry(tmp_path):
    suite = S.parse_suite(_suite([{"submission": "subs/mine.zarr"}, {"submission": "b.zarr.zip", "name": "bee"}]),
                          tmp_path)
    (a, b) = suite.models
    assert (a.key, a.submission) == ("mine", str((tmp_path / "subs/mine.zarr").resolve()))
    assert (b.key, b.submission) == ("bee", str((tmp_path / "b.zarr.zip").resolve()))
    steps = S.plan_steps(suite)
    assert [s.id for s in steps] == ["prepare/phantom", "score/mine", "score/bee", "report"]
    assert steps[1].deps == ["prepare/phantom"] and steps[1].options["submission"] == a.submission
    assert steps[-1].deps == ["score/mine", "score/bee"]


@pytest.mark.parametrize("entry, words", [
    ({"submission": "a.zarr", "model": "random"}, "give one or the other"),
    ({"submission": "a.zarr", "extract": {"batch_size": 2}}, "give one or the other"),
    ({"submission": 3}, "must be the path of a submission store"),
    ({"submission": "a.zarr", "nmae": "x"}, "nmae"),
])
def test_a_bad_precomputed_entry_is_one_line(tmp_path, entry, words):
    with pytest.raises(S.SuiteError) as err:
        S.parse_suite(_suite([entry]), tmp_path)
    assert any(words in str(p) for p in err.value.problems), err.value.problems


def test_a_precomputed_submission_is_scored_reported_and_fingerprinted_by_content(tmp_path):
    out, mine = tmp_path / "run", tmp_path / "mine.zarr"
    suite = S.parse_suite(_suite([{"submission": str(mine), "name": "mine"}]), tmp_path)
    with pytest.raises(S.SuiteError) as err:  # not there yet: one line, before any step
        S.run_suite(suite, out=out, progress=False)
    assert [str(p) for p in err.value.problems] == [f"models.mine.submission: {mine}: no such file or folder "
                                                    "(models.mine.submission)"]
    S.run_suite(suite, out=out, progress=False, only=["prepare"])  # the cases the researcher's maps are made for
    _own_submission(mine, out / "data" / "images.zarr", seed=1)
    first = S.run_suite(suite, out=out, progress=False)
    status = {r["step"]: r["status"] for r in first.steps}
    assert status == {"prepare/phantom": "skip", "score/mine": "ran", "report": "ran"}
    metrics = json.loads((out / "scores" / "mine" / "metrics.json").read_text())
    assert metrics["xbench"]["submission"]["model"] == "my-model" and (out / "report" / "index.html").is_file()
    assert [r["model"] for r in first.leaderboard] == ["mine"]
    assert not (out / "submissions").exists()  # nothing was extracted, nothing copied
    again = S.run_suite(suite, out=out, progress=False)
    assert {r["status"] for r in again.steps} == {"skip"}
    _own_submission(mine, out / "data" / "images.zarr", seed=2)  # new maps, same path: scored again
    third = S.run_suite(suite, out=out, progress=False)
    status = {r["step"]: (r["status"], r["reason"]) for r in third.steps}
    assert status["score/mine"] == ("ran", "inputs or options changed") and status["prepare/phantom"][0] == "skip"
    changed = json.loads((out / "scores" / "mine" / "metrics.json").read_text())
    assert changed["overall"] != metrics["overall"]


def test_unconverted_outputs_named_as_a_submission_are_refused_with_the_fix(tmp_path):
    npz = tmp_path / "npz"
    (npz / "phantom").mkdir(parents=True)
    (npz / "meta.json").write_text(json.dumps({"model": "m", "datasets": {"phantom": {"classes": ["A"]}}}))
    np.savez(npz / "phantom" / "c0.npz", scores=np.zeros(1), saliency=np.zeros((1, 2, 2)))
    suite = S.parse_suite(_suite([{"submission": str(npz), "name": "mine"}]), tmp_path)
    with pytest.raises(S.SuiteError) as err:
        S.run_suite(suite, out=tmp_path / "run", progress=False)
    (line,) = [str(p) for p in err.value.problems]
    assert line.startswith("models.mine.submission: ") and "run xbench-convert first" in line
