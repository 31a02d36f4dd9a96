"""Moving a damaged cache database aside, with its -wal and -shm, so a fresh cache takes its place.

A damaged cache must never crash-loop the programs that use it (a truncated Triton cache file
did, after a reboot cut a write short). At tunecache's own location, a file that SQLite finds
corrupt, or that is not a sound tunecache cache, is moved into a `quarantine/` folder beside it,
never deleted (a person may want it back), and the open goes on with a fresh cache.

- The three files move together. A -wal left behind would be replayed into whatever database
  takes the name next, mixing another file's pages into it without SQLite noticing.
- It happens under a lock (`<database>.quarantine-lock`, flock). Every opener looks at the
  file holding the lock shared; one that finds damage takes it exclusive and looks again before
  it moves anything, so of several processes that find the same damage exactly one moves it,
  and none moves the fresh cache another has begun in its place.
- A database the user named explicitly (`path=`) is never moved: it may be anything, even a
  document opened by mistake. Opening it raises StoreError and leaves it as it was.
- A zero-byte file is not damaged: SQLite creates the file before it writes the first page,
  so it is also what a database being created by another process looks like.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sqlite3
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from tunecache._version import __version__
from tunecache.errors import SchemaTooNewError, StoreBusyError, StoreError, TunecacheWarning
from tunecache.paths import sqlite_uri
from tunecache.store import migrate
from tunecache.store.engine import busy_errors

__all__ = ["QUARANTINE_DIR", "SIDE_FILES", "check", "lock_path", "move_aside", "problem"]

#: the folder, beside the database, that damaged databases are moved into
QUARANTINE_DIR = "quarantine"
#: the files that belong to a database, by suffix; they are moved together
SIDE_FILES = ("", "-wal", "-shm")

_CORRUPT_CODES = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def lock_path(db: Path) -> Path:
    """The lock file that serialises moving the database at `db` aside."""
    return db.with_name(db.name + ".quarantine-lock")


def _is_corrupt(error: sqlite3.Error) -> bool:
    name = str(getattr(error, "sqlite_errorname", "") or "")
    text = str(error).lower()
    return name.startswith(_CORRUPT_CODES) or "malformed" in text or "not a database" in text


def problem(db: Path, busy_timeout: float, *, schema: bool = True) -> str | None:
    """Why the file at `db` cannot serve as a cache database, or None if it is sound or new.

    Looks through a read-only connection and writes nothing: SQLite's own errors, then
    `PRAGMA quick_check`, then (with `schema`) whether it is a sound tunecache cache. A schema
    newer than this tunecache is not a problem: such a cache is read, never written. A lock
    held too long raises StoreBusyError, and a file SQLite cannot open raises StoreError:
    neither is damage.
    """
    if not db.is_file() or db.stat().st_size == 0:
        return None
    uri = sqlite_uri(db, mode="ro")
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout)
        try:
            state = migrate.read_state(conn.execute)
            # quick_check reads every page but skips matching indexes to tables: it finds torn
            # and scribbled pages in milliseconds for a cache of thousands of entries.
            verdict = conn.execute("PRAGMA quick_check(1)").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as error:
        if _is_corrupt(error):
            return " ".join(str(error).split()) or type(error).__name__
        with busy_errors(db, busy_timeout):
            raise
        raise  # pragma: no cover - busy_errors always raises
    if verdict is None or verdict[0] != "ok":
        found = " ".join(str(verdict[0]).split()) if verdict else "no answer"
        return f"integrity check failed: {found}"
    if schema:
        try:
            migrate.check_writable_schema(state, db)
        except SchemaTooNewError:
            return None
        except StoreError as error:
            return str(error)
    return None


@contextlib.contextmanager
def _locked(db: Path, *, exclusive: bool, timeout: float) -> Iterator[None]:
    """Hold the quarantine lock of `db`, waiting at most `timeout` seconds for it."""
    path = lock_path(db)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError as error:
        raise StoreError(f"cannot open lock file {path}: {error.strerror}") from error
    try:
        operation = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, operation | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreBusyError(
                        f"cache database {db} is being moved aside by another process "
                        f"(waited up to {timeout:g} s for {path})"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def move_aside(db: Path, reason: str) -> Path:
    """Move the database at `db` and its -wal and -shm into a new quarantine folder.

    The caller holds the exclusive lock. The folder also gets a note saying why and when. The
    database moves first: from then on no opener can pair the -wal with a new database, since
    SQLite drops a -wal it finds beside an empty one.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    dest = db.parent / QUARANTINE_DIR / f"{db.name}.{stamp}.{os.getpid()}"
    dest.mkdir(parents=True)
    (dest / "REASON.txt").write_text(
        f"{reason}\n\nmoved aside: {stamp}\nfrom: {db}\nhost: {socket.gethostname()}\n"
        f"pid: {os.getpid()}\ntunecache: {__version__}\nsqlite: {sqlite3.sqlite_version}\n",
        encoding="utf-8",
        errors="surrogateescape",  # a path that is not UTF-8 is written as its own bytes
    )
    for suffix in SIDE_FILES:
        source = db.with_name(db.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            # A rename within one folder: atomic, and it keeps open descriptors valid, so a
            # process still using the old file goes on with it undisturbed.
            os.replace(source, dest / source.name)
    return dest


def check(db: Path, busy_timeout: float, *, may_move: bool) -> Path | None:
    """Make sure the file at `db` can serve as a cache database, or move it out of the way.

    With `may_move` (tunecache's own location), a damaged database is moved aside with a
    TunecacheWarning and the quarantine folder is returned; the caller then creates a fresh
    cache. Without it, a file SQLite finds corrupt raises StoreError and is left as it was.
    """
    if not may_move:
        reason = problem(db, busy_timeout, schema=False)
        if reason is not None:
            raise StoreError(
                f"cache database {db} is damaged ({reason}); it was left as it is: move it "
                "aside or delete it to start a fresh cache there"
            )
        return None
    with _locked(db, exclusive=False, timeout=busy_timeout):
        reason = problem(db, busy_timeout)
    if reason is None:
        return None
    with _locked(db, exclusive=True, timeout=busy_timeout):
        # Another process may have moved it aside and begun a fresh cache meanwhile.
        reason = problem(db, busy_timeout)
        if reason is None:
            return None
        dest = move_aside(db, reason)
    warnings.warn(
        f"cache database {db} was damaged ({reason}); it was moved aside with its -wal and "
        f"-shm to {dest}, and a fresh cache takes its place",
        TunecacheWarning,
        stacklevel=3,
    )
    return dest
