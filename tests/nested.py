"""Nested metrics.json values compared up to float summation order (shared by the scorer's tests)."""
import pytest


def assert_nested_close(a, b, where: str = "", *, rel: float, abs: float) -> None:  # noqa: A002 - pytest's name
    """``b`` has ``a``'s keys in ``a``'s order, its list lengths, and its values (floats within rel/abs)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            assert_nested_close(a[k], b[k], f"{where}.{k}", rel=rel, abs=abs)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for x, y in zip(a, b):
            assert_nested_close(x, y, where, rel=rel, abs=abs)
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=rel, abs=abs), where
    else:
        assert a == b, where
