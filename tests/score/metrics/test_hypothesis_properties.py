"""Property-based checks (hypothesis) of the grounding kernel against the slow reference.

Maps are drawn from small value sets so that ties at the maximum, constant maps and values exactly on
a threshold after normalisation are common, not rare.
"""
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from score_reference import counts as reference_counts  # noqa: E402
from score_reference import hit_of, normalise, resize  # noqa: E402

from xbench.score.kernels.maps import grounding_counts  # noqa: E402

VALUES = st.sampled_from([0.0, 0.25, 0.5, 0.29, 0.57, 1.0, 3.0, -2.0, 100.0])


@st.composite
def pair(draw):
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    H, W = draw(st.integers(1, 20)), draw(st.integers(1, 20))
    dtype = draw(st.sampled_from([np.float16, np.float32]))
    raw = draw(hnp.arrays(np.float64, (h, w), elements=VALUES)).astype(dtype)
    region = draw(hnp.arrays(np.bool_, (H, W)))
    return raw, region


@settings(max_examples=150, deadline=None)
@given(pair())
def test_counts_and_hit_equal_the_definition(p):
    raw, region = p
    got = grounding_counts(raw[None], region[None])
    b, br = reference_counts(raw, region)
    np.testing.assert_array_equal(got.b[0], b)
    np.testing.assert_array_equal(got.br[0], br)
    resized = resize(raw, region.shape)
    assert got.hit[0] == hit_of(resized, region)  # the centroid of the maximum's cells; a constant map misses
    assert got.region_pixels[0] == int(region.sum())


@settings(max_examples=60, deadline=None)
@given(pair())
def test_counts_are_monotone_and_bounded(p):
    raw, region = p
    got = grounding_counts(raw[None], region[None])
    b, br = got.b[0], got.br[0]
    H, W = region.shape
    assert b[0] == H * W  # tau = 0 keeps every pixel of a normalised map
    assert (np.diff(b) <= 0).all() and (np.diff(br) <= 0).all()
    assert (br <= b).all() and (br <= region.sum()).all()
    nm = normalise(resize(raw, region.shape))
    if nm.max() > 0:
        assert b[100] >= 1  # the maximum normalises to exactly 1.0
