"""submission.zarr: what a team hands in — per-class scores and raw saliency maps, no weights.

Layout (contract §submission.zarr)::

    /                      attrs: xbench = {kind: "submission", schema: 1, model, method, ...provenance}
    /<dataset>/            attrs: classes = [...], score_kind = "logit"|"probability", unsupported = [...]
        case_id   (N,)        string
        scores    (N, C)      float32
        saliency  (N, C, h, w) float16 | float32   (whole original image, row 0 = top)
      optional, root xbench.schema_minor >= 1 (phrase rows, schemas/queries.py), all or none:
        query_id        (Q,)          string
        query_scores    (Q,)          float32   (the model's image-text similarity; not scored)
        query_saliency  (Q, 1, h, w)  float16 | float32
      or the dataset attribute phrases_unsupported = "<reason>" (a model that cannot take free text)
    scores only (root xbench.schema_minor >= 2 and xbench.scores_only = true): no saliency array in any dataset;
    valid only where no map is needed (round 2 of faithfulness, schemas/faithfulness.py)

:class:`SubmissionWriter` (schemas/submission_writer.py) writes it block by block (resumable, several processes at once);
:func:`validate_submission` checks a submission made by any tool; :func:`read_submission` opens
one for scoring.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import zarr

from xbench.schemas.errors import InvalidStoreError, Problem
from xbench.schemas.paths import store_path
from xbench.schemas.queries import QUERY_LEDGER, SUBMISSION_ARRAYS, UNSUPPORTED_ATTR, root_minor, validate_query_arrays
from xbench.schemas.remote import RemoteReadError
from xbench.schemas.store import (
    MAX_CASES,
    MAX_CLASSES,
    MAX_MAP_SIDE,
    check_array,
    check_strings,
    describe_missing,
    get_array,
    missing_chunks,
    open_for_validation,
    open_store_group,
    read_strings,
    scan_row_groups,
    stored_problems,
)

# the layout's constants, DatasetSpec and the writer live in schemas/submission_writer.py; importable from here too
from xbench.schemas.submission_writer import (MAP_DTYPES, SCORE_KINDS, SCORES_ONLY_MINOR, DatasetSpec, SubmissionWriter,
                                             replace_problem)

__all__ = ["MAP_DTYPES", "SCORE_KINDS", "SCORES_ONLY_MINOR", "DatasetSpec", "MissingCases", "Submission",
           "SubmissionDataset", "SubmissionWriter", "align", "align_queries", "coverage_problems", "read_submission",
           "replace_problem", "validate_submission"]


@dataclass(frozen=True)
class MissingCases(Problem):
    """The problem "cases of the ground truth are missing" of one dataset, with its numbers: ``present`` of
    the ground truth's ``of`` cases are in the submission (``xbench-score --allow-missing`` scores those)."""

    present: int = 0
    of: int = 0


@dataclass
class SubmissionDataset:
    name: str
    classes: tuple[str, ...]
    score_kind: str
    unsupported: tuple[str, ...]
    case_id: np.ndarray
    scores: np.ndarray
    saliency: zarr.Array | None  # None in a scores-only submission (round 2 of faithfulness)
    attrs: dict = field(default_factory=dict)
    query_id: np.ndarray | None = None  # phrase rows, when written
    query_scores: np.ndarray | None = None
    query_saliency: zarr.Array | None = None


@dataclass
class Submission:
    path: Path
    attrs: dict
    datasets: dict[str, SubmissionDataset]


# -- reading and validation ---------------------------------------------------------------
def read_submission(path: str | os.PathLike) -> Submission:
    """Open a submission for scoring (validate it first: this only reads)."""
    group = open_store_group(path)
    datasets = {}
    for name, g in sorted(group.groups()):
        datasets[name] = SubmissionDataset(
            name=name,
            classes=tuple(g.attrs.get("classes", ())),
            score_kind=g.attrs.get("score_kind", "logit"),
            unsupported=tuple(g.attrs.get("unsupported", ())),
            case_id=read_strings(g["case_id"]),
            scores=np.asarray(g["scores"][...], dtype=np.float32),
            saliency=g["saliency"] if "saliency" in g else None,  # None: a scores-only submission
            attrs=dict(g.attrs),
            query_id=read_strings(g["query_id"]) if "query_id" in g else None,
            query_scores=np.asarray(g["query_scores"][...], dtype=np.float32) if "query_scores" in g else None,
            query_saliency=g["query_saliency"] if "query_saliency" in g else None,
        )
    return Submission(path=store_path(path), attrs=dict(group.attrs.get("xbench", {})), datasets=datasets)


def validate_submission(path: str | os.PathLike, gt=None, *, datasets: Sequence[str] | None = None,
                        allow_missing: bool = False, scores_only: bool = False) -> list[Problem]:
    """Every problem that makes the submission at ``path`` break the contract.

    ``gt`` (a path or a :class:`~xbench.schemas.ground_truth.GroundTruth`) adds the checks
    against the ground truth: every dataset, case and class of the ground truth present, matched
    by value (a dataset or cases missing are :class:`MissingCases` problems, with their numbers).
    ``allow_missing``: cases and datasets of the ground truth may be missing (a smoke run scored on
    the cases it holds); every class, and every phrase row of the cases present, must still be there.
    ``datasets`` restricts the check to those dataset keys. Metadata is checked before
    any chunk is read, and chunks are read one at a time, so the cost is bounded by the size of
    a valid submission whatever the store declares. ``scores_only``: the caller needs no maps (round 2 of
    faithfulness), so a scores-only submission is accepted; otherwise it is refused with the reason.
    """
    where = str(path)
    group, groups, problems = open_for_validation(path, "submission")
    if group is None:
        return problems
    meta = group.attrs.get("xbench", {}) if isinstance(group.attrs.get("xbench"), dict) else {}
    for key in ("model", "method"):
        if meta and not isinstance(meta.get(key), str):
            problems.append(Problem(where, f"root attribute xbench.{key} must be a string"))
    declared = meta.get("scores_only", False) if meta else False
    if declared not in (True, False):
        problems.append(Problem(where, "root attribute xbench.scores_only must be true or false"))
        declared = False
    if declared and not scores_only:
        return problems + [Problem(where, "is a scores-only submission (no maps: round 2 of faithfulness); it can be "
                                          "scored only as xbench-score --faithfulness, beside the round-1 submission")]
    if declared and root_minor(group) < SCORES_ONLY_MINOR:
        problems.append(Problem(where, f"declares scores_only but the root attribute xbench.schema_minor is "
                                       f"{root_minor(group)}; scores-only submissions need schema_minor >= {SCORES_ONLY_MINOR}"))

    gt_obj = None
    if gt is not None:
        from xbench.schemas.ground_truth import GroundTruth, read_ground_truth

        gt_obj = gt if isinstance(gt, GroundTruth) else read_ground_truth(gt)
        wanted = list(gt_obj.datasets) if datasets is None else [d for d in datasets if d in gt_obj.datasets]
        for name in wanted:
            if name not in groups and not allow_missing:
                problems.append(MissingCases(f"{where}/{name}", "dataset of the ground truth is missing from the submission",
                                             present=0, of=len(gt_obj.datasets[name].case_id)))
    names = [n for n in groups if datasets is None or n in datasets]
    if gt_obj is not None:
        names = [n for n in names if n in gt_obj.datasets]
    any_present = False
    examples: dict[str, tuple[int, str, str]] = {}  # dataset -> (its case ids, one of them, one of the ground truth's)
    for name in names:
        seen: dict = {}
        problems += _validate_dataset(groups[name], f"{where}/{name}", gt_obj.datasets[name] if gt_obj else None,
                                      allow_missing=allow_missing, seen=seen, scores_only=bool(declared))
        problems += _validate_queries(groups[name], f"{where}/{name}", root_minor(group),
                                      gt_obj.datasets[name] if gt_obj else None,
                                      cases=seen.get("present") if allow_missing else None)
        any_present |= bool(np.any(seen.get("present", True)))
        if "mismatch" in seen:
            examples[name] = seen["mismatch"]
    if gt_obj is not None and allow_missing and not any_present and not problems:
        problems.append(Problem(where, f"holds none of the ground truth's cases (of {', '.join(wanted) or 'no dataset'})"
                                       f"{_mismatch_example(examples)}; there is nothing to score"))
    return problems


def no_match_text(n_sub: int, sub_example: str, gt_example: str, of: int | None = None,
                  other: str = "the ground truth") -> str:
    """The words for "none of the submission's case ids is one of the ground truth's" (or ``other``'s), with one
    id of each side (a submission made from another split's or dataset's images.zarr: --allow-missing has
    nothing to score)."""
    of_text = "" if of is None else f" ({of} case(s))"
    return (f"none of the submission's {n_sub} case id(s) is a case of {other}{of_text}: e.g. the submission "
            f"has {sub_example!r}, {other} {gt_example!r} (made from another split's or dataset's images.zarr?)")


def _mismatch_example(examples: dict[str, tuple[int, str, str]]) -> str:
    if not examples:
        return ""
    n_sub, sub_ex, gt_ex = next(iter(examples.values()))
    return "; " + no_match_text(sum(v[0] for v in examples.values()), sub_ex, gt_ex)


def _validate_queries(g: zarr.Group, where: str, minor: int, gt_ds, cases: np.ndarray | None = None) -> list[Problem]:
    """Phrase rows of a submission group: ids, finite scores and maps, every phrase of the ground truth
    (``cases``: only those of the ground truth's cases where it is True, for a submission scored on the cases
    it holds)."""
    problems: list[Problem] = []
    if QUERY_LEDGER in g:
        problems.append(Problem(where, "the writer did not finish this dataset's phrase rows (a query ledger is still present); resume the run"))
    reason = g.attrs.get(UNSUPPORTED_ATTR)
    if reason is not None and not isinstance(reason, str):
        problems.append(Problem(where, f"attribute '{UNSUPPORTED_ATTR}' must be a string (the reason)"))
    q = validate_query_arrays(g, where, "submission", SUBMISSION_ARRAYS, None, None, minor, problems)
    gt_q = getattr(gt_ds, "queries", None)
    if gt_q is not None and cases is not None:
        gt_q = _queries_of(gt_q, cases)
    if q is None:
        if gt_q is not None and reason is None and not any(SUBMISSION_ARRAYS[0] in p.where or "phrase" in p.message for p in problems):
            problems.append(Problem(where, f"the ground truth has {len(gt_q)} phrase rows but the submission has no "
                                           f"query arrays (nor the attribute '{UNSUPPORTED_ATTR}')"))
        return problems
    n = len(q)
    scores, sal = g["query_scores"], g["query_saliency"]
    ok = check_array(scores, f"{where}/query_scores", shape=(n,), dtypes=("float32",), problems=problems, whole=True)
    ok &= check_array(sal, f"{where}/query_saliency", shape=(n, 1, None, None), dtypes=MAP_DTYPES, problems=problems)
    if ok and not all(1 <= s <= MAX_MAP_SIDE for s in sal.shape[2:]):
        problems.append(Problem(f"{where}/query_saliency", f"map size {sal.shape[2]}x{sal.shape[3]} is outside the limit of 1..{MAX_MAP_SIDE} per side"))
        ok = False
    if not ok:
        return problems
    if not _chunks_present_and_safe(((scores, "query_scores"), (sal, "query_saliency")), where, problems):
        return problems
    _scan_scores(scores, where, "logit", problems, label="query_scores")
    _scan_saliency(sal, where, problems, label="query_saliency")
    if gt_q is not None:
        missing = sorted(set(gt_q.id.tolist()) - set(q.id.tolist()))
        if missing:
            problems.append(Problem(f"{where}/query_id", f"{len(missing)} phrase row(s) of the ground truth are missing, e.g. {', '.join(map(repr, missing[:3]))}"))
    return problems


def _chunks_present_and_safe(arrays, where: str, problems: list[Problem]) -> bool:
    """Metadata-level checks of stored chunks: none missing, none unsafe to decode; problems appended."""
    ok = True
    for arr, label in arrays:
        gone = missing_chunks(arr)
        if gone:
            problems.append(Problem(f"{where}/{label}", describe_missing(arr, gone)))
            ok = False
        unsafe = stored_problems(arr, f"{where}/{label}")
        problems += unsafe
        ok &= not unsafe
    return ok


def _queries_of(q, cases: np.ndarray):
    """The phrase rows of ``q`` whose image is one of ``cases`` (bool per ground-truth case); None when none is."""
    from xbench.schemas.queries import Queries

    keep = np.asarray(cases, bool)[np.asarray(q.case, np.int64)]
    if not keep.any():
        return None
    return Queries(*(None if a is None else np.asarray(a)[keep] for a in (q.id, q.case, q.category, q.text)))


def _validate_dataset(g: zarr.Group, where: str, gt_ds, *, allow_missing: bool = False,
                      seen: dict | None = None, scores_only: bool = False) -> list[Problem]:
    """``seen``: gets ``"present"``, whether each ground-truth case is in the submission (bool, once its case
    ids are read)."""
    problems: list[Problem] = []
    classes = g.attrs.get("classes")
    if not (isinstance(classes, list) and classes and all(isinstance(c, str) for c in classes)):
        problems.append(Problem(where, "attribute 'classes' must be a non-empty list of class names"))
        classes = None
    elif len(set(classes)) != len(classes):
        problems.append(Problem(where, "attribute 'classes' repeats a name"))
    elif len(classes) > MAX_CLASSES:
        problems.append(Problem(where, f"attribute 'classes' lists {len(classes)} names; the limit is {MAX_CLASSES}"))
        classes = None
    else:
        check_strings(np.asarray(classes, dtype=str), where, "class name", problems)
    score_kind = g.attrs.get("score_kind")
    if not isinstance(score_kind, str) or score_kind not in SCORE_KINDS:
        problems.append(Problem(where, f"attribute 'score_kind' must be 'logit' or 'probability', got {score_kind!r}"))
    unsupported = g.attrs.get("unsupported", [])
    if not (isinstance(unsupported, list) and all(isinstance(u, str) for u in unsupported)) or (classes and set(unsupported) - set(classes)):
        problems.append(Problem(where, "attribute 'unsupported' must list class names from 'classes'"))

    case_id = get_array(g, "case_id", where, problems)
    scores = get_array(g, "scores", where, problems)
    if scores_only:
        if "saliency" in g:
            problems.append(Problem(f"{where}/saliency", "a scores-only submission holds no maps"))
        saliency = None
    else:
        saliency = get_array(g, "saliency", where, problems)
    if "_blocks_done" in g:
        problems.append(Problem(where, "the writer did not finish this dataset (a block ledger is still present); resume the run, then finish"))
    if case_id is None or scores is None or (saliency is None and not scores_only):
        return problems

    # Metadata only, nothing read yet.
    ok = check_array(case_id, f"{where}/case_id", shape=(None,), dtypes=("string",), problems=problems, whole=True)
    n = case_id.shape[0] if case_id.ndim == 1 else None
    if n is not None and n > MAX_CASES:
        problems.append(Problem(f"{where}/case_id", f"declares {n} cases; the limit is {MAX_CASES}"))
        ok = False
    c = len(classes) if classes else None
    ok &= check_array(scores, f"{where}/scores", shape=(n, c), dtypes=("float32",), problems=problems, whole=True)
    if saliency is not None:
        ok &= check_array(saliency, f"{where}/saliency", shape=(n, c, None, None), dtypes=MAP_DTYPES, problems=problems)
    if saliency is not None and saliency.ndim == 4:
        h, w = saliency.shape[2:]
        if not (1 <= h <= MAX_MAP_SIDE and 1 <= w <= MAX_MAP_SIDE):
            problems.append(Problem(f"{where}/saliency", f"map size {h}x{w} is outside the limit of 1..{MAX_MAP_SIDE} per side"))
            ok = False
    if not ok or classes is None:
        return problems
    arrays = ((case_id, "case_id"), (scores, "scores")) + (((saliency, "saliency"),) if saliency is not None else ())
    if not _chunks_present_and_safe(arrays, where, problems):
        return problems

    # Data, one stored chunk at a time.
    try:
        ids = read_strings(case_id)
    except RemoteReadError:  # the server failed or broke a limit: its own line, not a corrupt array
        raise
    except Exception as exc:
        problems.append(Problem(f"{where}/case_id", f"unreadable ({type(exc).__name__}: {exc})"))
        return problems
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        dup = uniq[counts > 1]
        problems.append(Problem(f"{where}/case_id", f"{len(dup)} case id(s) repeat, e.g. {', '.join(repr(str(x)) for x in dup[:3])}"))
    if (ids == "").any():
        problems.append(Problem(f"{where}/case_id", "empty case id"))
    check_strings(ids, f"{where}/case_id", "case id", problems)
    _scan_scores(scores, where, score_kind, problems)
    if saliency is not None:
        _scan_saliency(saliency, where, problems)

    if gt_ds is not None:
        present = np.isin(np.asarray(gt_ds.case_id, dtype=str), ids)
        if seen is not None:
            seen["present"] = present
        missing = sorted(np.asarray(gt_ds.case_id, dtype=str)[~present].tolist())
        if missing and len(ids) and not present.any():  # no id matches: another split's or dataset's cases
            if seen is not None:
                seen["mismatch"] = (len(ids), str(min(ids.tolist())), missing[0])
            if not allow_missing:
                problems.append(MissingCases(f"{where}/case_id", no_match_text(len(ids), str(min(ids.tolist())),
                                                                               missing[0], of=int(present.size)),
                                             present=0, of=int(present.size)))
        elif missing and not allow_missing:
            problems.append(MissingCases(f"{where}/case_id", f"{len(missing)} case(s) of the ground truth are missing, e.g. "
                                         f"{', '.join(map(repr, missing[:3]))}",
                                         present=int(present.sum()), of=int(present.size)))
        lacking = [cl for cl in gt_ds.classes if cl not in classes]
        # the very lines `xbench-validate --images` prints (a team's check before it submits), misnamed-class hint
        # included: what the platform answers equals what the team saw locally
        problems += _listed(where, "class", lacking, _class_hint([c for c in classes if c not in gt_ds.classes]))
    return problems


def _scan_scores(scores: zarr.Array, where: str, score_kind, problems: list[Problem], label: str = "scores") -> None:
    bad_rows, out_of_range = [], []
    for start, block in scan_row_groups(scores, f"{where}/{label}", problems):
        finite = np.isfinite(block)
        if not finite.all():
            bad_rows.append(start + int(np.argwhere(~finite)[0][0]))
        if score_kind == "probability":
            inside = (block >= 0) & (block <= 1) | ~finite
            if not inside.all():
                out_of_range.append(start + int(np.argwhere(~inside)[0][0]))
    if bad_rows:
        problems.append(Problem(f"{where}/{label}", f"non-finite score(s) (NaN or inf), first at row {min(bad_rows)}"))
    if out_of_range:
        problems.append(Problem(f"{where}/scores", f"probability outside [0, 1], first at row {min(out_of_range)} (score_kind is 'probability'; use 'logit' for unbounded scores)"))


def _finite_rows(block: np.ndarray) -> np.ndarray:
    """Whether every value of each row of ``block`` is finite, (rows,) bool. float16 maps are tested on their
    bits (finite unless the exponent is all ones: NaN or inf), 2x faster than ``np.isfinite``, which widens
    each value first; the answer is the same."""
    flat = block.reshape(block.shape[0], -1)
    if flat.dtype == np.float16:
        return ((flat.view(np.uint16) & 0x7C00) != 0x7C00).all(axis=1)
    return np.isfinite(flat).all(axis=1)


def _scan_saliency(saliency: zarr.Array, where: str, problems: list[Problem], label: str = "saliency") -> None:
    first_bad = None
    for start, block in scan_row_groups(saliency, f"{where}/{label}", problems):
        finite = _finite_rows(block)
        if not finite.all():
            bad = start + int(np.argmin(finite))
            first_bad = bad if first_bad is None else min(first_bad, bad)
    if first_bad is not None:
        problems.append(Problem(f"{where}/{label}", f"non-finite map value(s) (NaN or inf), first in {'query' if label != 'saliency' else 'case'} row {first_bad}"))


def align_queries(sub_ds: SubmissionDataset, gt_ds, cases: np.ndarray | None = None) -> np.ndarray:
    """Row of the submission's phrase arrays for each phrase row of the ground truth (by id), int64 (Q_gt,).

    ``cases`` (bool per ground-truth case): only the phrase rows of those cases are looked up, the others
    get -1 (a submission scored on the cases it holds)."""
    row_of = {qid: i for i, qid in enumerate(sub_ds.query_id.tolist())} if sub_ds.query_id is not None else {}
    wanted = np.ones(len(gt_ds.queries), bool) if cases is None else np.asarray(cases, bool)[np.asarray(gt_ds.queries.case, np.int64)]
    try:
        return np.fromiter((row_of[q] if w else -1 for q, w in zip(gt_ds.queries.id.tolist(), wanted.tolist())),
                           dtype=np.int64, count=len(gt_ds.queries))
    except KeyError as exc:
        raise InvalidStoreError(Problem(sub_ds.name, f"phrase row {exc.args[0]!r} of the ground truth is missing from the submission")) from None


def align(sub_ds: SubmissionDataset, gt_ds, *, allow_missing: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the submission for each ground-truth case and class (by value).

    Returns ``case_rows`` (N_gt,) and ``class_cols`` (C_gt,), int64. Call after validation: a
    missing case or class raises :class:`InvalidStoreError`; with ``allow_missing`` a missing case gets
    row -1 instead (a submission scored on the cases it holds; a missing class still raises).
    """
    row_of = {cid: i for i, cid in enumerate(sub_ds.case_id.tolist())}
    col_of = {name: j for j, name in enumerate(sub_ds.classes)}
    try:
        if allow_missing:
            case_rows = np.fromiter((row_of.get(c, -1) for c in gt_ds.case_id.tolist()), dtype=np.int64,
                                    count=len(gt_ds.case_id))
        else:
            case_rows = np.fromiter((row_of[c] for c in gt_ds.case_id.tolist()), dtype=np.int64, count=len(gt_ds.case_id))
        class_cols = np.fromiter((col_of[c] for c in gt_ds.classes), dtype=np.int64, count=len(gt_ds.classes))
    except KeyError as exc:
        raise InvalidStoreError(Problem(sub_ds.name, f"{exc.args[0]!r} of the ground truth is missing from the submission")) from None
    return case_rows, class_cols


# -- coverage against the public images store (xbench-validate --images) ------------------------------------
#: ids of one kind (cases, classes, phrase rows) listed one a line per dataset before the rest are counted
COVERAGE_LISTED = 10


def _listed(where: str, what: str, names: Sequence[str], hint=None) -> list[Problem]:
    """One problem per missing name (sorted), the first :data:`COVERAGE_LISTED`, then one counted line."""
    hint = hint or (lambda name: "")
    lines = [Problem(where, f"{what} {name!r} is missing{hint(name)}") for name in names[:COVERAGE_LISTED]]
    if len(names) > COVERAGE_LISTED:
        lines.append(Problem(where, f"… and {len(names) - COVERAGE_LISTED} more missing {what}s "
                                    f"({len(names)} in all)"))
    return lines


def _class_hint(extra: Sequence[str]):
    """" (the submission has 'Effusion': misnamed?)" for a missing class that an extra class of the submission
    resembles (case and spacing aside, or close in spelling); otherwise :data:`UNSUPPORTED_HINT`, how to declare a
    class the model cannot score."""
    import difflib

    folded = {"".join(e.lower().split()): e for e in extra}

    def hint(name: str) -> str:
        close = folded.get("".join(name.lower().split()))
        if close is None:
            near = difflib.get_close_matches(name.lower(), [e.lower() for e in extra], n=1, cutoff=0.5)
            close = next((e for e in extra if near and e.lower() == near[0]), None)
        if close is None:  # a word of the class alone ("Effusion" for "Pleural effusion")
            words = set(name.lower().split())
            close = next((e for e in extra if set(e.lower().split()) & words), None)
        if close is not None:
            return f" (the submission has {close!r}: misnamed?)"
        return UNSUPPORTED_HINT
    return hint


#: the end of a missing-class line with no similar name in the submission: how to leave a class out on purpose
UNSUPPORTED_HINT = (" (a class the model cannot score stays listed in 'classes', with placeholder scores and maps, "
                    "and is named in the dataset's 'unsupported' list: its metrics are then null, not zero)")


def coverage_problems(path: str | os.PathLike, images, *, skip: Sequence[Problem] = ()) -> tuple[list[Problem], list[str]]:
    """Every case id, class and phrase row id that the public images store ``images`` (a path or an
    :class:`~xbench.schemas.images.ImagesStore`) says a submission must hold, checked against the submission at
    ``path``, before it is sent to be scored against the private ground truth (whose cases, classes and phrase
    rows are the images store's).

    Returns ``(problems, notes)``: one problem per missing dataset, class, case id and phrase row id (the first
    :data:`COVERAGE_LISTED` of a kind per dataset, then one counted line); notes, one counted line per dataset,
    for case ids of the submission that the images store lacks (they would not be scored). A dataset that
    declares ``phrases_unsupported`` needs no phrase rows. Call after :func:`validate_submission`, passing its
    problems as ``skip``: a dataset whose attributes or case ids it found broken is not read here.
    """
    from xbench.schemas.images import ImagesStore, read_images

    img = images if isinstance(images, ImagesStore) else read_images(images)
    where = str(path)
    broken = {p.where for p in skip}
    if where in broken:
        return [], []
    group = open_store_group(path)
    groups = dict(group.groups())
    problems: list[Problem] = []
    notes: list[str] = []
    for name, ds in sorted(img.datasets.items()):
        w = f"{where}/{name}"
        if name not in groups:
            problems.append(Problem(w, f"dataset of the images store is missing from the submission "
                                       f"({len(ds.case_id)} cases)"))
            continue
        if w in broken or f"{w}/case_id" in broken:
            continue
        g = groups[name]
        classes = list(g.attrs.get("classes") or [])
        lacking = [c for c in ds.classes if c not in classes]
        problems += _listed(w, "class", lacking, _class_hint([c for c in classes if c not in ds.classes]))
        ids = read_strings(g["case_id"])
        wanted = np.asarray(ds.case_id, dtype=str)
        missing = sorted(set(wanted.tolist()) - set(ids.tolist()))
        if missing and len(missing) == len(wanted) and len(ids):
            problems.append(Problem(f"{w}/case_id", no_match_text(len(ids), str(min(ids.tolist())), missing[0],
                                                                  of=len(wanted), other="the images store")))
        else:
            problems += _listed(f"{w}/case_id", "case", missing)
        extra = sorted(set(ids.tolist()) - set(wanted.tolist()))
        if extra and len(missing) < len(wanted):
            notes.append(f"{w}: {len(extra)} of the submission's {len(ids)} case ids are not in the images store "
                         f"(they would not be scored), e.g. {extra[0]!r}")
        if ds.queries is None or g.attrs.get(UNSUPPORTED_ATTR) is not None or f"{w}/query_id" in broken:
            continue
        if "query_id" not in g:
            problems.append(Problem(w, f"the images store has {len(ds.queries.id)} phrase rows but the submission has "
                                       f"no query arrays (nor the attribute '{UNSUPPORTED_ATTR}')"))
            continue
        have = set(read_strings(g["query_id"]).tolist())
        problems += _listed(f"{w}/query_id", "phrase row", sorted(set(ds.queries.id.tolist()) - have))
    return problems, notes
