"""A suite's keys that name a file or folder (``thresholds_from``, ``human_dir``, ``faithfulness``, ``key``) enter
the score step's fingerprint by what they name, not by their name: editing such a file in place re-runs the step,
leaving it as it is skips it (issue 47 item 4). The steps' executors are replaced by ones that write a marker, so
the real driver's record keeping is what is tested, not the scorer."""
from __future__ import annotations

import hashlib
import json

import pytest

from xbench import suite as S
from xbench.schemas.options import suite_paths
from xbench.score.options import ScoreOptions
from xbench.suite.fingerprint import path_digests, tree_digest


def test_the_path_keys_are_the_declared_path_options():
    assert set(S.parse.SCORE_PATHS) == {"thresholds_from", "human_dir", "faithfulness", "key"}
    assert S.parse.SCORE_PATHS == suite_paths(ScoreOptions)


def test_path_digests_by_content(tmp_path):
    (tmp_path / "t.json").write_bytes(b'{"tau": 0.5}')
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "metrics.json").write_bytes(b"{}")
    got = path_digests({"thresholds_from": str(tmp_path / "t.json"), "human_dir": str(tmp_path / "h"),
                        "key": str(tmp_path / "nothing.npz"), "faithfulness": "s3://bucket/round2-sub.zarr",
                        "by": "sex"}, S.parse.SCORE_PATHS)
    inner = hashlib.sha256(b"{}").hexdigest()
    assert got == {"thresholds_from": hashlib.sha256(b'{"tau": 0.5}').hexdigest(),
                   "human_dir": hashlib.sha256(f"metrics.json\0{inner}\n".encode()).hexdigest(),
                   "key": None, "faithfulness": "s3://bucket/round2-sub.zarr"}
    assert got["human_dir"] == tree_digest(tmp_path / "h")
    assert path_digests({"thresholds_from": None}, S.parse.SCORE_PATHS) == {}


@pytest.fixture
def fake_steps(monkeypatch):
    """Every executor writes a marker file into its step's outputs and notes that it ran."""
    ran: list[str] = []

    def write(step, ctx, resume):
        ran.append(step.id)
        for o in step.outputs:
            (ctx.run_dir / o).mkdir(parents=True, exist_ok=True)
            (ctx.run_dir / o / "done").write_text(step.id)

    for kind in list(S.EXECUTORS):
        monkeypatch.setitem(S.EXECUTORS, kind, write)
    return ran


def _status(result) -> dict[str, str]:
    return {r["step"]: r["status"] for r in result.steps}


def test_editing_a_named_file_in_place_reruns_the_score_step(tmp_path, fake_steps):
    (tmp_path / "thresholds.json").write_text('{"tau_dice": 0.3}')
    (tmp_path / "human").mkdir()
    (tmp_path / "human" / "metrics.json").write_text('{"a": 1}')
    data = {"name": "t", "datasets": {"phantom": {}}, "models": ["random"],
            "score": {"bootstrap": 0, "thresholds_from": "thresholds.json", "human_dir": "human"}}
    suite = S.parse_suite(data, tmp_path)
    out = tmp_path / "run"
    first = S.run_suite(suite, out=out, progress=False)
    assert set(_status(first).values()) == {"ran"}
    assert set(_status(S.run_suite(suite, out=out, progress=False)).values()) == {"skip"}  # unchanged: skipped

    (tmp_path / "thresholds.json").write_text('{"tau_dice": 0.7}')  # same name, same size, new content
    fake_steps.clear()
    again = S.run_suite(suite, out=out, progress=False)
    assert fake_steps == ["score/random"], _status(again)
    assert {r["step"]: r["reason"] for r in again.steps}["score/random"] == "inputs or options changed"
    assert set(_status(S.run_suite(suite, out=out, progress=False)).values()) == {"skip"}

    (tmp_path / "human" / "table.csv").write_text("x\n")  # a folder's files count too
    fake_steps.clear()
    S.run_suite(suite, out=out, progress=False)
    assert fake_steps == ["score/random"]
    (tmp_path / "human" / "table.csv").unlink()  # back to what was scored first: still a change of input
    fake_steps.clear()
    S.run_suite(suite, out=out, progress=False)
    assert fake_steps == ["score/random"]


def test_a_suite_without_path_keys_keeps_its_score_fingerprint(tmp_path, fake_steps):
    """The content digests are added only for the keys a suite sets: a suite without any fingerprints its score
    step as before (options and the outputs it reads), so an earlier run is not re-scored."""
    suite = S.parse_suite({"name": "t", "datasets": {"phantom": {}}, "models": ["random"],
                           "score": {"bootstrap": 0}}, tmp_path)
    out = tmp_path / "run"
    S.run_suite(suite, out=out, progress=False)

    record = json.loads((out / S.RUN_RECORD).read_text())
    steps = {s.id: s for s in S.plan_steps(suite)}
    score = steps["score/random"]
    done = record["steps"]
    inputs = {d: done[d]["output_digest"] for d in score.deps}  # the formula before path keys were digested
    before = S.fingerprint._hash({"kind": "score", "key": "random", "options": score.options, "inputs": inputs})
    assert done["score/random"]["fingerprint"] == before


def _chexlocalize(root):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "datasets"))
    try:
        from fixtures import write_chexlocalize
    finally:
        sys.path.pop(0)
    write_chexlocalize(root)


def test_a_file_a_reader_option_names_enters_the_prepare_fingerprint_by_content(tmp_path, fake_steps):
    """A reader reading a file outside its root (chexlocalize's demographics, declared by its given_roots hook):
    editing that file in place prepares again; a dataset without such a file keeps the plain root digest."""
    from xbench.suite.driver import _roots

    root, demo = tmp_path / "chex", tmp_path / "demographics.csv"
    _chexlocalize(root)
    demo.write_text("PATIENT,GENDER\npatient64541,Female\n")
    entry = {"root": str(root), "split": "val"}
    plain = S.parse_suite({"name": "t", "datasets": {"chexlocalize": entry}, "models": ["random"]}, tmp_path)
    assert _roots(plain) == {"chexlocalize": S.listing_digest(root)}  # as before: no other source
    suite = S.parse_suite({"name": "t", "datasets": {"chexlocalize": {**entry, "options": {"demographics": str(demo)}}},
                           "models": ["random"], "score": {"bootstrap": 0}}, tmp_path)
    assert _roots(suite)["chexlocalize"] == {"root": S.listing_digest(root),
                                             str(demo): hashlib.sha256(demo.read_bytes()).hexdigest()}
    out = tmp_path / "run"
    assert set(_status(S.run_suite(suite, out=out, progress=False)).values()) == {"ran"}
    assert set(_status(S.run_suite(suite, out=out, progress=False)).values()) == {"skip"}
    demo.write_text("PATIENT,GENDER\npatient64541,Male__\n")  # same name, same size, new content
    fake_steps.clear()
    S.run_suite(suite, out=out, progress=False)
    assert fake_steps[0] == "prepare/chexlocalize"
