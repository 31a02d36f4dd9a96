"""The resolver: which candidate should this call use?

Every op of every model asks this on the hot path, so the answer comes from memory. A `Table` is a
read-only view of one device's decisions as seen by one model; it is filled lazily, one
signature at a time, from the database through the stdlib `sqlite3` module and the versioned
read-contract views (`read_*_v1`, migration 0003). Neither SQLAlchemy nor Alembic is imported here,
and numpy only when a signature first needs a nearest-shape search.

Resolution, for a key, the caller's legal candidates and the caller's heuristic pick:

1. the key's entry is masked for this model -> the heuristic (the entry stays for other models);
2. an entry for the exact key and the same candidate list, whose choice is legal -> its choice;
3. the nearest tuned shape of the same signature and candidate list, within `max_distance`
   (summed |log2 ratio| over the dims; dims a model declared symbolic are not capped) -> its
   choice, reported as borrowed, with the distance;
4. otherwise the heuristic.

A missing cache answers the heuristic everywhere, silently: no cache means no change. An
unreadable one answers the heuristic too, with one `TunecacheWarning`, and the host keeps running.
"""

from __future__ import annotations

import math
import os
import sqlite3
import warnings
from _thread import RLock  # threading costs ~2 ms to import; its RLock is this one
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from tunecache.candidates import candidate_names, checksum
from tunecache.errors import BadArgumentError, BadKeyError, TunecacheWarning
from tunecache.keys import Key, format_key, make_key, parse

if TYPE_CHECKING:
    from types import TracebackType

    from tunecache.device import Device

__all__ = [
    "DEFAULT_MAX_DISTANCE",
    "SOURCES",
    "USES",
    "Answer",
    "Explanation",
    "Table",
    "check_max_distance",
    "current",
    "set_default",
    "using",
]

#: where an answer came from
SOURCES = ("exact", "nearest", "masked", "heuristic")

#: which entries a table serves: validated by any model or accepted (the default), validated by
#: this model itself, or every entry that is not rejected (for tuning and exploration)
USES = ("validated", "own", "all")

#: Borrow a decision across at most a factor of 2 in total: the distance is the sum of the dims'
#: |log2 ratio|, so no single dim is ever more than 2x away either.
DEFAULT_MAX_DISTANCE = 1.0

#: Answers remembered per table before the memo starts over (a guard against unbounded shapes).
MEMO_LIMIT = 1 << 20

# Floating-point slack when comparing log-space distances (exact powers of two tie exactly).
_EPS = 1e-9


class Answer(NamedTuple):
    """What the resolver answered and why."""

    #: the candidate to run: always one of the caller's legal candidates
    choice: str
    #: "exact", "nearest", "masked" or "heuristic"
    source: str
    #: the entry the answer rests on (None for the heuristic, or an in-memory decision)
    entry_id: int | None = None
    #: summed |log2 ratio| to the entry's shape: 0.0 for exact, None when no entry answered
    distance: float | None = None
    #: the tuned key the answer was borrowed from (nearest only)
    borrowed_from: Key | None = None


class Explanation(NamedTuple):
    """How a key resolves for a table, step by step, for people."""

    key: Key
    answer: Answer | None
    steps: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form: stable field names for scripts."""
        answer = self.answer
        return {
            "key": format_key(self.key),
            "choice": None if answer is None else answer.choice,
            "source": None if answer is None else answer.source,
            "entry_id": None if answer is None else answer.entry_id,
            "distance": None if answer is None else answer.distance,
            "borrowed_from": (
                None
                if answer is None or answer.borrowed_from is None
                else format_key(answer.borrowed_from)
            ),
            "steps": list(self.steps),
        }


# -- one signature's tuned shapes ---------------------------------------------------------------


def _parse_dims(text: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Split the read contract's `dims` column ("m=288 k=96") into names and values."""
    if not text:
        return (), ()
    # One replace and one split: a signature of 100,000 entries is parsed row by row.
    parts = text.replace(" ", "=").split("=")
    return tuple(parts[0::2]), tuple(map(int, parts[1::2]))


class _Row(NamedTuple):
    entry_id: int | None
    values: tuple[int, ...]
    choice: str


class _Group:
    """The usable tuned shapes of one signature, candidate list and list of dim names.

    Columns in numpy arrays rather than a row object each: 100,000 shapes take a few MB. Rows are
    kept in tie order (smallest shape, then smallest entry id), so a tie is broken by position.
    """

    def __init__(
        self,
        names: tuple[str, ...],
        items: dict[tuple[int, ...], tuple[int | None, str]],
        symbolic: frozenset[str],
    ) -> None:
        # numpy is imported when a signature is first loaded: a process whose keys are all exact
        # hits answers them with one indexed query each and never pays for it.
        import numpy as np

        self.np = np
        self.names = names
        self.size = n = len(items)
        d = len(names)
        values = list(items)
        choices = sorted({choice for _, choice in items.values()})
        self.choices = choices
        code_of = {name: i for i, name in enumerate(choices)}
        vals = np.array(values, dtype=np.int64).reshape(n, d)
        ids = np.fromiter(
            (-1 if eid is None else eid for eid, _ in items.values()), dtype=np.int64, count=n
        )
        codes = np.fromiter((code_of[c] for _, c in items.values()), dtype=np.int32, count=n)
        hashes = np.fromiter((hash(v) for v in values), dtype=np.int64, count=n)
        # np.lexsort sorts by its last key first: the dims in order, then the entry id.
        order = np.lexsort((ids, *(vals[:, i] for i in reversed(range(d)))))
        self.vals, self.ids, self.codes = vals[order], ids[order], codes[order]
        hashes = hashes[order]
        self.hash_order = np.argsort(hashes, kind="stable")
        self.hashes = hashes[self.hash_order]
        self.capped = [i for i, name in enumerate(names) if name not in symbolic]
        self.free = [i for i, name in enumerate(names) if name in symbolic]
        self._grid: tuple[Any, ...] | None = None
        self._grid_cap = -1.0

    def row(self, position: int) -> _Row:
        eid = int(self.ids[position])
        values = tuple(self.vals[position].tolist())
        return _Row(None if eid < 0 else eid, values, self.choices[int(self.codes[position])])

    def exact(self, values: tuple[int, ...]) -> _Row | None:
        """The row of exactly this shape, found through its hash."""
        h = hash(values)
        i = int(self.np.searchsorted(self.hashes, h))
        while i < self.size and int(self.hashes[i]) == h:
            position = int(self.hash_order[i])
            if tuple(self.vals[position].tolist()) == values:
                return self.row(position)
            i += 1
        return None

    def _logs(self, values: Any) -> Any:
        np = self.np
        # A size of 0 (an empty tensor) counts as 1/2, one octave below 1, to stay comparable.
        return np.where(values > 0, np.log2(np.maximum(values, 1)), -1.0)

    def _build(self, cap: float) -> tuple[Any, ...]:
        """A grid of cells over up to four capped dims: cell -> its rows, in tie order.

        `nearest` searches best first: the query's own cell, then only the cells whose nearest
        point is closer than the best row found so far. With tuned shapes as dense as a tuner
        leaves them, that is a handful of cells and a few dozen rows, in plain Python: a numpy
        call costs more than the arithmetic of a whole cell.
        """
        np = self.np
        logs = self._logs(self.vals)
        # Half the cap: a cell is smaller than the neighbourhood a summed distance allows, so
        # a near row is usually in the query's own cell or the next. At least 1/512 of an octave.
        width = max(cap / 2, 1 / 512)
        axes = sorted(self.capped, key=lambda i: -len(np.unique(self.vals[:, i])))[:4]
        cells: dict[tuple[int, ...], list[int]] = {}
        if axes:
            index = np.floor(logs[:, axes] / width).astype(np.int64).tolist()
            for position, cell in enumerate(index):
                cells.setdefault(tuple(cell), []).append(position)
        # Python floats, row after row: what the search reads, one at a time.
        flat = logs.ravel().tolist()
        self._grid = (axes, width, cells, flat)
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
            if up <= budget + _EPS:
                out.append((home + step, up))
            if down <= budget + _EPS:
                out.append((home - step, down))
            if up > budget + _EPS and down > budget + _EPS:
                return out
            step += 1

    def nearest(self, values: tuple[int, ...], cap: float) -> tuple[_Row, float] | None:
        """The closest shape within `cap` on the capped dims (ties: tie order), or None."""
        if not self.size:
            return None
        axes, width, cells, flat = (
            self._grid if self._grid_cap == cap and self._grid else self._build(cap)
        )
        q = [(math.log2(v) if v > 0 else -1.0) for v in values]
        d = len(q)
        capped_dims = [(i, q[i]) for i in self.capped]
        free_dims = [(i, q[i]) for i in self.free]
        limit = cap + _EPS
        best = math.inf
        best_position = -1

        def scan(rows: list[int]) -> None:
            nonlocal best, best_position
            for position in rows:
                base = position * d
                near = 0.0
                for i, x in capped_dims:
                    near += abs(flat[base + i] - x)
                if near > limit:
                    continue
                total = near
                for i, x in free_dims:
                    total += abs(flat[base + i] - x)
                # Rows are numbered in tie order: on a tie, the lower number wins.
                if total < best - _EPS or (total <= best + _EPS and position < best_position):
                    best, best_position = total, position

        if not axes:
            scan(list(range(self.size)))
        else:
            home = tuple(math.floor(q[i] / width) for i in axes)
            scan(cells.get(home, []))
            # Every other cell whose nearest point is within the cap and no farther than the
            # best row so far, nearest first; a row there is at least that far.
            budget = min(cap, best)
            around: list[tuple[float, tuple[int, ...]]] = [(0.0, ())]
            for i in axes:
                around = [
                    (spent + gap, (*cell, c))
                    for spent, cell in around
                    for c, gap in self._cells(q[i], width, budget - spent)
                ]
            around.sort()
            for gap, cell in around:
                if gap > best + _EPS:
                    break
                if cell != home:
                    found = cells.get(cell)
                    if found is not None:
                        scan(found)
        if best_position < 0:
            return None
        return self.row(best_position), best

    def ranked(self, values: tuple[int, ...], limit: int) -> list[tuple[_Row, float, float]]:
        """The `limit` closest shapes with (capped distance, total distance), for explain."""
        np = self.np
        diff = np.abs(self._logs(self.vals) - self._logs(np.array(values, dtype=np.int64)))
        total = diff.sum(axis=1)
        capped = diff[:, self.capped].sum(axis=1)
        # Stable sort over tie-ordered rows: equal distances keep the tie order.
        top = np.argsort(total, kind="stable")[:limit]
        return [(self.row(int(i)), float(capped[i]), float(total[i])) for i in top]


class _Index:
    """Everything a table knows about one signature and candidate-list checksum."""

    def __init__(self, groups: dict[tuple[str, ...], _Group], masked: dict[Key, int | None]):
        self.groups = groups
        #: keys whose entry this table's model masked, with the entry id
        self.masked = masked


# -- reading the database -----------------------------------------------------------------------


class _Broken(Exception):
    """The database cannot be read; the message says why, for the one warning."""


class _Reader:
    """Read-only access to one cache database through the read-contract views."""

    def __init__(self, path: Path, device_fingerprint: str, timeout: float) -> None:
        self.path = path
        self.device = device_fingerprint
        self.timeout = timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = -1

    def _connect(self) -> sqlite3.Connection | None:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # A connection inherited across fork() must never be used by the child: open anew.
        self._conn = None
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return None  # no cache: every answer is the heuristic, and nothing is created
        if size == 0:
            # SQLite creates the file before its first page: a cache being created right now.
            return None
        conn = self._open("mode=ro")
        try:
            self._check(conn)
        except sqlite3.OperationalError:
            conn.close()
            if not self._frozen():
                raise
            # A WAL database in a folder no one may write has no -shm to map, and SQLite says
            # "unable to open" or "readonly". Nobody writes it, so read it as immutable.
            conn = self._open("immutable=1")
            self._check(conn)
        self._conn = conn
        self._pid = os.getpid()
        return conn

    def _frozen(self) -> bool:
        from tunecache.store.access import frozen

        wal = self.path.with_name(self.path.name + "-wal")
        # Committed frames in a -wal would be ignored by an immutable reader: not frozen, then.
        return frozen(self.path) and not (wal.exists() and wal.stat().st_size > 0)

    def _open(self, mode: str) -> sqlite3.Connection:
        uri = f"{self.path.as_uri()}?{mode}"
        conn = sqlite3.connect(
            uri, uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA query_only = 1")
        return conn

    def _check(self, conn: sqlite3.Connection) -> None:
        found = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'view' AND name LIKE 'read_%_v1'"
            )
        }
        missing = {"read_entries_v1", "read_verdicts_v1", "read_candidates_v1"} - found
        if missing:
            raise _Broken(
                f"cache database {self.path} lacks the views {', '.join(sorted(missing))}"
                "; it predates tunecache's resolver or is not a tunecache cache. Open it once "
                "with tunecache.open() to upgrade it"
            )

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    def point(self, key_text: str, checksum_: str) -> tuple[int, str, str, list[Any]] | None:
        """The entry of exactly this key and list on this device, with its verdicts."""
        conn = self._connect()
        if conn is None:
            return None
        conn.execute("BEGIN")
        try:
            row = conn.execute(
                "SELECT entry_id, choice, status FROM read_entries_v1"
                " WHERE key = ? AND checksum = ? AND device = ?",
                (key_text, checksum_, self.device),
            ).fetchone()
            if row is None:
                return None
            verdicts = conn.execute(
                "SELECT model, model_fingerprint, verdict FROM read_verdicts_v1 WHERE entry_id = ?",
                (row[0],),
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        return row[0], row[1], row[2], verdicts

    def signature(
        self,
        signature: str,
        checksum_: str,
        mine: Callable[[str, str], bool],
        consume: Callable[[int, str, str, str, bool, bool, bool], None],
    ) -> bool:
        """Feed every entry of a signature and list on this device to `consume`, with its
        flags (masked by this model, validated by this model, validated by any model).

        Rows are streamed, not fetched all at once: 100,000 entries never sit in memory as
        Python tuples. Returns False when there is no database.
        """
        conn = self._connect()
        if conn is None:
            return False
        # The unary + keeps SQLite from driving the query by the device's index (every entry of
        # the device, filtered): by the signature's index, the cost follows the signature's size.
        where = " WHERE e.signature = ? AND +e.checksum = ? AND +e.device = ?"
        args = (signature, checksum_, self.device)
        conn.execute("BEGIN")
        try:
            masked: set[int] = set()
            validated: set[int] = set()
            validated_any: set[int] = set()
            for entry_id, model, fingerprint, verdict in conn.execute(
                "SELECT v.entry_id, v.model, v.model_fingerprint, v.verdict"
                " FROM read_verdicts_v1 v JOIN read_entries_v1 e ON e.entry_id = v.entry_id"
                + where,
                args,
            ):
                if verdict == "validated":
                    validated_any.add(entry_id)
                if mine(model, fingerprint):
                    (masked if verdict == "masked" else validated).add(entry_id)
            for entry_id, dims, choice, status in conn.execute(
                "SELECT e.entry_id, e.dims, e.choice, e.status FROM read_entries_v1 e" + where,
                args,
            ):
                consume(
                    entry_id,
                    dims,
                    choice,
                    status,
                    entry_id in masked,
                    entry_id in validated,
                    entry_id in validated_any,
                )
        finally:
            conn.execute("COMMIT")
        return True

    def candidate_sets(self, signature: str) -> list[tuple[str, tuple[str, ...]]]:
        """The candidate lists stored for a signature (for explain), by checksum."""
        conn = self._connect()
        if conn is None:
            return []
        sets: dict[str, list[str]] = {}
        for checksum_, name in conn.execute(
            "SELECT checksum, name FROM read_candidates_v1 WHERE signature = ?"
            " ORDER BY checksum, position",
            (signature,),
        ):
            sets.setdefault(checksum_, []).append(name)
        return [(sum_, tuple(names)) for sum_, names in sets.items()]


# -- the table -----------------------------------------------------------------------------------


def _check_scenarios(scenarios: object) -> dict[str, tuple[int, ...]]:
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


def check_max_distance(value: object) -> float:
    """A nearest-shape cap as a float, or BadArgumentError: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise BadArgumentError(
            f"max_distance is a finite number >= 0 (0 borrows nothing), got {value!r}"
        )
    return float(value)


class Table:
    """A read-only view of one device's decisions, as one model sees them.

    Tables are cheap to derive (`derive`) and safe to share between threads. A table reads
    lazily and keeps what it read: a key's answer never changes for the life of the table, but a
    key it has not met yet may see writes made since it was opened. `reload()` returns a table
    that reads everything anew.
    """

    def __init__(
        self,
        reader: _Reader | None = None,
        *,
        model: str | None = None,
        fingerprint: str | None = None,
        use: str = "validated",
        max_distance: float = DEFAULT_MAX_DISTANCE,
        scenarios: Mapping[str, Iterable[int]] | None = None,
        include: Iterable[int] = (),
        exclude: Iterable[int] = (),
        mask: Iterable[int] = (),
        added: Mapping[tuple[str, str], list[tuple[Key, str]]] | None = None,
    ) -> None:
        if use not in USES:
            raise BadArgumentError(f"use must be one of {USES}, got {use!r}")
        if model is not None and (not isinstance(model, str) or not model):
            raise BadArgumentError("a model is named by a non-empty string")
        if use == "own" and model is None:
            raise BadArgumentError("use='own' needs a model: whose validations count?")
        self._reader = reader
        self.model = model
        self.fingerprint = fingerprint
        self.use = use
        self.max_distance = check_max_distance(max_distance)
        #: symbolic dims and their tuned sizes, as the model declared them
        self.scenarios = _check_scenarios(scenarios)
        self._symbolic = frozenset(self.scenarios)
        self._include = frozenset(include)
        self._exclude = frozenset(exclude)
        self._mask = frozenset(mask)
        self._added = {k: list(v) for k, v in (added or {}).items()}
        self._added_exact = {
            (key, sum_): choice for (_, sum_), items in self._added.items() for key, choice in items
        }
        self._memo: dict[tuple[Any, ...], Answer] = {}
        self._sums: dict[tuple[str, ...], str] = {}
        self._indexes: dict[tuple[str, str], _Index] = {}
        self._counts = dict.fromkeys(SOURCES, 0)
        self._lock = RLock()
        self._broken: str | None = None
        #: per-tunable memos of the dispatch layer (tunecache.dispatch), keyed by its token
        self._dispatch: dict[object, dict[Any, Any]] = {}

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        *,
        client: str = "tunecache",
        client_version: str | None = None,
        threads: int | None = None,
        accelerator: str | None = None,
        root: str | os.PathLike[str] | None = None,
        path: str | os.PathLike[str] | None = None,
        device: Device | None = None,
        model: str | None = None,
        fingerprint: str | None = None,
        use: str = "validated",
        max_distance: float = DEFAULT_MAX_DISTANCE,
        scenarios: Mapping[str, Iterable[int]] | None = None,
        timeout: float = 5.0,
    ) -> Table:
        """A table over this device's cache (the same location rules as `tunecache.open`).

        Nothing is read until the first question; a missing database is an empty table.
        """
        from tunecache import identity, paths

        # The identity's fields, not a Device: the dataclass machinery costs a cold start more
        # than the whole lookup does.
        if device is not None:
            fields: identity.Fields = (
                device.cpu,
                device.threads,
                device.accelerator,
                device.client,
                device.client_version,
            )
        else:
            fields = identity.detect_fields(
                client=client,
                client_version=client_version,
                threads=threads,
                accelerator=accelerator,
            )
        cpu, threads_, _, client_, version = fields
        db = (
            paths.explicit_path(path)
            if path is not None
            else paths.database_path_of(client_, version, cpu, threads_, root)
        )
        reader = _Reader(db, identity.fingerprint(fields), timeout)
        return cls(
            reader,
            model=model,
            fingerprint=fingerprint,
            use=use,
            max_distance=max_distance,
            scenarios=scenarios,
        )

    @classmethod
    def empty(cls, **options: Any) -> Table:
        """A table with no decisions: every answer is the heuristic."""
        return cls(None, **options)

    def _options(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "fingerprint": self.fingerprint,
            "use": self.use,
            "max_distance": self.max_distance,
            "scenarios": self.scenarios,
        }

    def derive(
        self,
        *,
        include: Iterable[int] = (),
        exclude: Iterable[int] = (),
        mask: Iterable[int] = (),
        add: Iterable[tuple[Key | str, Sequence[str], str]] = (),
        **options: Any,
    ) -> Table:
        """A new table over the same database with some decisions forced in or out.

        `include` serves these entry ids whatever their status or verdicts, `exclude` never
        serves them (a key may then borrow a neighbour's), `mask` treats them as masked for this
        table's model (its key answers the heuristic, and no neighbour borrows from them: what a
        stored `masked` verdict does), and `add` serves in-memory decisions (key, candidates,
        choice) that are not stored at all. Acceptance runs a model with and without an entry
        this way, back to back. Other keyword arguments (model, use, ...) replace this table's.
        """
        added = {k: list(v) for k, v in self._added.items()}
        for key, candidates, choice in add:
            key = parse(key) if isinstance(key, str) else key
            names = candidate_names(candidates)
            if choice not in names:
                raise BadArgumentError(f"choice {choice!r} is not one of the candidates {names}")
            added.setdefault((key.signature, checksum(names)), []).append((key, choice))
        reader = self._reader
        if reader is not None:
            reader = _Reader(reader.path, reader.device, reader.timeout)
        return Table(
            reader,
            include=self._include | frozenset(include),
            exclude=self._exclude | frozenset(exclude),
            mask=self._mask | frozenset(mask),
            added=added,
            **{**self._options(), **options},
        )

    def reload(self) -> Table:
        """A fresh table over the same database and options, seeing what was written since."""
        return self.derive()

    def close(self) -> None:
        """Release the database connection (a later question reopens it)."""
        with self._lock:
            if self._reader is not None:
                self._reader.close()

    @property
    def path(self) -> Path | None:
        """The database this table reads, or None for an in-memory table."""
        return None if self._reader is None else self._reader.path

    def __repr__(self) -> str:
        where = self.path or "in memory"
        model = f" model={self.model}" if self.model else ""
        return f"<Table {where}{model} use={self.use}>"

    # -- the hot path ------------------------------------------------------------------------

    def resolve(self, key: Key, candidates: Sequence[str], heuristic: str) -> Answer:
        """Which of `candidates` should run for `key`; `heuristic` is the caller's own pick.

        Pass `key` as a Key (a NamedTuple: cheap to build and hash) and `candidates` as a tuple:
        a repeated question is then one dictionary lookup.
        """
        try:
            return self._memo[key, candidates, heuristic]
        except (KeyError, TypeError):
            return self._answer(key, candidates, heuristic)

    def choose(self, key: Key, candidates: Sequence[str], heuristic: str) -> str:
        """The name of the candidate to run (`resolve(...).choice`)."""
        try:
            return self._memo[key, candidates, heuristic].choice
        except (KeyError, TypeError):
            return self._answer(key, candidates, heuristic).choice

    def counters(self) -> dict[str, int]:
        """How many distinct questions this table answered from each source."""
        return dict(self._counts)

    # -- the slow path -----------------------------------------------------------------------

    def _answer(self, key: Key | str, candidates: Sequence[str], heuristic: str) -> Answer:
        if isinstance(key, str):
            key = parse(key)
        elif not isinstance(key, Key):
            raise BadArgumentError(f"a key is a tunecache.Key or its text, got {key!r}")
        names = candidates if isinstance(candidates, tuple) else tuple(candidates)
        try:
            hash(names)
        except TypeError:
            raise BadArgumentError("candidates are names (strings)") from None
        if not isinstance(heuristic, str) or heuristic not in names:
            raise BadArgumentError(f"heuristic {heuristic!r} is not one of the candidates {names}")
        with self._lock:
            answer = self._memo.get((key, names, heuristic))
            if answer is not None:
                return answer
            try:
                answer = self._resolve(key, names, heuristic, None)
            except _Transient:
                # Answer now, but ask the database again next time.
                self._counts["heuristic"] += 1
                return Answer(heuristic, "heuristic")
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            self._memo[key, names, heuristic] = answer
            self._counts[answer.source] += 1
            return answer

    def _checksum(self, names: tuple[str, ...]) -> str:
        found = self._sums.get(names)
        if found is None:
            found = self._sums[names] = checksum(candidate_names(names))
        return found

    def _mine(self, model: str, fingerprint: str) -> bool:
        """Whether a verdict by this model (and fingerprint, when the table has one) is ours."""
        return model == self.model and (self.fingerprint is None or fingerprint == self.fingerprint)

    def _judge(
        self, entry_id: int, status: str, masked: bool, validated: bool, validated_any: bool
    ) -> str | None:
        """'use', 'masked' or None (not served) for an entry under this table's rules."""
        if entry_id in self._exclude:
            return None
        if entry_id in self._mask:
            return "masked"
        if entry_id in self._include:
            return "use"
        if masked:
            return "masked"
        if status == "rejected":
            return None
        if self.use == "all":
            return "use"
        if self.use == "own":
            return "use" if validated else None
        return "use" if status == "accepted" or validated_any else None

    def _read(self, what: Callable[[], Any], trace: list[str] | None) -> Any:
        """Run a read against the database, turning any failure into one warning."""
        if self._broken is not None:
            return None
        try:
            return what()
        except (_Broken, sqlite3.Error, OSError, ValueError) as error:
            reason = str(error) if isinstance(error, _Broken) else f"{self.path}: {error}"
            if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
                # Transient: answer the heuristic now, without remembering that answer.
                warnings.warn(
                    f"tunecache: cache busy, answering the heuristic for now ({reason})",
                    TunecacheWarning,
                    stacklevel=4,
                )
                raise _Transient from None
            self._broken = reason
            # What was answered from this file before the damage showed is not trusted either:
            # from now on every question, old or new, gets the heuristic.
            self._memo.clear()
            self._indexes.clear()
            for memo in self._dispatch.values():
                memo.clear()
            warnings.warn(
                f"tunecache: cannot read the cache, every answer is the heuristic ({reason})",
                TunecacheWarning,
                stacklevel=4,
            )
            if trace is not None:
                trace.append(f"the cache cannot be read: {reason}")
            return None

    def _index(self, signature: str, sum_: str, trace: list[str] | None) -> _Index:
        found = self._indexes.get((signature, sum_))
        if found is not None:
            return found
        by_names: dict[tuple[str, ...], dict[tuple[int, ...], tuple[int | None, str]]] = {}
        masked: dict[Key, int | None] = {}
        choices: dict[str, str] = {}
        known_names: dict[tuple[str, ...], tuple[str, ...]] = {}

        def consume(
            entry_id: int,
            dims: str,
            choice: str,
            status: str,
            masked_: bool,
            validated: bool,
            validated_any: bool,
        ) -> None:
            judged = self._judge(entry_id, status, masked_, validated, validated_any)
            if judged is None:
                return
            names, values = _parse_dims(dims)
            names = known_names.setdefault(names, names)  # one tuple per list of dim names
            if judged == "masked":
                masked[Key(signature, tuple(zip(names, values, strict=True)))] = entry_id
            else:
                # One str object per distinct choice, not one per row.
                choice = choices.setdefault(choice, choice)
                by_names.setdefault(names, {})[values] = (entry_id, choice)

        reader = self._reader
        if reader is not None:
            self._read(lambda: reader.signature(signature, sum_, self._mine, consume), trace)
        for key, choice in self._added.get((signature, sum_), []):
            names = tuple(n for n, _ in key.dims)
            values = tuple(v for _, v in key.dims)
            by_names.setdefault(names, {})[values] = (None, choice)
            masked.pop(key, None)
        groups = {n: _Group(n, items, self._symbolic) for n, items in by_names.items()}
        index = _Index(groups, masked)
        self._indexes[signature, sum_] = index
        return index

    def _resolve(
        self, key: Key, names: tuple[str, ...], heuristic: str, trace: list[str] | None
    ) -> Answer:
        """The answer for a key; `heuristic` is "" when explain does not know the caller's."""
        sum_ = self._checksum(names)
        if trace is not None:
            trace.append(f"candidate list {list(names)} has checksum {sum_}")
        answer = self._lookup(key, names, sum_, heuristic, trace)
        if answer is None:
            if trace is not None:
                trace.append("nothing tuned answers: the heuristic")
            answer = Answer(heuristic, "heuristic")
        return answer

    def _lookup(
        self,
        key: Key,
        names: tuple[str, ...],
        sum_: str,
        heuristic: str,
        trace: list[str] | None,
    ) -> Answer | None:
        # An in-memory decision (derive(add=...)) wins over anything stored.
        added = self._added_exact.get((key, sum_))
        if added is not None:
            if trace is not None:
                trace.append(f"an in-memory decision for this key chooses {added!r}")
            return Answer(added, "exact", None, 0.0) if added in names else None

        index = self._indexes.get((key.signature, sum_))
        if index is None and self._reader is not None:
            # Before a signature is loaded, one indexed query answers an exact hit: a process
            # that only meets tuned keys never loads (or parses) the rest of the cache.
            reader = self._reader
            text = format_key(key)
            got = self._read(lambda: reader.point(text, sum_), trace)
            if got is not None:
                entry_id, choice, status, verdicts = got
                mine = [v for m, fp, v in verdicts if self._mine(m, fp)]
                judged = self._judge(
                    entry_id,
                    status,
                    "masked" in mine,
                    "validated" in mine,
                    any(v == "validated" for _, _, v in verdicts),
                )
                if trace is not None:
                    trace.append(_describe(entry_id, choice, status, verdicts, judged, self))
                if judged == "masked":
                    return Answer(heuristic, "masked", entry_id, 0.0)
                if judged == "use":
                    if choice in names:
                        return Answer(choice, "exact", entry_id, 0.0)
                    if trace is not None:
                        trace.append(f"its choice {choice!r} is not a legal candidate any more")
                    return None
            elif trace is not None and self._broken is None:
                trace.append("no entry for this exact key and candidate list")
            if self._broken is not None:
                return None
        index = self._index(key.signature, sum_, trace)

        masked_id = index.masked.get(key, -1)
        if masked_id != -1:
            if trace is not None:
                trace.append(f"entry {masked_id} for this key is masked for model {self.model!r}")
            return Answer(heuristic, "masked", masked_id, 0.0)
        dim_names = tuple(n for n, _ in key.dims)
        values = tuple(v for _, v in key.dims)
        group = index.groups.get(dim_names)
        if group is None:
            if trace is not None:
                trace.append(f"no usable tuned shape of {key.signature} with dims {dim_names}")
            return None
        row = group.exact(values)
        if row is not None:
            if row.choice in names:
                if trace is not None:
                    trace.append(f"entry {row.entry_id} for this exact key chooses {row.choice!r}")
                return Answer(row.choice, "exact", row.entry_id, 0.0)
            if trace is not None:
                trace.append(f"entry {row.entry_id}'s choice {row.choice!r} is not legal any more")
            return None
        found = group.nearest(values, self.max_distance)
        if trace is not None:
            _trace_nearest(trace, group, values, self.max_distance, found)
        if found is None:
            return None
        row, distance = found
        if row.choice not in names:
            return None
        source = Key(key.signature, tuple(zip(dim_names, row.values, strict=True)))
        return Answer(row.choice, "nearest", row.entry_id, distance, source)

    # -- introspection -----------------------------------------------------------------------

    def explain(
        self,
        key: Key | str,
        candidates: Sequence[str] | None = None,
        heuristic: str | None = None,
    ) -> Explanation:
        """How `key` resolves under this table, and why; the memo and counters are untouched.

        Without `candidates`, each list stored for the key's signature is tried in turn. Without
        `heuristic`, an answer from the heuristic has an empty choice: the caller's pick.
        """
        key = parse(key) if isinstance(key, str) else key
        if heuristic is not None and candidates is not None and heuristic not in candidates:
            raise BadArgumentError(f"heuristic {heuristic!r} is not one of the candidates")
        steps: list[str] = [
            f"model {self.model!r}, serving {self.use} entries"
            if self.model is not None
            else f"no model, so no masks; serving {self.use} entries"
        ]
        if self._reader is None:
            steps.append("an in-memory table")
        elif not self._reader.path.exists():
            steps.append(f"no cache at {self._reader.path}: every answer is the heuristic")
        answer: Answer | None = None
        with self._lock:
            try:
                if candidates is not None:
                    lists = [candidate_names(candidates)]
                else:
                    reader = self._reader
                    stored = (
                        self._read(lambda: reader.candidate_sets(key.signature), steps)
                        if reader is not None
                        else None
                    )
                    lists = [names for _, names in stored or []]
                    if not lists:
                        steps.append(f"no candidate list is stored for {key.signature}")
                for names in lists:
                    pick = heuristic if heuristic is not None and heuristic in names else ""
                    answer = self._resolve(key, names, pick, steps)
                    steps.append(
                        f"answer: {answer.choice or 'the caller heuristic'} ({answer.source})"
                    )
            except _Transient:
                steps.append("the cache is busy: the heuristic, for now")
        return Explanation(key, answer, tuple(steps))


class _Transient(Exception):
    """A read failed for a passing reason (a lock); the answer must not be remembered."""


def _describe(
    entry_id: int, choice: str, status: str, verdicts: list[Any], judged: str | None, table: Table
) -> str:
    said = ", ".join(f"{m}: {v}" for m, _, v in verdicts) or "no model's verdict"
    outcome = {
        "use": "it is served",
        "masked": f"it is masked for {table.model!r}",
        None: f"it is not served under use={table.use!r}",
    }[judged]
    return f"entry {entry_id} for this exact key chooses {choice!r} ({status}; {said}): {outcome}"


def _trace_nearest(
    trace: list[str],
    group: _Group,
    values: tuple[int, ...],
    cap: float,
    found: tuple[_Row, float] | None,
) -> None:
    symbolic = [group.names[i] for i in group.free]
    note = f" (symbolic dims {symbolic} uncapped)" if symbolic else ""
    trace.append(f"searching {group.size} tuned shapes within distance {cap:g}{note}")
    for row, capped, total in group.ranked(values, 3):
        shape = " ".join(f"{n}={v}" for n, v in zip(group.names, row.values, strict=True))
        verdict = "within the cap" if capped <= cap + _EPS else "beyond the cap"
        trace.append(f"  {shape}: distance {total:.3f}, {verdict}, chooses {row.choice!r}")
    if found is not None:
        trace.append(f"borrowing from entry {found[0].entry_id} at distance {found[1]:.3f}")


# -- the current table ----------------------------------------------------------------------------

_EMPTY = Table.empty()
_default: Table = _EMPTY
_current: ContextVar[Table | None] = ContextVar("tunecache_table", default=None)


def current() -> Table:
    """The table in force here: this context's (`using`), else the process default."""
    table = _current.get()
    return _default if table is None else table


def set_default(table: Table | None) -> Table:
    """Make `table` the process default (None: the empty table); returns the previous one."""
    global _default
    if table is not None and not isinstance(table, Table):
        raise BadArgumentError(f"set_default takes a Table, got {type(table).__name__}")
    previous = _default
    _default = _EMPTY if table is None else table
    return previous


class using:
    """Make `table` the current one for this thread or task until the block ends.

    Built on contextvars: other threads and tasks keep their own table, and nested blocks restore
    the outer one on the way out.
    """

    __slots__ = ("_table", "_token")

    def __init__(self, table: Table) -> None:
        if not isinstance(table, Table):
            raise BadArgumentError(f"using() takes a Table, got {type(table).__name__}")
        self._table = table

    def __enter__(self) -> Table:
        self._token = _current.set(self._table)
        return self._table

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _current.reset(self._token)
