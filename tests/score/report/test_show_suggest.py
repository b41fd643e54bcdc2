"""`xbench show --case` with a mistyped id suggests the id meant first (issue 35: 00006 got 000096, 000086,
000076 from difflib alone, and never 000006)."""
from __future__ import annotations

from xbench.score.report.show import _suggest

IDS = [f"phantom-test-{i:06d}" for i in range(200)]


def _first(value: str, names=IDS) -> str:
    hint = _suggest(value, names)
    assert hint.startswith("; did you mean "), (value, hint)
    return hint.removeprefix("; did you mean ").rstrip("?").split(", ")[0]


def test_every_id_typed_with_another_number_of_leading_zeros_is_suggested_first():
    for i in range(200):
        for width in range(1, 9):  # brute force: every padding of every id
            typed = f"phantom-test-{i:0{width}d}"
            if typed not in IDS:
                assert _first(typed) == f"phantom-test-{i:06d}", typed
    assert _first("phantom-test-00006") == "phantom-test-000006"
    assert _first("PHANTOM-TEST-6") == "phantom-test-000006"


def test_same_numbers_other_separators_and_plain_typos_still_find_a_match():
    assert _first("phantom_0006") == "phantom-test-000006"
    assert _first("phantom-tset-000006") == "phantom-test-000006"  # difflib's part
    assert _first("Nodle", ["Nodule", "Pneumothorax"]) == "Nodule"
    assert _suggest("zzz", ["Nodule", "Pneumothorax"]) == ""
    assert len(_suggest("phantom-test-6", IDS).split(", ")) <= 3
