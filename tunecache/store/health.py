"""Whether this process can keep a cache where it was asked to, and how.

Three facts SQLite does not check for us:

- Some SQLite versions have a known defect in WAL mode (`WAL_DEFECTS`, from
  `tunecache.store.wal`). tunecache's own connections are immune to it by construction
  (docs/reliability.md), so it is not warned about: `doctor` and `where` name it in one line.
- WAL needs every process that uses a database on one host: its index lives in shared memory
  (the `-shm` file, mapped by each process) and locks on a network filesystem are unreliable.
  A cache on a network filesystem is refused unless `TUNECACHE_ALLOW_NETWORK_FS=1` says that only
  one host ever uses it (see docs/reliability.md).
- A cache this process may not write (a read-only folder, file or mount) is opened read-only:
  reads work, writes raise ReadOnlyStoreError naming the reason.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from tunecache.errors import ReadOnlyStoreError, SchemaTooNewError, StoreError, TunecacheWarning
from tunecache.store.access import frozen, write_denied
from tunecache.store.filesystems import (
    ALLOW_NETWORK_FS_ENV,
    NETWORK_FILESYSTEMS,
    check_filesystem,
    filesystem_of,
)
from tunecache.store.wal import WAL_DEFECTS, WalDefect, wal_defects

# The read commands check the filesystem and write access without SQLAlchemy; only opening a
# read-only engine (`open_readonly`) needs it, and imports it there.
if TYPE_CHECKING:
    from sqlalchemy import Engine

    from tunecache.store import migrate

__all__ = [
    "ALLOW_NETWORK_FS_ENV",
    "NETWORK_FILESYSTEMS",
    "WAL_DEFECTS",
    "WalDefect",
    "check_filesystem",
    "filesystem_of",
    "frozen",
    "open_readonly",
    "wal_defects",
    "write_denied",
]

# --- read-only access (store.access.write_denied says when) ---------------------------------------


def _sqlite_code(error: BaseException) -> str:
    orig = getattr(error, "orig", error)
    return str(getattr(orig, "sqlite_errorname", "") or "")


def _detail(error: StoreError) -> str:
    cause = error.__cause__
    return str(getattr(cause, "orig", cause) or error)


def open_readonly(db: Path, busy_timeout: float, denied: str) -> tuple[Engine, str]:
    """A read-only engine for a cache this process cannot write, and why it is read-only.

    Raises ReadOnlyStoreError where there is nothing to read or the schema needs an upgrade
    this process cannot make, and StoreError where SQLite cannot read the file.
    """
    from tunecache.store import migrate
    from tunecache.store.engine import make_engine

    if not db.is_file() or db.stat().st_size == 0:
        raise ReadOnlyStoreError(f"cannot create cache database {db}: {denied}")
    wal = db.with_name(db.name + "-wal")
    # Immutable ignores the -wal file, so it is used only where there is none to ignore.
    immutable = frozen(db) and not (wal.exists() and wal.stat().st_size > 0)
    engine = make_engine(db, busy_timeout=busy_timeout, readonly=True, immutable=immutable)
    try:
        state = _readonly_state(engine, db, busy_timeout, denied)
        try:
            migrate.check_writable_schema(state, db)
        except SchemaTooNewError as error:
            warnings.warn(str(error), TunecacheWarning, stacklevel=3)
            return engine, f"{error}; {denied}"
        if state.revision != migrate.HEAD:
            raise ReadOnlyStoreError(
                f"cache database {db} is at schema revision {state.revision!r} and needs an "
                f"upgrade to {migrate.HEAD!r} before it can be read, but {denied}"
            )
    except BaseException:
        engine.dispose()
        raise
    return engine, denied


def _readonly_state(
    engine: Engine, db: Path, busy_timeout: float, denied: str
) -> migrate.FileState:
    from tunecache.store import migrate
    from tunecache.store.engine import busy_errors, read_connection

    try:
        with busy_errors(db, busy_timeout), read_connection(engine) as conn:
            return migrate.read_state(conn.exec_driver_sql)
    except StoreError as error:
        code = _sqlite_code(error.__cause__ or error)
        if code.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")):
            raise StoreError(
                f"cannot read cache database {db}: {denied}, and SQLite must create "
                f"{db.name}-shm beside a WAL database to read it safely; make the folder "
                "writable, or take write permission from everyone on the folder and the file "
                "to freeze the cache (a frozen cache is read as immutable)"
            ) from error
        if code.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
            raise StoreError(
                f"cache database {db} is damaged ({_detail(error)}) and cannot be moved "
                f"aside: {denied}"
            ) from error
        raise
