"""The resolver's reader: one cache database through stdlib sqlite3 and the read-contract views.

The views (`read_entries_v1`, `read_verdicts_v1`, `read_candidates_v1`, migration 0003) are the
only part of the schema read here, so neither SQLAlchemy nor Alembic is ever imported. Every read
is guarded, so the host keeps running whatever the file's state:

- no database (or a zero-byte file another process is creating): empty, silently;
- a damaged one, or one without the views: empty from then on, after one `TunecacheWarning`,
  and `on_damage` is called so the table forgets what it answered from the file before;
- a locked one: a `TunecacheWarning` and `Busy`, so the table answers the heuristic for now
  and asks again next time.
"""

from __future__ import annotations

import os
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tunecache.errors import TunecacheWarning

__all__ = ["Busy", "Reader"]

T = TypeVar("T")

if TYPE_CHECKING:
    from tunecache.resolve.columns import Columns

#: How far up the stack a warning points: past the reader and the resolution steps, to the
#: table's own frame (as it always has).
_STACKLEVEL = 6


# The entries of one signature, list and device. The unary + keeps SQLite from driving the query
# by the device's index (every entry of the device, filtered): by the signature's index, the
# cost follows the signature's size.
_ENTRIES = (
    " FROM read_entries_v1 e"
    " WHERE e.signature = :signature AND +e.checksum = :checksum AND +e.device = :device"
)
# Whether a verdict is the reading table's model's (and fingerprint's, when it has one).
_MINE = (
    "coalesce(v.model = :model AND (:fingerprint IS NULL OR v.model_fingerprint = :fingerprint), 0)"
)
# The verdicts on those entries, found from the entries (the signature's index).
_BY_SIGNATURE = (
    " FROM read_verdicts_v1 v JOIN read_entries_v1 e ON e.entry_id = v.entry_id"
    " WHERE e.signature = :signature AND +e.checksum = :checksum AND +e.device = :device"
)
# Every verdict of the file, without the join: a third of the cost a verdict has through its
# entry, so reading them all is cheaper up to about twice as many verdicts as the signature has
# entries (the ones on other entries are left out in numpy).
_EVERY = " FROM read_verdicts_v1 v"
_VERDICT_COST = 2


# The views the resolver reads, and the revision that made them.
_VIEWS = ("read_candidates_v1", "read_entries_v1", "read_verdicts_v1")
_SINCE = "0003"


def _revision(conn: sqlite3.Connection) -> str | None:
    """The one revision stamped in the file, or None."""
    try:
        stamped = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.OperationalError:
        return None
    return str(stamped[0][0]) if len(stamped) == 1 else None


class Busy(Exception):
    """A read failed for a passing reason (a lock); the answer must not be remembered."""


class _Broken(Exception):
    """The database cannot be read; the message says why, for the one warning."""


class Reader:
    """Read-only, guarded access to one cache database through the read-contract views."""

    def __init__(self, path: Path, device_fingerprint: str, timeout: float) -> None:
        self.path = path
        self.device = device_fingerprint
        self.timeout = timeout
        #: why the file cannot be read, once it turned out damaged; None while it reads fine
        self.broken: str | None = None
        #: called once, when the file turns out damaged. It must not refer to the table that
        #: owns this reader: a dropped table would then keep its connection open until the
        #: garbage collector finds the cycle.
        self.on_damage: Callable[[], object] | None = None
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._once = False

    def copy(self) -> Reader:
        """A reader of the same file, device and timeout, with a connection of its own."""
        return Reader(self.path, self.device, self.timeout)

    # -- the guarded reads -------------------------------------------------------------------

    def point(
        self, key_text: str, checksum_: str, trace: list[str] | None
    ) -> tuple[int, str, str, list[Any]] | None:
        """The entry of exactly this key and list on this device, with its verdicts."""
        return self._guard(lambda: self._point(key_text, checksum_), trace)

    def columns(
        self,
        signature: str,
        checksum_: str,
        model: str | None,
        fingerprint: str | None,
        trace: list[str] | None,
    ) -> list[Columns]:
        """Every entry of a signature and list on this device as columns, one `Columns` for
        each list of dim names, with the verdict flags of `model` (and `fingerprint`, when one
        is given); [] when the file cannot be read (then `broken` says why).

        One pass in SQL gives each column as one text, which numpy parses without a Python
        call per row (`tunecache.resolve.columns`); a signature whose texts are not in that
        form is read again row by row.
        """
        got = self._guard(lambda: self._columns(signature, checksum_, model, fingerprint), trace)
        return got or []

    def candidate_sets(
        self, signature: str, trace: list[str] | None
    ) -> list[tuple[str, tuple[str, ...]]]:
        """The candidate lists stored for a signature (for explain), by checksum."""
        return self._guard(lambda: self._candidate_sets(signature), trace) or []

    def _guard(self, read: Callable[[], T], trace: list[str] | None) -> T | None:
        """Run a read against the database, turning any failure into one warning."""
        if self.broken is not None:
            return None
        try:
            try:
                return read()
            finally:
                if self._once:
                    self._once = False
                    self.close()
        # OverflowError: a dims value too large for 64 bits, which no valid key has.
        except (_Broken, sqlite3.Error, OSError, ValueError, OverflowError) as error:
            reason = str(error) if isinstance(error, _Broken) else f"{self.path}: {error}"
            transient = None
            if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
                transient = f"tunecache: cache busy, answering the heuristic for now ({reason})"
            elif isinstance(error, sqlite3.Error | OSError):
                from tunecache.store.filesystems import no_room

                full = no_room(error, self.path)
                if full is not None:
                    transient = (
                        f"tunecache: cannot read the cache for now, answering the heuristic "
                        f"({self.path}: {full})"
                    )
            if transient is not None:
                # Transient: answer the heuristic now, without remembering that answer.
                warnings.warn(transient, TunecacheWarning, stacklevel=_STACKLEVEL)
                raise Busy from None
            self.broken = reason
            # What was answered from this file before the damage showed is not trusted either:
            # from now on every question, old or new, gets the heuristic.
            if self.on_damage is not None:
                self.on_damage()
            warnings.warn(
                f"tunecache: cannot read the cache, every answer is the heuristic ({reason})",
                TunecacheWarning,
                stacklevel=_STACKLEVEL,
            )
            if trace is not None:
                trace.append(f"the cache cannot be read: {reason}")
            return None

    # -- the connection ----------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection | None:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # A connection inherited across fork() must never be used by the child: open anew.
        self._conn = None
        from tunecache.errors import StoreError
        from tunecache.store.filesystems import EXCLUSIVE, database_stat, open_for_reading

        try:
            found = database_stat(self.path)
        except StoreError as error:
            # A folder, a FIFO, a device: never opened (a FIFO would block the host).
            raise _Broken(str(error)) from None
        if found is None:
            return None  # no cache: every answer is the heuristic, and nothing is created
        if found.st_size == 0:
            # SQLite creates the file before its first page: a cache being created right now.
            return None
        conn, how = open_for_reading(self.path, self.timeout)
        try:
            self._check(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._pid = os.getpid()
        # Read with the file locked against every other connection (no room for a -shm file):
        # held for one read at a time, never between questions.
        self._once = how == EXCLUSIVE
        return conn

    def _check(self, conn: sqlite3.Connection) -> None:
        from tunecache.store import schema  # on a first connection, not on import

        views = dict(
            conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'view' AND name IN (?, ?, ?)",
                _VIEWS,
            ).fetchall()
        )
        wrong = [
            f"view {name} missing" if name not in views else f"view {name} altered"
            for name in _VIEWS
            if name not in views
            or schema.digest("view", views[name]) != schema.OBJECTS[("view", name)][1]
        ]
        if not wrong:
            return
        # Only now is the revision worth a question: a file whose views are not these is older
        # than they are, damaged, or of a newer tunecache (whose views may be written anew).
        revision = _revision(conn)
        missing = sorted(set(_VIEWS) - set(views))
        if revision in schema.REVISIONS[: schema.REVISIONS.index(_SINCE)]:
            raise _Broken(
                f"cache database {self.path} is at schema revision {revision} and lacks the "
                f"views {', '.join(missing)}: it predates tunecache's resolver. Open it once with "
                "tunecache.open() to upgrade it"
            )
        if revision in schema.REVISIONS:
            raise _Broken(
                f"cache database {self.path}: its schema is damaged ({', '.join(wrong)}); "
                "run `tunecache doctor --repair` to make it whole"
            )
        if missing:
            raise _Broken(
                f"cache database {self.path} lacks the views {', '.join(missing)}: it is not "
                "a tunecache cache this tunecache can read"
            )

    def close(self) -> None:
        """Close the connection; the next read opens a new one."""
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    # -- the queries -------------------------------------------------------------------------

    def _point(self, key_text: str, checksum_: str) -> tuple[int, str, str, list[Any]] | None:
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

    def _columns(
        self, signature: str, checksum_: str, model: str | None, fingerprint: str | None
    ) -> list[Columns]:
        from tunecache.resolve import columns

        conn = self._connect()
        if conn is None:
            return []
        args = {
            "signature": signature,
            "checksum": checksum_,
            "device": self.device,
            "model": model,
            "fingerprint": fingerprint,
        }
        conn.execute("BEGIN")
        try:
            separator = f"char({ord(columns.CHOICE_SEPARATOR)})"
            cursor = conn.execute(
                f"SELECT count(*), group_concat({columns.PACKED}), group_concat(e.dims, ' '),"
                f" group_concat(e.choice, {separator})" + _ENTRIES,
                args,
            )
            # All the aggregates step through the same rows in the same order, so the n-th
            # item of each text is the same entry's. Closing the cursor frees SQLite's copy of
            # the texts before they are parsed; the list lets the parser free each of ours.
            texts = list(cursor.fetchone())
            cursor.close()
            count = texts[0]
            found = columns.from_texts(texts)
            if found is None:
                rows = conn.execute(
                    f"SELECT e.entry_id, {columns.STATUS_CODE}, e.dims, e.choice" + _ENTRIES, args
                )
                found = columns.from_rows(rows)
            if count:
                found = self._verdicts(conn, args, count, found)
        finally:
            conn.execute("COMMIT")
        return found

    @staticmethod
    def _verdicts(
        conn: sqlite3.Connection, args: dict[str, Any], count: int, found: list[Columns]
    ) -> list[Columns]:
        """`found` (`count` entries) with the flags of the verdicts on its entries."""
        from tunecache.resolve import columns

        # How many verdicts the file holds, counted up to the point where reading them through
        # the signature's entries costs less than reading them all.
        cap = count * _VERDICT_COST + 1
        (some,) = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM read_verdicts_v1 LIMIT ?)", (cap,)
        ).fetchone()
        if not some:
            return found
        where = _EVERY if some < cap else _BY_SIGNATURE
        (text,) = conn.execute(
            f"SELECT group_concat({columns.VERDICT_WORD.format(mine=_MINE)})" + where, args
        ).fetchone()
        verdicts = columns.verdicts_from_text(text)
        if verdicts is None:
            rows = conn.execute(
                f"SELECT v.entry_id, {columns.VERDICT_BITS.format(mine=_MINE)}" + where, args
            )
            verdicts = columns.verdicts_from_rows(rows)
        return columns.with_verdicts(found, *verdicts)

    def _candidate_sets(self, signature: str) -> list[tuple[str, tuple[str, ...]]]:
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
