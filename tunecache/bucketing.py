"""Shape bucketing: round an op's dims up to a boundary, so that near shapes share a decision.

Levels follow cubecl's autotune levels: "exact"/"full" keep every dim, "extensive" rounds up to
powers of 1.5, "balanced" of 2, "minimal" of 2.5. Boundaries are exact integer ceilings.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from tunecache.errors import BadKeyError
from tunecache.keys import MAX_DIM, Key, is_dim_name

__all__ = ["Bucketing"]


# Level names as in cubecl's autotune levels; "full" tunes every shape, which is exact keys.
_LEVELS: dict[str, Fraction | None] = {
    "exact": None,
    "full": None,
    "extensive": Fraction(3, 2),
    "balanced": Fraction(2),
    "minimal": Fraction(5, 2),
}


def _boundaries(base: Fraction) -> tuple[int, ...]:
    """Return the bucket boundaries ceil(base**j) up to MAX_DIM, which closes the table."""
    bounds: list[int] = []
    num, den = base.numerator, base.denominator
    power_num, power_den = 1, 1
    while True:
        # Integer ceiling division: floats would misplace boundaries above 2**53.
        bound = -(-power_num // power_den)
        if bound >= MAX_DIM:
            break
        if not bounds or bound > bounds[-1]:
            bounds.append(bound)
        power_num *= num
        power_den *= den
    # The next boundary would not fit a dim, so MAX_DIM itself is the top bucket; a bucketed key
    # therefore stays a valid key.
    bounds.append(MAX_DIM)
    return tuple(bounds)


# Built once at import: at most about 110 boundaries per base.
_TABLES: dict[Fraction, tuple[int, ...]] = {
    base: _boundaries(base) for base in _LEVELS.values() if base is not None
}


def _coerce_base(base: object) -> Fraction | None:
    """Return base as one of the allowed Fractions (or None), or raise BadKeyError."""
    if base is None:
        return None
    if isinstance(base, (int, float, Fraction, str)) and not isinstance(base, bool):
        try:
            value = Fraction(base)
        except (ValueError, ZeroDivisionError, OverflowError):
            value = None
        if value in _TABLES:
            return value
    allowed = ", ".join(str(float(b)) for b in _TABLES)
    raise BadKeyError(f"unsupported bucketing base {base!r}: use one of {allowed}, or None")


@dataclass(frozen=True, slots=True)
class Bucketing:
    """How one op rounds its dims before lookup, so that near shapes share a decision."""

    # A dataclass, not a NamedTuple: it is built once per op, and it carries a derived table.
    base: Fraction | None = None
    dims: frozenset[str] | None = None
    _table: tuple[int, ...] | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Validate the settings and pick the precomputed boundary table."""
        base = _coerce_base(self.base)
        object.__setattr__(self, "base", base)
        if self.dims is not None:
            if isinstance(self.dims, str) or not isinstance(self.dims, Iterable):
                raise BadKeyError(f"bucketing dims must be a set of dim names, not {self.dims!r}")
            names = frozenset(self.dims)
            for name in names:
                if not is_dim_name(name):
                    raise BadKeyError(f"bad dim name {name!r} in bucketing dims")
            object.__setattr__(self, "dims", names)
        object.__setattr__(self, "_table", None if base is None else _TABLES[base])

    @classmethod
    def exact(cls) -> Bucketing:
        """Return the default bucketing, which leaves every dim as it is."""
        return cls()

    @classmethod
    def level(cls, level: str | float | Fraction, dims: Iterable[str] | None = None) -> Bucketing:
        """Return the bucketing for a level name or base (1.5, 2 or 2.5), on dims or all."""
        if isinstance(level, str) and level.strip().lower() in _LEVELS:
            base = _LEVELS[level.strip().lower()]
        else:
            base = _coerce_base(level)
        return cls(base, None if dims is None else frozenset(dims))

    def bucket(self, n: int) -> int:
        """Return the smallest bucket boundary >= n (n itself when exact or 0)."""
        table = self._table
        if table is None or n == 0:
            return n
        i = bisect_left(table, n)
        if n < 0 or i == len(table):
            raise BadKeyError(f"cannot bucket {n!r}: a dim value is between 0 and {MAX_DIM}")
        return table[i]

    def apply(self, key: Key) -> Key:
        """Return key with its chosen dims rounded up to their buckets."""
        table = self._table
        if table is None or not key.dims:
            return key
        names = self.dims
        top = len(table)
        dims: list[tuple[str, int]] = []
        # Inlined bucket(): the resolver calls this once per lookup.
        for name, value in key.dims:
            if names is None or name in names:
                i = bisect_left(table, value)
                if value < 0 or i == top:
                    raise BadKeyError(
                        f"cannot bucket dim {name!r}={value!r}: "
                        f"a dim value is between 0 and {MAX_DIM}"
                    )
                if value:
                    value = table[i]
            dims.append((name, value))
        return Key(key.signature, tuple(dims))
