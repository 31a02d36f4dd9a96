"""Entries written through the stdlib sqlite3 module: `Cache.put_many`'s rows, without SQLAlchemy.

A process that has only read a cache so far (the resolver and the Triton client read it through
stdlib sqlite3) and then has a few entries to write would otherwise import SQLAlchemy, open an
engine and check the schema for one transaction: most of a second on a GPU host, for a write of
a few milliseconds. `DirectStore` writes the same rows as `Cache.put_many`, from the same checks
and values (`tunecache.writes`, `tunecache.store.values`; tests/store/test_direct.py compares
the two writers' rows), on a connection set up as the engine sets up its own (busy timeout,
foreign keys, WAL, synchronous=NORMAL), in one BEGIN IMMEDIATE transaction queued behind the
writers' flock (`tunecache.store.writelock`).

It writes only a database that exists, in WAL mode, at the schema revision this tunecache
writes (`tunecache.store.reading.HEAD`), checked inside the write transaction so that no
migration can slip in between. Anything else (no file yet, an older or newer schema, a file
SQLite cannot read) is refused with DirectWriteRefused before a row is written: the caller then
writes through `Cache`, which creates, upgrades, refuses or moves aside as `Cache.open` does.
Verdicts are `Cache.put_many`'s job too.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunecache.errors import BadArgumentError, BadRecordError, StoreBusyError, StoreError
from tunecache.paths import sqlite_uri
from tunecache.store import health
from tunecache.store.reading import CHUNK, HEAD, stamp, when
from tunecache.store.values import (
    ENTRY_VALUES,
    RECORD_VALUES,
    EntryWrite,
    OldEntry,
    Slot,
    collapse,
    dims_text,
)
from tunecache.store.writelock import DEFAULT_BUSY_TIMEOUT, WriteQueue, file_identity, is_busy
from tunecache.writes import NewEntry, entry_writes

if TYPE_CHECKING:
    from tunecache.device import Device

__all__ = ["DirectStore", "DirectWriteRefused"]

_ENTRY_SET = ", ".join(f"{c} = ?" for c in ENTRY_VALUES)
_UPDATE_ENTRY = f"UPDATE entries SET {_ENTRY_SET} WHERE id = ?"
_UPDATE_ENTRY_CREATED = f"UPDATE entries SET {_ENTRY_SET}, created_at = ? WHERE id = ?"
_INSERT_ENTRY = (
    f"INSERT INTO entries (device_id, key_id, candidate_set_id, {', '.join(ENTRY_VALUES)},"
    f" created_at) VALUES ({', '.join('?' * (len(ENTRY_VALUES) + 4))})"
)
_INSERT_RECORD = (
    f"INSERT INTO timing_records (entry_id, {', '.join(RECORD_VALUES)}, created_at)"
    f" VALUES ({', '.join('?' * (len(RECORD_VALUES) + 2))})"
)
_INSERT_TIMING = (
    "INSERT INTO candidate_timings (record_id, name, samples, inner_loops, median_s, min_s,"
    " max_s, pruned, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class DirectWriteRefused(StoreError):
    """The database is not one `DirectStore` writes (missing, at another schema revision, in
    another journal mode, unreadable): write it through `Cache` instead."""


class _Moved(DirectWriteRefused):
    """The connection's file was moved aside or replaced: refused, and the connection dropped."""


@contextlib.contextmanager
def _errors(path: Path, timeout: float) -> Iterator[None]:
    """Driver errors as one-line store errors: a lock that stayed taken is StoreBusyError."""
    try:
        yield
    except sqlite3.Error as error:
        if is_busy(error):
            raise StoreBusyError(
                f"cache database {path} is locked by another writer (waited up to {timeout:g} s)"
            ) from error
        raise StoreError(f"cache database {path}: {error}") from error


class DirectStore:
    """One device's cache database, written through stdlib sqlite3 as `Cache.put_many` writes.

    The connection is opened on the first write and kept; a process forked meanwhile opens its
    own. Use it from one thread at a time.
    """

    def __init__(
        self, path: Path, device: Device | None, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    ) -> None:
        self.path = Path(path)
        self.device = device
        self.busy_timeout = float(busy_timeout)
        #: called inside the write transaction once every row is written, before COMMIT
        #: (None: nothing): the seam crash tests stop a writer at
        self.before_commit: Callable[[], object] | None = None
        self._queue = WriteQueue(self.path, self.busy_timeout)
        self._conn: sqlite3.Connection | None = None
        # The (device, inode) of the file the connection opened (see _check_live).
        self._file: tuple[int, int] | None = None
        self._pid = os.getpid()
        # Only committed ids are remembered (as Cache does): an id seen inside a transaction
        # that later rolls back could name another device's row tomorrow.
        self._device_id: int | None = None

    def close(self) -> None:
        """Close the connection (the next write opens another)."""
        conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            conn.close()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # A connection made before a fork belongs to the parent: dropped, never used here.
        self._conn, self._device_id, self._pid = None, None, os.getpid()
        if not self.path.is_file() or self.path.stat().st_size == 0:
            raise DirectWriteRefused(f"cache database {self.path} does not exist yet")
        health.check_filesystem(self.path)
        # mode=rw: a file that went away meanwhile is an error, never a new empty database.
        uri = sqlite_uri(self.path, mode="rw")
        before = file_identity(self.path)
        try:
            conn = sqlite3.connect(
                uri,
                uri=True,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as error:
            raise DirectWriteRefused(f"cache database {self.path}: {error}") from error
        try:
            # As the engine's connect listener sets up every connection it makes.
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            if mode != "wal":
                raise DirectWriteRefused(f"cache database {self.path} is in {mode} mode, not WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as error:
            conn.close()
            if is_busy(error):
                raise StoreBusyError(f"cache database {self.path} is locked") from error
            raise DirectWriteRefused(f"cache database {self.path}: {error}") from error
        except BaseException:
            conn.close()
            raise
        # The file the connection opened, as the engine records it (store/engine.py): the path
        # named the same file before and after the open, or it is not known.
        after = file_identity(self.path)
        self._file = after if before == after else None
        self._conn = conn
        return conn

    def _check_live(self, conn: sqlite3.Connection) -> None:
        """Refuse, rolling back, a transaction whose file is no longer the one at the path (a
        damaged cache moved aside, under the writers' lock this transaction now holds): the
        caller writes through `Cache`, which opens the live one, and nothing is acknowledged
        into the moved file."""
        if self._file is not None and file_identity(self.path) == self._file:
            return
        raise _Moved(f"cache database {self.path} was moved aside or replaced while it was open")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction on the live file, queued behind the writers' lock,
        at the schema revision this tunecache writes: committed when the block ends, rolled
        back if it raises. Raises DirectWriteRefused, having written nothing, for a database
        this writer leaves to `Cache`. The seam for the other rows written this way (the
        pending keys, `tunecache.store.pending`)."""
        conn = self._connection()
        with _errors(self.path, self.busy_timeout):
            fd = self._queue.acquire()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    self._check_live(conn)
                    revisions = _revisions(conn)
                    if revisions != [HEAD]:
                        raise DirectWriteRefused(
                            f"cache database {self.path} is at schema revision {revisions},"
                            f" not {HEAD!r}"
                        )
                    yield conn
                    if self.before_commit is not None:
                        self.before_commit()
                    conn.execute("COMMIT")
                except BaseException as error:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    if not isinstance(error, Exception) or isinstance(error, _Moved):
                        # Interrupted anywhere, the connection's state is unknown; or its file
                        # is no longer the cache: drop it, the next write opens the live one.
                        self.close()
                    raise
            finally:
                WriteQueue.release(fd)

    def put_many(self, entries: Iterable[NewEntry], *, now: datetime | None = None) -> list[int]:
        """Store many decisions in one transaction, as `Cache.put_many` does; their entry ids.

        The same checks first (a bad entry raises BadKeyError or BadRecordError and nothing is
        written), then the same rows, stamped with `now` (default: the current time). Raises
        DirectWriteRefused, having written nothing, for a database this writer leaves to
        `Cache`, and BadArgumentError for entries that carry verdicts.
        """
        now = datetime.now(UTC) if now is None else now
        batch = entry_writes(entries, now)
        if not batch:
            return []
        if any(w.verdicts for w in batch):
            raise BadArgumentError("DirectStore writes entries without verdicts: use put_many")
        with self.transaction() as conn:
            device_id, ids = self._write(conn, batch, now)
        self._device_id = device_id
        return ids

    def _write(
        self, conn: sqlite3.Connection, batch: Sequence[EntryWrite], now: datetime
    ) -> tuple[int, list[int]]:
        """Every row of the batch, inside the transaction: the device's id and the entries'."""
        for position, write in enumerate(batch):
            found = (
                write.run_id is None
                or conn.execute("SELECT 1 FROM runs WHERE id = ?", (write.run_id,)).fetchone()
            )
            if not found:
                raise BadRecordError(
                    f"entry {position} ({write.key.text}): no run {write.run_id} in this cache"
                )
        device_id = self._device_row(conn, now)
        texts = [w.key.text for w in batch]
        keys = {
            (text,): (text, w.key.signature, dims_text(w.key))
            for text, w in zip(texts, batch, strict=True)
        }
        key_ids = _find_or_make(
            conn,
            "SELECT id, text FROM keys WHERE text IN",
            keys,
            "INSERT INTO keys (text, signature, dims) VALUES (?, ?, ?)",
        )[0]
        set_ids = _set_ids(conn, batch, now)
        places = [
            (key_ids[(text,)], set_ids[w.key.signature, w.checksum])
            for text, w in zip(texts, batch, strict=True)
        ]
        slots = collapse(batch, places, _entries_at(conn, device_id, places))
        _write_entries(conn, device_id, list(slots.values()))
        return device_id, [slots[at].entry_id for at in places]

    def _device_row(self, conn: sqlite3.Connection, now: datetime) -> int:
        if self._device_id is not None:
            return self._device_id
        device = self.device
        if device is None:
            raise BadArgumentError("this DirectStore was opened without a device: no entries")
        found = conn.execute(
            "SELECT id FROM devices WHERE fingerprint = ?", (device.fingerprint,)
        ).fetchone()
        if found is not None:
            return int(found[0])
        # The checked fields are the columns of the same names.
        values = {"fingerprint": device.fingerprint, "created_at": stamp(now), **device.as_dict()}
        cursor = conn.execute(
            f"INSERT INTO devices ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
            tuple(values.values()),
        )
        return int(cursor.lastrowid or 0)


def _revisions(conn: sqlite3.Connection) -> list[str]:
    try:
        return [str(r[0]) for r in conn.execute("SELECT version_num FROM alembic_version")]
    except sqlite3.OperationalError:
        return []


def _chunks(values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


def _rows_in(
    conn: sqlite3.Connection, select: str, values: Sequence[Any], *fixed: Any
) -> Iterator[tuple[Any, ...]]:
    """The rows of `select` (which ends in `column IN`) for each chunk of `values`, `fixed`
    being the statement's parameters before the list."""
    for part in _chunks(values):
        marks = ", ".join("?" * len(part))
        yield from conn.execute(f"{select} ({marks})", (*fixed, *part))


def _find_or_make(
    conn: sqlite3.Connection,
    select: str,
    wanted: Mapping[tuple[Any, ...], tuple[Any, ...]],
    insert: str,
) -> tuple[dict[tuple[Any, ...], int], list[tuple[Any, ...]]]:
    """The ids of the rows whose other selected columns hold each key of `wanted` (`select`
    matches the first of them), inserting the missing ones in order (`wanted`'s value is the
    row); and the keys made."""
    found: dict[tuple[Any, ...], int] = {}
    for row in _rows_in(conn, select, sorted({key[0] for key in wanted})):
        if tuple(row[1:]) in wanted:
            found[tuple(row[1:])] = int(row[0])
    made = [key for key in wanted if key not in found]
    for key in made:
        found[key] = int(conn.execute(insert, wanted[key]).lastrowid or 0)
    return found, made


def _set_ids(
    conn: sqlite3.Connection, batch: Sequence[EntryWrite], now: datetime
) -> dict[tuple[Any, ...], int]:
    """The ids of the batch's candidate sets by (signature, checksum), made with their
    candidates where new."""
    names = {(w.key.signature, w.checksum): w.names for w in batch}
    found, made = _find_or_make(
        conn,
        "SELECT id, signature, checksum FROM candidate_sets WHERE signature IN",
        {key: (*key, len(names[key]), stamp(now)) for key in names},
        "INSERT INTO candidate_sets (signature, checksum, size, created_at) VALUES (?, ?, ?, ?)",
    )
    conn.executemany(
        "INSERT INTO candidates (set_id, position, name) VALUES (?, ?, ?)",
        [(found[key], i, name) for key in made for i, name in enumerate(names[key])],
    )
    return found


def _entries_at(
    conn: sqlite3.Connection, device: int, places: Sequence[tuple[int, int]]
) -> dict[tuple[int, int], OldEntry]:
    """The device's entries at these (key id, set id) places, as they stand."""
    want = set(places)
    out: dict[tuple[int, int], OldEntry] = {}
    select = (
        "SELECT id, key_id, candidate_set_id, choice, created_at FROM entries"
        " WHERE device_id = ? AND key_id IN"
    )
    for entry_id, key_id, set_id, choice, created in _rows_in(
        conn, select, sorted({key_id for key_id, _ in want}), device
    ):
        if (key_id, set_id) in want:
            out[key_id, set_id] = OldEntry(int(entry_id), str(choice), _time(created))
    return out


def _time(text: str) -> datetime:
    """A stored time (never NULL in the entries table) as an aware datetime."""
    found = when(text)
    assert found is not None
    return found


def _values(write: EntryWrite) -> tuple[Any, ...]:
    """An entry's ENTRY_VALUES, times as the store keeps them."""
    return tuple(
        stamp(value) if isinstance(value, datetime) else value
        for value in (getattr(write, c) for c in ENTRY_VALUES)
    )


def _write_entries(conn: sqlite3.Connection, device: int, slots: Sequence[Slot]) -> None:
    """Insert the new entries and replace the old ones, then their records, in the order and
    with the values `tunecache.store.bulk` writes them; every slot learns its entry id."""
    for s in slots:
        if s.old is None:
            row = (device, s.key_id, s.set_id, *_values(s.final), stamp(s.created))
            s.entry_id = int(conn.execute(_INSERT_ENTRY, row).lastrowid or 0)
    old = [s for s in slots if s.old is not None]
    for s in old:
        assert s.old is not None
        s.entry_id = s.old.id
        if s.created_at is None:
            conn.execute(_UPDATE_ENTRY, (*_values(s.final), s.entry_id))
        else:
            row = (*_values(s.final), stamp(s.created_at), s.entry_id)
            conn.execute(_UPDATE_ENTRY_CREATED, row)
    conn.executemany("DELETE FROM timing_records WHERE entry_id = ?", [(s.entry_id,) for s in old])
    conn.executemany(
        "DELETE FROM validations WHERE entry_id = ?",
        [(s.entry_id,) for s in old if s.clear_verdicts],
    )
    for s in slots:
        record = s.final.record
        if record is None:
            continue
        values = tuple(getattr(record, c) for c in RECORD_VALUES)
        row = (s.entry_id, *values, stamp(s.final.updated_at))
        record_id = int(conn.execute(_INSERT_RECORD, row).lastrowid or 0)
        conn.executemany(_INSERT_TIMING, [(record_id, *t) for t in record.timings])
