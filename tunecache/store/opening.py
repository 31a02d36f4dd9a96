"""Opening a cache's database: every check a SQLite file gets before and as it is opened, and
the fleet store's schema brought to head; what `tunecache.cache.Cache.open` builds on.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from sqlalchemy import Engine

from tunecache.errors import SchemaTooNewError, StoreMovedError, TunecacheWarning
from tunecache.store import health, migrate, postgres, quarantine, queries, schema, urls
from tunecache.store.engine import REOPENS, busy_errors, close_engine, make_engine, transaction

__all__ = ["connect", "connect_fleet", "fleet_summary"]


def connect(
    db: Path, busy_timeout: float, *, may_move: bool
) -> tuple[Engine, migrate.Outcome | None, str | None, tuple[schema.Drift, ...]]:
    """An engine on the cache database at `db`, what opening did to its schema, why it is
    read-only (None when it is not), and the indexes and views its first write must make again
    (`Cache.mend_schema`): every check of `Cache.open`, whose folder exists; a file swapped in
    meanwhile is opened as it is then."""
    for attempt in range(REOPENS + 1):
        try:
            return _connect_once(db, busy_timeout, may_move=may_move)
        except StoreMovedError:
            # The file was swapped while this open set it up: open the one there now.
            if attempt == REOPENS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _connect_once(
    db: Path, busy_timeout: float, *, may_move: bool
) -> tuple[Engine, migrate.Outcome | None, str | None, tuple[schema.Drift, ...]]:
    """`connect`, once: StoreMovedError where the file was swapped while it was set up."""
    health.check_filesystem(db)
    denied = health.write_denied(db)
    if denied is not None:
        engine, reason = health.open_readonly(db, busy_timeout, denied)
        return engine, None, reason, ()
    quarantine.check(db, busy_timeout, may_move=may_move)
    # Look before writing: even switching the journal mode writes to the file, and a file
    # this tunecache must not change is refused (or read) without being touched.
    state = migrate.inspect_file(db, busy_timeout)
    try:
        migrate.check_writable_schema(state, db)
    except SchemaTooNewError as error:
        warnings.warn(str(error), TunecacheWarning, stacklevel=4)
        return make_engine(db, busy_timeout=busy_timeout, readonly=True), None, str(error), ()
    engine = make_engine(db, busy_timeout=busy_timeout)
    try:
        with busy_errors(db, busy_timeout):
            outcome = migrate.ensure_schema(engine, db)
    except BaseException:
        engine.dispose()
        raise
    drift = tuple(d for d in schema.drift(state.objects, state.revision) if not d.holds_data)
    return engine, outcome, None, drift


def connect_fleet(
    url: str, busy_timeout: float
) -> tuple[Engine, migrate.Outcome | None, str | None]:
    """An engine on the fleet store at `url` (checked), what opening did to its schema, and why
    it is read-only (None when it is not): the schema is created or upgraded under the store's
    writers' lock, and one written by a newer tunecache is opened read-only, with a warning."""
    engine = postgres.make_engine(url, busy_timeout=busy_timeout)
    try:
        with postgres.errors(url, busy_timeout):
            return engine, migrate.ensure_fleet_schema(engine, urls.mask(url)), None
    except SchemaTooNewError as error:
        warnings.warn(str(error), TunecacheWarning, stacklevel=4)
        return engine, None, str(error)
    except BaseException:
        close_engine(engine)
        raise


def fleet_summary(
    url: str, fingerprint: str, busy_timeout: float
) -> tuple[str | None, int, str | None]:
    """What `tunecache where` says of the fleet store at `url`, read without creating or
    changing anything: its revision (None where it has no schema yet), how many entries the
    device `fingerprint` has there, and why this role cannot write it (None where it can)."""
    engine = postgres.make_engine(url, busy_timeout=busy_timeout)
    try:
        with postgres.errors(url, busy_timeout), transaction(engine, read=True) as conn:
            revision = migrate.current_revision(conn)
            entries = 0
            if revision == migrate.HEAD:
                device = queries.device_id(conn, fingerprint)
                entries = 0 if device is None else queries.count_entries(conn, device)
            denied, _ = postgres.write_denied(conn, urls.mask(url))
    finally:
        close_engine(engine)
    return revision, entries, denied
