"""One measurement at a time per device: the tuners of a device identity on one host take turns
to time things.

Claims keep two tuners from benching one key; this keeps two tuners from timing two keys at
once. Tuners beside each other on one machine share its cores, and a bench, a paired whole-model
trial or a profile timed while another tuner times its own is contended: slower, noisier (the
acceptance rule then runs to its most pairs), and doubted by the evidence rules
(`tunecache.tune.doubt`). So each bench, each trial and each profile holds an exclusive flock on
`<database>.measure-lock` beside the device's local cache file (for a fleet store too: the cores
are this host's), and tuners of one device measure one after another, as one tuner alone would,
while their waiting for claims and their writes go on (`MeasureLock.waited` sums how long this
process waited for another's turn). A process that dies holding the lock lets go of it with its
descriptor. A process forked while the lock is held (a model's worker pool started during a
trial) closes its inherited copy of the descriptor at once (`os.register_at_fork`): a flock
belongs to the descriptor's open file, which the child would otherwise keep, and with it the
lock, for as long as it runs. Where the folder cannot take the file, measurements go unlocked,
as before.
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

__all__ = ["MeasureLock"]

#: every lock of this process, for the fork hook
_LOCKS: weakref.WeakSet[MeasureLock] = weakref.WeakSet()


class MeasureLock:
    """The measurement lock of the device whose local cache file is `database`."""

    def __init__(self, database: Path, timer: Callable[[], float] = time.monotonic) -> None:
        self.path = database.with_name(database.name + ".measure-lock")
        #: the clock `waited` is measured on (a session's own, so its waits add up)
        self.timer = timer
        self._fd: int | None = None
        self._depth = 0
        #: seconds this process waited for another process's turn to end, in all
        self.waited = 0.0
        self._lock = threading.RLock()
        _LOCKS.add(self)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lock while the block runs, waiting for it first (re-entrant)."""
        with self._lock:
            if self._depth == 0:
                self._take()
            self._depth += 1
            try:
                yield
            finally:
                # Never below 0: a child forked inside the block starts again from 0.
                self._depth = max(0, self._depth - 1)
                if self._depth == 0:
                    self._drop()

    def _take(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return  # nowhere to keep it: measure unlocked
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                start = self.timer()  # another tuner's turn: wait for its end
                fcntl.flock(fd, fcntl.LOCK_EX)
                self.waited += self.timer() - start
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _drop(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor lets go of its flock

    def _forked(self) -> None:
        """In a forked child: let go of the parent's descriptor (never unlock it: the lock is
        the parent's) and of a thread lock another thread may have held at the fork."""
        fd, self._fd = self._fd, None
        self._depth = 0
        self._lock = threading.RLock()
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _after_fork() -> None:
    for lock in list(_LOCKS):
        lock._forked()


os.register_at_fork(after_in_child=_after_fork)
