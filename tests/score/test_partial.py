"""Scoring the cases a submission holds (``xbench-score --allow-missing``, issue 27 item 8).

The oracle is the definition: a run on the cases present must give exactly what a full run gives against a
ground truth that holds only those cases (written anew by ``restrict_gt``): every metric, every interval
(same resamples: same number of cases, same seed), the pairs table and the counts, bit for bit. Only the
run's own record differs: the ground truth's hash and path, and the "partial" keys that say what was scored.
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest

from score_stores import make_gt, make_submission, restrict_gt, run_score_cli, subset_submission
from xbench.schemas import InvalidStoreError
from xbench.score.errors import MissingCasesError
from xbench.score.scoring import PARTIAL_METRICS_MINOR, score_submission, thresholds_from_metrics


def _record_free(metrics: dict) -> dict:
    """``metrics`` without what records the run rather than scores it (hash, paths, versions, "partial")."""
    m = copy.deepcopy(metrics)
    m.pop("partial", None)
    for key in ("gt_sha256", "inputs", "schema_minor"):
        m["xbench"].pop(key, None)
    for d in m["datasets"].values():
        d.pop("partial", None)
    for d in m.get("phrases", {}).get("datasets", {}).values():
        d.pop("partial", None)
    return m


def _assert_same_scores(partial, reference):
    assert _record_free(partial.metrics) == _record_free(reference.metrics)
    pd.testing.assert_frame_equal(partial.pairs, reference.pairs)
    assert sorted(partial.counts) == sorted(reference.counts)
    for name, dc in partial.counts.items():
        ref = reference.counts[name]
        for field in ("case_id", "labels", "prob", "pair_case", "pair_class", "region_pixels", "hit", "b", "br"):
            np.testing.assert_array_equal(getattr(dc, field), getattr(ref, field), err_msg=f"{name}.{field}")
        assert dc.extra.keys() == ref.extra.keys()
        for k in dc.extra:
            np.testing.assert_array_equal(dc.extra[k], ref.extra[k])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """A ground truth of two datasets, and a submission of 9 of phantom's 14 cases and all of chexlocalize."""
    d = tmp_path_factory.mktemp("partial")
    gt = make_gt(d / "gt.zarr", seed=11)
    make_submission(d / "full.zarr", gt, seed=12)
    ids = gt["phantom"].case_ids
    keep = {"phantom": [ids[i] for i in (0, 2, 3, 5, 7, 8, 10, 12, 13)], "chexlocalize": gt["chexlocalize"].case_ids}
    subset_submission(d / "full.zarr", d / "smoke.zarr", keep)
    restrict_gt(d / "gt.zarr", d / "gt_present.zarr", keep)
    return d, gt, keep


def test_the_cases_present_score_as_against_a_ground_truth_of_only_them(smoke):
    d, _, _ = smoke
    got = score_submission(d / "smoke.zarr", d / "gt.zarr", bootstrap=40, seed=5, allow_missing=True)
    want = score_submission(d / "smoke.zarr", d / "gt_present.zarr", bootstrap=40, seed=5)
    _assert_same_scores(got, want)
    m = got.metrics
    assert m["datasets"]["phantom"]["partial"] == {"cases": 9, "of": 14}
    assert m["datasets"]["phantom"]["n_cases"] == 9
    assert list(m["datasets"]["phantom"])[:3] == ["n_cases", "partial", "grid"]
    assert "partial" not in m["datasets"]["chexlocalize"]  # complete
    assert list(m)[:2] == ["xbench", "partial"]
    assert m["partial"]["cases"] == 18 and m["partial"]["of"] == 23
    assert m["partial"]["note"].startswith("partial: 18 of 23 cases")
    assert m["xbench"]["schema_minor"] == PARTIAL_METRICS_MINOR
    assert "partial" not in want.metrics  # a full run has no such key


def test_threshold_transfer_and_tolerance_on_a_partial_run_match_the_reference(smoke):
    d, _, _ = smoke
    first = score_submission(d / "full.zarr", d / "gt.zarr", bootstrap=0)
    kw = {"bootstrap": 15, "seed": 2, "thresholds": thresholds_from_metrics(first.metrics),
          "metric_params": {"pointing_tolerance": 3.0}}
    _assert_same_scores(score_submission(d / "smoke.zarr", d / "gt.zarr", allow_missing=True, **kw),
                        score_submission(d / "smoke.zarr", d / "gt_present.zarr", **kw))


def test_without_allow_missing_the_cases_are_still_refused_with_their_numbers(smoke):
    d, _, _ = smoke
    with pytest.raises(MissingCasesError) as info:
        score_submission(d / "smoke.zarr", d / "gt.zarr", bootstrap=0)
    assert info.value.coverage == {str(d / "smoke.zarr"): (18, 23)}
    assert any("5 case(s) of the ground truth are missing" in str(p) for p in info.value.problems)


def test_a_dataset_without_any_case_is_not_scored_and_said_so(smoke, tmp_path):
    d, gt, _ = smoke
    subset_submission(d / "full.zarr", tmp_path / "one.zarr", {"phantom": gt["phantom"].case_ids[:4]})
    res = score_submission(tmp_path / "one.zarr", d / "gt.zarr", bootstrap=0, allow_missing=True)
    m = res.metrics
    assert list(m["datasets"]) == ["phantom"] and m["xbench"]["datasets"] == ["phantom"]
    assert m["partial"]["not_scored"] == ["chexlocalize"]
    assert m["partial"]["cases"] == 4 and m["partial"]["of"] == 23
    assert "not scored (no case in the submission): chexlocalize" in m["partial"]["note"]
    # --datasets chexlocalize then leaves nothing to score: refused, not an empty metrics.json
    with pytest.raises(InvalidStoreError, match="holds none of the ground truth.s cases \\(of chexlocalize\\)"):
        score_submission(tmp_path / "one.zarr", d / "gt.zarr", bootstrap=0, allow_missing=True,
                         datasets=["chexlocalize"])


def test_a_missing_class_is_still_refused_with_allow_missing(smoke, tmp_path):
    d, gt, _ = smoke
    make_submission(tmp_path / "fewer.zarr", {"phantom": gt["phantom"]}, seed=3)
    import zarr

    g = zarr.open_group(str(tmp_path / "fewer.zarr"), mode="r+")
    g["phantom"].attrs["classes"] = ["a", "b", "c"]
    with pytest.raises(InvalidStoreError, match="class 'Cardiomegaly' is missing"):
        score_submission(tmp_path / "fewer.zarr", d / "gt.zarr", bootstrap=0, allow_missing=True)


def test_phrase_rows_of_the_images_present_score_as_the_reference(tmp_path):
    from test_phrases import make_phrase_stores

    gt, sub, q, _, _ = make_phrase_stores(tmp_path / "s", seed=4, n=10)
    ids = [f"img-{i:02d}" for i in range(10)]
    keep = {"ms_cxr": [ids[i] for i in (1, 2, 4, 5, 8)]}
    assert 0 < np.isin(q.case, [1, 2, 4, 5, 8]).sum() < len(q)  # some phrase rows present, some not
    subset_submission(sub, tmp_path / "smoke.zarr", keep)
    restrict_gt(gt, tmp_path / "gt_present.zarr", keep)
    got = score_submission(tmp_path / "smoke.zarr", gt, bootstrap=30, seed=1, allow_missing=True)
    want = score_submission(tmp_path / "smoke.zarr", tmp_path / "gt_present.zarr", bootstrap=30, seed=1)
    _assert_same_scores(got, want)
    pg, pw = got.phrase_counts["ms_cxr"], want.phrase_counts["ms_cxr"]
    np.testing.assert_array_equal(pg.image, pw.image)
    assert pg.n_images == pw.n_images == 5
    assert got.metrics["phrases"]["datasets"]["ms_cxr"]["partial"] == {"cases": 5, "of": 10}
    assert got.metrics["phrases"]["datasets"]["ms_cxr"]["ci95"] == want.metrics["phrases"]["datasets"]["ms_cxr"]["ci95"]


def test_phrase_rows_of_a_present_image_must_be_there(tmp_path):
    from test_phrases import make_phrase_stores

    gt, sub, q, _, _ = make_phrase_stores(tmp_path / "s", seed=4, n=10)
    ids = [f"img-{i:02d}" for i in range(10)]
    subset_submission(sub, tmp_path / "smoke.zarr", {"ms_cxr": ids[:6]})
    subset_submission(sub, tmp_path / "phraseless.zarr", {"ms_cxr": ids[:6]})
    # a submission holding the cases but none of their phrase rows (no query arrays, no reason)
    import shutil

    import zarr

    shutil.rmtree(tmp_path / "phraseless.zarr")
    from xbench.schemas import DatasetSpec, SubmissionWriter

    w = SubmissionWriter.create(tmp_path / "phraseless.zarr", model="m", method="x", provenance={},
                                datasets={"ms_cxr": DatasetSpec(ids[:6], ["Atelectasis", "Edema", "Pneumothorax"],
                                                                (5, 6))}, cases_per_block=3, map_dtype="float32")
    for b in w.blocks_todo("ms_cxr"):
        a, e = w.block_rows("ms_cxr", b)
        w.write_block("ms_cxr", b, np.zeros((e - a, 3)), np.random.default_rng(b).random((e - a, 3, 5, 6)))
    w.finish()
    assert zarr.open_group(str(tmp_path / "phraseless.zarr"))["ms_cxr"].attrs.get("phrases_unsupported") is None
    with pytest.raises(InvalidStoreError, match="phrase rows but the submission has no query arrays"):
        score_submission(tmp_path / "phraseless.zarr", gt, bootstrap=0, allow_missing=True)
    assert score_submission(tmp_path / "smoke.zarr", gt, bootstrap=0, allow_missing=True).metrics["phrases"]


# -- the command ---------------------------------------------------------------------------------------------

def test_the_refusal_says_how_to_score_the_cases_present(smoke, tmp_path, capsys):
    d, _, _ = smoke
    code, _, err = run_score_cli([d / "smoke.zarr", "--gt", d / "gt.zarr", "--out", tmp_path / "r"], capsys)
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert "5 case(s) of the ground truth are missing" in lines[0]
    assert lines[-1] == "xbench-score: nothing was written; pass --allow-missing to score the 18 of 23 cases present"
    assert not (tmp_path / "r").exists()


def test_allow_missing_writes_partial_everywhere_its_numbers_appear(smoke, tmp_path, capsys):
    d, _, _ = smoke
    code, out, err = run_score_cli([d / "smoke.zarr", "--gt", d / "gt.zarr", "--out", tmp_path / "r",
                                    "--bootstrap", "10", "--allow-missing"], capsys)
    assert code == 0, err
    assert "  partial: 18 of 23 cases (phantom 9 of 14)" in out.splitlines()
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["datasets"]["phantom"]["partial"] == {"cases": 9, "of": 14}
    for stem in ("table1_grounding", "table1_grounding_fixed", "table_recognition", "table_pointing_phantom",
                 "table_lesion_size"):
        for ext in ("md", "csv"):
            text = (tmp_path / "r" / f"{stem}.{ext}").read_text()
            assert "partial: 9 of 14 cases" in text, (stem, ext)
    assert "partial" not in (tmp_path / "r" / "table_pointing_chexlocalize.md").read_text()
    assert "Mean (partial: 18 of 23 cases)" in (tmp_path / "r" / "table_recognition.md").read_text()
    code, out, err = run_score_cli([d / "smoke.zarr", "--gt", d / "gt.zarr", "--out", tmp_path / "j",
                                    "--bootstrap", "0", "--allow-missing", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["partial"]["cases"] == 18


def test_a_full_run_with_allow_missing_is_the_full_run(smoke, tmp_path, capsys):
    d, _, _ = smoke
    for name, extra in (("plain", []), ("allow", ["--allow-missing"])):
        code, _, err = run_score_cli([d / "full.zarr", "--gt", d / "gt.zarr", "--out", tmp_path / name,
                                      "--bootstrap", "10", "--quiet", *extra], capsys)
        assert code == 0, err
    for f in (tmp_path / "plain").iterdir():
        if f.name != "xbench-output.json":
            assert f.read_bytes() == (tmp_path / "allow" / f.name).read_bytes(), f.name
    assert '"partial"' not in (tmp_path / "plain" / "metrics.json").read_text()


def test_missing_cases_beside_other_problems_are_hinted_after_them(smoke, tmp_path, capsys):
    import zarr

    d, gt, keep = smoke
    subset_submission(d / "full.zarr", tmp_path / "bad.zarr", keep)
    g = zarr.open_group(str(tmp_path / "bad.zarr"), mode="r+")
    g["phantom"].attrs["score_kind"] = "odds"
    code, _, err = run_score_cli([tmp_path / "bad.zarr", "--gt", d / "gt.zarr", "--out", tmp_path / "r"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and any("score_kind" in ln for ln in lines)
    assert lines[-1] == ("xbench-score: invalid input (problems above); nothing was written; once the others are "
                         "fixed, --allow-missing scores the 18 of 23 cases present")


def test_nothing_to_score_is_refused_before_anything_is_written(smoke, tmp_path, capsys):
    d, gt, _ = smoke
    subset_submission(d / "full.zarr", tmp_path / "one.zarr", {"phantom": gt["phantom"].case_ids[:4]})
    code, _, err = run_score_cli([tmp_path / "one.zarr", "--gt", d / "gt.zarr", "--out", tmp_path / "r",
                                  "--datasets", "chexlocalize", "--allow-missing"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and "holds none of the ground truth's cases (of chexlocalize); there is nothing to score" in lines[0]
    assert not (tmp_path / "r").exists()


def test_unsupported_phrases_of_a_partial_run_count_the_images_present(tmp_path):
    from test_phrases import make_phrase_stores

    gt, sub, q, _, _ = make_phrase_stores(tmp_path / "s", seed=4, n=10, unsupported="no text encoder")
    ids = [f"img-{i:02d}" for i in range(10)]
    subset_submission(sub, tmp_path / "smoke.zarr", {"ms_cxr": ids[:5]})
    entry = score_submission(tmp_path / "smoke.zarr", gt, bootstrap=0, allow_missing=True).metrics["phrases"]["datasets"]["ms_cxr"]
    assert entry["unsupported"] is True and entry["n_phrases"] == int(np.count_nonzero(q.case < 5))
    assert list(entry)[:2] == ["n_phrases", "partial"] and entry["partial"] == {"cases": 5, "of": 10}
