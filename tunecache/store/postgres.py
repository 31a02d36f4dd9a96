"""The engine factory for a fleet store on PostgreSQL (psycopg 3), and its errors in one line.

The same models, migrations, queries and writes as the SQLite cache; what differs is how a
transaction begins and how a failure reads:

- A write transaction takes the store's writers' lock first: a transaction-level advisory lock
  (`pg_advisory_xact_lock`) keyed by the schema, waited for up to the busy timeout
  (`lock_timeout`), then StoreBusyError. Writers are serialised as SQLite's `BEGIN IMMEDIATE`
  serialises them, so the find-then-insert of `store.bulk` never races another writer into a
  unique violation, and a schema migration, which takes the same lock, runs exactly once
  (`tunecache.store.migrate.ensure_fleet_schema` looks at the revision again under it: looking
  before the lock is how concurrent first starts create a table twice). The lock ends with the
  transaction, so a writer that dies holds nothing.
- A read transaction is REPEATABLE READ, READ ONLY: one snapshot, as a SQLite read sees.
- The first write of an engine checks the role's INSERT, UPDATE and DELETE privileges on the
  store's tables, so a read-only role fails with one line naming what it lacks, before a row is
  written (and a privilege error from the server itself reads the same way).
- Connections are checked before use (`pool_pre_ping`), a connection attempt gives up after
  `DEFAULT_CONNECT_TIMEOUT` seconds unless the URL says otherwise (`connect_timeout`), and a
  forked child never uses its parent's connections.

Every message names the store by its masked URL (`tunecache.store.urls`): no password reaches a
message, a report or a log line, and a driver's message is scrubbed of the URL's secrets.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.engine import make_url

from tunecache.errors import (
    BadArgumentError,
    ReadOnlyStoreError,
    StoreBusyError,
    StoreError,
    StoreUnreachableError,
)
from tunecache.store import urls
from tunecache.store.changes import CHANGE_SEQUENCE
from tunecache.store.engine import check_timeout, is_read, track
from tunecache.store.models import Base

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "WRITERS_LOCK",
    "errors",
    "make_engine",
    "message",
    "message_for_privileges",
    "missing_privileges",
    "write_denied",
]

#: seconds a connection attempt waits for the server before the store is unreachable
DEFAULT_CONNECT_TIMEOUT = 10
#: the advisory lock every writer (and every migration) of a schema holds for its transaction
WRITERS_LOCK = (
    "SELECT pg_advisory_xact_lock("
    "hashtextextended(coalesce(current_schema(), '') || '/tunecache writers', 0))"
)
_READ = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
# What a role needs on every table to write the store.
_WRITE_PRIVILEGES = ("INSERT", "UPDATE", "DELETE")
# SQLSTATEs: a lock wait past lock_timeout, a privilege missing, a password refused; class 08
# is a connection failure, 57P0x the server shutting down.
_LOCK_NOT_AVAILABLE = "55P03"
_INSUFFICIENT_PRIVILEGE = "42501"
_LOGIN_REFUSED = ("28000", "28P01")
_GONE = ("08", "57P01", "57P02", "57P03")
# Engines whose role has been seen to hold every write privilege.
_may_write: weakref.WeakSet[Engine] = weakref.WeakSet()


def make_engine(url: str, *, busy_timeout: float) -> Engine:
    """An engine for the fleet store at `url` (checked with `urls.check`), set up as every
    tunecache store on PostgreSQL must be; `busy_timeout` bounds the wait for the writers'
    lock, as it bounds SQLite's.

    One function on purpose, as `tunecache.store.engine.make_engine` is: the listeners are
    closures over this engine's URL and deadline, and are read together."""
    url = urls.check(url)
    busy_timeout = check_timeout(busy_timeout)
    where = urls.mask(url)
    try:
        parsed = make_url(url)
    except exc.ArgumentError:
        raise BadArgumentError(f"store URL {where} is malformed") from None
    connect_args: dict[str, Any] = {"application_name": "tunecache"}
    if "connect_timeout" not in parsed.query:
        connect_args["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT
    try:
        # hide_parameters: a statement's values stay out of SQLAlchemy's own error text.
        engine = create_engine(
            parsed, pool_pre_ping=True, connect_args=connect_args, hide_parameters=True
        )
    except ImportError:
        raise StoreError(
            f"fleet store {where}: PostgreSQL needs psycopg 3 (pip install 'tunecache[postgres]')"
        ) from None
    # lock_timeout 0 would mean no deadline at all: "do not wait" is the shortest one there is.
    lock_ms = max(1, int(busy_timeout * 1000))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        record.info["pid"] = os.getpid()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        # A connection made in another process (a fork) is never used: its socket is shared.
        if record.info.get("pid") != os.getpid():
            record.dbapi_connection = proxy.dbapi_connection = None
            raise exc.DisconnectionError("connection made in another process")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if is_read(conn):
            conn.exec_driver_sql(_READ)
            return
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {lock_ms}")
        conn.exec_driver_sql(WRITERS_LOCK)
        if engine not in _may_write:
            denied, complete = write_denied(conn, where)
            if denied is not None:
                raise ReadOnlyStoreError(denied)
            if complete:
                _may_write.add(engine)

    track(engine)
    return engine


def missing_privileges(conn: Connection) -> tuple[list[tuple[str, str]], bool]:
    """The (table or sequence, privilege) pairs the connection's role lacks to write the
    store's tables that exist (INSERT, UPDATE, DELETE) and to take numbers from the sequences
    of their schema (USAGE: the rows' ids, the change numbers), and whether every table and
    the change numbers' sequence exist (a store not yet created has none)."""
    names = sorted(Base.metadata.tables)
    found = conn.exec_driver_sql(
        "SELECT t, p, has_table_privilege(t, p) FROM unnest(%(tables)s::text[]) AS t, "
        "unnest(%(privileges)s::text[]) AS p WHERE to_regclass(t) IS NOT NULL",
        {"tables": names, "privileges": list(_WRITE_PRIVILEGES)},
    ).all()
    sequences = conn.exec_driver_sql(
        "SELECT c.relname, 'USAGE', has_sequence_privilege(c.oid, 'USAGE') FROM pg_class c "
        "WHERE c.relkind = 'S' AND c.relnamespace = "
        "(SELECT relnamespace FROM pg_class WHERE oid = to_regclass('entries'))"
    ).all()
    present = {str(t) for t, _, _ in [*found, *sequences]}
    missing = [(str(t), str(p)) for t, p, granted in [*found, *sequences] if not granted]
    return missing, present >= {*names, CHANGE_SEQUENCE}


def message_for_privileges(conn: Connection, where: str, missing: list[tuple[str, str]]) -> str:
    """One line saying which privileges the role lacks, on how many tables and sequences, and
    what it can still do."""
    role = conn.exec_driver_sql("SELECT current_user").scalar()
    privileges = [p for p in (*_WRITE_PRIVILEGES, "USAGE") if any(m == p for _, m in missing)]
    tables = sorted({t for t, _ in missing})
    shown = ", ".join(tables[:3]) + (f" and {len(tables) - 3} more" if len(tables) > 3 else "")
    return (
        f"fleet store {where}: role {role!r} lacks the {' and '.join(privileges)} privilege on "
        f"{shown}: it can read (pull), not write; nothing was written"
    )


def write_denied(conn: Connection, where: str) -> tuple[str | None, bool]:
    """Why the connection's role cannot write the store at `where` (the one line of
    `message_for_privileges`, None where it can), and whether every table and the change
    numbers' sequence exist (as `missing_privileges` says)."""
    missing, complete = missing_privileges(conn)
    return (message_for_privileges(conn, where, missing) if missing else None), complete


def message(error: BaseException, url: str) -> str:
    """The first line of a driver error's own message, scrubbed of `url`'s secrets."""
    orig = getattr(error, "orig", None) or error
    lines = [line.strip() for line in str(orig).strip().splitlines() if line.strip()]
    return urls.scrub(lines[0] if lines else type(orig).__name__, url)


def _is_driver_error(error: BaseException) -> bool:
    """Whether `error` is psycopg's own (raised by a statement run on the driver's cursor,
    `tunecache.store.prepared`), or SQLAlchemy's wrapping of one."""
    return isinstance(error, exc.DBAPIError) or type(error).__module__.startswith("psycopg")


def _translated(error: BaseException, url: str, timeout: float) -> StoreError:
    where = urls.mask(url)
    orig = error.orig if isinstance(error, exc.DBAPIError) else error
    state = str(getattr(orig, "sqlstate", None) or "")
    lost = isinstance(error, exc.DBAPIError) and error.connection_invalidated
    operational = isinstance(error, exc.OperationalError) or (
        type(orig).__name__ == "OperationalError"
    )
    text = message(error, url)
    if state == _LOCK_NOT_AVAILABLE:
        return StoreBusyError(
            f"fleet store {where} is locked by another writer (waited up to {timeout:g} s)"
        )
    if state == _INSUFFICIENT_PRIVILEGE:
        return ReadOnlyStoreError(f"fleet store {where}: {text}; nothing was written")
    if state in _LOGIN_REFUSED:
        return StoreError(f"fleet store {where} refused the login: {text}")
    if lost or (state and state.startswith(_GONE)) or (operational and not state):
        return StoreUnreachableError(f"fleet store {where} is unreachable: {text}")
    return StoreError(f"fleet store {where}: {text}")


@contextlib.contextmanager
def errors(url: str, timeout: float) -> Iterator[None]:
    """Turn a driver error into one line: StoreBusyError (the writers' lock waited for past
    `timeout`), ReadOnlyStoreError (a privilege missing), StoreUnreachableError (no server, or
    the connection lost) or StoreError, each naming the store by its masked URL.

    The driver's exception is not chained: its text is the scrubbed first line shown, and the
    chain would carry the rest unscrubbed into any traceback a host program logs."""
    try:
        yield
    except Exception as error:
        if not _is_driver_error(error):
            raise
        raise _translated(error, url, timeout) from None
