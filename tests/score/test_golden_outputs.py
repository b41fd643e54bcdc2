"""Refactoring guard: the scorer's outputs on a small fixture with class and phrase rows are pinned.

The expected digests were computed with the code before the scoring pipeline was reorganised
(issue 28: counting / point estimates / orchestration split, phrase rows as a row scope); a change
that alters any number, column, key order or table cell changes a digest. The metrics themselves are
checked against independent computations elsewhere (test_scoring.py, test_phrases.py); this test only
says "the same as before". Digests are of content, not of raw bytes where a dependency's version is
written into the file (parquet's created_by), so upgrading pyarrow does not fail it.
If a deliberate change of output lands, recompute them with ``python tests/score/test_golden_outputs.py``.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from test_phrases import make_phrase_stores  # noqa: E402

EXPECTED = {
    'a/metrics.json': '93da531c6d352c50',
    'a/pair_counts.npz': 'fbb01a92490515bf',
    'a/pairs.parquet': '9a61a7a55a71c8b4',
    'a/table1_grounding.csv': '3fd4541d0dea77a4',
    'a/table1_grounding.md': '8f5245d6b815933c',
    'a/table1_grounding_fixed.csv': '40a68323299b0743',
    'a/table1_grounding_fixed.md': '374405092f69cd1b',
    'a/table_grounding_more.csv': 'c27ecf7862c69d5f',
    'a/table_grounding_more.md': '762fd00308bac666',
    'a/table_lesion_size.csv': 'febe25d6c8c9aae2',
    'a/table_lesion_size.md': 'c11c56d5e7981072',
    'a/table_pointing_ms_cxr.csv': '30171229d72caebd',
    'a/table_pointing_ms_cxr.md': '2fabafde3ba4e94d',
    'a/table_recognition.csv': 'c6c907e6e515f466',
    'a/table_recognition.md': '799e74144ee25551',
    'a/xbench-output.json': 'f9b638153595aad7',
    'b/metrics.json': '269115cf926b5980',
    'b/pair_counts.npz': '535bcc2e07caefb3',
    'b/pairs.parquet': 'c7778e18f4f4ba6b',
    'b/table1_grounding.csv': '412a54545eb4b983',
    'b/table1_grounding.md': '0cced4268a529d75',
    'b/table1_grounding_fixed.csv': 'f36afd1d4de27919',
    'b/table1_grounding_fixed.md': '462226ce9ce26987',
    'b/table_grounding_more.csv': 'e41b6cdccb3a93c4',
    'b/table_grounding_more.md': '050782081782abdf',
    'b/table_lesion_size.csv': '77a88218eaaaa774',
    'b/table_lesion_size.md': '0ed13cd7cd69afe6',
    'b/table_pointing_ms_cxr.csv': '30171229d72caebd',
    'b/table_pointing_ms_cxr.md': '2fabafde3ba4e94d',
    'b/table_recognition.csv': '4ddbf2f959208c1a',
    'b/table_recognition.md': '9169a4407f4310a3',
    'b/xbench-output.json': 'f9b638153595aad7',
    'paired.csv': '35e5f9284ae9bfd9',
}


def _h(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _npz_digest(path: Path) -> str:
    with np.load(path, allow_pickle=False) as z:
        parts = [f"{k}|{z[k].dtype.str}|{z[k].shape}".encode() + z[k].tobytes() for k in sorted(z.files)]
    return _h(b"\0".join(parts))


def _parquet_digest(path: Path) -> str:
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    meta = json.loads(t.schema.metadata[b"pandas"])
    meta.pop("creator", None)  # the pyarrow / pandas versions
    meta.pop("pandas_version", None)
    schema = str(t.schema.remove_metadata())
    body = json.dumps(t.to_pydict(), sort_keys=True, default=repr)
    return _h("\n".join([schema, json.dumps(meta, sort_keys=True), body]).encode())


def digests(tmp_path: Path) -> dict[str, str]:
    from xbench.score import bootstrap as BS
    from xbench.score.outputs import write_outputs
    from xbench.score.scoring import score_submission

    gt, sub_a, *_ = make_phrase_stores(tmp_path / "a", seed=2)
    _, sub_b, *_ = make_phrase_stores(tmp_path / "b", seed=2, maps_seed=11)
    out = {}
    results = {}
    for name, sub in (("a", sub_a), ("b", sub_b)):
        res = results[name] = score_submission(sub, gt, bootstrap=40, seed=3)
        folder = tmp_path / f"out_{name}"
        write_outputs(res, folder)
        for f in sorted(folder.iterdir()):
            if f.name == "pair_counts.npz":
                out[f"{name}/{f.name}"] = _npz_digest(f)
            elif f.name == "pairs.parquet":
                out[f"{name}/{f.name}"] = _parquet_digest(f)
            elif f.suffix in (".json", ".csv", ".md"):
                text = f.read_text(encoding="utf-8").replace(str(tmp_path), "TMP")
                if f.name == "metrics.json":  # the wall-clock timings are the only field that varies run to run
                    m = json.loads(text)
                    m.pop("timings", None)
                    text = json.dumps(m)
                out[f"{name}/{f.name}"] = _h(text.encode())
    table = BS.paired_bootstrap(results["a"].counts, results["b"].counts, n_resamples=40, seed=3,
                                phrases_a=results["a"].phrase_counts, phrases_b=results["b"].phrase_counts)
    out["paired.csv"] = _h(table.to_csv(index=False).encode())
    return out


def test_outputs_are_those_of_the_code_before_the_pipeline_refactor(tmp_path):
    got = digests(tmp_path)
    assert set(got) == set(EXPECTED)
    assert {k: v for k, v in got.items() if EXPECTED[k] != v} == {}


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for k, v in digests(Path(d)).items():
            print(f"    {k!r}: {v!r},")
