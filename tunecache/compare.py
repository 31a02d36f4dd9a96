"""Whether a candidate computed what the heuristic computed: two outputs compared, with the
largest difference in words when they differ.

`difference(expected, actual, tolerance)` is None when they agree, else one line that says how
they differ. The rules, applied recursively:

- numpy arrays, numpy scalars and Python numbers: the same shape, the same kind of number
  (boolean, integer, floating, complex; two arrays also the same dtype), then
  - booleans and integers exactly;
  - floating and complex values within a relative tolerance of the reference's largest
    magnitude, `max |actual - expected| <= tolerance * max |expected|`: a norm-wise rule, as a
    reordered sum, an FFT or another blocking moves every element by rounding relative to the
    array's scale, not its own (an element near zero may gain any number of relative digits).
    `tolerance` defaults to the square root of the reference dtype's machine epsilon (about
    1.5e-8 for float64, 3.5e-4 for float32, 3e-2 for float16: half the digits); 0 is exact.
    NaNs must sit where the reference has them and infinities must equal;
- tuples and lists element by element (the same length), dicts key by key (the same keys);
- None only equals None; anything else is compared with `==` when that gives a plain bool, and
  is taken as agreeing otherwise (an op whose outputs cannot be compared this way declares a
  `check=` hook: `tunecache.Tunable`).

The tuner calls it before timing a candidate (`tunecache.tune`); a client with outputs of its own
(the Triton client's kernel output arguments) may call it on each of them. numpy is imported on
the first comparison, never by importing this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunecache.checks import is_finite

__all__ = ["default_tolerance", "difference", "snapshot"]

# A reference that is zero everywhere has no scale: differences are then measured absolutely.
_UNIT = 1.0


def difference(expected: Any, actual: Any, tolerance: float | None = None) -> str | None:
    """How `actual` differs from `expected` in one line, or None when they agree (the rules
    are the module's); `tolerance` is the relative tolerance for floating values (None: the
    reference dtype's default, `default_tolerance`)."""
    if tolerance is not None and (not is_finite(tolerance) or tolerance < 0):
        raise ValueError(f"tolerance is a number >= 0 or None, got {tolerance!r}")
    return _differ(expected, actual, tolerance, "")


def snapshot(value: Any) -> Any:
    """An output with every numpy array in it copied (inside tuples, lists and dicts too), so
    that a later call writing into the same buffers cannot change it; anything else as is."""
    if isinstance(value, tuple | list):
        return type(value)(snapshot(item) for item in value)
    if isinstance(value, dict):
        return {key: snapshot(item) for key, item in value.items()}
    copy = getattr(value, "copy", None)
    if _is_array(value) and callable(copy):
        return copy()
    return value


def default_tolerance(dtype: Any) -> float:
    """The default relative tolerance for values of a floating or complex numpy dtype: the
    square root of its machine epsilon."""
    import numpy as np

    return float(np.sqrt(np.finfo(dtype).eps))


def _differ(expected: Any, actual: Any, tolerance: float | None, where: str) -> str | None:
    """`difference` at one place of a nested output (`where`, "" at the top)."""
    if expected is None or actual is None:
        if expected is actual:
            return None
        return _at(where, f"{_kind(actual)}, expected {_kind(expected)}")
    if isinstance(expected, tuple | list) and not _is_array(expected):
        if not isinstance(actual, tuple | list) or len(actual) != len(expected):
            return _at(where, f"{_kind(actual)}, expected {len(expected)} items")
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            found = _differ(e, a, tolerance, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping) or set(actual) != set(expected):
            return _at(where, f"{_kind(actual)} with other keys than expected")
        for key in expected:
            found = _differ(expected[key], actual[key], tolerance, f"{where}[{key!r}]")
            if found is not None:
                return found
        return None
    if _numeric(expected):
        return _arrays(expected, actual, tolerance, where)
    try:
        same = expected == actual
    except Exception:  # a comparison that cannot be made is no evidence either way
        return None
    if isinstance(same, bool) and not same:
        return _at(where, f"{_short(actual)}, expected {_short(expected)}")
    return None


def _arrays(expected: Any, actual: Any, tolerance: float | None, where: str) -> str | None:
    """Two numeric values (arrays or numbers) compared by the module's rules."""
    import numpy as np

    if not _numeric(actual):
        return _at(where, f"{_kind(actual)}, expected {_kind(expected)}")
    e, a = np.asarray(expected), np.asarray(actual)
    if e.shape != a.shape:
        return _at(where, f"shape {a.shape}, expected {e.shape}")
    family_e, family_a = _family(e.dtype), _family(a.dtype)
    if family_e != family_a or (
        isinstance(expected, np.ndarray) and isinstance(actual, np.ndarray) and e.dtype != a.dtype
    ):
        return _at(where, f"dtype {a.dtype}, expected {e.dtype}")
    if e.size == 0:
        return None
    if family_e in ("bool", "int"):
        unequal = e != a
        if not unequal.any():
            return None
        # float64 for the report only: an int64 subtraction could overflow.
        gaps = np.abs(a.astype(np.float64) - e.astype(np.float64))
        index = np.unravel_index(int(np.argmax(gaps)), e.shape)
        return _at(
            where,
            f"{int(unequal.sum())} of {e.size} values differ; largest difference "
            f"{float(gaps[index]):.6g}{_index(index, e.shape)} (exact: {e.dtype} values)",
        )
    return _inexact(e, a, tolerance, where)


def _inexact(e: Any, a: Any, tolerance: float | None, where: str) -> str | None:
    """Floating or complex arrays of one shape, within a tolerance of the reference's scale."""
    import numpy as np

    rtol = default_tolerance(e.dtype) if tolerance is None else tolerance
    nan_e, nan_a = np.isnan(e), np.isnan(a)
    if (nan_e != nan_a).any():
        index = np.unravel_index(int(np.argmax(nan_e != nan_a)), e.shape)
        return _at(where, f"NaN where the other is a number{_index(index, e.shape)}")
    inf_e = np.isinf(e)
    if (inf_e != np.isinf(a)).any() or (e[inf_e] != a[inf_e]).any():
        return _at(where, "infinities differ")
    finite = ~(nan_e | inf_e)
    if not finite.any():
        return None
    gaps = np.zeros(e.shape)
    gaps[finite] = np.abs(a[finite].astype(np.complex128) - e[finite].astype(np.complex128))
    largest = float(gaps.max())
    scale = float(np.abs(e[finite]).max()) or _UNIT
    if largest <= rtol * scale:
        return None
    index = np.unravel_index(int(np.argmax(gaps)), e.shape)
    return _at(
        where,
        f"largest difference {largest:.3g}{_index(index, e.shape)}, "
        f"{largest / scale:.3g} of the reference's largest magnitude {scale:.3g} "
        f"(tolerance {rtol:.3g})",
    )


def _numeric(value: Any) -> bool:
    """Whether a value is compared as numbers: a numpy array or scalar, or a Python number."""
    import numbers

    if isinstance(value, numbers.Number):
        return True
    if _is_array(value):
        return _family(getattr(value, "dtype", None)) is not None
    return False


def _is_array(value: Any) -> bool:
    """Whether a value is a numpy array or scalar (or offers itself as one)."""
    return hasattr(value, "__array__") and hasattr(value, "dtype") and hasattr(value, "shape")


def _family(dtype: Any) -> str | None:
    """A dtype's kind of number: "bool", "int" (signed or not), "inexact", or None."""
    kind = getattr(dtype, "kind", None)
    return {"b": "bool", "i": "int", "u": "int", "f": "inexact", "c": "inexact"}.get(kind or "")


def _index(index: tuple[Any, ...], shape: tuple[int, ...]) -> str:
    """' at index (i, j)' for an element of an array with dims, '' for a scalar."""
    return f" at index {tuple(int(i) for i in index)}" if shape else ""


def _at(where: str, what: str) -> str:
    """A difference, said of the place in the output it was found (if not the whole)."""
    return f"output{where}: {what}" if where else what


def _kind(value: Any) -> str:
    """What a value is, in a word or two."""
    if value is None:
        return "None"
    if isinstance(value, tuple | list):
        return f"{type(value).__name__} of {len(value)} items"
    return type(value).__name__


def _short(value: Any) -> str:
    """A value's repr, cut to one short line."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."
