"""An exclusive flock that one process of this host holds at a time (`HostLock`), polled with a
deadline or waited for in flock, and let go of by a forked child.

The tuner's measurement turn and its session lock are HostLocks (`tunecache.tune.measuring`), and
so is the gate that lets identical `tunecache tune` commands share one session
(`tunecache.cli.sharing`), which takes it before anything heavy is imported: this module imports
only the standard library's os, fcntl and threading.

A process that dies holding the lock lets go of it with its descriptor. A process forked while
the lock is held (a model's worker pool started during a trial) closes its inherited copy of the
descriptor at once (`os.register_at_fork`): a flock belongs to the descriptor's open file, which
the child would otherwise keep, and with it the lock, for as long as it runs. Where the folder
cannot take the file, the lock is held without one (nothing is waited for).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["POLL", "HostLock"]

#: seconds between two looks at a lock another process holds, where a wait has a deadline
POLL = 0.05

#: every lock of this process, for the fork hook
_LOCKS: weakref.WeakSet[HostLock] = weakref.WeakSet()


class HostLock:
    """An exclusive flock on the file `path`: one process of this host holds it at a time.

    `held()` holds it around a block (re-entrant), waiting as long as it takes; `acquire`
    waits at most a deadline, and `release` lets go of what `acquire` took. A process that
    dies holding it lets go with its descriptor, and a forked child closes its inherited copy.
    Where the folder cannot take the file, the lock is taken without one (nothing is waited
    for). With `removed`, the holder removes the file as it lets go (still holding it, and only
    while the name is still its file), and a lock taken on a file removed meanwhile is taken
    again on the one in its place (its device and inode say which; after the second try, a look
    every POLL seconds within the deadline): a lock whose file names a request or a model
    leaves no file behind.
    """

    def __init__(
        self, path: Path, timer: Callable[[], float] = time.monotonic, *, removed: bool = False
    ) -> None:
        self.path = path
        #: whether the file goes when the lock is let go of
        self.removed = removed
        #: the clock `waited` is measured on (a session's own, so its waits add up)
        self.timer = timer
        self._fd: int | None = None
        #: the descriptor a wait for the lock has open (None: no wait under way)
        self._waiting: int | None = None
        self._depth = 0
        #: seconds this process waited for another process's turn to end, in all
        self.waited = 0.0
        self._lock = threading.RLock()
        _LOCKS.add(self)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lock while the block runs, waiting for it first (re-entrant)."""
        with self._lock:
            self.acquire()
            try:
                yield
            finally:
                self.release()

    def acquire(
        self, timeout: float | None = None, *, sleep: Callable[[float], object] = time.sleep
    ) -> bool:
        """Take the lock, waiting at most `timeout` seconds of `timer` (None: as long as it
        takes) with a look every `POLL` seconds; whether it is held now. A lock this object
        holds already is held once more (`release` as often); another object on the same file,
        even in this process, waits for it as another process would."""
        with self._lock:
            if self._depth == 0 and not self._take(timeout, sleep):
                return False
            self._depth += 1
            return True

    def release(self) -> None:
        """Let go of one `acquire` (the lock itself once the last one is let go of)."""
        with self._lock:
            self._depth = max(0, self._depth - 1)
            if self._depth == 0:
                self._drop()

    def _take(
        self, timeout: float | None = None, sleep: Callable[[float], object] = time.sleep
    ) -> bool:
        start = self.timer()

        def left() -> float | None:
            return None if timeout is None else max(0.0, timeout - (self.timer() - start))

        retries = 0
        while True:
            if retries > 1:
                # The file taken twice over was gone again: look again after a while, within
                # the deadline (another process's turns, or a filesystem whose files never
                # look the same twice, cannot make this spin).
                now = left()
                if now == 0.0:
                    return False
                sleep(POLL if now is None else min(POLL, now))
            if not self._take_once(left(), sleep):
                return False
            fd = self._fd
            if fd is None or not self.removed:
                return True
            try:
                if _names(self.path, fd):
                    return True
            except BaseException:
                self._fd = None
                os.close(fd)
                raise
            # Taken on a file its last holder removed: let go of it, and take the new one.
            self._fd = None
            os.close(fd)
            retries += 1

    def _take_once(self, timeout: float | None, sleep: Callable[[float], object]) -> bool:
        fd = self._open()
        if fd is None:
            return True  # nowhere to keep it: held without one
        # Named while it waits too: a child forked meanwhile closes its copy (`_forked`).
        self._waiting = fd
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                start = self.timer()  # another process's turn: wait for its end
                try:
                    got = self._wait(fd, start, timeout, sleep)
                finally:
                    self.waited += self.timer() - start
                if not got:
                    self._waiting = None  # unnamed before it is closed: its number is reused
                    os.close(fd)
                    return False
            self._fd = fd  # named as held before it stops being named as waiting
            self._waiting = None
            return True
        except OSError:
            # flock itself failed (not "taken": that is BlockingIOError, above), as on an NFS
            # folder whose lock file opened read-only: held without one.
            self._waiting = None
            os.close(fd)
            return True
        except BaseException:
            if self._fd == fd:
                self._fd = None
            self._waiting = None
            os.close(fd)
            raise

    def _open(self) -> int | None:
        """A descriptor of the lock file, made if need be; None where there can be none."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        for _ in range(3):
            try:
                return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except PermissionError:
                # Another user's lock file (mode 0644): flock needs no more than reading it
                # (but on NFS, where it then fails, and the lock is held without one).
                try:
                    return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue  # its holder removed it meanwhile: make the new one
                except OSError:
                    return None
            except OSError:
                return None
        return None

    def _wait(
        self, fd: int, start: float, timeout: float | None, sleep: Callable[[float], object]
    ) -> bool:
        """Wait for the lock on `fd`: blocked in flock where there is no deadline, else a look
        every POLL seconds until `timeout` seconds of `timer` have passed."""
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return True
        while True:
            left = start + timeout - self.timer()
            if left <= 0:
                return False
            sleep(min(POLL, left))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            return True

    def _drop(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            if self.removed:
                # Still held: nobody else has this file, and whoever opens the name next makes
                # a new one (and whoever waits on this one takes it again on that). Only this
                # file: where something else removed it, the name is another holder's now.
                with contextlib.suppress(OSError):
                    if _names(self.path, fd):
                        os.unlink(self.path)
            os.close(fd)  # closing the descriptor lets go of its flock

    def _forked(self) -> None:
        """In a forked child: let go of the parent's descriptor (never unlock it: the lock is
        the parent's), the one a wait of another thread had open, and of a thread lock another
        thread may have held at the fork."""
        fds = {fd for fd in (self._fd, self._waiting) if fd is not None}
        self._fd = self._waiting = None
        self._depth = 0
        self._lock = threading.RLock()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _names(path: Path, fd: int) -> bool:
    """Whether `path` names the file open as `fd` now (not one made in place of a removed one)."""
    held = os.fstat(fd)
    try:
        named = os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def _after_fork() -> None:
    for lock in list(_LOCKS):
        lock._forked()


os.register_at_fork(after_in_child=_after_fork)
