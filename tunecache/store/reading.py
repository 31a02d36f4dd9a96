"""Read-only access to a cache file for the read commands, through stdlib sqlite3 and the views of
the read contract.

`tunecache where`, `list`, `inspect` and `models` (and the library functions behind them,
`tunecache.maintain.list_entries`, `inspect` and `models`) read through a `CacheReader`: the
views of migrations 0003 and 0004 (`read_entry_details_v1`, `read_verdict_details_v1`,
`read_records_v1`, `read_runs_v1`, `read_models_v1`, `read_devices_v1`, `read_candidates_v1`),
on a `mode=ro` connection with `PRAGMA query_only`. Neither SQLAlchemy nor Alembic is imported,
so a command that only reads starts about as fast as Python does; the store's own questions are
in `tunecache.store.queries`, the resolver's in `tunecache.resolve.reader`.

`CacheReader.open` reads a file only when it is a cache at this tunecache's schema revision with
every view it needs; for anything else (no file yet, an older revision to upgrade, a newer one, a
file that is not a cache) it answers None, and the caller opens the file through the store
(`tunecache.open`), which creates, upgrades, refuses or moves it aside as it always has.
`CacheReader.of` reads a cache the store has opened. Rows stream: a listing of a million entries
never sits in memory whole.
"""

from __future__ import annotations

import contextlib
import sqlite3
import urllib.parse
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from tunecache.errors import StoreBusyError, StoreError
from tunecache.store.access import frozen, write_denied

if TYPE_CHECKING:
    from tunecache.cache import Cache

__all__ = [
    "CHUNK",
    "ENTRY_STATUSES",
    "HEAD",
    "VIEWS",
    "EVERY",
    "CacheReader",
    "EntryQuery",
    "EntryView",
    "ModelView",
    "VerdictView",
    "stamp",
    "when",
]

#: the schema revision this tunecache writes (`tunecache.store.migrate.HEAD`, which a test keeps
#: equal): a file at another revision is opened through the store first
HEAD = "0004"
#: what the status column of the entry views holds (`store.models.ENTRY_STATUSES`, which a test
#: keeps equal)
ENTRY_STATUSES = ("unvalidated", "accepted", "rejected")
#: the read-contract views the reader reads; a file without one of them is left to the store
VIEWS = (
    "read_candidates_v1",
    "read_devices_v1",
    "read_entry_details_v1",
    "read_models_v1",
    "read_records_v1",
    "read_runs_v1",
    "read_verdict_details_v1",
    "read_verdicts_v1",
)
#: how many rows are fetched at a time, and how many entry ids one verdict query binds
CHUNK = 500
#: how long a read waits for a lock (a writer's recovery of a WAL file), as the store does
DEFAULT_TIMEOUT = 30.0

_ENTRY_COLUMNS = (
    "entry_id, key, signature, dims, checksum, choice, heuristic, speedup, status, run_id, "
    "created_at, updated_at"
)
_VERDICT_COLUMNS = (
    "entry_id, model, model_fingerprint, verdict, gain, rounds, confirmations, run_id, "
    "created_at, updated_at"
)


def stamp(value: datetime) -> str:
    """A time as the store writes it (UTC, no zone, to the microsecond), to compare with the
    views' time columns: text in that one form orders as the times do."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def when(text: str | None) -> datetime | None:
    """A time column of a view as an aware datetime in UTC (None stays None)."""
    return None if text is None else _at(text)


def _at(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class EntryView(NamedTuple):
    """One entry as `read_entry_details_v1` has it, its times as aware datetimes."""

    id: int
    key: str
    signature: str
    dims: str
    checksum: str
    choice: str
    heuristic: str | None
    speedup: float | None
    status: str
    run_id: int | None
    created_at: datetime
    updated_at: datetime


class VerdictView(NamedTuple):
    """One verdict as `read_verdict_details_v1` has it."""

    entry_id: int
    model: str
    fingerprint: str
    verdict: str
    gain: float | None
    rounds: int
    confirmations: int
    run_id: int | None
    created_at: datetime
    updated_at: datetime


class ModelView(NamedTuple):
    """A model of the file, with its verdicts on one device's entries."""

    name: str
    fingerprint: str
    created_at: datetime
    validated: int
    masked: int
    #: the time of its latest verdict on the device's entries, or None
    last_verdict: datetime | None


class EntryQuery(NamedTuple):
    """Which of a device's entries a reader returns: every field that is not None must hold.

    The same selection as `tunecache.store.queries.EntryFilter`: `op` is a key's first token
    (the signature equal to it, or starting with it and "_", compared as SQL's LIKE does);
    `model` keeps entries that model has a verdict on, either way; the ages compare the last
    update (`older_than` exclusive, `newer_than` inclusive).
    """

    entry_id: int | None = None
    key: str | None = None
    signature: str | None = None
    op: str | None = None
    model: str | None = None
    status: str | None = None
    older_than: datetime | None = None
    newer_than: datetime | None = None

    def where(self, device: str) -> tuple[str, list[Any]]:
        """The WHERE clause over `read_entry_details_v1` (as `x`) and its parameters."""
        # A key or an id names a handful of rows, found by their own index; "+" keeps SQLite
        # from walking every entry of the device in updated_at order to spare sorting them.
        lookup = self.key is not None or self.entry_id is not None
        clauses = ["+x.device = ?" if lookup else "x.device = ?"]
        params: list[Any] = [device]
        if self.entry_id is not None:
            clauses.append("x.entry_id = ?")
            params.append(self.entry_id)
        for column, value in (
            ("key", self.key),
            ("signature", self.signature),
            ("status", self.status),
        ):
            if value is not None:
                clauses.append(f"x.{column} = ?")
                params.append(value)
        if self.op is not None:
            # Tokens are joined by "_", a LIKE wildcard: it is escaped to stay literal.
            escaped = self.op.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            clauses.append("(x.signature = ? OR x.signature LIKE ? ESCAPE '\\')")
            params += [self.op, escaped + "\\_%"]
        if self.model is not None:
            clauses.append(
                "EXISTS (SELECT 1 FROM read_verdicts_v1 v"
                " WHERE v.entry_id = x.entry_id AND v.model = ?)"
            )
            params.append(self.model)
        if self.older_than is not None:
            clauses.append("x.updated_at < ?")
            params.append(stamp(self.older_than))
        if self.newer_than is not None:
            clauses.append("x.updated_at >= ?")
            params.append(stamp(self.newer_than))
        return " AND ".join(clauses), params


#: the query that selects every entry of the device
EVERY = EntryQuery()


class CacheReader:
    """A read-only connection to one cache file, reading one device's decisions through the
    read-contract views."""

    def __init__(
        self,
        path: Path,
        device: str,
        conn: sqlite3.Connection,
        revision: str,
        readonly_reason: str | None,
    ) -> None:
        self.path = path
        #: the fingerprint of the device whose entries this reader reads
        self.device = device
        #: the schema revision stamped in the file
        self.revision = revision
        #: why the store would refuse writes to this file (as `Cache.readonly_reason`), or None
        self.readonly_reason = readonly_reason
        self._conn = conn

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: Path, device: str, *, timeout: float = DEFAULT_TIMEOUT
    ) -> CacheReader | None:
        """A reader of the cache at `path` for the device with fingerprint `device`, or None
        where the file must go through the store first: it does not exist (or is empty), is
        not stamped with exactly this tunecache's revision (HEAD), lacks a view, or is not a
        database SQLite can read."""
        found = cls._connect(path, device, timeout, (HEAD,))
        if found is not None:
            found.readonly_reason = write_denied(path)
        return found

    @classmethod
    def of(cls, cache: Cache) -> CacheReader:
        """A reader of a cache the store has opened (created or upgraded, or of a newer
        revision, whose `_v1` views are the same); StoreError if it cannot be read."""
        found = cls._connect(cache.path, cache.device.fingerprint, cache.busy_timeout, None)
        if found is None:
            raise StoreError(
                f"cannot read cache database {cache.path}: it lacks the read-contract views "
                f"({', '.join(VIEWS)})"
            )
        found.readonly_reason = cache.readonly_reason
        return found

    @classmethod
    def _connect(
        cls, path: Path, device: str, timeout: float, revisions: tuple[str, ...] | None
    ) -> CacheReader | None:
        try:
            if path.stat().st_size == 0:
                return None  # SQLite creates the file before its first page: a cache in the making
        except OSError:
            return None
        for mode in ("mode=ro", "immutable=1"):
            if mode == "immutable=1" and not cls._frozen(path):
                return None
            try:
                conn = cls._open(path, mode, timeout)
            except sqlite3.Error:
                return None
            try:
                revision = cls._check(conn, revisions)
            except sqlite3.OperationalError:
                # A WAL database in a folder no one may write has no -shm to map: nobody writes
                # it, so it is read as immutable, as the store and the resolver read it.
                conn.close()
                continue
            except sqlite3.Error:
                conn.close()
                return None
            if revision is None:
                conn.close()
                return None
            return cls(path, device, conn, revision, None)
        return None

    @staticmethod
    def _open(path: Path, mode: str, timeout: float) -> sqlite3.Connection:
        uri = "file:" + urllib.parse.quote(str(path.absolute())) + "?" + mode
        conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
        conn.execute("PRAGMA query_only = 1")
        return conn

    @staticmethod
    def _frozen(path: Path) -> bool:
        wal = path.with_name(path.name + "-wal")
        # Committed frames in a -wal would be ignored by an immutable reader: not frozen, then.
        return frozen(path) and not (wal.exists() and wal.stat().st_size > 0)

    @staticmethod
    def _check(conn: sqlite3.Connection, revisions: tuple[str, ...] | None) -> str | None:
        """The file's one revision, if it is one of `revisions` (any, for None) and the file
        has every view; else None."""
        names = {
            str(name)
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
                " AND (name = 'alembic_version' OR name LIKE 'read\\_%\\_v1' ESCAPE '\\')"
            )
        }
        if "alembic_version" not in names or not names.issuperset(VIEWS):
            return None
        stamped = [str(v) for (v,) in conn.execute("SELECT version_num FROM alembic_version")]
        if len(stamped) != 1 or (revisions is not None and stamped[0] not in revisions):
            return None
        return stamped[0]

    @property
    def connection(self) -> sqlite3.Connection:
        """The read-only sqlite3 connection behind this reader, for diagnostics and tests (its
        query plans); reads go through the methods, which turn SQLite's errors into the
        store's."""
        return self._conn

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> CacheReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<CacheReader {self.path} device {self.device[:12]}>"

    # -- reading ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: every read inside sees the file as it was when the first
        one ran, whatever writers commit meanwhile. Nested snapshots are the outer one."""
        if self._conn.in_transaction:
            yield
            return
        with self._errors():
            self._conn.execute("BEGIN")
        try:
            yield
        finally:
            # An iterator left unfinished may be closed after its reader was.
            with contextlib.suppress(sqlite3.ProgrammingError):
                if self._conn.in_transaction:
                    self._conn.execute("COMMIT")

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's errors as the store's: busy past the timeout, or unreadable."""
        try:
            yield
        except sqlite3.OperationalError as error:
            if "locked" in str(error) or "busy" in str(error):
                raise StoreBusyError(
                    f"cache database {self.path} stayed locked: {error}"
                ) from error
            raise StoreError(f"cannot read cache database {self.path}: {error}") from error
        except sqlite3.Error as error:
            raise StoreError(f"cannot read cache database {self.path}: {error}") from error

    def _rows(self, sql: str, params: Sequence[Any]) -> list[Any]:
        with self._errors():
            return self._conn.execute(sql, params).fetchall()

    def entry_count(self) -> int:
        """How many entries the device has (0 for a device the file has never seen)."""
        found = self._rows("SELECT entries FROM read_devices_v1 WHERE device = ?", (self.device,))
        return int(found[0][0]) if found else 0

    def count(self, query: EntryQuery = EVERY) -> int:
        """How many of the device's entries `query` selects."""
        where, params = query.where(self.device)
        sql = f"SELECT count(*) FROM read_entry_details_v1 x WHERE {where}"
        return int(self._rows(sql, params)[0][0])

    def entries(
        self, query: EntryQuery = EVERY, *, limit: int | None = None
    ) -> Iterator[list[EntryView]]:
        """The device's entries `query` selects, most recently updated first (then the
        highest id), in lists of at most CHUNK, as they are read."""
        where, params = query.where(self.device)
        sql = (
            f"SELECT {_ENTRY_COLUMNS} FROM read_entry_details_v1 x WHERE {where}"
            " ORDER BY x.updated_at DESC, x.entry_id DESC"
        )
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._errors():
            cursor = self._conn.execute(sql, params)
        try:
            while True:
                with self._errors():
                    rows = cursor.fetchmany(CHUNK)
                if not rows:
                    return
                # Entries written in one batch share their times: each is parsed once.
                times: dict[str, datetime] = {}
                for row in rows:
                    for text in row[10:]:
                        if text not in times:
                            times[text] = _at(text)
                yield [EntryView._make((*row[:10], times[row[10]], times[row[11]])) for row in rows]
        finally:
            with contextlib.suppress(sqlite3.ProgrammingError):
                cursor.close()

    def verdicts(self, entry_ids: Sequence[int]) -> list[VerdictView]:
        """The verdicts on these entries, by entry id, then model name and fingerprint."""
        out: list[VerdictView] = []
        for start in range(0, len(entry_ids), CHUNK):
            part = entry_ids[start : start + CHUNK]
            sql = (
                f"SELECT {_VERDICT_COLUMNS} FROM read_verdict_details_v1"
                f" WHERE entry_id IN ({', '.join('?' * len(part))})"
                " ORDER BY entry_id, model, model_fingerprint"
            )
            out += [
                VerdictView._make((*row[:8], _at(row[8]), _at(row[9])))
                for row in self._rows(sql, part)
            ]
        return out

    def verdict_names(self, entry_ids: Sequence[int]) -> list[tuple[int, str, str]]:
        """(entry id, model, verdict) of every verdict on these entries, in `verdicts`'s
        order: what a listing shows of them, read without the rest."""
        out: list[tuple[int, str, str]] = []
        for start in range(0, len(entry_ids), CHUNK):
            part = entry_ids[start : start + CHUNK]
            sql = (
                "SELECT entry_id, model, verdict FROM read_verdicts_v1"
                f" WHERE entry_id IN ({', '.join('?' * len(part))})"
                " ORDER BY entry_id, model, model_fingerprint"
            )
            out += self._rows(sql, part)
        return out

    def candidates(self, signature: str, checksum: str) -> tuple[str, ...]:
        """The names of a candidate list, in its order."""
        sql = (
            "SELECT name FROM read_candidates_v1 WHERE signature = ? AND checksum = ?"
            " ORDER BY position"
        )
        return tuple(str(name) for (name,) in self._rows(sql, (signature, checksum)))

    def record(self, entry_id: int) -> bytes | None:
        """The CBOR bytes of an entry's timing record, or None if it has none."""
        found = self._rows("SELECT data FROM read_records_v1 WHERE entry_id = ?", (entry_id,))
        return None if not found or found[0][0] is None else bytes(found[0][0])

    def run(self, run_id: int) -> dict[str, Any] | None:
        """The run with this id as its columns by name (`id`, `kind`, `status`, `device`,
        `tool_version`, `hostname`, `platform`, `python_version`, `pid`, its times and
        `notes`), or None."""
        with self._errors():
            cursor = self._conn.execute("SELECT * FROM read_runs_v1 WHERE run_id = ?", (run_id,))
            row = cursor.fetchone()
            names = [d[0] for d in cursor.description]
        if row is None:
            return None
        out = dict(zip(names, row, strict=True))
        out["id"] = out.pop("run_id")
        for name in ("started_at", "finished_at"):
            out[name] = when(out[name])
        return out

    def models(self) -> list[ModelView]:
        """Every model of the file, by name and fingerprint, with how many of the device's
        entries it validated and masked and when it last judged one."""
        counts: dict[tuple[str, str], dict[str, Any]] = {}
        for model, fingerprint, verdict, n, latest in self._rows(
            "SELECT v.model, v.model_fingerprint, v.verdict, count(*), max(v.updated_at)"
            " FROM read_verdicts_v1 v JOIN read_entries_v1 e ON e.entry_id = v.entry_id"
            " WHERE e.device = ? GROUP BY v.model, v.model_fingerprint, v.verdict",
            (self.device,),
        ):
            by = counts.setdefault((model, fingerprint), {"validated": 0, "masked": 0})
            by[verdict] = int(n)
            # The views' times are text in one form, which orders as the times do.
            by["last"] = max(by.get("last") or latest, latest)
        models = self._rows(
            "SELECT model, model_fingerprint, created_at FROM read_models_v1"
            " ORDER BY model, model_fingerprint",
            (),
        )
        out = []
        for name, fingerprint, created in models:
            by = counts.get((name, fingerprint), {})
            out.append(
                ModelView(
                    name,
                    fingerprint,
                    _at(created),
                    by.get("validated", 0),
                    by.get("masked", 0),
                    when(by.get("last")),
                )
            )
        return out
