"""The write queue: the flock every tunecache writer takes before SQLite's write lock.

SQLAlchemy-free, so that both writers share it: the engines' (`tunecache.store.engine`, whose
`begin` listener takes it before BEGIN IMMEDIATE) and the stdlib-sqlite3 one
(`tunecache.store.direct`). Either way, one process's writers and another's queue in one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
from pathlib import Path

__all__ = ["DEFAULT_BUSY_TIMEOUT", "WriteQueue", "held_locks", "is_busy", "thread_locks"]

#: seconds a writer waits for the lock before StoreBusyError
DEFAULT_BUSY_TIMEOUT = 30.0

#: descriptors of the write locks this process holds now
held_locks: set[int] = set()
#: the write-queue descriptors each thread holds or waits on: an interrupt can land between
#: taking the lock and recording which connection took it, and must still let go of it
thread_locks: dict[int, set[int]] = {}


def is_busy(error: BaseException) -> bool:
    """Whether a driver error means another connection holds the lock."""
    orig = getattr(error, "orig", error)
    if isinstance(orig, sqlite3.OperationalError):
        name = getattr(orig, "sqlite_errorname", "") or ""
        text = str(orig).lower()
        return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or (
            "database is locked" in text or "database is busy" in text
        )
    return False


def _forget_parent_locks() -> None:
    # A write lock the parent held while forking would stay held as long as the child keeps its
    # copy of the descriptor; closing the copy leaves the parent's lock to the parent.
    for fd in list(held_locks):
        with contextlib.suppress(OSError):
            os.close(fd)
    held_locks.clear()
    thread_locks.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_locks)


class WriteQueue:
    """The order in which tunecache's writers take the database's write lock.

    Writers take an exclusive flock on `<database>.write-lock` before BEGIN IMMEDIATE and drop
    it after COMMIT or ROLLBACK. Waiting for SQLite's own lock goes through its busy handler,
    which sleeps in steps growing to 100 ms: under many writers a waiter sleeps through the
    moments the lock is free, and with 32 writers some waited over 10 s for a 5 ms commit
    (tools/bench_reliability.py). A writer blocked in flock is woken by the kernel the moment
    the lock is released, and burns no CPU meanwhile (polling did, 32 writers' worth). The flock
    only orders tunecache's writers: correctness still rests on SQLite's lock, which every
    writer takes after it. It also keeps a commit's automatic checkpoint clear of other
    tunecache writers' commits.

    flock has no timeout, so a contended wait blocks in a helper thread while the writer waits
    on an event with the engine's deadline; past it, "database is locked", and the helper lets
    go of the lock the moment it gets it.
    """

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path.with_name(path.name + ".write-lock")
        self.timeout = timeout

    def acquire(self) -> int:
        """Take the lock; returns the descriptor that holds it, or -1 where there is no lock
        file to take (then SQLite's own lock, which every writer takes anyway, orders them)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return -1
        # Registered before the wait: a child forked meanwhile must close its copy too.
        held_locks.add(fd)
        thread_locks.setdefault(threading.get_ident(), set()).add(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not self._wait(fd):
                raise sqlite3.OperationalError(
                    "database is locked (tunecache writers queued past the deadline)"
                ) from None
        return fd

    def _wait(self, fd: int) -> bool:
        got = threading.Event()
        gave_up = False
        guard = threading.Lock()

        def block() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                return
            with guard:
                if gave_up:
                    self.release(fd)
                else:
                    got.set()

        threading.Thread(target=block, name="tunecache-write-queue", daemon=True).start()
        if got.wait(self.timeout):
            return True
        with guard:
            if got.is_set():
                return True
            gave_up = True
        return False

    @staticmethod
    def release(fd: int) -> None:
        """Drop the lock held by `fd`."""
        if fd >= 0 and fd in held_locks:
            held_locks.discard(fd)
            for fds in thread_locks.values():
                fds.discard(fd)
            os.close(fd)
