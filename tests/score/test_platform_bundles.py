"""What the platforms read: grand-challenge's per-case and aggregates layout (with the error key its
score_error_jsonpath points at) and the Codabench competition bundle, checked against Codabench's documented
version-2 format and run as the platform runs its scoring program."""
from __future__ import annotations

import datetime as dt
import io
import json
import math
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from score_stores import make_gt, make_submission
from xbench.package import check_competition, competition_columns, package
from xbench.score.metrics import registry as R
from xbench.score.cli import main as score_main

DATES = ["--validation-start", "2027-01-04", "--test-start", "2027-03-01 12:00:00"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two ground truths (validation, test: different cases) and a valid submission for each."""
    d = tmp_path_factory.mktemp("bundles")
    val, test = make_gt(d / "val.zarr", seed=21), make_gt(d / "test.zarr", seed=22)
    make_submission(d / "sub_val.zarr", val, seed=23)
    make_submission(d / "sub_test.zarr", test, seed=24)
    return d


@pytest.fixture(scope="module")
def gc_result(stores):
    """One submission scored with --format grand-challenge (30 resamples)."""
    out = stores / "gc"
    with pytest.raises(SystemExit) as done:
        score_main([str(stores / "sub_val.zarr"), "--gt", str(stores / "val.zarr"), "--out", str(out),
                    "--format", "grand-challenge", "--format", "codabench", "--bootstrap", "30", "--quiet"])
    assert done.value.code in (0, None)
    return out


def test_grand_challenge_aggregates_carry_the_interval_and_its_half_width(gc_result):
    m = json.loads((gc_result / "metrics.json").read_text())
    agg = m["aggregates"]
    checked = 0
    for key, (lo, hi) in m["ci95"].items():
        if lo is None or hi is None or m["overall"].get(key) is None:
            continue
        assert agg[key] == m["overall"][key]
        assert (agg[f"{key}_ci_low"], agg[f"{key}_ci_high"]) == (lo, hi)
        assert math.isclose(agg[f"{key}_error"], (hi - lo) / 2)
        checked += 1
    for d, ds in m["datasets"].items():
        lo, hi = ds["ci95"]["pointing_game"]
        assert math.isclose(agg[f"{d}_pointing_game_error"], (hi - lo) / 2)
    assert checked >= 5 and "pointing_game_error" in agg
    assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in agg.values())
    # scores.json (Codabench) holds the same flat keys
    assert json.loads((gc_result / "scores.json").read_text()) == agg


def test_grand_challenge_cases_are_the_pairs_table_rows(gc_result):
    pd = pytest.importorskip("pandas")
    cases = json.loads((gc_result / "metrics.json").read_text())["case"]
    pairs = pd.read_parquet(gc_result / "pairs.parquet")
    assert sum(len(v) for v in cases.values()) == len(pairs)
    for row in pairs.itertuples(index=False):
        entry = cases[f"{row.dataset}/{row.case_id}"][getattr(row, "_2")]  # the "class" column
        assert entry["label"] == row.label and math.isclose(entry["probability"], row.probability)
        if row.has_region:
            assert entry["hit"] == bool(row.hit)
            for key in R.pair_columns():
                value = getattr(row, key)
                assert (key not in entry) if math.isnan(value) else math.isclose(entry[key], value), key
        else:
            assert "hit" not in entry and "dice_best" not in entry


def _bundle(stores, tmp_path, *extra) -> tuple[Path, object]:
    out = tmp_path / "competition.zip"
    res = CliRunner().invoke(package, ["codabench-competition", "--gt-validation", str(stores / "val.zarr"),
                                       "--gt-test", str(stores / "test.zarr"), "--docker-image",
                                       "docker.io/team/xbench-codabench:0.1.0", "--out", str(out), *DATES, *extra])
    return out, res


def test_competition_bundle_follows_codabenchs_format(stores, tmp_path):
    yaml = pytest.importorskip("yaml")  # Codabench reads the file with PyYAML's safe loader
    out, res = _bundle(stores, tmp_path)
    assert res.exit_code == 0, res.output
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
        spec = yaml.safe_load(zf.read("competition.yaml"))
        refs = {t["name"]: zipfile.ZipFile(zf.open(t["reference_data"])).namelist() for t in spec["tasks"]}
    assert check_competition(spec, names) == []
    assert spec["version"] == 2 and spec["docker_image"] == "docker.io/team/xbench-codabench:0.1.0"
    val, test = spec["phases"]
    assert (val["name"], test["name"]) == ("Validation", "Test")
    assert val["start"] == dt.datetime(2027, 1, 4) and val["end"] == test["start"] == dt.datetime(2027, 3, 1, 12)
    tasks = {t["index"]: t for t in spec["tasks"]}
    assert tasks[val["tasks"][0]]["reference_data"] != tasks[test["tasks"][0]]["reference_data"]
    assert refs == {"Validation": ["gt.zarr.zip"], "Test": ["gt.zarr.zip"]}
    cols = spec["leaderboards"][0]["columns"]
    assert cols[0]["key"] == "pointing_game" and [c["index"] for c in cols] == list(range(len(cols)))
    keys = {c["key"] for c in cols}
    for key in R.overall_keys():  # every registered metric, with its interval
        assert {key, f"{key}_ci_low", f"{key}_ci_high"} <= keys
    assert {"phantom_auroc", "chexlocalize_dice_best"} <= keys


def test_competition_scoring_program_fills_the_leaderboard(stores, tmp_path):
    out, res = _bundle(stores, tmp_path, "--bootstrap", "20")
    assert res.exit_code == 0, res.output
    with zipfile.ZipFile(out) as zf:
        zf.extractall(tmp_path / "bundle")
    program, inp, output = tmp_path / "program", tmp_path / "input", tmp_path / "output"
    zipfile.ZipFile(tmp_path / "bundle" / "scoring_program.zip").extractall(program)
    zipfile.ZipFile(tmp_path / "bundle" / "reference_data_test.zip").extractall(inp / "ref")
    shutil.copytree(stores / "sub_test.zarr", inp / "res" / "team.zarr")
    output.mkdir()
    assert "bootstrap=20" in (program / "score.py").read_text()
    env = {k: v for k, v in os.environ.items() if k != "XBENCH_BOOTSTRAP"}
    done = subprocess.run([sys.executable, str(program / "score.py"), str(inp), str(output)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    scores = json.loads((output / "scores.json").read_text())
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["xbench"]["bootstrap"]["n_resamples"] == 20  # the organiser's count, packaged in score.py
    columns = competition_columns(sorted(metrics["datasets"]))
    defined = [c["key"] for c in columns if c["key"] in scores]
    # every column whose metric is defined on this ground truth gets its number; the primary and its interval
    assert {"pointing_game", "pointing_game_ci_low", "pointing_game_ci_high", "auroc"} <= set(defined)
    assert scores["pointing_game"] == metrics["overall"]["pointing_game"]
    assert [scores["pointing_game_ci_low"], scores["pointing_game_ci_high"]] == metrics["ci95"]["pointing_game"]
    assert all(c["key"] in scores for c in columns if c["key"].endswith(("_ci_low", "_ci_high")) and
               c["key"].rsplit("_ci_", 1)[0] in scores)


@pytest.mark.parametrize("argv,message", [
    (["--test-start", "2027-01-01"], "--test-start: must be after --validation-start"),
    (["--test-start", "March"], "expected a date"),
    (["--test-end", "2027-02-01"], "--test-end: must be after --test-start"),
])
def test_competition_refuses_bad_dates(stores, tmp_path, argv, message):
    out = tmp_path / "competition.zip"
    res = CliRunner().invoke(package, ["codabench-competition", "--gt-validation", str(stores / "val.zarr"),
                                       "--gt-test", str(stores / "test.zarr"), "--docker-image", "a/b:1",
                                       "--out", str(out), *DATES, *argv])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_competition_refuses_one_ground_truth_for_both_phases_and_an_out_inside_it(stores, tmp_path):
    res = CliRunner().invoke(package, ["codabench-competition", "--gt-validation", str(stores / "val.zarr"),
                                       "--gt-test", str(stores / "val.zarr"), "--docker-image", "a/b:1",
                                       "--out", str(tmp_path / "c.zip"), *DATES])
    assert res.exit_code == 2 and "the test phase needs its own" in res.output and not (tmp_path / "c.zip").exists()
    before = sorted(p.name for p in (stores / "test.zarr").rglob("*"))
    from xbench import cli  # the umbrella prints every problem, one per line

    res = CliRunner().invoke(cli.main, ["package", "codabench-competition", "--gt-validation", str(stores / "val.zarr"),
                                       "--gt-test", str(stores / "test.zarr"), "--docker-image", "a b",
                                       "--out", str(stores / "test.zarr" / "c.zip"), *DATES])
    assert res.exit_code == 2 and "inside the ground truth --gt-test" in res.output and "--docker-image" in res.output
    assert sorted(p.name for p in (stores / "test.zarr").rglob("*")) == before


def test_the_format_check_finds_what_codabench_refuses():
    start = dt.datetime(2027, 1, 1)
    spec = {"version": 2, "title": "t", "image": "logo.png", "terms": "terms.md", "pages": [{"title": "p", "file": "p.md"}],
            "tasks": [{"index": 0, "name": "a", "scoring_program": "s.zip"}, {"index": 0, "name": "b"}],
            "phases": [{"name": "A", "start": start, "tasks": [0]},
                       {"name": "B", "start": start - dt.timedelta(days=1), "tasks": [3]}],
            "leaderboards": [{"title": "R", "key": "main", "columns": [
                {"title": "x", "key": "x", "index": 0, "sorting": "up"},
                {"title": "y", "key": "x", "index": 0, "precision": 1.5, "hidden": "no"}]}]}
    problems = check_competition(spec, {"logo.png", "s.zip"})
    for text in ("terms 'terms.md' is not in the bundle", "pages[0]: 'p.md' is not in the bundle",
                 "tasks[1]: duplicate index 0", "tasks[1]: missing 'scoring_program'", "phases[1]: tasks [3]",
                 "phases[0]: needs an end", "sorting must be asc or desc", "precision must be an integer",
                 "hidden must be true or false", "column indexes must be unique", "column keys must be unique"):
        assert any(text in p for p in problems), (text, problems)
    spec["phases"][0]["end"] = start + dt.timedelta(days=2)
    assert any("phases[1]: starts before phases[0] ends" in p for p in check_competition(spec, set()))


def test_the_yaml_writer_round_trips_any_title_through_pyyaml():
    yaml = pytest.importorskip("yaml")
    from xbench.package import to_yaml

    title = 'x: "y"\n- z #c \\ \t ünï {a: [b]} &anchor *alias !!python/object'
    spec = {"title": title, "n": None, "on": True, "p": 4, "f": 0.5, "tiny": 1e-05, "when": dt.datetime(2027, 1, 2, 3, 4, 5),
            "cols": [{"key": "a", "hidden": False, "tasks": [0, 1]}, {"key": "b", "empty": [], "nested": {}}]}
    assert yaml.safe_load(to_yaml(spec)) == spec


def test_competition_refuses_a_validation_start_whose_default_test_phase_overflows(stores, tmp_path):
    out = tmp_path / "competition.zip"
    res = CliRunner().invoke(package, ["codabench-competition", "--gt-validation", str(stores / "val.zarr"),
                                       "--gt-test", str(stores / "test.zarr"), "--docker-image", "a/b:1",
                                       "--out", str(out), "--validation-start", "9999-12-31"])
    assert res.exit_code == 2 and "past the year 9999" in res.output, res.output
    assert "Traceback" not in res.output and "OverflowError" not in res.output and not out.exists()
    res = CliRunner().invoke(package, ["codabench-competition", "--gt-validation", str(stores / "val.zarr"),
                                       "--gt-test", str(stores / "test.zarr"), "--docker-image", "a/b:1",
                                       "--out", str(out), "--validation-start", "9999-10-01", "--test-start",
                                       "9999-12-31 23:59:59"])
    assert res.exit_code == 0, res.output  # the last dates there are, given: fine


@pytest.mark.parametrize("title", ["delete \x7f here", "non-character \ufffe", "\ufeffbom, \x85 nel, \u2028 ls \u2029 ps",
                                   "c1 \x9b and \x00 nul and \x1b esc", "astral \U0001f600 and \U0010ffff"])
def test_competition_yaml_carries_any_title_pyyaml_can_read(stores, tmp_path, title):
    yaml = pytest.importorskip("yaml")
    out, res = _bundle(stores, tmp_path, "--title", title)
    assert res.exit_code == 0, res.output
    with zipfile.ZipFile(out) as zf:
        spec = yaml.safe_load(zf.read("competition.yaml"))  # refused before: "special characters are not allowed"
    assert spec["title"] == title


def test_competition_refuses_a_title_that_is_not_text(stores, tmp_path):
    for title, message in (("  ", "--title: must not be empty"), ("bad \udcff byte", "not UTF-8")):
        out, res = _bundle(stores, tmp_path, "--title", title)
        assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
        assert not out.exists()


def _fake_wheel(folder: Path, version: str, requires: str = "numpy>=1.26") -> Path:
    """A wheel-shaped zip (name, dist-info METADATA): what the bundle checks and ships, built in a blink."""
    path = folder / f"xbench_cxr-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"xbench_cxr-{version}.dist-info/METADATA",
                    f"Metadata-Version: 2.4\nName: xbench-cxr\nVersion: {version}\nRequires-Dist: {requires}\n"
                    "Requires-Dist: torch>=2.2; extra == \"extract\"\n")
        zf.writestr("xbench/__init__.py", "")
    return path


def test_the_bundle_ships_the_scorers_wheel_as_the_starting_kit_and_says_how_to_install_it(stores, tmp_path):
    """Issue 35: xbench-cxr is not on PyPI; the competition itself gives participants the validator."""
    yaml = pytest.importorskip("yaml")
    from importlib.metadata import version

    wheel = _fake_wheel(tmp_path / "dist", version("xbench-cxr"))
    out, res = _bundle(stores, tmp_path, "--wheel", str(wheel))
    assert res.exit_code == 0, res.output
    assert "no --wheel" not in res.output
    with zipfile.ZipFile(out) as zf:
        spec = yaml.safe_load(zf.read("competition.yaml"))
        assert check_competition(spec, set(zf.namelist())) == []
        kit = zipfile.ZipFile(io.BytesIO(zf.read("starting_kit.zip")))
        overview = zf.read("pages/overview.md").decode()
    assert [p["starting_kit"] for p in spec["phases"]] == ["starting_kit.zip", "starting_kit.zip"]
    assert sorted(kit.namelist()) == sorted(["README.txt", wheel.name])
    assert kit.read(wheel.name) == wheel.read_bytes()
    assert f"pip install {wheel.name}" in kit.read("README.txt").decode()
    assert f"pip install {wheel.name}" in overview and "starting_kit.zip" in overview
    assert "pip install xbench-cxr" not in overview and "pypi.org" not in overview


def test_without_a_wheel_the_page_claims_no_published_package_and_the_organiser_is_told(stores, tmp_path):
    out, res = _bundle(stores, tmp_path)
    assert res.exit_code == 0, res.output
    assert "no --wheel" in res.stderr
    with zipfile.ZipFile(out) as zf:
        overview = zf.read("pages/overview.md").decode()
        assert "starting_kit.zip" not in zf.namelist()
    assert "pip install xbench-cxr" not in overview and "not published on PyPI" in overview


def test_a_wheel_of_another_version_or_needing_torch_is_refused(stores, tmp_path):
    from importlib.metadata import version

    for wheel, reason in ((_fake_wheel(tmp_path / "old", "0.0.1"), "is version 0.0.1"),
                          (_fake_wheel(tmp_path / "torch", version("xbench-cxr"), "torch>=2.2"), "requires torch"),
                          (tmp_path / "missing.whl", "no such file")):
        out, res = _bundle(stores, tmp_path, "--wheel", str(wheel))
        assert res.exit_code == 2 and reason in res.output and not out.exists(), res.output


def test_a_hostile_wheel_is_refused_from_the_bounded_reader(stores, tmp_path):
    """Issue 44, class 6: the wheel is read through the bounded input layer. A wheel whose METADATA inflates past
    its limit (a zip bomb), a sparse file past the wheel limit, and a FIFO named like the wheel are exit 2 with
    one line each; nothing is written and nothing is read beyond the limits (the sparse file is never read)."""
    from importlib.metadata import version

    from xbench.package import MAX_WHEEL_BYTES, MAX_WHEEL_METADATA_BYTES

    mine = version("xbench-cxr")
    name = f"xbench_cxr-{mine}-py3-none-any.whl"
    bomb = tmp_path / "bomb" / name
    bomb.parent.mkdir()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"xbench_cxr-{mine}.dist-info/METADATA", b"Name: xbench-cxr\n" + b" " * MAX_WHEEL_METADATA_BYTES)
    assert bomb.stat().st_size < 10_000
    sparse = tmp_path / "sparse" / name
    sparse.parent.mkdir()
    with open(sparse, "wb") as fh:
        fh.truncate(MAX_WHEEL_BYTES + 1)
    fifo = tmp_path / "fifo" / name
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    for wheel, reason in ((bomb, "the limit is 1.0 MiB"), (sparse, "the limit for this file is 64.0 MiB"),
                          (fifo, "no such file")):
        out, res = _bundle(stores, tmp_path, "--wheel", str(wheel))
        assert res.exit_code == 2, res.output
        lines = [ln for ln in res.output.splitlines() if "--wheel" in ln]
        assert len(lines) == 1 and reason in lines[0], res.output
        assert "Traceback" not in res.output and not out.exists()


def test_a_bundled_store_is_read_through_the_bounded_layer(stores, tmp_path):
    """The ground truths a bundle only copies: a sparse file past the store limit, a link out of the store and a
    FIFO inside it are refused (exit 2, one line naming the file), never copied into the bundle or waited on."""
    from xbench.package import MAX_STORE_BYTES

    cases = {"sparse": lambda p: open(p / "junk.bin", "wb").truncate(MAX_STORE_BYTES + 1),
             "link": lambda p: os.symlink(tmp_path / "secret.txt", p / "zarr.json.bak"),
             "fifo": lambda p: os.mkfifo(p / "pipe")}
    (tmp_path / "secret.txt").write_text("not to ship")
    for what, make in cases.items():
        val = tmp_path / what / "val.zarr"
        shutil.copytree(stores / "val.zarr", val)
        make(val)
        out = tmp_path / f"{what}.zip"
        res = CliRunner().invoke(package, ["codabench-competition", "--gt-validation", str(val), "--gt-test",
                                           str(stores / "test.zarr"), "--docker-image", "a/b:1", "--out", str(out),
                                           *DATES])
        assert res.exit_code == 2, (what, res.output)
        assert "Traceback" not in res.output and str(val) in res.output and not out.exists(), res.output


def test_a_bundle_replaces_only_a_bundle_xbench_wrote(stores, tmp_path):
    """Issue 44, class 5: --out is replaced only when it is XBench's own bundle (its competition.yaml or
    metadata.yaml begins with XBench's header); a file of the user's, another zip, a folder or a link there is
    refused (exit 2, one line) and left as it was."""
    out, res = _bundle(stores, tmp_path)
    assert res.exit_code == 0, res.output
    out2, res = _bundle(stores, tmp_path)  # the same command again replaces its own bundle
    assert res.exit_code == 0 and out2 == out, res.output
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("competition.yaml", "title: my own competition\n")
    (tmp_path / "folder").mkdir()
    os.symlink(out, tmp_path / "link.zip")
    (tmp_path / "notes.txt").write_text("mine")
    for target in ("notes.txt", "other.zip", "folder", "link.zip"):
        path = tmp_path / target
        before = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        for cmd in (["codabench-competition", "--gt-validation", str(stores / "val.zarr"), "--gt-test",
                     str(stores / "test.zarr"), "--docker-image", "a/b:1", *DATES],
                    ["codabench", "--gt", str(stores / "val.zarr"), "--gt-in-program"]):
            res = CliRunner().invoke(package, [*cmd, "--out", str(path)])
            assert res.exit_code == 2, (target, res.output)
            lines = [ln for ln in res.output.splitlines() if "is not a bundle XBench wrote" in ln]
            assert len(lines) == 1 and "Traceback" not in res.output, res.output
            if before is not None:
                assert path.read_bytes() == before
    assert (tmp_path / "link.zip").is_symlink() and (tmp_path / "folder").is_dir()
