"""The robustness track on phrase rows (contract §Robustness track, "Phrase rows"): every perturbed copy carries
the original phrase rows of its clean case under new opaque ids, and the scorer reports phrase grounding on them.

Brute force never calls the scorer's robustness code: the copies' phrase rows are written as an ordinary ground
truth (each copy a case, each of its phrase rows with its clean phrase's region) and submission (maps warped
back by numpy flips and quarter turns), and scored as plain phrase rows are.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from xbench.schemas import (DatasetSpec, SubmissionWriter, read_ground_truth, read_images, validate_ground_truth,
                            validate_images, write_ground_truth)
from xbench.schemas.queries import Queries
from xbench.score.scoring import score_submission
from nested import assert_nested_close

SPECS = "hflip,rotate:degrees=90,noise"


def _brute_warp(spec: str, m: np.ndarray) -> np.ndarray:
    name = spec.split(":")[0]
    if name == "hflip":
        return m[..., ::-1]
    if name == "rotate":
        return np.rot90(m, -1, axes=(-2, -1))
    return m


def _write_sub(path, ds: str, case_ids, classes, scores, maps, query_ids=(), q_scores=None, q_maps=None):
    w = SubmissionWriter.create(path, model="m", method="x", provenance={}, cases_per_block=7, map_dtype="float32",
                                datasets={ds: DatasetSpec(list(case_ids), list(classes), maps.shape[2:], "logit", (),
                                                          query_ids=list(query_ids))})
    for b in w.blocks_todo(ds):
        s, e = w.block_rows(ds, b)
        w.write_block(ds, b, scores[s:e], maps[s:e])
    if len(query_ids):
        for b in w.query_blocks_todo(ds):
            s, e = w.query_block_rows(ds, b)
            w.write_query_block(ds, b, q_scores[s:e], q_maps[s:e])
    w.finish()


@pytest.fixture(scope="module")
def phr(tmp_path_factory):
    from xbench.cli import main

    d = tmp_path_factory.mktemp("phr")
    res = CliRunner().invoke(main, ["prepare", "phantom", "--out", str(d), "--n-cases", "8", "--image-size", "32",
                                    "--grid", "16", "-q", "--workers", "1", "--option", "phrases=true", "--text-probes",
                                    "--perturb", SPECS, "--perturb-copies", "2", "--seed", "5"])
    assert res.exit_code == 0, res.output
    im = read_images(d / "images.zarr").datasets["phantom"]
    gt = read_ground_truth(d / "gt.zarr").datasets["phantom"]
    rng = np.random.default_rng(2)
    ids, qids = im.case_id.tolist(), im.queries.id.tolist()
    c = len(gt.classes)
    scores = rng.normal(size=(len(ids), c)).astype(np.float32)
    maps = rng.random((len(ids), c, 16, 16)).astype(np.float32)
    q_scores = rng.normal(size=len(qids)).astype(np.float32)
    q_maps = (np.round(rng.standard_normal((len(qids), 1, 16, 16)) * 2) / 2).astype(np.float32)  # ties
    _write_sub(d / "sub.zarr", "phantom", ids, gt.classes, scores, maps, qids, q_scores, q_maps)
    clean_q = [i for i, q in enumerate(qids) if q in set(gt.queries.id.tolist())]
    _write_sub(d / "sub_noq.zarr", "phantom", ids, gt.classes, scores, maps, [qids[i] for i in clean_q],
               q_scores[clean_q], q_maps[clean_q])
    return dict(dir=d, im=im, gt=gt, ids=ids, qids=qids, scores=scores, maps=maps, q_scores=q_scores, q_maps=q_maps)


def test_every_copy_carries_the_original_phrase_rows_of_its_clean_case(phr):
    d, im, gt = phr["dir"], phr["im"], phr["gt"]
    assert validate_images(d / "images.zarr") == [] and validate_ground_truth(d / "gt.zarr") == []
    t, n = gt.perturbations, len(gt.case_id)
    original = gt.query_probes.kind == ""
    assert (~original).any() and t.query_id is not None
    iq = im.queries
    row_of = {q: i for i, q in enumerate(iq.id.tolist())}
    for j, cid in enumerate(t.id.tolist()):
        want = [q for q in np.flatnonzero(original) if gt.queries.case[q] == t.case[j]]  # originals, in row order
        mine = np.flatnonzero(t.query_copy == j)
        assert t.query_of[mine].tolist() == want
        for r, q in zip(mine, want):
            k = row_of[t.query_id[r]]
            assert iq.case[k] == n + j and im.case_id[n + j] == cid  # the phrase row is on the copy's image
            clean = row_of[gt.queries.id[q]]
            assert iq.text[k] == iq.text[clean] and iq.category[k] == iq.category[clean]
            assert gt.queries.id[q] not in t.query_id[r] and str(gt.case_id[t.case[j]]) not in t.query_id[r]
    assert len(iq) == len(gt.queries) + original.sum() * 0 + len(t.query_id)
    assert len(gt.queries) == len(iq) - len(t.query_id)  # the ground truth's phrase rows are the clean ones


@pytest.fixture(scope="module")
def scored(phr):
    return score_submission(phr["dir"] / "sub.zarr", phr["dir"] / "gt.zarr", bootstrap=0).metrics


def _explicit(phr, tmp_path, spec_index: int):
    """The copies of one SPEC as an ordinary ground truth and submission of phrase rows (copies ordered by clean
    case, then id)."""
    gt, t = phr["gt"], phr["gt"].perturbations
    sel = [j for j in np.lexsort((t.id, t.case)).tolist() if t.group[j] == spec_index]
    row = {x: i for i, x in enumerate(phr["ids"])}
    qrow = {x: i for i, x in enumerate(phr["qids"])}
    ids, qid, qcase, qcat, qmask, qs, qm = [], [], [], [], [], [], []
    for v, j in enumerate(sel):
        ids.append(str(t.id[j]))
        for r in np.flatnonzero(t.query_copy == j):
            q = int(t.query_of[r])
            qid.append(str(t.query_id[r]))
            qcase.append(v)
            qcat.append(str(gt.queries.category[q]))
            qmask.append(np.asarray(gt.query_mask[q]))
            qs.append(phr["q_scores"][qrow[t.query_id[r]]])
            qm.append(_brute_warp(str(t.spec[j]), phr["q_maps"][qrow[t.query_id[r]]]))
    c = len(gt.classes)
    write_ground_truth(tmp_path / "gt.zarr", "phantom", case_ids=ids, classes=gt.classes,
                       labels=np.zeros((len(ids), c), np.int8), region_index=np.zeros((0, 2), np.int32),
                       region_mask=np.zeros((0, 16, 16), bool), orig_size=np.asarray(gt.orig_size)[t.case[sel]],
                       grid=(16, 16), queries=Queries.of(qid, qcase, qcat), query_mask=np.array(qmask))
    rows = [row[x] for x in ids]
    _write_sub(tmp_path / "sub.zarr", "phantom", ids, gt.classes, phr["scores"][rows], phr["maps"][rows], qid,
               np.array(qs, np.float32), np.array(qm, np.float32))
    return tmp_path / "sub.zarr", tmp_path / "gt.zarr"


def _close(a, b, where="phrases"):
    assert_nested_close(a, b, where, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("s", [0, 1, 2])
def test_phrase_grounding_on_the_copies_equals_an_explicit_store(phr, scored, tmp_path, s):
    from xbench.schemas.perturbations import parse_templates

    spec = parse_templates([SPECS.split(",")[s]])[0].text
    got = scored["robustness"]["datasets"]["phantom"]["specs"][spec]["phrases"]
    want = score_submission(*_explicit(phr, tmp_path, s), bootstrap=0).metrics["phrases"]["datasets"]["phantom"]
    gt = phr["gt"]
    k = [1, 1, 2][s]  # hflip and rotate:degrees=90 cannot differ: one copy each
    assert got["n_phrases"] == want["n_phrases"] == k * int((gt.query_probes.kind == "").sum())
    # images: the clean cases whose copies have phrase rows (the units the bootstrap draws), also per category
    orig = gt.query_probes.kind == ""
    assert got["n_images"] == len(set(gt.queries.case[orig].tolist()))
    for cat, e in got["categories"].items():
        if isinstance(e, dict) and "n_images" in e:
            assert e["n_images"] == len(set(gt.queries.case[orig & (gt.queries.category == cat)].tolist()))
    _close(_without(got, "n_images"), _without(want, "n_images"))


def _without(x, key):
    return {k: _without(v, key) for k, v in x.items() if k != key} if isinstance(x, dict) else x


def test_with_one_copy_per_case_the_phrase_intervals_are_those_of_the_explicit_store(phr, tmp_path):
    """K = 1 (hflip), copies ordered by clean case: a resample of clean images is a resample of their copies."""
    got = score_submission(phr["dir"] / "sub.zarr", phr["dir"] / "gt.zarr", bootstrap=25, seed=3).metrics
    got = got["robustness"]["datasets"]["phantom"]["specs"]["hflip"]["phrases"]
    want = score_submission(*_explicit(phr, tmp_path, 0), bootstrap=25, seed=3).metrics["phrases"]["datasets"]["phantom"]
    _close(got, want)
    assert "ci95" in got and got["ci95"]["pointing_game"] is not None


def test_the_robustness_table_shows_the_phrase_pointing_game_of_clean_rows_and_copies(scored):
    from xbench.score.sections.robustness_table import robustness_table

    t = robustness_table({"m": scored})
    col = [c[2] for c in t.columns].index("phrase_pointing_game")
    assert t.labels["phrase_pointing_game"] == "Phrase point"
    clean = scored["phrases"]["datasets"]["phantom"]["summary"]["pointing_game"]
    specs = scored["robustness"]["datasets"]["phantom"]["specs"]
    for (model, _, copies_of, _), cells in t.rows.items():
        want = clean if copies_of == "clean" else specs[copies_of]["phrases"]["summary"]["pointing_game"]
        assert cells[col].value == want
    no_phrases = {**scored, "robustness": {"datasets": {"phantom": {
        **scored["robustness"]["datasets"]["phantom"],
        "specs": {k: {kk: vv for kk, vv in v.items() if kk != "phrases"} for k, v in specs.items()}}}}}
    assert "phrase_pointing_game" not in [c[2] for c in robustness_table({"m": no_phrases}).columns]


def test_a_submission_without_the_copies_phrase_rows_says_why(phr, scored):
    m = score_submission(phr["dir"] / "sub_noq.zarr", phr["dir"] / "gt.zarr", bootstrap=0).metrics
    assert m["phrases"] == scored["phrases"]  # the clean phrase rows score as before
    for e in m["robustness"]["datasets"]["phantom"]["specs"].values():
        assert e["phrases"]["available"] is False and "phrase rows" in e["phrases"]["reason"]
        assert e["stability"] is not None


def test_without_phrase_rows_the_table_has_no_phrase_arrays(tmp_path):
    from xbench.cli import main

    res = CliRunner().invoke(main, ["prepare", "phantom", "--out", str(tmp_path), "--n-cases", "4", "--image-size", "32",
                                    "--grid", "16", "-q", "--workers", "1", "--perturb", "hflip"])
    assert res.exit_code == 0, res.output
    g = zarr.open_group(str(tmp_path / "gt.zarr"), mode="r")["phantom"]
    assert "perturb_id" in g and not any(a.startswith("perturb_query") for a in g.array_keys())


def _corrupt(src: Path, dst: Path, how: str) -> None:
    from xbench.schemas.store import consolidate

    shutil.copytree(src, dst)
    g = zarr.open_group(str(dst), mode="r+")["phantom"]
    if how == "array missing":
        shutil.rmtree(dst / "phantom" / "perturb_query_copy")
    elif how == "row out of range":
        g["perturb_query_of"][0] = 10**6
    elif how == "copies a probe":
        kind = np.array(g["query_probe_kind"][...].tolist(), dtype=str)
        g["perturb_query_of"][0] = int(np.flatnonzero(kind != "")[0])
    elif how == "id twice":
        g["perturb_query_id"][1] = str(g["perturb_query_id"][0])
    elif how == "id is a phrase id":
        g["perturb_query_id"][0] = str(g["query_id"][0])
    elif how == "wrong copy":
        copy = np.asarray(g["perturb_query_copy"][...])
        g["perturb_query_copy"][0] = int((copy[0] + 1) % g["perturb_id"].shape[0])
    elif how == "phrase case out of range":  # the phrase rows' own check says it; the copies' check must not crash
        g["query_case"][-1] = 10**15
    elif how == "not a number":
        del g["perturb_query_of"]
        a = g.create_array("perturb_query_of", shape=(g["perturb_query_id"].shape[0],), dtype="float32")
        a[:] = 0.5
    consolidate(dst)


@pytest.mark.parametrize("how", ["array missing", "row out of range", "copies a probe", "id twice", "id is a phrase id",
                                 "wrong copy", "not a number", "phrase case out of range"])
def test_an_inconsistent_copy_phrase_table_exits_2(phr, tmp_path, how):
    from xbench.cli import main

    bad = tmp_path / "gt.zarr"
    _corrupt(phr["dir"] / "gt.zarr", bad, how)
    res = CliRunner().invoke(main, ["validate", str(bad)])
    assert res.exit_code == 2 and ("query_case" if how == "phrase case out of range" else "perturb_query") in res.output
    assert "Traceback" not in res.output, res.output
    res = CliRunner().invoke(main, ["score", str(phr["dir"] / "sub.zarr"), "--gt", str(bad), "--out",
                                    str(tmp_path / "res"), "-q"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert not (tmp_path / "res").exists()
