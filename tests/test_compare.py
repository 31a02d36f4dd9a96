"""tunecache.compare: a candidate's output against the heuristic's, and how they differ."""

from __future__ import annotations

import numpy as np
import pytest

from tunecache.compare import default_tolerance, difference, snapshot


def test_integers_and_booleans_compare_exactly() -> None:
    assert difference(np.arange(6), np.arange(6)) is None
    off = np.arange(6)
    off[4] += 3
    assert difference(np.arange(6), off) == (
        "1 of 6 values differ; largest difference 3 at index (4,) (exact: int64 values)"
    )
    assert difference(np.array([True, False]), np.array([True, True])) is not None
    assert difference(3, 3) is None and difference(3, 4) is not None


def test_floats_agree_within_a_tolerance_of_the_reference_scale() -> None:
    x = np.linspace(-1.0, 1.0, 101, dtype=np.float32)
    assert difference(x, x * np.float32(1 + 1e-6)) is None  # rounding
    # Relative to the largest magnitude, not to each element: one near zero may move freely.
    shifted = x.copy()
    shifted[50] += np.float32(1e-5)
    assert difference(x, shifted) is None
    wrong = difference(x, x * np.float32(1.01))
    assert wrong is not None and wrong.startswith("largest difference 0.01 at index (0,)")
    assert "tolerance 0.000345" in wrong
    assert default_tolerance(np.float64) == pytest.approx(1.49e-8, rel=1e-2)
    # A tolerance the op declares: 0 is exact, a larger one forgives more.
    assert difference(x, x * np.float32(1 + 1e-6), 0.0) is not None
    assert difference(x, x * np.float32(1.01), 0.02) is None
    # All zeros: measured absolutely.
    assert difference(np.zeros(3), np.full(3, 1e-17)) is None


def test_shapes_dtypes_nans_and_infinities_must_match() -> None:
    assert difference(np.ones((2, 3)), np.ones((3, 2))) == "shape (3, 2), expected (2, 3)"
    assert difference(np.ones(2), np.ones(2, np.float32)) == "dtype float32, expected float64"
    assert difference(1.0, 1) == "dtype int64, expected float64"
    assert difference(np.array([1.0, np.nan]), np.array([1.0, np.nan])) is None
    assert "NaN" in str(difference(np.array([1.0, np.nan]), np.array([1.0, 2.0])))
    assert difference(np.array([np.inf]), np.array([-np.inf])) == "infinities differ"
    assert difference(np.array([1 + 1j]), np.array([1 + 2j])) is not None


def test_containers_compare_item_by_item_and_say_where() -> None:
    assert difference((np.ones(2), 3), (np.ones(2), 3)) is None
    assert difference([np.ones(2), 3], [np.ones(2), 4]) == (
        "output[1]: 1 of 1 values differ; largest difference 1 (exact: int64 values)"
    )
    assert difference({"a": 1.0}, {"a": 1.0}) is None
    assert difference({"a": 1.0}, {"b": 1.0}) == "dict with other keys than expected"
    assert difference((1, 2), (1,)) == "tuple of 1 items, expected 2 items"
    assert difference(None, None) is None and difference(None, 0) == "int, expected None"
    assert difference("abc", "abd") == "'abd', expected 'abc'"
    assert difference(object(), object()) is not None  # `==` said no
    with pytest.raises(ValueError, match="tolerance"):
        difference(1.0, 1.0, -1.0)


def test_a_snapshot_is_not_changed_by_a_later_write_into_the_same_buffer() -> None:
    out = np.zeros(3)
    kept = snapshot((out, [out], {"x": out}, 7))
    out += 1
    assert difference(kept, ((np.zeros(3)), [np.zeros(3)], {"x": np.zeros(3)}, 7)) is None
