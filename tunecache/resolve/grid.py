"""The nearest-shape index: one signature's tuned shapes, searched by log-space distance.

The distance between two shapes is the sum over their dims of |log2 ratio|, so a cap of 1.0
never borrows across more than a factor of 2 in total. Dims a model declared symbolic (its
scenarios: an LLM's prefill length) count in the distance but not against the cap. numpy is
imported when a signature's shapes are first indexed, never by importing this module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from tunecache.checks import is_real
from tunecache.errors import BadArgumentError, BadKeyError
from tunecache.keys import Key, make_key

__all__ = [
    "DEFAULT_MAX_DISTANCE",
    "EPS",
    "Grid",
    "Row",
    "SignatureIndex",
    "check_max_distance",
    "check_scenarios",
    "narrow",
    "parse_dims",
    "row_hash",
]

#: Borrow a decision across at most a factor of 2 in total: the distance is the sum of the dims'
#: |log2 ratio|, so no single dim is ever more than 2x away either.
DEFAULT_MAX_DISTANCE = 1.0

#: Floating-point slack when comparing log-space distances (exact powers of two tie exactly).
EPS = 1e-9

# A shape's hash: its values as the digits of a number in this base, modulo 2**64.
_HASH_FACTOR = 1_000_003
_MASK = (1 << 64) - 1


def check_max_distance(value: object) -> float:
    """A nearest-shape cap as a float, or BadArgumentError: a finite number >= 0."""
    if not is_real(value) or not 0 <= value < math.inf:
        raise BadArgumentError(
            f"max_distance is a finite number >= 0 (0 borrows nothing), got {value!r}"
        )
    return float(value)


def check_scenarios(scenarios: object) -> dict[str, tuple[int, ...]]:
    """A model's symbolic dims and their tuned sizes, sorted, or BadArgumentError."""
    if scenarios is None:
        return {}
    if not isinstance(scenarios, Mapping):
        raise BadArgumentError("scenarios map a symbolic dim name to its tuned sizes")
    out: dict[str, tuple[int, ...]] = {}
    for name, sizes in scenarios.items():
        try:
            # make_key checks the name and every size by the rules of a key's dims.
            tuned = {make_key("scenario", [(name, size)]).dims[0][1] for size in sizes}
        except (BadKeyError, TypeError) as error:
            raise BadArgumentError(f"bad scenario {name!r}: {error}") from None
        if not tuned:
            raise BadArgumentError(f"scenario {name!r} names no tuned size")
        out[name] = tuple(sorted(tuned))
    return out


def parse_dims(text: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Split the read contract's `dims` column ("m=288 k=96") into names and values."""
    if not text:
        return (), ()
    # One replace and one split: a signature of 100,000 entries is parsed row by row.
    parts = text.replace(" ", "=").split("=")
    return tuple(parts[0::2]), tuple(map(int, parts[1::2]))


class Row(NamedTuple):
    """One tuned shape of a grid: its entry (None for an in-memory decision) and choice."""

    entry_id: int | None
    values: tuple[int, ...]
    choice: str


def narrow(np: Any, values: Any) -> Any:
    """An array of integers as int32 when they all fit, else as it is: a million rows of
    entry ids or dims are then half the memory."""
    if values.size and int(values.min()) >= -(2**31) and int(values.max()) < 2**31:
        return values.astype(np.int32)
    return values


def _position_type(np: Any, size: int) -> Any:
    """The integer type of a position among `size` rows."""
    return np.int32 if size < 2**31 else np.int64


def row_hash(values: tuple[int, ...]) -> int:
    """The hash `Grid` files a shape under: what numpy computes for a whole column of shapes,
    in signed 64-bit arithmetic that wraps around."""
    h = 0
    for value in values:
        h = (h * _HASH_FACTOR + value) & _MASK
    return h - (1 << 64) if h >> 63 else h


class Grid:
    """The usable tuned shapes of one signature, candidate list and list of dim names.

    Columns in numpy arrays rather than a row object each: 100,000 shapes take a few MB. Rows are
    kept in tie order (smallest shape first), so a tie is broken by position. Of rows with the
    same shape, the last one given stands (an in-memory decision, given after the stored ones).
    """

    def __init__(
        self,
        names: tuple[str, ...],
        ids: Any,
        values: Any,
        codes: Any,
        choices: list[str],
        symbolic: frozenset[str],
    ) -> None:
        # numpy is imported when a signature is first loaded: a process whose keys are all exact
        # hits answers them with one indexed query each and never pays for it.
        import numpy as np

        self.np = np
        #: the dims' names, in the order of every row's values
        self.names = names
        ndims = len(names)
        #: the choices, by the codes of the rows
        self.choices = choices
        count = len(ids)
        if count and ndims:
            # lexsort sorts by its last key first, and is stable: equal shapes keep their order.
            order = np.lexsort(values.T[::-1])
            vals = values[order]
            last = np.ones(count, bool)
            np.any(vals[1:] != vals[:-1], axis=1, out=last[:-1])
            if not last.all():
                order, vals = order[last], vals[last]
        else:
            order = np.arange(count)[-1:]  # no dims: one shape, the last row given
            vals = values[order]
        self.size = size = len(order)
        hashes = np.zeros(size, np.int64)
        for i in range(ndims):
            hashes *= _HASH_FACTOR
            hashes += vals[:, i]
        # The narrowest types that hold them: a million rows are tens of MB, not hundreds.
        self.vals = narrow(np, vals)
        self.ids = narrow(np, ids[order])
        self.codes = codes[order].astype(np.min_scalar_type(max(len(choices) - 1, 0)))
        del order, vals
        self.hash_order = np.argsort(hashes, kind="stable").astype(_position_type(np, size))
        self.hashes = hashes[self.hash_order]
        #: positions of the dims the cap applies to, and of the symbolic (uncapped) ones
        self.capped = [i for i, name in enumerate(names) if name not in symbolic]
        self.free = [i for i, name in enumerate(names) if name in symbolic]
        self._grid: tuple[Any, ...] | None = None
        self._grid_cap = -1.0

    def row(self, position: int) -> Row:
        """The row at `position` in tie order."""
        eid = int(self.ids[position])
        values = tuple(self.vals[position].tolist())
        return Row(None if eid < 0 else eid, values, self.choices[int(self.codes[position])])

    def exact(self, values: tuple[int, ...]) -> Row | None:
        """The row of exactly this shape, found through its hash."""
        wanted = row_hash(values)
        i = int(self.np.searchsorted(self.hashes, wanted))
        while i < self.size and int(self.hashes[i]) == wanted:
            position = int(self.hash_order[i])
            if tuple(self.vals[position].tolist()) == values:
                return self.row(position)
            i += 1
        return None

    def _logs(self, values: Any) -> Any:
        np = self.np
        logs = np.log2(np.maximum(values, 1), dtype=np.float64)
        # A size of 0 (an empty tensor) counts as 1/2, one octave below 1, to stay comparable.
        logs[values <= 0] = -1.0
        return logs

    def _build(self, cap: float) -> tuple[Any, ...]:
        """A grid of cells over up to four capped dims: cell -> its rows, in tie order.

        `nearest` searches best first: the query's own cell, then only the cells whose nearest
        point is closer than the best row found so far. With tuned shapes as dense as a tuner
        leaves them, that is a handful of cells and a few dozen rows, in plain Python: a numpy
        call costs more than the arithmetic of a whole cell.

        A cell is numbered by its coordinates in a mixed radix (each axis spans at most 64
        octaves, at least 1/512 of an octave a cell: four axes fit in 62 bits), and the rows
        are sorted by cell once: a cell is a run of rows, found by a dictionary lookup of its
        number. What the search reads row by row is read through memoryviews of the arrays:
        Python objects for a million rows would take hundreds of MB.
        """
        np = self.np
        # Half the cap: a cell is smaller than the neighbourhood a summed distance allows, so
        # a near row is usually in the query's own cell or the next. At least 1/512 of an octave.
        width = max(cap / 2, 1 / 512)
        axes = sorted(self.capped, key=lambda i: -_distinct(np, self.vals[:, i]))[:4]
        low: list[int] = []
        span: list[int] = []
        # Without an axis, one cell holds every row.
        cells: dict[int, int] = {}
        bounds: Any = (0, self.size)
        members: Any = range(self.size)
        vals = self.vals
        if axes and self.size:
            number = np.zeros(self.size, np.int64)
            for axis in axes:
                coord = np.floor(self._logs(vals[:, axis]) / width).astype(np.int64)
                first = int(coord.min())
                low.append(first)
                span.append(int(coord.max()) - first + 1)
                number *= span[-1]
                number += coord - first
            del coord
            order = np.argsort(number, kind="stable").astype(_position_type(np, self.size))
            number = number[order]
            starts = np.flatnonzero(np.append(True, number[1:] != number[:-1]))
            cells = dict(zip(number[starts].tolist(), range(len(starts)), strict=True))
            del number
            bounds = memoryview(np.append(starts, self.size))
            members = memoryview(order)
            # The rows in cell order: a cell's rows are read one after the other.
            vals = vals[order]
        logs = self._logs(vals)
        del vals
        flat = memoryview(np.ascontiguousarray(logs).reshape(-1))
        self._grid = (axes, width, low, span, cells, bounds, members, flat)
        self._grid_cap = cap
        return self._grid

    @staticmethod
    def _cells(x: float, width: float, budget: float) -> list[tuple[int, float]]:
        """The cells of one axis whose nearest point is within `budget` of `x`, with that
        distance."""
        home = math.floor(x / width)
        out = [(home, 0.0)]
        step = 1
        while True:
            up = (home + step) * width - x
            down = x - (home - step + 1) * width
            if up <= budget + EPS:
                out.append((home + step, up))
            if down <= budget + EPS:
                out.append((home - step, down))
            if up > budget + EPS and down > budget + EPS:
                return out
            step += 1

    def nearest(self, values: tuple[int, ...], cap: float) -> tuple[Row, float] | None:
        """The closest shape within `cap` on the capped dims (ties: tie order), or None."""
        if not self.size:
            return None
        axes, width, low, span, cells, bounds, members, flat = (
            self._grid if self._grid_cap == cap and self._grid else self._build(cap)
        )
        query = [(math.log2(v) if v > 0 else -1.0) for v in values]
        ndims = len(query)
        capped_dims = [(dim, query[dim]) for dim in self.capped]
        free_dims = [(dim, query[dim]) for dim in self.free]
        limit = cap + EPS
        best = math.inf
        best_position = -1
        # A row farther than this is skipped: beyond the cap, or too far to win or tie.
        bound = limit

        def scan(rank: int) -> None:
            """Search the rows of one cell (numbered in cell order: `members` says each one's
            position in tie order)."""
            nonlocal best, best_position, bound
            for row in range(bounds[rank], bounds[rank + 1]):
                base = row * ndims
                near = 0.0
                for dim, wanted in capped_dims:
                    near += abs(flat[base + dim] - wanted)
                if near > bound:
                    continue
                total = near
                for dim, wanted in free_dims:
                    total += abs(flat[base + dim] - wanted)
                if total <= best + EPS:
                    # On a tie, the lower position in tie order wins.
                    position = members[row]
                    if total < best - EPS or position < best_position:
                        best, best_position = total, position
                        bound = min(limit, best + EPS)

        if not axes:
            scan(0)
        else:
            # The cell numbers of the query's own cell and of the cells around it; a cell
            # outside the span of an axis holds no row.
            home = 0
            for j, axis in enumerate(axes):
                offset = math.floor(query[axis] / width) - low[j]
                # -1: no cell (every cell's number is >= 0), whatever the other axes say.
                home = home * span[j] + offset if home >= 0 and 0 <= offset < span[j] else -1
            rank = cells.get(home)
            if rank is not None:
                scan(rank)
            # Every other cell whose nearest point is within the cap and no farther than the
            # best row so far, nearest first; a row there is at least that far.
            budget = min(cap, best)
            around: list[tuple[float, int]] = [(0.0, 0)]
            for j, axis in enumerate(axes):
                size, first = span[j], low[j]
                around = [
                    (spent + gap, number * size + c - first)
                    for spent, number in around
                    for c, gap in self._cells(query[axis], width, budget - spent)
                    if 0 <= c - first < size
                ]
            around.sort()
            for gap, number in around:
                if gap > best + EPS:
                    break
                if number != home:
                    rank = cells.get(number)
                    if rank is not None:
                        scan(rank)
        if best_position < 0:
            return None
        return self.row(best_position), best

    def ranked(self, values: tuple[int, ...], limit: int) -> list[tuple[Row, float, float]]:
        """The `limit` closest shapes with (capped distance, total distance), for explain."""
        np = self.np
        diff = np.abs(self._logs(self.vals) - self._logs(np.array(values, dtype=np.int64)))
        total = diff.sum(axis=1)
        capped = diff[:, self.capped].sum(axis=1)
        # Stable sort over tie-ordered rows: equal distances keep the tie order.
        top = np.argsort(total, kind="stable")[:limit]
        return [(self.row(int(i)), float(capped[i]), float(total[i])) for i in top]


class SignatureIndex:
    """Everything a table knows about one signature and candidate-list checksum."""

    def __init__(self, groups: dict[tuple[str, ...], Grid], masked: dict[Key, int | None]):
        #: one grid per list of dim names
        self.groups = groups
        #: keys whose entry this table's model masked, with the entry id
        self.masked = masked


def _distinct(np: Any, column: Any) -> int:
    """How many distinct values a column holds. Not `np.unique`: numpy 2.4's imports numpy.ma
    on its first call, 11 ms of a process's first nearest-shape answer."""
    ordered = np.sort(column)
    return int(np.count_nonzero(ordered[1:] != ordered[:-1])) + int(ordered.size > 0)
