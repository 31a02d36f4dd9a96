"""Read-only access to a cache file for the read commands, through stdlib sqlite3 and the views of
the read contract.

`tunecache where`, `list`, `inspect` and `models` (and the library functions behind them,
`tunecache.maintain.list_entries`, `inspect` and `models`) read through a `CacheReader`: the
views of migrations 0003 and 0004 (`read_entry_details_v1`, `read_verdict_details_v1`,
`read_records_v1`, `read_runs_v1`, `read_models_v1`, `read_devices_v1`, `read_candidates_v1`),
on a `mode=ro` connection with `PRAGMA query_only` (or another way to read without writing,
where that one cannot: `tunecache.store.filesystems.open_for_reading`). Neither SQLAlchemy nor
Alembic is imported, so a command that only reads starts about as fast as Python does; the
store's own questions are in `tunecache.store.queries`, the resolver's in
`tunecache.resolve.reader`.

`CacheReader.open` reads a file only when it is a cache at this tunecache's schema revision with
every view it needs; for anything else (no file yet, an older revision to upgrade, a newer one, a
file that is not a cache) it answers None. It never creates a file: a read command that finds no
file says so (`tunecache.cli.device.existing`), and for the others opens the file through the
store (`tunecache.open`), which upgrades, refuses or moves it aside as it always has.
`CacheReader.of` reads a cache the store has opened. Rows stream: a listing of a million entries
never sits in memory whole. Rows are plain tuples, in the orders ENTRY_COLUMNS, VERDICT_COLUMNS
and MODEL_COLUMNS name (which are those of `tunecache.maintain`'s reports, which build on them);
close a reader with `close()` or `contextlib.closing`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import warnings
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType

from tunecache.errors import StoreBusyError, StoreError, TunecacheWarning
from tunecache.store import schema
from tunecache.store.access import write_denied
from tunecache.store.filesystems import database_stat, no_room, open_for_reading

# Not `typing` at run time: the read commands start without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tunecache.cache import Cache

__all__ = [
    "CHUNK",
    "DEFAULT_TIMEOUT",
    "ENTRY_COLUMNS",
    "ENTRY_STATUSES",
    "FILTERS",
    "HEAD",
    "MODEL_COLUMNS",
    "REPAIR",
    "VERDICT_COLUMNS",
    "VIEWS",
    "CacheReader",
    "stamp",
    "when",
    "where_clause",
]

#: the schema revision this tunecache writes (`tunecache.store.migrate.HEAD`, which a test keeps
#: equal): a file at another revision is opened through the store first
HEAD = "0007"
#: what the status column of the entry views holds (`store.models.ENTRY_STATUSES`, which a test
#: keeps equal)
ENTRY_STATUSES = ("unvalidated", "accepted", "rejected")
#: the read-contract views the reader reads; a file without one of them is left to the store
VIEWS = (
    "read_candidates_v1",
    "read_devices_v1",
    "read_entry_details_v1",
    "read_entry_origins_v1",
    "read_models_v1",
    "read_records_v1",
    "read_runs_v1",
    "read_verdict_details_v1",
    "read_verdicts_v1",
)
#: what `entries` yields of an entry, in order: a row of `read_entry_details_v1`, its times as
#: aware datetimes
ENTRY_COLUMNS = (
    "id", "key", "signature", "dims", "choice", "heuristic", "speedup", "status", "checksum",
    "run_id", "created_at", "updated_at",
)  # fmt: skip
#: what `verdicts` gives of a verdict, in order: a row of `read_verdict_details_v1`
VERDICT_COLUMNS = (
    "entry_id", "model", "fingerprint", "verdict", "rounds", "confirmations", "gain", "run_id",
    "updated_at", "created_at",
)  # fmt: skip
#: what `models` gives of a model, in order: its name and fingerprint, how many of the device's
#: entries it validated and masked, when it was first seen and when it last judged one (or None)
MODEL_COLUMNS = ("name", "fingerprint", "validated", "masked", "created_at", "last_verdict")
#: the filters `entries` and `count` take (see `where_clause`)
FILTERS = ("entry_id", "key", "signature", "op", "model", "status", "older_than", "newer_than")
#: how many rows are fetched at a time, and how many entry ids one verdict query binds
CHUNK = 500
#: how long a read waits for a lock (a writer's recovery of a WAL file), as the store does
DEFAULT_TIMEOUT = 30.0
#: the command that makes a damaged schema's indexes and views again
REPAIR = "tunecache doctor --repair"

# The views' columns in the orders above.
_ENTRY_SELECT = (
    "x.entry_id, x.key, x.signature, x.dims, x.choice, x.heuristic, x.speedup, x.status, "
    "x.checksum, x.run_id, x.created_at, x.updated_at"
)
_VERDICT_SELECT = (
    "entry_id, model, model_fingerprint, verdict, rounds, confirmations, gain, run_id, "
    "updated_at, created_at"
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


def where_clause(where: Mapping[str, Any], device: str) -> tuple[str, list[Any]]:
    """The WHERE clause over `read_entry_details_v1` (as `x`) that selects the entries of
    `device` (its fingerprint) `where` names, and its parameters.

    `where` maps some of FILTERS to a value each (a None value selects everything): the same
    selection as `tunecache.store.queries.EntryFilter`. `op` is a key's first token (the
    signature equal to it, or starting with it and "_", compared as SQL's LIKE does); `model`
    keeps entries that model has a verdict on, either way; the ages compare the last update
    (`older_than` exclusive, `newer_than` inclusive, each an aware datetime).
    """
    unknown = set(where) - set(FILTERS)
    if unknown:
        raise TypeError(f"no such filter of entries: {', '.join(sorted(unknown))}")
    given = {name: value for name, value in where.items() if value is not None}
    # A key or an id names a handful of rows, found by their own index; "+" keeps SQLite
    # from walking every entry of the device in updated_at order to spare sorting them.
    lookup = "key" in given or "entry_id" in given
    clauses = ["+x.device = ?" if lookup else "x.device = ?"]
    params: list[Any] = [device]
    for name in ("entry_id", "key", "signature", "status"):
        if name in given:
            clauses.append(f"x.{name} = ?")
            params.append(given[name])
    if "op" in given:
        # Tokens are joined by "_", a LIKE wildcard: it is escaped to stay literal.
        op = str(given["op"])
        escaped = op.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        clauses.append("(x.signature = ? OR x.signature LIKE ? ESCAPE '\\')")
        params += [op, escaped + "\\_%"]
    if "model" in given:
        clauses.append(
            "EXISTS (SELECT 1 FROM read_verdicts_v1 v"
            " WHERE v.entry_id = x.entry_id AND v.model = ?)"
        )
        params.append(given["model"])
    if "older_than" in given:
        clauses.append("x.updated_at < ?")
        params.append(stamp(given["older_than"]))
    if "newer_than" in given:
        clauses.append("x.updated_at >= ?")
        params.append(stamp(given["newer_than"]))
    return " AND ".join(clauses), params


#: the filters that select every entry of the device
_EVERY: Mapping[str, Any] = MappingProxyType({})


#: `CacheReader.change_mark`'s question: the tables themselves, not the read contract's views
_MARK = (
    "SELECT (SELECT store_id FROM sync_store), (SELECT seq FROM sync_store),"
    " (SELECT count(*) FROM entries), (SELECT max(id) FROM entries),"
    " (SELECT count(*) FROM validations),"
    " (SELECT count(*) FROM timing_records), (SELECT max(id) FROM timing_records),"
    " (SELECT max(id) FROM runs)"
)


class CacheReader:
    """A read-only connection to one cache file, reading one device's decisions through the
    read-contract views."""

    def __init__(self, path: Path, device: str, conn: sqlite3.Connection) -> None:
        #: the file, and the fingerprint of the device whose entries this reader reads
        self.path, self.device = path, device
        #: why the store would refuse writes to this file (as `Cache.readonly_reason`), or None
        self.readonly_reason: str | None = None
        self._conn = conn

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
                f"cannot read cache database {cache.path}: it lacks some of the read-contract "
                f"views ({', '.join(VIEWS)}), or has them altered; run `{REPAIR}` to make them "
                "again"
            )
        found.readonly_reason = cache.readonly_reason
        return found

    @classmethod
    def _connect(
        cls, path: Path, device: str, timeout: float, revisions: tuple[str, ...] | None
    ) -> CacheReader | None:
        try:
            found = database_stat(path)
        except StoreError:
            return None  # not a regular file: the store says so, in its one line
        if found is None or found.st_size == 0:
            return None  # SQLite creates the file before its first page: a cache in the making
        try:
            conn, _ = open_for_reading(path, timeout)
        except sqlite3.Error:
            return None
        try:
            drift = cls._check(conn, revisions)
        except sqlite3.Error:
            drift = None
        if drift is None:
            conn.close()
            return None
        if drift:
            warnings.warn(
                f"cache database {path}: its schema is damaged ({schema.describe(drift)}); "
                f"run `{REPAIR}` to make it whole",
                TunecacheWarning,
                stacklevel=4,
            )
        return cls(path, device, conn)

    @staticmethod
    def _check(
        conn: sqlite3.Connection, revisions: tuple[str, ...] | None
    ) -> tuple[schema.Drift, ...] | None:
        """How the file's indexes and views differ from its revision's (`schema.drift`), where
        it has one revision, one of `revisions` (any, for None: a file the store has opened),
        and every view as its revision has it; None where it has not, or where a table differs
        from its revision's and the store has not yet judged whether that is damage."""
        objects = conn.execute(schema.SCHEMA_QUERY).fetchall()
        names = {str(name) for type_, name, _, _ in objects if type_ in ("table", "view")}
        if "alembic_version" not in names or not names.issuperset(VIEWS):
            return None
        stamped = [str(v) for (v,) in conn.execute("SELECT version_num FROM alembic_version")]
        if len(stamped) != 1 or (revisions is not None and stamped[0] not in revisions):
            return None
        drift = schema.drift(objects, stamped[0])
        if revisions is not None and any(d.holds_data for d in drift):
            return None
        if any(d.type == "view" and d.name in VIEWS for d in drift):
            return None
        return tuple(d for d in drift if not d.holds_data)

    @property
    def revision(self) -> str:
        """The schema revision stamped in the file."""
        return str(self._rows("SELECT version_num FROM alembic_version", ())[0][0])

    @property
    def connection(self) -> sqlite3.Connection:
        """The read-only sqlite3 connection behind this reader, for diagnostics and tests (its
        query plans); reads go through the methods, which turn SQLite's errors into the
        store's."""
        return self._conn

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __repr__(self) -> str:
        return f"<CacheReader {self.path} device {self.device[:12]}>"

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
            full = no_room(error, self.path)
            if full is not None:
                raise StoreError(f"cannot read cache database {self.path}: {full}") from error
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

    def count(self, where: Mapping[str, Any] = _EVERY) -> int:
        """How many of the device's entries `where` selects (see `where_clause`)."""
        clause, params = where_clause(where, self.device)
        sql = f"SELECT count(*) FROM read_entry_details_v1 x WHERE {clause}"
        return int(self._rows(sql, params)[0][0])

    def entries(
        self, where: Mapping[str, Any] = _EVERY, *, limit: int | None = None
    ) -> Iterator[list[tuple[Any, ...]]]:
        """The device's entries `where` selects (see `where_clause`), most recently updated
        first (then the highest id), as rows of ENTRY_COLUMNS in lists of at most CHUNK, as
        they are read."""
        clause, params = where_clause(where, self.device)
        sql = (
            f"SELECT {_ENTRY_SELECT} FROM read_entry_details_v1 x WHERE {clause}"
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
                yield [(*row[:10], times[row[10]], times[row[11]]) for row in rows]
        finally:
            with contextlib.suppress(sqlite3.ProgrammingError):
                cursor.close()

    def verdicts(self, entry_ids: Sequence[int]) -> list[tuple[Any, ...]]:
        """The verdicts on these entries as rows of VERDICT_COLUMNS, by entry id, then model
        name and fingerprint."""
        out: list[tuple[Any, ...]] = []
        for start in range(0, len(entry_ids), CHUNK):
            part = entry_ids[start : start + CHUNK]
            sql = (
                f"SELECT {_VERDICT_SELECT} FROM read_verdict_details_v1"
                f" WHERE entry_id IN ({', '.join('?' * len(part))})"
                " ORDER BY entry_id, model, model_fingerprint"
            )
            out += [(*row[:8], _at(row[8]), _at(row[9])) for row in self._rows(sql, part)]
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

    def origin(self, entry_id: int) -> tuple[str, str, datetime | None] | None:
        """Where a synced entry came from (revision 0006's `read_entry_origins_v1`): the host
        that tuned it, the store or host it was synced from, and when; None for an entry
        written here."""
        found = self._rows(
            "SELECT host, source, synced_at FROM read_entry_origins_v1 WHERE entry_id = ?",
            (entry_id,),
        )
        return None if not found else (str(found[0][0]), str(found[0][1]), when(found[0][2]))

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

    def change_mark(self) -> tuple[Any, ...]:
        """What a write of an entry, a verdict, a timing record or a session changes, read in
        one snapshot: the store's id and change counter (`tunecache.store.changes`: every write
        of an entry or of a verdict on one is numbered), how many entries, verdicts and timing
        records there are and the highest id of each that has one, and the highest run id.
        Two marks of one file are equal only where none of those was written in between (a
        deleted entry, which the counter does not number, changes the count)."""
        return tuple(self._rows(_MARK, ())[0])

    def models(self) -> list[tuple[Any, ...]]:
        """Every model of the file as rows of MODEL_COLUMNS, by name and fingerprint."""
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
        out = []
        for name, fingerprint, created in self._rows(
            "SELECT model, model_fingerprint, created_at FROM read_models_v1"
            " ORDER BY model, model_fingerprint",
            (),
        ):
            by = counts.get((name, fingerprint), {})
            validated, masked = by.get("validated", 0), by.get("masked", 0)
            out.append((name, fingerprint, validated, masked, _at(created), when(by.get("last"))))
        return out
