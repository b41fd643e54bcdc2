"""The scorer's input errors are typed (issue 25 item 3), undefined metrics are counted notes rather than Python
warnings (issue 27 item 6), and messages speak the user's terms (issue 27 item 10).

Each converted error path is run through the command (exit 2, one line, nothing written) or, for the Python
API, checked to be an InputError the CLI layer classifies as exit 2.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from score_stores import make_gt, make_submission, run_score_cli
from xbench.schemas._cli import classify
from xbench.schemas.errors import InputError, UnknownNameError
from xbench.score.errors import GroundTruthMismatchError, ScoreInputError, ThresholdsError

run = run_score_cli


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("errors")
    gt = make_gt(d / "gt.zarr", seed=5)
    make_submission(d / "sub.zarr", gt, seed=6)
    return d


def _one_line_exit_2(args, capsys, tmp_path, *needles):
    code, out, err = run([*args, "--out", tmp_path / "never"], capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("xbench-score: error: "), err
    assert all(n in lines[0] for n in needles), (needles, lines[0])
    assert "Traceback" not in err and "Error:" not in lines[0].split("error: ", 1)[1][:20]
    assert not (tmp_path / "never").exists()
    return lines[0]


def _write_metrics(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize("content,needles", [
    ("{not json", ("not valid JSON",)),
    ('{"datasets": {}, "datasets": {}}', ("twice",)),  # the bounded reader refuses duplicate keys
    ({"overall": {}}, ("must come from an xbench metrics.json",)),
    ({"datasets": {"phantom": {"classes": {"Cardiomegaly": {"tau_dice": "0.5", "tau_iou": 0.5}}}}},
     ("must come from an xbench metrics.json", "numbers")),
])
def test_unusable_thresholds_file_is_one_line(stores, tmp_path, capsys, content, needles):
    m = _write_metrics(tmp_path / "m.json", content)
    _one_line_exit_2([stores / "sub.zarr", "--gt", stores / "gt.zarr", "--thresholds-from", m], capsys, tmp_path,
                     *needles)


def test_thresholds_off_the_grid_or_lacking_a_class_are_one_line(stores, tmp_path, capsys):
    code, _, err = run([stores / "sub.zarr", "--gt", stores / "gt.zarr", "--out", tmp_path / "val", "--bootstrap", "0",
                        "--quiet"], capsys)
    assert code == 0, err
    metrics = json.loads((tmp_path / "val" / "metrics.json").read_text())
    cls = next(c for c in metrics["datasets"]["phantom"]["classes"].values() if c["tau_dice"] is not None)
    cls["tau_dice"] = 0.375
    off = _write_metrics(tmp_path / "off.json", metrics)
    _one_line_exit_2([stores / "sub.zarr", "--gt", stores / "gt.zarr", "--thresholds-from", off], capsys, tmp_path,
                     "0.375", "not on the grid")
    cls["tau_dice"] = 1e308  # finite, but far off the grid (no overflow on the way)
    _one_line_exit_2([stores / "sub.zarr", "--gt", stores / "gt.zarr", "--thresholds-from",
                      _write_metrics(tmp_path / "huge.json", metrics)], capsys, tmp_path, "not on the grid")
    del metrics["datasets"]["phantom"]
    lacking = _write_metrics(tmp_path / "lacking.json", metrics)
    _one_line_exit_2([stores / "sub.zarr", "--gt", stores / "gt.zarr", "--thresholds-from", lacking], capsys,
                     tmp_path, "lack tau_dice/tau_iou for phantom/", "drop --thresholds-from")


def test_unknown_dataset_key_is_one_line_with_the_close_match(stores, tmp_path, capsys):
    line = _one_line_exit_2([stores / "sub.zarr", "--gt", stores / "gt.zarr", "--datasets", "phantm"], capsys,
                            tmp_path, "phantm", "not in the ground truth")
    assert line.endswith("did you mean phantom?")


def test_library_input_errors_are_typed_and_classified_as_exit_2(stores, tmp_path):
    from xbench.score.sections.paired import paired_bootstrap
    from xbench.score.metrics.grounding import threshold_index
    from xbench.score.outputs.folder import write_outputs
    from xbench.score.scoring import score_submission, thresholds_from_metrics

    res = score_submission(stores / "sub.zarr", stores / "gt.zarr", bootstrap=0)
    raised = []
    for call, kind in [
        (lambda: score_submission(stores / "sub.zarr", stores / "gt.zarr", datasets=["nope"]), UnknownNameError),
        (lambda: score_submission(stores / "sub.zarr", stores / "gt.zarr",
                                  metric_params={"pointing_tolerance": -1.0}), ScoreInputError),
        (lambda: write_outputs(res, tmp_path / "o", formats=("xbench", "kaggle")), ScoreInputError),
        (lambda: thresholds_from_metrics({"no": "datasets"}), ThresholdsError),
        (lambda: thresholds_from_metrics(tmp_path / "absent.json"), ThresholdsError),
        (lambda: threshold_index(float("nan")), ThresholdsError),
        (lambda: paired_bootstrap(res.counts, {"phantom": res.counts["chexlocalize"].__class__(
            **{**res.counts["chexlocalize"].__dict__, "name": "phantom"})}, bootstrap=2), GroundTruthMismatchError),
    ]:
        with pytest.raises(kind) as info:
            call()
        raised.append(info.value)
    for exc in raised:
        assert isinstance(exc, InputError)
        failure = classify(exc)
        assert failure.code == 2 and failure.problems and not failure.problems[0].startswith("unexpected"), exc
    # the typed errors are still ValueErrors, so a caller that caught ValueError before still does
    assert all(isinstance(e, ValueError) for e in raised if not isinstance(e, UnknownNameError))
    assert not (tmp_path / "o").exists()


def test_no_plain_value_error_for_input_in_the_scorer_modules():
    """Every ``raise ValueError`` left in the scorer's modules is a caller's programming error (array shapes
    handed to a kernel), listed here; anything a file or an option can cause raises a typed error."""
    root = Path(__file__).resolve().parents[2] / "score"
    allowed = {"kernels/maps.py", "metrics/localisation.py", "metrics/registry.py", "warm.py",
               "metrics/recognition.py", "metrics/recognition_sums.py", "kernels/cnr.py", "metrics/grounding.py",
               "kernels/pair_stats.py", "sections/plugins/__init__.py", "metrics/complexity.py",
               "metrics/gaze.py",  # the saliency measures' argument checks (shapes handed by the gaze section)
               "report/figures.py"}  # its bins argument, checked by the report's option (a Choice) before it
    found = {}
    for path in root.rglob("*.py"):
        n = path.read_text().count("raise ValueError(")
        if n:
            found[path.relative_to(root).as_posix()] = n
    assert found and set(found) <= allowed, found
    assert "scoring.py" not in found and "cli.py" not in found and "outputs/folder.py" not in found
    assert "resampling/bootstrap.py" not in found


# -- undefined metrics: counted notes, no Python warning --------------------------------------------------------

def test_single_label_class_gives_null_and_one_counted_note_and_no_warning(tmp_path):
    labels = np.array([[1, 0, 1], [1, 0, 0], [1, 0, 1], [1, 0, 0], [1, 0, 1]])
    make_gt(tmp_path / "gt.zarr", datasets={"phantom": dict(n=5, classes=["Effusion", "Mass", "Nodule"],
                                                            grid=(6, 6), labels=labels)})
    gt = make_gt(tmp_path / "gt2.zarr", datasets={"phantom": dict(n=5, classes=["Effusion", "Mass", "Nodule"],
                                                                  grid=(6, 6), labels=labels)})
    make_submission(tmp_path / "sub.zarr", gt)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONWARNINGS": "default"}
    proc = subprocess.run([str(bin_dir / "xbench-score"), str(tmp_path / "sub.zarr"), "--gt", str(tmp_path / "gt.zarr"),
                           "--out", str(tmp_path / "r"), "--bootstrap", "20"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and "warning" not in proc.stderr, proc.stderr
    assert "scoring.py" not in proc.stderr and ".py:" not in proc.stderr
    notes = [ln for ln in proc.stderr.splitlines() if ln.startswith("note: ")]
    assert notes == [
        "note: phantom: grounding metrics undefined for 1 class (no positive case with a region: Mass); "
        "reported as null and left out of the means",
        "note: phantom: AUROC and AUPRC undefined for 2 classes (one label value only: Effusion, Mass); "
        "reported as null and left out of the means"]
    cls = json.loads((tmp_path / "r" / "metrics.json").read_text())["datasets"]["phantom"]["classes"]
    assert cls["Effusion"]["auroc"] is None and cls["Effusion"]["auprc"] is None and cls["Mass"]["auroc"] is None
    assert cls["Mass"]["pointing_game"] is None and cls["Mass"]["dice_best"] is None
    assert cls["Nodule"]["auroc"] is not None


def test_a_warning_that_reaches_the_command_is_one_line_without_source(stores, tmp_path, capsys, monkeypatch):
    import warnings

    from xbench.score import scoring

    real = scoring.score_submission

    def noisy(*a, **k):
        warnings.warn("Mean of empty slice\nforged: line", RuntimeWarning, stacklevel=1)
        return real(*a, **k)

    monkeypatch.setattr(scoring, "score_submission", noisy)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        code, _, err = run([stores / "sub.zarr", "--gt", stores / "gt.zarr", "--out", tmp_path / "r", "--bootstrap",
                            "0", "--quiet"], capsys)
    assert code == 0, err
    assert err.splitlines() == ["xbench-score: warning: Mean of empty slice\\nforged: line"]


# -- messages in the user's terms --------------------------------------------------------------------------------

def test_a_store_written_with_another_specification_names_the_flag(tmp_path):
    from xbench.schemas import DatasetSpec, InvalidStoreError, SubmissionWriter

    spec = {"phantom": DatasetSpec(["a", "b"], ["x"], (2, 2))}
    SubmissionWriter.create(tmp_path / "s.zarr", model="m", method="x", datasets=spec)
    with pytest.raises(InvalidStoreError) as info:
        SubmissionWriter.create(tmp_path / "s.zarr", model="other", method="x", datasets=spec)
    assert "pass --overwrite" in str(info.value) and "pass overwrite" not in str(info.value)


def test_the_command_validates_each_input_once(stores, tmp_path, capsys, monkeypatch):
    """xbench-score validates through the library's check_inputs once, then scores without validating again
    (it used to validate in the command, and the library's untyped errors made it repeat checks)."""
    import xbench.schemas as S

    calls = {"gt": [], "sub": []}
    real_gt, real_sub = S.validate_ground_truth, S.validate_submission

    def gt(path, **kw):
        calls["gt"].append(kw)
        return real_gt(path, **kw)

    def sub(path, *a, **kw):
        calls["sub"].append(str(path))
        return real_sub(path, *a, **kw)

    monkeypatch.setattr(S, "validate_ground_truth", gt)
    monkeypatch.setattr(S, "validate_submission", sub)
    make_submission(tmp_path / "b.zarr", make_gt(tmp_path / "unused.zarr", seed=5), seed=9)
    code, _, err = run([stores / "sub.zarr", tmp_path / "b.zarr", "--gt", stores / "gt.zarr", "--out", tmp_path / "r",
                        "--bootstrap", "0", "--quiet"], capsys)
    assert code == 0, err
    assert calls["gt"] == [{"scan_masks": False}]
    assert calls["sub"] == [str(stores / "sub.zarr"), str(tmp_path / "b.zarr")]
