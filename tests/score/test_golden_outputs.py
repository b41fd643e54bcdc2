"""Refactoring guard: the scorer's outputs on a small fixture with class and phrase rows are pinned.

The expected values (tests/fixtures/golden/score_outputs.json) were first taken from the code before
the scoring pipeline was reorganised (issue 28); a change that alters any number, column, key, key
order or table cell fails this test. The metrics themselves are checked against independent
computations elsewhere (test_scoring.py, test_phrases.py); this test only says "the same as before".

Values, not digests (issue 35): the last bits of a float depend on the CPU (numpy's SIMD summation
order: AVX2 vs AVX-512; OpenBLAS's kernel; Numba's target), so a byte digest passed on the machine
that wrote it and failed on another x86-64. What is compared, and how:

* exact: structure (keys and their order, list lengths, array dtypes and shapes, parquet schema and
  pandas metadata), integers, booleans, strings, and every table character outside a decimal number;
* floats (metrics.json, npz arrays, parquet columns): ``|got - want| <= ATOL + RTOL * |want|``
  (RTOL = 1e-6 covers float32 paths, whose rounding is ~1e-7; a real change on this 9-case fixture
  moves a value by a whole pair's share, ~1e-1); NaN equals NaN;
* tables (.csv, .md, the paired-bootstrap table): line by line; each decimal number (a token with a
  point or an exponent) within one unit of its last printed digit, or within RTOL/ATOL where it is
  printed in full; integers exact.

Not compared: metrics.json's ``timings`` (wall clock); the temporary folder's path (written as TMP)
and the package version (written as VERSION), so a release does not fail it; parquet's created_by.

Regenerate after a deliberate change of output, in one command from the repository root::

    .venv/bin/python tests/score/test_golden_outputs.py

(it rewrites the golden file and prints what moved; review the diff before committing it).
"""
from __future__ import annotations

import importlib.metadata
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent / "sections")]  # run as a script too
from test_phrases import make_phrase_stores  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "score_outputs.json"
RTOL = 1e-6
ATOL = 1e-9

# A decimal number as a table prints it: digits with a point, or with an exponent (integers are
# compared as text, exactly).
_DECIMAL = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE]))(?:[eE][-+]?\d+)?")


def _plain(value):
    """A JSON value with NumPy scalars as Python ones."""
    return value.item() if isinstance(value, np.generic) else value


def _npz_values(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: {"dtype": z[k].dtype.str, "shape": list(z[k].shape), "values": z[k].tolist()}
                for k in sorted(z.files)}


def _parquet_values(path: Path) -> dict:
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    meta = json.loads(t.schema.metadata[b"pandas"])
    meta.pop("creator", None)  # the pyarrow / pandas versions
    meta.pop("pandas_version", None)
    return {"schema": str(t.schema.remove_metadata()).splitlines(), "pandas": meta,
            "columns": {k: [_plain(v) for v in col] for k, col in t.to_pydict().items()}}


def _version_free(value, version: str):
    if isinstance(value, dict):
        return {k: ("VERSION" if k == "version" and v == version else _version_free(v, version))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_version_free(v, version) for v in value]
    return value


def values(tmp_path: Path) -> dict:
    """Every output of two scored submissions and their paired comparison, as comparable values."""
    from xbench.score.sections.paired import paired_bootstrap
    from xbench.score.outputs.folder import write_outputs
    from xbench.score.scoring import score_submission

    version = importlib.metadata.version("xbench-cxr")
    gt, sub_a, *_ = make_phrase_stores(tmp_path / "a", seed=2)
    _, sub_b, *_ = make_phrase_stores(tmp_path / "b", seed=2, maps_seed=11)
    out = {}
    results = {}
    for name, sub in (("a", sub_a), ("b", sub_b)):
        res = results[name] = score_submission(sub, gt, bootstrap=40, seed=3)
        folder = tmp_path / f"out_{name}"
        write_outputs(res, folder)
        for f in sorted(folder.iterdir()):
            key = f"{name}/{f.name}"
            if f.name == "pair_counts.npz":
                out[key] = {"npz": _npz_values(f)}
            elif f.name == "pairs.parquet":
                out[key] = {"parquet": _parquet_values(f)}
            elif f.suffix == ".json":
                m = json.loads(f.read_text(encoding="utf-8").replace(str(tmp_path), "TMP"))
                m.pop("timings", None)  # the wall-clock timings are the only field that varies run to run
                out[key] = {"json": _version_free(m, version)}
            elif f.suffix in (".csv", ".md"):
                out[key] = {"lines": f.read_text(encoding="utf-8").replace(str(tmp_path), "TMP").splitlines()}
    table = paired_bootstrap(results["a"].counts, results["b"].counts, bootstrap=40, seed=3,
                                phrases_a=results["a"].phrase_counts, phrases_b=results["b"].phrase_counts)
    out["paired.csv"] = {"lines": table.to_csv(index=False).splitlines()}
    return out


def _float_close(want: float, got: float) -> bool:
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got):
        return want == got
    return abs(got - want) <= ATOL + RTOL * abs(want)


def _line_problems(want: str, got: str) -> str | None:
    """None when two printed lines agree: text exactly, decimals within their last printed digit."""
    w_nums, g_nums = _DECIMAL.findall(want), _DECIMAL.findall(got)
    if _DECIMAL.sub("#", want) != _DECIMAL.sub("#", got) or len(w_nums) != len(g_nums):
        return f"text differs: {want!r} != {got!r}"
    for w, g in zip(w_nums, g_nums):
        mantissa = re.split(r"[eE]", w)[0]
        places = len(mantissa.split(".")[1]) if "." in mantissa else 0
        exponent = int(re.split(r"[eE]", w)[1]) if re.search(r"[eE]", w) else 0
        last_digit = 10.0 ** (exponent - places)
        wf, gf = float(w), float(g)
        if not (abs(gf - wf) <= last_digit * (1 + 1e-9) or _float_close(wf, gf)):
            return f"{w} != {g} (more than one unit of the last printed digit): {want!r} != {got!r}"
    return None


def compare(want, got, where: str = "") -> list[str]:
    """One line per difference between two value trees (see the module docstring for the rules)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: a mapping was expected, got {type(got).__name__}"]
        if list(want) != list(got):
            return [f"{where}: keys {list(want)} != {list(got)}"]
        if set(want) == {"lines"} and where:  # a printed table
            w, g = want["lines"], got["lines"]
            if len(w) != len(g):
                return [f"{where}: {len(w)} lines expected, {len(g)} written"]
            found = ((i, _line_problems(a, b)) for i, (a, b) in enumerate(zip(w, g)))
            return [f"{where} line {i + 1}: {p}" for i, p in found if p]
        return [p for k in want for p in compare(want[k], got[k], f"{where}/{k}" if where else k)]
    if isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            return [f"{where}: a list of {len(want)} expected, got {got!r:.80}"]
        return [p for i, (a, b) in enumerate(zip(want, got)) for p in compare(a, b, f"{where}[{i}]")]
    if type(want) is float and type(got) is float:
        if _float_close(want, got):
            return []
        return [f"{where}: {got!r} written, {want!r} expected (beyond rtol {RTOL}, atol {ATOL})"]
    if type(want) is not type(got) or want != got:
        return [f"{where}: {got!r} written, {want!r} expected"]
    return []


def _dumps(value, indent: str = "") -> str:
    """JSON with one line per list of scalars (an array row, a table line), so diffs stay readable."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        items = ",\n".join(f"{inner}{json.dumps(k)}: {_dumps(v, inner)}" for k, v in value.items())
        return "{\n" + items + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + _dumps(v, inner) for v in value) + "\n" + indent + "]"
    if isinstance(value, list) and value and isinstance(value[0], str):
        return "[\n" + ",\n".join(inner + json.dumps(v, ensure_ascii=False) for v in value) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False)


def test_outputs_are_those_of_the_code_before_the_pipeline_refactor(tmp_path):
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert compare(expected, values(tmp_path)) == []


def _perturbations(golden: dict):
    """(description, mutated copy, should the comparison fail?) for each rule of the comparison."""
    import copy

    def mutated(path, fn):
        g = copy.deepcopy(golden)
        node = g
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = fn(node[path[-1]])
        return g

    m = golden["a/metrics.json"]["json"]
    float_key = next(k for k, v in m["overall"].items() if type(v) is float and v > 0.01)
    int_path = next(("a/metrics.json", "json", *p) for p in _ints(m))
    prob = golden["a/pair_counts.npz"]["npz"]["ms_cxr.prob"]["values"]
    assert type(prob[0][0]) is float
    table = golden["a/table1_grounding.csv"]["lines"]
    assert _DECIMAL.search(table[1])
    bump_last_digit = lambda line, units: _DECIMAL.sub(  # noqa: E731
        lambda x: f"{float(x.group()) + units * 10 ** -len(x.group().split('.')[1]):.{len(x.group().split('.')[1])}f}",
        line, count=1)
    return [
        ("a metrics.json float moved by 10x the tolerance", mutated(("a/metrics.json", "json", "overall", float_key),
                                                                    lambda v: v * (1 + 10 * RTOL)), True),
        ("a metrics.json float moved by a tenth of it", mutated(("a/metrics.json", "json", "overall", float_key),
                                                                lambda v: v * (1 + RTOL / 10)), False),
        ("a metrics.json integer moved by 1", mutated(int_path, lambda v: v + 1), True),
        ("a metrics.json key renamed", mutated(("a/metrics.json", "json"),
                                               lambda d: {("overall_" if k == "overall" else k): v
                                                          for k, v in d.items()}), True),
        ("an npz float moved by 10x the tolerance", mutated(("a/pair_counts.npz", "npz", "ms_cxr.prob", "values", 0),
                                                            lambda row: [row[0] * (1 + 10 * RTOL), *row[1:]]), True),
        ("an npz dtype changed", mutated(("a/pair_counts.npz", "npz", "ms_cxr.prob", "dtype"), lambda _: "<f4"), True),
        ("a parquet cell moved", mutated(("a/pairs.parquet", "parquet", "columns", "dice_best", 0),
                                         lambda v: v + 1e-3), True),
        ("a table cell moved by 2 units of its last digit", mutated(("a/table1_grounding.csv", "lines", 1),
                                                                    lambda line: bump_last_digit(line, 2)), True),
        ("a table cell moved by 1 unit of its last digit", mutated(("a/table1_grounding.csv", "lines", 1),
                                                                   lambda line: bump_last_digit(line, 1)), False),
        ("a table's text changed", mutated(("a/table1_grounding.md", "lines", 0),
                                           lambda line: line.replace("Dice", "DSC")), True),
        ("a table line dropped", mutated(("a/table1_grounding.md", "lines"), lambda lines: lines[:-1]), True),
        ("a paired.csv cell moved", mutated(("paired.csv", "lines", 1),
                                            lambda line: _DECIMAL.sub(lambda x: repr(float(x.group()) + 1e-4), line,
                                                                      count=1)), True),
    ]


def _ints(tree, path=()):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _ints(v, (*path, k))
    elif type(tree) is int:
        yield path


def test_the_comparison_fails_on_any_change_beyond_its_tolerance():
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert compare(golden, golden) == []
    for what, changed, should_fail in _perturbations(golden):
        problems = compare(changed, golden)
        assert bool(problems) == should_fail, (what, problems)
        if should_fail:
            assert len(problems) == 1, (what, problems)  # one line, naming the place


def test_decimal_tokens_and_their_last_digit():
    assert _DECIMAL.findall("m,11.11,25.99,1e-05,-0.5,phantom-test-000004,n=12") == ["11.11", "25.99", "1e-05", "-0.5"]
    assert _line_problems("a,1.25,x", "a,1.26,x") is None
    assert _line_problems("a,1.25,x", "a,1.27,x")
    assert _line_problems("n=12", "n=13")  # integers are exact
    assert _line_problems("1e-05", "1.1e-05") is None  # one unit of the last printed digit (1e-05)
    assert _line_problems("1e-05", "3e-05")
    assert _line_problems("0.1234567890123", "0.1234567890124") is None
    assert _line_problems("0.30000000000000004", "0.30000001") is None  # within RTOL where printed in full
    assert _line_problems("0.30000000000000004", "0.3000004")


# What another x86-64 CPU does differently, emulated on this one: NumPy's SIMD dispatch and OpenBLAS's
# kernel (each moved the last bits of this fixture's floats between AVX-512 and AVX2 machines; Numba's
# target, NUMBA_CPU_NAME=haswell, did not move them, measured).
EMULATED_CPUS = {
    "avx2 (x86-64-v3)": {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR", "OPENBLAS_CORETYPE": "Haswell"},
    "sse4.2 (x86-64-v2)": {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
                           "OPENBLAS_CORETYPE": "Nehalem"},
}


@pytest.mark.slow
@pytest.mark.parametrize("cpu", list(EMULATED_CPUS))
def test_the_golden_values_hold_on_an_older_x86_cpu(cpu):
    """Issue 35: the byte digests of an AVX-512 machine failed on an AVX2 one; the values must not."""
    import os
    import platform
    import subprocess

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the emulated CPUs are x86-64 ones")

    env = {**os.environ, **EMULATED_CPUS[cpu]}
    proc = subprocess.run([sys.executable, __file__, "--check"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


if __name__ == "__main__":
    import tempfile

    check = sys.argv[1:] == ["--check"]  # compare only (the test above runs it under an emulated CPU)
    old = json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.exists() else {}
    with tempfile.TemporaryDirectory() as d:
        new = values(Path(d))
    moved = compare(old, new) if old else ["(no golden file before)"]
    for line in moved:
        print("moved:", line)
    if check:
        sys.exit(1 if moved else 0)
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(_dumps(new) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")
