"""The one rule of what counts as a number a caller gave: never a bool."""

from __future__ import annotations

import math

import pytest

from tunecache.checks import is_finite, is_int, is_real


@pytest.mark.parametrize(
    ("value", "integer", "real", "finite"),
    [
        (3, True, True, True),
        (-1, True, True, True),
        (True, False, False, False),
        (False, False, False, False),
        (2.5, False, True, True),
        (math.inf, False, True, False),
        (math.nan, False, True, False),
        ("3", False, False, False),
        (None, False, False, False),
    ],
)
def test_a_bool_is_never_a_number(value: object, integer: bool, real: bool, finite: bool) -> None:
    assert (is_int(value), is_real(value), is_finite(value)) == (integer, real, finite)
