"""Who may write a cache file, and taking one from every other user: checks shared by the store,
the resolver and maintenance.

No SQLAlchemy here: the resolver imports this on a runtime's hot path.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Iterable
from pathlib import Path

from tunecache.paths import sqlite_uri

__all__ = ["claim", "frozen", "read_only_mount", "release", "write_denied"]


def read_only_mount(path: Path) -> bool:
    """Whether `path` is on a filesystem mounted read-only."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def frozen(db: Path) -> bool:
    """Whether nobody is meant to write the database at `db`: a read-only mount, or write
    permission taken from everyone on both the file and its folder.

    Only a frozen database is read as SQLite's `immutable`, which needs no -shm file: a reader
    that cannot create one has no other way in, and immutable is safe only if no one writes.
    """
    if read_only_mount(db.parent):
        return True
    try:
        modes = (db.stat().st_mode, db.parent.stat().st_mode)
    except OSError:
        return False
    anyone_writes = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    return not any(mode & anyone_writes for mode in modes)


def write_denied(db: Path) -> str | None:
    """Why this process cannot write the cache database at `db`, or None if it can.

    SQLite needs to write the folder too (the -wal and -shm files live beside the database).
    """
    folder = db.parent
    if read_only_mount(folder):
        return f"the folder {folder} is on a read-only filesystem"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable by this user (uid {os.geteuid()})"
    if db.exists() and not os.access(db, os.W_OK):
        return f"the file {db} is not writable by this user (uid {os.geteuid()})"
    return None


def claim(db: Path) -> sqlite3.Connection:
    """Lock a database against every other connection, without waiting, or raise
    sqlite3.OperationalError.

    Leaving WAL mode needs an exclusive lock, which SQLite grants only when no other
    connection, in any process, has the database open (each WAL connection holds a shared
    lock while open, reading or writing); the EXCLUSIVE transaction then keeps newcomers out
    while the folder goes. A writer is therefore either refused here or never started.
    """
    uri = sqlite_uri(db, mode="rw")
    conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
    try:
        mode = conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
        if str(mode).lower() != "delete":
            raise sqlite3.OperationalError("database is locked (still in WAL mode)")
        conn.execute("BEGIN EXCLUSIVE")
    except BaseException:
        conn.close()
        raise
    return conn


def release(claims: Iterable[sqlite3.Connection], *, restore: bool) -> None:
    """Let go of claimed databases; with `restore`, put each back in WAL mode first."""
    for conn in claims:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
            if restore:
                # Give the database back as tunecache keeps it.
                conn.execute("PRAGMA journal_mode = WAL")
        conn.close()
