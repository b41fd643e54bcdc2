"""Report outputs that say what they mean (issue 46 item 3): a constant score is not "second best", an untrained
model is named so on every board, a report mixing resample counts says which model has which."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from xbench.score.outputs.leaderboard import UNTRAINED_SUFFIX, is_untrained
from xbench.score.outputs.tables import recognition_table


def _result(name: str, auroc: float, prob: np.ndarray, bootstrap: int = 200, config=None) -> SimpleNamespace:
    metrics = {"overall": {"auroc": auroc}, "datasets": {"phantom": {"summary": {"auroc": auroc}}},
               "xbench": {"bootstrap": {"n_resamples": bootstrap}, "submission": {"config": config or {}}}}
    return SimpleNamespace(name=name, metrics=metrics, counts={"phantom": SimpleNamespace(prob=prob)})


def _marks(table, column_key="auroc", group="phantom"):
    j = next(i for i, (_, g, k) in enumerate(table.columns) if k == column_key and g == group)
    return {name: cells[j].mark for name, cells in table.rows.items()}


def test_a_constant_score_is_not_marked_second_best():
    rng = np.random.default_rng(0)
    results = [_result("model", 0.81, rng.random((8, 2))), _result("center", 0.50, np.full((8, 2), 0.5)),
               _result("weak", 0.46, rng.random((8, 2))), _result("weaker", 0.41, rng.random((8, 2)))]
    marks = _marks(recognition_table(results))
    # center's 0.50 is chance by construction: no mark; the second best is the best of the others
    assert marks == {"model": "best", "center": None, "weak": "second", "weaker": None}
    # with varying scores the same 0.50 would be ranked
    results[1] = _result("center", 0.50, rng.random((8, 2)))
    assert _marks(recognition_table(results))["center"] == "second"


def test_nan_columns_of_unsupported_classes_do_not_make_scores_look_varied():
    p = np.full((6, 3), 0.5)
    p[:, 2] = np.nan  # an unsupported class
    results = [_result("a", 0.9, np.random.default_rng(1).random((6, 3))), _result("c", 0.5, p),
               _result("b", 0.4, np.random.default_rng(2).random((6, 3)))]
    assert _marks(recognition_table(results))["c"] is None


def test_untrained_is_read_from_the_recorded_config():
    assert is_untrained({"xbench": {"submission": {"config": {"weights": "random"}}}})
    assert is_untrained({"xbench": {"submission": {"config": {"random_init": True}}}})
    assert not is_untrained({"xbench": {"submission": {"config": {"weights": "hf:org/model"}}}})
    assert not is_untrained({}) and not is_untrained({"xbench": "junk"})
    assert UNTRAINED_SUFFIX == " (untrained)"


def test_mixed_resample_counts_name_each_model():
    from xbench.score.report.html import _resamples_note

    same = [_result("a", 0.5, np.zeros((2, 2))), _result("b", 0.5, np.zeros((2, 2)))]
    assert _resamples_note(same, 0) == "Bootstrap: scorer intervals: 200 resamples. "
    mixed = [_result("a", 0.5, np.zeros((2, 2)), bootstrap=200), _result("b", 0.5, np.zeros((2, 2)), bootstrap=1000),
             _result("c", 0.5, np.zeros((2, 2)), bootstrap=0)]
    note = _resamples_note(mixed, 0)
    assert "a 200, b 1000, c none resamples" in note and "mixed" in note


def _row(scope, metric, a, cls=None):
    from xbench.score.report.paired import ComparisonRow

    return ComparisonRow(scope, cls, metric, a, a / 2, a / 2, a / 4, 3 * a / 4, 0.01, 200)


def test_one_dataset_prints_its_summary_once_under_overall():
    from xbench.score.report import comparison_markdown
    from xbench.score.report.paired import shown_once
    from xbench.score.report.terminal import comparison_text

    rows = [_row("overall", "pointing_game", 0.4), _row("overall", "auroc", 0.7),
            _row("phantom", "pointing_game", 0.4), _row("phantom", "auroc", 0.7),
            _row("phantom", "pointing_game", 0.3, cls="Nodule"),
            _row("phrases", "pointing_game", 0.5), _row("phrases/phantom", "pointing_game", 0.5)]
    kept, repeats = shown_once(rows)
    assert repeats == {"overall": "phantom", "phrases": "phrases/phantom"}
    assert [(r.scope, r.cls, r.metric) for r in kept] == [
        ("overall", None, "pointing_game"), ("overall", None, "auroc"), ("phantom", "Nodule", "pointing_game"),
        ("phrases", None, "pointing_game")]
    text = comparison_text(rows, "a", "b")
    assert "Overall (= Phantom, the only dataset)" in text and text.count("+20.00") == 1  # 0.4 / 2 once
    md = comparison_markdown(rows, "a", "b")
    assert md.count("| Overall (= Phantom, the only dataset) |") == 2 and "| Phantom |  |" not in md
    # two datasets, or a summary that differs: every block is printed
    assert shown_once(rows + [_row("chexlocalize", "auroc", 0.6)])[1] == {"phrases": "phrases/phantom"}
    assert shown_once([_row("overall", "auroc", 0.7), _row("phantom", "auroc", 0.69)])[1] == {}


def test_mask_submissions_are_flagged_on_the_page():
    """Issue 46 item 4: a submission converted from masks gets a note saying how its pointing game is taken."""
    from xbench.score.report.html import _notes_html, model_notes

    masks = SimpleNamespace(name="seg (masks)", metrics={"xbench": {"submission": {"method": "masks", "model": "seg"}}})
    maps = SimpleNamespace(name="clip", metrics={"xbench": {"submission": {"method": "similarity"}}})
    notes = model_notes([masks, maps])
    assert set(notes) == {"seg (masks)"} and notes["seg (masks)"][0] == "masks"
    assert "centroid of its highest cells" in notes["seg (masks)"][1]
    assert '<span class="tag masks">masks</span>' in _notes_html([masks, maps])
