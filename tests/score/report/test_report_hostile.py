"""Hostile score outputs and stores through `xbench report`, `xbench compare` and `xbench show`, run as documented.

Each crafted input goes to the command in its own forked process with ``--max-memory 1GiB --timeout 60``; every
one must exit 2 with one problem line naming the cause (never the watchdog's line, never a traceback), leave
nothing behind, and stay well within 60 s and 1 GiB (peak resident memory from ``wait4``).
"""
from __future__ import annotations

import io
import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

from forked import run_forked

BUDGET = ["--max-memory", "1GiB", "--timeout", "60"]
MAX_RSS_MIB = 1024
MAX_SECONDS = 30

def run_all(jobs: list[dict], tmp_path) -> list[dict]:
    return run_forked(jobs, tmp_path, entry="xbench.cli:main", prog="xbench", cap=MAX_SECONDS * 2,
                      preload=("xbench.cli", "xbench.score.report", "xbench.score.report.cli",
                               "xbench.score.report.show"))


# -- crafted files ---------------------------------------------------------------------------------------------
def npy_header(dtype: str, shape: tuple) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def npz_bomb(path: Path, inflated_mib: int = 1100) -> Path:
    """A pair_counts.npz of ~1 MB whose one member inflates to ``inflated_mib`` MiB (repeated full-flush deflate
    segments of zeros, so writing it costs milliseconds), the zip entry declaring the true size."""
    header = npy_header("<u2", ((inflated_mib * 2**20) // 2,))
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = bytes(2**20)
    first = c.compress(header) + c.flush(zlib.Z_FULL_FLUSH)
    segment = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    data = first + segment * inflated_mib + c.flush()
    size = len(header) + inflated_mib * 2**20
    name = b"phantom.b.npy"
    import struct
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, 0, len(data), size, len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, 0, len(data), size, len(name),
                          0, 0, 0, 0, 0o100644 << 16, 0) + name
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(data), 0)
    path.write_bytes(local + data + central + eocd)
    return path


def pickled_npz(path: Path) -> Path:
    np.savez(path, datasets=np.array([{"x": 1}], dtype=object))
    return path


def wrong_dtype_npz(good: Path, path: Path) -> Path:
    with np.load(good) as z:
        arrays = dict(z)
    arrays["phantom.pair_case"] = arrays["phantom.pair_case"].astype(np.float64) + 0.5
    np.savez(path, **arrays)
    return path


def out_of_range_npz(good: Path, path: Path) -> Path:
    with np.load(good) as z:
        arrays = dict(z)
    arrays["phantom.pair_case"] = arrays["phantom.pair_case"] + 10_000  # the kernels would index past the cases
    np.savez(path, **arrays)
    return path


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


METRICS_ATTACKS = {
    # name: (metrics.json bytes from the good text, fragment of the one problem line)
    "nan_token": (lambda t: t.replace('"pointing_game": 1.0', '"pointing_game": NaN', 1), "NaN"),
    "infinity_token": (lambda t: t.replace('"pointing_game": 1.0', '"pointing_game": Infinity', 1), "Infinity"),
    "duplicate_key": (lambda t: t.replace('"overall": {', '"overall": {"auroc": 0.1, "auroc": 0.2, ', 1), "auroc"),
    "deep_nesting": (lambda t: t.replace('"overall": {', f'"deep": {nested(100_000)}, "overall": {{', 1), "nest"),
    "huge_integer": (lambda t: t.replace('"schema": 1', '"schema": 1' + "0" * 5000, 1), "digits"),
    "float_overflow": (lambda t: t.replace('"pointing_game": 1.0', '"pointing_game": 1e400', 1), "too large"),
    "not_utf8": (lambda t: t.replace('"model": "strong"', '"model": "\udcff"', 1), "UTF-8"),
    "wrong_type_summary": (lambda t: t.replace('"summary": {', '"summary": 5, "x": {', 1), "summary"),
    "wrong_type_value": (lambda t: t.replace('"pointing_game": 1.0', '"pointing_game": "high"', 1), "pointing_game"),
    "wrong_type_ci": (lambda t: t.replace('"overall": {', '"ci95": {"auroc": "wide"}, "overall": {', 1), "ci95"),
    "wrong_type_grid": (lambda t: t.replace('"grid": [', '"grid": ["a", ', 1), "grid"),
}


def section(name: str, body: str):
    """The good text with a top-level section ``name`` holding ``body`` (raw JSON text)."""
    return lambda t: t.replace('"overall": {', f'"{name}": {body}, "overall": {{', 1)


FAITH = '"curves": ["deletion"], "steps": 10, "grid": 4'
FAITH_DS = FAITH + ', "datasets": {"phantom": {"n_pairs": 3, "summary": %s, "classes": %s}}'
PROBES = '{"datasets": {"phantom": {"n_probes": 2, "kinds": %s}}}'
#: the sections of the newer surfaces (faithfulness, text probes, human ceiling, robustness), malformed: exit 1
#: (KeyError, AttributeError) or a silently empty table before they were checked where report loads metrics.json
SECTION_ATTACKS = {
    "faith_not_an_object": (section("faithfulness", "[1, 2]"), "faithfulness must be an object, not list"),
    "faith_no_datasets": (section("faithfulness", "{%s}" % FAITH), "faithfulness.datasets must be an object"),
    "faith_unknown_curve": (section("faithfulness", '{"curves": ["erase"], "steps": 10, "grid": 4, "datasets": {}}'),
                            "faithfulness.curves must be a list of distinct curve names"),
    "faith_huge_curve_list": (section("faithfulness", '{"curves": [%s], "steps": 10, "grid": 4, "datasets": {}}'
                                      % ", ".join(['"deletion"'] * 200_000)), "faithfulness.curves"),
    "faith_string_value": (section("faithfulness", "{%s}" % (FAITH_DS % ('{"deletion_auc": "low"}', "{}"))),
                           "summary.deletion_auc must be a number or null"),
    "faith_nan_value": (section("faithfulness", "{%s}" % (FAITH_DS % ('{"deletion_auc": NaN}', "{}"))), "NaN"),
    "faith_deep_value": (section("faithfulness", "{%s}" % (FAITH_DS % ('{"deletion_auc": %s}' % nested(40), "{}"))),
                         "deletion_auc must be a number or null"),
    "faith_half_interval": (section("faithfulness", "{%s}" % (FAITH_DS % ("{}", '{"disc": {"n_pairs": 1, "ci95": '
                                                                                '{"deletion_gain": [null, 1]}}}'))),
                            "classes.disc.ci95.deletion_gain must be [low, high]"),
    "faith_no_n_pairs": (section("faithfulness", "{%s}" % (FAITH_DS % ("{}", '{"disc": {"deletion_auc": 0.5}}'))),
                         "classes.disc.n_pairs must be a count"),
    "faith_huge_class_table": (section("faithfulness", "{%s}" % (FAITH_DS % ("{}", "{%s}" % ", ".join(
        f'"c{i}": 0' for i in range(100_001))))), "at most 100,000"),
    "probes_kinds_a_list": (section("text_probes", PROBES % "[1]"), "text_probes.datasets.phantom.kinds must be an object"),
    "probes_no_n_probes": (section("text_probes", PROBES % '{"negation": {"rank_change": 0.1}}'),
                           "kinds.negation.n_probes must be a count"),
    "probes_wrong_value": (section("text_probes", PROBES % '{"negation": {"n_probes": 2, "rank_change": [0.1]}}'),
                           "kinds.negation.rank_change must be a number or null"),
    "probes_unsupported_no_count": (section("text_probes", '{"datasets": {"phantom": {"unsupported": true}}}'),
                                    "text_probes.datasets.phantom.n_probes must be a count"),
    "human_readers_a_string": (section("human", '{"datasets": {"phantom": {"readers": "R1"}}}'),
                               "human.datasets.phantom.readers must be a list"),
    "human_wrong_value": (section("human", '{"datasets": {"phantom": {"summary": {"pointing_game": {"human": "90%"}}}}}'),
                          "summary.pointing_game.human must be a number or null"),
    "robustness_available_a_word": (section("robustness", '{"datasets": {"phantom": {"available": "yes"}}}'),
                                    "robustness.datasets.phantom.available must be true or false"),
    "robustness_spec_value": (section("robustness", '{"datasets": {"phantom": {"available": true, "specs": {"hflip": '
                                                    '{"metrics": {"summary": {}}, "stability": {"summary": '
                                                    '{"flip_rate": "high"}}}}}}}'),
                              "specs.hflip.stability.summary.flip_rate must be a number or null"),
}
METRICS_ATTACKS.update(SECTION_ATTACKS)


@pytest.fixture(scope="module")
def corpus(result_dirs, tmp_path_factory):
    """Every attack through report and compare (and show's oversized chunk), run once for the module."""
    root = tmp_path_factory.mktemp("hostile-report")
    good, other = Path(result_dirs[0]), Path(result_dirs[2])
    jobs, names = [], []

    def variant(name: str) -> Path:
        d = root / name / good.name
        shutil.copytree(good, d)
        return d

    def add(name, d, expected):
        for cmd in ("report", "compare"):
            out = root / name / f"out-{cmd}"
            argv = ([cmd, str(d), str(other), "--out", str(out), "--bootstrap", "10", "--no-overlays", *BUDGET]
                    if cmd == "report" else [cmd, str(d), str(other), "--bootstrap", "10", "--out", str(out) + ".csv",
                                             *BUDGET])
            jobs.append({"argv": argv})
            names.append((name, cmd, out, expected))

    text = (good / "metrics.json").read_text()
    for name, (change, expected) in METRICS_ATTACKS.items():
        d = variant(name)
        raw = change(text).encode("utf-8", "surrogateescape")
        (d / "metrics.json").write_bytes(raw)
        add(name, d, expected)
    d = variant("npz_bomb")
    npz_bomb(d / "pair_counts.npz")
    add("npz_bomb", d, "inflate")
    d = variant("npz_pickle")
    pickled_npz(d / "pair_counts.npz")
    add("npz_pickle", d, "pickle")
    d = variant("npz_wrong_dtype")
    wrong_dtype_npz(good / "pair_counts.npz", d / "pair_counts.npz")
    add("npz_wrong_dtype", d, "pair_case")
    d = variant("npz_out_of_range")
    out_of_range_npz(good / "pair_counts.npz", d / "pair_counts.npz")
    add("npz_out_of_range", d, "does not exist")
    d = variant("npz_fifo")
    (d / "pair_counts.npz").unlink()
    import os
    os.mkfifo(d / "pair_counts.npz")
    add("npz_fifo", d, "regular file")
    d = variant("parquet_garbage")
    (d / "pairs.parquet").write_bytes(b"PAR1" + b"\x00" * 100 + b"PAR1")
    add("parquet_garbage", d, "pairs.parquet")
    d = variant("parquet_huge")
    with open(d / "pairs.parquet", "wb") as fh:  # sparse: 600 MiB declared by its size, nothing on disk
        fh.truncate(600 * 2**20)
    add("parquet_huge", d, "limit")
    d = variant("parquet_wrong_column")
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"dataset": ["phantom"], "case_id": ["x"], "class": ["disc"], "has_region": ["yes"],
                             "region_pixels": [1], "hit": [True], "dice_best": [0.5]}), d / "pairs.parquet")
    add("parquet_wrong_column", d, "has_region")
    results = run_all([dict(j) for j in jobs], root)
    return {(n, c): (r, out, exp) for (n, c, out, exp), r in zip(names, results)}


ATTACK_NAMES = sorted(METRICS_ATTACKS) + ["npz_bomb", "npz_pickle", "npz_wrong_dtype", "npz_out_of_range",
                                          "npz_fifo", "parquet_garbage", "parquet_huge", "parquet_wrong_column"]


@pytest.mark.parametrize("command", ["report", "compare"])
@pytest.mark.parametrize("attack", ATTACK_NAMES)
def test_refused_in_one_line_within_budget(corpus, attack, command):
    res, out, expected = corpus[(attack, command)]
    lines = res["stderr"].strip().splitlines()
    assert res["rc"] == 2, (res["rc"], res["stderr"][-2000:])
    assert "Traceback" not in res["stderr"] and "unexpected" not in res["stderr"]
    assert len(lines) == 1, lines
    assert expected.lower() in lines[0].lower(), lines[0]
    assert "--max-memory" not in lines[0] or attack == "parquet_huge"  # refused by a check, not the watchdog
    assert not res["killed"] and res["seconds"] < MAX_SECONDS and res["maxrss_mib"] < MAX_RSS_MIB, res
    assert not Path(out).exists() and not Path(str(out) + ".csv").exists()  # nothing written


# -- xbench show on a store declaring an oversized chunk --------------------------------------------------------
def test_show_refuses_a_store_declaring_an_oversized_chunk(result_dirs, tmp_path):
    stores = Path(result_dirs[0]).parent / "stores"
    sub = next(p for p in stores.iterdir() if p.name.endswith(".zarr") and "strong" in p.name)
    bad = tmp_path / "bad.zarr"
    shutil.copytree(sub, bad)
    meta_path = bad / "phantom" / "saliency" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    shape = meta["shape"]
    meta["shape"] = [shape[0], shape[1], 20_000, 20_000]
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [1, 1, 20_000, 20_000]  # 3 GiB of float64 per chunk
    meta_path.write_text(json.dumps(meta))
    out = tmp_path / "x.png"
    res = run_all([{"argv": ["show", str(bad), "--gt", str(stores / "gt.zarr"), "--images", str(stores / "images.zarr"),
                             "--case", "phantom-000", "--class", "disc", "--out", str(out), *BUDGET]}], tmp_path)[0]
    lines = res["stderr"].strip().splitlines()
    assert res["rc"] == 2 and len(lines) == 1, res["stderr"]
    assert "saliency" in lines[0] and "limit" in lines[0]
    assert res["maxrss_mib"] < MAX_RSS_MIB and res["seconds"] < MAX_SECONDS and not out.exists()


@pytest.mark.parametrize("command", ["report", "compare", "show"])
def test_budget_options_exist(command):
    from click.testing import CliRunner

    from xbench import cli

    res = CliRunner().invoke(cli.main, [command, "--help"])
    assert res.exit_code == 0 and "--max-memory" in res.output and "--timeout" in res.output


def test_hostile_files_in_the_out_folder_are_not_trusted(result_dirs, tmp_path):
    """The --out folder is the user's: a FIFO named like the marker, a nesting bomb named report.json and a sanity
    folder whose sanity.json is one more bomb cost a line or nothing, never a hang or a traceback."""
    import os

    out = tmp_path / "rep"
    out.mkdir()
    os.mkfifo(out / "xbench-output.json")
    (out / "report.json").write_text(nested(200_000))
    sanity = tmp_path / "sanity"
    sanity.mkdir()
    (sanity / "sanity.json").write_text(nested(200_000))
    jobs = [{"argv": ["report", *map(str, result_dirs), "--out", str(out), "--bootstrap", "0", "--no-overlays", *BUDGET]},
            {"argv": ["report", *map(str, result_dirs), "--out", str(tmp_path / "r2"), "--bootstrap", "0",
                      "--no-overlays", "--sanity", str(sanity), *BUDGET]}]
    first, second = run_all(jobs, tmp_path)
    for res in (first, second):
        assert not res["killed"] and res["rc"] in (0, 2), res
        assert "Traceback" not in res["stderr"] and "unexpected" not in res["stderr"]
    assert second["rc"] == 2 and len(second["stderr"].strip().splitlines()) == 1
    assert "sanity.json" in second["stderr"] and not (tmp_path / "r2").exists()


def test_overlay_stores_named_by_a_metrics_json_are_held_to_the_budget(result_dirs, tmp_path):
    """metrics.json records the stores the overlays read: one declaring an oversized chunk is skipped with its
    reason, and a pairs.parquet naming cases the stores lack draws nothing for them; the report is still written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from xbench.score.report import build_report

    stores = Path(result_dirs[0]).parent / "stores"
    bad = tmp_path / "bad.zarr"
    shutil.copytree(stores / "strong.zarr", bad)
    meta_path = bad / "phantom" / "saliency" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["shape"] = [meta["shape"][0], meta["shape"][1], 20_000, 20_000]
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [1, 1, 20_000, 20_000]
    meta_path.write_text(json.dumps(meta))
    d = tmp_path / "strong"
    shutil.copytree(result_dirs[0], d)
    m = json.loads((d / "metrics.json").read_text())
    m["xbench"]["inputs"]["submission"] = str(bad)
    (d / "metrics.json").write_text(json.dumps(m))
    e = tmp_path / "medium"
    shutil.copytree(result_dirs[1], e)
    pq.write_table(pa.table({"dataset": ["phantom"], "case_id": ["nowhere"], "class": ["disc"], "has_region": [True],
                             "region_pixels": [3], "hit": [True], "dice_best": [0.5]}), e / "pairs.parquet")
    out = tmp_path / "rep"
    build_report(out, [d, e], bootstrap=0)
    manifest = json.loads((out / "report.json").read_text())
    assert any("strong" in s and "saliency" in s and "limit" in s for s in manifest["skipped"]), manifest["skipped"]
    assert not any("strong" in f for f in manifest["files"]["overlays"])


def test_sections_as_the_scorer_writes_them_pass_the_checks():
    """The section checks refuse only what the writers never write: nulls, absent intervals, an unavailable
    robustness dataset, an unsupported probe dataset and every faithfulness curve are all accepted."""
    from xbench.score.sections.faithfulness import KEYS as CURVES
    from xbench.score.report._load import metrics_problems

    keys = [k for c in CURVES for k, _ in CURVES[c]]
    vals = {k: (None if i % 3 == 0 else 0.25 * (i % 4)) for i, k in enumerate(keys)}
    faith = {"curves": list(CURVES), "steps": 10, "grid": 6, "seed": 0, "road_noise": None, "bootstrap": 20,
             "overall": vals, "datasets": {"phantom": {
                 "n_pairs": 4, "n_cases": 3, "summary": vals, "ci95": {k: None if v is None else [0.0, 1.0]
                                                                      for k, v in vals.items()},
                 "classes": {"disc": {"n_pairs": 4, **vals, "curves": {"deletion": {"fractions": [0, 1]}}}}}}}
    kind = {"n_probes": 3, "rank_change": 0.5, "mass_change": None, "ci95": {"rank_change": [0.1, 0.9],
                                                                            "mass_change": None}}
    probes = {"overall": {"negation": {"rank_change": 0.5}}, "datasets": {
        "ms_cxr": {"n_probes": 3, "kinds": {"negation": kind, "laterality": {**kind, "moved": 1.0, "side_shift": 0.2}},
                   "categories": {"Edema": {"n_probes": 3, "kinds": {"negation": kind}}}},
        "phantom": {"n_probes": 2, "unsupported": True, "reason": "the submission has no phrase rows"}}}
    entry = {"model": 0.5, "human": None, "ci95": None, "percent_of_human": None, "percentage_decrease": None,
             "paired": {"model": 0.5, "gap": None, "gap_ci95": [-0.1, 0.2], "p_value": None}}
    human = {"source": {"file": "human.json", "sha256": "0" * 64, "rule": None}, "keys": ["pointing_game"],
             "datasets": {"chexlocalize": {"readers": ["hb"], "n_cases": 2, "summary": {"pointing_game": entry},
                                           "classes": {"Edema": {"n_pairs": 2, "n_readers": 1,
                                                                 "pointing_game": entry}}}}}
    part = {"summary": {"pointing_game": 0.5, "auroc": None}, "ci95": {"pointing_game": [0.2, 0.7], "auroc": None}}
    robust = {"datasets": {"phantom": {"n_cases": 3, "copies": 1, "n_copies": 3, "available": True, "specs": {
        "hflip": {"n_copies": 3, "metrics": part, "stability": {"summary": {"flip_rate": 0.0, "map_spearman_mean": None},
                                                                "ci95": {"flip_rate": None}}, "phrases": part}}},
        "chexlocalize": {"n_cases": 2, "copies": 1, "n_copies": 2, "available": False,
                         "reason": "the run scores part of the cases only"}}}
    m = {"datasets": {}, "faithfulness": faith, "text_probes": probes, "human": human, "robustness": robust}
    assert metrics_problems(m, "m.json") == []
    m["faithfulness"]["datasets"]["phantom"]["classes"]["disc"]["deletion_auc"] = True  # a bool is not a number
    assert metrics_problems(m, "m.json") == [
        "m.json: faithfulness.datasets.phantom.classes.disc.deletion_auc must be a number or null, not bool"]
