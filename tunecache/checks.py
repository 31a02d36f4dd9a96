"""What counts as a number a caller gave: the one rule every argument check starts from.

`bool` is an `int` to Python, but `True` as a count or a size is always a caller's mistake, so
neither predicate accepts one. Each caller keeps its own bounds, error type and message.
"""

from __future__ import annotations

import math

# Not `typing` at run time: the resolver and the read commands start without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeGuard

__all__ = ["is_finite", "is_int", "is_real"]


def is_int(value: object) -> TypeGuard[int]:
    """Whether `value` is an int and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: object) -> TypeGuard[int | float]:
    """Whether `value` is an int or a float and not a bool (infinities and NaN included)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite(value: object) -> TypeGuard[int | float]:
    """Whether `value` is a finite int or float and not a bool."""
    return is_real(value) and math.isfinite(value)
