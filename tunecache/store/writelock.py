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
import weakref
from pathlib import Path

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "WriteQueue",
    "file_identity",
    "held_locks",
    "is_busy",
    "thread_locks",
]

#: seconds a writer waits for the lock before StoreBusyError
DEFAULT_BUSY_TIMEOUT = 30.0

#: descriptors of the write locks this process holds now, with the (device, inode) of the lock
#: file each has open (see WriteQueue.release)
held_locks: dict[int, tuple[int, int]] = {}
# Every queue, so that a release forgets its descriptor in the queue that took it too.
_queues: weakref.WeakSet[WriteQueue] = weakref.WeakSet()
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


def file_identity(path: Path) -> tuple[int, int] | None:
    """The (device, inode) of the file at `path`, or None where there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


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
        #: the descriptors this queue took and has not let go of
        self.held: set[int] = set()
        _queues.add(self)

    def acquire(self) -> int:
        """Take the lock; returns the descriptor that holds it, or -1 where there is no lock
        file to take (then SQLite's own lock, which every writer takes anyway, orders them)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return -1
        # Registered before the wait: a child forked meanwhile must close its copy too.
        found = os.fstat(fd)
        held_locks[fd] = (found.st_dev, found.st_ino)
        thread_locks.setdefault(threading.get_ident(), set()).add(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not self._wait(fd):
                raise sqlite3.OperationalError(
                    "database is locked (tunecache writers queued past the deadline)"
                ) from None
        # Only a lock taken is this queue's to let go of when its engine closes.
        self.held.add(fd)
        return fd

    def _wait(self, fd: int) -> bool:
        """Wait for the lock on `fd` up to the deadline, in a helper thread blocked in flock.

        A wait that ends without the lock (the deadline, or Ctrl-C) hands the descriptor to
        the helper, which alone closes it once flock returns: closed meanwhile by anyone else,
        its number could be given to the next lock taken, which the helper's release would
        then close under its holder.
        """
        got = threading.Event()
        gave_up = [False]
        guard = threading.Lock()

        def block() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                return
            with guard:
                if gave_up[0]:
                    self.release(fd)
                else:
                    got.set()

        helper = threading.Thread(target=block, name="tunecache-write-queue", daemon=True)
        won = False
        try:
            helper.start()
            won = got.wait(self.timeout)
        finally:
            if not won:
                with guard:
                    won = got.is_set()
                    if not won and helper.ident is not None:
                        gave_up[0] = True
                        self._disown(fd)
        return won

    def _disown(self, fd: int) -> None:
        # Forgotten by this thread and this queue, still registered as held (so that a child
        # forked meanwhile closes its copy, and the helper's release closes it).
        for fds in thread_locks.values():
            fds.discard(fd)
        self.held.discard(fd)

    @staticmethod
    def release(fd: int) -> None:
        """Drop the lock held by `fd`.

        The descriptor is closed first, in one C call that Ctrl-C cannot split, and only then
        forgotten: an interrupt that lands in between leaves the number of a closed descriptor
        registered, never a lock held that nothing knows of (forgetting first did, 2 runs in
        1,500 of the interrupt stress under load). A number released again is closed only while
        it is still the same lock file; one the process has since given to another file is only
        forgotten.
        """
        if fd < 0 or fd not in held_locks:
            return
        try:
            found = os.fstat(fd)
        except OSError:
            found = None
        if found is not None and (found.st_dev, found.st_ino) == held_locks.get(fd):
            os.close(fd)
        held_locks.pop(fd, None)
        for fds in thread_locks.values():
            fds.discard(fd)
        for queue in list(_queues):
            queue.held.discard(fd)
