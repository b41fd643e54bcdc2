"""Ties in the paired bootstrap (issue 43): a replicate difference that is 0 as a fraction counts on both sides of
p = min(1, 2 min(P*(d <= 0), P*(d >= 0))), even when the two sides are float sums that differ by 1e-16."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from xbench.score.resampling.engine import holm_family
from xbench.score.resampling.intervals import TIE_TOLERANCE, paired_p_value, paired_row, tied_differences

#: 10/21 as the mean of three class values (1/21, 9/21, 20/21) and as 10/21 itself: equal as fractions, not as floats
A_MEAN = float(np.mean([1 / 21, 9 / 21, 20 / 21]))
B_MEAN = 10 / 21


def brute_p(a, b) -> float:
    """The contract's p from exact rationals: each replicate rounded back to the fraction it stands for."""
    d = [Fraction(x).limit_denominator(1000) - Fraction(y).limit_denominator(1000) for x, y in zip(a, b)]
    le, ge = sum(v <= 0 for v in d), sum(v >= 0 for v in d)
    return float(min(Fraction(1), 2 * Fraction(min(le, ge), len(d))))


def test_the_example_is_a_float_tie():
    assert A_MEAN != B_MEAN and Fraction(A_MEAN).limit_denominator(1000) == Fraction(10, 21)


@pytest.mark.parametrize("ties, below, above", [(3, 7, 0), (3, 0, 7), (5, 2, 3), (10, 0, 0), (1, 4, 5)])
def test_equal_means_are_ties_on_both_sides(ties, below, above):
    # ties: A_MEAN vs B_MEAN; below / above: a clearly less / more than b
    a = [A_MEAN] * ties + [5 / 21] * below + [15 / 21] * above
    b = [B_MEAN] * ties + [10 / 21] * (below + above)
    row = paired_row("d", "c", "m", A_MEAN, B_MEAN, np.array(a), np.array(b), 0.95)
    assert row["p_value"] == brute_p(a, b)
    assert row["n_valid"] == ties + below + above


def test_undefined_resamples_are_left_out_and_ties_use_the_rows_scale():
    a = np.array([A_MEAN, np.nan, 0.9, A_MEAN])
    b = np.array([B_MEAN, 0.3, np.nan, 0.1])
    d = tied_differences(a, b)
    assert d[0] == 0.0 and np.isnan(d[1]) and np.isnan(d[2]) and d[3] > 0
    assert paired_p_value(d) == 1.0  # one tie, one positive: P(d <= 0) = 1/2
    assert paired_p_value(np.array([np.nan])) is None
    # a real difference just above the tolerance stays a difference
    big = np.array([1.0, 1.0])
    assert (tied_differences(big, big - 3 * TIE_TOLERANCE) > 0).all()
    assert (tied_differences(big, big - 0.5 * TIE_TOLERANCE) == 0).all()


def test_rows_equal_as_fractions_are_one_test_in_holms_family():
    rng = np.random.default_rng(43)
    other = rng.uniform(0, 1, 50)
    tie_as_sum = np.where(np.arange(50) < 20, A_MEAN, other)  # the same statistic, summed another way
    tie_exact = np.where(np.arange(50) < 20, B_MEAN, other)
    base = np.where(np.arange(50) < 20, B_MEAN, rng.uniform(0, 1, 50))
    r1 = paired_row("", "", "m", 0.5, 0.4, tie_as_sum, base, 0.95)
    r2 = paired_row("d", "", "m", 0.5, 0.4, tie_exact, base, 0.95)
    assert r1["test"] == r2["test"] and r1["p_value"] == r2["p_value"]
    adjusted, m = holm_family([r1["p_value"], r2["p_value"]], [r1["test"], r2["test"]])
    assert m == 1 and adjusted[0] == adjusted[1] == r1["p_value"]
