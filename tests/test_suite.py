"""``xbench run SUITE.yaml``: suite parsing, content digests, the plan, skipping, resuming, --limit/--only/--dry-run."""
from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from xbench import suite as S
from xbench.schemas import catalog

ROOT = Path(__file__).resolve().parents[1]


def _phantom_suite(n_cases: int = 6, models=("random", "dog")) -> dict:
    return {
        "name": "t", "seed": 0,
        "prepare": {"grid": 32, "image_size": 64, "workers": 1, "cases_per_block": 4},
        "datasets": {"phantom": {"split": "test", "options": {"n_cases": n_cases, "seed": 1, "size": 64}}},
        "models": list(models),
        "extract": {"batch_size": 4, "device": "cpu", "workers": 0, "map_dtype": "float32", "cases_per_block": 4},
        "score": {"bootstrap": 0},
        "report": {"bootstrap": 0, "overlays": False},
    }


def _write(tmp_path: Path, data: dict, name: str = "suite.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def _invoke(*args):
    from click.testing import CliRunner

    return CliRunner().invoke(S.run, [str(a) for a in args], prog_name="xbench run")


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _mtimes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


# --------------------------------------------------------------------------------------- parsing
def test_every_problem_of_a_bad_suite_is_listed(tmp_path):
    data = {"nme": "x", "datasets": {"phantom": {"split": 3, "grid": 0}, "nosuch": {}, "siim_acr": {"split": "train"}},
            "models": ["dog", {"name": "dog", "model": "random"}, {"options": {}}, {"model": "clip", "methods": "maskclip", "bogus": 1}],
            "extract": {"batch_size": 0, "colour": "red"}, "score": {"bootstrap": -1}}
    with pytest.raises(S.SuiteError) as err:
        S.parse_suite(data, tmp_path, source="s.yaml")
    text = "\n".join(map(str, err.value.problems))
    for needle in ("unknown top-level key(s) nme", "datasets.nosuch: unknown dataset", "datasets.siim_acr.root: required",
                   "datasets.phantom.split: must be a string", "datasets.phantom.grid", "models[2]: needs `model:`",
                   "models[3]: unknown key(s) bogus", "two entries are named 'dog'", "extract: unknown key(s) colour",
                   "extract.batch_size: must be an integer between 1 and 4096",
                   "score.bootstrap: must be an integer between 0 and 1000000"):
        assert needle in text, needle
    assert all(str(line).startswith("s.yaml: ") for line in err.value.problems)


def test_bad_suite_exits_2_one_line_per_problem_no_traceback(tmp_path):
    res = _invoke(_write(tmp_path, {"datasets": {"nosuch": {}}, "models": []}), "--dry-run")
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 2 and all(ln.startswith("xbench run: error: ") for ln in lines)
    assert "Traceback" not in res.output
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("datasets: [unclosed\n")
    res = _invoke(bad_yaml)
    assert res.exit_code == 2 and "not valid YAML" in res.output and "Traceback" not in res.output


def test_paths_and_model_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("XB_DATA", str(tmp_path / "d"))
    cfg = tmp_path / "cfgs" / "mine.yaml"
    data = {"datasets": {"siim_acr": {"root": "$XB_DATA/siim"}, "chestx_det10": {"root": "det"}},
            "models": [{"model": "cfgs/mine.yaml"}, {"model": "clip", "methods": ["similarity", "gradcam"]},
                       {"name": "c2", "model": "clip", "methods": ["maskclip"], "extract": {"batch_size": 7}}],
            "extract": {"batch_size": 3}}
    s = S.parse_suite(data, tmp_path, source="x.yaml")
    roots = {d.key: d.root for d in s.datasets}
    assert roots == {"siim_acr": str(tmp_path / "d" / "siim"), "chestx_det10": str(tmp_path / "det")}
    assert [(m.key, m.model, m.options.get("method"), m.extract["batch_size"]) for m in s.models] == [
        ("mine", str(cfg), None, 3), ("clip-similarity", "clip", "similarity", 3), ("clip-gradcam", "clip", "gradcam", 3),
        ("c2", "clip", "maskclip", 7)]
    assert s.out == Path("x-out") and s.name == "x"


def test_plan_order_and_dependencies(tmp_path):
    data = {"datasets": {"phantom": {}, "chestx_det10": {"root": "r"}}, "models": ["dog", {"model": "clip", "methods": ["a", "b"]}]}
    steps = S.plan_steps(S.parse_suite(data, tmp_path))
    ids = [s.id for s in steps]
    assert ids == ["prepare/phantom", "prepare/chestx_det10", "extract/dog", "score/dog", "extract/clip-a", "score/clip-a",
                   "extract/clip-b", "score/clip-b", "report"]
    by = {s.id: s for s in steps}
    assert by["extract/clip-a"].deps == ["prepare/phantom", "prepare/chestx_det10"]
    assert by["score/dog"].deps[0] == "extract/dog" and set(by["report"].deps) >= {"score/dog", "score/clip-b"}
    for s in steps:  # every dependency runs earlier
        assert all(ids.index(d) < ids.index(s.id) for d in s.deps)
    assert S.select_steps(steps, ["score/clip-*"]) == {"score/clip-a", "score/clip-b"}
    assert S.select_steps(steps, ["prepare"]) == {"prepare/phantom", "prepare/chestx_det10"}
    with pytest.raises(S.SuiteError, match="matches no step"):
        S.select_steps(steps, ["extract/nope"])


def test_workers_and_threads_do_not_change_the_fingerprint_options(tmp_path):
    a = _phantom_suite()
    b = copy.deepcopy(a)
    b["extract"].update(workers=3, threads=2, nproc_per_node=1)
    b["prepare"]["workers"] = 2
    pa, pb = (S.plan_steps(S.parse_suite(d, tmp_path)) for d in (a, b))
    assert [s.options for s in pa] == [s.options for s in pb]
    c = copy.deepcopy(a)
    c["extract"]["precision"] = "bf16"
    pc = S.plan_steps(S.parse_suite(c, tmp_path))
    assert [s.options for s in pa if s.kind == "extract"] != [s.options for s in pc if s.kind == "extract"]


# --------------------------------------------------------------------------------------- digests
def test_tree_digest_is_sha256_of_paths_and_contents(tmp_path):
    d = tmp_path / "t"
    (d / "b").mkdir(parents=True)
    (d / "a.txt").write_bytes(b"hello")
    (d / "b" / "c.bin").write_bytes(bytes(range(256)) * 5000)
    expected = hashlib.sha256()
    for rel in ("a.txt", "b/c.bin"):  # sorted relative paths, independent computation
        expected.update(f"{rel}\0{hashlib.sha256((d / rel).read_bytes()).hexdigest()}\n".encode())
    assert S.tree_digest(d) == expected.hexdigest()
    assert S.tree_digest(d / "a.txt") == hashlib.sha256(b"hello").hexdigest()
    assert S.tree_digest(tmp_path / "missing") is None
    (d / "b" / "c.bin").write_bytes(b"changed")
    assert S.tree_digest(d) != expected.hexdigest()


def test_digest_cache_reads_unchanged_files_once(tmp_path, monkeypatch):
    f = tmp_path / "x"
    f.write_bytes(b"1234")
    calls = []
    real = S.fingerprint.file_sha256  # the digest cache's module (xbench/suite/fingerprint.py)
    monkeypatch.setattr(S.fingerprint, "file_sha256", lambda p: calls.append(p) or real(p))
    cache = S.DigestCache(tmp_path / "cache.json")
    first = cache.file(f)
    cache.save()
    again = S.DigestCache(tmp_path / "cache.json").file(f)  # reloaded from disk: no read
    assert first == again and len(calls) == 1
    f.write_bytes(b"12345")  # size (and mtime) change: read again
    assert S.DigestCache(tmp_path / "cache.json").file(f) == hashlib.sha256(b"12345").hexdigest()
    assert len(calls) == 2


def test_listing_digest_sees_added_and_resized_files_without_reading(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "a").write_bytes(b"1")
    d0 = S.listing_digest(tmp_path / "r")
    (tmp_path / "r" / "b").write_bytes(b"2")
    d1 = S.listing_digest(tmp_path / "r")
    os.truncate(tmp_path / "r" / "b", 0)
    assert len({d0, d1, S.listing_digest(tmp_path / "r")}) == 3
    assert S.listing_digest(tmp_path / "nope") is None


def test_extract_argv_round_trips_through_the_cli_parser(tmp_path):
    from xbench.extract.options import _model_options as _parse_options

    overrides = {"method": "maskclip", "weights": "/w/a b.pt", "preprocess": {"resize": "crop", "size": 224},
                 "options": {"trust_checkpoint": True, "map_size": [56, 56]}, "prompts": {"positive": "There is {}: yes"}}
    opts = {"model": "clip", "overrides": overrides, "datasets": ["phantom", "siim_acr"], "batch_size": 64,
            "device": "cuda", "precision": "bf16", "cases_per_block": None, "map_dtype": "float16", "workers": 8}
    (tmp_path / "images.zarr").mkdir()
    argv = S.extract_argv(opts, tmp_path / "images.zarr", Path("/o/s.zarr"))
    from xbench.extract.cli import main

    params = main.make_context("xbench-extract", list(argv)).params  # parsed as the command parses them
    assert _parse_options(params["overrides"]) == overrides
    with_none = S.extract_argv({**opts, "overrides": {**overrides, "seed": None}}, tmp_path / "images.zarr", Path("/o"))
    assert with_none[6:] == argv[6:]  # the None override is left out
    assert (params["model"], params["images"], params["out"]) == ("clip", str(tmp_path / "images.zarr"), "/o/s.zarr")
    assert (params["datasets"], params["precision"], params["batch_size"], params["workers"]) == ("phantom,siim_acr", "bf16", 64, 8)
    assert params["cases_per_block"] is None and params["device"] == "cuda" and params["quiet"]


# ------------------------------------------------------------------------------------ running it


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    """One uninterrupted run of a small phantom suite (the reference the other runs are compared with)."""
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("clean")
    suite = _write(tmp, _phantom_suite())
    res = _invoke(suite, "--out", tmp / "out", "--quiet")
    assert res.exit_code == 0, res.output
    return tmp / "out", res.output


def _digests(run_dir: Path) -> dict:
    rec = json.loads((run_dir / S.RUN_RECORD).read_text())
    return {k: v["output_digest"] for k, v in rec["steps"].items() if not k.startswith(("score", "report"))}


@pytest.mark.torch
def test_run_writes_everything_and_records_the_plan(clean_run):
    out, output = clean_run
    assert (out / "report" / "index.html").is_file()
    rec = json.loads((out / S.RUN_RECORD).read_text())
    assert [p["step"] for p in rec["plan"]] == ["prepare/phantom", "extract/random", "score/random", "extract/dog",
                                                "score/dog", "report"]
    assert all(v["status"] == "done" for v in rec["steps"].values()) and len(rec["steps"]) == 6
    assert {"python", "torch", "numpy", "zarr", "xbench"} <= set(rec["software"])
    assert rec["suite"]["raw"] == _phantom_suite() and (out / "suite.yaml").is_file()
    # the printed leaderboard ranks by pointing game, as metrics.json says
    pg = {m: json.loads((out / "scores" / m / "metrics.json").read_text())["overall"]["pointing_game"] for m in ("random", "dog")}
    lines = [ln for ln in output.splitlines() if ln.strip()[:1].isdigit()]
    ranked = [ln.split()[1] for ln in lines]
    assert ranked == sorted(pg, key=lambda m: -pg[m])
    assert f"{100 * pg[ranked[0]]:.2f}" in lines[0]


@pytest.mark.torch
def test_second_run_is_a_no_op_and_a_changed_output_runs_again(clean_run, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(clean_run[0], out)
    suite = _write(tmp_path, _phantom_suite())
    before = _mtimes(out)
    res = _invoke(suite, "--out", out, "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert {r["status"] for r in info["steps"]} == {"skip"}
    after = _mtimes(out)
    changed = {k for k in before if after.get(k) != before[k]}
    assert changed <= {S.RUN_RECORD, "suite.yaml", ".xbench-suite/digests.json"}, changed
    # damage one chunk of the dog submission by hand: its extraction runs again, and since it writes the
    # same bytes, scoring it and the report (whose inputs are unchanged) are skipped
    chunk = next(p for p in sorted((out / "submissions" / "dog.zarr").rglob("*")) if p.is_file() and "saliency" in p.parts and p.name != "zarr.json")
    good = chunk.read_bytes()
    chunk.write_bytes(good[::-1])
    info = json.loads(_invoke(suite, "--out", out, "--json").output)
    status = {r["step"]: r["status"] for r in info["steps"]}
    assert status == {"prepare/phantom": "skip", "extract/random": "skip", "score/random": "skip", "extract/dog": "ran",
                      "score/dog": "skip", "report": "skip"}
    assert chunk.read_bytes() == good
    # an option that changes the output re-runs that step and what depends on it
    data = _phantom_suite()
    data["score"]["bootstrap"] = 10
    info = json.loads(_invoke(_write(tmp_path, data), "--out", out, "--json").output)
    status = {r["step"]: r["status"] for r in info["steps"]}
    assert status["score/dog"] == status["score/random"] == "ran" and status["extract/dog"] == "skip"


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("crash_at", ["prepare", "extract", "score", "report"])
def test_resumes_after_a_crash_at_any_step(clean_run, tmp_path, monkeypatch, crash_at):
    out = tmp_path / "out"
    suite = S.parse_suite(_phantom_suite(), tmp_path)
    real = S.EXECUTORS[crash_at]

    def crash(step, ctx, resume):
        real(step, ctx, resume)  # the work is done (partly, for the stores) but never recorded
        raise KeyboardInterrupt

    monkeypatch.setitem(S.EXECUTORS, crash_at, crash)
    with pytest.raises(KeyboardInterrupt):
        S.run_suite(suite, out=out, progress=False)
    monkeypatch.setitem(S.EXECUTORS, crash_at, real)
    rec = json.loads((out / S.RUN_RECORD).read_text())
    started = [k for k, v in rec["steps"].items() if v["status"] == "started"]
    assert len(started) == 1 and started[0].startswith(crash_at)
    result = S.run_suite(suite, out=out, progress=False)
    statuses = {r["step"]: r["status"] for r in result.steps}
    assert statuses[started[0]] == "resumed"
    assert _digests(out) == _digests(clean_run[0])


@pytest.mark.torch
@pytest.mark.slow
def test_resumes_after_sigkill_inside_extraction(clean_run, tmp_path):
    out = tmp_path / "out"
    suite = _write(tmp_path, _phantom_suite())
    env = {**os.environ, "XBENCH_EXTRACT_KILL_AFTER_BLOCKS": "1"}
    code = "import sys; from xbench.suite import run; run(sys.argv[1:])"
    res = subprocess.run([sys.executable, "-c", code, str(suite), "--out", str(out), "--quiet"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == -9, res.stderr
    rec = json.loads((out / S.RUN_RECORD).read_text())
    assert rec["steps"]["extract/random"]["status"] == "started"
    res = _invoke(suite, "--out", out, "--json")
    assert res.exit_code == 0, res.output
    status = {r["step"]: r["status"] for r in json.loads(res.output)["steps"]}
    assert status["extract/random"] == "resumed" and status["prepare/phantom"] == "skip"
    assert _files(out / "submissions") == _files(clean_run[0] / "submissions")


@pytest.mark.torch
def test_limit_only_and_dry_run(tmp_path):
    pytest.importorskip("torch")
    suite = _write(tmp_path, _phantom_suite(n_cases=12))
    out = tmp_path / "out"
    res = _invoke(suite, "--out", out, "--dry-run", "--limit", "3")
    assert res.exit_code == 0, res.output
    assert "phantom (test): 3 case(s) listed" in res.output and "prepare/phantom" in res.output
    assert not out.exists()  # a dry run writes nothing
    res = _invoke(suite, "--out", out, "--limit", "3", "--only", "score/dog")
    assert res.exit_code == 2 and "needs extract/dog" in res.output and "Traceback" not in res.output
    res = _invoke(suite, "--out", out, "--limit", "3", "--only", "prepare", "--json")
    assert res.exit_code == 0, res.output
    status = {r["step"]: r["status"] for r in json.loads(res.output)["steps"]}
    assert status["prepare/phantom"] == "ran" and status["extract/dog"] == "not selected"
    from xbench.schemas import read_images

    images = read_images(out / "limit-3" / "data" / "images.zarr").datasets["phantom"]
    assert len(images.case_id) == 3
    res = _invoke(suite, "--out", out, "--limit", "3", "--only", "extract/dog", "--only", "score/dog", "--json")
    status = {r["step"]: r["status"] for r in json.loads(res.output)["steps"]}
    assert status == {"prepare/phantom": "not selected", "extract/random": "not selected", "score/random": "not selected",
                      "extract/dog": "ran", "score/dog": "ran", "report": "not selected"}
    res = _invoke(suite, "--out", out, "--limit", "3", "--dry-run", "--json")
    status = {r["step"]: r["status"] for r in json.loads(res.output)["steps"]}
    assert status == {"prepare/phantom": "skip", "extract/random": "run", "score/random": "wait",
                      "extract/dog": "skip", "score/dog": "skip", "report": "wait"}
    assert not (out / "report").exists() and not (out / "limit-3" / "report").exists()


# ------------------------------------------------------------------------------- shipped suites
def test_demo_suite_is_what_xbench_demo_runs():
    from xbench.demo import DEMO_MODELS, suites_dir

    assert suites_dir().resolve() == (ROOT / "suites").resolve()
    data = yaml.safe_load((ROOT / "suites" / "demo.yaml").read_text())
    assert tuple(data["models"]) == DEMO_MODELS and list(data["datasets"]) == ["phantom"]
    S.parse_suite(data, ROOT / "suites")


def test_gaze_suite_prepares_the_phantom_with_gaze():
    """suites/gaze.yaml (docs/how-to/gaze.md, "The suite"; the docs walk runs it) asks the phantom for its simulated gaze,
    so its scores carry the gaze section."""
    data = yaml.safe_load((ROOT / "suites" / "gaze.yaml").read_text())
    assert data["datasets"]["phantom"]["options"]["gaze"] is True
    S.parse_suite(data, ROOT / "suites")


def test_generative_suite_scores_the_generative_models_beside_the_papers(monkeypatch):
    """suites/generative.yaml (issue 45 item 6): the paper suite's seven datasets and models unchanged, MS-CXR's
    phrase rows, and the decoder VLMs by their registered names with the four answer-position map methods."""
    paper = yaml.safe_load((ROOT / "suites" / "paper.yaml").read_text())
    gen = yaml.safe_load((ROOT / "suites" / "generative.yaml").read_text())
    for key in ("prepare", "extract", "score", "report"):
        assert gen[key] == paper[key], key
    assert {k: v for k, v in gen["datasets"].items() if k != "ms_cxr"} == paper["datasets"]
    assert gen["datasets"]["ms_cxr"]["root"] == "$XBENCH_DATA/ms_cxr"
    assert gen["models"][:len(paper["models"])] == paper["models"]
    added = gen["models"][len(paper["models"]):]
    assert [m["model"] for m in added] == ["llava-rad", "medgemma", "maira-2", "chexagent"]
    assert all(m["methods"] == ["attention", "rollout", "chefer", "gradcam"] for m in added)
    suite = S.parse_suite(gen, ROOT / "suites")
    assert len(suite.models) == 11 + 4 * 4 and len(suite.datasets) == 8
    from xbench.extract.models import MODELS

    # every paper model is registered; the decoder VLMs come with extract/models/decoder/ (issue 45 item 1)
    unknown = {m["model"] for m in gen["models"]} - set(MODELS.names())
    assert not unknown, unknown


def test_demo_gaps_have_resamples_enough_for_holm():
    """The demo page's gaps (neighbours x GAP_METRICS tests) can pass the Holm adjustment: m/(B+1) < 0.05 with room
    (contract "Significant"), both in the shipped suite and in what `xbench demo` runs."""
    from xbench.demo import DEMO_MODELS, GAP_RESAMPLES
    from xbench.score.report import GAP_METRICS

    m = (len(DEMO_MODELS) - 1) * len(GAP_METRICS)
    data = yaml.safe_load((ROOT / "suites" / "demo.yaml").read_text())
    for b in (data["report"]["bootstrap"], GAP_RESAMPLES):
        assert m / (b + 1) < 0.05 / 2, (m, b)  # a test at the floor passes, with a factor 2 to spare


def _paper_roots(base: Path, suite: str = "paper") -> tuple[Path, Path]:
    """Every dataset of ``suites/<suite>.yaml`` laid out as its data card says (the reader fixtures), and empty
    weight files and folders where the suite names them."""
    sys.path.insert(0, str(ROOT / "tests" / "datasets"))
    try:
        import fixtures as F
        from test_reader_ms_cxr import write_ms_cxr
    finally:
        sys.path.pop(0)
    data = base / "data"
    writers = {"rsna_pneumonia": F.write_rsna, "siim_acr": F.write_siim, "covid_rural": F.write_covid,
               "chestx_det10": F.write_det10, "chexlocalize": F.write_chexlocalize, "chestxray14": F.write_nih,
               "vindr_cxr": F.write_vindr, "ms_cxr": write_ms_cxr}
    spec = yaml.safe_load((ROOT / "suites" / f"{suite}.yaml").read_text())
    for key in spec["datasets"]:
        writers[key](data / key)
    # the CheXlocalize fixture writes the val split; the paper suite reads test, laid out the same way
    cx = data / "chexlocalize"
    if cx.exists():
        (cx / "CheXpert" / "val_labels.csv").rename(cx / "CheXpert" / "test_labels.csv")
        (cx / "CheXpert" / "val").rename(cx / "CheXpert" / "test")
        (cx / "CheXlocalize" / "gt_segmentations_val.json").rename(cx / "CheXlocalize" / "gt_segmentations_test.json")
    weights = base / "weights"
    for m in spec["models"]:
        for key, value in m["options"].items():
            if isinstance(value, str) and "$XBENCH_WEIGHTS" in value:
                p = Path(value.removeprefix("local-dir:").replace("$XBENCH_WEIGHTS", str(weights)))
                if p.suffix:
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.touch()
                else:
                    p.mkdir(parents=True, exist_ok=True)
    return data, weights


def test_paper_suite_validates_against_roots_laid_out_as_the_data_cards_say(tmp_path, monkeypatch):
    pytest.importorskip("pydicom")
    data, weights = _paper_roots(tmp_path)
    monkeypatch.setenv("XBENCH_DATA", str(data))
    monkeypatch.setenv("XBENCH_WEIGHTS", str(weights))
    monkeypatch.chdir(tmp_path)
    res = _invoke(ROOT / "suites" / "paper.yaml", "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert info["problems"] == []
    assert set(info["datasets"]) == set(catalog.paper_keys())  # the paper suite prepares the paper's seven sets
    assert all(d["cases"] > 0 for d in info["datasets"].values())
    ids = [r["step"] for r in info["steps"]]
    assert len(ids) == 7 + 2 * 11 + 1 and ids[-1] == "report"
    assert not (tmp_path / "xbench-paper-out").exists()
    # a missing weight file and a missing root are each one line
    (weights / "kad" / "KAD_512.pt").unlink()
    res = _invoke(ROOT / "suites" / "paper.yaml", "--dry-run")
    assert res.exit_code == 2 and "models.kad.weights" in res.output and "KAD_512.pt: not found" in res.output
    import shutil

    shutil.rmtree(data / "vindr_cxr")
    res = _invoke(ROOT / "suites" / "paper.yaml", "--dry-run")
    assert res.exit_code == 2 and "datasets.vindr_cxr.root" in res.output and "Traceback" not in res.output


def test_reference_suite_validates_against_roots_laid_out_as_the_data_cards_say(tmp_path, monkeypatch):
    """suites/reference.yaml (MS-CXR phrases + CheXlocalize; BioViL, BioViL-T, CheXzero, MedCLIP, GLoRIA) plans
    every step against roots laid out as the data cards say, and names a missing weight folder in one line."""
    data, weights = _paper_roots(tmp_path, "reference")
    monkeypatch.setenv("XBENCH_DATA", str(data))
    monkeypatch.setenv("XBENCH_WEIGHTS", str(weights))
    monkeypatch.chdir(tmp_path)
    res = _invoke(ROOT / "suites" / "reference.yaml", "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert info["problems"] == []
    assert set(info["datasets"]) == {"ms_cxr", "chexlocalize"} and all(d["cases"] > 0 for d in info["datasets"].values())
    ids = [r["step"] for r in info["steps"]]
    # biovil and biovil_t x (similarity, gradcam), chexzero and medclip x 3 methods, gloria's own map: 11 keys
    assert len(ids) == 2 + 2 * 11 + 1 and ids[-1] == "report"
    assert {"extract/biovil-similarity", "extract/medclip-gradcam", "extract/gloria"} <= set(ids)
    assert not (tmp_path / "xbench-reference-out").exists()
    shutil.rmtree(weights / "BiomedVLP-BioViL-T")
    res = _invoke(ROOT / "suites" / "reference.yaml", "--dry-run")
    assert res.exit_code == 2 and "models.biovil_t-similarity.weights: " in res.output
    assert "BiomedVLP-BioViL-T: not found" in res.output and "models.biovil-similarity" not in res.output


def test_editing_a_model_config_or_its_weights_reruns_its_extraction(tmp_path):
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"v1")
    cfg = tmp_path / "m.yaml"
    cfg.write_text(f"adapter: clip\nweights: {weights}\n")
    cache = S.DigestCache()
    d0 = S.model_digest(str(cfg), {}, cache)
    assert d0["files"] == {"weights": hashlib.sha256(b"v1").hexdigest()} and d0["config"]["adapter"] == "clip"
    cfg.write_text(f"adapter: clip\nweights: {weights}\nmethod: maskclip\n")
    d1 = S.model_digest(str(cfg), {}, cache)
    weights.write_bytes(b"v2-longer")
    d2 = S.model_digest(str(cfg), {}, cache)
    assert len({json.dumps(d, sort_keys=True) for d in (d0, d1, d2)}) == 3
    assert S.model_digest(str(cfg), {"method": "gradcam"}, cache)["config"]["method"] == "gradcam"
    assert "error" in S.model_digest(str(tmp_path / "missing.yaml"), {}, cache)
    assert S.model_digest("clip", {"weights": "openai"}, cache)["files"] == {}  # a tag, not a file


@pytest.mark.torch
@pytest.mark.slow
def test_two_ranks_through_torchrun_write_the_same_submission(clean_run, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data = _phantom_suite()
    data["models"] = ["dog"]
    data["extract"]["nproc_per_node"] = 2  # gloo on the CPU: the path a multi-GPU machine takes with NCCL
    out = tmp_path / "out"
    result = S.run_suite(S.parse_suite(data, tmp_path), out=out, progress=False, only=["prepare", "extract"])
    assert {r["step"]: r["status"] for r in result.steps}["extract/dog"] == "ran"
    assert _files(out / "submissions" / "dog.zarr") == _files(clean_run[0] / "submissions" / "dog.zarr")


def test_a_second_run_on_the_same_folder_is_refused_while_the_first_holds_it(tmp_path):
    import fcntl

    out = tmp_path / "out"
    (out / S.WORK_DIR).mkdir(parents=True)
    with open(out / S.WORK_DIR / "lock", "a+") as held:  # as a running `xbench run` holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        res = _invoke(_write(tmp_path, _phantom_suite()), "--out", out, "--only", "prepare")
        assert res.exit_code == 2 and "another `xbench run` is writing here" in res.output
        assert not (out / S.RUN_RECORD).exists()
    lock = S._lock(out)  # released: taken at once
    lock.close()


def test_a_folder_of_the_users_is_refused_as_a_run_folder(tmp_path):
    """Issue 44, class 5: a run replaces data/, submissions/, scores/, report/ and suite.yaml in its folder; a
    folder no run wrote (no run record, no work folder) is refused with one line and nothing in it is touched."""
    out = tmp_path / "mine"
    (out / "scores" / "dog").mkdir(parents=True)
    (out / "scores" / "dog" / "notes.txt").write_text("mine")
    (out / "suite.yaml").write_text("my own notes")
    before = _files(out)
    res = _invoke(_write(tmp_path, _phantom_suite()), "--out", out, "--only", "prepare")
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "files no xbench run wrote (scores, suite.yaml;" in lines[0], res.output
    assert _files(out) == before and "Traceback" not in res.output


# ------------------------------------------------------------------ every problem at once, hostile suites
_MEASURE = """
import json, os, subprocess, sys, time
argv, err_path = json.loads(sys.argv[1]), sys.argv[2]
with open(os.devnull, "wb") as null, open(err_path, "wb") as err:
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=null, stderr=err, stdin=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), time.monotonic() - t0, usage.ru_maxrss / 1024]))
"""


def _measured(argv: list, timeout: float = 60) -> tuple[int, str, float, float]:
    """(exit code, stderr, seconds, peak resident MiB) of one command in its own process.

    Started by a small driver, not by pytest: a child's peak resident size counts the pages of the process
    it was forked from until it execs, and a test worker that has imported torch holds a gigabyte or more."""
    import tempfile

    exe = Path(sys.executable).with_name(str(argv[0]))
    with tempfile.TemporaryDirectory() as tmp:
        err_path = Path(tmp) / "stderr"
        out = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps([str(exe), *map(str, argv[1:])]),
                              str(err_path)], capture_output=True, text=True, timeout=timeout + 60)
        assert out.returncode == 0, out.stderr
        rc, seconds, rss = json.loads(out.stdout)
        return rc, err_path.read_text(), seconds, rss


def test_paper_dry_run_in_an_empty_environment_names_the_unset_variables(tmp_path, monkeypatch):
    monkeypatch.delenv("XBENCH_DATA", raising=False)
    monkeypatch.delenv("XBENCH_WEIGHTS", raising=False)
    monkeypatch.chdir(tmp_path)
    res = _invoke(ROOT / "suites" / "paper.yaml", "--dry-run")
    assert res.exit_code == 2 and "Traceback" not in res.output
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("xbench run: error: ")]
    assert len(errors) == 2, errors  # one line per variable, naming where it is used
    assert "$XBENCH_DATA is not set (used by datasets.rsna_pneumonia.root" in errors[0]
    assert "$XBENCH_WEIGHTS is not set (used by models.clip-similarity.weights" in errors[1]
    assert "export XBENCH_WEIGHTS=" in errors[1]
    assert "no such folder" not in res.stderr and "not found" not in res.stderr
    assert not (tmp_path / "xbench-paper-out").exists()


def test_paper_dry_run_checks_the_weights_while_the_roots_are_missing(tmp_path, monkeypatch):
    """The roots do not exist yet and some weights are missing: one dry run lists both, each once."""
    _, weights = _paper_roots(tmp_path)
    (weights / "kad" / "KAD_512.pt").unlink()
    shutil.rmtree(weights / "Med-KEBERT")
    monkeypatch.setenv("XBENCH_DATA", str(tmp_path / "not-there"))
    monkeypatch.setenv("XBENCH_WEIGHTS", str(weights))
    monkeypatch.chdir(tmp_path)
    res = _invoke(ROOT / "suites" / "paper.yaml", "--dry-run")
    assert res.exit_code == 2 and "Traceback" not in res.output
    errors = [ln.removeprefix("xbench run: error: ") for ln in res.stderr.splitlines()]
    roots = [ln for ln in errors if ".root: " in ln]
    assert len(roots) == 7 and all("no such folder" in ln and "$" not in ln for ln in roots)
    assert f"models.kad.weights: {weights}/kad/KAD_512.pt: not found" in errors
    assert f"models.kad.text_encoder: {weights}/Med-KEBERT: not found" in errors
    assert f"models.devide.text_encoder: {weights}/Med-KEBERT: not found" in errors
    assert len(errors) == 7 + 3
    # a real run refuses on the same variables and roots before any step, and writes nothing
    monkeypatch.delenv("XBENCH_DATA")
    res = _invoke(ROOT / "suites" / "paper.yaml", "--only", "prepare")
    assert res.exit_code == 2 and "$XBENCH_DATA is not set" in res.stderr and "XBENCH_WEIGHTS" not in res.stderr
    assert not (tmp_path / "xbench-paper-out").exists()


def _alias_bomb(levels: int = 9) -> str:
    text = 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for i in range(1, levels):
        text += f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n"
    return text


@pytest.mark.parametrize("kind", ["alias bomb", "duplicate key", "deep", "not utf-8", "fifo", "huge integer",
                                  "model config bomb"])
def test_hostile_suite_is_refused_in_one_line_within_budget(tmp_path, kind):
    """`xbench run --dry-run` on a hostile suite (or a hostile model config it names): exit 2, one line,
    well within 60 s and 1 GiB (the alias bomb used to take 2.1 GiB before the value was turned to text)."""
    suite = tmp_path / "suite.yaml"
    good = "datasets: {phantom: {options: {n_cases: 2}}}\nmodels: [dog]\n"
    expected = {"alias bomb": "aliases are not allowed", "duplicate key": "is given twice",
                "deep": "nests more than", "not utf-8": "is not UTF-8", "fifo": "not a regular file",
                "huge integer": "has an integer of", "model config bomb": "aliases are not allowed"}[kind]
    if kind == "alias bomb":
        suite.write_text(_alias_bomb() + good + "title: *a8\n")
    elif kind == "duplicate key":
        suite.write_text(good + "models: [random]\n")
    elif kind == "deep":
        suite.write_text(good + "title: " + "[" * 5000 + "]" * 5000 + "\n")
    elif kind == "not utf-8":
        suite.write_bytes(good.encode() + b"title: caf\xe9\n")
    elif kind == "fifo":
        os.mkfifo(suite)
    elif kind == "huge integer":
        suite.write_text(good + "seed: " + "9" * 5000 + "\n")
    else:
        (tmp_path / "m.yaml").write_text(_alias_bomb() + "adapter: dog\nname: *a8\n")
        suite.write_text("datasets: {phantom: {options: {n_cases: 2}}}\nmodels: [{model: m.yaml}]\n")
    rc, err, seconds, rss = _measured(["xbench", "run", suite, "--dry-run", "--out", tmp_path / "out",
                                       "--max-memory", "1GiB", "--timeout", "60"])
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and expected in lines[0] and lines[0].startswith("xbench run: error: "), lines
    assert seconds < 60 and rss < 1024, (seconds, rss)
    assert not (tmp_path / "out").exists()


def test_run_budget_flags_bound_the_checks_and_are_documented(tmp_path):
    suite = _write(tmp_path, _phantom_suite())
    res = _invoke(suite, "--dry-run", "--max-memory", "lots")
    assert res.exit_code == 2 and "--max-memory" in res.stderr
    res = _invoke("--help")
    assert "--max-memory" in res.output and "--timeout" in res.output and "bound the checks" in res.output
    from xbench.schemas import budget

    try:
        res = _invoke(suite, "--dry-run", "--out", tmp_path / "o", "--max-memory", "1GiB", "--timeout", "60")
        assert res.exit_code == 0, res.output
        assert budget.limits().max_memory == budget.parse_size("1GiB")  # a dry run is checks only
    finally:
        budget.set_limits(budget.Limits())


def test_unknown_reader_option_in_a_suite_is_said_in_the_suites_terms(tmp_path):
    data = _phantom_suite()
    data["datasets"]["phantom"]["options"]["sise"] = 64
    data["datasets"]["phantom"]["split"] = "tset"
    res = _invoke(_write(tmp_path, data), "--dry-run", "--out", tmp_path / "o")
    assert res.exit_code == 2
    assert "datasets.phantom.split: unknown split 'tset'; choose one of test, val" in res.stderr
    data["datasets"]["phantom"]["split"] = "test"
    res = _invoke(_write(tmp_path, data), "--dry-run", "--out", tmp_path / "o")
    assert "datasets.phantom.options: unknown option 'sise' for phantom; did you mean 'size'?" in res.stderr
    assert "__init__" not in res.stderr and "keyword argument" not in res.stderr


def test_run_timeout_stops_the_checks_with_exit_2(tmp_path):
    suite = _write(tmp_path, _phantom_suite())
    rc, err, seconds, _ = _measured(["xbench", "run", suite, "--dry-run", "--out", tmp_path / "o", "--timeout", "0.05"])
    assert rc == 2 and "the time budget of 0.05 s ran out (--timeout)" in err and "Traceback" not in err, err
    assert seconds < 30 and not (tmp_path / "o").exists()
