"""A device's cache: open it, write an entry with its evidence, read it back.

This is the storage-facing API that tuning, validation and maintenance build on. The hot path
(the resolver) does not go through it: it reads the database with the stdlib sqlite3 module.

A cache is a SQLite file by default; `url` (or TUNECACHE_URL) opens a fleet store on PostgreSQL
instead, with the same schema, the same statements and the same API (`tunecache.store.postgres`).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Unpack

from sqlalchemy import Connection, Engine

from tunecache import codec, paths, writes
from tunecache.candidates import checksum
from tunecache.checks import is_int
from tunecache.device import Device
from tunecache.errors import (
    BadArgumentError,
    BadRecordError,
    ReadOnlyStoreError,
    StoreError,
    TunecacheError,
    TunecacheWarning,
)
from tunecache.keys import Key, parse
from tunecache.store import (
    bulk,
    filesystems,
    migrate,
    opening,
    postgres,
    queries,
    rows,
    schema,
    urls,
)
from tunecache.store.engine import (
    DEFAULT_BUSY_TIMEOUT,
    busy_errors,
    check_timeout,
    checkpoint,
    close_engine,
    transaction,
)
from tunecache.store.models import utcnow
from tunecache.writes import NewEntry, NewVerdict, as_key, check_status

__all__ = [
    "OPEN_OPTIONS",
    "Cache",
    "Entry",
    "NewEntry",
    "NewVerdict",
    "Progress",
    "Transaction",
    "open_cache",
]

#: every keyword `Cache.open` (and `tunecache.open`) takes
OPEN_OPTIONS = frozenset({"busy_timeout", "url"}) | paths.LOCATION_OPTIONS

#: a progress callback of long store operations (export, import, doctor): (what is being done,
#: how much is done, out of how much)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored decision, as read back from the cache."""

    id: int
    key: Key
    choice: str
    heuristic: str | None
    status: str
    speedup: float | None
    candidates: tuple[str, ...]
    checksum: str
    created_at: datetime
    updated_at: datetime


def _entry_id(entry: Entry | int) -> int:
    if isinstance(entry, Entry):
        return entry.id
    if not is_int(entry):
        raise BadRecordError(f"an entry is an Entry or its integer id, got {entry!r}")
    return entry


def _check_run(conn: Connection, run_id: int | None, where: str = "") -> None:
    if run_id is not None and not queries.run_exists(conn, run_id):
        raise BadRecordError(f"{where}no run {run_id} in this cache")


class Cache:
    """An open cache database for one device identity: a local SQLite file, or a fleet store
    on PostgreSQL that many hosts and devices share (`url`)."""

    def __init__(
        self,
        path: Path,
        device: Device,
        engine: Engine,
        *,
        busy_timeout: float,
        outcome: migrate.Outcome | None,
        readonly_reason: str | None,
        url: str | None = None,
    ) -> None:
        #: the SQLite file; for a fleet store, the device's own local cache file, which this
        #: Cache never opens (where a pull from the fleet lands)
        self.path = path
        #: the fleet store's URL with its password masked (None for a SQLite cache): what
        #: every message shows of it
        self.url = None if url is None else urls.mask(url)
        self._url = url
        self.device = device
        self.busy_timeout = busy_timeout
        #: what opening did to the schema (None for a database opened read-only)
        self.outcome = outcome
        #: why this cache refuses writes, or None when it accepts them
        self.readonly_reason = readonly_reason
        self._engine = engine
        self._device_id: int | None = None
        # What opening found in the schema that the first write makes again (see mend_schema).
        self._drift: tuple[schema.Drift, ...] = ()
        # Whether a damaged file at this path may be moved aside when the cache is reopened.
        self._may_move = False
        self._reopening = threading.Lock()

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        url: str | None = None,
        **location: Unpack[paths.Location],
    ) -> Cache:
        """Open (creating or upgrading as needed) the cache of this device.

        `location` names the device and the file (`tunecache.paths.Location`): the identity
        options `client`, `client_version`, `threads`, `accelerator` and `cpu` (another
        processor, or a GPU for a GPU client, than this machine's), or a `device`; and `root`,
        under which the database lives at `paths.database_path(device, root)`, or `path`, a
        file. A database written by a newer tunecache is opened read-only, with a
        TunecacheWarning.

        `url` (`postgresql+psycopg://user@host/db`) opens a fleet store on PostgreSQL instead,
        where this device keeps its own rows beside other devices'; so does TUNECACHE_URL, where
        neither `url`, `root` nor `path` is given. Its password is never shown (`Cache.url`).
        """
        paths.check_options(location, "Cache.open", paths.LOCATION_OPTIONS)
        if url is None and location.get("root") is None and location.get("path") is None:
            url = urls.from_environment()
        elif url is not None and (location.get("root") or location.get("path")):
            raise BadArgumentError("a cache is opened at a url, or at a root or path, not both")
        fields, db = paths.locate(**location)
        device = location.get("device") or Device(*fields)
        busy_timeout = check_timeout(busy_timeout)
        if url is not None:
            # The same schema, created or upgraded under the store's writers' lock.
            engine, outcome, reason = opening.connect_fleet(urls.check(url), busy_timeout)
            return cls(
                db,
                device,
                engine,
                busy_timeout=busy_timeout,
                url=url,
                outcome=outcome,
                readonly_reason=reason,
            )
        # A folder, FIFO or device where the database should be is refused, never opened.
        filesystems.database_stat(db)
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create cache folder {db.parent}: {error.strerror}") from error
        # A damaged file at tunecache's own location is moved aside for a fresh cache; one the
        # caller named is never moved.
        may_move = location.get("path") is None
        engine, outcome, readonly_reason, drift = opening.connect(
            db, busy_timeout, may_move=may_move
        )
        cache = cls(
            db,
            device,
            engine,
            busy_timeout=busy_timeout,
            outcome=outcome,
            readonly_reason=readonly_reason,
        )
        cache._may_move = may_move
        # An index or view gone or altered is made again by the first write (a repair is a
        # write, and a cache opened only to read, as doctor without --repair, writes nothing).
        # The file was read just before; the repair looks again under the writers' lock.
        cache._drift = drift
        return cache

    @property
    def where(self) -> str:
        """Where the cache is, as messages name it: its file, or its fleet store's masked URL."""
        return str(self.path) if self.url is None else f"fleet store {self.url}"

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """What turns a driver error into one line (StoreBusyError, StoreError), for this
        cache's backend."""
        if self._url is not None:
            return postgres.errors(self._url, self.busy_timeout)
        return busy_errors(self.path, self.busy_timeout)

    def _reopen(self, failed: Engine) -> Engine:
        """Open the live cache at this path again, after the file the engine `failed` had open
        was moved aside or replaced (StoreMovedError), with every check of `open`; its engine.
        Where another thread has reopened it since, the engine that one opened."""
        with self._reopening:
            if self._engine is not failed:
                return self._engine
            engine, _, self.readonly_reason, self._drift = opening.connect(
                self.path, self.busy_timeout, may_move=self._may_move
            )
            self._engine = engine
            # Row ids belong to a file: the live one may number this device's row otherwise.
            self._device_id = None
            # Its connections only: a transaction still on it ends on it (its file was moved
            # under the writers' lock, so none holds that lock), and close lets go of the rest.
            failed.dispose()
            return engine

    def _reopen_writable(self, failed: Engine) -> Engine:
        """`_reopen`, for a write: the live cache may be one this process cannot write."""
        engine = self._reopen(failed)
        self._check_writable()
        return engine

    def close(self) -> None:
        """Close every connection, and let go of any write lock an interrupted transaction left;
        the cache cannot be used afterwards."""
        close_engine(self._engine)

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.readonly_reason else "read-write"
        return f"<Cache {self.url or self.path} {self.device.dirname} {mode}>"

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine behind this cache: its pool and pragmas, for diagnostics and
        tests. Statements go through `transaction`, which adds the write queue and busy errors."""
        return self._engine

    @property
    def readonly(self) -> bool:
        """Whether this cache refuses writes."""
        return self.readonly_reason is not None

    # -- transactions -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        self._check_writable()
        if self._drift:
            mended = self.mend_schema()
            if mended:
                warnings.warn(
                    f"cache database {self.where}: its schema was not revision {migrate.HEAD}'s "
                    f"({schema.describe(mended)}); its indexes and views are made again",
                    TunecacheWarning,
                    stacklevel=4,
                )
        # A fleet store has no file to be moved aside: nothing to reopen.
        reopen = self._reopen_writable if self._url is None else None
        with self._errors(), transaction(self._engine, reopen=reopen) as conn:
            yield conn

    def _check_writable(self) -> None:
        if self.readonly_reason is not None:
            raise ReadOnlyStoreError(f"cache {self.where} is read-only: {self.readonly_reason}")

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        reopen = self._reopen if self._url is None else None
        with self._errors(), transaction(self._engine, read=True, reopen=reopen) as conn:
            yield conn

    @contextlib.contextmanager
    def transaction(self, *, write: bool = False) -> Iterator[Transaction]:
        """One transaction on this cache, for work that asks or writes several things at once.

        A read (the default) sees one consistent snapshot and takes no lock; `write=True` takes
        the write lock (`BEGIN IMMEDIATE`, queued behind other writers up to `busy_timeout`)
        and commits when the block ends, or rolls everything back if it raises. The statements
        are `tunecache.store.queries` and `tunecache.store.rows` on `Transaction.conn`.
        """
        with self._write() if write else self._read() as conn:
            yield Transaction(self, conn, write=write)

    def checkpoint(self) -> bool:
        """Fold the WAL into the database file and truncate it; False if a reader still
        holding an old snapshot kept it from finishing. A fleet store has no WAL file of
        ours: True, having done nothing."""
        if self._url is not None:
            return True
        with busy_errors(self.path, self.busy_timeout):
            return checkpoint(self._engine, timeout=self.busy_timeout)

    def mend_schema(self) -> tuple[schema.Drift, ...]:
        """Make again the indexes and views of this cache's revision that its file lacks or has
        altered, and drop indexes and triggers no revision has, in one write transaction; what
        it changed (`tunecache.store.schema.Drift`). The first write of a cache does this by
        itself when opening found something to mend."""
        self._check_writable()
        if self._url is not None:
            return ()  # the expected objects are SQLite's SQL: see migrate.table_damage
        mended = migrate.mend_schema(self._engine, self.path, self.busy_timeout)
        self._drift = ()
        return mended

    def revision(self) -> str | None:
        """The schema revision stamped in the database."""
        with self._read() as conn:
            return migrate.current_revision(conn)

    def _find_device_id(self, conn: Connection) -> int | None:
        # Only committed ids are remembered (see put): an id seen inside a write transaction
        # that later rolls back could name another device's row tomorrow.
        if self._device_id is not None:
            return self._device_id
        return queries.device_id(conn, self.device.fingerprint)

    def _device_row(self, conn: Connection) -> int:
        found = self._find_device_id(conn)
        return found if found is not None else rows.device_row(conn, self.device)

    # -- entries ------------------------------------------------------------------------------

    def put(
        self,
        key: Key | str,
        *,
        choice: str,
        candidates: Sequence[str],
        heuristic: str | None = None,
        record: codec.TimingRecord | None = None,
        speedup: float | None = None,
        status: str = "unvalidated",
        run_id: int | None = None,
    ) -> Entry:
        """Store the decision for `key` against this candidate list, with its evidence.

        Writing the same key and list again replaces the decision and its timing record; if the
        choice changes, the models' verdicts on the old decision go with it (they judged another
        choice). Every argument is checked before the transaction starts: a bad one raises and
        writes nothing. One entry of `put_many`, returned as the store now holds it.
        """
        now = utcnow()
        write = writes.entry_write(
            NewEntry(key, choice, candidates, heuristic, record, speedup, status, run_id), now
        )
        with self._write() as conn:
            # Inside the transaction, so a run deleted meanwhile cannot slip through; raising
            # here rolls back, and nothing is written.
            _check_run(conn, write.run_id)
            device_id = self._device_row(conn)
            (written,) = bulk.write_entries(conn, device_id, [write], now=now)
        self._device_id = device_id
        # As the store now holds it: nothing is read back.
        w = write
        decision = (w.key, w.choice, w.heuristic, w.status, w.speedup, w.names, w.checksum)
        return Entry(written.id, *decision, written.created_at, now)

    def put_many(self, entries: Iterable[NewEntry]) -> list[int]:
        """Store many decisions in one transaction, as one `put` each would, in order; their
        entry ids, in the same order.

        Each `NewEntry` carries what `put` takes, and the verdicts of models to write with it
        (`NewVerdict`, as `validate` takes them). Every entry is checked before the transaction
        starts: one bad entry raises a BadKeyError or BadRecordError naming its position and
        key, and nothing is written. Two entries of one key and candidate list end as the
        later one leaves it, as two puts would (both positions get the same id). Every row
        the batch writes is stamped with one time, taken when the call starts. The batch
        takes the write lock once, and its statements run once each for all its rows; nothing
        is read back.
        """
        now = utcnow()
        batch = writes.entry_writes(entries, now)
        if not batch:
            return []
        runs: dict[int, int] = {}
        for position, write in enumerate(batch):
            for run_id in (write.run_id, *(v.run_id for v in write.verdicts)):
                if run_id is not None:
                    runs.setdefault(run_id, position)
        with self._write() as conn:
            for run_id, position in runs.items():
                where = f"entry {position} ({batch[position].key.text}): "
                _check_run(conn, run_id, where)
            device_id = self._device_row(conn)
            written = bulk.write_entries(conn, device_id, batch, now=now)
        self._device_id = device_id
        return [w.id for w in written]

    def _entries(
        self, conn: Connection, device_id: int | None, where: queries.EntryFilter | None = None
    ) -> list[Entry]:
        if device_id is None:
            return []
        found = queries.entries(conn, device_id, where or queries.EntryFilter())
        names = queries.set_names(conn, {row.set_id for row in found})
        return [
            Entry(**{**row.values_for(Entry), "key": parse(row.key)}, candidates=names[row.set_id])
            for row in found
        ]

    def get(self, key: Key | str, *, candidates: Sequence[str] | None = None) -> Entry | None:
        """The entry for `key` on this device, or None.

        With `candidates`, only an entry tuned against exactly that list answers; without, the
        most recently updated entry of the key, whatever list it was tuned against.
        """
        key = as_key(key)
        sum_ = None if candidates is None else checksum(candidates)
        with self._read() as conn:
            where = queries.EntryFilter(key=key.text, checksum=sum_)
            found = self._entries(conn, self._find_device_id(conn), where)
        return found[0] if found else None

    def entries(self) -> list[Entry]:
        """Every entry of this device, most recently updated first."""
        with self._read() as conn:
            return self._entries(conn, self._find_device_id(conn))

    def count(self) -> int:
        """How many entries this device has."""
        with self._read() as conn:
            device_id = self._find_device_id(conn)
            return 0 if device_id is None else queries.count_entries(conn, device_id)

    def record(self, entry: Entry | int) -> codec.TimingRecord | None:
        """The timing record kept with an entry of this device, or None if it has none."""
        entry_id = _entry_id(entry)
        with self._read() as conn:
            data = queries.record_data(conn, entry_id, self._find_device_id(conn))
        return None if data is None else codec.decode(data)

    def set_status(self, entry: Entry | int, status: str) -> Entry:
        """Change an entry's status (accepted / rejected / unvalidated), keeping its evidence.

        `put` replaces a decision and its timing record; acceptance only changes its verdict.
        """
        check_status(status)
        entry_id = _entry_id(entry)
        with self._write() as conn:
            device_id = self._find_device_id(conn)
            if not rows.set_status(conn, entry_id, device_id, status, utcnow()):
                raise BadRecordError(f"no entry {entry_id} on this device")
            return self._entries(conn, device_id, queries.EntryFilter(entry_id=entry_id))[0]

    # -- models, validations, runs ------------------------------------------------------------

    def validate(
        self,
        entry: Entry | int,
        *,
        model: str,
        fingerprint: str,
        verdict: str,
        gain: float | None = None,
        rounds: int = 0,
        confirmations: int = 0,
        run_id: int | None = None,
        status: str | None = None,
    ) -> None:
        """Record a model's verdict on an entry of this device, replacing its earlier one.

        `status`, if given, sets the entry's status in the same transaction: a verdict that
        decides whether the entry may be served at all never lands without it.
        """
        now = utcnow()
        given = writes.verdict_write(
            NewVerdict(model, fingerprint, verdict, gain, rounds, confirmations, run_id), now
        )
        if status is not None:
            check_status(status)
        entry_id = _entry_id(entry)
        with self._write() as conn:
            _check_run(conn, given.run_id)
            device_id = self._find_device_id(conn)
            if not queries.entry_owned(conn, entry_id, device_id):
                raise BadRecordError(f"no entry {entry_id} on this device")
            values = {
                "verdict": given.verdict,
                "gain": given.gain,
                "rounds": given.rounds,
                "confirmations": given.confirmations,
                "run_id": given.run_id,
                "updated_at": now,
            }
            model_id = rows.model_row(conn, given.model, given.fingerprint)
            rows.put_verdict(conn, model_id, entry_id, values, now)
            if status is not None:
                rows.set_status(conn, entry_id, device_id, status, now)

    def verdicts(self, model: str, fingerprint: str | None = None) -> dict[int, str]:
        """This model's verdicts on entries of this device, by entry id (any fingerprint of the
        model's name when `fingerprint` is None)."""
        with self._read() as conn:
            found = queries.verdicts(
                conn,
                self._find_device_id(conn),
                model=model,
                fingerprint=fingerprint,
                order="updated",
            )
        return {v.entry_id: v.verdict for v in found}

    def verdicts_on(self, entry: Entry | int) -> dict[str, str]:
        """Every model's verdict on one entry of this device, by model name."""
        entry_id = _entry_id(entry)
        with self._read() as conn:
            found = queries.verdicts(
                conn, self._find_device_id(conn), entry_id=entry_id, order="updated"
            )
        return {v.model: v.verdict for v in found}

    def note(self, run_id: int, notes: str) -> None:
        """Replace a run's notes: what the session found, written once it knows."""
        if not isinstance(notes, str):
            raise BadRecordError(f"notes are a string, got {type(notes).__name__}")
        writes.check_run_id(run_id)
        with self._write() as conn:
            _check_run(conn, run_id)
            rows.set_run_notes(conn, run_id, notes)

    def runs_noted(self, notes: str, *, status: str = "finished") -> list[int]:
        """Ids of this device's runs in `status` whose notes are exactly `notes`, oldest first."""
        with self._read() as conn:
            return queries.runs_noted(conn, self._find_device_id(conn), notes, status)

    @contextlib.contextmanager
    def run(self, kind: str, notes: str | None = None) -> Iterator[int]:
        """Log a session of work (tuning, validation, import) in the `runs` table.

        The row is written when the session starts and closed as finished, interrupted (Ctrl-C)
        or failed when the block ends, so a crash leaves a visible "running" row behind.
        """
        with self._write() as conn:
            run_id = rows.insert_run(conn, self._device_row(conn), kind, notes)
        status = "failed"
        try:
            yield run_id
            status = "finished"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            try:
                with self._write() as conn:
                    rows.finish_run(conn, run_id, status)
            except TunecacheError:
                # Closing the log must not hide why the session ended: after Ctrl-C or a
                # failure, the row stays "running" (doctor marks it failed) and the original
                # exception goes on. Only a session that finished reports the error.
                if status == "finished":
                    raise


class Transaction:
    """A transaction on one cache (see `Cache.transaction`): its connection, and the rows of
    the cache's own device identity."""

    def __init__(self, cache: Cache, conn: Connection, *, write: bool) -> None:
        self.cache = cache
        #: the SQLAlchemy connection the transaction runs on
        self.conn = conn
        #: whether this transaction holds the write lock
        self.write = write

    def device_id(self) -> int | None:
        """The row id of the cache's device identity, or None if nothing was written for it."""
        return self.cache._find_device_id(self.conn)

    def device_row(self) -> int:
        """The row id of the cache's device identity, inserted if it has none (writes only)."""
        self._require_write("add a device row")
        return self.cache._device_row(self.conn)

    def start_run(self, kind: str, notes: str | None, *, status: str = "running") -> int:
        """Log a session of work of this process on the cache's device; a session that is over
        by the time it commits (an import in one transaction) passes its final `status`."""
        self._require_write("log a run")
        return rows.insert_run(self.conn, self.device_row(), kind, notes, status=status)

    def _require_write(self, what: str) -> None:
        if not self.write:
            raise StoreError(f"cannot {what} in a read transaction of {self.cache.where}")


def open_cache(**kwargs: Any) -> Cache:
    """Open this device's cache; the same arguments as `Cache.open`."""
    return Cache.open(**kwargs)
