"""The one engine factory for cache databases: pragmas, BEGIN IMMEDIATE, bounded waits, forks.

Every connection gets WAL, synchronous=NORMAL, foreign_keys=ON and a busy timeout. pysqlite's own
deferred BEGIN is turned off and SQLAlchemy's `begin` event issues `BEGIN IMMEDIATE` instead, as
SQLAlchemy's pysqlite documentation describes: a deferred transaction that reads and then writes
has to upgrade its lock, and under concurrency that upgrade fails with SQLITE_BUSY or, worse,
loses the write. Reads ask for a deferred `BEGIN` explicitly through `read_connection` (or
`transaction(read=True)`); `transaction` is also what keeps a Ctrl-C from leaving a lock behind.

Every transaction also checks, once it has begun (a writer: once it holds the writers' lock and
SQLite's), that the file its connection opened is still the one at the path: a damaged cache
moved aside (store/quarantine.py, under the writers' lock) or a file replaced by hand leaves
open connections on a file that is no longer the cache, and SQLite goes on writing into it
without a word. The check is one `os.stat` against the device and inode recorded when the
connection opened; a mismatch rolls back and raises StoreMovedError, which `Cache` answers by
reopening the live cache and running the transaction there.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.engine import URL

from tunecache.errors import BadArgumentError, StoreBusyError, StoreError, StoreMovedError
from tunecache.paths import sqlite_uri
from tunecache.store.filesystems import no_room
from tunecache.store.wal import never_checkpoint

# The write queue is SQLAlchemy-free, for the stdlib-sqlite3 writer (tunecache.store.direct)
# to queue behind the same lock as the engines' writers.
from tunecache.store.writelock import (
    DEFAULT_BUSY_TIMEOUT,
    WriteQueue,
    file_identity,
    is_busy,
    thread_locks,
)

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "MAX_BUSY_TIMEOUT",
    "REOPENS",
    "busy_errors",
    "check_timeout",
    "checkpoint",
    "close_engine",
    "file_identity",
    "is_busy",
    "is_read",
    "make_engine",
    "read_connection",
    "track",
    "transaction",
    "write_lock",
]

#: the longest lock wait accepted: "forever" is not a deadline
MAX_BUSY_TIMEOUT = 86400.0
#: how many times one transaction reopens a cache whose file was moved aside or replaced before
#: it gives up with StoreMovedError: each reopen finds the file that is the cache under the
#: writers' lock, so a file that moved again every time is being replaced in a loop
REOPENS = 3

_READ_OPTION = "tunecache_read"
_LOCK_INFO = "tunecache_write_lock"
# The (device, inode) of the file a connection opened, or None where it could not be told.
_FILE_INFO = "tunecache_file"
# The write-queue lock each connection holds, by connection: the pool record's info (where the
# hooks keep it too) is cleared when an interrupt invalidates the connection, and a lock lost
# that way would block every later writer of this process until the deadline.
_held: weakref.WeakKeyDictionary[Connection, int] = weakref.WeakKeyDictionary()
_engines: weakref.WeakSet[Engine] = weakref.WeakSet()
# The database of each engine that may write, whose write queue its checkpoints take.
_writable: weakref.WeakKeyDictionary[Engine, Path] = weakref.WeakKeyDictionary()
# The write queue of each engine that may write: closing the engine lets go of its locks.
_queues: weakref.WeakKeyDictionary[Engine, WriteQueue] = weakref.WeakKeyDictionary()


def _forget_parent_connections() -> None:
    # A forked child must never touch its parent's SQLite connections: two processes sharing one
    # file descriptor and lock state corrupt the database. close=False leaves them to the parent.
    # (The write queue's own locks are let go by tunecache.store.writelock's fork handler.)
    for engine in list(_engines):
        engine.dispose(close=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_connections)


def track(engine: Engine) -> None:
    """Have a forked child drop `engine`'s connections, as it does every tunecache engine's
    (an engine of another backend than SQLite, made by its own factory)."""
    _engines.add(engine)


def is_read(conn: Connection) -> bool:
    """Whether `conn` runs a read transaction (`transaction(read=True)`, `read_connection`)."""
    return bool(conn.get_execution_options().get(_READ_OPTION))


@contextlib.contextmanager
def busy_errors(path: Path, timeout: float) -> Iterator[None]:
    """Turn a lock wait that ran out into StoreBusyError, and other driver errors into
    StoreError, each one line."""
    try:
        yield
    # sqlite3.Error comes from the stdlib connections that inspect files; DBAPIError wraps it.
    except (exc.DBAPIError, sqlite3.Error) as error:
        if is_busy(error):
            raise StoreBusyError(
                f"cache database {path} is locked by another writer (waited up to {timeout:g} s)"
            ) from error
        full = no_room(error, path)
        if full is not None:
            raise StoreError(f"cache database {path}: {full}") from error
        raise StoreError(f"cache database {path}: {getattr(error, 'orig', error)}") from error


def _use_wal(cursor: Any, path: Path, timeout: float) -> None:
    """Put the database in WAL mode, waiting out other openers up to `timeout` seconds."""
    # SQLite answers a journal-mode switch that races another connection's lock with an
    # immediate SQLITE_BUSY: the busy handler is not consulted (seen with two processes opening
    # one fresh file). So the wait is ours, with a deadline, as for every other lock.
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            mode = cursor.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                mode = cursor.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            break
        except sqlite3.OperationalError as error:
            if not is_busy(error) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    if str(mode).lower() != "wal":
        raise StoreError(f"cache database {path} cannot use WAL (journal mode {mode})")


def close_engine(engine: Engine) -> None:
    """Close every connection of `engine`, and let go of every write lock its transactions still
    hold: one an interrupt left with a transaction that never ended (Ctrl-C landing as a `with`
    block's exit began, before the transaction's own clean-up could run)."""
    engine.dispose()
    queue = _queues.get(engine)
    if queue is not None:
        for fd in list(queue.held):
            queue.release(fd)


@contextlib.contextmanager
def write_lock(path: Path, timeout: float) -> Iterator[None]:
    """Hold the writers' lock of the database at `path` (see WriteQueue): no tunecache writer
    begins a transaction on it meanwhile. StoreBusyError past `timeout` seconds."""
    queue = WriteQueue(path, timeout)
    with busy_errors(path, timeout):
        fd = queue.acquire()
    try:
        yield
    finally:
        queue.release(fd)


def check_timeout(busy_timeout: object) -> float:
    """The lock deadline in seconds, refusing what is not a finite number from 0 to a day."""
    if (
        isinstance(busy_timeout, bool)
        or not isinstance(busy_timeout, int | float)
        or not 0 <= busy_timeout <= MAX_BUSY_TIMEOUT
    ):
        raise BadArgumentError(
            f"busy_timeout must be seconds from 0 to {MAX_BUSY_TIMEOUT:g}, got {busy_timeout!r}"
        )
    return float(busy_timeout)


def make_engine(
    path: str | os.PathLike[str],
    *,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    readonly: bool = False,
    immutable: bool = False,
) -> Engine:
    """An engine for the SQLite database at `path`, set up as every tunecache store must be.

    `readonly` opens the file with SQLite's `mode=ro` and `query_only`: nothing, not even a
    checkpoint or a journal-mode switch, writes to it. It is for a database this tunecache must
    not change (a newer schema, a read-only file).

    `immutable` (read-only engines only) promises SQLite that nobody changes the file while it
    is open, so it reads without the `-shm` file a WAL database otherwise needs: the only way
    to read a cache in a folder no one may write to (see `health.frozen`).

    One function on purpose: the connect, checkout, begin, commit and rollback listeners are
    closures over this engine's path, deadline, mode and write queue, and are read together
    (the connect listener records the file that the begin listener checks).
    """
    path = Path(path)
    busy_timeout = check_timeout(busy_timeout)
    if immutable and not readonly:
        raise BadArgumentError("only a read-only engine can treat its file as immutable")
    if readonly:
        query = {"mode": "ro", "uri": "true"}
        if immutable:
            query["immutable"] = "1"
        # A URI filename: percent-encoding keeps '?' and '#' in a path from being read as
        # URI syntax, and a name that is not UTF-8 reaches SQLite as its bytes.
        url = URL.create("sqlite", database=sqlite_uri(path), query=query)
    else:
        url = URL.create("sqlite", database=str(path))
    engine = create_engine(url)
    timeout_ms = int(busy_timeout * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        record.info["pid"] = os.getpid()
        # Take BEGIN away from the driver; the "begin" listener below issues it.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # busy_timeout first: switching to WAL needs a lock another opener may hold.
            cursor.execute(f"PRAGMA busy_timeout = {timeout_ms}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if readonly:
                cursor.execute("PRAGMA query_only = ON")
                never_checkpoint(dbapi_connection)  # see docs/reliability.md, SQLite versions
            else:
                _use_wal(cursor, path, busy_timeout)
                cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        # Belt and braces to register_at_fork: a connection made in another process is dropped.
        if record.info.get("pid") != os.getpid():
            record.dbapi_connection = proxy.dbapi_connection = None
            raise exc.DisconnectionError("connection made in another process")

    queue = WriteQueue(path, busy_timeout)
    _queues[engine] = queue
    if not readonly:
        _writable[engine] = path

    @event.listens_for(engine, "do_connect")
    def _on_do_connect(dialect: Any, record: Any, cargs: Any, cparams: Any) -> Any:
        # Which file the connection opened, for the check in _on_begin. The path names the
        # same file before and after the open, so the open found that one; a file swapped in
        # meanwhile leaves it unknown, and the first transaction reconnects. Where there is no
        # file yet the open creates one, under the writers' lock so that no mover swaps a
        # replacement in between (store/quarantine.py swaps under that lock).
        if readonly:
            return None
        before = file_identity(path)
        fd = queue.acquire() if before is None else -1
        try:
            connection = dialect.connect(*cargs, **cparams)
            after = file_identity(path)
        finally:
            queue.release(fd)
        record.info[_FILE_INFO] = after if before is None or before == after else None
        return connection

    where = os.fspath(path)

    def check_live(conn: Connection) -> None:
        """Raise StoreMovedError, rolling back, if the connection's file is no longer the
        one at the path."""
        opened = conn.info.get(_FILE_INFO)
        try:
            now = os.stat(where)
        except OSError:
            pass
        else:
            if opened == (now.st_dev, now.st_ino):
                return
        with contextlib.suppress(sqlite3.Error):
            _raw(conn).execute("ROLLBACK")
        raise StoreMovedError(
            f"cache database {path} was moved aside or replaced while it was open: this "
            "connection's file is no longer the one at that path; open the cache again"
        )

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if readonly:
            conn.exec_driver_sql("BEGIN")
            return
        if conn.get_execution_options().get(_READ_OPTION):
            conn.exec_driver_sql("BEGIN")
            check_live(conn)
            return
        fd = queue.acquire()
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            check_live(conn)
        except BaseException:
            queue.release(fd)
            raise
        conn.info[_LOCK_INFO] = fd
        _held[conn] = fd

    # SQLAlchemy announces a commit or rollback before it asks the driver, so the statement is
    # run here, and the queue let go only once it has returned; the driver's own call then
    # finds no transaction and does nothing.
    def end(conn: Connection, statement: str) -> None:
        fd = conn.info.pop(_LOCK_INFO, None)
        _held.pop(conn, None)
        if fd is not None:
            try:
                raw = _raw(conn)
                # A rollback may find the transaction already gone (an interrupted statement
                # rolls it back); a commit must reach SQLite, and raises if it cannot.
                if statement == "COMMIT" or raw.in_transaction:
                    raw.execute(statement)
            finally:
                queue.release(fd)

    event.listen(engine, "commit", lambda conn: end(conn, "COMMIT"))
    event.listen(engine, "rollback", lambda conn: end(conn, "ROLLBACK"))

    _engines.add(engine)
    return engine


def _raw(conn: Connection) -> sqlite3.Connection:
    raw = conn.connection.dbapi_connection
    assert isinstance(raw, sqlite3.Connection)
    return raw


def _interrupt_in(error: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or SystemExit behind `error` (itself, or the one a follow-on
    error like SQLAlchemy's PendingRollbackError was raised while handling), or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if not isinstance(current, Exception):
            return current
        seen.add(id(current))
        current = current.__context__
    return None


def _abandon(engine: Engine, conn: Connection) -> None:
    """Throw away what an interrupt left in an unknown state: the write queue's lock this
    thread holds (wherever the interrupt landed between taking and recording it), the
    connection, and the engine's pooled connections, one of which may still sit in a
    transaction the interrupt stopped the hooks from ending. Closing a SQLite connection rolls
    back whatever it had begun."""
    _held.pop(conn, None)
    for fd in list(thread_locks.get(threading.get_ident(), ())):
        WriteQueue.release(fd)
    with contextlib.suppress(Exception):
        conn.invalidate()
    with contextlib.suppress(Exception):
        conn.close()
    with contextlib.suppress(Exception):
        engine.dispose()


@contextlib.contextmanager
def transaction(
    engine: Engine, *, read: bool = False, reopen: Callable[[Engine], Engine] | None = None
) -> Iterator[Connection]:
    """`engine.begin()` for tunecache: a write (or, with `read`, a deferred read) transaction,
    committed when the block ends and rolled back if it raises.

    One that begins on a file that is no longer the one at its path (moved aside or replaced)
    raises StoreMovedError; with `reopen`, it calls it with that engine for one on the live
    file and begins again there (a few times at most). Only the beginning is retried: the block runs
    once, on the file that is the cache.

    Ctrl-C can land anywhere in it, inside SQLAlchemy or a driver call. Then the connection is
    thrown away, the write queue's lock released, and the KeyboardInterrupt itself reaches the
    caller, not a follow-on error about the half-finished transaction: the process can go on to
    log that it was interrupted, with no lock left behind to block it.
    """
    for attempt in range(REOPENS + 1):
        conn = engine.connect()
        try:
            if read:
                conn.execution_options(**{_READ_OPTION: True})
            try:
                begun = conn.begin()
            except StoreMovedError:
                if reopen is None or attempt == REOPENS:
                    raise
                conn.close()
                engine = reopen(engine)
                continue
            with begun:
                yield conn
            return
        except BaseException as error:
            interrupt = _interrupt_in(error)
            if interrupt is None:
                raise
            _abandon(engine, conn)
            if interrupt is error:
                raise
            raise interrupt from None
        finally:
            with contextlib.suppress(Exception):
                conn.close()


@contextlib.contextmanager
def read_connection(engine: Engine) -> Iterator[Connection]:
    """A connection whose transactions begin deferred: a consistent snapshot, no write lock."""
    with engine.connect() as conn:
        conn.execution_options(**{_READ_OPTION: True})
        yield conn


def checkpoint(engine: Engine, *, timeout: float = DEFAULT_BUSY_TIMEOUT) -> bool:
    """Fold the WAL into the database file and truncate it, holding the writers' lock (waiting
    for it up to `timeout` seconds); False if a reader still holding an old snapshot kept it
    from finishing.

    Under the lock no tunecache writer commits meanwhile: a checkpoint racing a commit is what
    the WAL-reset bug needs (docs/reliability.md)."""
    # A read-only engine has no queue: it opens the file `mode=ro`, which cannot checkpoint.
    path = _writable.get(engine)
    fd = -1 if path is None else WriteQueue(path, timeout).acquire()
    try:
        # On the driver's own connection: SQLAlchemy would open a transaction first, and SQLite
        # refuses a checkpoint inside one ("database table is locked").
        with engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            busy = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        WriteQueue.release(fd)
    return busy is not None and int(busy[0]) == 0
