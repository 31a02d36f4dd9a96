"""Moving a damaged cache database aside, with its -wal and -shm, and what it held salvaged.

A damaged cache must never crash-loop the programs that use it (a truncated Triton cache file
did, after a reboot cut a write short). At tunecache's own location, a file that SQLite finds
corrupt, or that is not a sound tunecache cache, is moved into a `quarantine/` folder beside it,
never deleted (a person may want it back), and the open goes on with what could be salvaged of
it (store/salvage.py: every row that can still be read), or with a fresh cache where nothing
could.

- No writer commits while the files move: salvage, move and swap happen under the writers'
  lock (engine.write_lock), and a writer that still has the moved file open finds, when it next
  begins a transaction, that its file is no longer the one at the path, and reopens the live
  cache (StoreMovedError, answered in cache.py): nothing is acknowledged into a file that is
  no longer the cache. SQLite itself does not checkpoint or delete the -wal of a file that was
  moved while open, so closing such a connection leaves the live cache's files alone.
- The replacement is built whole in a file of its own (`<database>.salvage`) and renamed into
  place only once finished: a crash on the way leaves the damaged file where it was or in the
  quarantine folder, and either no cache (a fresh one starts) or the whole replacement.

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
from tunecache.store import migrate, salvage
from tunecache.store.engine import busy_errors, write_lock

__all__ = [
    "QUARANTINE_DIR",
    "SIDE_FILES",
    "check",
    "last_salvage",
    "lock_path",
    "move_aside",
    "problem",
    "replacement_path",
]

#: the folder, beside the database, that damaged databases are moved into
QUARANTINE_DIR = "quarantine"
#: the files that belong to a database, by suffix; they are moved together
SIDE_FILES = ("", "-wal", "-shm")


def lock_path(db: Path) -> Path:
    """The lock file that serialises moving the database at `db` aside."""
    return db.with_name(db.name + ".quarantine-lock")


def replacement_path(db: Path) -> Path:
    """Where the salvaged replacement of the database at `db` is built before it is swapped in."""
    return db.with_name(db.name + ".salvage")


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
        if salvage.is_corrupt(error):
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


def move_aside(
    db: Path, reason: str, *, replacement: Path | None = None, kept: salvage.Salvage | None = None
) -> Path:
    """Move the database at `db` and its -wal and -shm into a new quarantine folder, and rename
    `replacement` (a finished cache database, or None for none) into its place.

    The caller holds the exclusive quarantine lock and the writers' lock (engine.write_lock),
    so no tunecache writer commits while the files move. The folder also gets a note saying why
    and when, and what the salvage `kept`. The database moves first: from then on no opener can
    pair the -wal with a new database, since SQLite drops a -wal it finds beside an empty one.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    dest = db.parent / QUARANTINE_DIR / f"{db.name}.{stamp}.{os.getpid()}"
    dest.mkdir(parents=True)
    outcome = "nothing was salvaged" if kept is None else f"salvaged: {kept.summary()}"
    (dest / "REASON.txt").write_text(
        f"{reason}\n\n{outcome}\nmoved aside: {stamp}\nfrom: {db}\n"
        f"host: {socket.gethostname()}\npid: {os.getpid()}\ntunecache: {__version__}\n"
        f"sqlite: {sqlite3.sqlite_version}\n",
        encoding="utf-8",
        errors="surrogateescape",  # a path that is not UTF-8 is written as its own bytes
    )
    if kept is not None:
        (dest / salvage.SALVAGE_NOTE).write_text(kept.to_json(), encoding="utf-8")
    for suffix in SIDE_FILES:
        source = db.with_name(db.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            # A rename within one folder: atomic, and it keeps open descriptors valid, so a
            # process still using the old file goes on with it until its next transaction
            # sees that the file moved (engine.py).
            os.replace(source, dest / source.name)
    if replacement is not None:
        os.replace(replacement, db)
    _sync_folder(db.parent)
    return dest


def _sync_folder(folder: Path) -> None:
    """The renames in `folder` reach the disk (where the platform can sync a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def last_salvage(db: Path) -> tuple[Path, salvage.Salvage] | None:
    """The most recent salvage of the database at `db`: its quarantine folder and what it kept
    and lost, or None where none left a note."""
    folder = db.parent / QUARANTINE_DIR
    try:
        # Named <database>.<UTC time>.<pid>: the time sorts as text.
        moved = sorted(folder.glob(f"{db.name}.*"), key=lambda p: p.name[len(db.name) :])
    except OSError:
        return None
    for dest in reversed(moved):
        try:
            return dest, salvage.Salvage.from_json(
                (dest / salvage.SALVAGE_NOTE).read_text(encoding="utf-8")
            )
        except (OSError, ValueError, TypeError):
            continue
    return None


def check(db: Path, busy_timeout: float, *, may_move: bool) -> Path | None:
    """Make sure the file at `db` can serve as a cache database, or move it out of the way.

    With `may_move` (tunecache's own location), a damaged database is salvaged into a new one,
    moved aside and replaced by it (or by nothing, where nothing could be salvaged: the caller
    then creates a fresh cache), with a TunecacheWarning that says how many entries were kept
    and lost; the quarantine folder is returned. Without it, a file SQLite finds corrupt raises
    StoreError and is left as it was.
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
        with write_lock(db, busy_timeout):
            target = replacement_path(db)
            kept: salvage.Salvage | None = None
            try:
                kept = salvage.salvage(db, target, busy_timeout)
                outcome = f"{kept.summary()} in the cache rebuilt from what could be read"
            except salvage.CannotSalvage as why:
                outcome = f"nothing could be salvaged ({why}): a fresh cache starts"
            dest = move_aside(db, reason, replacement=target if kept else None, kept=kept)
    warnings.warn(
        f"cache database {db} was damaged ({reason}); it was moved aside with its -wal and "
        f"-shm to {dest}; {outcome}",
        TunecacheWarning,
        stacklevel=5,  # check, the cache's connect (twice), Cache.open, its caller
    )
    return dest
